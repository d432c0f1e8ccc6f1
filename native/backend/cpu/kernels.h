#pragma once
// CPU kernel table. kernels_isa.cpp is compiled once per ISA; kernels() returns the table of the
// ISA chosen at run time (core/cpu_features.h).
#include <cstdint>

#include "core/dtype.h"

namespace lumen::cpu {

struct Kernels {
  const char* name;
  // y[m*ldy + n] = dot(x[m*K ..], W[n*K ..]) for m in [0, M), n in [n0, n1). W is f32 or bf16.
  void (*matmul)(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1,
                 float* y, int64_t ldy);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a*x
  void (*scale)(float* y, float a, int64_t n);                 // y *= a
  float (*sumsq)(const float* x, int64_t n);
  // Row-wise fp32 weights -> f32 (embedding lookup of one row).
  void (*row_to_f32)(const void* w, DType wt, int64_t row, int64_t cols, float* out);
};

const Kernels& kernels();

namespace avx2 { extern const Kernels table; }
namespace avx512 { extern const Kernels table; }

}  // namespace lumen::cpu
