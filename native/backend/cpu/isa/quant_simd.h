#pragma once
// What the block-quantized kernel files share (quant_matmul.cpp's tiles, quant_gemm.cpp's and
// quant_panels.cpp's panels): values unpacked to bytes with 256-bit vectors, the q8_K rows' scales
// and group sums, and the prefetch of the next weight panels. The layouts and the scalar
// reference: core/quant_ref.h.
#include <algorithm>
#include <cstring>

#include "backend/cpu/isa/simd.h"
#include "core/quant_ref.h"

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

// The q8_K rows' scales and group sums (xd [M][K / 256], xg [M][K / 32]).
inline void k_act_sums(const uint8_t* xq, int64_t M, int64_t K, float* xd, int16_t* xg) {
  const size_t rb = quant::act_row_bytes(ActQuant::q8_K, K);
  for (int64_t m = 0; m < M; ++m) {
    const auto* bl = reinterpret_cast<const quant::BlockQ8_K*>(xq + static_cast<size_t>(m) * rb);
    for (int64_t b = 0; b < K / quant::QK_K; ++b) {
      xd[m * (K / quant::QK_K) + b] = bl[b].d;
      for (int g = 0; g < 8; ++g)
        xg[m * (K / 32) + b * 8 + g] = static_cast<int16_t>(bl[b].bsums[2 * g] + bl[b].bsums[2 * g + 1]);
    }
  }
}

// The next block of panels' weight bytes (rows p1 .. p2, contiguous) prefetched to L2 a slice at
// a time while the activation tiles pass the current block, so its unpacking does not wait on
// memory (the rows are read once, a few KiB each: too short for the hardware prefetcher).
struct NextPanels {
  const uint8_t* base;
  int64_t lines, done = 0;
  NextPanels(const uint8_t* w, size_t wrow, int64_t p1, int64_t p2)
      : base(w + static_cast<size_t>(p1) * wrow), lines(std::max<int64_t>(0, p2 - p1) * static_cast<int64_t>(wrow) / 64) {}
  // After tile k of n: the lines up to the share (k + 1) / n of the whole.
  void step(int64_t k, int64_t n) {
    const int64_t upto = lines * (k + 1) / n;
    for (; done < upto; ++done) _mm_prefetch(reinterpret_cast<const char*>(base + 64 * done), _MM_HINT_T1);
  }
};

}  // namespace
}  // namespace lumen::cpu::LUMEN_ISA
