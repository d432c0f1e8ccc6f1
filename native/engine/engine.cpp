#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <thread>
#if defined(__linux__)
#include <unistd.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/clock.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "model/qwen35.h"
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace lumen {
namespace {

// Rows of the vocabulary head computed together (its activations are sized for this many).
constexpr int kLogitGroup = 32;

// A row's token drawn on the host (and its logprobs, for a streamed request that asks for them).
struct HostDraw {
  int32_t tok = -1;
  float logprob = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// Resident set of this process (bytes), from /proc/self/statm; 0 where it cannot be read.
int64_t process_rss_bytes() {
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(resident) * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) : 0;
#else
  return 0;
#endif
}

// MemAvailable of /proc/meminfo (bytes); -1 where it cannot be read.
int64_t host_available_bytes() {
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t out = -1;
  while (std::fgets(line, sizeof line, f)) {
    long long kb = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
      out = static_cast<int64_t>(kb) * 1024;
      break;
    }
  }
  std::fclose(f);
  return out;
#else
  return -1;
#endif
}

// Hands freed heap memory back to the system (glibc keeps freed chunks below its mmap threshold).
void release_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

Engine::Engine(ModelConfig cfg, std::vector<TensorEntry> tensors, EngineConfig ec, std::function<void()> notify)
    : cfg_(std::move(cfg)), tensors_(std::move(tensors)), ec_(ec), notify_(std::move(notify)) {
  if (ec_.threads <= 0) ec_.threads = usable_cpus();
  if (ec_.block_size <= 0) throw std::invalid_argument("block size must be positive");
  if (ec_.max_seqs <= 0) throw std::invalid_argument("max sequences must be positive");
  // Bounds that keep the slot and snapshot counts (max_seqs + 1 + 2 x max_seqs at most) in an int.
  constexpr int kMaxSeqsLimit = 1 << 20;
  if (ec_.max_seqs > kMaxSeqsLimit)
    throw std::invalid_argument("max sequences (" + std::to_string(ec_.max_seqs) + ") is more than the engine supports (" +
                                std::to_string(kMaxSeqsLimit) + ")");
  if (ec_.max_snapshots > 2 * kMaxSeqsLimit)
    throw std::invalid_argument("max snapshots (" + std::to_string(ec_.max_snapshots) + ") is more than the engine supports (" +
                                std::to_string(2 * kMaxSeqsLimit) + ")");
  if (ec_.max_seq <= 0) throw std::invalid_argument("max_seq must be positive");
  if (ec_.prefill_chunk <= 0) throw std::invalid_argument("prefill chunk must be positive");
  if (ec_.step_token_budget < ec_.max_seqs)
    throw std::invalid_argument("step token budget (" + std::to_string(ec_.step_token_budget) +
                                ") must be at least the number of sequences (" + std::to_string(ec_.max_seqs) + ")");
  if (ec_.snapshot_interval <= 0) throw std::invalid_argument("snapshot interval must be positive");
  if (ec_.max_snapshots < 0) throw std::invalid_argument("max snapshots must be >= 0 (0: 2 x max sequences)");
  if (ec_.gdn_chunk_min <= 0) throw std::invalid_argument("gdn chunk minimum must be positive");
  if (ec_.snapshot_interval % ec_.block_size != 0) {
    // Rounded up to a whole number of blocks, in 64 bits: near INT32_MAX the int overflowed, the
    // interval went negative and the worker spun for ever on prefills of no tokens.
    const int64_t rounded = (static_cast<int64_t>(ec_.snapshot_interval) / ec_.block_size + 1) * ec_.block_size;
    if (rounded > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument("snapshot interval " + std::to_string(ec_.snapshot_interval) + " rounded up to a multiple of the block size (" +
                                  std::to_string(ec_.block_size) + ") is " + std::to_string(rounded) + ", past the largest supported (" +
                                  std::to_string(std::numeric_limits<int32_t>::max()) + ")");
    ec_.snapshot_interval = static_cast<int>(rounded);
  }
  if (!ec_.paged) ec_.prefix_cache = false;
  if (ec_.kv_dtype != DType::f32 && ec_.kv_dtype != DType::f16)
    throw std::invalid_argument(std::string("KV cache dtype ") + dtype_name(ec_.kv_dtype) + " is not supported (f32 or f16)");
  block_bytes_ = static_cast<size_t>(ec_.block_size) * cfg_.n_kv_heads * cfg_.head_dim * 2 * dtype_size(ec_.kv_dtype) *
                 cfg_.n_full_layers();
  state_bytes_ = cfg_.state_bytes();
  if (ec_.kv_memory_bytes < 0) throw std::invalid_argument("KV memory bytes must be >= 0");
  if (!(ec_.kv_memory_fraction >= 0 && ec_.kv_memory_fraction <= 1))
    throw std::invalid_argument("KV memory fraction must be in (0, 1] (0: none)");
  blocks_per_seq_ = (ec_.max_seq + ec_.block_size - 1) / ec_.block_size;
  // The block pool is sized in load(), once the weights are bound (a fraction of the free memory).
  slots_ = std::make_unique<StateSlots>(ec_.max_seqs);
  device_mem_ = ec_.device == "cuda";
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() { stop(); }

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::push(EngineEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(e));
  }
  if (notify_) notify_();
}

void Engine::push_all(std::vector<EngineEvent>&& evs) {
  if (evs.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& e : evs) events_.push_back(std::move(e));
  }
  if (notify_) notify_();
}

std::vector<EngineEvent> Engine::drain() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<EngineEvent> out;
  out.swap(events_);
  return out;
}

void Engine::load() {
  std::unique_ptr<HostWeights> w;
  auto progress = [this](int done, int total) {
    {
      // close() waits for this thread: a load it interrupts stops at the next layer.
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) throw std::runtime_error("the engine was closed while it loaded");
    }
    EngineEvent e;
    e.kind = EngineEvent::kLoadProgress;
    e.done = done;
    e.total = total;
    push(std::move(e));
  };
  if (tensors_.empty()) {
    w = HostWeights::synthetic(cfg_, ec_.synthetic_dtype, ec_.synthetic_seed, ec_.weights == WeightPolicy::f32);
    progress(cfg_.n_layers, cfg_.n_layers);
  } else {
    w = std::make_unique<HostWeights>(cfg_, tensors_, ec_.weights, progress);
  }
  tensors_.clear();
  if (ec_.device == "cpu") {
    backend_ = make_cpu_backend(ec_.threads);
  } else if (ec_.device == "cuda") {
#if defined(LUMEN_WITH_CUDA)
    std::string why;
    if (!cuda_available(&why)) throw std::runtime_error("--device cuda: " + why);
    backend_ = make_cuda_backend(0, ec_.threads);
    cuda_set_graphs(*backend_, ec_.cuda_graphs);
#else
    throw std::runtime_error("--device cuda: this build has no CUDA backend (nvcc was not found when it was built)");
#endif
  } else {
    throw std::runtime_error("unknown device '" + ec_.device + "'");
  }
  backend_->set_gdn_chunk_min(ec_.gdn_chunk_min);
  backend_->set_profiling(ec_.profile);
  model_ = std::make_unique<Qwen35>(*backend_, *w, ec_.step_token_budget, kLogitGroup);
  const int64_t weight_bytes = static_cast<int64_t>(w->total_bytes());
  const std::string weight_dtype = w->dtype_label();
  // A device backend holds its own copy of the weights now (the model's BWeights point into it;
  // nothing reads the host copy after bind_weights): the host copy goes before the caches are
  // sized, so a fraction of host memory would see it gone. The CPU backend keeps reading it.
  bool released = false;
  int64_t rss_before = 0, rss_after = 0;
  if (!backend_->host_memory()) {
    release_free_heap();  // so that the drop measured below is the weights', not older free heap
    rss_before = process_rss_bytes();
    w.reset();
    release_free_heap();
    rss_after = process_rss_bytes();
    released = true;
  }
  int n_snapshots = 0;
  if (ec_.prefix_cache) n_snapshots = ec_.max_snapshots > 0 ? ec_.max_snapshots : 2 * ec_.max_seqs;
  try {
    init_kv_caches(n_snapshots);
  } catch (const std::bad_alloc&) {
    throw KvMemoryError("out of host memory allocating the caches (the KV pool: " + pool_request_ +
                             "); give less KV memory (a smaller kv_memory_bytes or max_seq x max_seqs)");
  }
  CounterSink& counters = *this;
  prefix_ = std::make_unique<PrefixCache>(*blocks_, *backend_, counters, ec_.block_size, ec_.snapshot_interval, n_snapshots);
  SchedulerConfig sc;
  sc.block_size = ec_.block_size;
  sc.paged = ec_.paged;
  sc.blocks_per_seq = blocks_per_seq_;
  sc.prefill_chunk = ec_.prefill_chunk;
  sc.step_token_budget = ec_.step_token_budget;
  scheduler_ = std::make_unique<Scheduler>(sc, *blocks_, *slots_, *prefix_, *backend_, counters);
  logits_buf_.resize(static_cast<size_t>(kLogitGroup) * cfg_.vocab);  // step_once grows it for more rows, then shrinks it back
  workspace_bytes_ = model_->workspace_bytes();
  std::lock_guard<std::mutex> lk(mu_);
  info_.backend = backend_->name();
  info_.desc = backend_->device_desc();
  info_.dtype = weight_dtype;
  info_.threads = ec_.device == "cpu" ? ec_.threads : 0;
  info_.weight_bytes = weight_bytes;
  info_.kv_blocks = blocks_->total();
  info_.kv_pool_bytes = static_cast<int64_t>(blocks_->total()) * static_cast<int64_t>(block_bytes_);
  info_.host_weights_released = released;
  info_.rss_before_release = rss_before;
  info_.rss_after_release = rss_after;
  info_.block_size = ec_.block_size;
  info_.snapshot_interval = ec_.prefix_cache ? ec_.snapshot_interval : 0;
  info_.device_memory = static_cast<int64_t>(backend_->device_memory_bytes());
  stats_.weight_bytes = info_.weight_bytes;
  stats_.kv_blocks_total = blocks_->total();
  stats_.state_slots_total = ec_.max_seqs;
  stats_.snapshots_total = prefix_->snapshots_total();
  info_.kv_block_bytes = static_cast<int64_t>(block_bytes_);
  info_.kv_dtype = dtype_name(ec_.kv_dtype);
  info_.state_bytes = static_cast<int64_t>(state_bytes_);
  sync_pool_stats();
  if (w) weights_ = std::move(w);  // the CPU backend reads the host copy
}

void Engine::init_kv_caches(int n_snapshots) {
  size_kv_pool(n_snapshots);
  CacheSpec spec;
  spec.n_blocks = blocks_->total();
  spec.block_size = ec_.block_size;
  spec.n_kv_layers = cfg_.n_full_layers();
  spec.n_kv_heads = cfg_.n_kv_heads;
  spec.head_dim = cfg_.head_dim;
  spec.n_state_slots = ec_.max_seqs;
  spec.n_gdn_layers = cfg_.n_linear_layers();
  spec.conv_rows = cfg_.conv_kernel - 1;
  spec.conv_dim = cfg_.conv_dim();
  spec.ssm_elems = cfg_.lin_v_heads * cfg_.lin_dk * cfg_.lin_dv;
  spec.kv_dtype = ec_.kv_dtype;
  backend_->init_caches(spec, ec_.step_token_budget, kLogitGroup);
  if (ec_.prefix_cache) backend_->init_snapshots(n_snapshots);
}

void Engine::size_kv_pool(int n_snapshots) {
  // Worker, in load(): after the weights are bound and the step activations allocated, before the
  // caches are. Fills blocks_, pool_tokens_ and the pool's part of info_ (published under mu_).
  int64_t n_blocks = static_cast<int64_t>(blocks_per_seq_) * ec_.max_seqs;
  // The recurrent states beside the pool: a slot per sequence, a scratch slot and the snapshots.
  const int state_slots = ec_.max_seqs + 1 + n_snapshots;
  const int64_t states = static_cast<int64_t>(state_bytes_) * state_slots;
  std::string source = "max_seq x max_seqs";
  std::string how;  // for the error below
  double fraction = 0;
  int64_t free_bytes = -1, budget = -1;
  if (ec_.paged && block_bytes_ > 0 && ec_.kv_memory_bytes > 0) {
    budget = ec_.kv_memory_bytes;
    n_blocks = budget / static_cast<int64_t>(block_bytes_);
    source = "kv_memory_bytes";
    how = "a KV memory of " + std::to_string(budget) + " bytes";
  } else if (ec_.paged && block_bytes_ > 0 && ec_.kv_memory_fraction > 0) {
    fraction = ec_.kv_memory_fraction;
    if (backend_->host_memory()) {
      free_bytes = host_available_bytes();
      if (free_bytes < 0) throw std::runtime_error("KV memory as a fraction: cannot read MemAvailable from /proc/meminfo; give a size in bytes");
      source = "fraction of available host memory";
    } else {
#if defined(LUMEN_WITH_CUDA)
      size_t fr = 0, total = 0;
      if (!cuda_mem_info(&fr, &total)) throw std::runtime_error("KV memory as a fraction: cannot query the device's free memory; give a size in bytes");
      free_bytes = static_cast<int64_t>(fr);
#endif
      source = "fraction of free device memory";
    }
    // The fraction covers the pool, the state slots (+1 scratch) and the snapshots; the rest of the
    // free memory is left to the backend's work buffers and the runtime.
    budget = std::max<int64_t>(0, static_cast<int64_t>(fraction * static_cast<double>(free_bytes)) - states);
    n_blocks = budget / static_cast<int64_t>(block_bytes_);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%g of the %.1f MiB %s (%.1f MiB for the pool after %.1f MiB of states)", fraction,
                  free_bytes / 1048576.0, backend_->host_memory() ? "of available host memory" : "free on the device",
                  budget / 1048576.0, states / 1048576.0);
    how = buf;
  }
  if (ec_.paged && block_bytes_ > 0 && n_blocks < blocks_per_seq_)
    throw KvMemoryError("KV pool too small: " + how + " holds " + std::to_string(n_blocks) + " blocks of " +
                             std::to_string(ec_.block_size) + " tokens (" + std::to_string(block_bytes_) +
                             " bytes each), one max_seq " + std::to_string(ec_.max_seq) + " sequence needs " +
                             std::to_string(blocks_per_seq_) + " (" +
                             std::to_string(static_cast<int64_t>(blocks_per_seq_) * static_cast<int64_t>(block_bytes_)) +
                             " bytes): give more KV memory or a smaller max_seq");
  n_blocks = std::min<int64_t>(n_blocks, std::numeric_limits<int32_t>::max() / 2);
  // On the host, a pool larger than the memory left would be granted (overcommit) and then killed by
  // the kernel as its pages are touched: refuse it here, with the sizes.
  if (backend_->host_memory() && fraction == 0) {
    const int64_t avail = host_available_bytes();
    const double want = static_cast<double>(n_blocks) * static_cast<double>(block_bytes_) + static_cast<double>(states);
    if (avail > 0 && want > static_cast<double>(avail)) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "the KV cache (%.1f MiB: %lld blocks of %zu bytes, sized by %s, and the recurrent states) "
                    "exceeds the %.1f MiB of available host memory; give less KV memory",
                    want / 1048576.0, static_cast<long long>(n_blocks), block_bytes_, source.c_str(), avail / 1048576.0);
      throw KvMemoryError(buf);
    }
  }
  {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%lld blocks of %zu bytes (%.1f GiB, sized by %s) and %d state slots of %.1f MiB",
                  static_cast<long long>(n_blocks), block_bytes_,
                  static_cast<double>(n_blocks) * static_cast<double>(block_bytes_) / 1073741824.0, source.c_str(),
                  state_slots, static_cast<double>(state_bytes_) / 1048576.0);
    pool_request_ = buf;
  }
  blocks_ = std::make_unique<BlockPool>(static_cast<int>(n_blocks));
  std::lock_guard<std::mutex> lk(mu_);
  pool_tokens_ = n_blocks * ec_.block_size;
  info_.kv_pool_source = source;
  info_.kv_memory_fraction = fraction;
  info_.kv_free_bytes = free_bytes;
  info_.kv_budget_bytes = fraction > 0 ? budget : -1;
}

void Engine::sync_device_stats() {
  // Worker only (the allocator is used by the worker alone): after load and after every step.
#if defined(LUMEN_WITH_CUDA)
  CudaMemStats m;
  if (!backend_ || !cuda_mem_stats(*backend_, &m)) return;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.device_bytes = m.current_bytes;
  stats_.device_peak_bytes = m.peak_bytes;
  stats_.device_allocs = m.num_allocs;
  stats_.peak_active_bytes = m.peak_bytes;
  stats_.num_allocs = m.num_allocs - std::min(m.num_allocs, device_allocs_base_);
#endif
}

uint64_t Engine::submit(RequestSpec r, bool defer) {
  // Each message names the request field (the addon's names: request.maxTokens, ...).
  if (r.prompt.empty()) throw std::invalid_argument("request.prompt is empty");
  const auto check_ids = [&](const std::vector<int32_t>& ids, const char* field) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= cfg_.vocab)
        throw std::invalid_argument(std::string(field) + "[" + std::to_string(i) + "]: token id " + std::to_string(ids[i]) +
                                    " is outside the vocabulary [0, " + std::to_string(cfg_.vocab) + ")");
  };
  check_ids(r.prompt, "request.prompt");
  check_ids(r.stop, "request.stopTokens");
  // A set, kept sorted: the per-token checks (is this a stop token; min_tokens' ban while sampling a
  // whole row) are binary searches, so a long list costs its request a log factor, not the batch a
  // scan of the list per vocabulary entry.
  std::sort(r.stop.begin(), r.stop.end());
  r.stop.erase(std::unique(r.stop.begin(), r.stop.end()), r.stop.end());
  if (r.max_tokens < 0) throw std::invalid_argument("request.maxTokens must be >= 0");
  if (r.min_tokens < 0) throw std::invalid_argument("request.minTokens must be >= 0");
  if (r.logprobs > kMaxTopLogprobs)
    throw std::invalid_argument("request.logprobs: at most " + std::to_string(kMaxTopLogprobs) + " top logprobs per token");
  const SamplingParams& sp = r.sampling;
  if (!(std::isfinite(sp.temperature) && sp.temperature >= 0.f))
    throw std::invalid_argument("request.temperature must be a finite number >= 0");
  if (!(sp.top_p >= 0.f && sp.top_p <= 1.f)) throw std::invalid_argument("request.topP must be in [0, 1] (0: the most likely token)");
  if (sp.top_k < 0) throw std::invalid_argument("request.topK must be >= 0 (0: all)");
  const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;  // positions, KV tokens
  // `logits for every position need N MiB (P positions x vocabulary V x 4 bytes)`, for the refusals below.
  const auto logits_need = [&] {
    const int64_t mib = static_cast<int64_t>(static_cast<double>(need) * cfg_.vocab * sizeof(float) / (1 << 20));
    return "logits for every position need " + std::to_string(mib) + " MiB (" + std::to_string(need) + " positions x vocabulary " +
           std::to_string(cfg_.vocab) + " x 4 bytes)";
  };
  if (r.logits_all) {
    // Every position's row comes back in one buffer: bounded, so one request cannot take the
    // process's memory (and every other request with it).
    const double bytes = static_cast<double>(need) * cfg_.vocab * sizeof(float);
    if (bytes > static_cast<double>(kMaxLogitsAllBytes))
      throw std::invalid_argument(logits_need() + ", more than the " + std::to_string(kMaxLogitsAllBytes >> 20) + " MiB a request may hold");
  }
  if (need > ec_.max_seq)
    throw std::invalid_argument("request needs " + std::to_string(need) + " tokens (prompt " +
                                std::to_string(r.prompt.size()) + " + output " + std::to_string(r.max_tokens) +
                                "), more than max_seq " + std::to_string(ec_.max_seq));
  int64_t pool_tokens = 0;
  {
    // The pool is sized by load(), after the weights are bound: a request submitted earlier waits.
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return load_state_ != LoadState::loading || stop_; });
    if (load_state_ != LoadState::ready)
      throw std::runtime_error(load_error_.empty() ? "the engine is closed" : "the engine did not load: " + load_error_);
    pool_tokens = pool_tokens_;
  }
  if (ec_.paged && need > pool_tokens)
    throw std::invalid_argument("out of KV memory: request needs " + std::to_string(need) +
                                " tokens of KV cache, the pool holds " + std::to_string(pool_tokens));
  auto s = std::make_unique<Sequence>();
  if (r.logits_all) {
    // Every row it can have, held now: a request whose rows do not fit is refused here, alone, and
    // the worker's appends never reallocate (a failed growth there used to fail every request).
    try {
      s->logits.reserve(static_cast<size_t>(need) * static_cast<size_t>(cfg_.vocab));
    } catch (const std::bad_alloc&) {
      throw std::invalid_argument(logits_need() + ", more memory than there is now");
    }
  }
  s->req = std::move(r);
  s->tokens = s->req.prompt;
  s->prompt_len = static_cast<int>(s->tokens.size());
  s->sampler = std::make_unique<Sampler>(s->req.sampling);
  s->enqueue_ns = now_ns();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    id = s->id = next_id_++;
    (defer ? staged_ : incoming_).push_back(std::move(s));
  }
  if (!defer) cv_.notify_all();
  return id;
}

void Engine::flush() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (staged_.empty()) return;
    for (auto& s : staged_) incoming_.push_back(std::move(s));
    staged_.clear();
  }
  cv_.notify_all();
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    // A staged request must reach the worker before its cancel does, or the cancel finds nothing.
    for (auto& s : staged_) incoming_.push_back(std::move(s));
    staged_.clear();
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

EngineStats Engine::stats() {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Engine::reset_counters() {
  std::lock_guard<std::mutex> lk(mu_);
  const EngineStats cur = stats_;
  graph_base_.graph_hits += cur.graph_hits;
  graph_base_.graph_misses += cur.graph_misses;
  graph_base_.graph_capture_ms += cur.graph_capture_ms;
  stats_ = EngineStats{};
  stats_.active_bytes = cur.active_bytes;
  stats_.peak_active_bytes = cur.active_bytes;
  stats_.kv_blocks_used = cur.kv_blocks_used;
  stats_.kv_blocks_free = cur.kv_blocks_free;
  stats_.kv_blocks_total = cur.kv_blocks_total;
  stats_.state_slots_free = cur.state_slots_free;
  stats_.state_slots_total = cur.state_slots_total;
  stats_.prefix_cached_blocks = cur.prefix_cached_blocks;
  stats_.snapshots_used = cur.snapshots_used;
  stats_.snapshots_total = cur.snapshots_total;
  stats_.weight_bytes = cur.weight_bytes;
  stats_.running = cur.running;
  stats_.waiting = cur.waiting;
  stats_.device_bytes = cur.device_bytes;
  stats_.device_peak_bytes = cur.device_peak_bytes;
  stats_.device_allocs = cur.device_allocs;
  if (device_mem_) {
    // The allocator's high-water mark cannot be reset: it stays the mark since load. Its
    // allocation count restarts here, like the engine's own.
    stats_.peak_active_bytes = cur.device_peak_bytes;
    device_allocs_base_ = cur.device_allocs;
  }
}

EngineInfo Engine::info() {
  std::lock_guard<std::mutex> lk(mu_);
  return info_;
}

std::vector<OpStat> Engine::take_profile() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<OpStat> r = op_stats_.take();
  for (auto& p : pipeline_.take()) r.push_back(std::move(p));
  return r;
}

void Engine::sync_pool_stats() {
  // The published gauges, read from the pools that own them. Called with mu_ held, after any
  // change to the block pool, the state slots or the prefix cache and before the event that
  // reports it is pushed: a caller that has seen a request finish reads counters that include it.
  stats_.kv_blocks_used = blocks_->used();
  stats_.kv_blocks_free = blocks_->free_count();
  stats_.state_slots_free = slots_->free_count();
  stats_.prefix_cached_blocks = prefix_ ? prefix_->cached_blocks() : 0;
  stats_.snapshots_used = prefix_ ? prefix_->snapshots_used() : 0;
  // What the running requests hold: the workspace, their KV blocks (shared ones with the cache
  // included) and their state slots. Blocks only the prefix cache holds, and its snapshots, are
  // reclaimable and left out (prefix_cached_blocks and snapshots_used count them), so a row's
  // figure does not depend on the prompts of the rows before it.
  stats_.active_bytes = static_cast<int64_t>(workspace_bytes_) +
                        static_cast<int64_t>(block_bytes_) * (blocks_->used() - blocks_->cache_only()) +
                        static_cast<int64_t>(state_bytes_) * slots_->used();
  // On CUDA the peak and the allocation count are the device allocator's (sync_device_stats).
  if (!device_mem_) stats_.peak_active_bytes = std::max(stats_.peak_active_bytes, stats_.active_bytes);
}

void Engine::count_allocs(uint64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!device_mem_) stats_.num_allocs += n;
}

void Engine::count_park() {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.park_waits++;
}

void Engine::count_preemption() {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.preemptions++;
}

void Engine::count_eviction() {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.evictions++;
}

void Engine::count_prefix_hit(int tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.prefix_hit_tokens += static_cast<uint64_t>(tokens);
}

void Engine::count_prefix_admit(int tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.prefix_admitted_tokens += static_cast<uint64_t>(tokens);
}

void Engine::memory_changed() {
  std::lock_guard<std::mutex> lk(mu_);
  sync_pool_stats();
}

void Engine::allow_steps(int n) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    step_permits_ = std::max<int64_t>(step_permits_, n);  // topped up, never banked beyond n
  }
  cv_.notify_all();
}

void Engine::run() {
  set_flush_denormals();  // this thread is thread 0 of the backend's pool
  try {
    load();
    sync_device_stats();
  } catch (const std::exception& ex) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      load_state_ = LoadState::failed;
      load_error_ = ex.what();
    }
    cv_.notify_all();
    EngineEvent e;
    e.kind = EngineEvent::kLoadError;
    e.error = ex.what();
    if (dynamic_cast<const KvMemoryError*>(&ex)) e.error_code = "kv_memory";
    push(std::move(e));
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    load_state_ = LoadState::ready;
  }
  cv_.notify_all();
  push(EngineEvent{EngineEvent::kLoaded});
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stop_ || ((!ec_.manual_steps || step_permits_ > 0) &&
                         (!incoming_.empty() || !cancels_.empty() || scheduler_->has_work()));
      });
      if (stop_) return;
      if (ec_.manual_steps) --step_permits_;
    }
    try {
      step_once();
    } catch (const std::exception& ex) {
      // An engine error fails every active request with the reason; the engine stays usable.
      std::vector<Sequence*> all(scheduler_->running().begin(), scheduler_->running().end());
      all.insert(all.end(), scheduler_->waiting().begin(), scheduler_->waiting().end());
      for (Sequence* s : all) finish(*s, "error", ex.what());
    }
    sync_device_stats();
  }
}

void Engine::admit_incoming() {
  std::deque<std::unique_ptr<Sequence>> inc;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lk(mu_);
    inc.swap(incoming_);
    cancels.swap(cancels_);
  }
  for (auto& s : inc) {
    Sequence* p = s.get();
    seqs_[p->id] = std::move(s);
    scheduler_->add(p);
  }
  for (uint64_t id : cancels) {
    auto it = seqs_.find(id);
    if (it != seqs_.end() && !it->second->done) finish(*it->second, "cancelled");
  }
}

void Engine::finish(Sequence& s, const char* reason, const std::string& error, const char* error_code,
                    std::vector<EngineEvent>* out) {
  if (s.done) return;
  s.done = true;
  scheduler_->remove(s);
  EngineEvent e;
  e.kind = EngineEvent::kDone;
  e.id = s.id;
  e.finish = reason;
  e.error = error;
  e.error_code = error_code;
  e.tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
  e.token_ns = std::move(s.token_ns);
  e.enqueue_ns = s.enqueue_ns;
  e.prompt_tokens = s.prompt_len;
  e.cached_prompt_tokens = s.cached_prompt_tokens;
  e.prefill_chunk_ms = std::move(s.prefill_chunk_ms);
  e.prefill_chunks_to_first = s.prefill_chunks_to_first;
  e.preempted_after = std::move(s.preempted_after);
  e.readmit_ns = std::move(s.readmit_ns);
  e.logits = std::move(s.logits);
  e.logit_rows = s.logit_rows;
  e.t_ns = now_ns();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.retires++;
  }
  const uint64_t id = s.id;
  if (out != nullptr) out->push_back(std::move(e));
  else push(std::move(e));
  seqs_.erase(id);
}

void Engine::step_once() {
  const int64_t t_sched = now_ns();
  admit_incoming();
  StepBatch b;
  std::vector<Sequence*> order;
  if (!scheduler_->schedule(b, order)) return;
  const int64_t t_fwd = now_ns();
  const int n_rows = static_cast<int>(b.logit_rows.size());
  // Back to its load-time size once no request for every position's logits is left (a logits-"all"
  // prompt of 2048 tokens took 2 GB, which stayed for the engine's life); not between such
  // requests, which would each grow it again.
  const size_t group_floats = static_cast<size_t>(kLogitGroup) * cfg_.vocab;
  if (n_rows <= kLogitGroup && logits_buf_.size() > group_floats && !scheduler_->any_logits_all())
    std::vector<float>(group_floats).swap(logits_buf_);
  if (logits_buf_.size() < static_cast<size_t>(n_rows) * cfg_.vocab) {
    try {
      logits_buf_.resize(static_cast<size_t>(n_rows) * cfg_.vocab);
    } catch (const std::bad_alloc&) {
      // The rows past one a sequence are the logits-"all" segments': fail those requests alone and
      // skip the step (nothing was computed; the others are scheduled again next step).
      const std::string why = "out of memory for this step's " + std::to_string(n_rows) + " logits rows (" +
                              std::to_string((static_cast<int64_t>(n_rows) * cfg_.vocab * 4) >> 20) + " MiB)";
      int failed_all = 0;
      for (Sequence* s : order)
        if (s->req.logits_all) {
          finish(*s, "error", why);
          ++failed_all;
        }
      if (failed_all == 0) throw;
      return;
    }
  }
  // Logit row of each segment's last position (-1 when it has none): logits_all segments own a
  // row per token, others one row when they reach their end; rows were appended in this order.
  // What each row is for (RowPick): a greedy pick or a top-k sample is reduced where the logits
  // are (on a GPU, only ids or k candidates come back); logits, logprobs, a top-k of 0 or above
  // kMaxPickK, and min_tokens' suppressed stop tokens need the whole row.
  std::vector<int> last_row(order.size(), -1);
  std::vector<RowPick> picks(static_cast<size_t>(n_rows));
  int n_cands = 0;
  {
    int r = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const Sequence& s = *order[i];
      const int len = b.segs[i].len;
      const bool ends = s.n_computed + len == static_cast<int>(s.tokens.size());
      if (s.req.logits_all) {
        r += len;
        last_row[i] = r - 1;
      } else if (ends) {
        last_row[i] = r++;
      }
      if (!ends || !s.samples() || s.req.logits_all || s.req.logprobs >= 0) continue;
      if (s.generated < s.req.min_tokens && !s.req.stop.empty()) continue;
      RowPick& p = picks[last_row[i]];
      const SamplingParams& sp = s.sampler->params();
      const int k = std::min(sp.top_k, cfg_.vocab);
      if (s.sampler->greedy()) {
        p.mode = RowPick::kArgmax;
      } else if (k > 0 && k <= kMaxPickK) {
        p.mode = RowPick::kTopK;
        p.k = k;
        p.temperature = sp.temperature;
        p.cand_offset = n_cands;
        n_cands += k;
      }
    }
  }
  std::vector<int32_t> pick_ids(static_cast<size_t>(n_rows), -1);
  if (pick_cands_.size() < static_cast<size_t>(n_cands)) pick_cands_.resize(static_cast<size_t>(n_cands));
  model_->forward(b, logits_buf_.data(), picks.data(), pick_ids.data(), pick_cands_.data());
  const int64_t t_sample = now_ns();
  const double step_ms = ns_to_ms(t_sample - t_fwd);
  // The rows whose token is drawn on the host from the whole row (top_k 0 or past kMaxPickK,
  // min_tokens, logprobs): each row's draw and logprobs depend on that row and its own sequence's
  // sampler only, so they run on the backend's host threads side by side, before the walk below.
  std::vector<size_t> host_rows;
  for (size_t i = 0; i < order.size(); ++i) {
    const Sequence& s = *order[i];
    if (last_row[i] >= 0 && s.n_computed + b.segs[i].len == static_cast<int>(s.tokens.size()) && s.samples() &&
        picks[static_cast<size_t>(last_row[i])].mode == RowPick::kLogits)
      host_rows.push_back(i);
  }
  std::vector<HostDraw> host_draws(order.size());
  backend_->host_parallel(static_cast<int>(host_rows.size()), [&](int j) {
    const size_t i = host_rows[static_cast<size_t>(j)];
    Sequence& s = *order[i];
    HostDraw& d = host_draws[i];
    const float* row = logits_buf_.data() + static_cast<int64_t>(last_row[i]) * cfg_.vocab;
    d.tok = s.sampler->sample(row, cfg_.vocab, s.generated < s.req.min_tokens ? &s.req.stop : nullptr);
    if (d.tok < 0 || !s.req.stream || s.req.logprobs < 0) return;
    const size_t n_top = static_cast<size_t>(std::min(s.req.logprobs, cfg_.vocab));
    d.top_ids.resize(n_top);
    d.top_logprobs.resize(n_top);
    row_logprobs(row, cfg_.vocab, d.tok, s.req.logprobs, &d.logprob, d.top_ids.data(), d.top_logprobs.data());
  });
  std::vector<EngineEvent> evs;
  int step_tokens = 0;
  std::vector<Sequence*> finished;
  std::vector<Sequence*> failed;  // logits that were not finite: nothing to pick from
  std::vector<Sequence*> stamped;
  for (size_t i = 0; i < order.size(); ++i) {
    Sequence& s = *order[i];
    const SeqSegment& seg = b.segs[i];
    // A prefill chunk: prompt tokens (or a recompute after preemption), not a single decode token.
    const bool was_prefill = s.n_computed < s.prompt_len || seg.len > 1;
    s.n_computed += seg.len;
    if (was_prefill) s.prefill_chunk_ms.push_back(step_ms);
    const bool reaches_end = s.n_computed == static_cast<int>(s.tokens.size());
    const float* last = last_row[i] >= 0 ? logits_buf_.data() + static_cast<int64_t>(last_row[i]) * cfg_.vocab : nullptr;
    if (s.req.logits_all) {
      s.logits.insert(s.logits.end(), last - static_cast<int64_t>(seg.len - 1) * cfg_.vocab, last + cfg_.vocab);
      s.logit_rows += seg.len;
    }
    prefix_->after_step(s);
    if (!reaches_end) continue;
    if (!s.samples()) {
      finished.push_back(&s);
      continue;
    }
    const RowPick& pick = picks[last_row[i]];
    int32_t tok;
    if (pick.mode == RowPick::kArgmax) {
      tok = pick_ids[last_row[i]];
    } else if (pick.mode == RowPick::kTopK) {
      tok = s.sampler->draw(pick_cands_.data() + pick.cand_offset, pick.k);
    } else {
      tok = host_draws[i].tok;  // drawn above
    }
    if (tok < 0) {
      failed.push_back(&s);
      continue;
    }
    s.tokens.push_back(tok);
    s.generated++;
    if (s.prefill_chunks_to_first < 0) s.prefill_chunks_to_first = static_cast<int>(s.prefill_chunk_ms.size());
    s.token_ns.push_back(0);  // stamped below with the step's emission time
    stamped.push_back(&s);
    ++step_tokens;
    if (s.req.stream) {
      EngineEvent e;
      e.kind = EngineEvent::kToken;
      e.id = s.id;
      e.token = tok;
      e.index = s.generated - 1;
      if (s.req.logprobs >= 0) {  // computed with the draw (a request with logprobs takes the whole row)
        HostDraw& d = host_draws[i];
        e.has_logprobs = true;
        e.logprob = d.logprob;
        e.top_ids = std::move(d.top_ids);
        e.top_logprobs = std::move(d.top_logprobs);
      }
      evs.push_back(std::move(e));
    }
    const bool stop = !s.req.ignore_eos && std::binary_search(s.req.stop.begin(), s.req.stop.end(), tok);
    if (stop || s.generated >= s.req.max_tokens) {
      if (s.req.logits_all) {
        // Evaluate the last token once more for its logits row, a stop token's too: a request for
        // every position's logits gets a row for each generated token however it ended (and one for
        // each prompt position past what a prefix-cache hit served).
        s.logits_only_step = true;
      } else {
        finished.push_back(&s);
      }
      s.stop_hit = stop;
    }
  }
  // Every token of a step leaves at the same time (the events are delivered after this loop): one
  // stamp for all, so two requests whose prompts finished in the same step share their first token's
  // time and no token's time depends on where its sequence sits in the batch.
  const int64_t t_emit = now_ns();
  for (Sequence* s : stamped) s->token_ns.back() = t_emit;
  for (EngineEvent& e : evs)
    if (e.kind == EngineEvent::kToken) e.t_ns = t_emit;
  if (step_tokens > 0) {
    EngineEvent e;
    e.kind = EngineEvent::kStep;
    e.step_tokens = step_tokens;
    e.t_ns = t_emit;
    evs.push_back(std::move(e));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.steps++;
    stats_.running = static_cast<int>(scheduler_->running().size());
    stats_.waiting = static_cast<int>(scheduler_->waiting().size());
    for (auto& e : evs) events_.push_back(std::move(e));
    pipeline_.record("scheduling", "pipeline", 1, static_cast<uint64_t>(t_fwd - t_sched));
    pipeline_.record("forward", "pipeline", 1, static_cast<uint64_t>(t_sample - t_fwd));
    pipeline_.record("sampling", "pipeline", 1, static_cast<uint64_t>(t_emit - t_sample));
    if (ec_.profile)
      for (auto& op : backend_->take_profile()) op_stats_.record(op.name, op.group, op.calls, op.ns);
    const GraphStats g = backend_->graph_stats();  // zero on a backend without graphs
    stats_.graph_hits = g.hits - graph_base_.graph_hits;
    stats_.graph_misses = g.misses - graph_base_.graph_misses;
    stats_.graph_capture_ms = g.capture_ms - graph_base_.graph_capture_ms;
  }
  // kStep alone is a progress count: it waits (kStepNotifyNs); a streamed token does not. A finished
  // request's kDone (finish -> push) wakes the caller at once and delivers the counts before it.
  const bool streamed = evs.size() > (step_tokens > 0 ? 1u : 0u);
  if (!evs.empty() && notify_ && (streamed || t_emit - last_step_notify_ns_ >= kStepNotifyNs)) {
    notify_();
    last_step_notify_ns_ = t_emit;
  }
  // The requests that ended in this step reach the caller in one delivery: pushed one by one, a
  // delivery between two of them split them, and a closed loop's sessions resubmitted in separate
  // turns, the first admitted alone (its next prompt prefilled before the others').
  std::vector<EngineEvent> done;
  for (Sequence* s : finished) finish(*s, s->stop_hit ? "stop" : "length", {}, "", &done);
  for (Sequence* s : failed)
    finish(*s, "error", "the logits that choose generated token " + std::to_string(s->generated) +
                            " (0-based) are not all finite (NaN or infinite): the weights hold NaN or infinite values, or the computation overflowed",
           "non_finite_logits", &done);
  push_all(std::move(done));
}

}  // namespace lumen
