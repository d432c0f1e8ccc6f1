// Sampling picks on the device (Backend::pick_rows): per logit row, the greedy id or the k best
// candidates of logit / temperature, so that a decode step copies back ids or k candidates
// instead of whole 248k-wide rows. One block per row.
//
// Both give exactly what the host gives (core/argmax.h, core/top_k.h), which the emulation check
// compares: argmax is the lowest index of the largest value, or -1 when the row holds a NaN or an
// infinity; top-k orders by value, ties by lower id, -0 equal to +0, and marks a row holding a NaN
// or an infinity by a first candidate of id -1. Top-k is a radix
// select on a 64-bit key (value bits made order-preserving, then the id inverted, so every key is
// distinct and larger is better), eight bits a pass from the top, stopping as soon as every key
// sharing the selected prefix is taken; then the k keys are collected and bitonic-sorted in
// shared memory.
#include <climits>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {

namespace {

constexpr int kThreads = 1024;  // block size; also the most candidates (kMaxPickK)

// Neither NaN nor an infinity: the exponent bits not all ones.
__device__ __forceinline__ bool finite_value(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }

// Larger float -> larger key; -0 and +0 one key; NaN below everything.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0u;
  if (v == 0.f) v = 0.f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t cand_key(float v, int id) {
  return (static_cast<uint64_t>(order_key(v)) << 32) | static_cast<uint64_t>(0xffffffffu - static_cast<uint32_t>(id));
}

__device__ void argmax_row(const float* __restrict__ x, int vocab, int32_t* out) {
  __shared__ float sv[kThreads];
  __shared__ int si[kThreads];
  const int t = threadIdx.x;
  float bv = 0.f;
  int bi = INT_MAX;  // no candidate yet
  bool bad = false;
  for (int i = t; i < vocab; i += blockDim.x) {
    const float v = x[i];
    bad |= !finite_value(v);
    if (bi == INT_MAX || v > bv) {  // the first of equal values
      bv = v;
      bi = i;
    }
  }
  sv[t] = bv;
  si[t] = bi;
  const bool any_bad = __syncthreads_or(bad) != 0;
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    __syncthreads();
    if (t < half) {
      const float ov = sv[t + half];
      const int oi = si[t + half];
      if (oi != INT_MAX && (si[t] == INT_MAX || ov > sv[t] || (ov == sv[t] && oi < si[t]))) {
        sv[t] = ov;
        si[t] = oi;
      }
    }
  }
  __syncthreads();
  if (t == 0) *out = (any_bad || si[0] == INT_MAX) ? -1 : si[0];
}

__device__ void topk_row(const float* __restrict__ x, int vocab, int k, float temperature,
                         PickCandidate* __restrict__ out) {
  __shared__ unsigned hist[256];
  __shared__ uint64_t keys[kThreads];
  __shared__ uint64_t s_prefix, s_mask;
  __shared__ int s_remaining, s_done;
  __shared__ unsigned s_count;
  const int t = threadIdx.x;
  if (k > vocab) k = vocab;
  bool any_bad = false;  // a value of the row is not finite (every thread learns it at the first pass)
  if (t == 0) {
    s_prefix = 0;
    s_mask = 0;
    s_remaining = k;
    s_done = 0;
    s_count = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = t; d < 256; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    const uint64_t prefix = s_prefix, mask = s_mask;
    bool bad = false;
    for (int i = t; i < vocab; i += blockDim.x) {
      bad |= shift == 56 && !finite_value(x[i]);  // the first pass reads every value
      const uint64_t key = cand_key(x[i] / temperature, i);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
    }
    if (__syncthreads_or(bad)) any_bad = true;
    if (t == 0) {
      // The digit holding the remaining-th best key; keys of larger digits are all taken.
      int above = 0, digit = 0;
      for (int d = 255; d >= 0; --d) {
        if (above + static_cast<int>(hist[d]) >= s_remaining) {
          digit = d;
          break;
        }
        above += static_cast<int>(hist[d]);
      }
      s_remaining -= above;
      s_prefix |= static_cast<uint64_t>(digit) << shift;
      s_mask |= static_cast<uint64_t>(0xffu) << shift;
      s_done = static_cast<int>(hist[digit]) == s_remaining;  // every key with this prefix is taken
    }
    __syncthreads();
    if (s_done) break;
  }
  // Exactly k keys have (key & mask) >= prefix: the larger prefixes and all of the selected one.
  const uint64_t prefix = s_prefix, mask = s_mask;
  for (int i = t; i < vocab; i += blockDim.x) {
    const uint64_t key = cand_key(x[i] / temperature, i);
    if ((key & mask) >= prefix) {
      const unsigned slot = atomicAdd(&s_count, 1u);
      if (slot < static_cast<unsigned>(kThreads)) keys[slot] = key;
    }
  }
  __syncthreads();
  int p = 1;
  while (p < k) p <<= 1;
  for (int i = k + t; i < p; i += blockDim.x) keys[i] = 0;  // below every real key
  // Bitonic sort of keys[0, p), largest first.
  for (int size = 2; size <= p; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int j = t; j < p / 2; j += blockDim.x) {
        const int a = 2 * stride * (j / stride) + j % stride, b = a + stride;
        const bool desc = (a & size) == 0;
        const uint64_t ka = keys[a], kb = keys[b];
        if ((ka < kb) == desc && ka != kb) {
          keys[a] = kb;
          keys[b] = ka;
        }
      }
    }
  }
  __syncthreads();
  for (int i = t; i < k; i += blockDim.x) {
    const int id = static_cast<int>(0xffffffffu - static_cast<uint32_t>(keys[i]));
    out[i].value = x[id] / temperature;
    out[i].id = id;
  }
  if (t == 0 && any_bad) out[0].id = -1;  // thread 0 wrote out[0] above
}

__global__ void pick_kernel(const float* __restrict__ logits, int vocab, const PickArgs* __restrict__ rows,
                            int32_t* __restrict__ ids, PickCandidate* __restrict__ cands) {
  const PickArgs a = rows[blockIdx.x];
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  if (a.mode == 1) argmax_row(x, vocab, ids + blockIdx.x);
  else if (a.mode == 2) topk_row(x, vocab, a.k, a.temperature, cands + a.out);
}

}  // namespace

void launch_pick(const float* logits, int n, int vocab, const PickArgs* rows, int32_t* ids, PickCandidate* cands,
                 cudaStream_t s) {
  if (n <= 0) return;
  LUMEN_LAUNCH(pick_kernel, n, kThreads, 0, s, logits, vocab, rows, ids, cands);
  LUMEN_CUDA_LAUNCHED("pick");
}

}  // namespace lumen::cuda
