// Full attention on the CPU: per-head q/k RMSNorm and partial RoPE, the KV write into the paged
// cache, then causal GQA attention through each sequence's block table and the sigmoid gate.
// The row kernels are in isa/attention.cpp.
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace lumen::cpu {

void CpuBackend::attention(const ModelConfig& c, const BLayer& L, float* qg, float* k, const float* v, float* out) {
  if (spec_.kv_dtype == DType::f16)
    attention_kv<uint16_t>(c, L, qg, k, v, out);
  else
    attention_kv<float>(c, L, qg, k, v, out);
}

// KV: the cache's element type, float or uint16_t (f16 bits: K and V rounded to nearest-even as
// they are written, widened back to f32 as the kernels read them).
template <typename KV>
void CpuBackend::attention_kv(const ModelConfig& c, const BLayer& L, float* qg, float* k, const float* v, float* out) {
  constexpr bool kF16 = std::is_same_v<KV, uint16_t>;
  const StepBatch& b = *step_;
  std::optional<ScopedOp> op(std::in_place, profiling_, stats_, "attn_rope", "attention");  // norms, RoPE, KV write
  const int hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, rot = c.rot_dim(), half = rot / 2;
  const int bs = spec_.block_size;
  KV* kc = k_cache_.as<KV>() + L.kv_index * kv_layer_elems_;
  KV* vc = v_cache_.as<KV>() + L.kv_index * kv_layer_elems_;
  // cos | sin of pos * inv_freq_j (inv_freq_j = theta^(-2j/rot), all in double for accuracy) per
  // token: the same for every attention layer of the step, so computed by the first one.
  if (rope_rows_ != b.n_tokens) {
    std::vector<double> inv_freq(half);
    for (int j = 0; j < half; ++j) inv_freq[j] = std::pow(static_cast<double>(c.rope_theta), -2.0 * j / rot);
    if (rope_cs_.size() < static_cast<size_t>(b.n_tokens) * rot) rope_cs_.resize(static_cast<size_t>(b.n_tokens) * rot);
    pool_.parallel_for(b.n_tokens, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* cs = rope_cs_.data() + t * rot;
        for (int j = 0; j < half; ++j) {
          const double ang = b.positions[t] * inv_freq[j];
          cs[j] = static_cast<float>(std::cos(ang));
          cs[half + j] = static_cast<float>(std::sin(ang));
        }
      }
    }, 16);  // a decode step's few rows: no region
    rope_rows_ = b.n_tokens;
  }

  // 1) per-head RMSNorm (1+w folded) and partial NeoX RoPE on q and k; write k, v into the cache.
  pool_.parallel_for(b.n_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = rope_cs_.data() + t * rot;
      auto rope = [&](float* x) {
        for (int j = 0; j < half; ++j) {
          const float x0 = x[j], x1 = x[j + half];
          x[j] = x0 * cs[j] - x1 * cs[half + j];
          x[j + half] = x1 * cs[j] + x0 * cs[half + j];
        }
      };
      for (int h = 0; h < nh; ++h) {
        float* qh = qg + t * (2 * nh * hd) + h * 2 * hd;
        rms_row(qh, L.q_norm, qh, hd, c.eps);
        rope(qh);
      }
      for (int h = 0; h < nkv; ++h) {
        float* kh = k + t * (nkv * hd) + h * hd;
        rms_row(kh, L.k_norm, kh, hd, c.eps);
        rope(kh);
      }
    }
  });
  // Cache layout per layer: [block][kv head][position in block][hd], so one KV head's rows in a
  // block are one contiguous run (bs * hd elements) that the attention below streams.
  auto row_at = [&](const int32_t* table, int pos, int g) {
    return ((static_cast<size_t>(table[pos / bs]) * nkv + g) * bs + pos % bs) * hd;
  };
  for (const auto& s : b.segs) {
    const int32_t* table = b.block_tables.data() + s.table_offset;
    for (int i = 0; i < s.len; ++i)
      for (int g = 0; g < nkv; ++g) {
        const size_t src = (static_cast<size_t>(s.start + i) * nkv + g) * hd, dst = row_at(table, s.pos0 + i, g);
        if constexpr (kF16) {
          kernels_.to_f16(k + src, kc + dst, hd);
          kernels_.to_f16(v + src, vc + dst, hd);
        } else {
          std::copy(k + src, k + src + hd, kc + dst);
          std::copy(v + src, v + src + hd, vc + dst);
        }
      }
  }
  op.reset();
  op.emplace(profiling_, stats_, "attention", "attention");
  // 2) causal attention through the block table, then the sigmoid gate. An item is up to kTile
  // consecutive tokens of one segment and one KV head; the query heads of the group, and the
  // tokens of the tile, share each key and value read. The context is walked in KV spans of
  // kKvSpan blocks (256 KiB per KV head at hd 256 in f32, 128 KiB in f16, so a span stays in L2), each span serving
  // every token of the tile before the next is read, so a long prefill reads its context once
  // per tile rather than once per token. The kernels read several blocks side by side and
  // prefetch the blocks after them (blocks are scattered, so the hardware prefetchers restart at
  // each). Items are dealt round-robin so the threads get alike mixes of short and long contexts.
  //
  // Prompt tokens (positions before the segment's decode_from) go through attn_tile instead: the
  // tile's queries as vector lanes, every key and value read once for all of them with no
  // horizontal sums, and sums in an order that does not depend on the tile, so a prompt token's
  // result is the same in any prefill chunk or batch. Generated tokens keep the row kernels (a
  // lone query gains nothing from the transposition), so a recomputed one (after a preemption)
  // gets its first bits again.
  constexpr int kTile = 8, kKvSpan = 16;
  struct Item { int seg, i, n, g; bool tile; };
  std::vector<Item> items;
  items.reserve(static_cast<size_t>(b.n_tokens) * nkv);
  for (int si = 0; si < static_cast<int>(b.segs.size()); ++si) {
    const auto& s = b.segs[si];
    const int n_prompt = std::clamp(s.decode_from - s.pos0, 0, s.len);
    for (int i = 0; i < s.len;) {
      const bool tile = i < n_prompt;
      const int n = std::min(kTile, (tile ? n_prompt : s.len) - i);
      for (int g = 0; g < nkv; ++g) items.push_back({si, i, n, g, tile});
      i += n;
    }
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int group = nh / nkv;
  // The blocks holding an item's context (up to its last token), from the cache's base.
  auto blocks = [&](const Item& item, const KV* cache, std::vector<const KV*>& out) {
    const auto& s = b.segs[item.seg];
    const int32_t* table = b.block_tables.data() + s.table_offset;
    const int nblk = (s.pos0 + item.i + item.n + bs - 1) / bs;
    out.resize(static_cast<size_t>(nblk));
    for (int bk = 0; bk < nblk; ++bk) out[bk] = cache + row_at(table, bk * bs, item.g);
    return nblk;
  };
  constexpr int kAhead = 4;  // the kernels read up to 4 blocks side by side
  pool_.run([&](int tid, int nth) {
    PerThread& pt = per_thread_[tid];
    auto& scores = pt.scores;
    auto& kb = pt.kv_blocks<KV>();
    // A thread's items are it = tid, tid + nth, ...: the last value span of one prefetches the
    // first key blocks of the next.
    for (size_t it = tid; it < items.size(); it += nth) {
      const Item& item = items[it];
      const auto& s = b.segs[item.seg];
      const int n = item.n, ctx_max = s.pos0 + item.i + n;
      auto ctx_of = [&](int t) { return s.pos0 + item.i + t + 1; };
      // Token t's query head hh at q(t) + hh*2*hd, its output at o(t) + hh*hd, its scores
      // (probabilities) at sc(t) + hh*ctx_max.
      auto q = [&](int t) { return qg + (s.start + item.i + t) * (2 * nh * hd) + item.g * group * 2 * hd; };
      auto o = [&](int t) { return out + (s.start + item.i + t) * (nh * hd) + item.g * group * hd; };
      // The output gate, o *= sigmoid(gate half of q), for every query row of the item.
      auto gate = [&] {
        for (int t = 0; t < n; ++t)
          for (int hh = 0; hh < group; ++hh) kernels_.mul_sigmoid(o(t) + hh * hd, q(t) + hh * 2 * hd + hd, hd);
      };
      const int nblk = blocks(item, kc, kb.k);
      blocks(item, vc, kb.v);
      if (item.tile) {
        const int nr = n * group;
        pt.tile_q.resize(static_cast<size_t>(nr));
        pt.tile_o.resize(static_cast<size_t>(nr));
        pt.tile_ctx.resize(static_cast<size_t>(nr));
        for (int t = 0; t < n; ++t)
          for (int hh = 0; hh < group; ++hh) {
            pt.tile_q[t * group + hh] = q(t) + hh * 2 * hd;
            pt.tile_o[t * group + hh] = o(t) + hh * hd;
            pt.tile_ctx[t * group + hh] = ctx_of(t);
          }
        if constexpr (kF16)
          kernels_.attn_tile_f16(pt.tile_q.data(), pt.tile_ctx.data(), nr, kb.k.data(), kb.v.data(), bs, hd, scale,
                                 pt.tile_o.data(), pt.tile_scratch);
        else
          kernels_.attn_tile(pt.tile_q.data(), pt.tile_ctx.data(), nr, kb.k.data(), kb.v.data(), bs, hd, scale,
                             pt.tile_o.data(), pt.tile_scratch);
        gate();
        continue;
      }
      const size_t need = static_cast<size_t>(n) * group * ctx_max;
      if (scores.size() < need) scores.resize(need);
      auto sc = [&](int t) { return scores.data() + static_cast<size_t>(t) * group * ctx_max; };
      int n_after = 0;
      if (it + nth < items.size()) n_after = std::min(kAhead, blocks(items[it + nth], kc, kb.k_next));
      // The span of blocks [s0, s1): the first token that reads it (from memory; the others find
      // it in L2) also prefetches what comes after: the next span, else `after`.
      auto walk = [&](const std::vector<const KV*>& blk, const KV* const* after, int n_after_blocks, auto&& fn) {
        for (int s0 = 0; s0 < nblk; s0 += kKvSpan) {
          const int s1 = std::min(nblk, s0 + kKvSpan);
          const KV* const* next = s1 < nblk ? blk.data() + s1 : after;
          const int n_next = s1 < nblk ? std::min(kAhead, nblk - s1) : n_after_blocks;
          bool first = true;
          for (int t = 0; t < n; ++t) {
            const int len = std::min(ctx_of(t) - s0 * bs, (s1 - s0) * bs);
            if (len <= 0) continue;
            fn(t, blk.data() + s0, s0 * bs, len, first ? next : nullptr, first ? n_next : -1);
            first = false;
          }
        }
      };
      walk(kb.k, kb.v.data(), std::min(kAhead, nblk),
           [&](int t, const KV* const* blk, int p0, int len, const KV* const* next, int n_next) {
             if constexpr (kF16)
               kernels_.attn_scores_f16(q(t), 2 * hd, group, blk, bs, len, hd, scale, sc(t) + p0, ctx_max, next, n_next);
             else
               kernels_.attn_scores(q(t), 2 * hd, group, blk, bs, len, hd, scale, sc(t) + p0, ctx_max, next, n_next);
           });
      for (int t = 0; t < n; ++t)
        for (int hh = 0; hh < group; ++hh) {
          float* row = sc(t) + hh * ctx_max;
          const int ctx = ctx_of(t);
          const float mx = kernels_.max_value(row, ctx);
          kernels_.scale(row, 1.f / kernels_.exp_shift_sum(row, ctx, mx), ctx);  // probabilities
        }
      for (int t = 0; t < n; ++t) std::fill(o(t), o(t) + static_cast<size_t>(group) * hd, 0.f);
      walk(kb.v, kb.k_next.data(), n_after,
           [&](int t, const KV* const* blk, int p0, int len, const KV* const* next, int n_next) {
             if constexpr (kF16)
               kernels_.attn_values_f16(sc(t) + p0, ctx_max, group, blk, bs, len, hd, o(t), hd, next, n_next);
             else
               kernels_.attn_values(sc(t) + p0, ctx_max, group, blk, bs, len, hd, o(t), hd, next, n_next);
           });
      gate();
    }
  });
}

}  // namespace lumen::cpu
