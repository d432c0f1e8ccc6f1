#pragma once
// Device side of the CPU emulation (LUMEN_CUDA_EMU): CUDA built-ins and intrinsics used by the
// kernels, warp collectives (shuffles, ldmatrix, mma.sync, cp.async) as the PTX ISA defines them,
// and kernel launches. Each CUDA thread runs as a fiber; a warp collective waits for all 32 lanes,
// __syncthreads for the whole block; a collective that cannot complete is reported as a deadlock.
// Emulation only: it checks the kernels' indexing, synchronisation and arithmetic, not the GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace lumen::emu {

const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void syncthreads();
int syncthreads_or(int predicate);
float shfl_xor(float v, int lane_mask);
void cp_async16(uint32_t smem_off, const void* src, bool valid);
void ldmatrix_x4(uint32_t smem_off, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3);
void mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b);
size_t smem_offset(const void* p);
void* dyn_smem_base();
template <class T>
T* dyn_smem() {
  return static_cast<T*>(dyn_smem_base());
}

void submit(cudaStream_t s, const char* name, const void* func, dim3 grid, dim3 block, size_t smem,
            std::function<void()> body);

// Copies the parameters now, as a launch does (a captured graph replays these copies).
template <typename... P, typename... A>
void launch(const char* name, void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel argument count");
  std::tuple<std::decay_t<P>...> params(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
  submit(s, name, reinterpret_cast<const void*>(k), grid, block, smem, [k, params]() { std::apply(k, params); });
}

}  // namespace lumen::emu

#define threadIdx (::lumen::emu::thread_idx())
#define blockIdx (::lumen::emu::block_idx())
#define blockDim (::lumen::emu::block_dim())
#define gridDim (::lumen::emu::grid_dim())

inline void __syncthreads() { ::lumen::emu::syncthreads(); }
inline int __syncthreads_or(int predicate) { return ::lumen::emu::syncthreads_or(predicate); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) { return ::lumen::emu::shfl_xor(v, lane_mask); }
// Fibers switch only at collectives and barriers, so a read-modify-write is atomic here.
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
template <class T>
inline T __ldg(const T* p) { return *p; }
template <class T>
inline T __ldcs(const T* p) { return *p; }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline size_t __cvta_generic_to_shared(const void* p) { return ::lumen::emu::smem_offset(p); }
