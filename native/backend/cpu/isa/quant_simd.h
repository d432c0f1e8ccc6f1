#pragma once
// Block-quantized values unpacked to bytes with 256-bit vectors, shared by the kernel files that
// read the same block layout (quant_matmul.cpp's tiles, quant_gemm.cpp's panels). The layouts and
// the scalar reference: core/quant_ref.h.
#include "backend/cpu/isa/simd.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

// Half h (elements 128 h .. 128 h + 127) of a Q6_K block as 4 vectors of 32 values 0..63 (the
// stored 6 bits; the -32 offset left to the caller), element order: value 128 h + 32 j + e is
// ql[64 h + 32 (j % 2) + e], nibble j / 2, with bits 2j, 2j + 1 of qh[32 h + e] above it.
inline void q6_K_half(const uint8_t* ql, const uint8_t* qh, int h, __m256i* v) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32));
  const __m256i hh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
  v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hh, m3), 4));
  v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 2), m3), 4));
  v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 4), m3), 4));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 6), m3), 4));
}

}  // namespace
}  // namespace lumen::cpu::LUMEN_ISA
