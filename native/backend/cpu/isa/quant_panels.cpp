// Q4_K and Q8_0 matrices (both tables; Q8_0 below Q4_K's code) repacked at load into panels of 16
// weight rows, and their products at every batch size (each type: AVX-512 with VNNI, then AVX2).
// A GGUF Q4_K row keeps each block's 256 values in 4-bit pairs of groups; a vector that holds one
// step of 4 values of 16 rows (one row per 32-bit lane) has to be gathered from 16 rows, which a
// prefill could afford once per panel and block and the decode tiles (quant_matmul.cpp) avoid by
// reducing each row's lanes at the end of every block (either costs several times the products' own
// instructions at 4..16 rows). Repacked once, a step is half a nibble load, and per activation row
// one `vpdpbusd` by the 4 activation bytes broadcast from memory, where the row tiles take a
// `maddubs` and a `vpdpwssd` (AVX2: a `maddubs` and an add, where its row tiles take a `maddubs`, a
// `madd` and an add per 32). A panel block holds the same bytes as the 16 row blocks it replaces,
// so a decode step reads as much as before. (Q6_K in the same form, and Q8_0 in llama.cpp's x86
// order of 8 f32 lanes per output, were measured and not taken: docs/performance.md.)
//
// Panel p (rows 16 p .. 16 p + 15; rows past N are zero), block b, 16 x 144 bytes:
//   [0, 32)     d of the 16 rows (f16)        [32, 64)   dmin of the 16 rows (f16)
//   [64, 256)   the 12 scale bytes of each row as 3 dwords: dword j of row r at 64 + 64 j + 4 r
//   [256, 2304) 32 chunks of 64 bytes, chunk 4 g + j (group g, step j < 4): byte 4 r + t holds
//               value 32 g + 4 j + t of row r in its low nibble and value 32 g + 16 + 4 j + t in
//               its high one
// The order of the operations per output is dot_q4_K's, quant_matmul.cpp (llama.cpp's repacked
// Q4_K, ggml_gemm_q4_K_8x8_q8_K): per block the exact integer sums of the scales' part and of the
// mins' part, acc = fma(isum, dw dx, acc), accm = fma(msum, dmin dx, accm); y = acc - accm. The
// integer sums are exact whatever their order, so every size gives the bits of the other tiles
// (kernelCheck compares them).
#include <algorithm>
#include <cstring>

#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/quant_simd.h"
#include "backend/cpu/isa/simd.h"
#include "backend/cpu/kernels.h"
#include "core/aligned.h"
#include "core/cpu_features.h"
#include "core/quant_ref.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

using namespace lumen::quant;

constexpr int NP = kPanel;                               // weight rows per panel
constexpr size_t kQ4Block = NP * sizeof(BlockQ4_K);      // a Q4_K panel's block
constexpr size_t kQ4Values = 256;                        // where its value chunks start
static_assert(kQ4Values == 64 + 3 * 64 && kQ4Values + 32 * 64 == kQ4Block, "the panel block layout above");

// The q8_K rows' scales and group sums (xd [M][K / 256], xg [M][K / 32]).
void k_act_sums(const uint8_t* xq, int64_t M, int64_t K, float* xd, int16_t* xg) {
  const size_t rb = act_row_bytes(ActQuant::q8_K, K);
  for (int64_t m = 0; m < M; ++m) {
    const auto* bl = reinterpret_cast<const BlockQ8_K*>(xq + static_cast<size_t>(m) * rb);
    for (int64_t b = 0; b < K / QK_K; ++b) {
      xd[m * (K / QK_K) + b] = bl[b].d;
      for (int g = 0; g < 8; ++g)
        xg[m * (K / 32) + b * 8 + g] = static_cast<int16_t>(bl[b].bsums[2 * g] + bl[b].bsums[2 * g + 1]);
    }
  }
}

// The activations' q8_K scales and group sums, per thread.
struct ActSums {
  AlignedBuffer xd, xg;
};
ActSums& act_sums(int64_t M, int64_t K, const uint8_t* xq) {
  thread_local ActSums s;
  const size_t nd = static_cast<size_t>(M * (K / QK_K)) * sizeof(float);
  const size_t ng = static_cast<size_t>(M * (K / 32)) * sizeof(int16_t);
  if (s.xd.size() < nd) s.xd.resize(nd, false);
  if (s.xg.size() < ng + 64) s.xg.resize(ng + 64, false);
  k_act_sums(xq, M, K, s.xd.as<float>(), s.xg.as<int16_t>());
  return s;
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Byte t of every dword of v as that dword's value (t < 4).
inline __m512i dword_byte(__m512i v, int t) {
  const __m512i ctl = _mm512_set4_epi32(static_cast<int>(0x8080800Cu + t), static_cast<int>(0x80808008u + t),
                                        static_cast<int>(0x80808004u + t), static_cast<int>(0x80808000u + t));
  return _mm512_shuffle_epi8(v, ctl);
}
// Bytes 2 h and 2 h + 1 of every dword of v as its two int16 halves (h < 2).
inline __m512i dword_pair(__m512i v, int h) {
  const int lo = 2 * h, hi = 2 * h + 1;
  const __m512i ctl = _mm512_set4_epi32(static_cast<int>(0x80008000u | (12 + hi) << 16 | (12 + lo)),
                                        static_cast<int>(0x80008000u | (8 + hi) << 16 | (8 + lo)),
                                        static_cast<int>(0x80008000u | (4 + hi) << 16 | (4 + lo)),
                                        static_cast<int>(0x80008000u | hi << 16 | lo));
  return _mm512_shuffle_epi8(v, ctl);
}
inline __m512i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// A Q4_K panel block's group scales (k_scale_min's values, one row per dword): those of groups
// 0..3 and of groups 4..7.
struct Q4Scales {
  __m512i sc03, sc47;
};
inline Q4Scales q4_scales(const uint8_t* blk) {
  const __m512i k3f = _mm512_set1_epi8(0x3F), k0f = _mm512_set1_epi8(0x0F), k03 = _mm512_set1_epi8(0x03);
  const __m512i u0 = _mm512_loadu_si512(blk + 64), u2 = _mm512_loadu_si512(blk + 192);
  return {_mm512_and_si512(u0, k3f),
          _mm512_or_si512(_mm512_and_si512(u2, k0f), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), k03), 4))};
}

// Group g's 32 values of the 16 rows as 8 steps of 4 (w[j]: values 4 j .. 4 j + 3 of every row).
inline void q4_values(const uint8_t* blk, int g, __m512i (&w)[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_loadu_si512(blk + kQ4Values + (4 * g + j) * 64);
    w[j] = _mm512_and_si512(v, m4);
    w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
}

// Group g's scale sum of one activation row (x: its bytes of the block) added to is.
inline __m512i q4_group_sum(const __m512i (&w)[8], const int8_t* x, int g, __m512i sc, __m512i is) {
  x += 32 * g;
  __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast4(x));
  for (int j = 1; j < 8; ++j) t = _mm512_dpbusd_epi32(t, w[j], bcast4(x + 4 * j));
  __m512i r = _mm512_add_epi32(is, _mm512_mullo_epi32(t, sc));
  // Added now: GCC otherwise kept the groups' products and scaled them at the block's end (spilled).
  asm volatile("" : "+v"(r));
  return r;
}

// Block b's mins part and the f32 steps of R activation rows (is: each row's scale sum).
template <int R>
inline void q4_finish(const uint8_t* blk, const __m512i* is, const float* xd, const int16_t* xg, int64_t nb,
                      int64_t b, float (&acc)[R][NP], float (&accm)[R][NP]) {
  const __m512i k3f = _mm512_set1_epi8(0x3F), k0f = _mm512_set1_epi8(0x0F), k03 = _mm512_set1_epi8(0x03);
  const __m512i u1 = _mm512_loadu_si512(blk + 128), u2 = _mm512_loadu_si512(blk + 192);
  const __m512i mn03 = _mm512_and_si512(u1, k3f);
  const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), k0f),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), k03), 4));
  const __m512i mp[4] = {dword_pair(mn03, 0), dword_pair(mn03, 1), dword_pair(mn47, 0), dword_pair(mn47, 1)};
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
#pragma GCC unroll 8
  for (int m = 0; m < R; ++m) {
    const int16_t* g2 = xg + (m * nb + b) * 8;
    __m512i ms = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp[0], bcast4(g2));
    for (int j = 1; j < 4; ++j) ms = _mm512_dpwssd_epi32(ms, mp[j], bcast4(g2 + 2 * j));
    const __m512 x = _mm512_set1_ps(xd[m * nb + b]);
    _mm512_store_ps(acc[m], _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[m]), _mm512_mul_ps(dw, x), _mm512_load_ps(acc[m])));
    _mm512_store_ps(accm[m], _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dm, x), _mm512_load_ps(accm[m])));
  }
}

// Q4_K: S panels (pp[s], each from block 0) against R activation rows (xs[m]; their scales
// xd[m * nb] and group sums xg[m * 8 nb]): ys[s][m * ldy + i] for the first nvalid[s] rows i of
// panel s.
template <int R, int S>
void tile_q4(const uint8_t* const* pp, const BlockQ8_K* const* xs, const float* xd, const int16_t* xg, int64_t nb,
             float* const* ys, int64_t ldy, const int* nvalid) {
  // The f32 sums wait in memory between blocks (touched once per block; in registers they left
  // too few for a block's integer work at 8 rows).
  alignas(64) float acc[S][R][NP] = {}, accm[S][R][NP] = {};
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (R == 1 && S > 1) {
      // Decode streams at one row: the S panels' blocks a group of each in turn (as the AVX2 tile
      // does), so each group's 8 activation broadcasts serve all S panels, where a block of each
      // in turn built them once per panel; the next block's bytes asked for a group's share at a
      // time as below. Each block's groups are summed in the same order, so the same bits.
      // (Measured: docs/performance.md, thirty-second session.)
      const int8_t* x = xs[0][b].qs;
      asm("" : "+r"(x));
      const uint8_t* blk[S];
      __m512i sc03[S], sc47[S], is[S];
      for (int s = 0; s < S; ++s) {
        blk[s] = pp[s] + static_cast<size_t>(b) * kQ4Block;
        const Q4Scales sc = q4_scales(blk[s]);
        sc03[s] = sc.sc03;
        sc47[s] = sc.sc47;
        is[s] = _mm512_setzero_si512();
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s) {
          for (int l = 0; l < (g == 7 ? 8 : 4); ++l) _mm_prefetch(reinterpret_cast<const char*>(blk[s] + kQ4Block + 256 * g + 64 * l), _MM_HINT_T0);
          __m512i w[8];
          q4_values(blk[s], g, w);
          is[s] = q4_group_sum(w, x, g, dword_byte(g < 4 ? sc03[s] : sc47[s], g % 4), is[s]);
        }
        // Keeps GCC from loading and unpacking later groups' values ahead (spilled).
        asm volatile("" ::: "memory");
      }
      for (int s = 0; s < S; ++s) q4_finish<1>(blk[s], &is[s], xd, xg, nb, b, acc[s], accm[s]);
      continue;
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const uint8_t* blk = pp[s] + static_cast<size_t>(b) * kQ4Block;
      const Q4Scales sc = q4_scales(blk);
      __m512i is[R];
      // The activation bytes as broadcast memory operands of the vpdpbusd: the empty asm keeps GCC
      // from loading each broadcast once for the S panels (64 vectors per row: spilled).
      const int8_t* xq[R];
      for (int m = 0; m < R; ++m) {
        is[m] = _mm512_setzero_si512();
        xq[m] = xs[m][b].qs;
        asm("" : "+r"(xq[m]));
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i scg = dword_byte(g < 4 ? sc.sc03 : sc.sc47, g % 4);
        // The stream's bytes a block ahead, a group's share (the block's last 4 lines with group 7).
        for (int l = 0; l < (g == 7 ? 8 : 4); ++l) _mm_prefetch(reinterpret_cast<const char*>(blk + kQ4Block + 256 * g + 64 * l), _MM_HINT_T0);
        __m512i w[8];
        q4_values(blk, g, w);
#pragma GCC unroll 8
        for (int m = 0; m < R; ++m) is[m] = q4_group_sum(w, xq[m], g, scg, is[m]);
        // Keeps GCC from loading and unpacking later groups' values ahead (spilled).
        asm volatile("" ::: "memory");
      }
      q4_finish<R>(blk, is, xd, xg, nb, b, acc[s], accm[s]);
    }
  }
  for (int s = 0; s < S; ++s) {
    const __mmask16 keep = static_cast<__mmask16>((1u << nvalid[s]) - 1);
    for (int m = 0; m < R; ++m)
      _mm512_mask_storeu_ps(ys[s] + m * ldy, keep, _mm512_sub_ps(_mm512_load_ps(acc[s][m]), _mm512_load_ps(accm[s][m])));
  }
}

#else
// AVX2 (no VNNI), the same contract: the same panels as two halves of 8 rows (the first and the
// second 32 bytes of each 64-byte vector), one after the other; per step and activation row a
// `maddubs` (values below 16: its int16 pair sums add up over a group of 32 without saturating,
// |sum| <= 8 x 2 x 15 x 128) and an add, per group one `madd` by the scale. The same integer sums
// and f32 operations per output.

// Byte t of every dword of v in both int16 halves of that dword (t < 4).
inline __m256i dword_byte2(__m256i v, int t) {
  const auto d = [t](unsigned o) { return static_cast<int>(0x80008000u | (o + t) << 16 | (o + t)); };
  return _mm256_shuffle_epi8(v, _mm256_setr_epi32(d(0), d(4), d(8), d(12), d(0), d(4), d(8), d(12)));
}
// Bytes 2 h and 2 h + 1 of every dword of v as its two int16 halves (h < 2).
inline __m256i dword_pair(__m256i v, int h) {
  const auto d = [h](unsigned o) { return static_cast<int>(0x80008000u | (o + 2 * h + 1) << 16 | (o + 2 * h)); };
  return _mm256_shuffle_epi8(v, _mm256_setr_epi32(d(0), d(4), d(8), d(12), d(0), d(4), d(8), d(12)));
}
inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Group g of one block's scale sums for one activation row (x: its bytes of the block), both 8-row
// halves at once: per step j one load of each half's 32 bytes and two activation broadcasts for
// the four `maddubs` of both halves, where a half at a time loads the broadcasts twice. (Half at a
// time, GCC also loaded each weight vector twice, for the low nibbles' `vpand` and for the shift;
// docs/performance.md.) At two rows, 2R accumulators and the rest no longer fit in 16 registers,
// and it measured slower than a half at a time. g must be a constant (the callers unroll).
// sc: the group's half of the scales (sc03 for g < 4, sc47 after), per 8-row half.
inline void q4_group_r1(const uint8_t* blk, int g, const int8_t* x, const __m256i (&sc)[2], __m256i (&is)[2]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i s16[2];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ4Values + (4 * g + j) * 64));
    __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ4Values + (4 * g + j) * 64 + 32));
    asm("" : "+x"(v0), "+x"(v1));  // loaded once, not again for the shift
    const __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
    const __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
    const __m256i xl = bcast4(x + 32 * g + 4 * j), xh = bcast4(x + 32 * g + 4 * j + 16);
    const __m256i t0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, xl), _mm256_maddubs_epi16(hi0, xh));
    const __m256i t1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, xl), _mm256_maddubs_epi16(hi1, xh));
    s16[0] = j ? _mm256_add_epi16(s16[0], t0) : t0;
    s16[1] = j ? _mm256_add_epi16(s16[1], t1) : t1;
  }
  for (int h = 0; h < 2; ++h) is[h] = _mm256_add_epi32(is[h], _mm256_madd_epi16(s16[h], dword_byte2(sc[h], g % 4)));
}

// The scales of a panel block as vectors per 8-row half (k_scale_min's values, one row per dword):
// those of groups 0..3 and of groups 4..7 (the mins: q4_finish).
struct Q4Scales {
  __m256i sc03[2], sc47[2];
};
inline Q4Scales q4_scales(const uint8_t* blk) {
  const __m256i k3f = _mm256_set1_epi8(0x3F), k0f = _mm256_set1_epi8(0x0F), k03 = _mm256_set1_epi8(0x03);
  Q4Scales r;
  for (int h = 0; h < 2; ++h) {
    const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 + 32 * h));
    const __m256i u2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 192 + 32 * h));
    r.sc03[h] = _mm256_and_si256(u0, k3f);
    r.sc47[h] = _mm256_or_si256(_mm256_and_si256(u2, k0f), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), k03), 4));
  }
  return r;
}

// One row against one panel's block: the groups in turn, the next block's bytes asked for a
// group's share at a time (the block's last 4 lines with group 7), not all 36 lines at the block's
// start (measured slower from memory: docs/performance.md).
inline void q4_block_r1(const uint8_t* blk, const int8_t* x, const Q4Scales& sc, __m256i (&is)[2]) {
  is[0] = is[1] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    for (int l = 0; l < (g == 7 ? 8 : 4); ++l) _mm_prefetch(reinterpret_cast<const char*>(blk + kQ4Block + 256 * g + 64 * l), _MM_HINT_T0);
    q4_group_r1(blk, g, x, g < 4 ? sc.sc03 : sc.sc47, is);
    asm volatile("" ::: "memory");  // keeps GCC from loading and unpacking later groups ahead (spilled)
  }
}

// A block's mins part and the f32 steps of R activation rows (is: each row's scale sums per half).
template <int R>
inline void q4_finish(const uint8_t* blk, const __m256i (&is)[R][2], const float* xd, const int16_t* xg, int64_t nb,
                      int64_t b, float (&acc)[R][NP], float (&accm)[R][NP]) {
  const __m256i k3f = _mm256_set1_epi8(0x3F), k0f = _mm256_set1_epi8(0x0F), k03 = _mm256_set1_epi8(0x03);
  for (int h = 0; h < 2; ++h) {
    const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i u2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 192 + 32 * h));
    const __m256i mn03 = _mm256_and_si256(u1, k3f);
    const __m256i mn47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), k0f),
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), k03), 4));
    const __m256i mp[4] = {dword_pair(mn03, 0), dword_pair(mn03, 1), dword_pair(mn47, 0), dword_pair(mn47, 1)};
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)));
    for (int m = 0; m < R; ++m) {
      const int16_t* g2 = xg + (m * nb + b) * 8;
      __m256i ms = _mm256_madd_epi16(mp[0], bcast4(g2));
      for (int j = 1; j < 4; ++j) ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[j], bcast4(g2 + 2 * j)));
      const __m256 x = _mm256_set1_ps(xd[m * nb + b]);
      float* a = acc[m] + 8 * h;
      float* am = accm[m] + 8 * h;
      _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[m][h]), _mm256_mul_ps(dw, x), _mm256_load_ps(a)));
      _mm256_store_ps(am, _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, x), _mm256_load_ps(am)));
    }
  }
}

template <int R, int S>
void tile_q4(const uint8_t* const* pp, const BlockQ8_K* const* xs, const float* xd, const int16_t* xg, int64_t nb,
             float* const* ys, int64_t ldy, const int* nvalid) {
  alignas(32) float acc[S][R][NP] = {}, accm[S][R][NP] = {};
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (R == 1 && S > 1) {
      // Decode streams at one row: the S panels' blocks a group (256 bytes) of each in turn, not a
      // block (2304 bytes) of each, and no software prefetch: the hardware's then keeps ahead of
      // every stream, where whole blocks in turn, prefetched or not, left the core waiting on each
      // block's lines (docs/performance.md, twenty-first session). The same integer sums per block
      // (the groups in the same order), so the same bits.
      const int8_t* x = xs[0][b].qs;
      asm("" : "+r"(x));
      const uint8_t* blk[S];
      Q4Scales sc[S];
      __m256i is[S][1][2];
      for (int s = 0; s < S; ++s) {
        blk[s] = pp[s] + static_cast<size_t>(b) * kQ4Block;
        sc[s] = q4_scales(blk[s]);
        is[s][0][0] = is[s][0][1] = _mm256_setzero_si256();
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s) q4_group_r1(blk[s], g, x, g < 4 ? sc[s].sc03 : sc[s].sc47, is[s][0]);
        asm volatile("" ::: "memory");
      }
      for (int s = 0; s < S; ++s) q4_finish<1>(blk[s], is[s], xd, xg, nb, b, acc[s], accm[s]);
      continue;
    }
    for (int s = 0; s < S; ++s) {
      const uint8_t* blk = pp[s] + static_cast<size_t>(b) * kQ4Block;
      const int8_t* xq[R];
      for (int m = 0; m < R; ++m) {
        xq[m] = xs[m][b].qs;
        asm("" : "+r"(xq[m]));
      }
      const Q4Scales sc = q4_scales(blk);
      __m256i is[R][2];
      if constexpr (R == 1) {
        q4_block_r1(blk, xq[0], sc, is[0]);
      } else {
        for (size_t l = 0; l < kQ4Block; l += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kQ4Block + l), _MM_HINT_T0);
        for (int h = 0; h < 2; ++h) {
          for (int m = 0; m < R; ++m) is[m][h] = _mm256_setzero_si256();
          // Each group's scale vector made once per block half by a constant shuffle (in the
          // rolled group loop GCC built each control with a dozen scalar instructions; unrolling
          // that loop instead measured slower at 7 rows).
          alignas(32) __m256i scv[8];
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) scv[g] = dword_byte2(g < 4 ? sc.sc03[h] : sc.sc47[h], g % 4);
          for (int g = 0; g < 8; ++g) {
            const __m256i scg = scv[g];
            __m256i w[8];
            for (int j = 0; j < 4; ++j) {
              const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ4Values + (4 * g + j) * 64 + 32 * h));
              w[j] = _mm256_and_si256(v, m4);
              w[j + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
            for (int m = 0; m < R; ++m) {
              const int8_t* x = xq[m] + 32 * g;
              __m256i s16 = _mm256_maddubs_epi16(w[0], bcast4(x));
              for (int j = 1; j < 8; ++j) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[j], bcast4(x + 4 * j)));
              is[m][h] = _mm256_add_epi32(is[m][h], _mm256_madd_epi16(s16, scg));
            }
            asm volatile("" ::: "memory");
          }
        }
      }
      q4_finish<R>(blk, is, xd, xg, nb, b, acc[s], accm[s]);
    }
  }
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < R; ++m) {
      alignas(32) float out[NP];
      for (int h = 0; h < 2; ++h)
        _mm256_store_ps(out + 8 * h, _mm256_sub_ps(_mm256_load_ps(acc[s][m] + 8 * h), _mm256_load_ps(accm[s][m] + 8 * h)));
      std::memcpy(ys[s] + m * ldy, out, static_cast<size_t>(nvalid[s]) * sizeof(float));
    }
}
#endif

// Q4_K panels [p0, p1) of the N x K matrix w.
void pack_q4(const void* w, int64_t N, int64_t K, int64_t p0, int64_t p1, void* out) {
  const int64_t nb = K / QK_K;
  const size_t wrow = row_bytes(DType::q4_K, K);
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* dst = static_cast<uint8_t*>(out) + static_cast<size_t>(p * nb + b) * kQ4Block;
      std::memset(dst, 0, kQ4Block);
      for (int r = 0; r < NP && p * NP + r < N; ++r) {
        BlockQ4_K blk;
        std::memcpy(&blk, static_cast<const uint8_t*>(w) + static_cast<size_t>(p * NP + r) * wrow + static_cast<size_t>(b) * sizeof blk,
                    sizeof blk);
        std::memcpy(dst + 2 * r, &blk.d, 2);
        std::memcpy(dst + 32 + 2 * r, &blk.dmin, 2);
        for (int j = 0; j < 3; ++j) std::memcpy(dst + 64 + 64 * j + 4 * r, blk.scales + 4 * j, 4);
        for (int g = 0; g < 8; ++g) {
          // The group's 32 values (its nibble of qs[32 (g / 2) ..]); values l and 16 + l in byte l.
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * (g / 2)));
          const __m256i v = _mm256_and_si256(g % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
          const __m128i b16 = _mm_or_si128(_mm256_castsi256_si128(v), _mm_slli_epi16(_mm256_extracti128_si256(v, 1), 4));
          alignas(16) uint8_t t[16];
          _mm_store_si128(reinterpret_cast<__m128i*>(t), b16);
          for (int j = 0; j < 4; ++j) std::memcpy(dst + kQ4Values + (4 * g + j) * 64 + 4 * r, t + 4 * j, 4);
        }
      }
    }
}

// R activation rows from m against the S panels.
template <int R, int S>
void tile_rows(const uint8_t* const* pp, const uint8_t* xq, size_t rb, const ActSums& as, int64_t m, int64_t nb,
               float* const* ys, int64_t ldy, const int* nvalid) {
  const BlockQ8_K* xs[R];
  for (int i = 0; i < R; ++i) xs[i] = reinterpret_cast<const BlockQ8_K*>(xq + static_cast<size_t>(m + i) * rb);
  float* y[S];
  for (int s = 0; s < S; ++s) y[s] = ys[s] + m * ldy;
  tile_q4<R, S>(pp, xs, as.xd.as<float>() + m * nb, as.xg.as<int16_t>() + m * nb * 8, nb, y, ldy, nvalid);
}

// Rows m .. m + r (r < 8) against one panel.
void tile_rest(int64_t r, const uint8_t* pp, const uint8_t* xq, size_t rb, const ActSums& as, int64_t m, int64_t nb,
               float* ys, int64_t ldy, int nvalid) {
  switch (r) {
    case 1: return tile_rows<1, 1>(&pp, xq, rb, as, m, nb, &ys, ldy, &nvalid);
    case 2: return tile_rows<2, 1>(&pp, xq, rb, as, m, nb, &ys, ldy, &nvalid);
    case 3: return tile_rows<3, 1>(&pp, xq, rb, as, m, nb, &ys, ldy, &nvalid);
    case 4: return tile_rows<4, 1>(&pp, xq, rb, as, m, nb, &ys, ldy, &nvalid);
    case 5: return tile_rows<5, 1>(&pp, xq, rb, as, m, nb, &ys, ldy, &nvalid);
    case 6: return tile_rows<6, 1>(&pp, xq, rb, as, m, nb, &ys, ldy, &nvalid);
    default: return tile_rows<7, 1>(&pp, xq, rb, as, m, nb, &ys, ldy, &nvalid);
  }
}

void panels_q4(const void* xq, int64_t M, int64_t K, const void* packed, int64_t N, int64_t p0, int64_t p1, float* y,
               int64_t ldy, int64_t slice) {
  const int64_t nb = K / QK_K;
  const size_t rb = act_row_bytes(ActQuant::q8_K, K);
  const size_t panel = static_cast<size_t>(nb) * kQ4Block;
  const auto* x = static_cast<const uint8_t*>(xq);
  const auto* base = static_cast<const uint8_t*>(packed);
  const ActSums& as = act_sums(M, K, x);
  const auto valid = [&](int64_t p) { return static_cast<int>(std::clamp<int64_t>(N - p * NP, 0, NP)); };
  if (slice > 0) {
    // Decode streams: panels p, p + slice, p + 2 slice, p + 3 slice side by side (those past N
    // skipped), for 1..3 activation rows. The streams' first blocks are asked for at once (from
    // there on the hardware prefetcher keeps ahead of the AVX2 one-row tile, and the other tiles
    // prefetch a block ahead).
    for (int s = 0; s < 4; ++s)
      if (valid(p0 + s * slice) > 0)
        for (size_t l = 0; l < kQ4Block; l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(base + static_cast<size_t>(p0 + s * slice) * panel + l), _MM_HINT_T0);
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* pp[4];
      float* ys[4];
      int nv[4], count = 0;
      for (int s = 0; s < 4; ++s) {
        const int64_t q = p + s * slice;
        if (valid(q) == 0) continue;
        pp[count] = base + static_cast<size_t>(q) * panel;
        ys[count] = y + q * NP;
        nv[count++] = valid(q);
      }
      if (count == 4 && M == 1) {
        tile_rows<1, 4>(pp, x, rb, as, 0, nb, ys, ldy, nv);
        continue;
      }
      for (int s = 0; s < count; ++s)
        for (int64_t m = 0; m < M; m += 7) tile_rest(std::min<int64_t>(7, M - m), pp[s], x, rb, as, m, nb, ys[s], ldy, nv[s]);
    }
    return;
  }
  // Panels p0 .. p1 in blocks that stay in L2 while every tile of 8 activation rows passes them
  // (the first tile's prefetches bring them in).
  const int npan = static_cast<int>(std::clamp<int64_t>((int64_t{96} << 10) / static_cast<int64_t>(panel), 1, 8));
  for (int64_t q0 = p0; q0 < p1; q0 += npan) {
    const int64_t q1 = std::min(p1, q0 + npan);
    for (int64_t m = 0; m < M; m += 8)
      for (int64_t q = q0; q < q1; ++q) {
        const uint8_t* pp = base + static_cast<size_t>(q) * panel;
        float* ys = y + q * NP;
        int nv = valid(q);
        if (m + 8 <= M)
          tile_rows<8, 1>(&pp, x, rb, as, m, nb, &ys, ldy, &nv);
        else
          tile_rest(M - m, pp, x, rb, as, m, nb, ys, ldy, nv);
      }
  }
}


// ---------------------------------------------------------------------------------------------
// Q8_0 panels. Per block the exact integer sum of each row's 32 products, then
// acc = fma(sumi, dw dx, acc) in one f32 sum per output: the per-block order of llama.cpp's scalar
// `ggml_vec_dot_q8_0_q8_0` and of its repacked Q8_0 kernels (`ggml_gemv_q8_0_4x8_q8_0`), and of
// core/quant_ref.cpp's vec_dot, which kernelCheck holds these kernels to bit for bit. (llama.cpp's
// x86 `vec_dot` keeps 8 f32 lanes per output instead, which costs a conversion and an FMA per 32
// or 64 products; that is what the row tiles of quant_matmul.cpp reproduce, and what bounded them:
// docs/performance.md, seventeenth and nineteenth sessions.)
//
// Panel p (rows 16 p .. 16 p + 15; rows past N are zero), blocks in pairs (2 i, 2 i + 1), 1088 bytes
// a pair (17 cache lines, so every 64-byte vector is aligned):
//   [0, 32)  d of the 16 rows in block 2 i (f16)   [32, 64)  the same for block 2 i + 1
//   [64 + 512 h, 576 + 512 h)  block 2 i + h: 8 chunks of 64 bytes, chunk j holding bytes
//       4 j .. 4 j + 3 of row r at 4 r, each ^ kQ8Bias (AVX-512: + 128, unsigned, as vpdpbusd takes
//       them; AVX2: as stored, signed, for the vpsignb form)
// A matrix with an odd number of blocks ends on a half-filled pair (zeros).
// The activations' side (panel_act). AVX-512: per row and block a 40-byte record, -128 x the sum
// of the 32 int8 values (int32, the + 128's share of the products), dx = d as f32, then the 32
// int8 values; the records of a block's rows adjacent within groups of 8 rows (group g: rows 8 g ..
// 8 g + G - 1, G = min(8, M - 8 g), from record 8 g nb; block b of its row r at record b G + r), so
// a tile of up to 8 rows reads one run per block at fixed offsets. AVX2: dx [M][nb] only.
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
constexpr uint8_t kQ8Bias = 0x80;
#else
constexpr uint8_t kQ8Bias = 0;
#endif
constexpr size_t kQ8Pair = 64 + 2 * 512;

size_t q8_panel_bytes(int64_t K) { return static_cast<size_t>((K / QK + 1) / 2) * kQ8Pair; }

void pack_q8(const void* w, int64_t N, int64_t K, int64_t p0, int64_t p1, void* out) {
  const int64_t nb = K / QK;
  const size_t wrow = row_bytes(DType::q8_0, K), panel = q8_panel_bytes(K);
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* dst = static_cast<uint8_t*>(out) + static_cast<size_t>(p) * panel;
    std::memset(dst, 0, panel);
    for (int r = 0; r < NP && p * NP + r < N; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        BlockQ8_0 blk;
        std::memcpy(&blk, static_cast<const uint8_t*>(w) + static_cast<size_t>(p * NP + r) * wrow + static_cast<size_t>(b) * sizeof blk,
                    sizeof blk);
        uint8_t* pair = dst + static_cast<size_t>(b / 2) * kQ8Pair;
        std::memcpy(pair + 32 * (b % 2) + 2 * r, &blk.d, 2);
        for (int j = 0; j < 8; ++j)
          for (int t = 0; t < 4; ++t)
            pair[64 + 512 * (b % 2) + 64 * j + 4 * r + t] = static_cast<uint8_t>(blk.qs[4 * j + t] ^ kQ8Bias);
      }
  }
}

// Row `row` of the panels as f32 (the embedding's lookup when its matrix is also the head).
void q8_panel_row(const void* packed, int64_t K, int64_t row, float* out) {
  const int64_t nb = K / QK;
  const auto* base = static_cast<const uint8_t*>(packed) + static_cast<size_t>(row / NP) * q8_panel_bytes(K);
  const int r = static_cast<int>(row % NP);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pair = base + static_cast<size_t>(b / 2) * kQ8Pair;
    uint16_t d;
    std::memcpy(&d, pair + 32 * (b % 2) + 2 * r, 2);
    const float df = h2f(d);
    for (int j = 0; j < 8; ++j)
      for (int t = 0; t < 4; ++t)
        out[b * QK + 4 * j + t] = static_cast<float>(static_cast<int8_t>(pair[64 + 512 * (b % 2) + 64 * j + 4 * r + t] ^ kQ8Bias)) * df;
  }
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// One row and block's record (see above).
struct Q8ActRec {
  int32_t corr;
  float dx;
  int8_t qs[32];
};
static_assert(sizeof(Q8ActRec) == 40);
size_t q8_act_bytes(int64_t M, int64_t K) { return static_cast<size_t>(M * (K / QK)) * sizeof(Q8ActRec); }
// The first record of row m's group of 8 rows, and the rows in that group (its records per block).
inline int64_t q8_group_start(int64_t nb, int64_t m) { return m / 8 * 8 * nb; }
inline int64_t q8_group_rows(int64_t M, int64_t m) { return std::min<int64_t>(8, M - m / 8 * 8); }

// A block's record from its 32 int8 values q and its widened scale dx.
inline void put_rec(Q8ActRec& rec, __m256i q, float dx) {
  // The sum of (q + 128) as unsigned bytes, 4 partial sums of 8; minus 32 x 128.
  const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(kQ8Bias))), _mm256_setzero_si256());
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
  const int sum = static_cast<int>(_mm_cvtsi128_si64(_mm_add_epi64(h, _mm_unpackhi_epi64(h, h)))) - 32 * 128;
  rec.corr = -128 * sum;
  rec.dx = dx;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec.qs), q);
}

void q8_act(const void* xq, int64_t M, int64_t K, void* out) {
  const int64_t nb = K / QK;
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  for (int64_t m = 0; m < M; ++m) {
    Q8ActRec* g = static_cast<Q8ActRec*>(out) + q8_group_start(nb, m);
    const int64_t G = q8_group_rows(M, m), r = m % 8;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_0& xb = x[m * nb + b];
      put_rec(g[b * G + r], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs)), h2f(xb.d));
    }
  }
}

// quantize_act's q8_0 rows (xq) and q8_act's records (out) in one pass over x: the same bytes as
// the two passes (kernelCheck), without reading the quantized rows back.
void q8_quantize_act(const float* x, int64_t M, int64_t K, void* xq, void* out) {
  const int64_t nb = K / QK;
  for (int64_t m = 0; m < M; ++m) {
    Q8ActRec* g = static_cast<Q8ActRec*>(out) + q8_group_start(nb, m);
    const int64_t G = q8_group_rows(M, m), r = m % 8;
    q8_0_blocks(x + m * K, static_cast<BlockQ8_0*>(xq) + m * nb, nb,
                [&](int64_t b, __m256i q, float dx) { put_rec(g[b * G + r], q, dx); });
  }
}
#else
size_t q8_act_bytes(int64_t M, int64_t K) { return static_cast<size_t>(M * (K / QK)) * sizeof(float); }

void q8_act(const void* xq, int64_t M, int64_t K, void* out) {
  const int64_t n = M * (K / QK);
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  auto* dx = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i) dx[i] = h2f(x[i].d);
}

// quantize_act's q8_0 rows (xq) and q8_act's scales (out) in one pass over x (blocks of
// consecutive rows are consecutive in x).
void q8_quantize_act(const float* x, int64_t M, int64_t K, void* xq, void* out) {
  auto* dx = static_cast<float*>(out);
  q8_0_blocks(x, static_cast<BlockQ8_0*>(xq), M * (K / QK), [dx](int64_t i, __m256i, float d) { dx[i] = d; });
}
#endif

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Pairs ahead that a tile of R activation rows asks for in each stream: for 1..3 rows (the decode
// streams) two (on the AMD EPYC Zen 5 none of 0, 2, 3, 4 and 6 beat one, seventeenth session; on an
// Intel Xeon the one-row tile read at 0.72 of a plain read one pair ahead and at 0.89 two or three
// ahead, and the engine's c=1 decode ran 2 % faster: docs/performance.md, forty-sixth session);
// 4+ rows spend 4+ times as long on a pair, and read from memory faster 2..6 pairs ahead than 1
// (twenty-fifth session); 8 rows, with the far lines below, 8 pairs ahead (4 and 6 slower, 12 and
// 16 no faster; 8 at 4 rows slower: thirty-first session).
template <int R>
constexpr int kQ8Ahead = R >= 8 ? 8 : R >= 4 ? 4 : 2;
// Tiles of 4+ rows also ask for lines of each pair 48 KiB further on, to L2: with the stream's far
// end already requested, the tiles from memory ran faster at 4 and 8 rows (on the AMD EPYC 8 to 192
// KiB and 1..17 lines a pair measured, 2 lines fastest; without them the 8-row tile 8 pairs ahead
// was no faster than 4); at 1..3 rows, where the tiles are bound by the read alone, they ran slower
// (docs/performance.md, thirty-first session). On an Intel Xeon 8 lines a pair read x1.15 faster
// than 2 at 8 rows (17 x1.03) and the engine's c=8 decode ran x1.10 (forty-sixth session), where on
// the EPYC 8 had read ~6 % slower than 2: so 8 on Intel CPUs, 2 elsewhere. Near a matrix's end they
// point past it: prefetches never fault.
constexpr size_t kQ8FarBytes = size_t{48} << 10;
inline int q8_far_lines() {
  static const int lines = lumen::cpu_features().intel ? 8 : 2;
  return lines;
}
// S panels (pp[s]) against R activation rows (a: their records of block 0, the first of the tile's
// group, bstride records per block): ys[s][m * ldy + i] for the first nvalid[s] rows i of panel s.
// Per row and block one chain of 8 vpdpbusd from the correction, each by its 4 activation bytes
// broadcast from the record, then one f32 fma. (The records replaced per-row pointers into the
// q8_0 rows and two side arrays, which GCC kept on the stack at 8 rows; vpdpbusd with an embedded
// broadcast, and two chains of 4 per row, were not measurably faster: docs/performance.md,
// twenty-fifth session.)
template <int R, int S>
void tile_q8(const uint8_t* const* pp, const Q8ActRec* a, int64_t bstride, int64_t nb, float* const* ys, int64_t ldy,
             const int* nvalid) {
  const int far_lines = R >= 4 ? q8_far_lines() : 0;
  __m512 acc[S][R];
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < R; ++m) acc[s][m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, a += bstride) {
    const int64_t h = b & 1;
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const uint8_t* pair = pp[s] + static_cast<size_t>(b >> 1) * kQ8Pair;
      const uint8_t* ch = pair + 64 + 512 * h;
      for (int l = 0; l < (h ? 9 : 8); ++l)
        _mm_prefetch(reinterpret_cast<const char*>(pair + kQ8Ahead<R> * kQ8Pair + 64 * (8 * h + l)), _MM_HINT_T0);
      if constexpr (R >= 4)
        if (h == 0)
          for (int l = 0; l < far_lines; ++l) _mm_prefetch(reinterpret_cast<const char*>(pair + kQ8FarBytes + 64 * l), _MM_HINT_T2);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair + 32 * h)));
      __m512i w[8];
      for (int j = 0; j < 8; ++j) w[j] = _mm512_loadu_si512(ch + 64 * j);
      // The rows' chains side by side (step j of every row, then step j + 1).
      __m512i t[R];
#pragma GCC unroll 8
      for (int m = 0; m < R; ++m) t[m] = _mm512_set1_epi32(a[m].corr);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
#pragma GCC unroll 8
        for (int m = 0; m < R; ++m) {
          int32_t q4;
          std::memcpy(&q4, a[m].qs + 4 * j, 4);
          t[m] = _mm512_dpbusd_epi32(t[m], w[j], _mm512_set1_epi32(q4));
        }
#pragma GCC unroll 8
      for (int m = 0; m < R; ++m)
        acc[s][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[m]), _mm512_mul_ps(dw, _mm512_set1_ps(a[m].dx)), acc[s][m]);
    }
  }
  for (int s = 0; s < S; ++s) {
    const __mmask16 keep = static_cast<__mmask16>((1u << nvalid[s]) - 1);
    for (int m = 0; m < R; ++m) _mm512_mask_storeu_ps(ys[s] + m * ldy, keep, acc[s][m]);
  }
}

// Rows m .. m + R - 1 (within one group of 8) against the S panels; xq is not read (the records
// hold the activations).
template <int R, int S>
void q8_rows(const uint8_t* const* pp, const uint8_t* /*xq*/, const void* xa, int64_t M, int64_t m, int64_t nb,
             float* const* ys, int64_t ldy, const int* nvalid) {
  float* y[S];
  for (int s = 0; s < S; ++s) y[s] = ys[s] + m * ldy;
  const int64_t G = q8_group_rows(M, m);
  tile_q8<R, S>(pp, static_cast<const Q8ActRec*>(xa) + q8_group_start(nb, m) + m % 8, G, nb, y, ldy, nvalid);
}
#else
// AVX2 (no VNNI), the same contract and the same bits: the panels as two halves of 8 rows (the first
// and the second 32 bytes of each chunk), one after the other; per chunk and half one load and
// |w| (vpsignb), and per activation row the 4 bytes broadcast, their signs taken from w, a
// `maddubs` (|w| <= 128, |x| <= 127: its pair sums never saturate), a `madd` by ones and an add.
// The activations never hold -128 (q8_0 rounds to |q| <= 127), which vpsignb could not negate;
// a weight byte of -128 is |w| = 128 as the unsigned operand, exact. Then
// per block and half one conversion and one FMA per row for all 8 outputs (the row tiles of
// quant_matmul.cpp pay those per output). The f32 sums wait in memory between blocks.
template <int R, int S>
void tile_q8(const uint8_t* const* pp, const BlockQ8_0* const* xs, const float* dx, int64_t nb, float* const* ys, int64_t ldy,
             const int* nvalid) {
  alignas(32) float acc[S][R][NP] = {};
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t h = b & 1;
    for (int s = 0; s < S; ++s) {
      const uint8_t* pair = pp[s] + static_cast<size_t>(b >> 1) * kQ8Pair;
      const uint8_t* ch = pair + 64 + 512 * h;
      // No software prefetch: on Zen 3 the hardware's alone read the streams fastest (one pair
      // ahead, as on AVX-512, measured slower at 1 and 2 rows, no faster at 8 and 64:
      // docs/performance.md, nineteenth session).
      for (int v = 0; v < 2; ++v) {
        // Each row's step written as one asm statement, its broadcast from memory: from the
        // intrinsics GCC kept the broadcasts for the second half in general registers or on the
        // stack and computed a half's 64 products before summing them, spilling each (at 8 rows
        // ~25 % slower; docs/performance.md, nineteenth session). The pointers are laundered per
        // half for the same reason.
        using Quad = uint8_t[4];  // the 4 activation bytes of a step, the asm's memory operand
        const Quad* xf[R];
        __m256i t[R];
#pragma GCC unroll 8
        for (int m = 0; m < R; ++m) {
          xf[m] = reinterpret_cast<const Quad*>(xs[m][b].qs);
          asm("" : "+r"(xf[m]));
          t[m] = _mm256_setzero_si256();
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ch + 64 * j + 32 * v));
          const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
          for (int m = 0; m < R; ++m) {
            __m256i tmp;
            asm("vbroadcastss %[x], %[p]\n\tvpsignb %[w], %[p], %[p]\n\tvpmaddubsw %[p], %[aw], %[p]\n\t"
                "vpmaddwd %[ones], %[p], %[p]\n\tvpaddd %[p], %[t], %[t]"
                : [t] "+x"(t[m]), [p] "=&x"(tmp)
                : [x] "m"(xf[m][j]), [w] "x"(w), [aw] "x"(aw), [ones] "x"(ones));
          }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair + 32 * h + 16 * v)));
        for (int m = 0; m < R; ++m) {
          float* a = acc[s][m] + 8 * v;
          _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[m]), _mm256_mul_ps(dw, _mm256_set1_ps(dx[m * nb + b])),
                                             _mm256_load_ps(a)));
        }
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < R; ++m) std::memcpy(ys[s] + m * ldy, acc[s][m], static_cast<size_t>(nvalid[s]) * sizeof(float));
}

template <int R, int S>
void q8_rows(const uint8_t* const* pp, const uint8_t* xq, const void* xa, int64_t /*M*/, int64_t m, int64_t nb,
             float* const* ys, int64_t ldy, const int* nvalid) {
  const size_t rb = static_cast<size_t>(nb) * sizeof(BlockQ8_0);
  const BlockQ8_0* xs[R];
  for (int i = 0; i < R; ++i) xs[i] = reinterpret_cast<const BlockQ8_0*>(xq + static_cast<size_t>(m + i) * rb);
  float* y[S];
  for (int s = 0; s < S; ++s) y[s] = ys[s] + m * ldy;
  tile_q8<R, S>(pp, xs, static_cast<const float*>(xa) + m * nb, nb, y, ldy, nvalid);
}
#endif

// Rows m .. m + r (r < 8) against one panel.
void q8_rest(int64_t r, const uint8_t* pp, const uint8_t* xq, const void* xa, int64_t M, int64_t m, int64_t nb, float* ys,
             int64_t ldy, int nvalid) {
  switch (r) {
    case 1: return q8_rows<1, 1>(&pp, xq, xa, M, m, nb, &ys, ldy, &nvalid);
    case 2: return q8_rows<2, 1>(&pp, xq, xa, M, m, nb, &ys, ldy, &nvalid);
    case 3: return q8_rows<3, 1>(&pp, xq, xa, M, m, nb, &ys, ldy, &nvalid);
    case 4: return q8_rows<4, 1>(&pp, xq, xa, M, m, nb, &ys, ldy, &nvalid);
    case 5: return q8_rows<5, 1>(&pp, xq, xa, M, m, nb, &ys, ldy, &nvalid);
    case 6: return q8_rows<6, 1>(&pp, xq, xa, M, m, nb, &ys, ldy, &nvalid);
    default: return q8_rows<7, 1>(&pp, xq, xa, M, m, nb, &ys, ldy, &nvalid);
  }
}

// The same walk as panels_q4's, written out again: one templated walk for both types measured the
// Q4_K prefill 7-14 % slower (docs/performance.md, seventeenth session).
void panels_q8(const void* xq, const void* xa, int64_t M, int64_t K, const void* packed, int64_t N, int64_t p0, int64_t p1,
               float* y, int64_t ldy, int64_t slice) {
  const int64_t nb = K / QK;
  const size_t panel = q8_panel_bytes(K);
  const auto* x = static_cast<const uint8_t*>(xq);
  const auto* base = static_cast<const uint8_t*>(packed);
  const auto valid = [&](int64_t p) { return static_cast<int>(std::clamp<int64_t>(N - p * NP, 0, NP)); };
  // The first two pairs of a panel, asked for at once (from there on the AVX-512 tiles prefetch a
  // pair ahead; the AVX2 ones leave it to the hardware).
  const auto warm = [&](int64_t p) {
    for (size_t l = 0; l < std::min(panel, 2 * kQ8Pair); l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(base + static_cast<size_t>(p) * panel + l), _MM_HINT_T0);
  };
  if (slice > 0) {
    // Decode streams: panels p, p + slice, p + 2 slice, p + 3 slice side by side (those past N
    // skipped), for 1..3 activation rows.
    for (int s = 0; s < 4; ++s)
      if (valid(p0 + s * slice) > 0) warm(p0 + s * slice);
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* pp[4];
      float* ys[4];
      int nv[4], count = 0;
      for (int s = 0; s < 4; ++s) {
        const int64_t q = p + s * slice;
        if (valid(q) == 0) continue;
        pp[count] = base + static_cast<size_t>(q) * panel;
        ys[count] = y + q * NP;
        nv[count++] = valid(q);
      }
      if (count == 4 && M == 1) {
        q8_rows<1, 4>(pp, x, xa, M, 0, nb, ys, ldy, nv);
        continue;
      }
      if (count == 4 && M == 2) {
        q8_rows<2, 4>(pp, x, xa, M, 0, nb, ys, ldy, nv);
        continue;
      }
      for (int s = 0; s < count; ++s) q8_rest(M, pp[s], x, xa, M, 0, nb, ys[s], ldy, nv[s]);
    }
    return;
  }
  // Panels p0 .. p1 in blocks that stay in L2 while every tile of 8 activation rows passes them.
  const int npan = static_cast<int>(std::clamp<int64_t>((int64_t{96} << 10) / static_cast<int64_t>(panel), 1, 8));
  for (int64_t q0 = p0; q0 < p1; q0 += npan) {
    const int64_t q1 = std::min(p1, q0 + npan);
    for (int64_t m = 0; m < M; m += 8)
      for (int64_t q = q0; q < q1; ++q) {
        const uint8_t* pp = base + static_cast<size_t>(q) * panel;
        float* ys = y + q * NP;
        int nv = valid(q);
        if (m == 0) warm(q);
        if (m + 8 <= M)
          q8_rows<8, 1>(&pp, x, xa, M, m, nb, &ys, ldy, &nv);
        else
          q8_rest(M - m, pp, x, xa, M, m, nb, ys, ldy, nv);
      }
  }
}
}  // namespace

bool packs_quant_panels(DType t) { return t == DType::q8_0 || t == DType::q4_K; }

size_t quant_panel_bytes(DType t, int64_t K) {
  if (t == DType::q8_0) return q8_panel_bytes(K);
  return kPanel * row_bytes(t, K);
}

void pack_quant_panels(DType t, const void* w, int64_t N, int64_t K, int64_t p0, int64_t p1, void* out) {
  if (t == DType::q8_0) pack_q8(w, N, K, p0, p1, out);
  if (t == DType::q4_K) pack_q4(w, N, K, p0, p1, out);
}

bool quant_panel_row(DType t, const void* packed, int64_t K, int64_t row, float* out) {
  if (t != DType::q8_0) return false;
  if (packed) q8_panel_row(packed, K, row, out);
  return true;
}

size_t panel_act_bytes(ActQuant a, int64_t M, int64_t K) { return a == ActQuant::q8_0 ? q8_act_bytes(M, K) : 0; }

void panel_act(ActQuant a, const void* xq, int64_t M, int64_t K, void* out) {
  if (a == ActQuant::q8_0) q8_act(xq, M, K, out);
}

void quantize_act_panels(ActQuant a, const float* x, int64_t M, int64_t K, void* xq, void* xa) {
  if (a == ActQuant::q8_0 && xa) return q8_quantize_act(x, M, K, xq, xa);
  quantize_act(a, x, M, K, xq);
  if (xa) panel_act(a, xq, M, K, xa);
}

void matmul_quant_panels(DType t, const void* xq, const void* xa, int64_t M, int64_t K, const void* packed, int64_t N,
                         int64_t p0, int64_t p1, float* y, int64_t ldy, int64_t slice) {
  if (t == DType::q8_0) panels_q8(xq, xa, M, K, packed, N, p0, p1, y, ldy, slice);
  if (t == DType::q4_K) panels_q4(xq, M, K, packed, N, p0, p1, y, ldy, slice);
}

}  // namespace lumen::cpu::LUMEN_ISA
