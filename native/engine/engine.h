#pragma once
// The serving engine: one worker thread owns the sequences, the scheduler, the KV block pool,
// the recurrent-state slots and the prefix cache, and runs one batched forward step at a time
// (every running sequence's decode token plus prefill chunks, within a token budget).
// Callers submit requests from any thread and drain events; `notify` is called (from the worker)
// whenever events are waiting.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/op_profile.h"
#include "engine/block_pool.h"
#include "engine/sampler.h"
#include "model/config.h"
#include "model/weights.h"

namespace lumen {

class Qwen35;

struct EngineConfig {
  std::string device = "cpu";
  int threads = 0;
  int block_size = 16;
  bool paged = true;
  int64_t kv_memory_bytes = 0;  // 0: max_seq x max_seqs tokens
  int max_seq = 4096;
  int max_seqs = 8;
  int prefill_chunk = 512;
  int step_token_budget = 2048;
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

struct RequestSpec {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  SamplingParams sampling;
  std::vector<int32_t> stop;
  bool ignore_eos = false;
  bool logits_all = false;
  int min_tokens = 0;  // the stop tokens cannot be sampled before this many tokens
  int logprobs = -1;   // -1: none; n >= 0: each token's logprob and the n most likely alternatives
};

struct EngineEvent {
  enum Kind { kToken, kDone, kLoadProgress, kLoaded, kLoadError } kind = kToken;
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
  std::vector<int32_t> tokens;
  std::vector<int64_t> token_ns;
  int64_t enqueue_ns = 0;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;
  std::vector<double> prefill_chunk_ms;
  std::vector<float> logits;
  int logit_rows = 0;
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
};

struct EngineInfo {
  std::string backend, desc, dtype;
  int threads = 0;
  int64_t weight_bytes = 0;
  int kv_blocks = 0;
  int block_size = 0;
  int64_t kv_block_bytes = 0;  // one KV block over every full-attention layer
  int64_t state_bytes = 0;     // one sequence's recurrent state (a slot or a snapshot)
  int64_t device_memory = 0;
};

class Engine {
 public:
  Engine(ModelConfig cfg, std::vector<TensorEntry> tensors, EngineConfig ec, std::function<void()> notify);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws std::invalid_argument for a request that can never run (too long for max_seq / the pool).
  // `defer` stages the request without waking the worker: requests submitted in one burst (one
  // JS turn) are released together by flush() and admitted in the same step, so "8 sessions
  // start at once" really starts 8 sequences in one step instead of 1 and then 7.
  uint64_t submit(RequestSpec r, bool defer = false);
  void flush();
  void cancel(uint64_t id);
  // With EngineConfig::manual_steps: lets the worker run n more steps (each admits what has
  // arrived, applies cancels, and runs one forward pass if there is work).
  void allow_steps(int n);
  std::vector<EngineEvent> drain();
  EngineStats stats();
  void reset_counters();
  EngineInfo info();
  std::vector<OpStat> take_profile();

 private:
  struct Seq;
  void run();
  void load();
  void step_once();
  void admit_incoming();
  bool schedule(StepBatch& b, std::vector<Seq*>& order);
  bool ensure_blocks(Seq& s, int upto_tokens);
  bool evict_one_cached_block();
  void release_seq(Seq& s);
  void finish(Seq& s, const char* reason, const std::string& error = {});
  void preempt(Seq& s);
  bool try_prefix_hit(Seq& s);
  void after_chunk(Seq& s, int64_t step_ns);
  void push(EngineEvent e);
  void bump_active(int64_t delta);
  void sync_pool_stats();
  int snapshot_stop(const Seq& s) const;

  ModelConfig cfg_;
  std::vector<TensorEntry> tensors_;
  EngineConfig ec_;
  std::function<void()> notify_;

  std::unique_ptr<HostWeights> weights_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Qwen35> model_;
  std::unique_ptr<BlockPool> blocks_;
  std::vector<int> free_slots_;
  int blocks_per_seq_ = 0;
  size_t block_bytes_ = 0, state_bytes_ = 0, workspace_bytes_ = 0;
  std::vector<float> logits_buf_;

  // Prefix cache: full prompt blocks keyed by a chained hash; recurrent-state snapshots.
  struct CachedBlock {
    uint64_t hash = 0;
    uint64_t last_use = 0;
    std::vector<int32_t> tokens;
  };
  std::unordered_map<uint64_t, int> cache_by_hash_;
  std::unordered_map<int, CachedBlock> cache_by_block_;
  struct Snapshot {
    uint64_t hash = 0;
    int pos = 0;
    uint64_t last_use = 0;
    bool used = false;
  };
  std::vector<Snapshot> snaps_;
  std::unordered_map<uint64_t, int> snap_by_hash_;
  uint64_t use_clock_ = 0;

  std::thread thread_;
  std::mutex mu_;  // guards incoming_, staged_, cancels_, events_, stop_, stats_
  std::condition_variable cv_;
  bool stop_ = false;
  bool loaded_ = false;
  std::string load_error_;
  std::deque<std::unique_ptr<Seq>> incoming_;
  std::deque<std::unique_ptr<Seq>> staged_;  // submitted with defer, not yet visible to the worker
  std::vector<uint64_t> cancels_;
  std::vector<EngineEvent> events_;
  EngineStats stats_;
  EngineStats graph_base_;  // graph counters at the last reset_counters() (guarded by mu_)
  EngineInfo info_;
  uint64_t next_id_ = 1;
  int64_t step_permits_ = 0;  // manual_steps only
  int64_t pool_tokens_ = 0;

  // Worker-only state.
  std::deque<Seq*> waiting_;
  std::vector<Seq*> running_;
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;
  OpProfile pipeline_;  // guarded by mu_
  OpProfile op_stats_;  // guarded by mu_
};

}  // namespace lumen
