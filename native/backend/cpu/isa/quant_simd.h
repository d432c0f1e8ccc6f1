#pragma once
// Block-quantized values unpacked to bytes with 256-bit vectors, shared by the kernel files that
// read the same block layout (quant_matmul.cpp's tiles, quant_gemm.cpp's panels), and the steps of
// the activations' quantization (quant_matmul.cpp's quantize_act, quant_panels.cpp's q8_0 records).
// The layouts and the scalar reference: core/quant_ref.h.
#include "backend/cpu/isa/simd.h"
#include "core/quant_ref.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

inline int hsum_i32_8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// max |x| of 32 floats.
inline float amax32(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
  for (int i = 8; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

// amax32 of 8 consecutive blocks of 32 floats at once, block j's in lane j (the same values:
// max is exact in any order).
inline __m256 amax32x8(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[8];
  for (int j = 0; j < 8; ++j) {
    const float* p = x + 32 * j;
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(p));
    for (int i = 8; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(p + i)));
    v[j] = m;
  }
  // Per 128-bit half: pairs of vectors interleaved and folded, then quads, then the two halves.
  __m256 t[4];
  for (int j = 0; j < 4; ++j)
    t[j] = _mm256_max_ps(_mm256_unpacklo_ps(v[2 * j], v[2 * j + 1]), _mm256_unpackhi_ps(v[2 * j], v[2 * j + 1]));
  const __m256 u0 = _mm256_max_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 u1 = _mm256_max_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm256_max_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// The q8_0 scales of 8 consecutive blocks (quant_ref's quantize_row_q8_0): d = amax / 127 as f16
// (dh), that f16 widened back (dx), and the rounding multiplier 127 / amax (0 where amax is 0).
inline void q8_0_scales8(const float* x, uint16_t* dh, float* dx, float* id) {
  const __m256 amax = amax32x8(x), k127 = _mm256_set1_ps(127.f);
  const __m128i h = _mm256_cvtps_ph(_mm256_div_ps(amax, k127), _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dh), h);
  _mm256_storeu_ps(dx, _mm256_cvtph_ps(h));
  _mm256_storeu_ps(id, _mm256_and_ps(_mm256_div_ps(k127, amax), _mm256_cmp_ps(amax, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
}
// The same for the n (<= 8) consecutive blocks at x: 8 at once, fewer one at a time.
inline void q8_0_scales(const float* x, int n, uint16_t* dh, float* dx, float* id) {
  if (n == 8) return q8_0_scales8(x, dh, dx, id);
  for (int j = 0; j < n; ++j) {
    const float amax = amax32(x + 32 * j);
    dh[j] = f2h(amax / 127.f);
    dx[j] = h2f(dh[j]);
    id[j] = amax != 0.f ? 127.f / amax : 0.f;
  }
}

// 32 floats times `mul`, rounded half to even, as int32 (i[0..3], 8 each).
inline void round32_i32(const float* x, float mul, __m256i* i) {
  const __m256 vm = _mm256_set1_ps(mul);
  for (int k = 0; k < 4; ++k)
    i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vm), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// Those 32 values as saturated int8, in order.
inline __m256i pack32(const __m256i* i) {
  const __m256i a = _mm256_packs_epi32(i[0], i[1]);
  const __m256i b = _mm256_packs_epi32(i[2], i[3]);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
// 32 floats times `mul`, rounded half to even, as int8 in order; returns their int32 sum.
inline int round32(const float* x, float mul, int8_t* out) {
  __m256i i[4];
  round32_i32(x, mul, i);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), pack32(i));
  return hsum_i32_8(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
}

// n consecutive blocks of 32 floats quantized to q8_0 (quant_ref's quantize_row_q8_0), their
// scales 8 at a time; after block i is stored, done(i, its 32 int8 values, its scale widened back
// to f32) (the panels' activation side is built from those).
template <typename Done>
inline void q8_0_blocks(const float* x, quant::BlockQ8_0* y, int64_t n, Done&& done) {
  alignas(32) float dx[8], id[8];
  alignas(16) uint16_t dh[8];
  for (int64_t i = 0; i < n; i += 8) {
    const int c = static_cast<int>(n - i < 8 ? n - i : 8);
    q8_0_scales(x + i * 32, c, dh, dx, id);
    for (int j = 0; j < c; ++j) {
      y[i + j].d = dh[j];
      __m256i v[4];
      round32_i32(x + (i + j) * 32, id[j], v);
      const __m256i q = pack32(v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i + j].qs), q);
      done(i + j, q, dx[j]);
    }
  }
}

// Group j (< 4) of a Q6_K block half as 32 values 0..63 (the stored 6 bits; the -32 offset left
// to the caller): value 32 j + e of the half is nibble j / 2 of l[e] (l = l0 for even j, l1 for
// odd: the half's two 32-byte rows of ql), with bits 2j, 2j + 1 of hh[e] (its 32 bytes of qh)
// above it. j must be a constant (the callers unroll their loops): it picks the shifts.
// Those two bits are moved to bits 4, 5 by one 16-bit shift (none for j = 2) and masked: a bit a
// word shift carries across a byte boundary lands outside 4, 5 (Zen 3 runs shifts on the
// multiplies' two pipes, the masks on all four).
inline __m256i q6_K_high(__m256i hh, int j) {
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i t = j == 0 ? _mm256_slli_epi16(hh, 4) : j == 1 ? _mm256_slli_epi16(hh, 2) : j == 2 ? hh : _mm256_srli_epi16(hh, 2);
  return _mm256_and_si256(t, m30);
}
inline __m256i q6_K_group(__m256i l0, __m256i l1, __m256i hh, int j) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i l = j % 2 ? l1 : l0;
  const __m256i low = _mm256_and_si256(j < 2 ? l : _mm256_srli_epi16(l, 4), m4);
  return _mm256_or_si256(low, q6_K_high(hh, j));
}

// Half h (elements 128 h .. 128 h + 127) of a Q6_K block as its 4 groups (q6_K_group).
inline void q6_K_half(const uint8_t* ql, const uint8_t* qh, int h, __m256i* v) {
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32));
  const __m256i hh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) v[j] = q6_K_group(l0, l1, hh, j);
}

}  // namespace
}  // namespace lumen::cpu::LUMEN_ISA
