#pragma once
// 256-bit helpers shared by the two block-quantized kernel files of this folder (quant_matmul.cpp:
// decode tiles; quant_gemm.cpp: prefill panels): f16 scales, integer sums, and the unpacking of
// 4-bit nibbles and Q5_0's fifth bits. Compiled once per ISA with the files that include it.
#include "backend/cpu/isa/simd.h"
#include "core/quant_ref.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// The sum of 8 int32 lanes.
inline int hsum_i32_8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
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
  b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}
// The 16 IQ4 levels in both 128-bit lanes (for _mm256_shuffle_epi8 by the nibbles).
inline __m256i iq4_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lumen::quant::kIQ4NL)));
}
// Q5_0's 32 values as int8: (nibble | fifth bit << 4) - 16 = nibble - (bit clear ? 16 : 0).
inline __m256i q5_0_values(const uint8_t* blk) {
  const __m256i hi = _mm256_andnot_si256(bits32(blk + 2), _mm256_set1_epi8(static_cast<char>(0xF0)));
  return _mm256_or_si256(nibbles32(blk + 6), hi);
}

}  // namespace
}  // namespace lumen::cpu::LUMEN_ISA
