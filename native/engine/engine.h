#pragma once
// The serving engine: one worker thread owns the sequences, the scheduler (scheduler.h), the KV
// block pool (block_pool.h), the recurrent-state slots (state_slots.h) and the prefix cache
// (prefix_cache.h), and runs one batched forward step at a time: the scheduler's batch through
// the model, then sampling and the events. Callers submit requests from any thread and drain
// events; `notify` is called (from the worker) whenever events are waiting.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/op_profile.h"
#include "engine/block_pool.h"
#include "engine/counter_sink.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/state_slots.h"
#include "checkpoint/config.h"
#include "checkpoint/weights.h"

namespace lumen {

class Qwen35;

struct EngineConfig {
  // The serving options: set by the caller (the CLI owns their defaults, src/bench/options.ts).
  std::string device;
  int threads = 0;  // 0: every CPU this process may use (usable_cpus)
  int block_size = 0;
  bool paged = true;
  // The paged KV pool's size: kv_memory_bytes when > 0; else, when kv_memory_fraction is in (0, 1],
  // that share of the memory free once the weights are bound (the device's free memory on CUDA,
  // MemAvailable on the CPU) for the pool with the state slots and snapshots; else max_seq x
  // max_seqs tokens. A pool smaller than one max_seq sequence is a load error.
  int64_t kv_memory_bytes = 0;
  double kv_memory_fraction = 0;
  int max_seq = 0;
  int max_seqs = 0;
  int prefill_chunk = 0;
  int step_token_budget = 0;
  // The KV cache's elements: f32, or f16 (half the bytes; the CPU backend only).
  DType kv_dtype = DType::f32;
  // Internal knobs (not CLI flags); their defaults are these.
  bool prefix_cache = true;
  int snapshot_interval = 256;  // recurrent-state snapshot points (tokens), plus each prompt's last full block
  int max_snapshots = 0;        // 0: 2 x max_seqs
  int gdn_chunk_min = 16;
  WeightPolicy weights = WeightPolicy::keep;
  bool profile = false;
  bool cuda_graphs = true;
  // Tests only: the worker runs a step only against a permit from allow_steps(), so a test can put
  // a cancel or a submit exactly between two steps instead of racing the worker.
  bool manual_steps = false;
  // Synthetic in-memory weights when the tensor list is empty.
  DType synthetic_dtype = DType::bf16;
  uint64_t synthetic_seed = 1;
};

// The KV cache the options ask for cannot be had (a pool too small for one max_seq sequence, or
// more than the memory there is): a load error the caller can answer by naming the option that
// sized it. It reaches JS as an error whose code is "kv_memory".
struct KvMemoryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct EngineEvent {
  // kStep: once per step that generated tokens, with their count (progress without per-token events).
  enum Kind { kToken, kStep, kDone, kLoadProgress, kLoaded, kLoadError } kind = kToken;
  uint64_t id = 0;
  int32_t token = 0;
  int index = 0;
  int64_t t_ns = 0;
  // kToken of a request with logprobs >= 0
  bool has_logprobs = false;
  float logprob = 0.f;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  // kDone
  std::string finish;
  std::string error;
  // kLoadError: "kv_memory" for a KvMemoryError; kDone: "non_finite_logits" for a request failed
  // because its logits held NaN or infinite values; else empty
  std::string error_code;
  std::vector<int32_t> tokens;
  std::vector<int64_t> token_ns;
  int64_t enqueue_ns = 0;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;
  std::vector<double> prefill_chunk_ms;
  int prefill_chunks_to_first = -1;
  std::vector<int32_t> preempted_after;
  std::vector<int64_t> readmit_ns;
  std::vector<float> logits;
  int logit_rows = 0;
  // kStep
  int step_tokens = 0;
  // kLoadProgress
  int done = 0, total = 0;
};

struct EngineStats {
  int64_t active_bytes = 0;
  int64_t peak_active_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t park_waits = 0;
  uint64_t prefix_admitted_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t retires = 0;
  uint64_t evictions = 0;
  uint64_t preemptions = 0;
  int kv_blocks_used = 0;
  int kv_blocks_free = 0;
  int kv_blocks_total = 0;
  int state_slots_free = 0;
  int state_slots_total = 0;
  int prefix_cached_blocks = 0;  // blocks the prefix cache holds (shared with sequences or not)
  int snapshots_used = 0;        // recurrent-state snapshots holding a prefix
  int snapshots_total = 0;
  uint64_t steps = 0;
  int64_t weight_bytes = 0;
  int running = 0;
  int waiting = 0;
  // CUDA graphs (zero on other backends): decode steps replayed, steps that captured, capture time.
  uint64_t graph_hits = 0;
  uint64_t graph_misses = 0;
  double graph_capture_ms = 0;
  // The device allocator (CUDA; zero elsewhere), since the backend was made and not reset by
  // reset_counters(): bytes allocated now, their high-water mark, cudaMalloc calls. On CUDA
  // peak_active_bytes is that high-water mark and num_allocs the cudaMalloc calls since the last
  // reset_counters() (on the CPU both are the engine's own accounting).
  int64_t device_bytes = 0;
  int64_t device_peak_bytes = 0;
  uint64_t device_allocs = 0;
};

struct EngineInfo {
  std::string backend, desc, dtype;
  int threads = 0;
  int64_t weight_bytes = 0;
  int kv_blocks = 0;
  int block_size = 0;
  int snapshot_interval = 0;   // the prefix cache's snapshot spacing (tokens; 0: no prefix cache)
  int64_t kv_block_bytes = 0;  // one KV block over every full-attention layer
  std::string kv_dtype = "f32";  // the KV cache's element type (EngineConfig::kv_dtype)
  int64_t state_bytes = 0;     // one sequence's recurrent state (a slot or a snapshot)
  int64_t device_memory = 0;
  // The KV pool as sized at load: its bytes (kv_blocks x kv_block_bytes), what sized it
  // ("max_seq x max_seqs", "kv_memory_bytes", "fraction of free device memory", "fraction of
  // available host memory"), the fraction asked for and the free memory it was taken of (bytes;
  // -1 when no fraction was used), and the budget the fraction gave the pool (after the state
  // slots and snapshots; -1 likewise).
  int64_t kv_pool_bytes = 0;
  std::string kv_pool_source;
  double kv_memory_fraction = 0;
  int64_t kv_free_bytes = -1;
  int64_t kv_budget_bytes = -1;
  // A device backend keeps its own copy of the weights: the host copy is freed once uploaded. The
  // process's resident set (/proc/self/statm) just before and just after that (0: not measured).
  bool host_weights_released = false;
  int64_t rss_before_release = 0;
  int64_t rss_after_release = 0;
};

class Engine : private CounterSink {
 public:
  Engine(ModelConfig cfg, std::vector<TensorEntry> tensors, EngineConfig ec, std::function<void()> notify);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws std::invalid_argument for a request that can never run (too long for max_seq / the pool).
  // `defer` stages the request without waking the worker: requests submitted in one burst (one
  // JS turn) are released together by flush() and admitted in the same step, so "8 sessions
  // start at once" really starts 8 sequences in one step instead of 1 and then 7.
  uint64_t submit(RequestSpec r, bool defer = false);
  void flush();
  void cancel(uint64_t id);
  // With EngineConfig::manual_steps: lets the worker run n more steps from now (each admits what
  // has arrived, applies cancels, and runs one forward pass if there is work). Permits are topped
  // up to n, not added: a test that polls with allow_steps(1) while the worker is idle or busy
  // never banks a run of steps that would carry a request past the point the test holds it at.
  void allow_steps(int n);
  std::vector<EngineEvent> drain();
  // Ends the worker (a load in progress stops at its next layer; running requests are left as they
  // are) and waits for it; events it posted stay for drain(). The destructor does the same.
  void stop();
  EngineStats stats();
  void reset_counters();
  EngineInfo info();
  std::vector<OpStat> take_profile();

 private:
  void run();
  void load();
  void step_once();
  void admit_incoming();
  // `out`: the kDone event is appended there (to be pushed with others, push_all) instead of pushed.
  void finish(Sequence& s, const char* reason, const std::string& error = {}, const char* error_code = "",
              std::vector<EngineEvent>* out = nullptr);
  void push(EngineEvent e);
  // Several events in one lock and one notification: the caller drains them in one delivery.
  void push_all(std::vector<EngineEvent>&& evs);
  void sync_pool_stats();  // with mu_ held
  void size_kv_pool(int n_snapshots);  // load(): blocks_ and pool_tokens_, after the weights are bound
  void init_kv_caches(int n_snapshots);  // load(): size_kv_pool, then the backend's KV, state and snapshot caches
  void sync_device_stats();  // worker: the device allocator's counters into stats_

  // CounterSink: what the scheduler and the prefix cache report, published at once under mu_.
  void count_allocs(uint64_t n) override;
  void count_park() override;
  void count_preemption() override;
  void count_eviction() override;
  void count_prefix_hit(int tokens) override;
  void count_prefix_admit(int tokens) override;
  void memory_changed() override;

  ModelConfig cfg_;
  std::vector<TensorEntry> tensors_;
  EngineConfig ec_;
  std::function<void()> notify_;
  // Wakes of the caller's thread for a step's events: a step whose only event is its kStep count
  // (no streamed token) wakes it at most every kStepNotifyNs; a streamed token and a finished
  // request (push) wake it at once. Each wake ran the JS thread on one of the cores the step's
  // threads were using, ~0.1 ms of the worker's time a step (docs/performance.md, twenty-seventh
  // session); the counts wait in events_ for the next drain.
  static constexpr int64_t kStepNotifyNs = 50'000'000;
  int64_t last_step_notify_ns_ = 0;

  std::unique_ptr<HostWeights> weights_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Qwen35> model_;
  std::unique_ptr<BlockPool> blocks_;
  std::unique_ptr<StateSlots> slots_;
  std::unique_ptr<PrefixCache> prefix_;     // created with the backend (snapshots live there)
  std::unique_ptr<Scheduler> scheduler_;
  int blocks_per_seq_ = 0;
  size_t block_bytes_ = 0, state_bytes_ = 0, workspace_bytes_ = 0;
  std::vector<float> logits_buf_;
  std::vector<PickCandidate> pick_cands_;  // the step's top-k candidates (RowPick::cand_offset)

  std::thread thread_;
  std::mutex mu_;  // guards incoming_, staged_, cancels_, events_, stop_, stats_, step_permits_
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  std::deque<std::unique_ptr<Sequence>> staged_;  // submitted with defer, not yet visible to the worker
  std::vector<uint64_t> cancels_;
  std::vector<EngineEvent> events_;
  EngineStats stats_;
  EngineStats graph_base_;  // graph counters at the last reset_counters() (guarded by mu_)
  EngineInfo info_;
  uint64_t next_id_ = 1;
  int64_t pool_tokens_ = 0;  // set by load(); submit() waits for it
  std::string pool_request_;  // size_kv_pool(): what the pool asks for, for an out-of-memory error
  enum class LoadState { loading, ready, failed } load_state_ = LoadState::loading;  // guarded by mu_
  std::string load_error_;
  bool device_mem_ = false;  // peak_active_bytes / num_allocs come from the device allocator
  uint64_t device_allocs_base_ = 0;  // device allocations at the last reset_counters() (guarded by mu_)
  int64_t step_permits_ = 0;  // manual_steps only

  // Worker-only state.
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  OpProfile pipeline_;  // guarded by mu_
  OpProfile op_stats_;  // guarded by mu_
};

}  // namespace lumen
