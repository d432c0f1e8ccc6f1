// The CPU backend: host memory, a persistent thread pool, and kernels chosen per ISA at run time.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>

#include "backend/cpu/gdn_cpu.h"
#include "backend/cpu/kernels.h"
#include "backend/op_profile.h"
#include "core/aligned.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace lumen {
namespace {

inline float sigmoidf(float x) { return 1.f / (1.f + std::exp(-x)); }
inline float softplusf(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

class ScopedOp {
 public:
  ScopedOp(bool on, OpProfile& stats, const char* name, const char* group)
      : on_(on), stats_(stats), name_(name), group_(group), t0_(on ? now_ns() : 0) {}
  ~ScopedOp() {
    if (on_) stats_.record(name_, group_, 1, static_cast<uint64_t>(now_ns() - t0_));
  }

 private:
  bool on_;
  OpProfile& stats_;
  const char* name_;
  const char* group_;
  int64_t t0_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads), K_(cpu::kernels()) {
    per_thread_.resize(pool_.size());
    shadows_.resize(static_cast<size_t>(pool_.size()));
  }

  // The pool's workers may still be inside a decode matmul region (finishing a piece the caller
  // took over) that reads the packed weights: let them leave before the members go.
  ~CpuBackend() override { pool_.drain(); }

  std::string name() const override { return "cpu"; }
  std::string device_desc() const override { return active_isa_name(); }
  void set_gdn_chunk_min(int n) override { chunk_threshold_ = n; }

  void bind_weights(const HostWeights& w, BWeights& out) override {
    // bf16 matrices are repacked into vdpbf16ps panels when the ISA has them (prefill and decode
    // then read only the packed copy); f32 matrices stay as they are (exact reference path).
    const bool pack = K_.pack_bf16 != nullptr;
    auto M = [&](const HostMat& m) {
      WMat r{m.data, m.dtype, m.rows, m.cols, nullptr};
      if (pack && m.dtype == DType::bf16 && m.cols % 2 == 0) {
        auto it = packed_.find(m.data);
        if (it == packed_.end()) {
          auto buf = std::make_unique<AlignedBuffer>(cpu::packed_elems(m.rows, m.cols) * 2, false);
          const int64_t panels = (m.rows + cpu::kPanel - 1) / cpu::kPanel;
          uint16_t* dst = buf->as<uint16_t>();
          const uint16_t* src = static_cast<const uint16_t*>(m.data);
          pool_.parallel_for(panels, [&](int64_t p0, int64_t p1) { K_.pack_bf16(src, m.rows, m.cols, p0, p1, dst); });
          it = packed_.emplace(m.data, std::move(buf)).first;
        }
        r.aux = it->second->data();
      }
      return r;
    };
    out.embed = M(w.embed());
    out.head = M(w.head());
    head_ptr_ = out.head.ptr;
    out.final_norm = w.final_norm().data;
    out.layers.clear();
    int kv = 0, gd = 0;
    for (const auto& L : w.layers()) {
      BLayer b;
      b.is_full = L.is_full;
      b.in_norm = L.in_norm.data;
      b.post_norm = L.post_norm.data;
      b.gate = M(L.gate);
      b.up = M(L.up);
      b.down = M(L.down);
      if (L.is_full) {
        b.kv_index = kv++;
        b.q = M(L.q);
        b.k = M(L.k);
        b.v = M(L.v);
        b.o = M(L.o);
        b.q_norm = L.q_norm.data;
        b.k_norm = L.k_norm.data;
      } else {
        b.gdn_index = gd++;
        b.qkv = M(L.qkv);
        b.z = M(L.z);
        b.b = M(L.b);
        b.a = M(L.a);
        b.out = M(L.out);
        b.conv = L.conv.data;
        // Tap-major copy [kc][cd] of the [cd][kc] conv weights: the conv kernel vectorises over channels.
        if (!conv_t_.count(b.conv)) {
          const int64_t cd = w.config().conv_dim(), kc = w.config().conv_kernel;
          if (kc < 1 || kc > 8)
            throw std::runtime_error("linear_attn.conv1d.weight: kernel size " + std::to_string(kc) + " is not supported (1..8)");
          auto t = std::make_unique<AlignedBuffer>(static_cast<size_t>(cd * kc) * sizeof(float), false);
          for (int64_t ch = 0; ch < cd; ++ch)
            for (int64_t r = 0; r < kc; ++r) t->as<float>()[r * cd + ch] = b.conv[ch * kc + r];
          conv_t_.emplace(b.conv, std::move(t));
        }
        b.dt_bias = L.dt_bias.data;
        b.neg_exp_a = L.neg_exp_a.data;
        b.gdn_norm = L.gdn_norm.data;
      }
      out.layers.push_back(b);
    }
  }

  size_t init_caches(const CacheSpec& spec, int max_step_tokens, int max_logit_rows) override {
    spec_ = spec;
    kv_layer_elems_ = static_cast<size_t>(spec.n_blocks) * spec.block_size * spec.n_kv_heads * spec.head_dim;
    k_cache_.resize(kv_layer_elems_ * spec.n_kv_layers * sizeof(float));
    v_cache_.resize(kv_layer_elems_ * spec.n_kv_layers * sizeof(float));
    layer_state_elems_ = static_cast<size_t>(spec.conv_rows) * spec.conv_dim + spec.ssm_elems;
    slot_elems_ = layer_state_elems_ * spec.n_gdn_layers;
    state_.resize(slot_elems_ * spec.n_state_slots * sizeof(float));
    return k_cache_.size() + v_cache_.size() + state_.size();
  }

  void reset_state(int slot) override {
    std::fill(slot_ptr(slot), slot_ptr(slot) + slot_elems_, 0.f);
  }

  size_t init_snapshots(int n) override {
    snapshots_.resize(slot_elems_ * static_cast<size_t>(n) * sizeof(float));
    n_snapshots_ = n;
    return snapshots_.size();
  }
  void save_state(int slot, int snap) override {
    std::copy(slot_ptr(slot), slot_ptr(slot) + slot_elems_, snapshots_.as<float>() + snap * slot_elems_);
  }
  void load_state(int snap, int slot) override {
    const float* s = snapshots_.as<float>() + snap * slot_elems_;
    std::copy(s, s + slot_elems_, slot_ptr(slot));
  }

  void begin_step(const StepBatch& b) override { step_ = &b; }

  void embed(const WMat& table, float* x) override {
    ScopedOp op(profiling_, stats_, "embed", "embed");
    const StepBatch& b = *step_;
    for (int t = 0; t < b.n_tokens; ++t) K_.row_to_f32(table.ptr, table.dtype, b.tokens[t], table.cols, x + t * table.cols);
  }

  void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps) override {
    ScopedOp op(profiling_, stats_, "rmsnorm", "norm");
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) rms_row(x + r * dim, w, y + r * dim, dim, eps);
    }, 8);
  }

  void matmul(const float* x, int rows, const WMat& w, float* y) override {
    // The vocabulary head is a third of a small model's bytes: profile it apart from the layers.
    ScopedOp op(profiling_, stats_, w.ptr == head_ptr_ ? "lm_head" : "matmul", "matmul");
    const WMat* ws[] = {&w};
    float* const ys[] = {y};
    matmul_impl(x, rows, ws, ys, 1);
  }

  void matmul_group(const float* x, int rows, const WMat* const* ws, float* const* ys, int n) override {
    ScopedOp op(profiling_, stats_, "matmul", "matmul");
    matmul_impl(x, rows, ws, ys, n);
  }

  void matmul_impl(const float* x, int rows, const WMat* const* ws, float* const* ys, int n) {
    if (rows <= 0 || n <= 0) return;
    bool packed = true;
    for (int i = 0; i < n; ++i) packed = packed && ws[i]->aux != nullptr && ws[i]->cols == ws[0]->cols;
    if (!packed) {
      // Split over output features so every weight row is read once per step (all rows of x at once).
      for (int i = 0; i < n; ++i) {
        const WMat& w = *ws[i];
        pool_.parallel_for(w.rows, [&](int64_t n0, int64_t n1) {
          K_.matmul(x, rows, w.cols, w.ptr, w.dtype, n0, n1, ys[i], w.rows);
        }, 16);
      }
      return;
    }
    // x rounded to bf16 once for all the matrices; then one region dealing chunks of 8 panels (128
    // weight rows, 256 KiB at K = 1024, long sequential streams) of every matrix from a shared
    // counter, so a slower core takes fewer chunks.
    const int64_t K = ws[0]->cols;
    const int64_t xn = static_cast<int64_t>(rows) * K;
    if (xb_.size() < static_cast<size_t>(xn) * 2) xb_.resize(static_cast<size_t>(xn) * 2, false);
    uint16_t* xb = xb_.as<uint16_t>();
    // A decode batch's rows take a few microseconds to round: less than waking the pool for them.
    if (xn <= 65536)
      K_.to_bf16(x, xb, xn);
    else
      pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) { K_.to_bf16(x + r0 * K, xb + r0 * K, (r1 - r0) * K); });
    // Decode-sized batches are weight streams. Each piece takes C panels from each quarter (1..6
    // rows; a third for 7..16, whose tile spans 3 panels) of a matrix, read as streams that far
    // apart; the panels past the last whole quarter (third) are a piece of their own. Four
    // streams that both cores walk read faster than four adjacent panels per core (eight streams
    // in all): A/B in one process, c=1 x1.07 (layer matmuls -6 %, head -5 to -18 %) with 1 MiB
    // pieces; 256 KiB pieces gained nothing. Pieces shrink to 128 KiB as the region's remaining
    // bytes run out, so that the core finishing first waits less for the other's last piece (perf,
    // c=1 decode: time spent waiting in the pool 9.2 -> 6.6 % of samples; end-to-end A/Bs within
    // the noise). Thirds for 7..16 rows: c=8 layer matmuls -4.6 %, head -8 %.
    // Larger batches (prefill) take chunks of 8 adjacent panels.
    const int streams = rows <= 6 ? 4 : rows <= 16 ? 3 : 0;  // see matmul_packed's slice
    const int64_t panel_bytes = cpu::kPanel * K * 2;
    auto panels_of = [&](int i) { return (ws[i]->rows + cpu::kPanel - 1) / cpu::kPanel; };
    if (streams == 0) {
      const int64_t kChunk = 8;
      pieces_.clear();
      for (int i = 0; i < n; ++i) {
        const int64_t panels = panels_of(i);
        for (int64_t p = 0; p < panels; p += kChunk) pieces_.push_back({i, p, std::min(panels, p + kChunk), 0});
      }
      pool_.parallel_chunks(static_cast<int64_t>(pieces_.size()), 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          const Piece& pc = pieces_[static_cast<size_t>(c)];
          const WMat& w = *ws[pc.matrix];
          K_.matmul_packed(xb, rows, K, static_cast<const uint16_t*>(w.aux), w.rows, pc.p0, pc.p1, ys[pc.matrix], w.rows, 0);
        }
      });
      return;
    }
    // Decode regions are stealable (see ThreadPool): the work, with its own copy of x, lives in
    // the region's slot until the workers have left it.
    const int slot = pool_.acquire_slot();
    MatmulWork& mw = mm_work_[slot];
    mw.K = &K_;
    mw.shadows = &shadows_;
    mw.rows = rows;
    mw.k = K;
    mw.streams = streams;
    mw.xb.assign(xb, xb + xn);
    mw.mats.clear();
    mw.pieces.clear();
    int64_t remaining = 0;  // bytes of the region not dealt yet (sizes the pieces)
    for (int i = 0; i < n; ++i) remaining += panels_of(i) * panel_bytes;
    for (int i = 0; i < n; ++i) {
      mw.mats.push_back({static_cast<const uint16_t*>(ws[i]->aux), ws[i]->rows, ys[i]});
      const int64_t panels = panels_of(i);
      const int64_t q = panels / streams;
      for (int64_t p = 0; p < q;) {
        const int64_t bytes = std::clamp<int64_t>(remaining / 8, int64_t{128} << 10, int64_t{1} << 20);
        const int64_t c = std::min(q - p, std::max<int64_t>(1, bytes / (streams * panel_bytes)));
        mw.pieces.push_back({i, p, p + c, q});
        p += c;
        remaining -= streams * c * panel_bytes;
      }
      if (panels % streams != 0) {
        mw.pieces.push_back({i, streams * q, panels, 0});
        remaining -= (panels - streams * q) * panel_bytes;
      }
    }
    const int64_t taken = pool_.run_stealable(slot, mw, static_cast<int64_t>(mw.pieces.size()), kStealPatienceNs);
    // Counted in the profile as its own group (calls = pieces the caller computed for a late
    // worker; no time of its own: that is inside the matmul op's).
    if (profiling_ && taken > 0) stats_.record("taken_over", "pool", static_cast<uint64_t>(taken), 0);
  }

  void add(float* y, const float* x, int64_t n) override {
    ScopedOp op(profiling_, stats_, "add", "elementwise");
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    ScopedOp op(profiling_, stats_, "swiglu", "elementwise");
    pool_.parallel_for(n, [&](int64_t i0, int64_t i1) {
      K_.swiglu(gate + i0, up + i0, out + i0, i1 - i0);
    }, 4096);
  }

  void attention(const ModelConfig& c, const BLayer& L, float* qg, float* k, const float* v, float* out) override {
    const StepBatch& b = *step_;
    std::optional<ScopedOp> op(std::in_place, profiling_, stats_, "attn_rope", "attention");  // norms, RoPE, KV write
    const int hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, rot = c.rot_dim(), half = rot / 2;
    const int bs = spec_.block_size;
    float* kc = k_cache_.as<float>() + L.kv_index * kv_layer_elems_;
    float* vc = v_cache_.as<float>() + L.kv_index * kv_layer_elems_;
    // inv_freq_j = theta^(-2j/rot), in double for accuracy.
    std::vector<double> inv_freq(half);
    for (int j = 0; j < half; ++j) inv_freq[j] = std::pow(static_cast<double>(c.rope_theta), -2.0 * j / rot);

    // 1) per-head RMSNorm (1+w folded) and partial NeoX RoPE on q and k; write k, v into the cache.
    pool_.parallel_for(b.n_tokens, [&](int64_t t0, int64_t t1) {
      std::vector<float> cs(rot);
      for (int64_t t = t0; t < t1; ++t) {
        const int pos = b.positions[t];
        for (int j = 0; j < half; ++j) {
          const double ang = pos * inv_freq[j];
          cs[j] = static_cast<float>(std::cos(ang));
          cs[half + j] = static_cast<float>(std::sin(ang));
        }
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
    // block are one contiguous run (bs * hd floats) that the attention below streams.
    auto row_at = [&](const int32_t* table, int pos, int g) {
      return ((static_cast<size_t>(table[pos / bs]) * nkv + g) * bs + pos % bs) * hd;
    };
    for (const auto& s : b.segs) {
      const int32_t* table = b.block_tables.data() + s.table_offset;
      for (int i = 0; i < s.len; ++i)
        for (int g = 0; g < nkv; ++g) {
          const size_t src = (static_cast<size_t>(s.start + i) * nkv + g) * hd, dst = row_at(table, s.pos0 + i, g);
          std::copy(k + src, k + src + hd, kc + dst);
          std::copy(v + src, v + src + hd, vc + dst);
        }
    }
    op.reset();
    op.emplace(profiling_, stats_, "attention", "attention");
    // 2) causal attention through the block table, then the sigmoid gate. An item is up to kTile
    // consecutive tokens of one segment and one KV head; the query heads of the group, and the
    // tokens of the tile, share each key and value read. The run is walked in chunks of kChunk
    // blocks (256 KiB per KV head at hd 256, so a chunk stays in L2), each chunk serving every token
    // of the tile before the next is read (in a long prefill each token used to stream the whole
    // context itself). The kernels read several blocks side by side and prefetch the blocks after
    // them (blocks are scattered, so the hardware prefetchers restart at each). Items are dealt
    // round-robin so the threads get alike mixes of short and long contexts.
    constexpr int kTile = 8, kChunk = 16;
    struct Item { int seg, i, n, g; };
    std::vector<Item> items;
    items.reserve(static_cast<size_t>(b.n_tokens) * nkv);
    for (int si = 0; si < static_cast<int>(b.segs.size()); ++si)
      for (int i = 0; i < b.segs[si].len; i += kTile)
        for (int g = 0; g < nkv; ++g) items.push_back({si, i, std::min(kTile, b.segs[si].len - i), g});
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    const int group = nh / nkv;
    // The blocks holding an item's context (up to its last token), from the cache's base.
    auto blocks = [&](const Item& item, const float* cache, std::vector<const float*>& out) {
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
      // A thread's items are it = tid, tid + nth, ...: the last value chunk of one prefetches the
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
        const size_t need = static_cast<size_t>(n) * group * ctx_max;
        if (scores.size() < need) scores.resize(need);
        auto sc = [&](int t) { return scores.data() + static_cast<size_t>(t) * group * ctx_max; };
        const int nblk = blocks(item, kc, pt.kblk);
        blocks(item, vc, pt.vblk);
        int n_after = 0;
        if (it + nth < items.size()) n_after = std::min(kAhead, blocks(items[it + nth], kc, pt.kblk_next));
        // Chunk c's blocks start at c0; the first token that reads it (from memory; the others
        // find it in L2) also prefetches what comes after: the next chunk, else `after`.
        auto walk = [&](const std::vector<const float*>& blk, const float* const* after, int n_after_blocks, auto&& fn) {
          for (int c0 = 0; c0 < nblk; c0 += kChunk) {
            const int c1 = std::min(nblk, c0 + kChunk);
            const float* const* next = c1 < nblk ? blk.data() + c1 : after;
            const int n_next = c1 < nblk ? std::min(kAhead, nblk - c1) : n_after_blocks;
            bool first = true;
            for (int t = 0; t < n; ++t) {
              const int len = std::min(ctx_of(t) - c0 * bs, (c1 - c0) * bs);
              if (len <= 0) continue;
              fn(t, blk.data() + c0, c0 * bs, len, first ? next : nullptr, first ? n_next : -1);
              first = false;
            }
          }
        };
        walk(pt.kblk, pt.vblk.data(), std::min(kAhead, nblk),
             [&](int t, const float* const* blk, int p0, int len, const float* const* next, int n_next) {
               K_.attn_scores(q(t), 2 * hd, group, blk, bs, len, hd, scale, sc(t) + p0, ctx_max, next, n_next);
             });
        for (int t = 0; t < n; ++t)
          for (int hh = 0; hh < group; ++hh) {
            float* row = sc(t) + hh * ctx_max;
            const int ctx = ctx_of(t);
            float mx = -INFINITY;
            for (int j = 0; j < ctx; ++j) mx = std::max(mx, row[j]);
            K_.scale(row, 1.f / K_.exp_shift_sum(row, ctx, mx), ctx);  // probabilities
          }
        for (int t = 0; t < n; ++t) std::fill(o(t), o(t) + static_cast<size_t>(group) * hd, 0.f);
        walk(pt.vblk, pt.kblk_next.data(), n_after,
             [&](int t, const float* const* blk, int p0, int len, const float* const* next, int n_next) {
               K_.attn_values(sc(t) + p0, ctx_max, group, blk, bs, len, hd, o(t), hd, next, n_next);
             });
        for (int t = 0; t < n; ++t)
          for (int hh = 0; hh < group; ++hh) K_.mul_sigmoid(o(t) + hh * hd, q(t) + hh * 2 * hd + hd, hd);
      }
    });
  }

  void gdn(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* bb, const float* aa,
           float* out) override {
    const StepBatch& b = *step_;
    if (b.decode_only) {
      gdn_decode(c, L, qkv, z, bb, aa, out);
      return;
    }
    std::optional<ScopedOp> op(std::in_place, profiling_, stats_, "gdn_conv", "gdn");  // phases 1-2
    const int cd = c.conv_dim(), kc = c.conv_kernel;
    const int nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_dk, dv = c.lin_dv;
    const int T = b.n_tokens;
    const GdnBuffers g = gdn_buffers(T, cd, nv);
    float* conv_out = g.conv_out;
    // 1) causal depthwise conv over q|k|v channels with the per-sequence window, then SiLU.
    const float* wT = conv_t_.at(L.conv)->as<float>();
    pool_.parallel_for(cd, [&](int64_t c0, int64_t c1) {
      for (const auto& s : b.segs)
        K_.conv_silu(qkv + static_cast<int64_t>(s.start) * cd, cd, s.len, conv_state(s.state_slot, L.gdn_index), wT, kc,
                     cd, c0, c1, conv_out + static_cast<int64_t>(s.start) * cd, cd);
    }, 64);
    // 2) l2-normalise q and k per head (q also scaled by 1/sqrt(dk)); beta, decay per value head.
    const float qscale = 1.f / std::sqrt(static_cast<float>(dk));
    pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* row = conv_out + t * cd;
        for (int h = 0; h < 2 * nk; ++h) l2norm_head(row + h * dk, dk, h < nk ? qscale : 1.f);
        for (int j = 0; j < nv; ++j) gdn_gates(L, bb, aa, t * nv + j, j, g);
      }
    });
    // 3) delta rule per (segment, value head): chunked for long segments, recurrent otherwise.
    op.reset();
    op.emplace(profiling_, stats_, "gdn_rule", "gdn");
    const int r = nv / nk;
    const int n_items = static_cast<int>(b.segs.size()) * nv;
    // Items are dealt in runs of adjacent heads from a shared counter: a sequence's heads are
    // adjacent in memory, so a run is one long stream of state for the prefetchers (one head at a
    // time, round-robin, restarted the stream every 64 KiB), and a slower core takes fewer runs.
    // Up to 8 heads a run: at c=8 that measured 7 % faster than runs of 4 (delta-rule time).
    const int run_len = std::clamp(n_items / (2 * pool_.size()), 1, 8);
    pool_.parallel_chunks(n_items, run_len, [&](int tid, int64_t first, int64_t last) {
      for (int it = static_cast<int>(first); it < static_cast<int>(last); ++it) {
        const auto& s = b.segs[it / nv];
        const int j = it % nv, kh = j / r;  // grouped value->key head mapping (HF order)
        float* S = ssm_state(s.state_slot, L.gdn_index) + static_cast<int64_t>(j) * dk * dv;
        const cpu::GdnHeadIO io = gdn_head_io(c, g, s.start, j, kh, out);
        if (s.len >= chunk_threshold_)
          K_.gdn_chunked(S, io, s.len, dk, dv, 64, per_thread_[tid].gdn_scratch);
        else
          K_.gdn_recurrent(S, io, s.len, dk, dv);
      }
    });
    // 4) gated RMSNorm per value head: norm(o) * w * silu(z).
    op.reset();
    op.emplace(profiling_, stats_, "gdn_gate", "gdn");
    pool_.parallel_for(static_cast<int64_t>(T) * nv, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) K_.gated_rmsnorm(out + i * dv, z + i * dv, L.gdn_norm, dv, c.eps);
    }, 4);
  }

  // A decode step's DeltaNet layer (one token per sequence) in one parallel region: an item is a
  // key head of one sequence with its value heads, taken end to end (conv + SiLU of its q, k and v
  // channels, l2 norms, decay, delta rule, gated norm), so the conv output is still in L1 when the
  // rule reads it. The general path above is four regions and a serial l2-norm pass at T = 1.
  void gdn_decode(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* bb,
                  const float* aa, float* out) {
    const StepBatch& b = *step_;
    ScopedOp op(profiling_, stats_, "gdn_decode", "gdn");
    const int64_t cd = c.conv_dim();
    const int nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_dk, dv = c.lin_dv, kd = c.key_dim();
    const int r = nv / nk;
    const GdnBuffers g = gdn_buffers(b.n_tokens, cd, nv);
    const float* wT = conv_t_.at(L.conv)->as<float>();
    const float qscale = 1.f / std::sqrt(static_cast<float>(dk));
    const int n_items = static_cast<int>(b.segs.size()) * nk;
    // Runs of adjacent items from a shared counter, as in the general path (a sequence's heads are
    // adjacent in the state, so a run is one long stream of it).
    const int run_len = std::clamp(n_items / (2 * pool_.size()), 1, 8);
    pool_.parallel_chunks(n_items, run_len, [&](int64_t i0, int64_t i1) {
      for (int64_t it = i0; it < i1; ++it) {
        const SeqSegment& s = b.segs[static_cast<size_t>(it / nk)];
        const int kh = static_cast<int>(it % nk);
        const int64_t t = s.start;
        const float* xrow = qkv + t * cd;
        float* crow = g.conv_out + t * cd;
        float* cstate = conv_state(s.state_slot, L.gdn_index);
        const int64_t q0 = static_cast<int64_t>(kh) * dk, k0 = kd + q0, v0 = 2 * kd + static_cast<int64_t>(kh) * r * dv;
        K_.conv_silu(xrow, cd, 1, cstate, wT, c.conv_kernel, cd, q0, q0 + dk, crow, cd);
        K_.conv_silu(xrow, cd, 1, cstate, wT, c.conv_kernel, cd, k0, k0 + dk, crow, cd);
        K_.conv_silu(xrow, cd, 1, cstate, wT, c.conv_kernel, cd, v0, v0 + static_cast<int64_t>(r) * dv, crow, cd);
        l2norm_head(crow + q0, dk, qscale);
        l2norm_head(crow + k0, dk, 1.f);
        for (int j = kh * r; j < (kh + 1) * r; ++j) {
          gdn_gates(L, bb, aa, t * nv + j, j, g);
          float* S = ssm_state(s.state_slot, L.gdn_index) + static_cast<int64_t>(j) * dk * dv;
          const cpu::GdnHeadIO io = gdn_head_io(c, g, s.start, j, kh, out);
          K_.gdn_recurrent(S, io, 1, dk, dv);
          K_.gated_rmsnorm(io.o, z + t * nv * dv + static_cast<int64_t>(j) * dv, L.gdn_norm, dv, c.eps);
        }
      }
    });
  }

  void gather_rows(const float* x, int first, int count, float* y, int dim) override {
    const StepBatch& b = *step_;
    for (int i = 0; i < count; ++i) {
      const int64_t r = b.logit_rows[first + i];
      std::copy(x + r * dim, x + (r + 1) * dim, y + static_cast<int64_t>(i) * dim);
    }
  }

  void argmax_rows(const float* logits, const int* rows, int n, int vocab, int32_t* out) override {
    pool_.parallel_for(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) out[i] = K_.argmax(logits + static_cast<int64_t>(rows[i]) * vocab, vocab);
    });
  }

  bool host_memory() const override { return true; }

  void logits_to_host(const float* src, float* dst, int64_t n) override {
    if (src != dst) std::copy(src, src + n, dst);
  }

  float* scratch(size_t n) override {
    scratch_.push_back(std::make_unique<AlignedBuffer>(n * sizeof(float)));
    return scratch_.back()->as<float>();
  }

  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<OpStat> take_profile() override { return stats_.take(); }


 private:
  void rms_row(const float* x, const float* w, float* y, int dim, float eps) const {
    const float inv = 1.f / std::sqrt(K_.sumsq(x, dim) / dim + eps);
    for (int i = 0; i < dim; ++i) y[i] = x[i] * inv * w[i];
  }
  float* slot_ptr(int slot) { return state_.as<float>() + static_cast<size_t>(slot) * slot_elems_; }
  float* conv_state(int slot, int gdn_layer) { return slot_ptr(slot) + gdn_layer * layer_state_elems_; }
  float* ssm_state(int slot, int gdn_layer) {
    return conv_state(slot, gdn_layer) + static_cast<size_t>(spec_.conv_rows) * spec_.conv_dim;
  }
  float* conv_buf(size_t n) {
    if (conv_buf_.size() < n * sizeof(float)) conv_buf_.resize(n * sizeof(float), false);
    return conv_buf_.as<float>();
  }
  // A DeltaNet layer's step buffers (both paths): conv output [T, cd]; beta and decay [T, nv].
  struct GdnBuffers {
    float* conv_out;
    float* beta;
    float* gdec;
    int64_t cd;
  };
  GdnBuffers gdn_buffers(int T, int64_t cd, int nv) {
    if (small_buf_.size() < static_cast<size_t>(2) * T * nv) small_buf_.resize(static_cast<size_t>(2) * T * nv);
    return {conv_buf(static_cast<size_t>(T) * cd), small_buf_.data(), small_buf_.data() + static_cast<size_t>(T) * nv, cd};
  }
  // l2-normalise one q or k head of the conv output, times `scale` (1/sqrt(dk) for q, 1 for k).
  void l2norm_head(float* x, int dk, float scale) const {
    const float inv = 1.f / std::sqrt(K_.sumsq(x, dk) + 1e-6f);
    K_.scale(x, inv * scale, dk);
  }
  // Value head j's beta and log decay for step row i = t * nv + j.
  static void gdn_gates(const BLayer& L, const float* bb, const float* aa, int64_t i, int j, const GdnBuffers& g) {
    g.beta[i] = sigmoidf(bb[i]);
    g.gdec[i] = L.neg_exp_a[j] * softplusf(aa[i] + L.dt_bias[j]);
  }
  // The delta rule's view of value head j (key head kh) of the segment starting at step row t0.
  static cpu::GdnHeadIO gdn_head_io(const ModelConfig& c, const GdnBuffers& g, int64_t t0, int j, int kh, float* out) {
    const int nv = c.lin_v_heads, dk = c.lin_dk, dv = c.lin_dv;
    const int64_t kd = c.key_dim(), cd = g.cd;
    const float* base = g.conv_out + t0 * cd;
    return {base + static_cast<int64_t>(kh) * dk, base + kd + static_cast<int64_t>(kh) * dk,
            base + 2 * kd + static_cast<int64_t>(j) * dv, g.beta + t0 * nv + j, g.gdec + t0 * nv + j,
            out + t0 * nv * dv + static_cast<int64_t>(j) * dv, cd, cd, cd, nv, static_cast<int64_t>(nv) * dv};
  }

  struct PerThread {
    std::vector<float> scores;
    std::vector<const float*> kblk, vblk, kblk_next;  // an attention item's KV block addresses
    std::vector<float> gdn_scratch;
  };

  // A matmul region's work list: panels [p0, p1) of matrix `matrix` (slice: see matmul_packed).
  struct Piece {
    int matrix;
    int64_t p0, p1, slice;
  };
  // A decode matmul region as stealable work: a worker computes a piece into its own shadow of the
  // outputs and copies it in place only if the caller has not taken the piece over.
  struct MatmulWork final : StealableWork {
    struct Mat {
      const uint16_t* packed;
      int64_t n;
      float* y;
    };
    const cpu::Kernels* K = nullptr;
    std::vector<AlignedBuffer>* shadows = nullptr;  // per thread; grown only by its thread
    int rows = 0, streams = 0;
    int64_t k = 0;
    std::vector<uint16_t> xb;
    std::vector<Mat> mats;
    std::vector<Piece> pieces;

    void compute(int64_t p, int tid, bool direct) override {
      const Piece& pc = pieces[static_cast<size_t>(p)];
      const Mat& m = mats[static_cast<size_t>(pc.matrix)];
      float* y = m.y;
      if (!direct) {
        AlignedBuffer& sh = (*shadows)[static_cast<size_t>(tid)];
        const size_t need = static_cast<size_t>(rows * m.n) * sizeof(float);
        if (sh.size() < need) sh.resize(need, false);
        y = sh.as<float>();
      }
      K->matmul_packed(xb.data(), rows, k, m.packed, m.n, pc.p0, pc.p1, y, m.n, pc.slice);
    }
    void commit(int64_t p, int tid) override {
      const Piece& pc = pieces[static_cast<size_t>(p)];
      const Mat& m = mats[static_cast<size_t>(pc.matrix)];
      const float* src = (*shadows)[static_cast<size_t>(tid)].as<float>();
      const int n_streams = pc.slice > 0 ? streams : 1;
      for (int j = 0; j < n_streams; ++j) {
        const int64_t n0 = (pc.p0 + j * pc.slice) * cpu::kPanel;
        const int64_t n1 = std::min(m.n, (pc.p1 + j * pc.slice) * cpu::kPanel);
        for (int r = 0; r < rows; ++r)
          std::memcpy(m.y + r * m.n + n0, src + r * m.n + n0, static_cast<size_t>(n1 - n0) * sizeof(float));
      }
    }
  };

  // Declared before the pool, so destroyed after it (the destructor drains the pool first anyway).
  MatmulWork mm_work_[ThreadPool::kSlots];
  std::vector<AlignedBuffer> shadows_;
  ThreadPool pool_;
  std::vector<Piece> pieces_;
  // How long the caller, out of pieces, waits for a worker's piece before computing it itself. A
  // worker's last piece (128 KiB) takes ~4 us; a descheduled worker is gone for hundreds of
  // microseconds or more (instrumented pool, c=1: 10 us left fewer waits than 30 us).
  static constexpr int64_t kStealPatienceNs = 15'000;
  const cpu::Kernels& K_;
  CacheSpec spec_;
  AlignedBuffer k_cache_, v_cache_, state_, snapshots_, conv_buf_, xb_;
  std::map<const void*, std::unique_ptr<AlignedBuffer>> packed_;
  const void* head_ptr_ = nullptr;
  std::map<const float*, std::unique_ptr<AlignedBuffer>> conv_t_;  // tap-major conv weights
  std::vector<float> small_buf_;
  size_t kv_layer_elems_ = 0, layer_state_elems_ = 0, slot_elems_ = 0;
  int n_snapshots_ = 0;
  int chunk_threshold_ = 16;
  const StepBatch* step_ = nullptr;
  std::vector<std::unique_ptr<AlignedBuffer>> scratch_;
  std::vector<PerThread> per_thread_;
  bool profiling_ = false;
  OpProfile stats_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

}  // namespace lumen
