// CPU kernels, compiled once per ISA: LUMEN_ISA=avx2 (-mavx2 -mfma) or avx512 (-mavx512f/bw/vl/bf16).
// The vector width follows the compiler flags; everything accumulates in fp32.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/gdn_cpu.h"
#include "backend/cpu/kernels.h"

#ifndef LUMEN_ISA
#error "LUMEN_ISA must be defined"
#endif

namespace lumen::cpu::LUMEN_ISA {
namespace {

#if defined(__AVX512F__)
using vf = __m512;
constexpr int VW = 16;
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf vset1(float a) { return _mm512_set1_ps(a); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf _add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
inline vf vload_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline unsigned veq_mask(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// 2^n for integral n in [-126, 127] held as floats.
inline vf vpow2i(vf n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
#else
using vf = __m256;
constexpr int VW = 8;
inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf vset1(float a) { return _mm256_set1_ps(a); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf _add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline float vsum(vf v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline vf vload_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline unsigned veq_mask(vf a, vf b) { return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ))); }
inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vpow2i(vf n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
#endif

// exp(x) in fp32 (Cephes expf: range reduction by ln2 in two parts, degree-6 polynomial), within
// 2 ulp of std::exp over [-87.3, 88]; inputs are clamped to that range (exp(-87.3) ~ 1e-38).
inline vf vexp(vf x) {
  x = vmin(vset1(88.0f), vmax(vset1(-87.3f), x));  // operand order keeps NaN (max/min return the 2nd)
  const vf n = vround(vmul(x, vset1(1.44269504088896341f)));
  vf r = vfma(n, vset1(-0.693359375f), x);
  r = vfma(n, vset1(2.12194440e-4f), r);
  vf p = vset1(1.9875691500e-4f);
  p = vfma(p, r, vset1(1.3981999507e-3f));
  p = vfma(p, r, vset1(8.3334519073e-3f));
  p = vfma(p, r, vset1(4.1665795894e-2f));
  p = vfma(p, r, vset1(1.6666665459e-1f));
  p = vfma(p, r, vset1(5.0000001201e-1f));
  p = vfma(p, vmul(r, r), _add(r, vset1(1.f)));
  return vmul(p, vpow2i(n));
}
inline vf vsilu(vf x) { return vdiv(x, _add(vset1(1.f), vexp(vsub(vzero(), x)))); }
inline float silu1(float x) { return x / (1.f + std::exp(-x)); }

inline float bf16f(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename WT>
inline vf wload(const WT* p);
template <>
inline vf wload<float>(const float* p) { return vload(p); }
template <>
inline vf wload<uint16_t>(const uint16_t* p) { return vload_bf16(p); }
inline float wscalar(const float* p) { return *p; }
inline float wscalar(const uint16_t* p) { return bf16f(*p); }

}  // namespace
// The Gated DeltaNet core uses the vector helpers above (vf, vload, vfma, ...).
#include "backend/cpu/gdn_impl.h"
namespace {

// Register tile: MR token rows x NR weight rows, fp32 accumulators; each weight vector is loaded
// once per tile and used for MR rows.
template <typename WT, int MR, int NR>
inline void tile(const float* x, int64_t K, const WT* w, float* y, int64_t ldy) {
  vf acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) acc[m][n] = vzero();
  const int64_t kv = K / VW * VW;
  for (int64_t k = 0; k < kv; k += VW) {
    vf wv[NR];
    for (int n = 0; n < NR; ++n) wv[n] = wload<WT>(w + n * K + k);
    for (int m = 0; m < MR; ++m) {
      const vf xv = vload(x + m * K + k);
      for (int n = 0; n < NR; ++n) acc[m][n] = vfma(xv, wv[n], acc[m][n]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) {
      float s = vsum(acc[m][n]);
      for (int64_t k = kv; k < K; ++k) s += x[m * K + k] * wscalar(w + n * K + k);
      y[m * ldy + n] = s;
    }
}

template <typename WT>
void matmul_t(const float* x, int64_t M, int64_t K, const WT* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int NR = 4;
  // Weight rows outer so each row streams from memory once for all M token rows.
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) {
    const WT* wp = w + n * K;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) tile<WT, 4, NR>(x + m * K, K, wp, y + m * ldy + n, ldy);
    for (; m < M; ++m) tile<WT, 1, NR>(x + m * K, K, wp, y + m * ldy + n, ldy);
  }
  for (; n < n1; ++n) {
    const WT* wp = w + n * K;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) tile<WT, 4, 1>(x + m * K, K, wp, y + m * ldy + n, ldy);
    for (; m < M; ++m) tile<WT, 1, 1>(x + m * K, K, wp, y + m * ldy + n, ldy);
  }
}

void matmul(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
            int64_t ldy) {
  if (wt == DType::bf16)
    matmul_t(x, M, K, static_cast<const uint16_t*>(w), n0, n1, y, ldy);
  else
    matmul_t(x, M, K, static_cast<const float*>(w), n0, n1, y, ldy);
}

float dot(const float* a, const float* b, int64_t n) {
  vf acc0 = vzero(), acc1 = vzero();
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    acc0 = vfma(vload(a + i), vload(b + i), acc0);
    acc1 = vfma(vload(a + i + VW), vload(b + i + VW), acc1);
  }
  for (; i + VW <= n; i += VW) acc0 = vfma(vload(a + i), vload(b + i), acc0);
  float s = vsum(acc0) + vsum(acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const vf av = vset1(a);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(y + i, vfma(av, vload(x + i), vload(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void scale(float* y, float a, int64_t n) {
  const vf av = vset1(a);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(y + i, vmul(av, vload(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

float sumsq(const float* x, int64_t n) { return dot(x, x, n); }

void row_to_f32(const void* w, DType wt, int64_t row, int64_t cols, float* out) {
  if (wt == DType::bf16) {
    const uint16_t* p = static_cast<const uint16_t*>(w) + row * cols;
    for (int64_t i = 0; i < cols; ++i) out[i] = bf16f(p[i]);
  } else {
    std::memcpy(out, static_cast<const float*>(w) + row * cols, static_cast<size_t>(cols) * 4);
  }
}

#if defined(__AVX512BF16__)
void pack_bf16(const uint16_t* w, int64_t N, int64_t K, int64_t p0, int64_t p1, uint16_t* out) {
  for (int64_t p = p0; p < p1; ++p) {
    uint16_t* dst = out + p * kPanel * K;
    for (int64_t j = 0; j < K / 2; ++j)
      for (int i = 0; i < kPanel; ++i) {
        const int64_t n = p * kPanel + i;
        dst[(j * kPanel + i) * 2] = n < N ? w[n * K + 2 * j] : 0;
        dst[(j * kPanel + i) * 2 + 1] = n < N ? w[n * K + 2 * j + 1] : 0;
      }
  }
}

void to_bf16(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i*)(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    out[i] = static_cast<uint16_t>(u >> 16);
  }
}

// Store mask of the panel whose first output is n, of N outputs in all (the last panel may be partial).
inline __mmask16 panel_mask(int64_t N, int64_t n) {
  const int64_t valid = N - n < kPanel ? N - n : kPanel;
  return valid >= 16 ? 0xffff : static_cast<__mmask16>((1u << valid) - 1);
}

// MR token rows x NR panels (16 outputs each) of fp32 accumulators; per k-pair one 64-byte weight
// load per panel and one 4-byte broadcast per row.
// Panel j of the tile is the step-th panel after panel j-1 (1: adjacent; see matmul_packed's slice).
template <int MR, int NR>
inline void packed_tile(const uint16_t* xb, int64_t K, const uint16_t* panel0, int64_t N, int64_t n0, float* y,
                        int64_t ldy, bool next_tile = false, int64_t step = 1) {
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j] = _mm512_setzero_ps();
  const int64_t pairs = K / 2;
  const int64_t plen = kPanel * K;
  const int64_t pstride = step * plen;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    __m512i b[NR];
    // With many rows per weight vector the loop body is long and the reorder window holds few
    // of its loads; prefetch each stream 2 KB ahead so enough lines stay in flight (A/B: c=8 decode
    // x1.05; 4 and 8 KB no better; also prefetching for fewer rows made c=1 slightly slower).
    // With next_tile (the caller reads the NR panels after these next), the prefetch runs on near
    // a panel's end into the next tile's panel j, so that tile starts on lines already in flight.
    if constexpr (MR >= 4) {
      const int64_t ahead = kp * 32 + 1024;
      if (ahead < plen || next_tile) {
        // Adjacent panels: the next tile's panel j is NR panels on; sliced: the panel after this one.
        const int64_t off = ahead < plen || step > 1 ? ahead : ahead + (NR - 1) * pstride;
        for (int j = 0; j < NR; ++j) _mm_prefetch(reinterpret_cast<const char*>(panel0 + j * pstride + off), _MM_HINT_T0);
      }
    }
    for (int j = 0; j < NR; ++j) b[j] = _mm512_loadu_si512(panel0 + j * pstride + kp * 32);
    for (int m = 0; m < MR; ++m) {
      int32_t pair;
      std::memcpy(&pair, xb + m * K + 2 * kp, 4);
      const __m512i a = _mm512_set1_epi32(pair);
      for (int j = 0; j < NR; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], (__m512bh)a, (__m512bh)b[j]);
    }
  }
  for (int j = 0; j < NR; ++j) {
    const int64_t n = n0 + j * step * kPanel;
    const __mmask16 mask = panel_mask(N, n);
    for (int m = 0; m < MR; ++m) _mm512_mask_storeu_ps(y + m * ldy + n, mask, acc[m][j]);
  }
}

// One token row x 4 panels: decode at concurrency 1, and the last row of batches of 6k + 1 rows.
// The same product as packed_tile<1, 4>, written in assembly because GCC 12 will not fold a load
// into vdpbf16ps: its separate load per weight line made 12 instructions per k-pair where 8 do.
// Fewer instructions per line let the reorder window reach further ahead in the weight streams
// (micro-benchmark, 4 streams a quarter apart on a 508 MB matrix, 2 cores, interleaved: 72.0
// against 68.5 GB/s in one run, 64.4 against 60.4 in another; the sum-only loop read 72.0 / 64.9).
inline void packed_tile_1x4(const uint16_t* xb, int64_t K, const uint16_t* panel0, int64_t N, int64_t n0, float* y,
                            int64_t step) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t ps = step * kPanel * K * 2;  // bytes from one panel of the tile to the next
  const int64_t ps3 = 3 * ps;
  const char* w = reinterpret_cast<const char*>(panel0);
  const char* x = reinterpret_cast<const char*>(xb);
  const char* const wend = w + (K / 2) * 64;  // one 64-byte line per k-pair; K >= 2 (caller)
  asm volatile(
      "1:\n\t"
      "vpbroadcastd (%[x]), %%zmm16\n\t"
      "vdpbf16ps (%[w]), %%zmm16, %[a0]\n\t"
      "vdpbf16ps (%[w],%[ps]), %%zmm16, %[a1]\n\t"
      "vdpbf16ps (%[w],%[ps],2), %%zmm16, %[a2]\n\t"
      "vdpbf16ps (%[w],%[ps3]), %%zmm16, %[a3]\n\t"
      "add $64, %[w]\n\t"
      "add $4, %[x]\n\t"
      "cmp %[w], %[wend]\n\t"
      "jne 1b\n\t"
      : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [w] "+r"(w), [x] "+r"(x)
      : [ps] "r"(ps), [ps3] "r"(ps3), [wend] "r"(wend)
      : "zmm16", "cc", "memory");
  const __m512 acc[4] = {a0, a1, a2, a3};
  for (int j = 0; j < 4; ++j) {
    const int64_t n = n0 + j * step * kPanel;
    _mm512_mask_storeu_ps(y + n, panel_mask(N, n), acc[j]);
  }
}

template <int NR>
inline void packed_rows(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* panel0, int64_t N, int64_t n0,
                        float* y, int64_t ldy, int64_t step = 1) {
  int64_t m = 0;
  for (; m + 6 <= M; m += 6) packed_tile<6, NR>(xb + m * K, K, panel0, N, n0, y + m * ldy, ldy, false, step);
  const uint16_t* x = xb + m * K;
  float* ym = y + m * ldy;
  switch (M - m) {
    case 5: packed_tile<5, NR>(x, K, panel0, N, n0, ym, ldy, false, step); break;
    case 4: packed_tile<4, NR>(x, K, panel0, N, n0, ym, ldy, false, step); break;
    case 3: packed_tile<3, NR>(x, K, panel0, N, n0, ym, ldy, false, step); break;
    case 2: packed_tile<2, NR>(x, K, panel0, N, n0, ym, ldy, false, step); break;
    case 1:
      if constexpr (NR == 4) {
        if (K >= 2) {
          packed_tile_1x4(x, K, panel0, N, n0, ym, step);
          break;
        }
      }
      packed_tile<1, NR>(x, K, panel0, N, n0, ym, ldy, false, step);
      break;
    default: break;
  }
}

// Decode-sized batches (7..16 rows): 8-row tiles over 3 panels read each weight vector once for 8
// tokens (24 accumulators). Beside the weight stream this is the compute-heaviest shape, and one
// pass beats the 6-row + 2-row pair, which reads every panel group twice.
// next: the caller's next call reads the NR panels after these (the last row tile prefetches them).
template <int NR>
inline void packed_rows8(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* panel0, int64_t N, int64_t n0,
                         float* y, int64_t ldy, bool next, int64_t step = 1) {
  int64_t m = 0;
  for (; m + 8 <= M; m += 8)
    packed_tile<8, NR>(xb + m * K, K, panel0, N, n0, y + m * ldy, ldy, next && m + 8 == M, step);
  const uint16_t* x = xb + m * K;
  float* ym = y + m * ldy;
  switch (M - m) {
    case 7: packed_tile<7, NR>(x, K, panel0, N, n0, ym, ldy, next, step); break;
    case 6: packed_tile<6, NR>(x, K, panel0, N, n0, ym, ldy, next, step); break;
    case 5: packed_tile<5, NR>(x, K, panel0, N, n0, ym, ldy, next, step); break;
    case 4: packed_tile<4, NR>(x, K, panel0, N, n0, ym, ldy, next, step); break;
    case 3: packed_tile<3, NR>(x, K, panel0, N, n0, ym, ldy, false, step); break;
    case 2: packed_tile<2, NR>(x, K, panel0, N, n0, ym, ldy, false, step); break;
    case 1: packed_tile<1, NR>(x, K, panel0, N, n0, ym, ldy, false, step); break;
    default: break;
  }
}

void matmul_packed(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* packed, int64_t N, int64_t p0, int64_t p1,
                   float* y, int64_t ldy, int64_t slice) {
  if (slice > 0 && M >= 7 && M <= 16) {
    // Panels p, p + slice, p + 2 slice for p in [p0, p1): three streams far apart.
    for (int64_t p = p0; p < p1; ++p)
      packed_rows8<3>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy, p + 1 < p1, slice);
    return;
  }
  if (slice > 0) {
    // Panels p, p + slice, p + 2 slice, p + 3 slice for p in [p0, p1): four streams far apart.
    for (int64_t p = p0; p < p1; ++p) packed_rows<4>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy, slice);
    return;
  }
  if (M >= 7 && M <= 16) {
    int64_t p = p0;
    for (; p + 3 <= p1; p += 3) packed_rows8<3>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy, p + 6 <= p1);
    for (; p < p1; ++p) packed_rows8<1>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy, false);
    return;
  }
  constexpr int NR = 4;
  int64_t p = p0;
  // Groups of NR panels stay in L2 while every row of x passes over them.
  for (; p + NR <= p1; p += NR) packed_rows<NR>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy);
  for (; p < p1; ++p) packed_rows<1>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy);
}
#endif

void mul_sigmoid(float* o, const float* gate, int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW)
    vstore(o + i, vdiv(vload(o + i), _add(vset1(1.f), vexp(vsub(vzero(), vload(gate + i))))));
  for (; i < n; ++i) o[i] /= 1.f + std::exp(-gate[i]);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(out + i, vmul(vsilu(vload(gate + i)), vload(up + i)));
  for (; i < n; ++i) out[i] = silu1(gate[i]) * up[i];
}

// Depthwise causal conv with KC taps, then SiLU, over channels [c0, c1) of one sequence's T rows,
// VW channels at a time with the window (the previous KC-1 inputs) held in registers.
template <int KC>
void conv_silu_t(const float* x, int64_t xs, int T, float* state, const float* wT, int64_t cd, int64_t c0, int64_t c1,
                 float* out, int64_t os) {
  constexpr int H = KC - 1;
  int64_t c = c0;
  for (; c + VW <= c1; c += VW) {
    vf w[KC], win[H > 0 ? H : 1];
    for (int r = 0; r < KC; ++r) w[r] = vload(wT + r * cd + c);
    for (int r = 0; r < H; ++r) win[r] = vload(state + r * cd + c);
    for (int t = 0; t < T; ++t) {
      const vf xv = vload(x + t * xs + c);
      vf acc = vmul(w[H], xv);
      for (int r = 0; r < H; ++r) acc = vfma(w[r], win[r], acc);
      vstore(out + t * os + c, vsilu(acc));
      for (int r = 0; r + 1 < H; ++r) win[r] = win[r + 1];
      if constexpr (H > 0) win[H - 1] = xv;
    }
    for (int r = 0; r < H; ++r) vstore(state + r * cd + c, win[r]);
  }
  for (; c < c1; ++c) {
    float win[H > 0 ? H : 1];
    for (int r = 0; r < H; ++r) win[r] = state[r * cd + c];
    for (int t = 0; t < T; ++t) {
      const float xv = x[t * xs + c];
      float acc = wT[H * cd + c] * xv;
      for (int r = 0; r < H; ++r) acc += wT[r * cd + c] * win[r];
      out[t * os + c] = silu1(acc);
      for (int r = 0; r + 1 < H; ++r) win[r] = win[r + 1];
      if constexpr (H > 0) win[H - 1] = xv;
    }
    for (int r = 0; r < H; ++r) state[r * cd + c] = win[r];
  }
}

void conv_silu(const float* x, int64_t xs, int T, float* state, const float* wT, int kc, int64_t cd, int64_t c0,
               int64_t c1, float* out, int64_t os) {
  switch (kc) {
    case 1: conv_silu_t<1>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 2: conv_silu_t<2>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 3: conv_silu_t<3>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 4: conv_silu_t<4>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 5: conv_silu_t<5>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 6: conv_silu_t<6>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 7: conv_silu_t<7>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 8: conv_silu_t<8>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    default: break;  // the backend rejects other kernel sizes at load
  }
}

void gated_rmsnorm(float* o, const float* z, const float* w, int64_t n, float eps) {
  const float inv = 1.f / std::sqrt(dot(o, o, n) / static_cast<float>(n) + eps);
  const vf iv = vset1(inv);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(o + i, vmul(vmul(vmul(vload(o + i), iv), vload(w + i)), vsilu(vload(z + i))));
  for (; i < n; ++i) o[i] = o[i] * inv * w[i] * silu1(z[i]);
}

// Attention over a paged run of rows (see kernels.h). A core reads several streams faster than
// one (an interleaved micro-benchmark over scattered 16 KiB runs, 2 threads: one run at a time
// with prefetch 35.5 GB/s, four side by side 56.2), so S blocks are read side by side, S as large
// as the accumulators (S x NQ vectors) allow.
template <int NQ>
constexpr int attn_streams() {
  constexpr int budget = VW == 16 ? 24 : 12;
  return NQ * 4 <= budget ? 4 : NQ * 2 <= budget ? 2 : 1;
}

// The rows of block t, for prefetching: a later block of this run, else one of `next`, else none.
struct PagedRun {
  const float* const* blk;
  int nblk;
  const float* const* next;
  int n_next;
  const float* at(int t) const { return t < nblk ? blk[t] : t - nblk < n_next ? next[t - nblk] : nullptr; }
};

// Scores of NQ heads against S rows (any addresses); out index js[s]; with PF, pf[s] is a row to
// prefetch, a line per line consumed (never null: without a row to fetch it repeats rows[s]).
template <int NQ, int S, bool PF>
inline void scores_step(const float* q, int64_t qs, const float* const* rows, int64_t n, float scale, float* out,
                        int64_t os, const int* js, const float* const* pf) {
  vf acc[S][NQ];
  for (int r = 0; r < S; ++r)
    for (int h = 0; h < NQ; ++h) acc[r][h] = vzero();
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    vf kv[S];
    for (int r = 0; r < S; ++r) {
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(pf[r] + i), _MM_HINT_T0);
      kv[r] = vload(rows[r] + i);
    }
    for (int h = 0; h < NQ; ++h) {
      const vf qv = vload(q + h * qs + i);
      for (int r = 0; r < S; ++r) acc[r][h] = vfma(qv, kv[r], acc[r][h]);
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int r = 0; r < S; ++r) {
      float sum = vsum(acc[r][h]);
      for (int64_t j = i; j < n; ++j) sum += q[h * qs + j] * rows[r][j];
      out[h * os + js[r]] = sum * scale;
    }
}

// o_h += Σ_s w[h * ws + js[s]] rows[s] for NQ heads; o stays in L1 (NQ x n floats) and is read
// and written once per S rows.
template <int NQ, int S, bool PF>
inline void values_step(const float* w, int64_t ws, const float* const* rows, int64_t n, float* o, int64_t os,
                        const int* js, const float* const* pf) {
  vf wv[S][NQ];
  for (int r = 0; r < S; ++r)
    for (int h = 0; h < NQ; ++h) wv[r][h] = vset1(w[h * ws + js[r]]);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    vf vv[S];
    for (int r = 0; r < S; ++r) {
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(pf[r] + i), _MM_HINT_T0);
      vv[r] = vload(rows[r] + i);
    }
    for (int h = 0; h < NQ; ++h) {
      vf acc = vload(o + h * os + i);
      for (int r = 0; r < S; ++r) acc = vfma(wv[r][h], vv[r], acc);
      vstore(o + h * os + i, acc);
    }
  }
  for (; i < n; ++i)
    for (int h = 0; h < NQ; ++h) {
      float acc = o[h * os + i];
      for (int r = 0; r < S; ++r) acc += w[h * ws + js[r]] * rows[r][i];
      o[h * os + i] = acc;
    }
}

// Walks the run: groups of S full blocks side by side (row r of each), each prefetching the block
// S further on; then the remaining blocks one at a time, two rows per step, prefetching the next.
// Without PF (rows expected in cache) nothing is prefetched.
template <int NQ, bool Values, bool PF>
void attn_run(const float* x, int64_t xs, const float* const* blk, int bs, int ctx, int64_t n, float scale, float* y,
              int64_t ys, const float* const* next, int n_next) {
  constexpr int S = attn_streams<NQ>();
  const int nblk = (ctx + bs - 1) / bs, nfull = ctx / bs;
  const PagedRun run{blk, nblk, next, n_next};
  auto step = [&]<int R>(const float* const* rows, const int* js, const float* const* pf) {
    if constexpr (Values)
      values_step<NQ, R, PF>(x, xs, rows, n, y, ys, js, pf);
    else
      scores_step<NQ, R, PF>(x, xs, rows, n, scale, y, ys, js, pf);
  };
  // Row r of block t to prefetch, or `self` (a line already being read) when there is none.
  auto pf_row = [&](int t, int r, const float* self) {
    const float* p = PF ? run.at(t) : nullptr;
    return p ? p + r * n : self;
  };
  int b = 0;
  for (; b + S <= nfull; b += S)
    for (int r = 0; r < bs; ++r) {
      const float* rows[S];
      const float* pf[S];
      int js[S];
      for (int t = 0; t < S; ++t) {
        rows[t] = blk[b + t] + r * n;
        pf[t] = pf_row(b + S + t, r, rows[t]);
        js[t] = (b + t) * bs + r;
      }
      step.template operator()<S>(rows, js, pf);
    }
  for (; b < nblk; ++b) {
    const int nr = std::min(bs, ctx - b * bs);
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
      const float* rows[2] = {blk[b] + r * n, blk[b] + (r + 1) * n};
      const float* pf[2] = {pf_row(b + 1, r, rows[0]), pf_row(b + 1, r + 1, rows[1])};
      const int js[2] = {b * bs + r, b * bs + r + 1};
      step.template operator()<2>(rows, js, pf);
    }
    if (r < nr) {
      const float* rows[1] = {blk[b] + r * n};
      const float* pf[1] = {pf_row(b + 1, r, rows[0])};
      const int js[1] = {b * bs + r};
      step.template operator()<1>(rows, js, pf);
    }
  }
}

template <int NQ, bool Values>
void attn_run_pf(const float* x, int64_t xs, const float* const* blk, int bs, int ctx, int64_t n, float scale, float* y,
                 int64_t ys, const float* const* next, int n_next) {
  if (n_next < 0)
    attn_run<NQ, Values, false>(x, xs, blk, bs, ctx, n, scale, y, ys, nullptr, 0);
  else
    attn_run<NQ, Values, true>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next);
}

template <bool Values>
void attn_dispatch(const float* x, int64_t xs, int nq, const float* const* blk, int bs, int ctx, int64_t n, float scale,
                   float* y, int64_t ys, const float* const* next, int n_next) {
  switch (nq) {
    case 4: attn_run_pf<4, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 2: attn_run_pf<2, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 8: attn_run_pf<8, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 1: attn_run_pf<1, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    default:  // any other group size, a head at a time (rows then come from cache after the first)
      for (int h = 0; h < nq; ++h)
        attn_run_pf<1, Values>(x + h * xs, xs, blk, bs, ctx, n, scale, y + h * ys, ys, next, n_next);
  }
}

void attn_scores(const float* q, int64_t qs, int nq, const float* const* blk, int bs, int ctx, int64_t n, float scale,
                 float* out, int64_t os, const float* const* next, int n_next) {
  attn_dispatch<false>(q, qs, nq, blk, bs, ctx, n, scale, out, os, next, n_next);
}

void attn_values(const float* w, int64_t ws, int nq, const float* const* blk, int bs, int ctx, int64_t n, float* o,
                 int64_t os, const float* const* next, int n_next) {
  attn_dispatch<true>(w, ws, nq, blk, bs, ctx, n, 1.f, o, os, next, n_next);
}

float exp_shift_sum(float* x, int64_t n, float shift) {
  const vf sh = vset1(shift);
  vf acc = vzero();
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    const vf e = vexp(vsub(vload(x + i), sh));
    vstore(x + i, e);
    acc = _add(acc, e);
  }
  float s = vsum(acc);
  for (; i < n; ++i) s += x[i] = std::exp(x[i] - shift);
  return s;
}

int32_t argmax(const float* x, int64_t n) {
  // Pass 1: the maximum (max(x, acc) keeps acc when x is NaN); pass 2: its first index. x[0]
  // seeds the maximum, as in the scalar version (so a NaN there is returned, like there).
  if (n <= 0) return 0;
  vf m0 = vset1(x[0]), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    m0 = vmax(vload(x + i), m0);
    m1 = vmax(vload(x + i + VW), m1);
  }
  alignas(64) float lanes[2 * VW];
  vstore(lanes, m0);
  vstore(lanes + VW, m1);
  float mx = x[0];
  for (int l = 0; l < 2 * VW; ++l) mx = lanes[l] > mx ? lanes[l] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  if (!(x[0] < mx)) return 0;  // x[0] is the maximum (or NaN)
  const vf mv = vset1(mx);
  int64_t j = 0;
  for (; j + VW <= n; j += VW)
    if (const unsigned m = veq_mask(vload(x + j), mv)) return static_cast<int32_t>(j + __builtin_ctz(m));
  for (; j < n; ++j)
    if (x[j] == mx) return static_cast<int32_t>(j);
  return 0;
}

// S contiguous parts of x read side by side: one read stream per part. A core keeps more lines in
// flight over several streams than over one (on this machine 4-8 streams per thread read up to
// 1.5x faster than one), and the weight kernels read 4-8 panels side by side, so the probe must too.
// The loop must be as lean as the weight kernels' (one instruction per vector, accumulators in
// registers): the first version kept its accumulators on the stack (GCC did not unroll the loop over
// streams), issued 5 instructions per line and read 10-30 % slower than the decode kernel itself,
// which put the limit too low. U lines per stream per pass keep 4+ independent add chains.
template <int S>
float stream_sum_s(const float* x, int64_t n) {
  constexpr int U = S >= 4 ? 1 : 4 / S;
  const int64_t per = n / S / (U * VW) * (U * VW);
  const float* p[S];
  vf a[S * U];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) p[s] = x + s * per;
#pragma GCC unroll 8
  for (int j = 0; j < S * U; ++j) a[j] = vzero();
  for (int64_t i = 0; i < per; i += U * VW) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) a[s * U + u] = _add(a[s * U + u], vload(p[s] + i + u * VW));
  }
  float sum = 0;
  for (int j = 0; j < S * U; ++j) sum += vsum(a[j]);
  for (int64_t i = S * per; i < n; ++i) sum += x[i];
  return sum;
}

float stream_sum(const float* x, int64_t n, int streams) {
  switch (streams) {
    case 8: return stream_sum_s<8>(x, n);
    case 4: return stream_sum_s<4>(x, n);
    case 2: return stream_sum_s<2>(x, n);
    default: return stream_sum_s<1>(x, n);
  }
}

double fma_burn(int64_t iters) {
#if defined(__AVX512BF16__)
  // 12 independent vdpbf16ps chains: each does 16 lanes x 2 multiply-adds = 64 FLOPs.
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x3f003f00);
  for (int64_t it = 0; it < iters; ++it)
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)a, (__m512bh)b);
  float s = 0;
  for (int j = 0; j < 12; ++j) s += _mm512_reduce_add_ps(acc[j]);
  volatile float sink = s;
  (void)sink;
  return static_cast<double>(iters) * 12 * 64;
#else
  vf acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = vset1(static_cast<float>(j));
  const vf a = vset1(1.0001f), b = vset1(0.9999f);
  for (int64_t it = 0; it < iters; ++it)
    for (int j = 0; j < 12; ++j) acc[j] = vfma(acc[j], a, b);
  float s = 0;
  for (int j = 0; j < 12; ++j) s += vsum(acc[j]);
  volatile float sink = s;
  (void)sink;
  return static_cast<double>(iters) * 12 * VW * 2;
#endif
}

}  // namespace

extern const Kernels table;
const Kernels table = {
#if defined(__AVX512F__)
    "avx512",
#else
    "avx2",
#endif
    matmul, dot, axpy, scale, sumsq, row_to_f32,
#if defined(__AVX512BF16__)
    pack_bf16, matmul_packed, to_bf16,
#else
    nullptr, nullptr, nullptr,
#endif
    stream_sum, fma_burn, gdn_recurrent_impl, gdn_chunked_impl, swiglu, conv_silu, gated_rmsnorm, argmax, exp_shift_sum, attn_scores, attn_values, mul_sigmoid};

}  // namespace lumen::cpu::LUMEN_ISA
