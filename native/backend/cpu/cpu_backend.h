#pragma once
// The CPU backend: host memory, a persistent thread pool, and the kernel table of the ISA chosen
// at run time. One class, its members defined by job:
//   cpu_backend.cpp   the front: caches and snapshots, the small ops, sampling, profiling
//   weights.cpp       weight binding (bf16 matrices repacked into vdpbf16ps panels, Q4_K ones into
//                     16-row panels, conv taps)
//   matmul.cpp        how matrix products are split over the threads
//   attention.cpp     full attention over the paged KV cache
//   gdn.cpp           the Gated DeltaNet mixer
// The kernels themselves are in isa/ (one file per op family, compiled once per ISA).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/op_profile.h"
#include "core/aligned.h"
#include "core/clock.h"
#include "core/thread_pool.h"
#include "core/weight_arena.h"

namespace lumen {

std::unique_ptr<Backend> make_cpu_backend(int n_threads);

namespace cpu {

// Wall time of one op into the profile, when profiling is on.
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

// A DeltaNet layer's step buffers (both paths): conv output [T, cd]; beta and log decay [T, nv].
struct GdnBuffers {
  float* conv_out;
  float* beta;
  float* log_decay;
  int64_t cd;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads);
  // The pool's workers may still be inside a decode matmul region (finishing a piece the caller
  // took over) that reads the packed weights: let them leave before the members go.
  ~CpuBackend() override { pool_.drain(); }

  std::string name() const override { return "cpu"; }
  std::string device_desc() const override;
  void set_gdn_chunk_min(int n) override { gdn_chunk_min_ = n; }

  void bind_weights(const HostWeights& w, BWeights& out) override;                      // weights.cpp
  size_t init_caches(const CacheSpec& spec, int max_step_tokens, int max_logit_rows) override;
  void reset_state(int slot) override;
  size_t init_snapshots(int n) override;
  void save_state(int slot, int snap) override;
  void load_state(int snap, int slot) override;

  void begin_step(const StepBatch& b) override {
    step_ = &b;
    rope_rows_ = 0;
  }
  void embed(const WMat& table, float* x) override;
  void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps) override;
  void matmul(const float* x, int rows, const WMat& w, float* y) override;               // matmul.cpp
  void matmul_group(const float* x, int rows, const WMat* const* ws, float* const* ys, int n) override;
  void add(float* y, const float* x, int64_t n) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void attention(const ModelConfig& c, const BLayer& L, float* qg, float* k, const float* v,  // attention.cpp
                 float* out) override;
  void gdn(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* beta_in,  // gdn.cpp
           const float* decay_in, float* out) override;
  void gather_rows(const float* x, int first, int count, float* y, int dim) override;
  void argmax_rows(const float* logits, const int* rows, int n, int vocab, int32_t* out) override;
  void host_parallel(int n, const std::function<void(int)>& fn) override;
  // Greedy and top-k picks of a head group's rows side by side on the pool, by the table's argmax
  // and top_candidates (the base class picks top-k rows one after another in scalar code).
  void pick_rows(const float* logits, int n, int vocab, const RowPick* picks, float* host_logits, int32_t* ids,
                 PickCandidate* cands) override;
  bool host_memory() const override { return true; }
  void logits_to_host(const float* src, float* dst, int64_t n) override {
    if (src != dst) std::copy(src, src + n, dst);
  }
  float* scratch(size_t n) override;

  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<OpStat> take_profile() override { return stats_.take(); }

 private:
  void matmul_impl(const float* x, int rows, const WMat* const* ws, float* const* ys, int n);
  void matmul_quantized(const float* x, int rows, const WMat* const* ws, float* const* ys, int n);
  // attention() for the cache's element type: float, or uint16_t (f16 bits); attention.cpp.
  template <typename KV>
  void attention_kv(const ModelConfig& c, const BLayer& L, float* qg, float* k, const float* v, float* out);
  void gdn_decode(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* beta_in,
                  const float* decay_in, float* out);
  // Key head kh's inputs for n rows of x (row stride xs): the conv + SiLU of its q, k and value
  // heads' v channels (advancing the conv state), then q and k l2-normalised per row (q also by
  // 1/sqrt(dk)); to q_out, k_out and v_out (value head u at v_out + u v_step), row stride os.
  void gdn_item_inputs(const ModelConfig& c, const float* wT, const float* x, int64_t xs, int n, float* cstate, int kh,
                       float* q_out, float* k_out, float* v_out, int64_t v_step, int64_t os);

  void rms_row(const float* x, const float* w, float* y, int dim, float eps) const {
    const float inv = 1.f / std::sqrt(kernels_.sumsq(x, dim) / dim + eps);
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
  // The gates of T tokens, and with `conv` the conv output [T, cd] (gdn_decode's; the general path
  // keeps each item's conv rows in PerThread::gdn_rows).
  GdnBuffers gdn_buffers(int T, int64_t cd, int nv, bool conv) {
    if (gate_buf_.size() < static_cast<size_t>(2) * T * nv) gate_buf_.resize(static_cast<size_t>(2) * T * nv);
    return {conv ? conv_buf(static_cast<size_t>(T) * cd) : nullptr, gate_buf_.data(),
            gate_buf_.data() + static_cast<size_t>(T) * nv, cd};
  }
  // l2-normalise one q or k head of the conv output, times `scale` (1/sqrt(dk) for q, 1 for k).
  void l2norm_head(float* x, int dk, float scale) const {
    const float inv = 1.f / std::sqrt(kernels_.sumsq(x, dk) + 1e-6f);
    kernels_.scale(x, inv * scale, dk);
  }

  struct PerThread {
    std::vector<float> scores;
    std::vector<PickCandidate> pick;  // pick_rows' top-k scratch
    // An attention item's KV block addresses (keys, values, the next item's keys), per cache type.
    template <typename KV>
    struct KvBlocks {
      std::vector<const KV*> k, v, k_next;
    };
    KvBlocks<float> kv32;
    KvBlocks<uint16_t> kv16;  // an f16 cache's
    template <typename KV>
    KvBlocks<KV>& kv_blocks() {
      if constexpr (std::is_same_v<KV, float>)
        return kv32;
      else
        return kv16;
    }
    std::vector<const float*> tile_q;  // a prompt tile's query rows, token-major (attn_tile)
    std::vector<float*> tile_o;
    std::vector<int32_t> tile_ctx;
    std::vector<float> tile_scratch;
    std::vector<float> gdn_scratch;
    AlignedBuffer gdn_rows;  // a general-path DeltaNet item's conv output, 2 dk + r dv floats a token
  };

  // Batches of up to this many rows of x are decode-sized: stealable regions of weight streams.
  static constexpr int kDecodeRows = 16;
  // xq: x quantized per activation type (matmul_quantized), or null; xa: the quantized panels' side
  // of it per activation type (kernels.h's panel_act; null where none), with xq.
  void decode_region(const float* x, int rows, const WMat* const* ws, float* const* ys, int n, bool packed,
                     const void* const* xq = nullptr, const void* const* xa = nullptr);

  // A matmul region's work list: panels [p0, p1) of matrix `matrix` (slice: see matmul_packed).
  struct Piece {
    int matrix;
    int64_t p0, p1, slice;
  };
  // A decode matmul region as stealable work: a worker computes a piece into its own shadow of the
  // outputs and copies it in place only if the caller has not taken the piece over.
  struct MatmulWork final : StealableWork {
    struct Mat {
      const uint16_t* packed;  // vdpbf16ps panels, or null: `w` of type `wt` (row-major, or GGUF blocks)
      const void* w;
      const void* quant_panels;  // block-quantized `w` repacked into panels (kernels.h), or null
      DType wt;
      int64_t n;
      float* y;
    };
    const Kernels* kernels = nullptr;
    std::vector<AlignedBuffer>* shadows = nullptr;  // per thread; grown only by its thread
    int rows = 0, streams = 0;
    int64_t k = 0;
    // This region's own copies of x (the caller may have moved on): rounded to bf16 for packed
    // matrices; for row-major ones in split_x's order (bf16) and as it is (f32); quantized per
    // activation type (by ActQuant) for block-quantized ones.
    std::vector<uint16_t> x_bf16;
    std::vector<float> x_split, x_f32;
    std::vector<unsigned char> x_quant[4];
    std::vector<unsigned char> x_act[4];  // the panels' side of x_quant (kernels.h's panel_act), or empty
    std::vector<Mat> mats;
    std::vector<Piece> pieces;

    void compute(int64_t p, int tid, bool direct) override;
    void commit(int64_t p, int tid) override;
  };

  // Declared before the pool, so destroyed after it (the destructor drains the pool first anyway).
  MatmulWork matmul_work_[ThreadPool::kSlots];
  std::vector<AlignedBuffer> shadows_;
  ThreadPool pool_;
  std::vector<Piece> prefill_pieces_;  // the prefill matmul's work list (one region at a time)
  // How long the caller, out of pieces, waits for a worker's piece before computing it itself. A
  // worker's last piece (128 KiB) takes ~4 us; a descheduled worker is gone for hundreds of
  // microseconds or more (figures: docs/performance.md, v29).
  static constexpr int64_t kStealPatienceNs = 15'000;
  const Kernels& kernels_;
  CacheSpec spec_;
  AlignedBuffer k_cache_, v_cache_, state_, snapshots_;
  AlignedBuffer conv_buf_;  // a DeltaNet layer's conv output [T, cd]
  AlignedBuffer x_bf16_;    // x rounded to bf16 for the packed matmuls
  AlignedBuffer x_quant_[4];  // x quantized for block-quantized matrices, by ActQuant
  AlignedBuffer x_act_[4];    // the quantized panels' side of x_quant_ (kernels.h's panel_act)
  WeightArena weight_memory_;  // the packed panels and resident copies below
  std::map<const void*, void*> packed_weights_;    // vdpbf16ps / quantized panels, by host matrix
  std::map<const void*, void*> resident_weights_;  // row-major copies, by host matrix
  const void* head_ptr_ = nullptr;  // the vocabulary head (profiled apart)
  std::map<const float*, std::unique_ptr<AlignedBuffer>> conv_taps_;  // tap-major conv weights, by host vector
  std::vector<float> gate_buf_;  // a DeltaNet layer's beta and log decay [2][T, nv]
  size_t kv_layer_elems_ = 0, layer_state_elems_ = 0, slot_elems_ = 0;
  int n_snapshots_ = 0;
  int gdn_chunk_min_ = 16;  // segments of at least this many tokens take the chunked DeltaNet
  const StepBatch* step_ = nullptr;
  // The step's RoPE cos | sin per token ([T][rot]), computed by its first attention layer and
  // read by the others (rope_rows_: the tokens it holds; 0 until then).
  std::vector<float> rope_cs_;
  int rope_rows_ = 0;
  std::vector<std::unique_ptr<AlignedBuffer>> scratch_;
  std::vector<PerThread> per_thread_;
  bool profiling_ = false;
  OpProfile stats_;
};

}  // namespace cpu
}  // namespace lumen
