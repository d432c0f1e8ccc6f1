#pragma once
// Device-side helpers shared by the k_*.cu files, and the two macros that let the same kernel
// sources also build for the CPU emulation in native/testing/cuda_emu/ (LUMEN_CUDA_EMU): kernel
// launches and dynamic shared memory.
#include <cuda_runtime.h>

#include <cstdint>

#if defined(LUMEN_CUDA_EMU)
#include "core/dtype.h"
#include "emu_device.h"  // native/testing/cuda_emu/include, on the emulation build's path
#define LUMEN_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::lumen::emu::launch(#kernel, kernel, grid, block, smem, stream, __VA_ARGS__)
#define LUMEN_DYN_SMEM(T, name) T* name = ::lumen::emu::dyn_smem<T>()
#else
#include <cuda_fp16.h>
#define LUMEN_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define LUMEN_DYN_SMEM(T, name) extern __shared__ __align__(16) T name[]
#endif

namespace lumen::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
// `red` is 32 floats of shared memory. Summation order is fixed (deterministic).
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `red` may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < nw; ++w) t += red[w];
  return t;
}

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

// f16 bits <-> f32 (an f16 KV cache). On a GPU its conversion instructions: widening is exact, and
// narrowing rounds to nearest-even with subnormals kept and overflow to infinity, as the CPU's F16C
// conversion and core/dtype.h's f32_to_f16 do (the same bits for every value but NaN payloads). The
// emulation runs core/dtype.h's scalar conversions in their place.
#if defined(LUMEN_CUDA_EMU)
__device__ __forceinline__ float f16_bits_to_f32(uint32_t h) { return ::lumen::f16_to_f32(static_cast<uint16_t>(h)); }
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) { return ::lumen::f32_to_f16(f); }
#else
__device__ __forceinline__ float f16_bits_to_f32(uint32_t h) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h))); }
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }
#endif

__device__ __forceinline__ float siluf_d(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float sigmoidf_d(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float softplusf_d(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}


// The fp32 tiled GEMMs' register tile (k_matmul.cu, k_quant.cu): 256 threads as 16 x 16 over a
// 64 x 64 output tile, thread (tx, ty) holding rows 4 ty .. 4 ty + 3 and columns 4 tx .. 4 tx + 3.
// tile_fma_4x4 adds the products of one k slice held in shared memory (as[k][row of X], bs[k][row
// of W], padded rows); tile_store_4x4 writes the outputs that lie inside Y [M, N].
template <int KS, int LD>
__device__ __forceinline__ void tile_fma_4x4(const float (&as)[KS][LD], const float (&bs)[KS][LD], int tx, int ty,
                                             float (&acc)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    float av[4], bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      av[i] = as[kk][ty * 4 + i];
      bv[i] = bs[kk][tx * 4 + i];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
  }
}

__device__ __forceinline__ void tile_store_4x4(const float (&acc)[4][4], float* __restrict__ Y, int M, int N, int m0,
                                               int n0, int tx, int ty) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n < N) Y[static_cast<int64_t>(m) * N + n] = acc[i][j];
    }
  }
}

}  // namespace lumen::cuda
