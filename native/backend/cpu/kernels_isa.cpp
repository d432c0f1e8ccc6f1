// CPU kernels, compiled once per ISA: LUMEN_ISA=avx2 (-mavx2 -mfma) or avx512 (-mavx512f/bw/vl/bf16).
// The vector width follows the compiler flags; everything accumulates in fp32.
#include <immintrin.h>

#include <cstring>

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
inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
inline vf vload_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
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
#endif

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

}  // namespace

extern const Kernels table;
const Kernels table = {
#if defined(__AVX512F__)
    "avx512",
#else
    "avx2",
#endif
    matmul, dot, axpy, scale, sumsq, row_to_f32};

}  // namespace lumen::cpu::LUMEN_ISA
