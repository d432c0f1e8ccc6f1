// Elementwise kernels: embedding rows, RMSNorm (optionally fused with the residual add), add,
// SwiGLU, row gather, fp32 -> bf16 conversion.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {

void init_matmul_kernels(int device);
void init_attn_kernels(int device);
void init_gdn_kernels(int device);

namespace {

inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 32) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g);
}

__global__ void embed_kernel(const void* __restrict__ table, int bf16, int dim, const int* __restrict__ tokens,
                             float* __restrict__ x) {
  const int row = blockIdx.x;
  const int64_t tok = tokens[row];
  float* dst = x + static_cast<int64_t>(row) * dim;
  if (bf16) {
    const uint16_t* src = static_cast<const uint16_t*>(table) + tok * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = bf16_bits_to_f32(src[i]);
  } else {
    const float* src = static_cast<const float*>(table) + tok * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void rmsnorm_kernel(float* x, const float* __restrict__ add, const float* __restrict__ w, float* y,
                               int dim, float eps) {
  // x and y may alias (in place): every element is read and written by the same thread.
  __shared__ float red[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = x[base + i];
    if (add) {
      v += add[base + i];
      x[base + i] = v;  // the residual stream keeps the sum; each element is owned by one thread
    }
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float inv = 1.f / sqrtf(ss / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) y[base + i] = x[base + i] * inv * w[i];
}

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void swiglu_kernel(const float* gate, const float* __restrict__ up, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = siluf_d(gate[i]) * up[i];
}

__global__ void gather_kernel(const float* __restrict__ x, const int* __restrict__ rows, int first, float* __restrict__ y,
                              int dim) {
  const int i = blockIdx.x;
  const int64_t r = rows[first + i];
  for (int d = threadIdx.x; d < dim; d += blockDim.x)
    y[static_cast<int64_t>(i) * dim + d] = x[r * dim + d];
}

__global__ void to_bf16_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = f32_to_bf16_bits(x[i]);
}

__global__ void to_bf16_split_kernel(const float* __restrict__ x, uint16_t* __restrict__ hi, uint16_t* __restrict__ lo,
                                     int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint16_t h = f32_to_bf16_bits(x[i]);
    hi[i] = h;
    lo[i] = f32_to_bf16_bits(x[i] - bf16_bits_to_f32(h));
  }
}

}  // namespace

void launch_embed(const void* table, bool bf16, int dim, const int* tokens, int rows, float* x, cudaStream_t s) {
  if (rows <= 0) return;
  LUMEN_LAUNCH(embed_kernel, rows, 256, 0, s, table, bf16 ? 1 : 0, dim, tokens, x);
  LUMEN_CUDA_LAUNCHED("embed");
}

void launch_rmsnorm(float* x, const float* add, const float* w, float* y, int rows, int dim, float eps,
                    cudaStream_t s) {
  if (rows <= 0) return;
  LUMEN_LAUNCH(rmsnorm_kernel, rows, 256, 0, s, x, add, w, y, dim, eps);
  LUMEN_CUDA_LAUNCHED("rmsnorm");
}

void launch_add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  LUMEN_LAUNCH(add_kernel, grid_for(n, 256), 256, 0, s, y, x, n);
  LUMEN_CUDA_LAUNCHED("add");
}

void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  LUMEN_LAUNCH(swiglu_kernel, grid_for(n, 256), 256, 0, s, gate, up, out, n);
  LUMEN_CUDA_LAUNCHED("swiglu");
}

void launch_gather_rows(const float* x, const int* rows, int first, int count, float* y, int dim, cudaStream_t s) {
  if (count <= 0) return;
  LUMEN_LAUNCH(gather_kernel, count, 256, 0, s, x, rows, first, y, dim);
  LUMEN_CUDA_LAUNCHED("gather_rows");
}

void launch_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  LUMEN_LAUNCH(to_bf16_kernel, grid_for(n, 256), 256, 0, s, x, y, n);
  LUMEN_CUDA_LAUNCHED("to_bf16");
}

void launch_to_bf16_split(const float* x, uint16_t* hi, uint16_t* lo, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  LUMEN_LAUNCH(to_bf16_split_kernel, grid_for(n, 256), 256, 0, s, x, hi, lo, n);
  LUMEN_CUDA_LAUNCHED("to_bf16_split");
}

void kernels_init(int device) {
  init_matmul_kernels(device);
  init_attn_kernels(device);
  init_gdn_kernels(device);
}

}  // namespace lumen::cuda
