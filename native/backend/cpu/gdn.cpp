// The Gated DeltaNet mixer on the CPU: causal conv + SiLU, l2 norms, gates, the delta rule per
// (sequence, value head) and the gated RMSNorm; a step's layer as one parallel region (prefill and
// mixed steps: gdn; decode steps: gdn_decode).
// The kernels are in isa/gdn.cpp.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"

namespace lumen::cpu {
namespace {

inline float sigmoidf(float x) { return 1.f / (1.f + std::exp(-x)); }
inline float softplusf(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

// Value head j's beta and log decay for step row i = t * nv + j, from the b and a projections.
void gdn_gates(const BLayer& L, const float* beta_in, const float* decay_in, int64_t i, int j, const GdnBuffers& g) {
  g.beta[i] = sigmoidf(beta_in[i]);
  g.log_decay[i] = L.neg_exp_a[j] * softplusf(decay_in[i] + L.dt_bias[j]);
}
// The delta rule's view of value head j (key head kh) of the segment starting at step row t0.
GdnHeadIO gdn_head_io(const ModelConfig& c, const GdnBuffers& g, int64_t t0, int j, int kh, float* out) {
  const int nv = c.lin_v_heads, dk = c.lin_dk, dv = c.lin_dv;
  const int64_t kd = c.key_dim(), cd = g.cd;
  const float* base = g.conv_out + t0 * cd;
  return {base + static_cast<int64_t>(kh) * dk, base + kd + static_cast<int64_t>(kh) * dk,
          base + 2 * kd + static_cast<int64_t>(j) * dv, g.beta + t0 * nv + j, g.log_decay + t0 * nv + j,
          out + t0 * nv * dv + static_cast<int64_t>(j) * dv, cd, cd, cd, nv, static_cast<int64_t>(nv) * dv};
}

}  // namespace

void CpuBackend::gdn_item_inputs(const ModelConfig& c, const float* wT, const float* x, int64_t xs, int n, float* cstate,
                                 int kh, float* q_out, float* k_out, float* v_out, int64_t v_step, int64_t os) {
  const int64_t cd = c.conv_dim(), kd = c.key_dim(), dk = c.lin_dk, dv = c.lin_dv;
  const int r = c.lin_v_heads / c.lin_k_heads;
  const int64_t q0 = kh * dk, k0 = kd + q0;
  kernels_.conv_silu(x, xs, n, cstate, wT, c.conv_kernel, cd, q0, q0 + dk, q_out, os);
  kernels_.conv_silu(x, xs, n, cstate, wT, c.conv_kernel, cd, k0, k0 + dk, k_out, os);
  if (c.v_heads_tiled) {
    for (int u = 0; u < r; ++u) {
      const int64_t v0 = 2 * kd + static_cast<int64_t>(c.value_head_of(kh, u)) * dv;
      kernels_.conv_silu(x, xs, n, cstate, wT, c.conv_kernel, cd, v0, v0 + dv, v_out + u * v_step, os);
    }
  } else {  // the value heads' channels are one run (v_step = dv)
    const int64_t v0 = 2 * kd + static_cast<int64_t>(c.value_head_of(kh, 0)) * dv;
    kernels_.conv_silu(x, xs, n, cstate, wT, c.conv_kernel, cd, v0, v0 + r * dv, v_out, os);
  }
  const float qscale = 1.f / std::sqrt(static_cast<float>(dk));
  for (int t = 0; t < n; ++t) {
    l2norm_head(q_out + t * os, static_cast<int>(dk), qscale);
    l2norm_head(k_out + t * os, static_cast<int>(dk), 1.f);
  }
}

// The general path (prefill or mixed steps) in one parallel region: an item is a key head of one
// segment with its value heads, taken end to end as in gdn_decode, a span of whole blocks at a
// time: the conv + SiLU of its q, k and v channels into the thread's own rows (2 dk + r dv floats a
// token), the l2 norms and gates, then per value head the delta rule (chunked (WY, blocks of
// kGdnBlock tokens; as GEMMs for the Qwen3.5 head) for long segments, the recurrence otherwise) and
// the gated RMSNorm of its output rows. Each element sees the same operations in the same order as
// in separate passes over the whole layer (conv, norms, rule, norm), so the same bits; the conv
// output no longer goes to memory and back between passes (figures: docs/performance.md,
// twenty-eighth session).
void CpuBackend::gdn(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* beta_in,
                     const float* decay_in, float* out) {
  const StepBatch& b = *step_;
  if (b.decode_only) {
    gdn_decode(c, L, qkv, z, beta_in, decay_in, out);
    return;
  }
  ScopedOp op(profiling_, stats_, "gdn_segments", "gdn");
  const int64_t cd = c.conv_dim();
  const int nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_dk, dv = c.lin_dv;
  const int r = nv / nk;
  const GdnBuffers g = gdn_buffers(b.n_tokens, cd, nv, false);
  const float* wT = conv_taps_.at(L.conv)->as<float>();
  const int64_t W = 2 * static_cast<int64_t>(dk) + static_cast<int64_t>(r) * dv;  // an item's floats a token
  const int n_items = static_cast<int>(b.segs.size()) * nk;
  // Items are dealt in runs of adjacent key heads (up to 8) from a shared counter: a sequence's
  // heads are adjacent in the state, so a run is one long stream of it for the prefetchers (one
  // head at a time, round-robin, restarted the stream every 64 KiB), and a slower core takes fewer
  // runs (figures: docs/performance.md, v16).
  const int run_len = std::clamp(n_items / (2 * pool_.size()), 1, 8);
  // A segment is taken a span of P tokens at a time (a multiple of the chunked form's blocks, so the
  // same blocks, the same bits): the span's rows stay in L2 from the conv through the rule.
  const int64_t P = std::max<int64_t>(kGdnBlock, kGdnSpanBytes / (W * static_cast<int64_t>(sizeof(float))) / kGdnBlock * kGdnBlock);
  pool_.parallel_dealt(n_items, run_len, [&](int tid, int64_t first, int64_t last) {
    PerThread& pt = per_thread_[tid];
    for (int64_t it = first; it < last; ++it) {
      const SeqSegment& s = b.segs[static_cast<size_t>(it / nk)];
      const int kh = static_cast<int>(it % nk);
      const bool chunked = s.len >= gdn_chunk_min_;
      float* cstate = conv_state(s.state_slot, L.gdn_index);
      for (int64_t t0 = 0; t0 < s.len; t0 += P) {
        const int n = static_cast<int>(std::min<int64_t>(P, s.len - t0));
        const int64_t row0 = s.start + t0;  // the span's first step row
        const size_t need = static_cast<size_t>(n) * W * sizeof(float);
        if (pt.gdn_rows.size() < need) pt.gdn_rows.resize(need, false);
        float* X = pt.gdn_rows.as<float>();
        // 1-2) conv + SiLU of the item's channels (q | k | its value heads' v), l2 norms.
        gdn_item_inputs(c, wT, qkv + row0 * cd, cd, n, cstate, kh, X, X + dk, X + 2 * dk, dv, W);
        for (int u = 0; u < r; ++u) {
          // 3) beta and decay of value head j, then its delta rule.
          const int j = c.value_head_of(kh, u);
          for (int t = 0; t < n; ++t) gdn_gates(L, beta_in, decay_in, (row0 + t) * nv + j, j, g);
          float* S = ssm_state(s.state_slot, L.gdn_index) + static_cast<int64_t>(j) * dk * dv;
          float* o = out + row0 * nv * dv + static_cast<int64_t>(j) * dv;
          const GdnHeadIO io{X, X + dk, X + 2 * dk + static_cast<int64_t>(u) * dv, g.beta + row0 * nv + j,
                             g.log_decay + row0 * nv + j, o, W, W, W, nv, static_cast<int64_t>(nv) * dv};
          if (!chunked)
            kernels_.gdn_recurrent(S, io, n, dk, dv);
          else if (dk == 128 && dv == 128)
            kernels_.gdn_chunked_128(S, io, n, pt.gdn_scratch);
          else
            kernels_.gdn_chunked(S, io, n, dk, dv, kGdnBlock, pt.gdn_scratch);
          // 4) gated RMSNorm of its output rows: norm(o) * w * silu(z).
          const float* zj = z + row0 * nv * dv + static_cast<int64_t>(j) * dv;
          for (int t = 0; t < n; ++t)
            kernels_.gated_rmsnorm(o + static_cast<int64_t>(t) * nv * dv, zj + static_cast<int64_t>(t) * nv * dv, L.gdn_norm, dv, c.eps);
        }
      }
    }
  });
}

// A decode step's DeltaNet layer (one token per sequence) in one parallel region: an item is a
// key head of one sequence with its value heads, taken end to end (conv + SiLU of its q, k and v
// channels, l2 norms, decay, delta rule, gated norm), so the conv output is still in L1 when the
// rule reads it. The general path above is four regions and a serial l2-norm pass at T = 1.
void CpuBackend::gdn_decode(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z,
                            const float* beta_in, const float* decay_in, float* out) {
  const StepBatch& b = *step_;
  ScopedOp op(profiling_, stats_, "gdn_decode", "gdn");
  const int64_t cd = c.conv_dim();
  const int nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_dk, dv = c.lin_dv, kd = c.key_dim();
  const int r = nv / nk;
  const GdnBuffers g = gdn_buffers(b.n_tokens, cd, nv, true);
  const float* wT = conv_taps_.at(L.conv)->as<float>();
  const int n_items = static_cast<int>(b.segs.size()) * nk;
  // Runs of adjacent items from a shared counter, as in the general path (a sequence's heads are
  // adjacent in the state, so a run is one long stream of it).
  const int run_len = std::clamp(n_items / (2 * pool_.size()), 1, 8);
  // Value head u's state for item `it` (a sequence's key head; c.value_head_of: adjacent in grouped
  // order, every nk-th in tiled order).
  auto head_state = [&](int64_t it, int u) {
    const SeqSegment& s = b.segs[static_cast<size_t>(it / nk)];
    return ssm_state(s.state_slot, L.gdn_index) + static_cast<int64_t>(c.value_head_of(static_cast<int>(it % nk), u)) * dk * dv;
  };
  // The state the thread updates after value head u of item it, within its run ending at item i1
  // (the next value head of the item, else the next item's first), else null.
  auto next_state = [&](int64_t it, int u, int64_t i1) -> const float* {
    if (u + 1 < r) return head_state(it, u + 1);
    return it + 1 < i1 ? head_state(it + 1, 0) : nullptr;
  };
  pool_.parallel_dealt(n_items, run_len, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const SeqSegment& s = b.segs[static_cast<size_t>(it / nk)];
      const int kh = static_cast<int>(it % nk);
      const int64_t t = s.start;
      float* crow = g.conv_out + t * cd;
      float* cstate = conv_state(s.state_slot, L.gdn_index);
      // Into the conv row at the channels' own places (gdn_head_io reads them there).
      const int64_t q0 = static_cast<int64_t>(kh) * dk;
      gdn_item_inputs(c, wT, qkv + t * cd, cd, 1, cstate, kh, crow + q0, crow + kd + q0,
                      crow + 2 * kd + static_cast<int64_t>(c.value_head_of(kh, 0)) * dv, c.v_heads_tiled ? static_cast<int64_t>(nk) * dv : dv, cd);
      for (int u = 0; u < r; ++u) {
        const int j = c.value_head_of(kh, u);
        gdn_gates(L, beta_in, decay_in, t * nv + j, j, g);
        float* S = head_state(it, u);
        GdnHeadIO io = gdn_head_io(c, g, s.start, j, kh, out);
        io.next_state = next_state(it, u, i1);
        kernels_.gdn_recurrent(S, io, 1, dk, dv);
        kernels_.gated_rmsnorm(io.o, z + t * nv * dv + static_cast<int64_t>(j) * dv, L.gdn_norm, dv, c.eps);
      }
    }
  });
}

}  // namespace lumen::cpu
