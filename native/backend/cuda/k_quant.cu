// Kernels over GGUF block-quantized weights kept in their file layout (core/quant_ref.h): Q8_0,
// Q5_0, Q4_K, Q6_K. Every kernel decodes weights through one primitive, decode8: the 8 values
// 8p..8p+7 of the 32-value chunk c of a row (a Q8_0 / Q5_0 block, or one of the 8 chunks of a
// K-quant block), computed as the scalar reference dequantizes them (f16 scales widened, then
// d·q, d·sc·q - dmin·m or d·sc·(q - 32) in fp32). Blocks are 34, 22, 144 and 210 bytes, so loads
// are at most as wide as a block's alignment allows: 2-byte loads for Q8_0 / Q5_0 / Q6_K, 4- and
// 8-byte loads for Q4_K (144 = 9·16: its blocks keep a row's 16-byte alignment).
//  - gemv: few rows of x (decode), fp32 activations, fp32 accumulation. One warp per weight row:
//    each lane decodes 8 weights at a time into registers and multiplies every row of x by them,
//    so each weight block is read once per launch. Accumulation order per output does not depend
//    on the number of rows (padded graph replays give the same bits).
//  - gemm: many rows (prefill), fp32 tiles: 64 x 64 outputs per block, K in steps of one chunk
//    (32 values) whose weights are decoded into shared memory as fp32.
//  - embed: rows of a quantized embedding table, decoded to fp32.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {
namespace {

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// IEEE half bits -> float, exact; infinities and NaN kept. Subnormal halves (common: a Q6_K scale
// of small weights) are computed as integer x 2^-24 from normal floats only, so the result does
// not depend on denormals-are-zero / flush-to-zero settings (-ftz, or a host thread's MXCSR in the
// emulation).
__device__ __forceinline__ float f16_bits_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  if (em >= 0x7c00u) return __uint_as_float(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
  if (em < 0x400u) return __uint_as_float(sign | __float_as_uint(static_cast<float>(em) * 5.9604644775390625e-8f));
  return __uint_as_float(sign | ((em + 0x1c000u) << 13));  // exponent bias 15 -> 127
}

template <DType T>
struct QLayout;
template <>
struct QLayout<DType::q8_0> {
  static constexpr int kBlock = 32, kBytes = 34;
};
template <>
struct QLayout<DType::q5_0> {
  static constexpr int kBlock = 32, kBytes = 22;
};
template <>
struct QLayout<DType::q4_K> {
  static constexpr int kBlock = 256, kBytes = 144;
};
template <>
struct QLayout<DType::q6_K> {
  static constexpr int kBlock = 256, kBytes = 210;
};

template <DType T>
__device__ __forceinline__ void decode8(const uint8_t* row, int c, int p, float* w);

template <>
__device__ __forceinline__ void decode8<DType::q8_0>(const uint8_t* row, int c, int p, float* w) {
  const uint8_t* b = row + static_cast<int64_t>(c) * 34;
  const float d = f16_bits_to_f32(ld16(b));
  const uint8_t* q = b + 2 + 8 * p;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = ld16(q + 2 * i);
    w[2 * i] = static_cast<float>(static_cast<int8_t>(v & 0xffu)) * d;
    w[2 * i + 1] = static_cast<float>(static_cast<int8_t>(v >> 8)) * d;
  }
}

template <>
__device__ __forceinline__ void decode8<DType::q5_0>(const uint8_t* row, int c, int p, float* w) {
  const uint8_t* b = row + static_cast<int64_t>(c) * 22;
  const float d = f16_bits_to_f32(ld16(b));
  const uint32_t qh = ld16(b + 2) | (ld16(b + 4) << 16);  // bit e: the fifth bit of value e
  const uint8_t* qs = b + 6 + ((8 * p) & 15);             // values 0..15: low nibbles, 16..31: high
  const int shift = p >= 2 ? 4 : 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = ld16(qs + 2 * i);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int e = 8 * p + 2 * i + h;
      const int lo = static_cast<int>(((v >> (8 * h)) >> shift) & 15u);
      const int q = (lo | static_cast<int>(((qh >> e) & 1u) << 4)) - 16;
      w[2 * i + h] = static_cast<float>(q) * d;
    }
  }
}

template <>
__device__ __forceinline__ void decode8<DType::q4_K>(const uint8_t* row, int c, int p, float* w) {
  const uint8_t* b = row + static_cast<int64_t>(c >> 3) * 144;
  const int j = c & 7;  // sub-block: values 32j..32j+31 of the block
  const uint32_t dm = *reinterpret_cast<const uint32_t*>(b);
  const float d = f16_bits_to_f32(dm & 0xffffu), dmin = f16_bits_to_f32(dm >> 16);
  const uint8_t* s = b + 4;  // eight 6-bit scale / min pairs in 12 bytes
  int sc, m;
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
  const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
  const uint2 v = *reinterpret_cast<const uint2*>(b + 16 + 32 * (j >> 1) + 8 * p);
  const int shift = 4 * (j & 1);  // even sub-blocks: low nibbles of the 32 bytes, odd: high
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t byte = ((i < 4 ? v.x : v.y) >> (8 * (i & 3))) & 0xffu;
    w[i] = d1 * static_cast<float>((byte >> shift) & 15u) - m1;
  }
}

template <>
__device__ __forceinline__ void decode8<DType::q6_K>(const uint8_t* row, int c, int p, float* w) {
  const uint8_t* b = row + static_cast<int64_t>(c >> 3) * 210;
  const int sub = c & 7, h = sub >> 2, s = sub & 3;  // half h, quarter s of it
  const uint8_t* ql = b + 64 * h + 32 * (s & 1) + 8 * p;
  const uint8_t* qh = b + 128 + 32 * h + 8 * p;
  const float d = f16_bits_to_f32(ld16(b + 208));
  const float ds = d * static_cast<float>(static_cast<int8_t>(b[192 + 8 * h + 2 * s + (p >> 1)]));
  const int lshift = 4 * (s >> 1), hshift = 2 * s;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lv = ld16(ql + 2 * i), hv = ld16(qh + 2 * i);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t lo = ((lv >> (8 * k)) >> lshift) & 15u;
      const uint32_t hi = ((hv >> (8 * k)) >> hshift) & 3u;
      w[2 * i + k] = ds * static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32);
    }
  }
}

template <DType T>
__device__ __forceinline__ const uint8_t* qrow(const void* w, int64_t n, int K) {
  return static_cast<const uint8_t*>(w) + n * static_cast<int64_t>(K / QLayout<T>::kBlock) * QLayout<T>::kBytes;
}

// ---------------------------------------------------------------------------------------------
// GEMV

constexpr int kQGemvWarps = 4;  // warps per block, one weight row each

template <int M, DType T>
__global__ void __launch_bounds__(kQGemvWarps * 32) qgemv_kernel(const GemvArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int K = a.K;
  int n = blockIdx.x * kQGemvWarps + warp, si = 0;
  while (si < a.nseg - 1 && n >= a.seg[si].n) {
    n -= a.seg[si].n;
    ++si;
  }
  if (n >= a.seg[si].n) return;  // past the last row: the whole warp leaves
  const uint8_t* row = qrow<T>(a.seg[si].w, n, K);

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.f;
  const bool vec_x = (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;  // K is a multiple of 32
  for (int e8 = lane; e8 < K / 8; e8 += 32) {
    float w[8];
    decode8<T>(row, e8 >> 2, e8 & 3, w);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int xm = m < a.m_real ? m : a.m_real - 1;
      const float* xp = a.x + static_cast<int64_t>(xm) * K + 8 * e8;
      float xv[8];
      if (vec_x) {
        const float4 t0 = __ldg(reinterpret_cast<const float4*>(xp));
        const float4 t1 = __ldg(reinterpret_cast<const float4*>(xp) + 1);
        xv[0] = t0.x, xv[1] = t0.y, xv[2] = t0.z, xv[3] = t0.w;
        xv[4] = t1.x, xv[5] = t1.y, xv[6] = t1.z, xv[7] = t1.w;
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) xv[i] = xp[i];
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[m] = fmaf(xv[i], w[i], acc[m]);
    }
  }
  float* y = a.seg[si].y + n;
  const int ldy = a.seg[si].n;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float v = warp_sum(acc[m]);
    if (lane == 0 && m < a.m_real) y[static_cast<int64_t>(m) * ldy] = v;
  }
}

template <DType T>
void qgemv_dispatch(const GemvArgs& a, int m_pad, unsigned grid, cudaStream_t s) {
  void (*k)(const GemvArgs) = nullptr;
  switch (m_pad) {
    case 1: k = qgemv_kernel<1, T>; break;
    case 2: k = qgemv_kernel<2, T>; break;
    case 4: k = qgemv_kernel<4, T>; break;
    case 8: k = qgemv_kernel<8, T>; break;
    case 16: k = qgemv_kernel<16, T>; break;
    default: throw std::runtime_error("quantized gemv: unsupported row count " + std::to_string(m_pad));
  }
  LUMEN_LAUNCH(k, grid, kQGemvWarps * 32, 0, s, a);
}

// ---------------------------------------------------------------------------------------------
// fp32 tiled GEMM over decoded weight tiles

constexpr int kQB = 64, kQK = 32;

template <DType T>
__global__ void __launch_bounds__(256) qgemm_kernel(const float* __restrict__ X, int M, int K, const void* __restrict__ W,
                                                    int N, float* __restrict__ Y) {
  __shared__ float as[kQK][kQB + 4];
  __shared__ float bs[kQK][kQB + 4];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.x * kQB, n0 = blockIdx.y * kQB;
  // Weight decoding: thread t decodes values 8p..8p+7 of the chunk for weight row n0 + (t >> 2).
  const int br = tid >> 2, bp = tid & 3;
  const bool bvalid = n0 + br < N;
  const uint8_t* brow = qrow<T>(W, bvalid ? n0 + br : 0, K);
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kQK) {
    for (int i = tid; i < kQB * kQK; i += 256) {
      const int r = i / kQK, kk = i % kQK;
      as[kk][r] = m0 + r < M ? X[static_cast<int64_t>(m0 + r) * K + k0 + kk] : 0.f;
    }
    float w[8];
    if (bvalid) {
      decode8<T>(brow, k0 / kQK, bp, w);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) bs[8 * bp + i][br] = w[i];
    __syncthreads();
    tile_fma_4x4(as, bs, tx, ty, acc);
    __syncthreads();
  }
  tile_store_4x4(acc, Y, M, N, m0, n0, tx, ty);
}

// ---------------------------------------------------------------------------------------------
// Embedding rows

template <DType T>
__global__ void qembed_kernel(const void* __restrict__ table, int dim, const int* __restrict__ tokens,
                              float* __restrict__ x) {
  const int r = blockIdx.x;
  const uint8_t* row = qrow<T>(table, tokens[r], dim);
  float* out = x + static_cast<int64_t>(r) * dim;
  for (int e8 = threadIdx.x; e8 < dim / 8; e8 += blockDim.x) {
    float w[8];
    decode8<T>(row, e8 >> 2, e8 & 3, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[8 * e8 + i] = w[i];
  }
}

// Calls f.template operator()<T>() for the GPU's quantized type t.
template <typename F>
void with_qtype(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::q8_0: f.template operator()<DType::q8_0>(); return;
    case DType::q5_0: f.template operator()<DType::q5_0>(); return;
    case DType::q4_K: f.template operator()<DType::q4_K>(); return;
    case DType::q6_K: f.template operator()<DType::q6_K>(); return;
    default: break;
  }
  throw std::runtime_error(std::string(what) + ": no CUDA kernel for " + dtype_info(t).name + " weights");
}

void check_cols(DType t, int64_t K, const char* what) {
  const int blk = dtype_info(t).block;
  if (K <= 0 || K % blk != 0)
    throw std::runtime_error(std::string(what) + ": " + dtype_info(t).name + " rows of " + std::to_string(K) +
                             " values are not whole blocks of " + std::to_string(blk));
}

}  // namespace

void launch_gemv_quant(const GemvArgs& a, DType t, int m_pad, cudaStream_t s) {
  if (a.m_real <= 0 || a.nseg <= 0) return;
  if (a.m_real > m_pad) throw std::runtime_error("quantized gemv: more rows than the padded count");
  if (a.swiglu_out) throw std::runtime_error("quantized gemv: no fused SwiGLU");
  check_cols(t, a.K, "quantized gemv");
  int64_t total = 0;
  for (int i = 0; i < a.nseg; ++i) total += a.seg[i].n;
  const int64_t groups = (total + kQGemvWarps - 1) / kQGemvWarps;
  if (groups <= 0) return;
  if (groups > 0x7fffffff) throw std::runtime_error("quantized gemv: matrix too large");
  with_qtype(t, "quantized gemv", [&]<DType T>() { qgemv_dispatch<T>(a, m_pad, static_cast<unsigned>(groups), s); });
  LUMEN_CUDA_LAUNCHED("gemv_quant");
}

void launch_gemm_quant(const float* x, int M, int K, const void* w, DType t, int N, float* y, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  check_cols(t, K, "quantized gemm");
  const int gm = (M + kQB - 1) / kQB, gn = (N + kQB - 1) / kQB;
  if (gn > 65535) throw std::runtime_error("quantized gemm: N too large");
  with_qtype(t, "quantized gemm", [&]<DType T>() {
    auto* k = qgemm_kernel<T>;
    LUMEN_LAUNCH(k, dim3(gm, gn), 256, 0, s, x, M, K, w, N, y);
  });
  LUMEN_CUDA_LAUNCHED("gemm_quant");
}

void launch_embed_quant(const void* table, DType t, int dim, const int* tokens, int rows, float* x, cudaStream_t s) {
  if (rows <= 0) return;
  check_cols(t, dim, "quantized embedding");
  with_qtype(t, "quantized embedding", [&]<DType T>() {
    auto* k = qembed_kernel<T>;
    LUMEN_LAUNCH(k, rows, 128, 0, s, table, dim, tokens, x);
  });
  LUMEN_CUDA_LAUNCHED("embed_quant");
}

}  // namespace lumen::cuda
