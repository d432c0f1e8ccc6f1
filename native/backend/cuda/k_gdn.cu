// Gated DeltaNet on the GPU, state in fp32 device memory, written to follow the CPU reference
// (backend/cpu/) operation by operation where the order matters:
//  - conv: causal depthwise conv over q|k|v (window from the state for the first tokens), SiLU,
//    l2-norm of q and k per head (q also scaled by 1/sqrt(dk)); beta = sigmoid(b),
//    g = -exp(A_log) * softplus(a + dt_bias). One block per (token, head's 128 channels).
//  - recurrent: one block per (segment, value head), one thread per value column holding that
//    column of S (dk floats) in registers; decay, delta-rule write, readout, then the gated RMSNorm.
//    The same launch also slides every segment's conv window (after the conv kernel read it).
//  - chunked (long segments): prep per (64-token block, value head): cumulative decay, A, the
//    masked decayed q.k products, and the forward substitution for U and W; then a scan per
//    (segment, value head, 32-column tile of S) carries the state across the blocks; then the
//    gated norm for those rows.
// Key and value head dims are fixed at 128 (all Qwen3.5 sizes).
#include <cmath>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {
namespace {

constexpr int D = 128;           // dk = dv
constexpr int C = kGdnBlock;     // 64
constexpr int kTile = 32;        // state columns per scan block
constexpr int kLdC = D + 1;      // padded row of a [C][D] smem tile
constexpr size_t kPerBlockHead = static_cast<size_t>(C) * D * 2 + C * C + C;  // U, W, QK, G

constexpr size_t kPrepSmem = (static_cast<size_t>(2) * C * kLdC + C * (C + 1) + 2 * C) * sizeof(float);
constexpr size_t kScanSmem = (static_cast<size_t>(D) * (kTile + 1) + C * kLdC + C * (kTile + 1) + 2 * C) * sizeof(float);
constexpr int kMaxConvKernel = 8;  // conv taps per channel

// grid (rows, cd / D): one block per (token, group of D channels), one channel per thread. The
// channels come in groups of D = dk = dv: the q heads, then the k heads (each l2-normalised over its
// group), then the v heads. Per output, the same operations in the same order as the CPU reference
// and as the earlier one-block-per-token form: acc = w[hist]·x_t, then acc += w[r]·x over the
// window in order, SiLU; the l2 norm's sum of squares is each lane's strided partial sum (d = lane,
// lane + 32, ...) reduced by warp_sum, which every warp of the block computes alike.
__global__ void __launch_bounds__(D) gdn_conv_kernel(const GdnArgs a) {
  __shared__ float xs[D];
  const int row = blockIdx.x, g = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
  const int seg = a.m.row_seg[row];
  const int start = a.m.seg_start[seg], i = row - start;
  const float* cst = a.state + static_cast<int64_t>(a.m.seg_slot[seg]) * a.slot_stride;  // conv window [hist][cd]
  const int cd = a.cd, kc = a.kc, hist = kc - 1;
  const int c = g * D + tid;
  const float* w = a.conv_w + static_cast<int64_t>(c) * kc;
  // The window's taps load together (kc <= kMaxConvKernel, checked at launch).
  float xv[kMaxConvKernel - 1] = {}, wv[kMaxConvKernel - 1] = {};
#pragma unroll
  for (int r = 0; r < kMaxConvKernel - 1; ++r) {
    if (r < hist) {
      const int idx = i - hist + r;
      xv[r] = idx >= 0 ? a.qkv[static_cast<int64_t>(start + idx) * cd + c] : cst[static_cast<int64_t>(i + r) * cd + c];
      wv[r] = w[r];
    }
  }
  float acc = w[hist] * a.qkv[static_cast<int64_t>(row) * cd + c];
#pragma unroll
  for (int r = 0; r < kMaxConvKernel - 1; ++r) {
    if (r < hist) acc += wv[r] * xv[r];
  }
  const float y = siluf_d(acc);
  float* dst = a.conv_out + static_cast<int64_t>(row) * cd;
  if (g < 2 * a.nk) {  // a q or k head: l2 norm over the group (uniform per block)
    xs[tid] = y;
    __syncthreads();
    float ss = 0.f;
    for (int d = lane; d < D; d += 32) ss += xs[d] * xs[d];
    ss = warp_sum(ss);
    const float inv = 1.f / sqrtf(ss + 1e-6f);
    const float qscale = 1.f / sqrtf(static_cast<float>(a.dk));
    const float f = g < a.nk ? inv * qscale : inv;
    dst[c] = xs[tid] * f;
  } else {
    dst[c] = y;
  }
  if (g == 0) {
    for (int j = tid; j < a.nv; j += D) {
      const int64_t o = static_cast<int64_t>(row) * a.nv + j;
      a.beta[o] = sigmoidf_d(a.b[o]);
      a.gdec[o] = a.neg_exp_a[j] * softplusf_d(a.a[o] + a.dt_bias[j]);
    }
  }
}

// grid (segments, nv), D threads
__global__ void __launch_bounds__(D) gdn_recurrent_kernel(const GdnArgs a) {
  __shared__ float ks[D], qs[D], red[32];
  const int s = blockIdx.x, j = blockIdx.y, c = threadIdx.x;
  const int start = a.m.seg_start[s], len = a.m.seg_len[s];
  float* st = a.state + static_cast<int64_t>(a.m.seg_slot[s]) * a.slot_stride;
  const int cd = a.cd, hist = a.kc - 1;
  // Slide the conv window: new row r = element len + r of [old window ; this segment's inputs].
  const int per = (cd + a.nv - 1) / a.nv;
  const int ch_end = min(cd, (j + 1) * per);
  for (int ch = j * per + c; ch < ch_end; ch += blockDim.x) {
    for (int r = 0; r < hist; ++r) {
      const int src = len + r;
      const float v = src < hist ? st[static_cast<int64_t>(src) * cd + ch]
                                 : a.qkv[static_cast<int64_t>(start + src - hist) * cd + ch];
      st[static_cast<int64_t>(r) * cd + ch] = v;
    }
  }
  if (len >= a.gdn_chunk_min || len <= 0) return;
  const int kh = a.tiled ? j % a.nk : j / (a.nv / a.nk);
  const int kd = a.nk * D;
  float* S = st + static_cast<int64_t>(hist) * cd + static_cast<int64_t>(j) * D * D;
  float sc[D];
#pragma unroll
  for (int r = 0; r < D; ++r) sc[r] = S[r * D + c];
  for (int t = 0; t < len; ++t) {
    const int64_t row = start + t;
    const float* cr = a.conv_out + row * cd;
    qs[c] = cr[kh * D + c];
    ks[c] = cr[kd + kh * D + c];
    __syncthreads();
    const float v = cr[2 * kd + j * D + c];
    const float beta = a.beta[row * a.nv + j];
    const float decay = expf(a.gdec[row * a.nv + j]);
    float e = 0.f;
#pragma unroll
    for (int r = 0; r < D; ++r) {
      sc[r] *= decay;
      e = fmaf(ks[r], sc[r], e);
    }
    const float dlt = beta * (v - e);
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < D; ++r) {
      sc[r] = fmaf(ks[r], dlt, sc[r]);
      o = fmaf(qs[r], sc[r], o);
    }
    const float ss = block_sum(o * o, red);
    const float inv = 1.f / sqrtf(ss / D + a.eps);
    const int64_t oi = row * a.nv * D + static_cast<int64_t>(j) * D + c;
    a.out[oi] = o * inv * a.norm_w[c] * siluf_d(a.z[oi]);
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < D; ++r) S[r * D + c] = sc[r];
}

// grid (DeltaNet blocks, nv), 256 threads, kPrepSmem dynamic
__global__ void __launch_bounds__(256) gdn_block_prep_kernel(const GdnArgs a) {
  LUMEN_DYN_SMEM(float, sm);
  float* Kw = sm;                  // K rows, replaced in place by W rows
  float* Qu = Kw + C * kLdC;       // Q rows, then U rows
  float* A = Qu + C * kLdC;        // [C][C+1]
  float* G = A + C * (C + 1);
  float* Bt = G + C;
  const int item = blockIdx.x, j = blockIdx.y, tid = threadIdx.x;
  const int seg = a.m.gdn_blocks[2 * item], c0 = a.m.gdn_blocks[2 * item + 1];
  const int len = a.m.seg_len[seg];
  const int L = min(C, len - c0);
  const int64_t base = a.m.seg_start[seg] + c0;
  const int cd = a.cd, kd = a.nk * D, kh = a.tiled ? j % a.nk : j / (a.nv / a.nk);
  float* scr = a.gdn_block_scratch + (static_cast<int64_t>(item) * a.nv + j) * kPerBlockHead;
  float* Ug = scr;
  float* Wg = Ug + C * D;
  float* QKg = Wg + C * D;
  float* Gg = QKg + C * C;

  for (int idx = tid; idx < C * D; idx += blockDim.x) {
    const int i = idx / D, d = idx % D;
    float kx = 0.f, qx = 0.f;
    if (i < L) {
      const float* cr = a.conv_out + (base + i) * cd;
      qx = cr[kh * D + d];
      kx = cr[kd + kh * D + d];
    }
    Kw[i * kLdC + d] = kx;
    Qu[i * kLdC + d] = qx;
  }
  if (tid < C) Bt[tid] = tid < L ? a.beta[(base + tid) * a.nv + j] : 0.f;
  if (tid == 0) {
    float acc = 0.f;
    for (int i = 0; i < C; ++i) {
      if (i < L) acc += a.gdec[(base + i) * a.nv + j];
      G[i] = acc;  // cumulative log decay from the block start
    }
  }
  __syncthreads();
  for (int idx = tid; idx < C * C; idx += blockDim.x) {
    const int i = idx / C, jj = idx % C;
    float av = 0.f, qk = 0.f;
    if (i < L && jj <= i) {
      const float dec = expf(G[i] - G[jj]);
      float kk = 0.f, qq = 0.f;
      for (int d = 0; d < D; ++d) {
        const float kj = Kw[jj * kLdC + d];
        kk = fmaf(Kw[i * kLdC + d], kj, kk);
        qq = fmaf(Qu[i * kLdC + d], kj, qq);
      }
      if (jj < i) av = Bt[i] * kk * dec;
      qk = qq * dec;
    }
    A[i * (C + 1) + jj] = av;
    QKg[idx] = qk;
  }
  if (tid < C) Gg[tid] = G[tid];
  __syncthreads();
  // Forward substitution with (I + A), one column per thread: U = (I+A)^-1 (beta V) over Qu,
  // W = (I+A)^-1 (beta exp(G) K) in place over Kw. Each thread reads only its own column.
  if (tid < 2 * D) {
    const bool is_u = tid < D;
    const int c = is_u ? tid : tid - D;
    float* X = is_u ? Qu : Kw;
    for (int i = 0; i < L; ++i) {
      float val;
      if (is_u) {
        val = Bt[i] * a.conv_out[(base + i) * cd + 2 * kd + static_cast<int64_t>(j) * D + c];
      } else {
        val = Bt[i] * expf(G[i]) * Kw[i * kLdC + c];
      }
      for (int jj = 0; jj < i; ++jj) {
        const float aij = A[i * (C + 1) + jj];
        if (aij == 0.f) continue;
        val = fmaf(-aij, X[jj * kLdC + c], val);
      }
      X[i * kLdC + c] = val;
    }
  }
  __syncthreads();
  for (int idx = tid; idx < C * D; idx += blockDim.x) {
    const int i = idx / D, d = idx % D;
    Ug[idx] = i < L ? Qu[i * kLdC + d] : 0.f;
    Wg[idx] = i < L ? Kw[i * kLdC + d] : 0.f;
  }
}

// grid (long segments, nv, D / kTile), 256 threads, kScanSmem dynamic
__global__ void __launch_bounds__(256) gdn_block_scan_kernel(const GdnArgs a) {
  LUMEN_DYN_SMEM(float, sm);
  float* Ss = sm;                      // [D][kTile+1] state columns of this tile
  float* buf = Ss + D * (kTile + 1);   // [C][kLdC]: W, then Q, then K rows
  float* Vp = buf + C * kLdC;          // [C][kTile+1]
  float* G = Vp + C * (kTile + 1);
  float* Wt = G + C;
  const int l = blockIdx.x, j = blockIdx.y, cbase = blockIdx.z * kTile, tid = threadIdx.x;
  const int seg = a.m.long_segs[l], block0 = a.m.long_block0[l];
  const int start = a.m.seg_start[seg], len = a.m.seg_len[seg];
  const int cd = a.cd, kd = a.nk * D, kh = a.tiled ? j % a.nk : j / (a.nv / a.nk), hist = a.kc - 1;
  float* S = a.state + static_cast<int64_t>(a.m.seg_slot[seg]) * a.slot_stride + static_cast<int64_t>(hist) * cd +
             static_cast<int64_t>(j) * D * D;
  const int cc = tid % kTile, r8 = tid / kTile;  // 8 row groups
  for (int idx = tid; idx < D * kTile; idx += blockDim.x) {
    const int r = idx / kTile, x = idx % kTile;
    Ss[r * (kTile + 1) + x] = S[r * D + cbase + x];
  }
  const int nblocks = (len + C - 1) / C;
  for (int ci = 0; ci < nblocks; ++ci) {
    const int64_t base = start + static_cast<int64_t>(ci) * C;
    const int L = min(C, len - ci * C);
    const float* scr = a.gdn_block_scratch + (static_cast<int64_t>(block0 + ci) * a.nv + j) * kPerBlockHead;
    const float* Ug = scr;
    const float* Wg = Ug + C * D;
    const float* QKg = Wg + C * D;
    const float* Gg = QKg + C * C;
    __syncthreads();  // previous block done with buf / Vp / G
    if (tid < C) G[tid] = Gg[tid];
    for (int idx = tid; idx < C * D; idx += blockDim.x) buf[(idx / D) * kLdC + idx % D] = Wg[idx];
    __syncthreads();
    // V' = U - W S
    for (int k = 0; k < C / 8; ++k) {
      const int i = r8 + 8 * k;
      if (i >= L) continue;
      float val = Ug[i * D + cbase + cc];
      for (int r = 0; r < D; ++r) val = fmaf(-buf[i * kLdC + r], Ss[r * (kTile + 1) + cc], val);
      Vp[i * (kTile + 1) + cc] = val;
    }
    __syncthreads();
    for (int idx = tid; idx < C * D; idx += blockDim.x) {
      const int i = idx / D, d = idx % D;
      buf[i * kLdC + d] = i < L ? a.conv_out[(base + i) * cd + kh * D + d] : 0.f;
    }
    if (tid < C) Wt[tid] = tid < L ? expf(G[L - 1] - G[tid]) : 0.f;
    __syncthreads();
    // O_i = exp(G_i) q_i S + sum_{jj <= i} QK[i][jj] V'_jj   (pre-norm output)
    for (int k = 0; k < C / 8; ++k) {
      const int i = r8 + 8 * k;
      if (i >= L) continue;
      float tmp = 0.f;
      for (int r = 0; r < D; ++r) tmp = fmaf(buf[i * kLdC + r], Ss[r * (kTile + 1) + cc], tmp);
      float o = expf(G[i]) * tmp;
      for (int jj = 0; jj <= i; ++jj) o = fmaf(QKg[i * C + jj], Vp[jj * (kTile + 1) + cc], o);
      a.out[(base + i) * a.nv * D + static_cast<int64_t>(j) * D + cbase + cc] = o;
    }
    __syncthreads();
    for (int idx = tid; idx < C * D; idx += blockDim.x) {
      const int i = idx / D, d = idx % D;
      buf[i * kLdC + d] = i < L ? a.conv_out[(base + i) * cd + kd + kh * D + d] : 0.f;
    }
    __syncthreads();
    // S <- exp(G_last) S + sum_jj exp(G_last - G_jj) k_jj V'_jjᵀ
    const float egl = expf(G[L - 1]);
    for (int k = 0; k < D / 8; ++k) {
      const int r = r8 + 8 * k;
      float s = Ss[r * (kTile + 1) + cc] * egl;
      for (int jj = 0; jj < L; ++jj) s = fmaf(Wt[jj] * buf[jj * kLdC + r], Vp[jj * (kTile + 1) + cc], s);
      Ss[r * (kTile + 1) + cc] = s;
    }
  }
  __syncthreads();
  for (int idx = tid; idx < D * kTile; idx += blockDim.x) {
    const int r = idx / kTile, x = idx % kTile;
    S[r * D + cbase + x] = Ss[r * (kTile + 1) + x];
  }
}

// grid (rows, nv), D threads: gated RMSNorm of the rows of long segments (in place in out).
__global__ void __launch_bounds__(D) gdn_gated_norm_kernel(const GdnArgs a) {
  __shared__ float red[32];
  const int row = blockIdx.x, j = blockIdx.y, c = threadIdx.x;
  if (a.m.seg_len[a.m.row_seg[row]] < a.gdn_chunk_min) return;
  const int64_t oi = static_cast<int64_t>(row) * a.nv * D + static_cast<int64_t>(j) * D + c;
  const float o = a.out[oi];
  const float ss = block_sum(o * o, red);
  const float inv = 1.f / sqrtf(ss / D + a.eps);
  a.out[oi] = o * inv * a.norm_w[c] * siluf_d(a.z[oi]);
}

void check_shape(const GdnArgs& a) {
  if (a.dk != D || a.dv != D)
    throw std::runtime_error("CUDA Gated DeltaNet supports key/value head dim 128, not " + std::to_string(a.dk) + "/" +
                             std::to_string(a.dv));
  if (a.nk <= 0 || a.nv % a.nk != 0) throw std::runtime_error("CUDA Gated DeltaNet: value heads must be a multiple of key heads");
  if (a.cd != (2 * a.nk + a.nv) * D) throw std::runtime_error("CUDA Gated DeltaNet: conv dim is not (2 key heads + value heads) x 128");
  if (a.kc < 1 || a.kc > kMaxConvKernel) throw std::runtime_error("CUDA Gated DeltaNet: conv kernel must be 1..8");
}

}  // namespace

size_t gdn_block_scratch_floats_per_head() { return kPerBlockHead; }

void launch_gdn_conv(const GdnArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return;
  check_shape(a);
  LUMEN_LAUNCH(gdn_conv_kernel, dim3(a.rows, a.cd / D), D, 0, s, a);
  LUMEN_CUDA_LAUNCHED("gdn_conv");
}

void launch_gdn_recurrent(const GdnArgs& a, cudaStream_t s) {
  if (a.nsegs <= 0) return;
  check_shape(a);
  LUMEN_LAUNCH(gdn_recurrent_kernel, dim3(a.nsegs, a.nv), D, 0, s, a);
  LUMEN_CUDA_LAUNCHED("gdn_recurrent");
}

void launch_gdn_chunked(const GdnArgs& a, int n_blocks, int n_long, cudaStream_t s) {
  if (n_blocks <= 0 || n_long <= 0) return;
  check_shape(a);
  if (!a.gdn_block_scratch) throw std::runtime_error("CUDA Gated DeltaNet: no block scratch");
  LUMEN_LAUNCH(gdn_block_prep_kernel, dim3(n_blocks, a.nv), 256, kPrepSmem, s, a);
  LUMEN_CUDA_LAUNCHED("gdn_block_prep");
  LUMEN_LAUNCH(gdn_block_scan_kernel, dim3(n_long, a.nv, D / kTile), 256, kScanSmem, s, a);
  LUMEN_CUDA_LAUNCHED("gdn_block_scan");
  LUMEN_LAUNCH(gdn_gated_norm_kernel, dim3(a.rows, a.nv), D, 0, s, a);
  LUMEN_CUDA_LAUNCHED("gdn_gated_norm");
}

void init_gdn_kernels(int device) {
  int optin = 0;
  LUMEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t need = kPrepSmem > kScanSmem ? kPrepSmem : kScanSmem;
  if (static_cast<size_t>(optin) < need)
    throw std::runtime_error("the GPU allows " + std::to_string(optin) + " bytes of shared memory per block; Gated DeltaNet needs " +
                             std::to_string(need));
  LUMEN_CUDA_CHECK(cudaFuncSetAttribute(gdn_block_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kPrepSmem)));
  LUMEN_CUDA_CHECK(cudaFuncSetAttribute(gdn_block_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kScanSmem)));
}

}  // namespace lumen::cuda
