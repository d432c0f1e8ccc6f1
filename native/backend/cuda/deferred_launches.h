#pragma once
// Launches the CUDA backend defers so that ops the model calls one at a time leave as fewer
// launches: matmuls that read the same input in a row become one (q|k|v, the four DeltaNet input
// projections, gate|up), a residual add is fused into the RMSNorm that reads its result, and for
// few-row steps a SwiGLU is folded into the gate|up launch. Every buffer the Backend interface
// promises to write is still written. Also picks the product kernel for a shape (GEMV for few
// rows, tensor cores for bf16, SIMT otherwise; for block-quantized weights the quantized GEMV or
// GEMM, one weight type per launch: matrices of different types are never merged).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace lumen::cuda {

class DeferredLaunches {
 public:
  // x rounded to bf16 for the tensor-core products (null: they are not used), and the low part
  // of x for the precise mode (LUMEN_CUDA_PRECISE_GEMM: two passes, about fp32 accuracy).
  void set_bf16_workspace(uint16_t* x_bf16, uint16_t* x_bf16_lo, bool precise) {
    x_bf16_ = x_bf16;
    x_bf16_lo_ = x_bf16_lo;
    precise_ = precise;
  }

  // Row and element counts are the launches' (padded) ones. `now`: launch at once (profiling).
  void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps, cudaStream_t s);
  void matmul(const float* x, int rows, const WMat& w, float* y, bool now, cudaStream_t s);
  void add(float* y, const float* x, int64_t n, bool now, cudaStream_t s);
  void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);

  // Launches whatever is pending.
  void flush(cudaStream_t s) {
    flush_matmul(s);
    flush_add(s);
  }
  // Forgets what is pending (a failed graph capture: those launches never happen).
  void drop() {
    matmul_ = {};
    add_ = {};
    swiglu_out_ = nullptr;
  }

 private:
  void flush_add(cudaStream_t s);
  void flush_matmul(cudaStream_t s);

  struct PendingMatmul {
    const float* x = nullptr;
    int rows = 0;
    DType dtype = DType::f32;
    int K = 0;
    int n = 0;
    WMat w[4];
    float* y[4] = {nullptr, nullptr, nullptr, nullptr};
  } matmul_;
  struct PendingAdd {
    float* y = nullptr;
    const float* x = nullptr;
    int64_t n = 0;
  } add_;
  float* swiglu_out_ = nullptr;  // the pending gate|up launch also writes silu(gate) * up here
  uint16_t* x_bf16_ = nullptr;
  uint16_t* x_bf16_lo_ = nullptr;
  bool precise_ = false;
};

}  // namespace lumen::cuda
