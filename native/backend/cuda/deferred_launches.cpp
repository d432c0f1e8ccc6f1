// The CUDA backend's deferred launches and launch fusion (see deferred_launches.h).
//
// Compiled only into builds with the CUDA backend (the addon's source glob also sees this file in
// CPU-only builds, where it is empty).
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/deferred_launches.h"

#include <stdexcept>

#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {
namespace {

int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

void DeferredLaunches::rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps,
                               cudaStream_t s) {
  flush_matmul(s);
  if (add_.y && add_.y == x && add_.n == static_cast<int64_t>(rows) * dim) {
    // y = x + o; xn = norm(y): one pass over the residual stream.
    float* xs = add_.y;
    const float* add = add_.x;
    add_ = {};
    launch_rmsnorm(xs, add, w, y, rows, dim, eps, s);
    return;
  }
  flush_add(s);
  launch_rmsnorm(const_cast<float*>(x), nullptr, w, y, rows, dim, eps, s);
}

void DeferredLaunches::matmul(const float* x, int rows, const WMat& w, float* y, bool now, cudaStream_t s) {
  flush_add(s);
  if (rows <= 0) return;
  if (w.dtype == DType::f16) throw std::runtime_error("CUDA backend: f16 weights are converted to f32 on load");
  const PendingMatmul& pm = matmul_;
  const bool same = pm.n > 0 && pm.x == x && pm.rows == rows && pm.dtype == w.dtype && pm.K == w.cols && pm.n < 4;
  if (!same) flush_matmul(s);
  if (matmul_.n == 0) {
    matmul_.x = x;
    matmul_.rows = rows;
    matmul_.dtype = w.dtype;
    matmul_.K = static_cast<int>(w.cols);
  }
  matmul_.w[matmul_.n] = w;
  matmul_.y[matmul_.n] = y;
  matmul_.n++;
  if (y == x || now) flush_matmul(s);
}

void DeferredLaunches::add(float* y, const float* x, int64_t n, bool now, cudaStream_t s) {
  flush_matmul(s);
  flush_add(s);
  add_ = {y, x, n};
  if (now) flush_add(s);
}

void DeferredLaunches::swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  flush_add(s);
  const PendingMatmul& pm = matmul_;
  if (pm.n == 2 && !is_quant(pm.dtype) && pm.y[0] == gate && pm.y[1] == up && pm.rows <= 16 && pm.w[0].rows == pm.w[1].rows &&
      pm.w[0].rows % 2 == 0 && out != up && n == static_cast<int64_t>(pm.rows) * pm.w[0].rows) {
    swiglu_out_ = out;
    flush_matmul(s);
    return;
  }
  flush_matmul(s);
  launch_swiglu(gate, up, out, n, s);
}

void DeferredLaunches::flush_add(cudaStream_t s) {
  if (!add_.y) return;
  const auto p = add_;
  add_ = {};
  launch_add(p.y, p.x, p.n, s);
}

void DeferredLaunches::flush_matmul(cudaStream_t s) {
  if (matmul_.n == 0) return;
  const auto p = matmul_;
  float* sw = swiglu_out_;
  matmul_ = {};
  swiglu_out_ = nullptr;
  const bool bf16 = p.dtype == DType::bf16;
  if (is_quant(p.dtype)) {
    // Block-quantized weights (one type per launch: matrices of different types were not merged).
    if (p.rows <= 16) {
      GemvArgs a;
      a.x = p.x;
      a.K = p.K;
      a.m_real = p.rows;
      a.nseg = p.n;
      for (int i = 0; i < p.n; ++i) {
        if (p.w[i].rows > 0x7fffffff) throw std::runtime_error("CUDA backend: matrix too large");
        a.seg[i] = GemvSeg{p.w[i].ptr, p.y[i], static_cast<int>(p.w[i].rows)};
      }
      launch_gemv_quant(a, p.dtype, next_pow2(p.rows), s);
      return;
    }
    for (int i = 0; i < p.n; ++i)
      launch_gemm_quant(p.x, p.rows, p.K, p.w[i].ptr, p.dtype, static_cast<int>(p.w[i].rows), p.y[i], s);
    return;
  }
  if (p.rows <= 16) {
    GemvArgs a;
    a.x = p.x;
    a.K = p.K;
    a.m_real = p.rows;
    a.bf16 = bf16;
    a.nseg = p.n;
    for (int i = 0; i < p.n; ++i) {
      if (p.w[i].rows > 0x7fffffff) throw std::runtime_error("CUDA backend: matrix too large");
      a.seg[i] = GemvSeg{p.w[i].ptr, p.y[i], static_cast<int>(p.w[i].rows)};
    }
    a.swiglu_out = sw;
    launch_gemv(a, next_pow2(p.rows), s);
    return;
  }
  if (bf16 && p.K % 8 == 0 && x_bf16_) {
    const int64_t n = static_cast<int64_t>(p.rows) * p.K;
    if (precise_) {
      // x = hi + lo, two tensor-core passes: about fp32 accuracy for twice the matrix work.
      launch_to_bf16_split(p.x, x_bf16_, x_bf16_lo_, n, s);
      for (int i = 0; i < p.n; ++i) {
        const auto* w = static_cast<const uint16_t*>(p.w[i].ptr);
        const int N = static_cast<int>(p.w[i].rows);
        launch_gemm_bf16(x_bf16_, p.rows, p.K, w, N, p.y[i], s);
        launch_gemm_bf16(x_bf16_lo_, p.rows, p.K, w, N, p.y[i], s, true);
      }
      return;
    }
    launch_to_bf16(p.x, x_bf16_, n, s);
    for (int i = 0; i < p.n; ++i)
      launch_gemm_bf16(x_bf16_, p.rows, p.K, static_cast<const uint16_t*>(p.w[i].ptr), static_cast<int>(p.w[i].rows),
                       p.y[i], s);
    return;
  }
  for (int i = 0; i < p.n; ++i)
    launch_gemm_simt(p.x, p.rows, p.K, p.w[i].ptr, bf16, static_cast<int>(p.w[i].rows), p.y[i], s);
}

}  // namespace lumen::cuda

#endif  // LUMEN_WITH_CUDA
