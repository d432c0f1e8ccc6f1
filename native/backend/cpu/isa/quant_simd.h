#pragma once
// Block-quantized values unpacked to bytes with 256-bit vectors, shared by the kernel files that
// read the same block layout (quant_matmul.cpp's tiles, quant_gemm.cpp's panels). The layouts and
// the scalar reference: core/quant_ref.h.
#include "backend/cpu/isa/simd.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

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
