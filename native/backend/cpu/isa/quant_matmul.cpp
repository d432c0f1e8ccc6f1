// Matrix products with block-quantized weights (Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS) for one ISA, computed as llama.cpp's CPU backend computes them: the activations quantized
// per row to q8_0 / q8_1 / q8_K (quantize_act: the same values bit for bit as core/quant_ref.cpp's
// reference, and as llama.cpp's x86 code), then integer dot products per block (AVX2 maddubs + madd;
// VNNI dpbusd where the AVX-512 table has it) scaled by the block scales in f32. The IQ4 types' 4-bit
// indices become their int8 levels by one byte shuffle of the 16-entry table. Batches of 1..3 rows
// (decode) read four weight rows from four streams side by side; larger ones unpack a weight block
// once for a tile of 4 activation rows (Q6_K: 8) and walk the weight rows in panels of 16 that
// stay in cache while every activation row passes them (Q6_K batches of more than 16 rows on
// AVX-512: quant_gemm.cpp; on AVX-512 the 32-value types take tiles of up to 8 activation rows x 4 weight
// rows that walk the weight rows once, q32_tiles). Either way each quantized matrix streams from
// memory once per step. The engine repacks Q4_K and Q8_0 at load and runs quant_panels.cpp on them
// instead; these Q4_K tiles are what kernelCheck holds the Q4_K panels to (the Q8_0 panels: the
// scalar reference's vec_dot, whose order they share).
// The AVX-512 table has 64-byte tiles of its own for the 32-value types, Q4_K and Q6_K; every tile
// keeps llama.cpp's order of the f32 operations per output (kernelCheck holds Q4_K and Q6_K to
// core/quant_ref.cpp bit for bit). The reference code and the block layouts: core/quant_ref.h.
#include <algorithm>
#include <vector>

#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/quant_simd.h"
#include "backend/cpu/isa/simd.h"
#include "backend/cpu/kernels.h"
#include "core/aligned.h"
#include "core/quant_ref.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

using namespace lumen::quant;

// Sums of 4 adjacent products of unsigned a (0..255) and signed b, as 8 int32 lanes.
inline __m256i dot_us8(__m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}
// Sums of 4 adjacent products of unsigned a and signed b, each pair of 2 times the int16 scale of
// its lane (maddubs never saturates here: a <= 63, |b| <= 127), as 8 int32 lanes.
inline __m256i dot_us8_scaled(__m256i a, __m256i b, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), scale16);
}

// 32 nibbles of 16 bytes: low nibbles to bytes 0..15, high nibbles to bytes 16..31.
inline __m256i nibbles32(const uint8_t* q) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}
// Bit i of the 32-bit mask as 0xFF / 0x00 in byte i.
inline __m256i bits32(const uint8_t* qh) {
  uint32_t x;
  std::memcpy(&x, qh, 4);
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf);
  const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  b = _mm256_or_si256(b, bit);
  return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

// ---------------------------------------------------------------------------------------------
// Activation quantization (bit-identical to core/quant_ref.cpp; the shared steps in quant_simd.h).

void quantize_q8_0_row(const float* x, BlockQ8_0* y, int64_t k) {
  q8_0_blocks(x, y, k / QK, [](int64_t, __m256i, float) {});
}

void quantize_q8_1_row(const float* x, BlockQ8_1* y, int64_t k) {
  for (int64_t i = 0; i < k / QK; ++i, x += QK) {
    const float amax = amax32(x);
    const float d = amax / 127.f;
    y[i].d = f2h(d);
    const int sum = round32(x, amax != 0.f ? 127.f / amax : 0.f, y[i].qs);
    y[i].s = f2h(d * static_cast<float>(sum));
  }
}

void quantize_q8_K_row(const float* x, BlockQ8_K* y, int64_t k) {
  for (int64_t i = 0; i < k / QK_K; ++i, x += QK_K) {
    float amax = 0.f;
    for (int j = 0; j < QK_K; j += 32) amax = std::max(amax, amax32(x + j));
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    // The first element of that magnitude, with its sign (as the reference's scan finds it).
    int at = 0;
    const __m256 va = _mm256_set1_ps(amax), sign = _mm256_set1_ps(-0.0f);
    for (int j = 0; j < QK_K; j += 8) {
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
      if (mask) {
        at = j + __builtin_ctz(static_cast<unsigned>(mask));
        break;
      }
    }
    const float iscale = -127.f / x[at];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < QK_K; j += 32) {
      __m256i q[4];
      for (int c = 0; c < 4; ++c)
        q[c] = _mm256_min_epi32(cap, _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * c)),
                                                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      __m256i a = _mm256_packs_epi32(q[0], q[1]);
      __m256i b = _mm256_packs_epi32(q[2], q[3]);
      a = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), a);
      // bsums of the two groups of 16.
      y[i].bsums[j / 16] = static_cast<int16_t>(hsum_i32_8(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(hsum_i32_8(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1.f / iscale;
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products of one weight row against MR activation rows (xs[m]: row m's blocks).

constexpr int MR = 4;

// Software prefetch distance in each weight stream (bytes), AVX-512 decode tiles: their loop
// bodies are long, so the reorder window holds few blocks of each stream (docs/performance.md,
// the AVX-512 tiles of the eleventh session).
#ifndef PF
#define PF 2048
#endif

template <int R>
inline void store(const __m256* acc, const float* extra, float* y, int64_t ldy) {
  for (int m = 0; m < R; ++m) y[m * ldy] = hsum8(acc[m]) + extra[m];
}

// The 16 IQ4 levels in both 128-bit lanes (for _mm256_shuffle_epi8 by the nibbles).
inline __m256i iq4_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NL)));
}

// Q8_0 / Q4_0 / Q5_0 / IQ4_NL weights (signed int8 per element), q8_0 activations.
template <DType T, int R, int NW>
inline void dot_q8_0_family(const uint8_t* const* wr, const BlockQ8_0* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
  __m256 acc[NW][R];
  for (int i = 0; i < NW; ++i)
    for (int m = 0; m < R; ++m) acc[i][m] = _mm256_setzero_ps();
  constexpr size_t bb = T == DType::q8_0 ? 34 : T == DType::q4_0 || T == DType::iq4_nl ? 18 : 22;
  [[maybe_unused]] const __m256i table = iq4_table();
  for (int64_t b = 0; b < nb; ++b) {
    float dx[R];  // the activation blocks' scales, widened once for the NW weight rows
    for (int m = 0; m < R; ++m) dx[m] = h2f(xs[m][b].d);
    for (int i = 0; i < NW; ++i) {
      const uint8_t* w = wr[i] + static_cast<size_t>(b) * bb;
      uint16_t dh;
      std::memcpy(&dh, w, 2);
      const float dw = h2f(dh);
      __m256i qw;
      if constexpr (T == DType::q8_0) {
        qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
      } else if constexpr (T == DType::q4_0) {
        qw = _mm256_sub_epi8(nibbles32(w + 2), _mm256_set1_epi8(8));
      } else if constexpr (T == DType::iq4_nl) {
        qw = _mm256_shuffle_epi8(table, nibbles32(w + 2));
      } else {
        // (nibble | fifth bit << 4) - 16 = nibble - (bit clear ? 16 : 0)
        const __m256i hi = _mm256_andnot_si256(bits32(w + 2), _mm256_set1_epi8(static_cast<char>(0xF0)));
        qw = _mm256_or_si256(nibbles32(w + 6), hi);
      }
      // |qw| once for the R rows; each row's q8 values take qw's signs.
      const __m256i aw = _mm256_sign_epi8(qw, qw);
      for (int m = 0; m < R; ++m) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[m][b].qs));
        acc[i][m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[m]), _mm256_cvtepi32_ps(dot_us8(aw, _mm256_sign_epi8(qx, qw))),
                                    acc[i][m]);
      }
    }
  }
  const float zero[R] = {};
  for (int i = 0; i < NW; ++i) store<R>(acc[i], zero, ys[i], ldy);
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// The same products, two weight rows per 64-byte vector (row 2p in the low half, 2p + 1 in the
// high one) against each activation block broadcast to both halves. AVX-512 has no vpsignb, so
// the weights are offset to unsigned (w + 128, which vpdpbusd takes) and each lane starts from
// -128 x the sum of its four activation bytes (computed once per activation block): the same
// int32 lanes as |w| . sign(x, w), so the same f32 operations per output, in the same order.
// pfo: how far ahead of each weight row's block to prefetch (bytes): PF in the decode streams, the
// next tile's row (NW rows on) in tiles over adjacent rows.
// With 2 or more activation rows the offset moves to the activations instead (x + 128, one xor
// per activation block), and each pair's lanes start from -128 x the sum of its weight bytes,
// computed once per block for all R rows: the same int32 lanes again. dxs (optional): the
// activation scales already widened, R rows of nb floats.
template <DType T, int R, int NW>
inline void dot_q8_0_pairs(const uint8_t* const* wr, const BlockQ8_0* const* xs, int64_t nb, float* const* ys, int64_t ldy,
                           int64_t pfo = PF, const float* dxs = nullptr) {
  constexpr bool wside = R >= 2;  // the offset on the activations, the correction per weight pair
  static_assert(NW == 2 || NW == 4);
  constexpr int NP = NW / 2;
  constexpr size_t bb = T == DType::q8_0 ? 34 : T == DType::q4_0 || T == DType::iq4_nl ? 18 : 22;
  __m512 acc[NP][R];
  for (int p = 0; p < NP; ++p)
    for (int m = 0; m < R; ++m) acc[p][m] = _mm512_setzero_ps();
  [[maybe_unused]] const __m256i table = iq4_table();
  const __m512i off = _mm512_set1_epi8(static_cast<char>(0x80));
  // Lane j of the f16 scales' vector to every lane of half h of pair p: index 2p + h.
  const __m512i half_idx[2] = {_mm512_inserti64x4(_mm512_set1_epi32(0), _mm256_set1_epi32(1), 1),
                               _mm512_inserti64x4(_mm512_set1_epi32(2), _mm256_set1_epi32(3), 1)};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* w[NW];
    __m128i dh = _mm_setzero_si128();
    // Unrolled so that the insert's lane is a constant at every optimisation level (-O2 builds,
    // e.g. the CUDA emulation's RelWithDebInfo, do not unroll it on their own).
#pragma GCC unroll 4
    for (int i = 0; i < NW; ++i) {
      w[i] = wr[i] + static_cast<size_t>(b) * bb;
      _mm_prefetch(reinterpret_cast<const char*>(w[i] + pfo), _MM_HINT_T0);
      uint16_t d;
      std::memcpy(&d, w[i], 2);
      dh = _mm_insert_epi16(dh, d, i);
    }
    const __m512 dw = _mm512_castps256_ps512(_mm256_cvtph_ps(dh));
    __m512i wu[NP], wneg[NP];
    __m512 dwp[NP];
    for (int p = 0; p < NP; ++p) {
      __m256i q[2];
      for (int h = 0; h < 2; ++h) {
        const uint8_t* wi = w[2 * p + h];
        if constexpr (T == DType::q8_0) {
          q[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi + 2));
        } else if constexpr (T == DType::q4_0) {
          q[h] = _mm256_sub_epi8(nibbles32(wi + 2), _mm256_set1_epi8(8));
        } else if constexpr (T == DType::iq4_nl) {
          q[h] = _mm256_shuffle_epi8(table, nibbles32(wi + 2));
        } else {
          const __m256i hi = _mm256_andnot_si256(bits32(wi + 2), _mm256_set1_epi8(static_cast<char>(0xF0)));
          q[h] = _mm256_or_si256(nibbles32(wi + 6), hi);
        }
      }
      const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
      if constexpr (wside) {
        wu[p] = wq;  // signed; wneg: -128 x the sum of each lane's four weight bytes
        wneg[p] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, wq));
      } else {
        wu[p] = _mm512_xor_si512(wq, off);
      }
      dwp[p] = _mm512_permutexvar_ps(half_idx[p], dw);
    }
    for (int m = 0; m < R; ++m) {
      const __m512i qx = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[m][b].qs)));
      const __m512 dx = dxs ? _mm512_set1_ps(dxs[m * nb + b]) : _mm512_set1_ps(h2f(xs[m][b].d));
      if constexpr (wside) {
        const __m512i ux = _mm512_xor_si512(qx, off);
        for (int p = 0; p < NP; ++p)
          acc[p][m] = _mm512_fmadd_ps(_mm512_mul_ps(dwp[p], dx), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(wneg[p], ux, wu[p])), acc[p][m]);
      } else {
        const __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, qx);  // 128 x the lane's x sum
        const __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
        for (int p = 0; p < NP; ++p)
          acc[p][m] = _mm512_fmadd_ps(_mm512_mul_ps(dwp[p], dx), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(neg, wu[p], qx)), acc[p][m]);
      }
    }
  }
  for (int p = 0; p < NP; ++p)
    for (int h = 0; h < 2; ++h) {
      __m256 a[R];
      for (int m = 0; m < R; ++m) a[m] = h ? _mm512_extractf32x8_ps(acc[p][m], 1) : _mm512_castps512_ps256(acc[p][m]);
      const float zero[R] = {};
      store<R>(a, zero, ys[2 * p + h], ldy);
    }
}
#endif

// Q5_1 weights (unsigned 0..31 and a min), q8_1 activations.
template <int R, int NW>
inline void dot_q5_1(const uint8_t* const* wr, const BlockQ8_1* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
  __m256 acc[NW][R];
  float summ[NW][R] = {};
  for (int i = 0; i < NW; ++i)
    for (int m = 0; m < R; ++m) acc[i][m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < NW; ++i) {
      const uint8_t* w = wr[i] + static_cast<size_t>(b) * sizeof(BlockQ5_1);
      uint16_t dh, mh;
      std::memcpy(&dh, w, 2);
      std::memcpy(&mh, w + 2, 2);
      const float dw = h2f(dh), mw = h2f(mh);
      const __m256i hi = _mm256_and_si256(bits32(w + 4), _mm256_set1_epi8(0x10));
      const __m256i qw = _mm256_or_si256(nibbles32(w + 8), hi);
      for (int m = 0; m < R; ++m) {
        const BlockQ8_1& x = xs[m][b];
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
        acc[i][m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(x.d)), _mm256_cvtepi32_ps(dot_us8(qw, qx)), acc[i][m]);
        summ[i][m] += mw * h2f(x.s);
      }
    }
  for (int i = 0; i < NW; ++i) store<R>(acc[i], summ[i], ys[i], ldy);
}

// The 8 scales (int16 lanes 0..7) and 8 mins (lanes 8..15) of a Q4_K / Q5_K block's 12 scale
// bytes, k_scale_min's values (core/quant_ref.h) rearranged with word masks, as llama.cpp's x86 code.
inline __m256i k_scales_mins(const uint8_t* s) {
  uint32_t u[4];
  std::memcpy(u, s, 12);
  constexpr uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
  u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
  const uint32_t a = u[1] & m1;
  u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
  u[2] = a;
  u[0] &= m1;
  return _mm256_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]), static_cast<int>(u[2]),
                                             static_cast<int>(u[3])));
}

// Q4_K weights, q8_K activations, in the order of llama.cpp's repacked Q4_K (ggml_gemv /
// ggml_gemm_q4_K_8x8_q8_K, what it runs for Q4_K on x86, and quant_panels.cpp's order): per block
// the exact integer sums of the scales' part (isum) and of the mins' part (msum); per output
// acc = fma(isum, dw dx, acc), accm = fma(msum, dmin dx, accm); y = acc - accm.
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// k_scales_mins in vector operations: the 8 scales and 8 mins as bytes (16 readable bytes at s).
inline __m128i k_scales_mins_bytes(const uint8_t* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i lo = _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
  const __m128i hn = _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
  const __m128i top = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_setr_epi8(0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48));
  return _mm_or_si128(_mm_or_si128(lo, hn), top);
}
// The sums of each of 4 vectors of int32 (a..d) as the lanes of one.
inline __m128i sum4_epi32(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  const __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline __m128i sum4_epi32(__m128i a, __m128i b, __m128i c, __m128i d) {
  const __m128i ab = _mm_add_epi32(_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b));
  const __m128i cd = _mm_add_epi32(_mm_unpacklo_epi32(c, d), _mm_unpackhi_epi32(c, d));
  return _mm_add_epi32(_mm_unpacklo_epi64(ab, cd), _mm_unpackhi_epi64(ab, cd));
}
// AVX-512: a block's 128 nibble bytes are two 64-byte vectors; the low nibbles of the first hold
// groups 0 | 2, its high nibbles 1 | 3 (the second: 4 | 6, 5 | 7). The activations are read in
// that order (halves of 32 bytes shuffled once per block for the NW weight rows), maddubs gives
// pair sums (values below 16: no saturation), and vpdpwssd multiplies them by the group scale of
// their half and adds them up.
// NW <= 4 weight rows at once: lane i of the f32 sums is weight row i (the same operations per
// output as the scalar order above).
template <int R, int NW>
inline void dot_q4_K(const uint8_t* const* wr, const BlockQ8_K* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
  static_assert(NW >= 1 && NW <= 4);
  __m128 acc[R], accm[R];
  for (int m = 0; m < R; ++m) acc[m] = accm[m] = _mm_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // Word indices into (8 scales | 8 mins): half 0 of vector c takes group ga(c), half 1 gb(c).
  const __m512i sel[4] = {_mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1),
                          _mm512_inserti64x4(_mm512_set1_epi16(1), _mm256_set1_epi16(3), 1),
                          _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1),
                          _mm512_inserti64x4(_mm512_set1_epi16(5), _mm256_set1_epi16(7), 1)};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* w[NW];
    __m128i dh = _mm_setzero_si128();  // (d, dmin) of row i in dword i
#pragma GCC unroll 4  // the insert's lane a constant at every optimisation level (see above)
    for (int i = 0; i < NW; ++i) {
      w[i] = wr[i] + static_cast<size_t>(b) * sizeof(BlockQ4_K);
      for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(w[i] + PF + 64 * l), _MM_HINT_T0);
      int32_t dd;
      std::memcpy(&dd, w[i], 4);
      dh = _mm_insert_epi32(dh, dd, i);
    }
    const __m256 df = _mm256_cvtph_ps(dh);  // d0 dmin0 d1 dmin1 ...
    const __m128 dw = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(df, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
    const __m128 dmw = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(df, _mm256_setr_epi32(1, 3, 5, 7, 0, 0, 0, 0)));
    // The activation blocks in the weights' group order (halves of 32 bytes shuffled once for
    // the NW rows), and the pair sums of their bsums.
    __m512i xv[R][4];
    __m128i pairs[R];
    for (int m = 0; m < R; ++m) {
      const BlockQ8_K& x = xs[m][b];
      const __m512i a = _mm512_loadu_si512(x.qs), c = _mm512_loadu_si512(x.qs + 64);
      const __m512i e = _mm512_loadu_si512(x.qs + 128), f = _mm512_loadu_si512(x.qs + 192);
      xv[m][0] = _mm512_shuffle_i64x2(a, c, 0x44);  // x 0..31 | 64..95
      xv[m][1] = _mm512_shuffle_i64x2(a, c, 0xEE);  // x 32..63 | 96..127
      xv[m][2] = _mm512_shuffle_i64x2(e, f, 0x44);
      xv[m][3] = _mm512_shuffle_i64x2(e, f, 0xEE);
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
      pairs[m] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    }
    __m512i s[R][4] = {};
    __m128i pm[R][4] = {};
    for (int i = 0; i < NW; ++i) {
      const __m256i sm = _mm256_cvtepu8_epi16(k_scales_mins_bytes(w[i] + 4));
      const __m128i mins = _mm256_extracti128_si256(sm, 1);
      __m512i sc[4];
      for (int c = 0; c < 4; ++c) sc[c] = _mm512_permutexvar_epi16(sel[c], _mm512_castsi256_si512(sm));
      const __m512i q0 = _mm512_loadu_si512(w[i] + 16), q1 = _mm512_loadu_si512(w[i] + 80);
      const __m512i v[4] = {_mm512_and_si512(q0, m4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4),
                            _mm512_and_si512(q1, m4), _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4)};
      for (int m = 0; m < R; ++m) {
        __m512i t = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(v[0], xv[m][0]), sc[0]);
        for (int k = 1; k < 4; ++k) t = _mm512_dpwssd_epi32(t, _mm512_maddubs_epi16(v[k], xv[m][k]), sc[k]);
        s[m][i] = t;
        pm[m][i] = _mm_madd_epi16(mins, pairs[m]);
      }
    }
    for (int m = 0; m < R; ++m) {
      const __m128 isum = _mm_cvtepi32_ps(sum4_epi32(s[m][0], s[m][1], s[m][2], s[m][3]));
      const __m128 msum = _mm_cvtepi32_ps(sum4_epi32(pm[m][0], pm[m][1], pm[m][2], pm[m][3]));
      const __m128 xd = _mm_set1_ps(xs[m][b].d);
      acc[m] = _mm_fmadd_ps(isum, _mm_mul_ps(dw, xd), acc[m]);
      accm[m] = _mm_fmadd_ps(msum, _mm_mul_ps(dmw, xd), accm[m]);
    }
  }
  for (int m = 0; m < R; ++m) {
    alignas(16) float out[4];
    _mm_store_ps(out, _mm_sub_ps(acc[m], accm[m]));
    for (int i = 0; i < NW; ++i) ys[i][m * ldy] = out[i];
  }
}
#endif

// Q4_K / Q5_K weights, q8_K activations: Q5_K in vec_dot_q5_K_q8_K's order (8 f32 lanes, the
// mins apart), Q4_K (the AVX2 table's; AVX-512 has dot_q4_K above) in the repacked order above.
template <DType T, int R, int NW>
inline void dot_q45_K(const uint8_t* const* wr, const BlockQ8_K* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
  __m256 acc[NW][R];
  float accm[NW][R] = {}, acc4[NW][R] = {};
  for (int i = 0; i < NW; ++i)
    for (int m = 0; m < R; ++m) acc[i][m] = _mm256_setzero_ps();
  constexpr size_t bb = T == DType::q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < NW; ++i) {
      const uint8_t* w = wr[i] + static_cast<size_t>(b) * bb;
      uint16_t dh, dmh;
      std::memcpy(&dh, w, 2);
      std::memcpy(&dmh, w + 2, 2);
      const float dw = h2f(dh), dminw = h2f(dmh);
      const __m256i sm = k_scales_mins(w + 4);
      const __m128i mins = _mm256_extracti128_si256(sm, 1);
      // Group j's scale in every int16 lane: bytes 2j, 2j + 1 of the scales repeated.
      const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
      __m256i sc16[8];
      for (int j = 0; j < 8; ++j) sc16[j] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(((2 * j + 1) << 8) | (2 * j))));
      const uint8_t* qs = w + (T == DType::q4_K ? 16 : 48);
      // The 8 groups of 32 values, unpacked once for the tile.
      __m256i v[8];
      __m256i hb = _mm256_setzero_si256();
      if constexpr (T == DType::q5_K) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
      for (int g = 0; g < 4; ++g) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
        v[2 * g] = _mm256_and_si256(q, m4);
        v[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (T == DType::q5_K) {
          v[2 * g] = _mm256_or_si256(v[2 * g], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * g), one), 4));
          v[2 * g + 1] =
              _mm256_or_si256(v[2 * g + 1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * g + 1), one), 4));
        }
      }
      for (int m = 0; m < R; ++m) {
        const BlockQ8_K& x = xs[m][b];
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
          const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
          sumi = _mm256_add_epi32(sumi, dot_us8_scaled(v[j], qx, sc16[j]));
        }
        // sum_j min_j * (bsums[2j] + bsums[2j + 1]): pair sums of the 16 bsums (|sum| <= 4064, no
        // int16 overflow), then one madd against the mins.
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
        const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        __m128i pm = _mm_madd_epi16(mins, pairs);
        pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, _MM_SHUFFLE(1, 0, 3, 2)));
        pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, _MM_SHUFFLE(2, 3, 0, 1)));
        const int msum = _mm_cvtsi128_si32(pm);
        if constexpr (T == DType::q4_K) {
          acc4[i][m] = std::fma(static_cast<float>(hsum_i32_8(sumi)), dw * x.d, acc4[i][m]);
          accm[i][m] = std::fma(static_cast<float>(msum), dminw * x.d, accm[i][m]);
          continue;
        }
        acc[i][m] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * dw), _mm256_cvtepi32_ps(sumi), acc[i][m]);
        accm[i][m] -= (x.d * dminw) * static_cast<float>(msum);
      }
    }
  if constexpr (T == DType::q4_K) {
    for (int i = 0; i < NW; ++i)
      for (int m = 0; m < R; ++m) ys[i][m * ldy] = acc4[i][m] - accm[i][m];
    return;
  }
  for (int i = 0; i < NW; ++i) store<R>(acc[i], accm[i], ys[i], ldy);
}

// Q6_K weights, q8_K activations: values 0..63 (the -32 offset through the bsums), in
// vec_dot_q6_K_q8_K's order: 8 int32 lanes per block (lane l: bytes 4l .. 4l + 3 of each 32-byte
// chunk), per block fma(dx dw, lanes, acc), the 8 lanes summed at the end.
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// A Q6_K block's 256 values (0..63) as 4 vectors: vector c holds the chunk pair 2 c, 2 c + 1, the
// low (c = 0, 2) or high (c = 1, 3) nibbles of ql[64 (c / 2) ..] with the qh bits of both chunks
// from qh[32 (c / 2) ..] in both halves, shifted per half to bits 4..5 (chunks 0 | 1 left by 4 | 2,
// chunks 2 | 3 right by 0 | 2).
inline void q6_values(const uint8_t* w, __m512i (&v)[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i ql0 = _mm512_loadu_si512(w), ql1 = _mm512_loadu_si512(w + 64);
  const __m512i qh0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128)));
  const __m512i qh1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 160)));
  v[0] = _mm512_or_si512(_mm512_and_si512(ql0, m4), _mm512_and_si512(_mm512_sllv_epi16(qh0, shl), m30));
  v[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), m4), _mm512_and_si512(_mm512_srlv_epi16(qh0, shr), m30));
  v[2] = _mm512_or_si512(_mm512_and_si512(ql1, m4), _mm512_and_si512(_mm512_sllv_epi16(qh1, shl), m30));
  v[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), m4), _mm512_and_si512(_mm512_srlv_epi16(qh1, shr), m30));
}

// AVX-512: a 64-byte vector holds two 32-byte chunks, whose lanes l and l + 8 are added to make
// llama.cpp's lane l. Chunk pair c: low (c = 0, 2) or high (c = 1, 3) nibbles of ql[64 (c / 2) ..],
// and the qh bits of both chunks from qh[32 (c / 2) ..] in both halves, shifted per half.
template <int R, int NW>
inline void dot_q6_K(const uint8_t* const* wr, const BlockQ8_K* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
  __m256 acc[NW][R];
  for (int i = 0; i < NW; ++i)
    for (int m = 0; m < R; ++m) acc[i][m] = _mm256_setzero_ps();
  // Word k of vector c takes scale 4c + k / 8.
  __m512i sel[4];
  for (int c = 0; c < 4; ++c) {
    alignas(64) int16_t idx[32];
    for (int k = 0; k < 32; ++k) idx[k] = static_cast<int16_t>(4 * c + k / 8);
    sel[c] = _mm512_load_si512(idx);
  }
  for (int64_t b = 0; b < nb; ++b) {
    for (int i = 0; i < NW; ++i) {
      const uint8_t* w = wr[i] + static_cast<size_t>(b) * sizeof(BlockQ6_K);
      for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + PF + 64 * l), _MM_HINT_T0);
      uint16_t dh;
      std::memcpy(&dh, w + 208, 2);
      const float dw = h2f(dh);
      __m512i v[4];
      q6_values(w, v);
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)));
      // -32 sc (|sc| <= 128: int16 is ample), so each row's offset is one madd that starts its sums.
      const __m256i neg32 = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), sc16), 5);
      const __m256 dwv = _mm256_set1_ps(dw);
      __m512i sv[4];
      for (int c = 0; c < 4; ++c) sv[c] = _mm512_permutexvar_epi16(sel[c], _mm512_castsi256_si512(sc16));
      for (int m = 0; m < R; ++m) {
        const BlockQ8_K& x = xs[m][b];
        // The offset, -32 x sc . bsums per lane, in the low half (the halves are added below).
        __m512i t = _mm512_zextsi256_si512(_mm256_madd_epi16(neg32, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums))));
        for (int c = 0; c < 4; ++c)
          t = _mm512_dpwssd_epi32(t, _mm512_maddubs_epi16(v[c], _mm512_loadu_si512(x.qs + 64 * c)), sv[c]);
        const __m256i sumi = _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
        acc[i][m] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(&x.d), dwv), _mm256_cvtepi32_ps(sumi), acc[i][m]);
      }
    }
  }
  const float zero[R] = {};
  for (int i = 0; i < NW; ++i) store<R>(acc[i], zero, ys[i], ldy);
}

// 8 activation rows as 4 pairs for dot_q6_K_pairs: per block and pair a record of 10 vectors,
// vector j < 8 holding chunk j (values 32 j .. 32 j + 31) of the pair's first row in its low half
// and of its second row in its high half, vector 8 the pair's bsums the same way, vector 9 their
// scales d (8 lanes each). Built once per call for all the weight rows the pairs meet.
constexpr int kQ6PairVecs = 10;
void q6_pairs_act(const BlockQ8_K* const* xs, int64_t nb, __m512i* out) {
  for (int64_t b = 0; b < nb; ++b)
    for (int p = 0; p < 4; ++p) {
      const BlockQ8_K& lo = xs[2 * p][b];
      const BlockQ8_K& hi = xs[2 * p + 1][b];
      __m512i* rec = out + (b * 4 + p) * kQ6PairVecs;
      const auto pair = [](const void* a, const void* c) {
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(a))),
                                  _mm256_loadu_si256(static_cast<const __m256i*>(c)), 1);
      };
      for (int j = 0; j < 8; ++j) rec[j] = pair(lo.qs + 32 * j, hi.qs + 32 * j);
      rec[8] = pair(lo.bsums, hi.bsums);
      rec[9] = _mm512_castps_si512(_mm512_insertf32x8(_mm512_set1_ps(lo.d), _mm256_set1_ps(hi.d), 1));
    }
}

// Q6_K, one weight row against 8 activation rows (act: q6_pairs_act's records), two rows to a
// vector: each 32-byte chunk of the unpacked weights in both halves, so a pair's maddubs, vpdpwssd,
// conversion, scale product and FMA serve both rows, and no fold of two halves is needed (the tile
// above pays that fold and those f32 steps per row). Lane l of each half is llama.cpp's lane l,
// so the same integer sums and f32 operations per output as dot_q6_K: the same bits.
inline void dot_q6_K_pairs(const uint8_t* wrow, const __m512i* act, int64_t nb, float* y, int64_t ldy) {
  __m512 acc[4];
  for (int p = 0; p < 4; ++p) acc[p] = _mm512_setzero_ps();
  // Word k of chunk j's scale vector (both halves): scale 2 j + (k % 16) / 8.
  __m512i sel[8];
  for (int j = 0; j < 8; ++j) {
    alignas(64) int16_t idx[32];
    for (int k = 0; k < 32; ++k) idx[k] = static_cast<int16_t>(2 * j + (k % 16) / 8);
    sel[j] = _mm512_load_si512(idx);
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* w = wrow + static_cast<size_t>(b) * sizeof(BlockQ6_K);
    for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + PF + 64 * l), _MM_HINT_T0);
    uint16_t dh;
    std::memcpy(&dh, w + 208, 2);
    const __m512 dw = _mm512_set1_ps(h2f(dh));
    // Vector c holds chunks 2 c (low half) and 2 c + 1 (high half).
    __m512i v[4];
    q6_values(w, v);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)));
    const __m512i neg32 = _mm512_broadcast_i64x4(_mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), sc16), 5));
    const __m512i sc512 = _mm512_castsi256_si512(sc16);
    __m512i t[4];
    const __m512i* rec = act + b * 4 * kQ6PairVecs;
    for (int p = 0; p < 4; ++p) t[p] = _mm512_madd_epi16(neg32, rec[p * kQ6PairVecs + 8]);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i wj = _mm512_shuffle_i64x2(v[j / 2], v[j / 2], j % 2 ? 0xEE : 0x44);
      const __m512i sv = _mm512_permutexvar_epi16(sel[j], sc512);
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) t[p] = _mm512_dpwssd_epi32(t[p], _mm512_maddubs_epi16(wj, rec[p * kQ6PairVecs + j]), sv);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p)
      acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_castsi512_ps(rec[p * kQ6PairVecs + 9]), dw), _mm512_cvtepi32_ps(t[p]), acc[p]);
  }
  for (int p = 0; p < 4; ++p) {
    const __m256 two[2] = {_mm512_castps512_ps256(acc[p]), _mm512_extractf32x8_ps(acc[p], 1)};
    const float zero[2] = {};
    store<2>(two, zero, y + 2 * p * ldy, ldy);
  }
}
#else
// A Q6_K block's parts for the AVX2 tiles below, with the stream's bytes ~5 blocks ahead asked for
// (the distance measured: docs/performance.md, the AVX2 section of the eighteenth session).
struct Q6Block {
  const uint8_t *ql, *qh;
  const int8_t* scales;
  float dw;
};
inline Q6Block q6_K_block(const uint8_t* w) {
  for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(w + 1024 + 64 * l), _MM_HINT_T0);
  uint16_t dh;
  std::memcpy(&dh, w + 208, 2);
  return {w, w + 128, reinterpret_cast<const int8_t*>(w + 192), h2f(dh)};
}
// An activation row's int32 lanes for a block start from the -32 offset: 32 x scale_s x bsums_s,
// lane l taking s = 2l, 2l + 1 as llama.cpp's lanes do (|product| <= 128 * 2032 per term: int32 is
// ample). sc16: the block's 16 scales as int16.
inline __m256i q6_K_offset(__m256i sc16, const BlockQ8_K* x) {
  return _mm256_sub_epi32(_mm256_setzero_si256(),
                          _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->bsums))), 5));
}
// The R activation rows' blocks b (each pointer laundered, so their bytes stay memory operands,
// read again per use) and their lanes' starting offsets.
template <int R>
inline void q6_K_rows(const BlockQ8_K* const* xs, int64_t b, __m256i sc16, const BlockQ8_K* (&xr)[R], __m256i (&sumi)[R]) {
  for (int m = 0; m < R; ++m) {
    xr[m] = &xs[m][b];
    asm("" : "+r"(xr[m]));
    sumi[m] = q6_K_offset(sc16, xr[m]);
  }
}
// The byte shuffle that gives group g' (< 4) of a half its scale pair from the half's 8 scales as
// int16 in both lanes: word 2g' in the low lane, 2g' + 1 in the high one.
inline __m256i q6_K_scale_ctl(int gq) {
  const int w0 = 2 * gq, w1 = w0 + 1;
  return _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(((2 * w0 + 1) << 8) | (2 * w0))),
                           _mm_set1_epi16(static_cast<int16_t>(((2 * w1 + 1) << 8) | (2 * w1))));
}

// AVX2: per group of 32 values its 6-bit values (q6_K_group) and its scale pair, then at once the
// products of every activation row, whose int32 lanes start from the -32 offset. (Unpacking all 8
// groups first, then the rows, GCC kept the 8 groups and their 8 scale vectors on the stack, and
// copied the activations there too; docs/performance.md.) The same int32 lanes, so the same f32
// operations.
template <int R, int NW>
inline void dot_q6_K(const uint8_t* const* wr, const BlockQ8_K* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
  __m256 acc[NW][R];
  for (int i = 0; i < NW; ++i)
    for (int m = 0; m < R; ++m) acc[i][m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < NW; ++i) {
      const auto [ql, qh, scales, dw] = q6_K_block(wr[i] + static_cast<size_t>(b) * sizeof(BlockQ6_K));
      // Scales per int16 lane of the pair sums: a group of 32 has s0 for elements 0..15 (the low
      // 128 bits), s1 for 16..31. The 16 scales widened to int16 (s0..s7 | s8..s15), each half
      // broadcast to both lanes, then per group a byte shuffle picking word 2g' in the low lane and
      // 2g' + 1 in the high one (g' = g mod 4).
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
      const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00), hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
      // The activations as memory operands, read again for each weight row (kept in registers
      // across the NW rows, they were spilled).
      const BlockQ8_K* xr[R];
      __m256i sumi[R];
      q6_K_rows<R>(xs, b, sc16, xr, sumi);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32));
        const __m256i hh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int g = 4 * h + j;
          const __m256i v = q6_K_group(l0, l1, hh, j);
          const __m256i sv = _mm256_shuffle_epi8(g < 4 ? lo : hi, q6_K_scale_ctl(g % 4));
#pragma GCC unroll 4
          for (int m = 0; m < R; ++m) {
            const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[m]->qs + 32 * g));
            sumi[m] = _mm256_add_epi32(sumi[m], dot_us8_scaled(v, qx, sv));
          }
        }
      }
      for (int m = 0; m < R; ++m)
        acc[i][m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[m]->d), _mm256_cvtepi32_ps(sumi[m]), acc[i][m]);
    }
  const float zero[R] = {};
  for (int i = 0; i < NW; ++i) store<R>(acc[i], zero, ys[i], ldy);
}

// AVX2, one weight row against 8 activation rows (decode batches of 8+ and prefill), so each group
// is unpacked once for 8 rows, not twice. 8 integer sums, the group, its scales and a temporary
// take 11 of the 16 registers and the unpacking most of the rest, so the f32 sums wait in memory
// between blocks, the activations are the `maddubs` memory operands, and each row's step
// (maddubs, madd by the scales, add) is one asm statement (from intrinsics GCC spilled: the 8-row
// form of the tile above measured slower than two 4-row passes, docs/performance.md). The same
// int32 lanes and f32 operations as the tile above.
inline void dot_q6_K_r8(const uint8_t* wrow, const BlockQ8_K* const* xs, int64_t nb, float* y, int64_t ldy) {
  constexpr int R = 8;
  alignas(32) float acc[R][8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const auto [ql, qh, scales, dw] = q6_K_block(wrow + static_cast<size_t>(b) * sizeof(BlockQ6_K));
    const BlockQ8_K* xr[R];
    __m256i sumi[R];
    q6_K_rows<R>(xs, b, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales))), xr, sumi);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      // The half's 8 scales as int16 in both lanes (the tile above's lo / hi).
      const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * h))));
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int g = 4 * h + j;
        // Only the group's own row of ql is loaded (q6_K_group picks it by j), so fewer registers
        // stay live across the half than in the tile above.
        const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32 * (j % 2)));
        const __m256i v = q6_K_group(l, l, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h)), j);
        const __m256i sv = _mm256_shuffle_epi8(sch, q6_K_scale_ctl(j));
        // The asm's memory operands are the 32 activation bytes as bytes (not a 32-byte-aligned
        // vector lvalue: qs is 4 bytes into its block).
        using Row = uint8_t[32];
        const auto xg = [&](int m) -> const Row& { return *reinterpret_cast<const Row*>(xr[m]->qs + 32 * g); };
        __m256i t;
#define LUMEN_Q6_ROW(m) \
  "vpmaddubsw %[x" #m "], %[v], %[t]\n\tvpmaddwd %[sv], %[t], %[t]\n\tvpaddd %[t], %[s" #m "], %[s" #m "]\n\t"
        asm(LUMEN_Q6_ROW(0) LUMEN_Q6_ROW(1) LUMEN_Q6_ROW(2) LUMEN_Q6_ROW(3) LUMEN_Q6_ROW(4) LUMEN_Q6_ROW(5)
                LUMEN_Q6_ROW(6) LUMEN_Q6_ROW(7)
            : [s0] "+x"(sumi[0]), [s1] "+x"(sumi[1]), [s2] "+x"(sumi[2]), [s3] "+x"(sumi[3]), [s4] "+x"(sumi[4]),
              [s5] "+x"(sumi[5]), [s6] "+x"(sumi[6]), [s7] "+x"(sumi[7]), [t] "=&x"(t)
            : [x0] "m"(xg(0)), [x1] "m"(xg(1)), [x2] "m"(xg(2)), [x3] "m"(xg(3)), [x4] "m"(xg(4)), [x5] "m"(xg(5)),
              [x6] "m"(xg(6)), [x7] "m"(xg(7)), [v] "x"(v), [sv] "x"(sv));
#undef LUMEN_Q6_ROW
      }
    }
    for (int m = 0; m < R; ++m)
      _mm256_store_ps(acc[m], _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[m]->d), _mm256_cvtepi32_ps(sumi[m]), _mm256_load_ps(acc[m])));
  }
  for (int m = 0; m < R; ++m) y[m * ldy] = hsum8(_mm256_load_ps(acc[m])) + 0.f;
}

#endif

// IQ4_XS weights, q8_K activations: per group of 32 the int8 levels, |level| . (q8 with the
// level's sign) in pair sums (maddubs: |level| <= 127, |q8| <= 127, no saturation), times the
// group's scale ls - 32 in the madd, summed in int32; one f32 multiply per block, as llama.cpp.
template <int R, int NW>
inline void dot_iq4_xs(const uint8_t* const* wr, const BlockQ8_K* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
  __m256 acc[NW][R];
  for (int i = 0; i < NW; ++i)
    for (int m = 0; m < R; ++m) acc[i][m] = _mm256_setzero_ps();
  const __m256i table = iq4_table();
  for (int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < NW; ++i) {
      const auto* w = reinterpret_cast<const BlockIQ4_XS*>(wr[i] + static_cast<size_t>(b) * sizeof(BlockIQ4_XS));
      const float dw = h2f(w->d);
      // Group by group (each unpacked once, for the R rows), so only one group's levels, their
      // magnitudes and scale are live beside the R integer sums (no register spills at R = 4).
      __m256i sumi[R];
      for (int m = 0; m < R; ++m) sumi[m] = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        const __m256i v = _mm256_shuffle_epi8(table, nibbles32(w->qs + 16 * g));
        const __m256i av = _mm256_sign_epi8(v, v);
        const __m256i ls = _mm256_set1_epi16(static_cast<int16_t>(iq4_xs_scale(*w, g)));
        for (int m = 0; m < R; ++m) {
          const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[m][b].qs + 32 * g));
          sumi[m] = _mm256_add_epi32(sumi[m], dot_us8_scaled(av, _mm256_sign_epi8(qx, v), ls));
        }
      }
      for (int m = 0; m < R; ++m)
        acc[i][m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xs[m][b].d), _mm256_cvtepi32_ps(sumi[m]), acc[i][m]);
    }
  const float zero[R] = {};
  for (int i = 0; i < NW; ++i) store<R>(acc[i], zero, ys[i], ldy);
}

// The Q8_0-family tile of the table: pairs of weight rows per 64-byte vector on AVX-512, else
// (and for a single row) the 32-byte tile.
template <DType T, int R, int NW>
inline void q8_0_family(const uint8_t* const* wr, const BlockQ8_0* const* xs, int64_t nb, float* const* ys, int64_t ldy) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
  if constexpr (NW % 2 == 0) return dot_q8_0_pairs<T, R, NW>(wr, xs, nb, ys, ldy);
#endif
  dot_q8_0_family<T, R, NW>(wr, xs, nb, ys, ldy);
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// AVX-512, the 32-value types, 4 or more activation rows: weight rows n0 .. n1 against activation
// rows m .. m + R (R <= 8) in tiles of 4 weight rows, each weight row read once per call, the next
// tile's rows prefetched as this one runs (a 16-row panel passed by tiles of 4 activation rows
// waited on memory at its first tile).
template <DType T, int R>
void q32_rows(const uint8_t* wb, size_t wrow, int64_t n0, int64_t n1, const uint8_t* xb, size_t xrow, int64_t m,
              int64_t K, float* y, int64_t ldy) {
  const BlockQ8_0* xs[R];
  for (int r = 0; r < R; ++r) xs[r] = reinterpret_cast<const BlockQ8_0*>(xb + static_cast<size_t>(m + r) * xrow);
  // The activation scales widened once for every tile of the call.
  const int64_t nb = K / QK;
  thread_local std::vector<float> dxv;
  if (dxv.size() < static_cast<size_t>(R * nb)) dxv.resize(static_cast<size_t>(R * nb));
  for (int r = 0; r < R; ++r)
    for (int64_t b = 0; b < nb; ++b) dxv[static_cast<size_t>(r * nb + b)] = h2f(xs[r][b].d);
  int64_t n = n0;
  for (; n < n1; n += 4) {
    const int nw = static_cast<int>(std::min<int64_t>(4, n1 - n));
    const uint8_t* wr[4];
    float* ys[4];
    for (int i = 0; i < nw; ++i) {
      wr[i] = wb + static_cast<size_t>(n + i) * wrow;
      ys[i] = y + m * ldy + n + i;
    }
    if (nw == 4) {
      dot_q8_0_pairs<T, R, 4>(wr, xs, nb, ys, ldy, static_cast<int64_t>(4 * wrow), dxv.data());
      continue;
    }
    for (int i = 0; i < nw; ++i) dot_q8_0_family<T, R, 1>(wr + i, xs, K / QK, ys + i, ldy);
  }
}

template <DType T>
void q32_tiles(const uint8_t* wb, size_t wrow, int64_t n0, int64_t n1, const uint8_t* xb, size_t xrow, int64_t M,
               int64_t K, float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; m += 8) {
    switch (std::min<int64_t>(8, M - m)) {
      case 1: q32_rows<T, 1>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
      case 2: q32_rows<T, 2>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
      case 3: q32_rows<T, 3>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
      case 4: q32_rows<T, 4>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
      case 5: q32_rows<T, 5>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
      case 6: q32_rows<T, 6>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
      case 7: q32_rows<T, 7>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
      default: q32_rows<T, 8>(wb, wrow, n0, n1, xb, xrow, m, K, y, ldy); break;
    }
  }
}
#endif

// NW weight rows (wr[i], outputs at ys[i] + m * ldy) against R activation rows (row m's blocks at
// xq + m * xstride bytes).
template <int R, int NW>
inline void row_tile(DType t, const uint8_t* const* wr, const uint8_t* xq, size_t xstride, int64_t K, float* const* ys,
                     int64_t ldy) {
  const void* rows[R];
  for (int m = 0; m < R; ++m) rows[m] = xq + static_cast<size_t>(m) * xstride;
  switch (t) {
    case DType::q8_0: q8_0_family<DType::q8_0, R, NW>(wr, reinterpret_cast<const BlockQ8_0* const*>(rows), K / QK, ys, ldy); return;
    case DType::q4_0: q8_0_family<DType::q4_0, R, NW>(wr, reinterpret_cast<const BlockQ8_0* const*>(rows), K / QK, ys, ldy); return;
    case DType::q5_0: q8_0_family<DType::q5_0, R, NW>(wr, reinterpret_cast<const BlockQ8_0* const*>(rows), K / QK, ys, ldy); return;
    case DType::q5_1: dot_q5_1<R, NW>(wr, reinterpret_cast<const BlockQ8_1* const*>(rows), K / QK, ys, ldy); return;
    case DType::q4_K:
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
      dot_q4_K<R, NW>(wr, reinterpret_cast<const BlockQ8_K* const*>(rows), K / QK_K, ys, ldy);
#else
      dot_q45_K<DType::q4_K, R, NW>(wr, reinterpret_cast<const BlockQ8_K* const*>(rows), K / QK_K, ys, ldy);
#endif
      return;
    case DType::q5_K:
      dot_q45_K<DType::q5_K, R, NW>(wr, reinterpret_cast<const BlockQ8_K* const*>(rows), K / QK_K, ys, ldy);
      return;
    case DType::q6_K: dot_q6_K<R, NW>(wr, reinterpret_cast<const BlockQ8_K* const*>(rows), K / QK_K, ys, ldy); return;
    case DType::iq4_nl: q8_0_family<DType::iq4_nl, R, NW>(wr, reinterpret_cast<const BlockQ8_0* const*>(rows), K / QK, ys, ldy); return;
    case DType::iq4_xs: dot_iq4_xs<R, NW>(wr, reinterpret_cast<const BlockQ8_K* const*>(rows), K / QK_K, ys, ldy); return;
    case DType::f32:
    case DType::bf16:
    case DType::f16: return;
  }
}

// NW weight rows against M = 1..3 activation rows (the decode streams' tiles).
template <int NW>
inline void few_rows_tile(int64_t M, DType t, const uint8_t* const* wr, const uint8_t* xq, size_t xstride, int64_t K,
                          float* const* ys, int64_t ldy) {
  if (M == 1)
    row_tile<1, NW>(t, wr, xq, xstride, K, ys, ldy);
  else if (M == 2)
    row_tile<2, NW>(t, wr, xq, xstride, K, ys, ldy);
  else
    row_tile<3, NW>(t, wr, xq, xstride, K, ys, ldy);
}

// NW adjacent weight rows from n against R activation rows from row m.
template <int R, int NW>
inline void rows_tile(DType t, const uint8_t* wb, size_t wrow, int64_t n, const uint8_t* xb, size_t xrow, int64_t m,
                      int64_t K, float* y, int64_t ldy) {
  const uint8_t* wr[NW];
  float* ys[NW];
  for (int i = 0; i < NW; ++i) {
    wr[i] = wb + static_cast<size_t>(n + i) * wrow;
    ys[i] = y + m * ldy + n + i;
  }
  row_tile<R, NW>(t, wr, xb + static_cast<size_t>(m) * xrow, xrow, K, ys, ldy);
}

// Decode-sized batches (1..3 rows): the row range read as 4 streams side by side (a core reads
// several streams faster than one: docs/performance.md), weight row n0 + s q + i of stream s.
template <int R>
inline void four_streams(DType t, const uint8_t* wb, size_t wrow, int64_t n0, int64_t n1, const uint8_t* xb, size_t xrow,
                         int64_t K, float* y, int64_t ldy) {
  const int64_t q = (n1 - n0) / 4;
  for (int64_t i = 0; i < q; ++i) {
    const uint8_t* wr[4];
    float* ys[4];
    for (int s = 0; s < 4; ++s) {
      const int64_t n = n0 + s * q + i;
      wr[s] = wb + static_cast<size_t>(n) * wrow;
      ys[s] = y + n;
    }
    row_tile<R, 4>(t, wr, xb, xrow, K, ys, ldy);
  }
  for (int64_t n = n0 + 4 * q; n < n1; ++n) rows_tile<R, 1>(t, wb, wrow, n, xb, xrow, 0, K, y, ldy);
}

}  // namespace

void matmul_quant_streams(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t N, int64_t p0,
                          int64_t p1, float* y, int64_t ldy, int64_t slice) {
  constexpr int64_t P = kPanel;
  if (slice == 0) return matmul_quant(xq, M, K, w, wt, p0 * P, std::min(N, p1 * P), y, ldy);
  const size_t wrow = row_bytes(wt, K);
  const size_t xrow = act_row_bytes(dtype_info(wt).act, K);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  // Row i of panels p, p + slice, p + 2 slice, p + 3 slice side by side: four streams that far apart.
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t i = 0; i < P; ++i) {
      const uint8_t* wr[4];
      float* ys[4];
      int count = 0;
      for (int s = 0; s < 4; ++s) {
        const int64_t n = (p + s * slice) * P + i;
        if (n >= N) continue;
        wr[count] = wb + static_cast<size_t>(n) * wrow;
        ys[count++] = y + n;
      }
      if (count == 4) {
        few_rows_tile<4>(M, wt, wr, xb, xrow, K, ys, ldy);
        continue;
      }
      for (int j = 0; j < count; ++j) few_rows_tile<1>(M, wt, wr + j, xb, xrow, K, ys + j, ldy);
    }
}

void quantize_act(ActQuant a, const float* x, int64_t M, int64_t K, void* out) {
  const size_t rb = act_row_bytes(a, K);
  for (int64_t m = 0; m < M; ++m) {
    void* y = static_cast<unsigned char*>(out) + static_cast<size_t>(m) * rb;
    switch (a) {
      case ActQuant::q8_0: quantize_q8_0_row(x + m * K, static_cast<BlockQ8_0*>(y), K); break;
      case ActQuant::q8_1: quantize_q8_1_row(x + m * K, static_cast<BlockQ8_1*>(y), K); break;
      case ActQuant::q8_K: quantize_q8_K_row(x + m * K, static_cast<BlockQ8_K*>(y), K); break;
      case ActQuant::none: break;
    }
  }
}

void matmul_quant(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
                  int64_t ldy) {
  constexpr int64_t kPanelRows = 16;
  const size_t wrow = row_bytes(wt, K);
  const size_t xrow = act_row_bytes(dtype_info(wt).act, K);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  if (M == 1) return four_streams<1>(wt, wb, wrow, n0, n1, xb, xrow, K, y, ldy);
  if (M == 2) return four_streams<2>(wt, wb, wrow, n0, n1, xb, xrow, K, y, ldy);
  if (M == 3) return four_streams<3>(wt, wb, wrow, n0, n1, xb, xrow, K, y, ldy);
  if (M > 16 && gemm_quant(xq, M, K, w, wt, n0, n1, y, ldy)) return;
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
  switch (wt) {
    case DType::q8_0: return q32_tiles<DType::q8_0>(wb, wrow, n0, n1, xb, xrow, M, K, y, ldy);
    case DType::q4_0: return q32_tiles<DType::q4_0>(wb, wrow, n0, n1, xb, xrow, M, K, y, ldy);
    case DType::q5_0: return q32_tiles<DType::q5_0>(wb, wrow, n0, n1, xb, xrow, M, K, y, ldy);
    case DType::iq4_nl: return q32_tiles<DType::iq4_nl>(wb, wrow, n0, n1, xb, xrow, M, K, y, ldy);
    default: break;
  }
#endif
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
  if (wt == DType::q4_K) {
    // Q4_K's 64-byte tile shuffles each activation block into its group order and reduces 4
    // weight rows' sums together: tiles of 2 activation rows x 4 weight rows (all in registers)
    // share both, where 4 x 1 tiles paid them per weight row.
    for (int64_t p = n0; p < n1; p += kPanelRows) {
      const int64_t pe = std::min(n1, p + kPanelRows);
      for (int64_t m = 0; m < M; m += 2) {
        const bool two = m + 2 <= M;
        int64_t n = p;
        for (; n + 4 <= pe; n += 4)
          two ? rows_tile<2, 4>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy) : rows_tile<1, 4>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy);
        for (; n < pe; ++n)
          two ? rows_tile<2, 1>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy) : rows_tile<1, 1>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy);
      }
    }
    return;
  }
#endif
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
  // Q6_K's groups of 8 activation rows as row pairs, once for every weight row of the call.
  thread_local AlignedBuffer q6_pairs;
  const __m512i* q6_act = nullptr;
  if (wt == DType::q6_K && M >= 8) {
    const int64_t groups = M / 8, nb = K / QK_K;
    const size_t bytes = static_cast<size_t>(groups * nb * 4 * kQ6PairVecs) * sizeof(__m512i);
    if (q6_pairs.size() < bytes) q6_pairs.resize(bytes, false);
    for (int64_t g = 0; g < groups; ++g) {
      const BlockQ8_K* xs[8];
      for (int r = 0; r < 8; ++r) xs[r] = reinterpret_cast<const BlockQ8_K*>(xb + static_cast<size_t>(8 * g + r) * xrow);
      q6_pairs_act(xs, nb, q6_pairs.as<__m512i>() + g * nb * 4 * kQ6PairVecs);
    }
    q6_act = q6_pairs.as<__m512i>();
  }
#endif
  // Panels of 16 weight rows that stay in cache while every activation row passes them, in tiles
  // of MR rows (each weight block unpacked once per tile).
  for (int64_t p = n0; p < n1; p += kPanelRows) {
    const int64_t pe = std::min(n1, p + kPanelRows);
    int64_t m = 0;
    // AVX2, prefill with the 32-value types: 2 weight rows per tile, so each activation block is
    // loaded once for both (their unpacking is cheap); the K-quants unpack 8 groups per block and
    // keep 1, and so do the decode batches (4..16 rows), where 2 rows measured slower. (AVX-512
    // takes the 32-value types to q32_tiles above.)
    const bool q32 = wt == DType::q8_0 || wt == DType::q4_0 || wt == DType::q5_0 || wt == DType::iq4_nl;
    const int nw = q32 && M > 16 ? 2 : 1;
    // Q6_K: tiles of 8 rows (each weight block unpacked once for 8): on AVX-512 as 4 row pairs,
    // two rows to a vector (dot_q6_K_pairs, on the records built above), AVX2 a tile of its own.
    if (wt == DType::q6_K)
      for (; m + 8 <= M; m += 8) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
        const __m512i* act = q6_act + (m / 8) * (K / QK_K) * 4 * kQ6PairVecs;
#else
        const BlockQ8_K* xs[8];
        for (int r = 0; r < 8; ++r) xs[r] = reinterpret_cast<const BlockQ8_K*>(xb + static_cast<size_t>(m + r) * xrow);
#endif
        for (int64_t n = p; n < pe; ++n) {
          const uint8_t* wr = wb + static_cast<size_t>(n) * wrow;
          float* ys = y + m * ldy + n;
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
          dot_q6_K_pairs(wr, act, K / QK_K, ys, ldy);
#else
          dot_q6_K_r8(wr, xs, K / QK_K, ys, ldy);
#endif
        }
      }
    for (; m + MR <= M; m += MR) {
      int64_t n = p;
      if (nw == 2)
        for (; n + 2 <= pe; n += 2) rows_tile<MR, 2>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy);
      for (; n < pe; ++n) rows_tile<MR, 1>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy);
    }
    const int64_t rest = M - m;
    for (int64_t n = p; n < pe && rest > 0; ++n) {
      if (rest == 3)
        rows_tile<3, 1>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy);
      else if (rest == 2)
        rows_tile<2, 1>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy);
      else
        rows_tile<1, 1>(wt, wb, wrow, n, xb, xrow, m, K, y, ldy);
    }
  }
}

}  // namespace lumen::cpu::LUMEN_ISA
