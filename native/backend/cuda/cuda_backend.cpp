// The CUDA backend: weights (bf16 or f32 as loaded; Q8_0 / Q5_0 / Q4_K / Q6_K in their GGUF block layout), KV block pool, recurrent-state slots and
// activations in device memory from one allocator; ops are enqueued on one stream. Elsewhere:
// the step metadata's layout and upload (step_metadata.*), the decode-step graphs captured once per
// batch-size bucket and replayed (cuda_graphs.*), the deferred and fused launches of the matmuls,
// adds, norms and SwiGLU (deferred_launches.*), environment switches and device probing
// (cuda_env.*), the kernels (k_*.cu, one per op family).
//
// Compiled only into builds with the CUDA backend (the addon's source glob also sees this file in
// CPU-only builds, where it is empty).
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_env.h"
#include "backend/cuda/cuda_graphs.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/deferred_launches.h"
#include "backend/cuda/step_metadata.h"
#include "backend/op_profile.h"
#include "backend/weight_binding.h"
#include "core/clock.h"
#include "core/thread_pool.h"

namespace lumen {
namespace {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;

int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Splits of the decode attention for a batch bucket: enough blocks to fill the GPU at c=1, fixed
// per bucket so a replayed graph and an eager step of the same bucket compute identical bits.
int decode_splits(int bucket) { return std::clamp(256 / std::max(1, bucket), 1, 32); }

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, int host_threads) : device_(device), host_threads_(std::max(1, host_threads)) {
    const cuda::DeviceInfo d = cuda::open_device(device_);
    name_ = d.name;
    total_mem_ = d.total_memory;
    stream_ = std::make_unique<cuda::Stream>();
    cuda::kernels_init(device_);
    graphs_.set_enabled(cuda::env_flag("LUMEN_CUDA_GRAPHS", true));
    precise_gemm_ = cuda::env_flag("LUMEN_CUDA_PRECISE_GEMM", false);
  }

  ~CudaBackend() override {
    (void)cudaSetDevice(device_);  // the destructor may run on another thread than the engine worker
    if (stream_) (void)cudaStreamSynchronize(stream_->get());
    cuda::write_stats_file(name_, graph_stats(), mem_stats(), copies_);
    graphs_.clear();
  }

  // The rows the engine finishes on the host (top-k 0 draws, logprobs, ...) side by side on a pool
  // of host threads, made when a step first has more than one: at high concurrency with top-k 0 a
  // step otherwise spends ~0.3 ms a row on one core (docs/gpu.md).
  void host_parallel(int n, const std::function<void(int)>& fn) override {
    if (n <= 1 || host_threads_ == 1) return Backend::host_parallel(n, fn);
    if (!host_pool_) host_pool_ = std::make_unique<ThreadPool>(host_threads_);
    host_pool_->parallel_each(n, [&](int64_t i) { fn(static_cast<int>(i)); });
  }

  std::string name() const override { return "cuda"; }
  std::string device_desc() const override { return name_; }
  size_t device_memory_bytes() const override { return total_mem_; }

  void set_gdn_chunk_min(int n) override {
    if (n != gdn_chunk_min_) graphs_.clear();  // captured launches carry the threshold
    gdn_chunk_min_ = n;
  }

  void set_graphs(bool on) { graphs_.set_enabled(on); }
  GraphStats graph_stats() const override { return graphs_.stats(profiling_); }
  CudaMemStats mem_stats() const {
    const auto& s = alloc_.stats();
    return CudaMemStats{s.current_bytes, s.peak_bytes, s.num_allocs};
  }

  // ---- weights

  void bind_weights(const HostWeights& w, BWeights& out) override {
    cfg_ = w.config();
    have_cfg_ = true;
    check_weight_types(w);
    uploaded_.clear();
    bind_host_weights(w, {[&](const HostMat& m) { return upload_mat(m); }, [&](const HostVec& v) { return upload_vec(v); }},
                      out);
    uploaded_.clear();
    // RoPE inverse frequencies in double, as the CPU backend computes them.
    const int rot = cfg_.rot_dim(), half = rot / 2;
    std::vector<double> inv(std::max(1, half));
    for (int j = 0; j < half; ++j) inv[j] = std::pow(static_cast<double>(cfg_.rope_theta), -2.0 * j / rot);
    inv_freq_ = alloc_.alloc(inv.size() * sizeof(double), "RoPE table");
    LUMEN_CUDA_CHECK(cudaMemcpy(inv_freq_.get(), inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice));
    // Uploads from pageable memory may still be in flight on the legacy stream, which our
    // non-blocking stream does not wait for.
    LUMEN_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // ---- caches

  size_t init_caches(const CacheSpec& spec, int max_step_tokens, int max_logit_rows) override {
    if (!have_cfg_) throw std::runtime_error("CUDA backend: init_caches before bind_weights");
    if (spec.kv_dtype != DType::f32 && spec.kv_dtype != DType::f16)
      throw std::runtime_error(std::string("KV cache dtype ") + dtype_name(spec.kv_dtype) + " is not supported (f32 or f16)");
    if (max_step_tokens <= 0) throw std::runtime_error("CUDA backend: max_step_tokens must be positive");
    spec_ = spec;
    max_tokens_ = max_step_tokens;
    graphs_.clear();
    // KV pool (+1 scratch block for padded graph rows), f32 or f16 elements like the CPU backend's.
    kv_layer_elems_ = static_cast<size_t>(spec.n_blocks + 1) * spec.block_size * spec.n_kv_heads * spec.head_dim;
    size_t total = 0;
    if (spec.n_kv_layers > 0) {
      const size_t elem = dtype_size(spec.kv_dtype);
      k_cache_ = alloc_.alloc(kv_layer_elems_ * spec.n_kv_layers * elem, "K cache");
      v_cache_ = alloc_.alloc(kv_layer_elems_ * spec.n_kv_layers * elem, "V cache");
      total += k_cache_.bytes() + v_cache_.bytes();
    }
    scratch_block_ = spec.n_blocks;
    // Recurrent state slots (+1 scratch slot), zeroed.
    layer_state_elems_ = static_cast<size_t>(spec.conv_rows) * spec.conv_dim + spec.ssm_elems;
    slot_elems_ = layer_state_elems_ * spec.n_gdn_layers;
    scratch_slot_ = spec.n_state_slots;
    if (slot_elems_ > 0) {
      state_ = alloc_.alloc(slot_elems_ * (spec.n_state_slots + 1) * sizeof(float), "recurrent state");
      // On our stream (a non-blocking stream does not wait for work on the legacy default stream).
      LUMEN_CUDA_CHECK(cudaMemsetAsync(state_.get(), 0, state_.bytes(), stream()));
      LUMEN_CUDA_CHECK(cudaStreamSynchronize(stream()));
      total += state_.bytes();
    }
    // Graph buckets: powers of two up to the slot count (decode rows), within the workspace.
    int cap = 1;
    while (cap * 2 <= max_tokens_ && cap * 2 <= 512) cap *= 2;
    graph_max_rows_ = std::min(next_pow2(std::max(1, spec.n_state_slots)), cap);
    const int seg_cap = std::max(spec.n_state_slots, graph_max_rows_) + 1;
    step_meta_.init(alloc_, stream(), max_tokens_, graph_max_rows_, seg_cap, std::max(1024, spec.n_blocks + seg_cap + 1),
                    [this] { graphs_.clear(); });
    const int rc = step_meta_.row_capacity();
    // Work buffers sized for the largest step (+ graph padding).
    if (cfg_.n_linear_layers() > 0) {
      conv_out_ = alloc_.alloc(static_cast<size_t>(rc) * cfg_.conv_dim() * sizeof(float), "DeltaNet conv output");
      beta_ = alloc_.alloc(static_cast<size_t>(rc) * cfg_.lin_v_heads * sizeof(float), "DeltaNet beta");
      log_decay_ = alloc_.alloc(static_cast<size_t>(rc) * cfg_.lin_v_heads * sizeof(float), "DeltaNet decay");
      gdn_block_scratch_ = alloc_.alloc(static_cast<size_t>(step_meta_.gdn_block_capacity()) * cfg_.lin_v_heads *
                                            cuda::gdn_block_scratch_floats_per_head() * sizeof(float),
                                        "DeltaNet block scratch");
    }
    if (cfg_.n_full_layers() > 0) {
      const size_t rows = static_cast<size_t>(std::max(256, next_pow2(std::max(1, spec.n_state_slots))));
      attn_partials_ = alloc_.alloc(rows * cfg_.n_heads * (cfg_.head_dim + 2) * sizeof(float), "attention partials");
    }
    if (max_cols_ > 0) {
      x_bf16_ = alloc_.alloc(static_cast<size_t>(rc) * max_cols_ * sizeof(uint16_t), "bf16 activations");
      if (precise_gemm_) x_bf16_lo_ = alloc_.alloc(static_cast<size_t>(rc) * max_cols_ * sizeof(uint16_t), "bf16 activation residuals");
    }
    deferred_.set_bf16_workspace(x_bf16_.as<uint16_t>(), x_bf16_lo_.as<uint16_t>(), precise_gemm_);
    logit_rows_cap_ = std::max(1, max_logit_rows);
    logits_host_.resize(static_cast<size_t>(logit_rows_cap_) * std::max(1, cfg_.vocab) * sizeof(float));
    // Sampling picks of a logit group: per row its arguments, its id and up to kMaxPickK candidates.
    const size_t pick_bytes = static_cast<size_t>(logit_rows_cap_) *
                              (sizeof(cuda::PickArgs) + sizeof(int32_t) + kMaxPickK * sizeof(PickCandidate));
    pick_host_.resize(pick_bytes);
    pick_dev_ = alloc_.alloc(pick_bytes, "sampling picks");
    return total;
  }

  void reset_state(int slot) override {
    check_slot(slot);
    flush_all();
    if (slot_elems_ == 0) return;
    LUMEN_CUDA_CHECK(cudaMemsetAsync(slot_ptr(slot), 0, slot_elems_ * sizeof(float), stream()));
  }

  size_t init_snapshots(int n) override {
    n_snapshots_ = n;
    if (slot_elems_ == 0 || n <= 0) return 0;
    snapshots_ = alloc_.alloc(slot_elems_ * static_cast<size_t>(n) * sizeof(float), "state snapshots");
    return snapshots_.bytes();
  }
  void save_state(int slot, int snap) override {
    check_slot(slot);
    check_snap(snap);
    flush_all();
    if (slot_elems_ == 0) return;
    LUMEN_CUDA_CHECK(cudaMemcpyAsync(snapshots_.as<float>() + static_cast<size_t>(snap) * slot_elems_, slot_ptr(slot),
                                     slot_elems_ * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  }
  void load_state(int snap, int slot) override {
    check_slot(slot);
    check_snap(snap);
    flush_all();
    if (slot_elems_ == 0) return;
    LUMEN_CUDA_CHECK(cudaMemcpyAsync(slot_ptr(slot), snapshots_.as<float>() + static_cast<size_t>(snap) * slot_elems_,
                                     slot_elems_ * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  }

  // ---- step

  void begin_step(const StepBatch& b) override {
    if (!step_meta_.ready()) throw std::runtime_error("CUDA backend: begin_step before init_caches");
    flush_all();
    step_ = &b;
    const int T = b.n_tokens;
    if (T <= 0 || T > max_tokens_) throw std::runtime_error("CUDA backend: step of " + std::to_string(T) + " tokens");
    step_tokens_ = T;
    decode_path_ = b.decode_only;
    const int nseg = static_cast<int>(b.segs.size());
    const bool graphable = graphs_.enabled() && !profiling_ && b.decode_only && static_cast<int>(b.logit_rows.size()) == T &&
                           nseg == T && next_pow2(T) <= graph_max_rows_;
    graph_step_ = graphable;
    padded_rows_ = graphable ? next_pow2(T) : T;
    bucket_ = next_pow2(T);
    cuda::StepLimits lim;
    lim.n_blocks = spec_.n_blocks;
    lim.block_size = spec_.block_size;
    lim.has_kv = spec_.n_kv_layers > 0;
    lim.n_state_slots = spec_.n_state_slots;
    lim.scratch_block = scratch_block_;
    lim.scratch_slot = scratch_slot_;
    if (!decode_path_ && cfg_.n_full_layers() > 0)
      lim.attn_rows_per_item = cuda::attn_prefill_rows_per_item(cfg_.n_heads / std::max(1, cfg_.n_kv_heads));
    lim.gdn_chunk_min = gdn_chunk_min_;
    work_ = step_meta_.fill(b, padded_rows_, lim, stream());
  }

  void embed(const WMat& table, float* x) override {
    OpTimer op(*this, "embed", "embed");
    flush_all();
    if (is_quant(table.dtype))
      cuda::launch_embed_quant(table.ptr, table.dtype, static_cast<int>(table.cols), step_meta_.device().tokens,
                               padded_rows_, x, stream());
    else
      cuda::launch_embed(table.ptr, table.dtype == DType::bf16, static_cast<int>(table.cols), step_meta_.device().tokens,
                         padded_rows_, x, stream());
  }

  void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps) override {
    OpTimer op(*this, "rmsnorm", "norm");
    deferred_.rmsnorm(x, w, y, padded_rows(rows), dim, eps, stream());
  }

  void matmul(const float* x, int rows, const WMat& w, float* y) override {
    OpTimer op(*this, "matmul", "matmul");
    deferred_.matmul(x, padded_rows(rows), w, y, profiling_, stream());
  }

  void add(float* y, const float* x, int64_t n) override {
    OpTimer op(*this, "add", "elementwise");
    deferred_.add(y, x, padded_count(n), profiling_, stream());
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    OpTimer op(*this, "swiglu", "elementwise");
    deferred_.swiglu(gate, up, out, padded_count(n), stream());
  }

  void attention(const ModelConfig& c, const BLayer& L, float* qg, float* k, const float* v, float* out) override {
    OpTimer op(*this, "attention", "attention");
    if (L.kv_index < 0 || L.kv_index >= spec_.n_kv_layers) throw std::runtime_error("CUDA backend: bad KV layer index");
    flush_all();
    cuda::AttnArgs a;
    a.qg = qg;
    a.k = k;
    a.v = v;
    a.out = out;
    a.kv_f16 = spec_.kv_dtype == DType::f16;
    const size_t layer_bytes = kv_layer_elems_ * dtype_size(spec_.kv_dtype) * static_cast<size_t>(L.kv_index);
    a.kc = k_cache_.as<unsigned char>() + layer_bytes;
    a.vc = v_cache_.as<unsigned char>() + layer_bytes;
    a.q_norm = L.q_norm;
    a.k_norm = L.k_norm;
    a.inv_freq = inv_freq_.as<double>();
    a.nh = c.n_heads;
    a.nkv = c.n_kv_heads;
    a.hd = c.head_dim;
    a.rot = c.rot_dim();
    a.bs = spec_.block_size;
    a.eps = c.eps;
    a.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
    a.m = step_meta_.device();
    a.rows = padded_rows_;
    cuda::launch_qk_rope_kv(a, stream());
    if (decode_path_)
      cuda::launch_attn_decode(a, decode_splits(bucket_), attn_partials_.as<float>(), stream());
    else
      cuda::launch_attn_prefill(a, work_.n_attn_items, stream());
  }

  void gdn(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* bb, const float* aa,
           float* out) override {
    OpTimer op(*this, "gdn", "gdn");
    flush_all();
    if (L.gdn_index < 0 || L.gdn_index >= spec_.n_gdn_layers) throw std::runtime_error("CUDA backend: bad DeltaNet layer index");
    cuda::GdnArgs a;
    a.qkv = qkv;
    a.z = z;
    a.b = bb;
    a.a = aa;
    a.out = out;
    a.conv_out = conv_out_.as<float>();
    a.beta = beta_.as<float>();
    a.gdec = log_decay_.as<float>();
    a.state = state_.as<float>() + static_cast<size_t>(L.gdn_index) * layer_state_elems_;
    a.slot_stride = static_cast<int64_t>(slot_elems_);
    a.conv_w = L.conv;
    a.dt_bias = L.dt_bias;
    a.neg_exp_a = L.neg_exp_a;
    a.norm_w = L.gdn_norm;
    a.cd = c.conv_dim();
    a.kc = c.conv_kernel;
    a.nk = c.lin_k_heads;
    a.nv = c.lin_v_heads;
    a.tiled = c.v_heads_tiled;
    a.dk = c.lin_dk;
    a.dv = c.lin_dv;
    a.eps = c.eps;
    a.gdn_chunk_min = gdn_chunk_min_;
    a.m = step_meta_.device();
    a.rows = padded_rows_;
    a.nsegs = work_.n_segs;
    a.gdn_block_scratch = gdn_block_scratch_.as<float>();
    cuda::launch_gdn_conv(a, stream());
    cuda::launch_gdn_recurrent(a, stream());
    if (work_.n_long_segs > 0) cuda::launch_gdn_chunked(a, work_.n_gdn_blocks, work_.n_long_segs, stream());
  }

  void gather_rows(const float* x, int first, int count, float* y, int dim) override {
    flush_all();
    const int n = first == 0 ? padded_rows(count) : count;
    cuda::launch_gather_rows(x, step_meta_.device().logit_rows, first, n, y, dim, stream());
  }

  void logits_to_host(const float* src, float* dst, int64_t n) override {
    flush_all();
    const size_t cap = logits_host_.bytes() / sizeof(float);
    if (cap == 0) throw std::runtime_error("CUDA backend: logits_to_host before init_caches");
    for (int64_t o = 0; o < n; o += static_cast<int64_t>(cap)) {
      const size_t len = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(cap), n - o));
      LUMEN_CUDA_CHECK(cudaMemcpyAsync(logits_host_.as<float>(), src + o, len * sizeof(float), cudaMemcpyDeviceToHost, stream()));
      LUMEN_CUDA_CHECK(cudaStreamSynchronize(stream()));
      std::memcpy(dst + o, logits_host_.as<float>(), len * sizeof(float));
    }
  }

  // Greedy ids and top-k candidates reduced on the device (k_sample.cu); only rows that need
  // their logits (RowPick::kLogits) cross to the host whole.
  void pick_rows(const float* logits, int n, int vocab, const RowPick* picks, float* host_logits, int32_t* ids,
                 PickCandidate* cands) override {
    flush_all();
    if (n <= 0) return;
    if (n > logit_rows_cap_) throw std::runtime_error("CUDA backend: pick_rows of more rows than a logit group");
    auto* args = pick_host_.as<cuda::PickArgs>();
    auto* got_ids = reinterpret_cast<int32_t*>(args + logit_rows_cap_);
    auto* got_cands = reinterpret_cast<PickCandidate*>(got_ids + logit_rows_cap_);
    int n_cands = 0, n_picked = 0;
    for (int i = 0; i < n; ++i) {
      const RowPick& p = picks[i];
      if (p.mode == RowPick::kTopK && (p.k < 1 || p.k > kMaxPickK))
        throw std::runtime_error("CUDA backend: top-k pick of " + std::to_string(p.k) + " candidates");
      args[i] = cuda::PickArgs{p.mode == RowPick::kArgmax ? 1 : p.mode == RowPick::kTopK ? 2 : 0, p.k, p.temperature, n_cands};
      if (p.mode == RowPick::kTopK) n_cands += p.k;
      if (p.mode != RowPick::kLogits) ++n_picked;
    }
    auto* dev_args = pick_dev_.as<cuda::PickArgs>();
    auto* dev_ids = reinterpret_cast<int32_t*>(dev_args + logit_rows_cap_);
    auto* dev_cands = reinterpret_cast<PickCandidate*>(dev_ids + logit_rows_cap_);
    if (n_picked > 0) {
      LUMEN_CUDA_CHECK(cudaMemcpyAsync(dev_args, args, n * sizeof(cuda::PickArgs), cudaMemcpyHostToDevice, stream()));
      cuda::launch_pick(logits, n, vocab, dev_args, dev_ids, dev_cands, stream());
      LUMEN_CUDA_CHECK(cudaMemcpyAsync(got_ids, dev_ids, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream()));
      if (n_cands > 0)
        LUMEN_CUDA_CHECK(cudaMemcpyAsync(got_cands, dev_cands, n_cands * sizeof(PickCandidate), cudaMemcpyDeviceToHost, stream()));
      copies_.picked_rows += static_cast<uint64_t>(n_picked);
      copies_.bytes_to_host += n * sizeof(int32_t) + n_cands * sizeof(PickCandidate);
    }
    // Whole rows, a run of consecutive kLogits rows per copy (logits_to_host synchronises).
    const int64_t V = vocab;
    for (int i = 0; i < n;) {
      if (picks[i].mode != RowPick::kLogits) {
        ++i;
        continue;
      }
      int j = i;
      while (j < n && picks[j].mode == RowPick::kLogits) ++j;
      logits_to_host(logits + i * V, host_logits + i * V, (j - i) * V);
      copies_.logit_rows += static_cast<uint64_t>(j - i);
      copies_.bytes_to_host += static_cast<uint64_t>(j - i) * V * sizeof(float);
      i = j;
    }
    if (n_picked == 0) return;
    LUMEN_CUDA_CHECK(cudaStreamSynchronize(stream()));
    for (int i = 0; i < n; ++i)
      if (picks[i].mode == RowPick::kArgmax) ids[i] = got_ids[i];
    for (int i = 0; i < n; ++i)
      if (picks[i].mode == RowPick::kTopK) std::copy(got_cands + args[i].out, got_cands + args[i].out + picks[i].k, cands + picks[i].cand_offset);
  }

  CudaCopyStats copy_stats() const { return copies_; }

  float* scratch(size_t n_floats) override {
    scratch_.push_back(alloc_.alloc(std::max<size_t>(1, n_floats) * sizeof(float), "activations"));
    return scratch_.back().as<float>();
  }

  void end_step() override {
    flush_all();
    LUMEN_CUDA_CHECK(cudaStreamSynchronize(stream()));
    step_ = nullptr;
    graph_step_ = false;
    in_padded_body_ = false;
  }

  void run_body(const StepBatch& b, const std::function<void()>& body) override {
    if (!graph_step_) {
      graphs_.count_eager();
      body();
      flush_all();
      return;
    }
    struct PadScope {
      bool& f;
      explicit PadScope(bool& x) : f(x) { f = true; }
      ~PadScope() { f = false; }
    } pad(in_padded_body_);
    graphs_.replay(
        stream(), padded_rows_,
        [&] {
          body();
          flush_all();
        },
        [&] { deferred_.drop(); });
    (void)b;
  }

  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<OpStat> take_profile() override { return stats_.take(); }

 private:
  // Per-op wall time when profiling: the stream is drained around each op (graphs are off then).
  class OpTimer {
   public:
    OpTimer(CudaBackend& be, const char* name, const char* group) : be_(be), name_(name), group_(group) {
      if (!be_.profiling_) return;
      be_.flush_all();
      LUMEN_CUDA_CHECK(cudaStreamSynchronize(be_.stream()));
      t0_ = now_ns();
    }
    ~OpTimer() {
      if (!be_.profiling_ || t0_ == 0) return;
      (void)cudaStreamSynchronize(be_.stream());  // errors resurface at end_step
      be_.stats_.record(name_, group_, 1, static_cast<uint64_t>(now_ns() - t0_));
    }

   private:
    CudaBackend& be_;
    const char* name_;
    const char* group_;
    int64_t t0_ = 0;
  };

  cudaStream_t stream() const { return stream_->get(); }

  // Inside a graph body the model's row counts (the step's tokens) and element counts (a multiple
  // of them) stand for the bucket's padded rows, so one graph serves every batch of the bucket.
  int padded_rows(int rows) const { return in_padded_body_ && rows == step_tokens_ ? padded_rows_ : rows; }
  int64_t padded_count(int64_t n) const {
    return in_padded_body_ && step_tokens_ > 0 && n % step_tokens_ == 0 ? n / step_tokens_ * padded_rows_ : n;
  }

  WMat upload_mat(const HostMat& m) {
    if (!m.data || m.rows <= 0 || m.cols <= 0) return WMat{};
    if (m.dtype == DType::f16) throw std::runtime_error("CUDA backend: f16 matrices are not supported (load converts them)");
    if (is_quant(m.dtype) && !cuda::gpu_quant_type(m.dtype))  // check_weight_types names the tensor first
      throw std::runtime_error(std::string("CUDA backend: no GPU kernels for ") + dtype_info(m.dtype).name + " weights");
    auto it = uploaded_.find(m.data);
    const void* dptr;
    if (it != uploaded_.end()) {
      dptr = it->second;  // tied head: one device copy of the embedding table
    } else {
      weights_.push_back(alloc_.alloc(m.bytes(), "weights"));
      LUMEN_CUDA_CHECK(cudaMemcpy(weights_.back().get(), m.data, m.bytes(), cudaMemcpyHostToDevice));
      dptr = weights_.back().get();
      uploaded_[m.data] = dptr;
    }
    max_cols_ = std::max<int64_t>(max_cols_, m.cols);
    return WMat{dptr, m.dtype, m.rows, m.cols, nullptr};
  }

  // Refuses, before anything is uploaded, a model with a matrix of a block-quantized type the GPU
  // kernels do not implement, naming the first such tensor (GGUF name) and every type at fault.
  static void check_weight_types(const HostWeights& w) {
    std::string first, types;
    int bad = 0;
    auto check = [&](const HostMat& m, const std::string& name) {
      if (!m.data || !is_quant(m.dtype) || cuda::gpu_quant_type(m.dtype)) return;
      if (bad++ == 0) first = name + " is " + dtype_info(m.dtype).name;
      const std::string t = dtype_info(m.dtype).name;
      if (types.find(t) == std::string::npos) types += (types.empty() ? "" : ", ") + t;
    };
    check(w.embed(), "token_embd.weight");
    if (w.head().data != w.embed().data) check(w.head(), "output.weight");
    for (size_t i = 0; i < w.layers().size(); ++i) {
      const HostLayer& L = w.layers()[i];
      const std::string b = "blk." + std::to_string(i) + ".";
      const std::pair<const HostMat*, const char*> mats[] = {
          {&L.gate, "ffn_gate"}, {&L.up, "ffn_up"},      {&L.down, "ffn_down"},   {&L.q, "attn_q"},
          {&L.k, "attn_k"},      {&L.v, "attn_v"},       {&L.o, "attn_output"},   {&L.qkv, "attn_qkv"},
          {&L.z, "attn_gate"},   {&L.b, "ssm_beta"},     {&L.a, "ssm_alpha"},     {&L.out, "ssm_out"}};
      for (const auto& [m, n] : mats) check(*m, b + n + ".weight");
    }
    if (bad == 0) return;
    std::string have;
    for (const DTypeInfo& i : kDTypes)
      if (cuda::gpu_quant_type(i.type)) have += (have.empty() ? "" : ", ") + std::string(i.name);
    throw std::runtime_error("CUDA backend: tensor " + first +
                             (bad > 1 ? " (" + std::to_string(bad) + " tensors of " + types + ")" : "") +
                             "; the GPU kernels implement the block-quantized types " + have +
                             " only: run this file with --device cpu");
  }

  const float* upload_vec(const HostVec& v) {
    if (!v.data || v.n <= 0) return nullptr;
    auto it = uploaded_.find(v.data);
    if (it != uploaded_.end()) return static_cast<const float*>(it->second);
    weights_.push_back(alloc_.alloc(static_cast<size_t>(v.n) * sizeof(float), "weights"));
    LUMEN_CUDA_CHECK(cudaMemcpy(weights_.back().get(), v.data, static_cast<size_t>(v.n) * sizeof(float), cudaMemcpyHostToDevice));
    uploaded_[v.data] = weights_.back().get();
    return weights_.back().as<float>();
  }

  void flush_all() { deferred_.flush(stream()); }

  void check_slot(int slot) const {
    if (slot < 0 || slot >= spec_.n_state_slots) throw std::runtime_error("CUDA backend: state slot out of range");
  }
  void check_snap(int snap) const {
    if (snap < 0 || snap >= n_snapshots_) throw std::runtime_error("CUDA backend: snapshot out of range");
  }
  float* slot_ptr(int slot) { return state_.as<float>() + static_cast<size_t>(slot) * slot_elems_; }

  // Declared first: destroyed last, after every buffer it handed out.
  cuda::DeviceAllocator alloc_;
  int device_;
  int host_threads_;
  std::unique_ptr<ThreadPool> host_pool_;  // host_parallel's, made at its first use
  std::string name_;
  size_t total_mem_ = 0;
  std::unique_ptr<cuda::Stream> stream_;

  ModelConfig cfg_;
  bool have_cfg_ = false;
  std::vector<DeviceBuffer> weights_;
  std::unordered_map<const void*, const void*> uploaded_;
  int64_t max_cols_ = 0;
  DeviceBuffer inv_freq_;

  CacheSpec spec_;
  int max_tokens_ = 0;
  size_t kv_layer_elems_ = 0, layer_state_elems_ = 0, slot_elems_ = 0;
  DeviceBuffer k_cache_, v_cache_, state_, snapshots_;
  int n_snapshots_ = 0;
  int scratch_block_ = 0, scratch_slot_ = 0;

  cuda::StepMetadata step_meta_;
  PinnedBuffer logits_host_;
  int logit_rows_cap_ = 0;
  PinnedBuffer pick_host_;  // pick_rows' arguments and results, laid out as pick_dev_
  DeviceBuffer pick_dev_;
  CudaCopyStats copies_;

  // Work buffers sized for the largest step: DeltaNet conv output, beta and log decay, the chunked
  // DeltaNet's per-block scratch, the split decode attention's partials, x rounded to bf16 (and
  // its low part in the precise GEMM mode).
  DeviceBuffer conv_out_, beta_, log_decay_, gdn_block_scratch_, attn_partials_, x_bf16_, x_bf16_lo_;
  bool precise_gemm_ = false;  // LUMEN_CUDA_PRECISE_GEMM: split activations into bf16 hi + lo
  std::vector<DeviceBuffer> scratch_;

  // Step state.
  const StepBatch* step_ = nullptr;
  int step_tokens_ = 0;  // the step's real rows
  int padded_rows_ = 0;  // rows the launches cover: the graph bucket on a graph step, else step_tokens_
  int bucket_ = 1;       // next power of two of step_tokens_ (sizes the decode attention's splits)
  cuda::StepWork work_;
  bool decode_path_ = false, graph_step_ = false, in_padded_body_ = false;
  int gdn_chunk_min_ = 16;  // segments of at least this many tokens take the chunked DeltaNet

  cuda::DeferredLaunches deferred_;

  // Graphs, one per bucket (rows after padding).
  int graph_max_rows_ = 1;
  cuda::StepGraphs graphs_;

  bool profiling_ = false;
  OpProfile stats_;
};

const CudaBackend* as_cuda(const Backend& be) { return dynamic_cast<const CudaBackend*>(&be); }

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, int host_threads) {
  return std::make_unique<CudaBackend>(device, host_threads);
}

bool cuda_set_graphs(Backend& be, bool on) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  if (!c) return false;
  c->set_graphs(on);
  return true;
}

bool cuda_copy_stats(const Backend& be, CudaCopyStats* out) {
  const auto* c = as_cuda(be);
  if (!c || !out) return false;
  *out = c->copy_stats();
  return true;
}

bool cuda_mem_stats(const Backend& be, CudaMemStats* out) {
  const auto* c = as_cuda(be);
  if (!c || !out) return false;
  *out = c->mem_stats();
  return true;
}

}  // namespace lumen

#endif  // LUMEN_WITH_CUDA
