#pragma once
// SIMD mappings shared by the per-ISA kernel files: one vector type `vf` of VW floats and the
// operations on it, for the ISA the file is being compiled for (AVX-512 when the compiler flags
// enable it, else AVX2 + FMA), so the kernels are written once for both. Included by every
// kernel file of native/backend/cpu/isa/, each compiled once per ISA (see CMakeLists.txt).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#ifndef LUMEN_ISA
#error "LUMEN_ISA must be defined (avx2 or avx512): the kernel files are compiled once per ISA"
#endif

namespace lumen::cpu::LUMEN_ISA {
namespace {

/** The sum of a 256-bit vector's 8 floats (both ISAs: AVX2's vsum, and 256-bit accumulators elsewhere). */
inline float hsum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

/** An f16 value (a block scale) as f32, and an f32 rounded to f16 (nearest-even). */
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f2h(float f) { return static_cast<uint16_t>(_cvtss_sh(f, 0)); }

// The KV cache's elements for the attention kernels (kvload, kvscalar): float, or uint16_t holding
// IEEE half bits (an f16 cache, widened exactly). Here uint16_t means f16; the bf16 weights' loads
// are wload's.
inline float kvscalar(const float* p) { return *p; }
inline float kvscalar(const uint16_t* p) { return _cvtsh_ss(*p); }

/** 8 x 8 transpose of 32-bit elements: out[j] = element j of in[0..7]. */
inline void transpose8(const __m256* in, __m256* out) {
  const __m256 a0 = _mm256_unpacklo_ps(in[0], in[1]), a1 = _mm256_unpackhi_ps(in[0], in[1]);
  const __m256 a2 = _mm256_unpacklo_ps(in[2], in[3]), a3 = _mm256_unpackhi_ps(in[2], in[3]);
  const __m256 a4 = _mm256_unpacklo_ps(in[4], in[5]), a5 = _mm256_unpackhi_ps(in[4], in[5]);
  const __m256 a6 = _mm256_unpacklo_ps(in[6], in[7]), a7 = _mm256_unpackhi_ps(in[6], in[7]);
  const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xee);
  const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xee);
  const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xee);
  const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xee);
  out[0] = _mm256_permute2f128_ps(b0, b4, 0x20);
  out[1] = _mm256_permute2f128_ps(b1, b5, 0x20);
  out[2] = _mm256_permute2f128_ps(b2, b6, 0x20);
  out[3] = _mm256_permute2f128_ps(b3, b7, 0x20);
  out[4] = _mm256_permute2f128_ps(b0, b4, 0x31);
  out[5] = _mm256_permute2f128_ps(b1, b5, 0x31);
  out[6] = _mm256_permute2f128_ps(b2, b6, 0x31);
  out[7] = _mm256_permute2f128_ps(b3, b7, 0x31);
}

#if defined(__AVX512F__)
using vf = __m512;
constexpr int VW = 16;
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline vf kvload(const float* p) { return vload(p); }
inline vf kvload(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf vset1(float a) { return _mm512_set1_ps(a); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
// Lane l: vsum(v[l]) for all 16 vectors at once, bit for bit (the same pairs added in the same
// tree: lanes l and l + 8, then + 4, + 2, + 1), in 15 adds and 30 shuffles instead of 16 vsums.
inline vf vsum_lanes(const vf (&v)[16]) {
  // Output lane 4 k + j comes from input k + 4 j of the tree below, so the inputs are fed in that order.
  vf a[8], b[4], c[2];
  const auto in = [&](int i) { return v[4 * (i % 4) + i / 4]; };
  for (int i = 0; i < 8; ++i)  // + 8: two inputs' 8 partial sums a vector
    a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(in(2 * i), in(2 * i + 1), 0x44), _mm512_shuffle_f32x4(in(2 * i), in(2 * i + 1), 0xEE));
  for (int i = 0; i < 4; ++i)  // + 4: four inputs' 4 a vector, one a 128-bit lane
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88), _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i) {  // + 2
    const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));  // + 1
}
inline vf vload_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
// The 2*VW bf16 values at p as two vectors of floats without a widening shuffle: dword j holds
// p[2j] (low half) and p[2j+1] (high half), so a shift gives the even positions and a mask the odd
// ones (see split_x for the matching order of x).
inline vf vbf16_even(const uint16_t* p) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16)); }
inline vf vbf16_odd(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
// Per lane: if_gt where x > m (ordered: never for NaN), else otherwise.
inline vf vgt_select(vf x, vf m, vf if_gt, vf otherwise) { return _mm512_mask_mov_ps(otherwise, _mm512_cmp_ps_mask(x, m, _CMP_GT_OQ), if_gt); }
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
inline vf kvload(const float* p) { return vload(p); }
inline vf kvload(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void vstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf vset1(float a) { return _mm256_set1_ps(a); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline float vsum(vf v) { return hsum8(v); }
// Lane l: vsum(v[l]) for all 8 vectors at once, bit for bit (hsum8's pairs: lanes l and l + 4,
// then + 2, + 1), in 7 adds and 14 shuffles instead of 8 hsum8s.
inline vf vsum_lanes(const vf (&v)[8]) {
  // Output lane 4 k + j comes from input k + 2 j of the tree below, so the inputs are fed in that order.
  vf a[4], b[2];
  const auto in = [&](int i) { return v[4 * (i % 2) + i / 2]; };
  for (int i = 0; i < 4; ++i)  // + 4
    a[i] = _mm256_add_ps(_mm256_permute2f128_ps(in(2 * i), in(2 * i + 1), 0x20), _mm256_permute2f128_ps(in(2 * i), in(2 * i + 1), 0x31));
  for (int i = 0; i < 2; ++i) {  // + 2
    const __m256d x = _mm256_castps_pd(a[2 * i]), y = _mm256_castps_pd(a[2 * i + 1]);
    b[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
  }
  return _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x88), _mm256_shuffle_ps(b[0], b[1], 0xDD));  // + 1
}
inline vf vload_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
inline vf vbf16_even(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i*)p), 16));
}
inline vf vbf16_odd(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_loadu_si256((const __m256i*)p), _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf vgt_select(vf x, vf m, vf if_gt, vf otherwise) { return _mm256_blendv_ps(otherwise, if_gt, _mm256_cmp_ps(x, m, _CMP_GT_OQ)); }
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
  p = vfma(p, vmul(r, r), vadd(r, vset1(1.f)));
  return vmul(p, vpow2i(n));
}
inline vf vsilu(vf x) { return vdiv(x, vadd(vset1(1.f), vexp(vsub(vzero(), x)))); }
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
}  // namespace lumen::cpu::LUMEN_ISA
