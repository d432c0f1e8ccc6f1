// Prefill-sized products over row-major f32 or bf16 weights (the ISAs without the packed bf16
// path): the weight rows of a block are widened to f32 into panels of NR = 2 vectors of rows,
// k-major, one KC-long slice of k at a time (the block's panels stay in L2), and register tiles of
// 6 token rows x NR outputs broadcast x against a panel: 12 accumulators, two panel loads and six
// broadcasts per k, so the multiply-adds and not the loads set the pace (the layout of BLIS's
// micro-kernels). How the rows are split over the threads is the backend's (cpu/matmul.cpp).
#include <algorithm>

#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/simd.h"
#include "core/aligned.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

constexpr int NR = 2 * VW;     // outputs per panel (two vectors)
constexpr int MR = 6;          // token rows per register tile
// k per slice and weight rows per block: a block's slice is NB * KC floats, kept in L2. On AVX2
// long slices of few rows (256 KiB: the panel being read streams from L2) rather than short ones
// that stay in L1: every slice past the first reads and rewrites each output, and those passes
// cost more than the L2 reads (docs/performance.md, the AVX2 section of the twenty-second
// session). AVX-512 keeps the short slices (not measured there).
constexpr int64_t KC = VW == 8 ? 2048 : 256;
constexpr int64_t NB = VW == 8 ? 32 : 64;  // 2 panels on both ISAs

// out[p][k][i] = W[r0 + p NR + i][k0 + k] as f32 for k < kl, zero for rows at or past r1. Eight
// rows x eight k at a time through an 8 x 8 transpose where both are whole; element by element
// at the edges.
template <typename WT>
void pack_block(const WT* w, int64_t K, int64_t r0, int64_t r1, int64_t k0, int64_t kl, float* out) {
  const int64_t rows = r1 - r0, panels = (rows + NR - 1) / NR;
  const int64_t k8 = kl / 8 * 8;
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = out + p * kl * NR;
    for (int i0 = 0; i0 < NR; i0 += 8) {
      const int64_t base = p * NR + i0;  // first row of this group of 8, relative to r0
      if (base + 8 <= rows) {
        const WT* src[8];
        for (int i = 0; i < 8; ++i) src[i] = w + (r0 + base + i) * K + k0;
        for (int64_t k = 0; k < k8; k += 8) {
          __m256 v[8];
          for (int i = 0; i < 8; ++i) {
            if constexpr (sizeof(WT) == 2)
              v[i] = _mm256_castsi256_ps(
                  _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(src[i] + k))), 16));
            else
              v[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src[i]) + k);
          }
          // 8 x 8 transpose: t[j] holds element j of every row.
          __m256 t[8];
          transpose8(v, t);
          for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (k + j) * NR + i0, t[j]);
        }
        for (int64_t k = k8; k < kl; ++k)
          for (int i = 0; i < 8; ++i) dst[k * NR + i0 + i] = wscalar(src[i] + k);
      } else {
        for (int i = 0; i < 8; ++i) {
          const int64_t r = base + i;
          if (r < rows) {
            const WT* s = w + (r0 + r) * K + k0;
            for (int64_t k = 0; k < kl; ++k) dst[k * NR + i0 + i] = wscalar(s + k);
          } else {
            for (int64_t k = 0; k < kl; ++k) dst[k * NR + i0 + i] = 0.f;
          }
        }
      }
    }
  }
}

// y[m][0..nvalid) (+)= x[m][0..kl) . panel for R token rows (rows ldx apart); add: accumulate onto
// y (a later k slice), else overwrite.
template <int R>
inline void tile(const float* x, int64_t ldx, const float* panel, int64_t kl, float* y, int64_t ldy, bool add,
                 int nvalid) {
  vf a0[R], a1[R];
  for (int m = 0; m < R; ++m) a0[m] = a1[m] = vzero();
  for (int64_t k = 0; k < kl; ++k) {
    const vf b0 = vload(panel + k * NR), b1 = vload(panel + k * NR + VW);
    for (int m = 0; m < R; ++m) {
      const vf xv = vset1(x[m * ldx + k]);
      a0[m] = vfma(xv, b0, a0[m]);
      a1[m] = vfma(xv, b1, a1[m]);
    }
  }
  if (nvalid == NR) {
    for (int m = 0; m < R; ++m) {
      float* ym = y + m * ldy;
      if (add) {
        a0[m] = vadd(a0[m], vload(ym));
        a1[m] = vadd(a1[m], vload(ym + VW));
      }
      vstore(ym, a0[m]);
      vstore(ym + VW, a1[m]);
    }
    return;
  }
  alignas(64) float t[NR];
  for (int m = 0; m < R; ++m) {
    vstore(t, a0[m]);
    vstore(t + VW, a1[m]);
    float* ym = y + m * ldy;
    for (int i = 0; i < nvalid; ++i) ym[i] = add ? ym[i] + t[i] : t[i];
  }
}

template <typename WT>
void gemm_t(const float* x, int64_t M, int64_t K, const WT* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  // The block's widened panels: one buffer per thread, kept between calls.
  thread_local AlignedBuffer buf;
  const size_t need = static_cast<size_t>(NB * KC) * sizeof(float);
  if (buf.size() < need) buf.resize(need, false);
  float* const packed = buf.as<float>();
  for (int64_t r0 = n0; r0 < n1; r0 += NB) {
    const int64_t r1 = std::min(n1, r0 + NB);
    const int64_t panels = (r1 - r0 + NR - 1) / NR;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      const int64_t kl = std::min(KC, K - k0);
      pack_block(w, K, r0, r1, k0, kl, packed);
      const bool add = k0 > 0;
      int64_t m = 0;
      for (; m + MR <= M; m += MR)
        for (int64_t p = 0; p < panels; ++p) {
          const int nvalid = static_cast<int>(std::min<int64_t>(NR, r1 - r0 - p * NR));
          tile<MR>(x + m * K + k0, K, packed + p * kl * NR, kl, y + m * ldy + r0 + p * NR, ldy, add, nvalid);
        }
      if (m < M)
        for (int64_t p = 0; p < panels; ++p) {
          const int nvalid = static_cast<int>(std::min<int64_t>(NR, r1 - r0 - p * NR));
          const float* xm = x + m * K + k0;
          const float* pp = packed + p * kl * NR;
          float* ym = y + m * ldy + r0 + p * NR;
          switch (M - m) {
            case 5: tile<5>(xm, K, pp, kl, ym, ldy, add, nvalid); break;
            case 4: tile<4>(xm, K, pp, kl, ym, ldy, add, nvalid); break;
            case 3: tile<3>(xm, K, pp, kl, ym, ldy, add, nvalid); break;
            case 2: tile<2>(xm, K, pp, kl, ym, ldy, add, nvalid); break;
            default: tile<1>(xm, K, pp, kl, ym, ldy, add, nvalid); break;
          }
        }
    }
  }
}

}  // namespace

void gemm(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
          int64_t ldy) {
  if (wt == DType::bf16)
    gemm_t(x, M, K, static_cast<const uint16_t*>(w), n0, n1, y, ldy);
  else
    gemm_t(x, M, K, static_cast<const float*>(w), n0, n1, y, ldy);
}

}  // namespace lumen::cpu::LUMEN_ISA
