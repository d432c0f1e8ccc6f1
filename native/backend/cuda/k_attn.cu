// Gated full attention over the paged KV cache (an f32 or f16 cache, fp32 math, like the CPU backend):
//  - qk_rope_kv: per-head RMSNorm of q and k ((1+w) already folded), partial NeoX RoPE on the first
//    rot dims (angles in double, as the CPU does), k and v written into the cache blocks.
//  - decode: one query token per row; the context is split over `splits` blocks (flash-decoding),
//    each block handles the G query heads that share one KV head, then a combine kernel merges the
//    splits and applies the sigmoid output gate.
//  - prefill: flash-style causal tiles; a block takes up to 32 (query row, head) vectors of one KV
//    head and walks 16-key tiles gathered through the block table with an online softmax.
// Head dim must be 128 or 256 (every Qwen3.5 size uses 256). Each kernel is instantiated for the
// cache's element type KV: float, or uint16_t (f16 bits: K and V rounded to nearest-even as they are
// written and widened exactly as they are read, the CPU backend's values; everything else stays
// fp32).
#include <cmath>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {
namespace {

__device__ __forceinline__ void kv_put(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_put(uint16_t* p, float x) { *p = f32_to_f16_bits(x); }
// Four consecutive cache elements (16-byte aligned for float, 8 for f16) as floats.
__device__ __forceinline__ float4 kv_get4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 kv_get4(const uint16_t* p) {
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
  return make_float4(f16_bits_to_f32(u.x & 0xffffu), f16_bits_to_f32(u.x >> 16), f16_bits_to_f32(u.y & 0xffffu),
                     f16_bits_to_f32(u.y >> 16));
}

constexpr int kMaxHd = 256;
constexpr int kMaxGroupDecode = 8;
constexpr int kDecWarps = 4;
constexpr int kQV = 32;  // query vectors per prefill block
constexpr int kKT = 16;  // keys per prefill tile
constexpr int kPfThreads = 128;

size_t prefill_smem_bytes(int hd) {
  const int ld = hd + 4;
  return (static_cast<size_t>(kQV + 2 * kKT) * ld + kQV * (kKT + 1) + 3 * kQV) * sizeof(float);
}

template <typename KV>
__global__ void __launch_bounds__(128) qk_rope_kv_kernel(const AttnArgs a) {
  __shared__ float buf[2 * kMaxHd];
  __shared__ float red[32];
  const int row = blockIdx.x, hh = blockIdx.y, hd = a.hd;
  float* vec;
  const float* w;
  int g = -1;
  if (hh < a.nh) {
    vec = a.qg + static_cast<int64_t>(row) * (2 * a.nh * hd) + static_cast<int64_t>(hh) * 2 * hd;
    w = a.q_norm;
  } else {
    g = hh - a.nh;
    vec = a.k + static_cast<int64_t>(row) * a.nkv * hd + static_cast<int64_t>(g) * hd;
    w = a.k_norm;
  }
  float ss = 0.f;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    const float x = vec[i];
    ss += x * x;
  }
  ss = block_sum(ss, red);
  const float inv = 1.f / sqrtf(ss / hd + a.eps);
  for (int i = threadIdx.x; i < hd; i += blockDim.x) buf[i] = vec[i] * inv * w[i];
  __syncthreads();
  const int pos = a.m.positions[row];
  const int half = a.rot / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    double sn, cs;
    sincos(static_cast<double>(pos) * a.inv_freq[j], &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    const float x0 = buf[j], x1 = buf[j + half];
    buf[j] = x0 * c - x1 * s;
    buf[j + half] = x1 * c + x0 * s;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < hd; i += blockDim.x) vec[i] = buf[i];
  if (g >= 0) {
    const int seg = a.m.row_seg[row];
    const int blk = a.m.tables[a.m.seg_toff[seg] + pos / a.bs];
    const int64_t base = (static_cast<int64_t>(blk) * a.bs + pos % a.bs) * a.nkv * hd + static_cast<int64_t>(g) * hd;
    const float* vsrc = a.v + static_cast<int64_t>(row) * a.nkv * hd + static_cast<int64_t>(g) * hd;
    KV* kc = static_cast<KV*>(a.kc);
    KV* vc = static_cast<KV*>(a.vc);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      kv_put(kc + base + i, buf[i]);
      kv_put(vc + base + i, vsrc[i]);
    }
  }
}

// grid (nkv, rows, splits), kDecWarps warps; part[(row*nh + h)*splits + sp] = {acc[hd], m, l}
template <typename KV>
__global__ void __launch_bounds__(kDecWarps * 32) attn_decode_kernel(const AttnArgs a, int splits,
                                                                     float* __restrict__ part) {
  __shared__ float sm_acc[kDecWarps][kMaxGroupDecode][kMaxHd];
  __shared__ float sm_m[kDecWarps][kMaxGroupDecode];
  __shared__ float sm_l[kDecWarps][kMaxGroupDecode];
  const int g = blockIdx.x, row = blockIdx.y, sp = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = a.hd, G = a.nh / a.nkv, DC = hd / 128;
  const int pos = a.m.positions[row];
  const int ctx = pos + 1;
  const int span = (ctx + splits - 1) / splits;  // context positions per split
  const int t0 = sp * span, t1 = min(ctx, t0 + span);
  const int stride = hd + 2;
  if (t0 >= t1) {
    for (int h = threadIdx.x; h < G; h += blockDim.x) {
      float* p = part + (static_cast<int64_t>(row * a.nh + g * G + h) * splits + sp) * stride;
      p[hd] = -INFINITY;
      p[hd + 1] = 0.f;
    }
    return;
  }
  const int* table = a.m.tables + a.m.seg_toff[a.m.row_seg[row]];
  const KV* kc = static_cast<const KV*>(a.kc);
  const KV* vc = static_cast<const KV*>(a.vc);
  const float* qbase = a.qg + static_cast<int64_t>(row) * (2 * a.nh * hd);

  float q[kMaxGroupDecode][2][4], acc[kMaxGroupDecode][2][4], mh[kMaxGroupDecode], lh[kMaxGroupDecode];
#pragma unroll
  for (int h = 0; h < kMaxGroupDecode; ++h) {
    mh[h] = -INFINITY;
    lh[h] = 0.f;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (h < G && c < DC)
        v = *reinterpret_cast<const float4*>(qbase + static_cast<int64_t>(g * G + h) * 2 * hd + c * 128 + lane * 4);
      q[h][c][0] = v.x;
      q[h][c][1] = v.y;
      q[h][c][2] = v.z;
      q[h][c][3] = v.w;
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[h][c][e] = 0.f;
    }
  }

  for (int t = t0 + warp; t < t1; t += kDecWarps) {
    const int blk = table[t / a.bs];
    const int64_t base = (static_cast<int64_t>(blk) * a.bs + t % a.bs) * a.nkv * hd + static_cast<int64_t>(g) * hd;
    float kv[2][4], vv[2][4];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float4 k4 = make_float4(0.f, 0.f, 0.f, 0.f), v4 = k4;
      if (c < DC) {
        k4 = kv_get4(kc + base + c * 128 + lane * 4);
        v4 = kv_get4(vc + base + c * 128 + lane * 4);
      }
      kv[c][0] = k4.x; kv[c][1] = k4.y; kv[c][2] = k4.z; kv[c][3] = k4.w;
      vv[c][0] = v4.x; vv[c][1] = v4.y; vv[c][2] = v4.z; vv[c][3] = v4.w;
    }
#pragma unroll
    for (int h = 0; h < kMaxGroupDecode; ++h) {
      if (h >= G) break;
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) s = fmaf(q[h][c][e], kv[c][e], s);
      s = warp_sum(s) * a.scale;
      const float mn = fmaxf(mh[h], s);
      const float alpha = expf(mh[h] - mn);
      const float p = expf(s - mn);
      lh[h] = lh[h] * alpha + p;
      mh[h] = mn;
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[h][c][e] = acc[h][c][e] * alpha + p * vv[c][e];
    }
  }

#pragma unroll
  for (int h = 0; h < kMaxGroupDecode; ++h) {
    if (h >= G) break;
    if (lane == 0) {
      sm_m[warp][h] = mh[h];
      sm_l[warp][h] = lh[h];
    }
#pragma unroll
    for (int c = 0; c < 2; ++c)
      if (c < DC)
#pragma unroll
        for (int e = 0; e < 4; ++e) sm_acc[warp][h][c * 128 + lane * 4 + e] = acc[h][c][e];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * hd; idx += blockDim.x) {
    const int h = idx / hd, d = idx % hd;
    float M = -INFINITY;
    for (int w = 0; w < kDecWarps; ++w) M = fmaxf(M, sm_m[w][h]);
    float o = 0.f, L = 0.f;
    for (int w = 0; w < kDecWarps; ++w) {
      if (sm_m[w][h] == -INFINITY) continue;  // a warp that saw no token
      const float f = expf(sm_m[w][h] - M);
      o += sm_acc[w][h][d] * f;
      L += sm_l[w][h] * f;
    }
    float* p = part + (static_cast<int64_t>(row * a.nh + g * G + h) * splits + sp) * stride;
    p[d] = o;
    if (d == 0) {
      p[hd] = M;
      p[hd + 1] = L;
    }
  }
}

// grid (rows, nh)
__global__ void __launch_bounds__(128) attn_combine_kernel(const AttnArgs a, int splits, const float* __restrict__ part) {
  const int row = blockIdx.x, h = blockIdx.y, hd = a.hd, stride = hd + 2;
  const float* p0 = part + static_cast<int64_t>(row * a.nh + h) * splits * stride;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, p0[s * stride + hd]);
  const float* gate = a.qg + static_cast<int64_t>(row) * (2 * a.nh * hd) + static_cast<int64_t>(h) * 2 * hd + hd;
  float* out = a.out + static_cast<int64_t>(row) * a.nh * hd + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.f, L = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float ms = p0[s * stride + hd];
      if (ms == -INFINITY) continue;
      const float f = expf(ms - M);
      o += p0[s * stride + d] * f;
      L += p0[s * stride + hd + 1] * f;
    }
    out[d] = (o / L) * sigmoidf_d(gate[d]);
  }
}

// grid (items, nkv), kPfThreads threads; dynamic shared memory prefill_smem_bytes(hd)
template <typename KV>
__global__ void __launch_bounds__(kPfThreads) attn_prefill_kernel(const AttnArgs a) {
  LUMEN_DYN_SMEM(float, sm);
  const int item = blockIdx.x, g = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int hd = a.hd, ld = hd + 4, DC = hd / 128;
  const int G = a.nh / a.nkv;
  const int BQ = G >= kQV ? 1 : kQV / G;
  const int QV = BQ * G;
  const int seg = a.m.attn_items[2 * item], q0 = a.m.attn_items[2 * item + 1];
  const int start = a.m.seg_start[seg], len = a.m.seg_len[seg], pos0 = a.m.seg_pos0[seg];
  const int* table = a.m.tables + a.m.seg_toff[seg];
  const KV* kc = static_cast<const KV*>(a.kc);
  const KV* vc = static_cast<const KV*>(a.vc);
  const int nrows = min(BQ, len - q0);
  const int n_keys = pos0 + q0 + nrows;
  const int64_t qstride = static_cast<int64_t>(2) * a.nh * hd;

  float* Qs = sm;
  float* Ks = Qs + kQV * ld;
  float* Vs = Ks + kKT * ld;
  float* Ps = Vs + kKT * ld;          // [kQV][kKT + 1]
  float* alpha_s = Ps + kQV * (kKT + 1);
  float* l_s = alpha_s + kQV;
  float* m_s = l_s + kQV;

  const int hd4 = hd / 4;
  for (int idx = tid; idx < QV * hd4; idx += kPfThreads) {
    const int v = idx / hd4, d = (idx % hd4) * 4;
    const int i = v / G, h = g * G + v % G;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < nrows) x = *reinterpret_cast<const float4*>(a.qg + (start + q0 + i) * qstride + static_cast<int64_t>(h) * 2 * hd + d);
    *reinterpret_cast<float4*>(Qs + v * ld + d) = x;
  }
  if (tid < kQV) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }
  float acc[8][2][4];
#pragma unroll
  for (int vv = 0; vv < 8; ++vv)
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[vv][c][e] = 0.f;

  // Score tile: thread -> query vectors {va, va+16} x keys {ja, ja+8} (conflict-free smem reads).
  const int va = tid >> 3, ja = tid & 7;
  for (int kt0 = 0; kt0 < n_keys; kt0 += kKT) {
    __syncthreads();  // the previous tile is consumed (and Q is loaded on the first pass)
    for (int idx = tid; idx < kKT * hd4; idx += kPfThreads) {
      const int j = idx / hd4, d = (idx % hd4) * 4;
      const int kk = kt0 + j;
      float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
      if (kk < n_keys) {
        const int blk = table[kk / a.bs];
        const int64_t base = (static_cast<int64_t>(blk) * a.bs + kk % a.bs) * a.nkv * hd + static_cast<int64_t>(g) * hd + d;
        kx = kv_get4(kc + base);
        vx = kv_get4(vc + base);
      }
      *reinterpret_cast<float4*>(Ks + j * ld + d) = kx;
      *reinterpret_cast<float4*>(Vs + j * ld + d) = vx;
    }
    __syncthreads();
    {
      float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
      for (int d = 0; d < hd; d += 4) {
        const float4 qa = *reinterpret_cast<const float4*>(Qs + va * ld + d);
        const float4 qb = *reinterpret_cast<const float4*>(Qs + (va + 16) * ld + d);
        const float4 ka = *reinterpret_cast<const float4*>(Ks + ja * ld + d);
        const float4 kb = *reinterpret_cast<const float4*>(Ks + (ja + 8) * ld + d);
        s[0][0] += qa.x * ka.x + qa.y * ka.y + qa.z * ka.z + qa.w * ka.w;
        s[0][1] += qa.x * kb.x + qa.y * kb.y + qa.z * kb.z + qa.w * kb.w;
        s[1][0] += qb.x * ka.x + qb.y * ka.y + qb.z * ka.z + qb.w * ka.w;
        s[1][1] += qb.x * kb.x + qb.y * kb.y + qb.z * kb.z + qb.w * kb.w;
      }
#pragma unroll
      for (int x = 0; x < 2; ++x)
#pragma unroll
        for (int y = 0; y < 2; ++y) {
          const int v = va + 16 * x, j = ja + 8 * y, kk = kt0 + j;
          const int qpos = pos0 + q0 + v / G;
          const bool valid = v < QV && kk < n_keys && kk <= qpos;
          Ps[v * (kKT + 1) + j] = valid ? s[x][y] * a.scale : -INFINITY;
        }
    }
    __syncthreads();
    if (tid < kQV) {
      float* pr = Ps + tid * (kKT + 1);
      float mx = -INFINITY;
      for (int j = 0; j < kKT; ++j) mx = fmaxf(mx, pr[j]);
      const float m_old = m_s[tid];
      const float m_new = fmaxf(m_old, mx);
      float al = 1.f, sum = 0.f;
      if (m_new == -INFINITY) {
        for (int j = 0; j < kKT; ++j) pr[j] = 0.f;
      } else {
        al = expf(m_old - m_new);
        for (int j = 0; j < kKT; ++j) {
          const float p = expf(pr[j] - m_new);
          pr[j] = p;
          sum += p;
        }
      }
      l_s[tid] = l_s[tid] * al + sum;
      m_s[tid] = m_new;
      alpha_s[tid] = al;
    }
    __syncthreads();
#pragma unroll
    for (int vv = 0; vv < 8; ++vv) {
      const float al = alpha_s[warp * 8 + vv];
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[vv][c][e] *= al;
    }
    for (int j = 0; j < kKT; ++j) {
      float vx[2][4];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c < DC) t = *reinterpret_cast<const float4*>(Vs + j * ld + c * 128 + lane * 4);
        vx[c][0] = t.x; vx[c][1] = t.y; vx[c][2] = t.z; vx[c][3] = t.w;
      }
#pragma unroll
      for (int vv = 0; vv < 8; ++vv) {
        const float p = Ps[(warp * 8 + vv) * (kKT + 1) + j];
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[vv][c][e] = fmaf(p, vx[c][e], acc[vv][c][e]);
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int vv = 0; vv < 8; ++vv) {
    const int v = warp * 8 + vv;
    if (v >= QV) continue;
    const int i = v / G, h = g * G + v % G;
    if (i >= nrows) continue;
    const int64_t row = start + q0 + i;
    const float inv = 1.f / l_s[v];
    const float* gate = a.qg + row * qstride + static_cast<int64_t>(h) * 2 * hd + hd;
    float* out = a.out + row * a.nh * hd + static_cast<int64_t>(h) * hd;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (c >= DC) continue;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = c * 128 + lane * 4 + e;
        out[d] = acc[vv][c][e] * inv * sigmoidf_d(gate[d]);
      }
    }
  }
}

// Calls f with a value of the cache's element type: float, or uint16_t (f16 bits).
template <typename F>
void with_kv_type(bool f16, F&& f) {
  if (f16)
    f(uint16_t{});
  else
    f(float{});
}

void check_shape(const AttnArgs& a) {
  if (a.hd != 128 && a.hd != 256) throw std::runtime_error("CUDA attention supports head_dim 128 or 256, not " + std::to_string(a.hd));
  if (a.nkv <= 0 || a.nh % a.nkv != 0) throw std::runtime_error("CUDA attention: heads must divide evenly");
  if (a.rot > a.hd || a.rot % 2) throw std::runtime_error("CUDA attention: bad rotary dimension");
}

}  // namespace

int attn_prefill_rows_per_item(int group) { return group >= kQV ? 1 : kQV / group; }

void launch_qk_rope_kv(const AttnArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return;
  check_shape(a);
  with_kv_type(a.kv_f16, [&](auto kv) { LUMEN_LAUNCH(qk_rope_kv_kernel<decltype(kv)>, dim3(a.rows, a.nh + a.nkv), 128, 0, s, a); });
  LUMEN_CUDA_LAUNCHED("qk_rope_kv");
}

void launch_attn_decode(const AttnArgs& a, int splits, float* part, cudaStream_t s) {
  if (a.rows <= 0) return;
  check_shape(a);
  if (a.nh / a.nkv > kMaxGroupDecode)
    throw std::runtime_error("CUDA decode attention supports at most " + std::to_string(kMaxGroupDecode) + " query heads per KV head");
  with_kv_type(a.kv_f16, [&](auto kv) {
    LUMEN_LAUNCH(attn_decode_kernel<decltype(kv)>, dim3(a.nkv, a.rows, splits), kDecWarps * 32, 0, s, a, splits, part);
  });
  LUMEN_CUDA_LAUNCHED("attn_decode");
  LUMEN_LAUNCH(attn_combine_kernel, dim3(a.rows, a.nh), 128, 0, s, a, splits, static_cast<const float*>(part));
  LUMEN_CUDA_LAUNCHED("attn_combine");
}

void launch_attn_prefill(const AttnArgs& a, int n_items, cudaStream_t s) {
  if (n_items <= 0) return;
  check_shape(a);
  if (a.nh / a.nkv > kQV) throw std::runtime_error("CUDA attention supports at most 32 query heads per KV head");
  with_kv_type(a.kv_f16, [&](auto kv) {
    LUMEN_LAUNCH(attn_prefill_kernel<decltype(kv)>, dim3(n_items, a.nkv), kPfThreads, prefill_smem_bytes(a.hd), s, a);
  });
  LUMEN_CUDA_LAUNCHED("attn_prefill");
}

void init_attn_kernels(int device) {
  int optin = 0;
  LUMEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t need = prefill_smem_bytes(kMaxHd);
  if (static_cast<size_t>(optin) < need)
    throw std::runtime_error("the GPU allows " + std::to_string(optin) + " bytes of shared memory per block; attention needs " +
                             std::to_string(need));
  LUMEN_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(need)));
  LUMEN_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<uint16_t>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(need)));
}

}  // namespace lumen::cuda
