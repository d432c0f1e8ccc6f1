#pragma once
// The backend interface: the operations a forward step of Qwen3.5 needs, on memory the backend
// owns (host memory for cpu, device memory for cuda). The model code (model/qwen35.cpp) and the
// engine loop are written once above it. Shapes inside a step vary only through StepBatch, which
// begin_step() uploads; a backend that captures graphs keys them on the step's bucket.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "checkpoint/config.h"
#include "checkpoint/weights.h"
#include "core/top_k.h"

namespace lumen {

// A weight matrix [rows = out, cols = in] in backend memory; `aux` is backend-private (packing).
struct WMat {
  const void* ptr = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* aux = nullptr;
};

struct BLayer {
  bool is_full = false;
  int kv_index = -1;   // index among full-attention layers (KV pool)
  int gdn_index = -1;  // index among Gated DeltaNet layers (state pool)
  const float* in_norm = nullptr;
  const float* post_norm = nullptr;
  WMat gate, up, down;
  WMat q, k, v, o;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  WMat qkv, z, b, a, out;
  const float* conv = nullptr;
  const float* dt_bias = nullptr;
  const float* neg_exp_a = nullptr;
  const float* gdn_norm = nullptr;
};

struct BWeights {
  WMat embed, head;
  const float* final_norm = nullptr;
  std::vector<BLayer> layers;
};

// One sequence's share of a step: rows [start, start+len) of the step's tokens.
struct SeqSegment {
  int start = 0;
  int len = 0;
  int pos0 = 0;         // position of the segment's first token
  int state_slot = 0;   // recurrent-state slot
  int table_offset = 0; // into StepBatch::block_tables
  int n_blocks = 0;     // blocks covering positions [0, pos0 + len)
  // The first generated token's position (the prompt's length): tokens from here on are generated
  // ones, which a backend may compute in its decode form (the CPU attention does).
  int decode_from = 0;
};

struct StepBatch {
  int n_tokens = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<SeqSegment> segs;
  std::vector<int32_t> block_tables;  // concatenated per segment
  std::vector<int32_t> logit_rows;    // step rows whose logits are wanted, in output order
  bool decode_only = false;           // every segment has len 1
};

struct CacheSpec {
  int n_blocks = 0;
  int block_size = 16;
  int n_kv_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_state_slots = 0;
  int n_gdn_layers = 0;
  int conv_rows = 0;   // kernel - 1
  int conv_dim = 0;
  int ssm_elems = 0;   // nv * dk * dv per layer
  DType kv_dtype = DType::f32;  // the KV cache's elements: f32, or f16
};

// Counters of a backend that captures its decode steps as graphs (CUDA); all zero elsewhere.
struct GraphStats {
  bool enabled = false;     // graphs in use (the switch, and not disabled by profiling)
  uint64_t hits = 0;        // decode steps replayed from a captured graph
  uint64_t misses = 0;      // decode steps that had to capture their bucket first
  uint64_t eager_steps = 0; // steps run without a graph (prefill / mixed, or graphs off)
  double capture_ms = 0;    // total time spent capturing and instantiating
  int graphs = 0;           // graphs currently instantiated (one per batch-size bucket)
};

// What the engine needs from one logit row of a step. A device backend reduces the row where it
// lives and copies back only that: a token id (greedy), the k best candidates (top-k sampling,
// the draw itself stays on the host with the request's seeded stream), or the whole row (logits,
// logprobs, top-k = 0 sampling, stop tokens suppressed by min_tokens).
struct RowPick {
  enum Mode : uint8_t { kLogits, kArgmax, kTopK };
  Mode mode = kLogits;
  int k = 0;                // kTopK: 1..kMaxPickK candidates
  float temperature = 1.f;  // kTopK: a candidate's value is logit / temperature
  int cand_offset = 0;      // kTopK: where its candidates go in the step's candidate buffer
};
// Largest k a backend picks (a larger top-k takes the whole row).
constexpr int kMaxPickK = 1024;
// Candidates (core/top_k.h: PickCandidate) come sorted as top_candidates sorts them.

struct OpStat {
  std::string name;
  std::string group;
  uint64_t calls = 0;
  uint64_t ns = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;        // "cpu" | "cuda"
  virtual std::string device_desc() const = 0; // kernel path or GPU name
  virtual size_t device_memory_bytes() const { return 0; }
  // Segments of at least n tokens use the chunked Gated DeltaNet kernel, shorter ones the recurrence.
  virtual void set_gdn_chunk_min(int n) = 0;

  // Makes the weights usable by this backend (references host memory, or uploads).
  virtual void bind_weights(const HostWeights& w, BWeights& out) = 0;
  // Allocates the KV block pool and recurrent-state slots; returns bytes allocated.
  virtual size_t init_caches(const CacheSpec& spec, int max_step_tokens, int max_logit_rows) = 0;
  virtual void reset_state(int slot) = 0;
  // Recurrent-state snapshots (prefix cache): a pool of n snapshot buffers.
  virtual size_t init_snapshots(int n) = 0;
  virtual void save_state(int slot, int snapshot) = 0;
  virtual void load_state(int snapshot, int slot) = 0;

  // Step: upload metadata, then run ops on backend activations (owned by the backend).
  virtual void begin_step(const StepBatch& b) = 0;
  virtual void embed(const WMat& table, float* x) = 0;                                  // x[T,H]
  virtual void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps) = 0;
  virtual void matmul(const float* x, int rows, const WMat& w, float* y) = 0;            // y = x Wᵀ
  // Several matrices on the same input (q|k|v, the four DeltaNet projections, gate|up): ys[i] =
  // x ws[i]ᵀ. One call so a backend can convert x once and run them as one parallel region.
  virtual void matmul_group(const float* x, int rows, const WMat* const* ws, float* const* ys, int n) {
    for (int i = 0; i < n; ++i) matmul(x, rows, *ws[i], ys[i]);
  }
  virtual void add(float* y, const float* x, int64_t n) = 0;                             // y += x
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;    // silu(g)*u
  // Full attention for all segments: per-head q/k norm, RoPE, KV write, causal GQA, sigmoid gate.
  // qg [T, nh*2*hd] (query|gate interleaved per head), k/v [T, nkv*hd] -> out [T, nh*hd].
  virtual void attention(const ModelConfig& c, const BLayer& L, float* qg, float* k, const float* v,
                         float* out) = 0;
  // Gated DeltaNet for all segments: conv+SiLU, l2norm, decay, delta rule, gated norm.
  // qkv [T, conv_dim], z [T, value_dim], b/a [T, nv] -> out [T, value_dim].
  virtual void gdn(const ModelConfig& c, const BLayer& L, const float* qkv, const float* z, const float* b,
                   const float* a, float* out) = 0;
  // y[i] = x[logit_rows[first + i]] for i < count.
  virtual void gather_rows(const float* x, int first, int count, float* y, int dim) = 0;
  virtual void logits_to_host(const float* src, float* dst, int64_t n) = 0;
  // True when backend memory is host memory: the head then writes its logits straight into the
  // host buffer (at 8 rows a copy was 8 MB per step on one thread).
  virtual bool host_memory() const { return false; }
  // Greedy picks of host logit rows: out[i] = argmax(logits[rows[i] * vocab ...]), lowest index on
  // ties, -1 for a row holding a NaN or an infinity (core/argmax.h). One call per head group (pick_rows) so a backend can spread the rows over
  // its threads.
  virtual void argmax_rows(const float* logits, const int* rows, int n, int vocab, int32_t* out);
  // Rows [0, n) of a head group (`logits`: backend memory, [n, vocab]) reduced as picks[i] asks:
  // kLogits rows copied to host_logits + i * vocab, kArgmax ids to ids[i], kTopK candidates to
  // cands + picks[i].cand_offset, the first of id -1 when the row holds a NaN or an infinity. This default copies the group to the host when backend memory is
  // not host memory, then picks there (argmax_rows; the sampler's own top-k).
  virtual void pick_rows(const float* logits, int n, int vocab, const RowPick* picks, float* host_logits,
                         int32_t* ids, PickCandidate* cands);
  // Runs fn(i) once for each i in [0, n) on the host, in any order, possibly on several threads (the
  // CPU backend's pool; this default runs them in order on the calling thread); returns when all are
  // done, rethrowing the first exception one threw. For the step's host work on its logits rows
  // (whole-row draws, logprobs), independent from row to row.
  virtual void host_parallel(int n, const std::function<void(int)>& fn) {
    for (int i = 0; i < n; ++i) fn(i);
  }
  // Scratch activation memory (backend memory), valid for the backend's lifetime.
  virtual float* scratch(size_t n_floats) = 0;
  virtual void end_step() {}
  // Runs the device work of a step. A backend may capture `body` once per shape bucket and replay
  // it (CUDA graphs for decode steps); the CPU backend just calls it.
  virtual void run_body(const StepBatch& b, const std::function<void()>& body) { body(); }
  // Graph capture/replay counters since the backend was made (run_body); zero when it has none.
  virtual GraphStats graph_stats() const { return {}; }

  // Profiling (per-op wall time), off unless enabled.
  virtual void set_profiling(bool on) = 0;
  virtual std::vector<OpStat> take_profile() = 0;
};

std::unique_ptr<Backend> make_cpu_backend(int n_threads);
#if defined(LUMEN_WITH_CUDA)
// host_threads: the threads of host_parallel (the step's whole-row draws and logprobs), made at
// its first call with more than one row.
std::unique_ptr<Backend> make_cuda_backend(int device, int host_threads);
bool cuda_available(std::string* why);
#endif

}  // namespace lumen
