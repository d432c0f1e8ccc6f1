// The Gated DeltaNet mixer on the CPU: causal conv + SiLU, l2 norms, gates, the delta rule per
// (sequence, value head) and the gated RMSNorm; a decode step's layer as one parallel region.
// The kernels are in isa/gdn.cpp.
#include <algorithm>
#include <cmath>
#include <optional>

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

// The general path (prefill or mixed steps): four parallel regions, one per phase.
void CpuBackend::gdn(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* beta_in,
                     const float* decay_in, float* out) {
  const StepBatch& b = *step_;
  if (b.decode_only) {
    gdn_decode(c, L, qkv, z, beta_in, decay_in, out);
    return;
  }
  std::optional<ScopedOp> op(std::in_place, profiling_, stats_, "gdn_conv", "gdn");  // phases 1-2
  const int cd = c.conv_dim(), kc = c.conv_kernel;
  const int nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_dk, dv = c.lin_dv;
  const int T = b.n_tokens;
  const GdnBuffers g = gdn_buffers(T, cd, nv);
  float* conv_out = g.conv_out;
  // 1) causal depthwise conv over q|k|v channels with the per-sequence window, then SiLU.
  const float* wT = conv_taps_.at(L.conv)->as<float>();
  pool_.parallel_for(cd, [&](int64_t c0, int64_t c1) {
    for (const auto& s : b.segs)
      kernels_.conv_silu(qkv + static_cast<int64_t>(s.start) * cd, cd, s.len, conv_state(s.state_slot, L.gdn_index), wT,
                         kc, cd, c0, c1, conv_out + static_cast<int64_t>(s.start) * cd, cd);
  }, 64);
  // 2) l2-normalise q and k per head (q also scaled by 1/sqrt(dk)); beta, decay per value head.
  const float qscale = 1.f / std::sqrt(static_cast<float>(dk));
  pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = conv_out + t * cd;
      for (int h = 0; h < 2 * nk; ++h) l2norm_head(row + h * dk, dk, h < nk ? qscale : 1.f);
      for (int j = 0; j < nv; ++j) gdn_gates(L, beta_in, decay_in, t * nv + j, j, g);
    }
  });
  // 3) delta rule per (segment, value head): chunked (WY, blocks of kGdnBlock tokens; as GEMMs
  //    for the Qwen3.5 head) for long segments, the recurrence otherwise.
  op.reset();
  op.emplace(profiling_, stats_, "gdn_rule", "gdn");
  const int n_items = static_cast<int>(b.segs.size()) * nv;
  // Items are dealt in runs of adjacent heads (up to 8) from a shared counter: a sequence's heads
  // are adjacent in memory, so a run is one long stream of state for the prefetchers (one head at
  // a time, round-robin, restarted the stream every 64 KiB), and a slower core takes fewer runs
  // (figures: docs/performance.md, v16).
  const int run_len = std::clamp(n_items / (2 * pool_.size()), 1, 8);
  pool_.parallel_dealt(n_items, run_len, [&](int tid, int64_t first, int64_t last) {
    for (int it = static_cast<int>(first); it < static_cast<int>(last); ++it) {
      const auto& s = b.segs[it / nv];
      const int j = it % nv, kh = c.key_head_of(j);  // grouped (HF) or tiled (GGUF) order
      float* S = ssm_state(s.state_slot, L.gdn_index) + static_cast<int64_t>(j) * dk * dv;
      const GdnHeadIO io = gdn_head_io(c, g, s.start, j, kh, out);
      auto& scratch = per_thread_[tid].gdn_scratch;
      if (s.len < gdn_chunk_min_)
        kernels_.gdn_recurrent(S, io, s.len, dk, dv);
      else if (dk == 128 && dv == 128)
        kernels_.gdn_chunked_128(S, io, s.len, scratch);
      else
        kernels_.gdn_chunked(S, io, s.len, dk, dv, kGdnBlock, scratch);
    }
  });
  // 4) gated RMSNorm per value head: norm(o) * w * silu(z).
  op.reset();
  op.emplace(profiling_, stats_, "gdn_gate", "gdn");
  pool_.parallel_for(static_cast<int64_t>(T) * nv, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) kernels_.gated_rmsnorm(out + i * dv, z + i * dv, L.gdn_norm, dv, c.eps);
  }, 4);
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
  const GdnBuffers g = gdn_buffers(b.n_tokens, cd, nv);
  const float* wT = conv_taps_.at(L.conv)->as<float>();
  const float qscale = 1.f / std::sqrt(static_cast<float>(dk));
  const int n_items = static_cast<int>(b.segs.size()) * nk;
  // Runs of adjacent items from a shared counter, as in the general path (a sequence's heads are
  // adjacent in the state, so a run is one long stream of it).
  const int run_len = std::clamp(n_items / (2 * pool_.size()), 1, 8);
  // Value head u of key head kh: adjacent in grouped order (kh r .. kh r + r - 1), every nk-th in
  // tiled order (kh, kh + nk, ...); and that head's state for item `it` (a sequence's key head).
  auto value_head = [&](int kh, int u) { return c.v_heads_tiled ? kh + u * nk : kh * r + u; };
  auto head_state = [&](int64_t it, int u) {
    const SeqSegment& s = b.segs[static_cast<size_t>(it / nk)];
    return ssm_state(s.state_slot, L.gdn_index) + static_cast<int64_t>(value_head(static_cast<int>(it % nk), u)) * dk * dv;
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
      const float* xrow = qkv + t * cd;
      float* crow = g.conv_out + t * cd;
      float* cstate = conv_state(s.state_slot, L.gdn_index);
      const int64_t q0 = static_cast<int64_t>(kh) * dk, k0 = kd + q0;
      kernels_.conv_silu(xrow, cd, 1, cstate, wT, c.conv_kernel, cd, q0, q0 + dk, crow, cd);
      kernels_.conv_silu(xrow, cd, 1, cstate, wT, c.conv_kernel, cd, k0, k0 + dk, crow, cd);
      // The key head's value heads (value_head): one run of channels in grouped order.
      if (c.v_heads_tiled) {
        for (int u = 0; u < r; ++u) {
          const int64_t v0 = 2 * kd + static_cast<int64_t>(value_head(kh, u)) * dv;
          kernels_.conv_silu(xrow, cd, 1, cstate, wT, c.conv_kernel, cd, v0, v0 + dv, crow, cd);
        }
      } else {
        const int64_t v0 = 2 * kd + static_cast<int64_t>(kh) * r * dv;
        kernels_.conv_silu(xrow, cd, 1, cstate, wT, c.conv_kernel, cd, v0, v0 + static_cast<int64_t>(r) * dv, crow, cd);
      }
      l2norm_head(crow + q0, dk, qscale);
      l2norm_head(crow + k0, dk, 1.f);
      for (int u = 0; u < r; ++u) {
        const int j = value_head(kh, u);
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
