// Matrix products for one ISA: the f32 / bf16-widening row kernel and the decode stream tiles over
// row-major weights (every ISA), and on AVX-512 BF16
// the weight packing into vdpbf16ps panels, x rounded to bf16, and the packed-panel tiles. How a
// product is split over the threads is the backend's (cpu/matmul.cpp).
#include <algorithm>
#include <cstring>

#include "backend/cpu/isa/amx.h"
#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/simd.h"
#include "backend/cpu/kernels.h"
#include "core/cpu_features.h"

namespace lumen::cpu::LUMEN_ISA {
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

// Decode-sized products over row-major weights (the ISAs without the packed bf16 path): a tile of
// MR token rows x NR weight rows, the NR rows being far apart in the matrix (one per stream). bf16
// rows are read 2*VW values at a time and split into their even and odd positions by a shift and a
// mask (no widening shuffle); x comes in split_x's order to match. f32 rows are plain loads.
template <int MR, int NR>
inline void stream_tile(const float* xs, int64_t K, const uint16_t* const* w, float* y, int64_t ldy,
                        const int64_t* n) {
  vf acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j] = vzero();
  constexpr int B = 2 * VW;
  const int64_t kb = K / B * B;
  for (int64_t k = 0; k < kb; k += B) {
    vf wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = vbf16_even(w[j] + k);
    for (int m = 0; m < MR; ++m) {
      const vf xv = vload(xs + m * K + k);
      for (int j = 0; j < NR; ++j) acc[m][j] = vfma(xv, wv[j], acc[m][j]);
    }
    for (int j = 0; j < NR; ++j) wv[j] = vbf16_odd(w[j] + k);
    for (int m = 0; m < MR; ++m) {
      const vf xv = vload(xs + m * K + k + VW);
      for (int j = 0; j < NR; ++j) acc[m][j] = vfma(xv, wv[j], acc[m][j]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) {
      float s = vsum(acc[m][j]);
      for (int64_t k = kb; k < K; ++k) s += xs[m * K + k] * bf16f(w[j][k]);  // split_x leaves the tail in order
      y[m * ldy + n[j]] = s;
    }
}

template <int MR, int NR>
inline void stream_tile(const float* x, int64_t K, const float* const* w, float* y, int64_t ldy, const int64_t* n) {
  vf acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j] = vzero();
  const int64_t kv = K / VW * VW;
  for (int64_t k = 0; k < kv; k += VW) {
    vf wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = vload(w[j] + k);
    for (int m = 0; m < MR; ++m) {
      const vf xv = vload(x + m * K + k);
      for (int j = 0; j < NR; ++j) acc[m][j] = vfma(xv, wv[j], acc[m][j]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) {
      float s = vsum(acc[m][j]);
      for (int64_t k = kv; k < K; ++k) s += x[m * K + k] * w[j][k];
      y[m * ldy + n[j]] = s;
    }
}

// All M rows of x against NR weight rows n[0..NR): 2-row tiles (each weight vector loaded once per
// 2 token rows; the rows stay in L1 across the tiles), a 1-row tile for an odd last row.
template <typename WT, int NR>
inline void stream_rows(const float* x, int64_t M, int64_t K, const WT* w, float* y, int64_t ldy, const int64_t* n) {
  const WT* wr[NR];
  for (int j = 0; j < NR; ++j) wr[j] = w + n[j] * K;
  int64_t m = 0;
  for (; m + 2 <= M; m += 2) stream_tile<2, NR>(x + m * K, K, wr, y + m * ldy, ldy, n);
  if (m < M) stream_tile<1, NR>(x + m * K, K, wr, y + m * ldy, ldy, n);
}

// Up to 4 weight rows at once (fewer at a matrix's end).
template <typename WT>
inline void stream_group(const float* x, int64_t M, int64_t K, const WT* w, float* y, int64_t ldy, const int64_t* n,
                         int count) {
  switch (count) {
    case 4: stream_rows<WT, 4>(x, M, K, w, y, ldy, n); break;
    case 3: stream_rows<WT, 3>(x, M, K, w, y, ldy, n); break;
    case 2: stream_rows<WT, 2>(x, M, K, w, y, ldy, n); break;
    case 1: stream_rows<WT, 1>(x, M, K, w, y, ldy, n); break;
    default: break;
  }
}

template <typename WT>
void matmul_streams_t(const float* x, int64_t M, int64_t K, const WT* w, int64_t N, int64_t p0, int64_t p1, float* y,
                      int64_t ldy, int64_t slice) {
  int64_t n[4];
  if (slice > 0) {
    // Row i of panels p, p + slice, p + 2 slice, p + 3 slice side by side: four streams that far apart.
    for (int64_t p = p0; p < p1; ++p)
      for (int i = 0; i < kPanel; ++i) {
        int count = 0;
        for (int s = 0; s < 4; ++s) {
          const int64_t r = (p + s * slice) * kPanel + i;
          if (r < N) n[count++] = r;
        }
        stream_group(x, M, K, w, y, ldy, n, count);
      }
    return;
  }
  // Adjacent rows, four at a time.
  const int64_t r1 = std::min(N, p1 * kPanel);
  for (int64_t r = p0 * kPanel; r < r1; r += 4) {
    const int count = static_cast<int>(std::min<int64_t>(4, r1 - r));
    for (int j = 0; j < count; ++j) n[j] = r + j;
    stream_group(x, M, K, w, y, ldy, n, count);
  }
}

}  // namespace

void split_x(const float* x, int64_t M, int64_t K, float* out) {
  constexpr int B = 2 * VW;
  for (int64_t m = 0; m < M; ++m) {
    const float* s = x + m * K;
    float* d = out + m * K;
    int64_t k = 0;
    for (; k + B <= K; k += B)
      for (int j = 0; j < VW; ++j) {
        d[k + j] = s[k + 2 * j];
        d[k + VW + j] = s[k + 2 * j + 1];
      }
    for (; k < K; ++k) d[k] = s[k];
  }
}

void matmul_streams(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t N, int64_t p0, int64_t p1,
                    float* y, int64_t ldy, int64_t slice) {
  if (wt == DType::bf16)
    matmul_streams_t(x, M, K, static_cast<const uint16_t*>(w), N, p0, p1, y, ldy, slice);
  else
    matmul_streams_t(x, M, K, static_cast<const float*>(w), N, p0, p1, y, ldy, slice);
}

void matmul(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
            int64_t ldy) {
  if (wt == DType::bf16)
    matmul_t(x, M, K, static_cast<const uint16_t*>(w), n0, n1, y, ldy);
  else
    matmul_t(x, M, K, static_cast<const float*>(w), n0, n1, y, ldy);
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

namespace {

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
    // of its loads; prefetch each stream 2 KB ahead so enough lines stay in flight (only for 4+
    // rows; figures: docs/performance.md, v14 and v22).
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
// (figures: docs/performance.md, v27). Prefetch: each stream's line 2 KB ahead asked for as well,
// four more instructions per k-pair. On the AMD EPYC the hardware's prefetch alone read fastest
// (prefetching the 1..3-row tiles made c=1 x0.99: v14); on an Intel Xeon the tile read at 0.87 of
// a plain read without and 1.00 with, and the engine's bf16 c=1 decode ran x1.13 (forty-sixth
// session), so it is taken on Intel CPUs (cpu_features().intel).
template <bool Prefetch>
inline void packed_tile_1x4(const uint16_t* xb, int64_t K, const uint16_t* panel0, int64_t N, int64_t n0, float* y,
                            int64_t step) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t ps = step * kPanel * K * 2;  // bytes from one panel of the tile to the next
  const int64_t ps3 = 3 * ps;
  const char* w = reinterpret_cast<const char*>(panel0);
  const char* x = reinterpret_cast<const char*>(xb);
  const char* const wend = w + (K / 2) * 64;  // one 64-byte line per k-pair; K >= 2 (caller)
#define LUMEN_TILE_1X4_PREFETCH                  \
  "prefetcht0 2048(%[w])\n\t"                    \
  "prefetcht0 2048(%[w],%[ps])\n\t"              \
  "prefetcht0 2048(%[w],%[ps],2)\n\t"            \
  "prefetcht0 2048(%[w],%[ps3])\n\t"
#define LUMEN_TILE_1X4_BODY                      \
  "vpbroadcastd (%[x]), %%zmm16\n\t"             \
  "vdpbf16ps (%[w]), %%zmm16, %[a0]\n\t"         \
  "vdpbf16ps (%[w],%[ps]), %%zmm16, %[a1]\n\t"   \
  "vdpbf16ps (%[w],%[ps],2), %%zmm16, %[a2]\n\t" \
  "vdpbf16ps (%[w],%[ps3]), %%zmm16, %[a3]\n\t"  \
  "add $64, %[w]\n\t"                            \
  "add $4, %[x]\n\t"                             \
  "cmp %[w], %[wend]\n\t"                        \
  "jne 1b\n\t"
  if constexpr (Prefetch)
    asm volatile("1:\n\t" LUMEN_TILE_1X4_PREFETCH LUMEN_TILE_1X4_BODY
                 : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [w] "+r"(w), [x] "+r"(x)
                 : [ps] "r"(ps), [ps3] "r"(ps3), [wend] "r"(wend)
                 : "zmm16", "cc", "memory");
  else
    asm volatile("1:\n\t" LUMEN_TILE_1X4_BODY
                 : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [w] "+r"(w), [x] "+r"(x)
                 : [ps] "r"(ps), [ps3] "r"(ps3), [wend] "r"(wend)
                 : "zmm16", "cc", "memory");
#undef LUMEN_TILE_1X4_BODY
#undef LUMEN_TILE_1X4_PREFETCH
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
          if (lumen::cpu_features().intel)
            packed_tile_1x4<true>(x, K, panel0, N, n0, ym, step);
          else
            packed_tile_1x4<false>(x, K, panel0, N, n0, ym, step);
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

// On AMX (where lumen::amx_enabled()): R <= 16 token rows x NR <= 4 panels (panel j the step-th
// after panel j - 1) with the tile unit's bf16 products, for every batch size, decode at one row
// included, so a row's outputs never depend on the rows beside it. A panel's 32-value steps
// ([K / 2][16][2] bf16: 16 pairs of 16 outputs) are the B tile's own layout, read in place; x's R
// rows, 32 values at a time, the A tile. Each output is one f32 sum over K in order (the tile
// unit's, on the same bf16 operands as vdpbf16ps: kernelCheck holds it to the same bound), the
// last K % 32 values added by vdpbf16ps. Tiles (amx_bf16_config): 0..3 the panels' sums, 4 x's
// rows, 5 and 6 the panels' steps in turn.
amx::TileConfig amx_bf16_config(int R) {
  amx::TileConfig c;
  for (int t = 0; t < 4; ++t) c.set(t, R, 64);
  c.set(4, R, 64);
  c.set(5, 16, 64);
  c.set(6, 16, 64);
  c.set(7, R, 64);
  return c;
}

template <int NR>
void amx_bf16_tile(const uint16_t* xb, int R, int64_t K, const uint16_t* panel0, int64_t N, int64_t n0, float* y,
                   int64_t ldy, int64_t step, bool prefetch) {
  const int64_t pstride = step * kPanel * K;  // elements from one panel of the tile to the next
  const int64_t steps = K / 32;
  const int64_t xstride = K * 2;
  LUMEN_TILE_ZERO(0);
  if constexpr (NR > 1) LUMEN_TILE_ZERO(1);
  if constexpr (NR > 2) LUMEN_TILE_ZERO(2);
  if constexpr (NR > 3) LUMEN_TILE_ZERO(3);
  int64_t i0 = 0;
  if constexpr (NR == 1) {
    // One panel: even and odd steps on their own x and value tiles, so a step's loads need not
    // wait for the previous step's product to have read its tiles.
    for (; i0 + 2 <= steps; i0 += 2) {
      const uint16_t* w = panel0 + i0 * 512;
      if (prefetch)
        for (int l = 0; l < 32; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + 512 + 32 * l), _MM_HINT_T0);
      LUMEN_TILE_LOAD(4, xb + 32 * i0, xstride);
      LUMEN_TILE_LOAD(5, w, 64);
      LUMEN_TILE_LOAD(7, xb + 32 * i0 + 32, xstride);
      LUMEN_TILE_LOAD(6, w + 512, 64);
      LUMEN_TILE_DPBF16PS(0, 4, 5);
      LUMEN_TILE_DPBF16PS(0, 7, 6);
    }
  }
  for (int64_t i = i0; i < steps; ++i) {
    const uint16_t* w = panel0 + i * 512;
    if (prefetch)
      for (int j = 0; j < NR; ++j)
        for (int l = 0; l < 16; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + j * pstride + 512 + 32 * l), _MM_HINT_T0);
    LUMEN_TILE_LOAD(4, xb + 32 * i, xstride);
    LUMEN_TILE_LOAD(5, w, 64);
    LUMEN_TILE_DPBF16PS(0, 4, 5);
    if constexpr (NR > 1) {
      LUMEN_TILE_LOAD(6, w + pstride, 64);
      LUMEN_TILE_DPBF16PS(1, 4, 6);
    }
    if constexpr (NR > 2) {
      LUMEN_TILE_LOAD(5, w + 2 * pstride, 64);
      LUMEN_TILE_DPBF16PS(2, 4, 5);
    }
    if constexpr (NR > 3) {
      LUMEN_TILE_LOAD(6, w + 3 * pstride, 64);
      LUMEN_TILE_DPBF16PS(3, 4, 6);
    }
  }
  alignas(64) float c[NR][16][16];
  LUMEN_TILE_STORE(0, c[0], 64);
  if constexpr (NR > 1) LUMEN_TILE_STORE(1, c[1], 64);
  if constexpr (NR > 2) LUMEN_TILE_STORE(2, c[2], 64);
  if constexpr (NR > 3) LUMEN_TILE_STORE(3, c[3], 64);
  for (int j = 0; j < NR; ++j) {
    const int64_t n = n0 + j * step * kPanel;
    const __mmask16 mask = panel_mask(N, n);
    const uint16_t* wp = panel0 + j * pstride;
    for (int m = 0; m < R; ++m) {
      __m512 acc = _mm512_load_ps(c[j][m]);
      for (int64_t kp = steps * 16; kp < K / 2; ++kp) {
        int32_t pair;
        std::memcpy(&pair, xb + m * K + 2 * kp, 4);
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(pair), (__m512bh)_mm512_loadu_si512(wp + kp * 32));
      }
      _mm512_mask_storeu_ps(y + m * ldy + n, mask, acc);
    }
  }
}

// Rows [0, M) in tiles of 16 (the last what is left) against NR panels.
template <int NR>
void amx_bf16_rows(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* panel0, int64_t N, int64_t n0, float* y,
                   int64_t ldy, int64_t step, int& configured) {
  for (int64_t m = 0; m < M; m += 16) {
    const int R = static_cast<int>(std::min<int64_t>(16, M - m));
    if (R != configured) {
      amx::configure(amx_bf16_config(R));
      configured = R;
    }
    amx_bf16_tile<NR>(xb + m * K, R, K, panel0, N, n0, y + m * ldy, ldy, step, m == 0);
  }
}

// matmul_packed's contract on the tile unit: with slice > 0 the decode streams decode_streams
// gives (on AMX one at 1..6 rows, three far apart at 7..16), else adjacent groups of 4 panels that
// stay in L2 while every row tile passes them.
void matmul_packed_amx(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* packed, int64_t N, int64_t p0,
                       int64_t p1, float* y, int64_t ldy, int64_t slice) {
  int configured = 0;
  if (slice > 0) {
    const int streams = decode_streams(true, M);
    for (int64_t p = p0; p < p1; ++p) {
      const uint16_t* panel = packed + p * kPanel * K;
      if (streams == 1)
        amx_bf16_rows<1>(xb, M, K, panel, N, p * kPanel, y, ldy, slice, configured);
      else if (streams == 3)
        amx_bf16_rows<3>(xb, M, K, panel, N, p * kPanel, y, ldy, slice, configured);
      else
        amx_bf16_rows<4>(xb, M, K, panel, N, p * kPanel, y, ldy, slice, configured);
    }
  } else {
    int64_t p = p0;
    for (; p + 4 <= p1; p += 4) amx_bf16_rows<4>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy, 1, configured);
    for (; p < p1; ++p) amx_bf16_rows<1>(xb, M, K, packed + p * kPanel * K, N, p * kPanel, y, ldy, 1, configured);
  }
  if (configured) amx::release();
}

}  // namespace

void matmul_packed(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* packed, int64_t N, int64_t p0, int64_t p1,
                   float* y, int64_t ldy, int64_t slice) {
  if (lumen::amx_enabled()) {
    matmul_packed_amx(xb, M, K, packed, N, p0, p1, y, ldy, slice);
    return;
  }
  if (slice > 0 && decode_streams(true, M) == 3) {
    // Panels p, p + slice, p + 2 slice for p in [p0, p1): three streams far apart (7..16 rows).
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

}  // namespace lumen::cpu::LUMEN_ISA
