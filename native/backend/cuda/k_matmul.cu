// Matrix products y = x Wᵀ with W [N][K] row-major (bf16 or f32) and x, y fp32.
//  - gemv: few rows of x (decode). Each block owns 4 weight rows and streams them once with 16-byte
//    loads, its 4 warps splitting K; every row of x reuses the loaded weights. Accumulation order
//    per output does not depend on the number of rows, so padded graph replays give the same bits.
//  - gemm_bf16: tensor cores (mma.sync m16n8k16, bf16 inputs, fp32 accumulators), 128x128x32 tiles,
//    3-stage cp.async pipeline, ldmatrix fragments. x is first rounded to bf16 by the caller.
//  - gemm_simt: fp32 FMA tiles, for f32 weights and for shapes the tensor-core path does not take.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// GEMV / skinny GEMM

constexpr int kGemvRows = 4;     // weight rows per block
constexpr int kGemvWarps = 4;    // warps per block, splitting K

template <typename WT>
struct WTraits;
template <>
struct WTraits<uint16_t> {
  static constexpr int kVec = 8;
  __device__ static void expand(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xffff0000u);
    f[4] = __uint_as_float(v.z << 16);
    f[5] = __uint_as_float(v.z & 0xffff0000u);
    f[6] = __uint_as_float(v.w << 16);
    f[7] = __uint_as_float(v.w & 0xffff0000u);
  }
  __device__ static float scalar(const uint16_t* p) { return bf16_bits_to_f32(*p); }
};
template <>
struct WTraits<float> {
  static constexpr int kVec = 4;
  __device__ static void expand(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ static float scalar(const float* p) { return *p; }
};

template <int M, typename WT>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const GemvArgs a) {
  constexpr int R = kGemvRows;
  constexpr int VEC = WTraits<WT>::kVec;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int K = a.K;
  const int q = blockIdx.x;

  // Resolve this block's weight rows: (matrix, row) pairs.
  const WT* wrow[R];
  float* yptr[R];
  int ldy[R];
  bool ok[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int si = 0, n = 0;
    if (a.swiglu_out) {
      si = r >> 1;                 // rows 0,1 of the gate, then 0,1 of the up projection
      n = 2 * q + (r & 1);
    } else {
      n = q * R + r;
      while (si < a.nseg - 1 && n >= a.seg[si].n) {
        n -= a.seg[si].n;
        ++si;
      }
    }
    ok[r] = si < a.nseg && n < a.seg[si].n;
    wrow[r] = static_cast<const WT*>(a.seg[si].w) + static_cast<int64_t>(ok[r] ? n : 0) * K;
    yptr[r] = a.seg[si].y + (ok[r] ? n : 0);
    ldy[r] = a.seg[si].n;
  }

  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.f;

  bool vec_ok = (K % VEC) == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
#pragma unroll
  for (int r = 0; r < R; ++r) vec_ok = vec_ok && (reinterpret_cast<uintptr_t>(wrow[r]) & 15) == 0;

  if (vec_ok) {
    const int step = kGemvWarps * 32 * VEC;
#pragma unroll 2
    for (int k = (warp * 32 + lane) * VEC; k < K; k += step) {
      float wf[R][VEC];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        uint4 raw = make_uint4(0u, 0u, 0u, 0u);
        if (ok[r]) raw = __ldcs(reinterpret_cast<const uint4*>(wrow[r] + k));
        WTraits<WT>::expand(raw, wf[r]);
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const int xm = m < a.m_real ? m : a.m_real - 1;
        const float4* xp = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(xm) * K + k);
        float xv[VEC];
#pragma unroll
        for (int e = 0; e < VEC / 4; ++e) {
          const float4 t = __ldg(xp + e);
          xv[4 * e] = t.x;
          xv[4 * e + 1] = t.y;
          xv[4 * e + 2] = t.z;
          xv[4 * e + 3] = t.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[m][r] = fmaf(xv[e], wf[r][e], acc[m][r]);
      }
    }
  } else {
    for (int k = warp * 32 + lane; k < K; k += kGemvWarps * 32) {
      float wf[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wf[r] = ok[r] ? WTraits<WT>::scalar(wrow[r] + k) : 0.f;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const int xm = m < a.m_real ? m : a.m_real - 1;
        const float xv = a.x[static_cast<int64_t>(xm) * K + k];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = fmaf(xv, wf[r], acc[m][r]);
      }
    }
  }

  __shared__ float red[kGemvWarps][M * R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = warp_sum(acc[m][r]);
      if (lane == 0) red[warp][m * R + r] = v;
    }
  __syncthreads();
  if (a.swiglu_out) {
    __shared__ float tot[M * R];
    for (int t = threadIdx.x; t < M * R; t += blockDim.x) {
      float v = 0.f;
      for (int w = 0; w < kGemvWarps; ++w) v += red[w][t];
      tot[t] = v;
    }
    __syncthreads();
    const int n_out = a.seg[0].n;
    for (int t = threadIdx.x; t < M * 2; t += blockDim.x) {
      const int m = t >> 1, rr = t & 1;
      const int n = 2 * q + rr;
      if (m >= a.m_real || n >= n_out) continue;
      const float g = tot[m * R + rr], u = tot[m * R + 2 + rr];
      const int64_t idx = static_cast<int64_t>(m) * n_out + n;
      a.seg[1].y[idx] = u;
      if (a.swiglu_out != a.seg[0].y) a.seg[0].y[idx] = g;
      a.swiglu_out[idx] = siluf_d(g) * u;
    }
    return;
  }
  for (int t = threadIdx.x; t < M * R; t += blockDim.x) {
    const int m = t / R, r = t % R;
    float v = 0.f;
    for (int w = 0; w < kGemvWarps; ++w) v += red[w][t];
    if (m < a.m_real && ok[r]) yptr[r][static_cast<int64_t>(m) * ldy[r]] = v;
  }
}

template <typename WT>
void gemv_dispatch(const GemvArgs& a, int m_pad, unsigned grid, cudaStream_t s) {
  constexpr int T = kGemvWarps * 32;
  void (*k)(const GemvArgs) = nullptr;
  switch (m_pad) {
    case 1: k = gemv_kernel<1, WT>; break;
    case 2: k = gemv_kernel<2, WT>; break;
    case 4: k = gemv_kernel<4, WT>; break;
    case 8: k = gemv_kernel<8, WT>; break;
    case 16: k = gemv_kernel<16, WT>; break;
    default: throw std::runtime_error("gemv: unsupported row count " + std::to_string(m_pad));
  }
  LUMEN_LAUNCH(k, grid, T, 0, s, a);
}

// ---------------------------------------------------------------------------------------------
// Tensor-core GEMM

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 3, kLds = kBK + 8;  // 80-byte rows: ldmatrix without conflicts
constexpr int kGemmThreads = 256;
constexpr size_t kGemmSmem = static_cast<size_t>(kStages) * (kBM + kBN) * kLds * sizeof(uint16_t);

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
#if defined(LUMEN_CUDA_EMU)
  emu::cp_async16(dst, src, valid);
#elif __CUDA_ARCH__ >= 800
  const int n = valid ? 16 : 0;  // zero-fill when out of range
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if !defined(LUMEN_CUDA_EMU) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if !defined(LUMEN_CUDA_EMU) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
#if defined(LUMEN_CUDA_EMU)
  emu::ldmatrix_x4(addr, r0, r1, r2, r3);
#elif __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
#endif
}

__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, const uint32_t* b) {
#if defined(LUMEN_CUDA_EMU)
  emu::mma_m16n8k16_bf16(c, a, b);
#elif __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__global__ void __launch_bounds__(kGemmThreads) gemm_bf16_kernel(const uint16_t* __restrict__ A, int M, int K,
                                                                 const uint16_t* __restrict__ B, int N,
                                                                 float* __restrict__ C, int accumulate) {
  LUMEN_DYN_SMEM(uint16_t, smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp & 1, warp_n = warp >> 1;  // 2 x 4 warps, 64 x 32 each
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN;
  const int KT = (K + kBK - 1) / kBK;

  auto a_tile = [&](int st) { return smem + static_cast<size_t>(st) * (kBM + kBN) * kLds; };
  auto b_tile = [&](int st) { return a_tile(st) + kBM * kLds; };

  auto load_stage = [&](int st, int kt) {
    const int k0 = kt * kBK;
    uint16_t* as = a_tile(st);
    uint16_t* bs = b_tile(st);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * kGemmThreads;  // 512 groups of 8 elements per operand
      const int row = c >> 2, kc = (c & 3) * 8;
      const int k = k0 + kc;
      const bool va = (m0 + row) < M && k < K;
      const bool vb = (n0 + row) < N && k < K;
      const uint16_t* ga = va ? A + static_cast<int64_t>(m0 + row) * K + k : A;
      const uint16_t* gb = vb ? B + static_cast<int64_t>(n0 + row) * K + k : B;
      cp_async16(smem_addr(as + row * kLds + kc), ga, va);
      cp_async16(smem_addr(bs + row * kLds + kc), gb, vb);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < KT) load_stage(st, st);
    cp_async_commit();
  }

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int nk = kt + kStages - 1;
    if (nk < KT) load_stage(nk % kStages, nk);
    cp_async_commit();

    const uint16_t* as = a_tile(kt % kStages);
    const uint16_t* bs = b_tile(kt % kStages);
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[4][4], bfr[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int row = warp_m * 64 + mi * 16 + (lane & 15);
        const int col = ks * 16 + (lane >> 4) * 8;
        ldmatrix_x4(smem_addr(as + row * kLds + col), af[mi][0], af[mi][1], af[mi][2], af[mi][3]);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        const int row = warp_n * 32 + nj * 16 + (lane >> 4) * 8 + (lane & 7);
        const int col = ks * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(smem_addr(bs + row * kLds + col), bfr[2 * nj][0], bfr[2 * nj][1], bfr[2 * nj + 1][0],
                    bfr[2 * nj + 1][1]);
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
    }
  }
  cp_async_wait<0>();

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int col = n0 + warp_n * 32 + ni * 8 + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + warp_m * 64 + mi * 16 + g + h * 8;
        if (row >= M) continue;
        float* dst = C + static_cast<int64_t>(row) * N + col;
        float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
        if (accumulate) {
          if (col < N) v0 += dst[0];
          if (col + 1 < N) v1 += dst[1];
        }
        if (col + 1 < N && (N & 1) == 0) {
          *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
        } else {
          if (col < N) dst[0] = v0;
          if (col + 1 < N) dst[1] = v1;
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// fp32 tiled GEMM

constexpr int kSB = 64, kSK = 16;

template <typename WT>
__global__ void __launch_bounds__(256) gemm_simt_kernel(const float* __restrict__ X, int M, int K,
                                                        const WT* __restrict__ W, int N, float* __restrict__ Y) {
  __shared__ float as[kSK][kSB + 4];
  __shared__ float bs[kSK][kSB + 4];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.x * kSB, n0 = blockIdx.y * kSB;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kSK) {
    for (int i = tid; i < kSB * kSK; i += 256) {
      const int r = i / kSK, kk = i % kSK;
      const int k = k0 + kk;
      as[kk][r] = (m0 + r < M && k < K) ? X[static_cast<int64_t>(m0 + r) * K + k] : 0.f;
      bs[kk][r] = (n0 + r < N && k < K) ? WTraits<WT>::scalar(W + static_cast<int64_t>(n0 + r) * K + k) : 0.f;
    }
    __syncthreads();
    tile_fma_4x4(as, bs, tx, ty, acc);
    __syncthreads();
  }
  tile_store_4x4(acc, Y, M, N, m0, n0, tx, ty);
}

}  // namespace

void launch_gemv(const GemvArgs& a, int m_pad, cudaStream_t s) {
  if (a.m_real <= 0 || a.nseg <= 0) return;
  if (a.m_real > m_pad) throw std::runtime_error("gemv: more rows than the padded count");
  int64_t groups = 0;
  if (a.swiglu_out) {
    if (a.nseg != 2 || a.seg[0].n != a.seg[1].n) throw std::runtime_error("gemv: fused SwiGLU needs gate and up of one size");
    groups = (a.seg[0].n + 1) / 2;
  } else {
    int64_t total = 0;
    for (int i = 0; i < a.nseg; ++i) total += a.seg[i].n;
    groups = (total + kGemvRows - 1) / kGemvRows;
  }
  if (groups <= 0) return;
  if (groups > 0x7fffffff) throw std::runtime_error("gemv: matrix too large");
  if (a.bf16)
    gemv_dispatch<uint16_t>(a, m_pad, static_cast<unsigned>(groups), s);
  else
    gemv_dispatch<float>(a, m_pad, static_cast<unsigned>(groups), s);
  LUMEN_CUDA_LAUNCHED("gemv");
}

void launch_gemm_bf16(const uint16_t* xb, int M, int K, const uint16_t* w, int N, float* y, cudaStream_t s,
                      bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K % 8 != 0) throw std::runtime_error("gemm_bf16: K must be a multiple of 8");
  const int gm = (M + kBM - 1) / kBM, gn = (N + kBN - 1) / kBN;
  if (gn > 65535) throw std::runtime_error("gemm_bf16: N too large");
  // blockIdx.x runs over M so consecutive blocks share one weight tile (read once from memory).
  LUMEN_LAUNCH(gemm_bf16_kernel, dim3(gm, gn), kGemmThreads, kGemmSmem, s, xb, M, K, w, N, y, accumulate ? 1 : 0);
  LUMEN_CUDA_LAUNCHED("gemm_bf16");
}

void launch_gemm_simt(const float* x, int M, int K, const void* w, bool bf16, int N, float* y, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  const int gm = (M + kSB - 1) / kSB, gn = (N + kSB - 1) / kSB;
  if (gn > 65535) throw std::runtime_error("gemm_simt: N too large");
  if (bf16) {
    auto* k = gemm_simt_kernel<uint16_t>;
    LUMEN_LAUNCH(k, dim3(gm, gn), 256, 0, s, x, M, K, static_cast<const uint16_t*>(w), N, y);
  } else {
    auto* k = gemm_simt_kernel<float>;
    LUMEN_LAUNCH(k, dim3(gm, gn), 256, 0, s, x, M, K, static_cast<const float*>(w), N, y);
  }
  LUMEN_CUDA_LAUNCHED("gemm_simt");
}

void init_matmul_kernels(int device) {
  int optin = 0;
  LUMEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (static_cast<size_t>(optin) < kGemmSmem)
    throw std::runtime_error("the GPU allows " + std::to_string(optin) + " bytes of shared memory per block; the GEMM needs " +
                             std::to_string(kGemmSmem));
  LUMEN_CUDA_CHECK(cudaFuncSetAttribute(gemm_bf16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kGemmSmem)));
}

}  // namespace lumen::cuda
