#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "core/clock.h"
#include "core/thread_pool.h"
#include "model/qwen35.h"
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace lumen {

struct Engine::Seq {
  uint64_t id = 0;
  RequestSpec req;
  std::vector<int32_t> tokens;  // prompt, then generated
  int prompt_len = 0;
  int n_computed = 0;  // tokens whose KV / recurrent state is in the caches
  int generated = 0;
  int slot = -1;
  std::vector<int32_t> table;  // KV block ids
  std::vector<uint64_t> block_hash;  // chained hash of each full prompt block
  int cached_blocks = 0;       // leading blocks registered in (or taken from) the prefix cache
  int cached_prompt_tokens = 0;
  bool parked = false;
  bool logits_only_step = false;  // the extra evaluation of the last token for logits "all"
  bool stop_hit = false;
  bool done = false;
  int64_t enqueue_ns = 0;
  std::vector<int64_t> token_ns;
  std::vector<double> chunk_ms;
  std::vector<float> logits;
  int logit_rows = 0;
  std::unique_ptr<Sampler> sampler;
  uint64_t admit_order = 0;
};

namespace {

uint64_t mix_hash(uint64_t h, const int32_t* t, int n) {
  // FNV-1a over the ids, seeded with the previous block's hash (chained).
  h ^= 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h;
}

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

}  // namespace

Engine::Engine(ModelConfig cfg, std::vector<TensorEntry> tensors, EngineConfig ec, std::function<void()> notify)
    : cfg_(std::move(cfg)), tensors_(std::move(tensors)), ec_(ec), notify_(std::move(notify)) {
  if (ec_.threads <= 0) ec_.threads = default_threads();
  if (ec_.block_size <= 0) throw std::invalid_argument("block size must be positive");
  if (ec_.max_seqs <= 0) throw std::invalid_argument("max sequences must be positive");
  if (ec_.max_seq <= 0) throw std::invalid_argument("max_seq must be positive");
  if (ec_.prefill_chunk <= 0) throw std::invalid_argument("prefill chunk must be positive");
  if (ec_.step_token_budget < ec_.max_seqs)
    throw std::invalid_argument("step token budget (" + std::to_string(ec_.step_token_budget) +
                                ") must be at least the number of sequences (" + std::to_string(ec_.max_seqs) + ")");
  if (ec_.snapshot_interval % ec_.block_size != 0) ec_.snapshot_interval = (ec_.snapshot_interval / ec_.block_size + 1) * ec_.block_size;
  if (!ec_.paged) ec_.prefix_cache = false;
  block_bytes_ = static_cast<size_t>(ec_.block_size) * cfg_.n_kv_heads * cfg_.head_dim * 2 * sizeof(float) *
                 cfg_.n_full_layers();
  state_bytes_ = cfg_.state_bytes();
  blocks_per_seq_ = (ec_.max_seq + ec_.block_size - 1) / ec_.block_size;
  int n_blocks = blocks_per_seq_ * ec_.max_seqs;
  if (ec_.paged && ec_.kv_memory_bytes > 0 && block_bytes_ > 0)
    n_blocks = static_cast<int>(std::max<int64_t>(1, ec_.kv_memory_bytes / static_cast<int64_t>(block_bytes_)));
  pool_tokens_ = static_cast<int64_t>(n_blocks) * ec_.block_size;
  blocks_ = std::make_unique<BlockPool>(n_blocks);
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
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

std::vector<EngineEvent> Engine::drain() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<EngineEvent> out;
  out.swap(events_);
  return out;
}

void Engine::load() {
  std::unique_ptr<HostWeights> w;
  auto progress = [this](int done, int total) {
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
    backend_ = make_cuda_backend(0);
    cuda_set_graphs(*backend_, ec_.cuda_graphs);
#else
    throw std::runtime_error("--device cuda: this build has no CUDA backend (nvcc was not found when it was built)");
#endif
  } else {
    throw std::runtime_error("unknown device '" + ec_.device + "'");
  }
  backend_->set_gdn_chunk_min(ec_.gdn_chunk_min);
  backend_->set_profiling(ec_.profile);
  const int max_tokens = ec_.step_token_budget;
  model_ = std::make_unique<Qwen35>(*backend_, *w, max_tokens, 32);
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
  backend_->init_caches(spec, max_tokens, 32);
  if (ec_.prefix_cache) {
    const int n = ec_.max_snapshots > 0 ? ec_.max_snapshots : 2 * ec_.max_seqs;
    backend_->init_snapshots(n);
    snaps_.resize(n);
  }
  for (int s = ec_.max_seqs - 1; s >= 0; --s) free_slots_.push_back(s);
  logits_buf_.resize(static_cast<size_t>(32) * cfg_.vocab);
  workspace_bytes_ = model_->workspace_bytes();
  std::lock_guard<std::mutex> lk(mu_);
  info_.backend = backend_->name();
  info_.desc = backend_->device_desc();
  info_.dtype = dtype_name(w->main_dtype());
  info_.threads = ec_.device == "cpu" ? ec_.threads : 0;
  info_.weight_bytes = static_cast<int64_t>(w->total_bytes());
  info_.kv_blocks = blocks_->total();
  info_.block_size = ec_.block_size;
  info_.device_memory = static_cast<int64_t>(backend_->device_memory_bytes());
  stats_.weight_bytes = info_.weight_bytes;
  stats_.kv_blocks_total = blocks_->total();
  stats_.state_slots_total = ec_.max_seqs;
  stats_.snapshots_total = static_cast<int>(snaps_.size());
  info_.kv_block_bytes = static_cast<int64_t>(block_bytes_);
  info_.state_bytes = static_cast<int64_t>(state_bytes_);
  sync_pool_stats();
  stats_.active_bytes = static_cast<int64_t>(workspace_bytes_);
  stats_.peak_active_bytes = stats_.active_bytes;
  // A device backend holds its own copy of the weights; the host copy is kept only for the CPU.
  if (ec_.device == "cpu") weights_ = std::move(w);
  loaded_ = true;
}

uint64_t Engine::submit(RequestSpec r, bool defer) {
  if (r.prompt.empty()) throw std::invalid_argument("the prompt is empty");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= cfg_.vocab)
      throw std::invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                  std::to_string(cfg_.vocab) + ")");
  if (r.max_tokens < 0) throw std::invalid_argument("max tokens must be >= 0");
  if (r.min_tokens < 0) throw std::invalid_argument("min tokens must be >= 0");
  if (r.logprobs > kMaxTopLogprobs)
    throw std::invalid_argument("at most " + std::to_string(kMaxTopLogprobs) + " top logprobs per token");
  const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (need > ec_.max_seq)
    throw std::invalid_argument("request needs " + std::to_string(need) + " tokens (prompt " +
                                std::to_string(r.prompt.size()) + " + output " + std::to_string(r.max_tokens) +
                                "), more than max_seq " + std::to_string(ec_.max_seq));
  if (ec_.paged && need > pool_tokens_)
    throw std::invalid_argument("out of KV memory: request needs " + std::to_string(need) +
                                " tokens of KV cache, the pool holds " + std::to_string(pool_tokens_));
  auto s = std::make_unique<Seq>();
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

void Engine::bump_active(int64_t delta) {
  // Called with mu_ held.
  stats_.active_bytes += delta;
  stats_.peak_active_bytes = std::max(stats_.peak_active_bytes, stats_.active_bytes);
}

void Engine::sync_pool_stats() {
  // Called with mu_ held, after any change to the block pool, the state slots or the prefix cache,
  // and before the event that reports it is pushed: a caller that has seen a request finish reads
  // counters that already include it.
  stats_.kv_blocks_used = blocks_->used();
  stats_.kv_blocks_free = blocks_->free_count();
  stats_.state_slots_free = static_cast<int>(free_slots_.size());
  stats_.prefix_cached_blocks = static_cast<int>(cache_by_block_.size());
  stats_.snapshots_used = static_cast<int>(std::count_if(snaps_.begin(), snaps_.end(), [](const Snapshot& x) { return x.used; }));
}

void Engine::allow_steps(int n) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    step_permits_ += std::max(0, n);
  }
  cv_.notify_all();
}

void Engine::run() {
  set_flush_denormals();  // this thread is thread 0 of the backend's pool
  try {
    load();
  } catch (const std::exception& ex) {
    EngineEvent e;
    e.kind = EngineEvent::kLoadError;
    e.error = ex.what();
    push(std::move(e));
    return;
  }
  push(EngineEvent{EngineEvent::kLoaded});
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stop_ || ((!ec_.manual_steps || step_permits_ > 0) &&
                         (!incoming_.empty() || !cancels_.empty() || !running_.empty() || !waiting_.empty()));
      });
      if (stop_) return;
      if (ec_.manual_steps) --step_permits_;
    }
    try {
      step_once();
    } catch (const std::exception& ex) {
      // An engine error fails every active request with the reason; the engine stays usable.
      std::vector<Seq*> all(running_.begin(), running_.end());
      for (Seq* s : all) finish(*s, "error", ex.what());
      std::vector<Seq*> w(waiting_.begin(), waiting_.end());
      for (Seq* s : w) finish(*s, "error", ex.what());
    }
  }
}

void Engine::admit_incoming() {
  std::deque<std::unique_ptr<Seq>> inc;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lk(mu_);
    inc.swap(incoming_);
    cancels.swap(cancels_);
  }
  for (auto& s : inc) {
    Seq* p = s.get();
    seqs_[p->id] = std::move(s);
    waiting_.push_back(p);
  }
  for (uint64_t id : cancels) {
    auto it = seqs_.find(id);
    if (it != seqs_.end() && !it->second->done) finish(*it->second, "cancelled");
  }
}

void Engine::release_seq(Seq& s) {
  int64_t freed = 0;
  for (int b : s.table) {
    blocks_->release(b);
    if (blocks_->refs(b) == 0) freed += static_cast<int64_t>(block_bytes_);
  }
  s.table.clear();
  s.cached_blocks = 0;
  if (s.slot >= 0) {
    free_slots_.push_back(s.slot);
    s.slot = -1;
    freed += static_cast<int64_t>(state_bytes_);
  }
  std::lock_guard<std::mutex> lk(mu_);
  bump_active(-freed);
  sync_pool_stats();
}

void Engine::finish(Seq& s, const char* reason, const std::string& error) {
  if (s.done) return;
  s.done = true;
  release_seq(s);
  running_.erase(std::remove(running_.begin(), running_.end(), &s), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &s), waiting_.end());
  EngineEvent e;
  e.kind = EngineEvent::kDone;
  e.id = s.id;
  e.finish = reason;
  e.error = error;
  e.tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
  e.token_ns = std::move(s.token_ns);
  e.enqueue_ns = s.enqueue_ns;
  e.prompt_tokens = s.prompt_len;
  e.cached_prompt_tokens = s.cached_prompt_tokens;
  e.prefill_chunk_ms = std::move(s.chunk_ms);
  e.logits = std::move(s.logits);
  e.logit_rows = s.logit_rows;
  e.t_ns = now_ns();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.retires++;
  }
  const uint64_t id = s.id;
  push(std::move(e));
  seqs_.erase(id);
}

void Engine::preempt(Seq& s) {
  // Recompute later: drop caches, keep the tokens generated so far.
  release_seq(s);
  s.n_computed = 0;
  s.cached_prompt_tokens = 0;
  running_.erase(std::remove(running_.begin(), running_.end(), &s), running_.end());
  waiting_.push_front(&s);
  std::lock_guard<std::mutex> lk(mu_);
  stats_.preemptions++;
}

bool Engine::evict_one_cached_block() {
  int victim = -1;
  uint64_t oldest = UINT64_MAX;
  for (auto& [b, cb] : cache_by_block_)
    if (blocks_->refs(b) == 1 && cb.last_use < oldest) {
      oldest = cb.last_use;
      victim = b;
    }
  if (victim < 0) return false;
  cache_by_hash_.erase(cache_by_block_[victim].hash);
  cache_by_block_.erase(victim);
  blocks_->release(victim);
  std::lock_guard<std::mutex> lk(mu_);
  bump_active(-static_cast<int64_t>(block_bytes_));
  stats_.evictions++;
  sync_pool_stats();
  return true;
}

bool Engine::ensure_blocks(Seq& s, int upto_tokens) {
  const int need = (upto_tokens + ec_.block_size - 1) / ec_.block_size;
  if (!ec_.paged) {
    // Contiguous layout: the slot owns a fixed run of blocks, taken whole at admission.
    if (s.table.empty()) {
      for (int i = 0; i < blocks_per_seq_; ++i) {
        const int b = s.slot * blocks_per_seq_ + i;
        if (!blocks_->take(b)) throw std::logic_error("contiguous KV range already in use");
        s.table.push_back(b);
      }
      std::lock_guard<std::mutex> lk(mu_);
      bump_active(static_cast<int64_t>(block_bytes_) * blocks_per_seq_);
      stats_.num_allocs++;
      sync_pool_stats();
    }
    return true;
  }
  int added = 0;
  while (static_cast<int>(s.table.size()) < need) {
    int b = blocks_->alloc();
    if (b < 0 && evict_one_cached_block()) b = blocks_->alloc();
    if (b < 0) break;
    s.table.push_back(b);
    ++added;
  }
  std::lock_guard<std::mutex> lk(mu_);
  bump_active(static_cast<int64_t>(block_bytes_) * added);
  stats_.num_allocs += added;
  sync_pool_stats();
  return static_cast<int>(s.table.size()) >= need;
}

bool Engine::try_prefix_hit(Seq& s) {
  // Hash the full prompt blocks; reuse the longest cached chain that ends at a state snapshot and
  // leaves at least one prompt token to compute (its logits start the generation).
  const int bs = ec_.block_size;
  const int full = s.prompt_len / bs;
  s.block_hash.resize(full);
  uint64_t h = 0;
  for (int i = 0; i < full; ++i) s.block_hash[i] = h = mix_hash(h, s.tokens.data() + i * bs, bs);
  if (!ec_.prefix_cache) return false;
  int matched = 0;
  for (int i = 0; i < full; ++i) {
    auto it = cache_by_hash_.find(s.block_hash[i]);
    if (it == cache_by_hash_.end()) break;
    const auto& cb = cache_by_block_[it->second];
    if (!std::equal(cb.tokens.begin(), cb.tokens.end(), s.tokens.begin() + i * bs)) break;
    matched = i + 1;
  }
  int use = 0, snap = -1;
  for (int nb = std::min(matched, (s.prompt_len - 1) / bs); nb > 0; --nb) {
    auto it = snap_by_hash_.find(s.block_hash[nb - 1]);
    if (it != snap_by_hash_.end() && snaps_[it->second].pos == nb * bs) {
      use = nb;
      snap = it->second;
      break;
    }
  }
  if (use == 0) return false;
  for (int i = 0; i < use; ++i) {
    const int b = cache_by_hash_[s.block_hash[i]];
    blocks_->retain(b);
    cache_by_block_[b].last_use = ++use_clock_;
    s.table.push_back(b);
  }
  backend_->load_state(snap, s.slot);
  snaps_[snap].last_use = ++use_clock_;
  s.n_computed = use * bs;
  s.cached_blocks = use;
  s.cached_prompt_tokens = use * bs;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.prefix_hit_tokens += static_cast<uint64_t>(use) * bs;
  return true;
}

int Engine::snapshot_stop(const Seq& s) const {
  // Next position > n_computed where a prefill chunk must stop so a state snapshot can be taken:
  // multiples of the snapshot interval and the prompt's last full block boundary.
  if (!ec_.prefix_cache) return INT32_MAX;
  const int bs = ec_.block_size;
  const int last_full = s.prompt_len / bs * bs;
  int next = (s.n_computed / ec_.snapshot_interval + 1) * ec_.snapshot_interval;
  if (last_full > s.n_computed && last_full < next) next = last_full;
  return next < s.prompt_len ? next : INT32_MAX;
}

bool Engine::schedule(StepBatch& b, std::vector<Seq*>& order) {
  b = StepBatch{};
  order.clear();
  int budget = ec_.step_token_budget;
  // Admit waiting sequences while a slot and enough KV blocks (whole prompt + first token) are free.
  while (!waiting_.empty() && !free_slots_.empty()) {
    Seq& s = *waiting_.front();
    // Blocks for everything computed so far plus the next token, never more than the request can
    // ever use (submit() checked that this fits the pool, so a parked request always gets in).
    const int need_tokens = std::min(static_cast<int>(s.tokens.size()) + 1, s.prompt_len + s.req.max_tokens);
    const int need_blocks = (need_tokens + ec_.block_size - 1) / ec_.block_size;
    int evictable = 0;
    for (auto& [blk, cb] : cache_by_block_)
      if (blocks_->refs(blk) == 1) ++evictable;
    if (ec_.paged && blocks_->free_count() + evictable < need_blocks) break;
    waiting_.pop_front();
    s.parked = false;
    s.slot = free_slots_.back();
    free_slots_.pop_back();
    s.admit_order = ++use_clock_;
    backend_->reset_state(s.slot);
    {
      std::lock_guard<std::mutex> lk(mu_);
      bump_active(static_cast<int64_t>(state_bytes_));
      stats_.num_allocs++;
      sync_pool_stats();
    }
    if (s.n_computed == 0) try_prefix_hit(s);
    running_.push_back(&s);
  }
  for (Seq* s : waiting_)
    if (!s->parked) {
      s->parked = true;
      std::lock_guard<std::mutex> lk(mu_);
      stats_.park_waits++;
    }
  // Decode tokens first (one per sequence), then prefill chunks, oldest first.
  std::vector<Seq*> by_age(running_.begin(), running_.end());
  std::sort(by_age.begin(), by_age.end(), [](Seq* a, Seq* c) { return a->admit_order < c->admit_order; });
  std::vector<std::pair<Seq*, int>> plan;
  for (int pass = 0; pass < 2; ++pass) {
    for (Seq* s : by_age) {
      if (s->done || s->slot < 0) continue;
      const int pending = static_cast<int>(s->tokens.size()) - s->n_computed;
      const bool decode = pending == 1 && s->n_computed >= s->prompt_len;
      if ((pass == 0) != decode || pending <= 0 || budget <= 0) continue;
      int len = 1;
      if (!decode) {
        len = std::min({pending, ec_.prefill_chunk, budget});
        const int stop = snapshot_stop(*s);
        if (stop != INT32_MAX) len = std::min(len, stop - s->n_computed);
      }
      while (!ensure_blocks(*s, s->n_computed + len)) {
        // Out of blocks: shrink a prefill chunk to what is there, else preempt the youngest.
        const int have = static_cast<int>(s->table.size()) * ec_.block_size - s->n_computed;
        if (!decode && have > 0) {
          len = have;
          continue;
        }
        Seq* victim = nullptr;
        for (auto it = by_age.rbegin(); it != by_age.rend(); ++it)
          if (!(*it)->done && (*it)->slot >= 0) {
            victim = *it;
            break;
          }
        bool planned = false;
        for (auto& pr : plan) planned |= pr.first == victim;
        if (!victim || planned) { len = 0; break; }
        preempt(*victim);
        if (victim == s) { len = 0; break; }
      }
      if (len <= 0) continue;
      plan.emplace_back(s, len);
      budget -= len;
    }
  }
  if (plan.empty()) return false;
  b.decode_only = true;
  for (auto& [s, len] : plan) {
    SeqSegment seg;
    seg.start = b.n_tokens;
    seg.len = len;
    seg.pos0 = s->n_computed;
    seg.state_slot = s->slot;
    seg.table_offset = static_cast<int>(b.block_tables.size());
    seg.n_blocks = (s->n_computed + len + ec_.block_size - 1) / ec_.block_size;
    b.block_tables.insert(b.block_tables.end(), s->table.begin(), s->table.begin() + seg.n_blocks);
    for (int i = 0; i < len; ++i) {
      b.tokens.push_back(s->tokens[s->n_computed + i]);
      b.positions.push_back(s->n_computed + i);
    }
    const bool reaches_end = s->n_computed + len == static_cast<int>(s->tokens.size());
    if (s->req.logits_all) {
      for (int i = 0; i < len; ++i) b.logit_rows.push_back(seg.start + i);
    } else if (reaches_end) {
      b.logit_rows.push_back(seg.start + len - 1);
    }
    if (len > 1) b.decode_only = false;
    b.n_tokens += len;
    b.segs.push_back(seg);
    order.push_back(s);
  }
  return true;
}

void Engine::after_chunk(Seq& s, int64_t step_ns) {
  // Register newly completed full prompt blocks in the prefix cache, and snapshot the state at
  // snapshot points.
  if (!ec_.prefix_cache) return;
  const int bs = ec_.block_size;
  const int full_done = std::min(s.n_computed, s.prompt_len) / bs;
  int admitted = 0;
  for (int i = s.cached_blocks; i < full_done && i < static_cast<int>(s.block_hash.size()); ++i) {
    const uint64_t h = s.block_hash[i];
    if (!cache_by_hash_.count(h)) {
      const int blk = s.table[i];
      blocks_->retain(blk);
      CachedBlock cb;
      cb.hash = h;
      cb.last_use = ++use_clock_;
      cb.tokens.assign(s.tokens.begin() + i * bs, s.tokens.begin() + (i + 1) * bs);
      cache_by_hash_[h] = blk;
      cache_by_block_[blk] = std::move(cb);
      ++admitted;
    }
    s.cached_blocks = i + 1;
  }
  if (admitted) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.prefix_admitted_tokens += static_cast<uint64_t>(admitted) * bs;
    sync_pool_stats();
  }
  const int pos = s.n_computed;
  const bool at_point = pos > 0 && pos <= s.prompt_len && pos % bs == 0 &&
                        (pos % ec_.snapshot_interval == 0 || pos == s.prompt_len / bs * bs);
  if (at_point && !snaps_.empty()) {
    const uint64_t h = s.block_hash[pos / bs - 1];
    if (!snap_by_hash_.count(h)) {
      int victim = -1;
      uint64_t oldest = UINT64_MAX;
      for (int i = 0; i < static_cast<int>(snaps_.size()); ++i) {
        if (!snaps_[i].used) { victim = i; break; }
        if (snaps_[i].last_use < oldest) { oldest = snaps_[i].last_use; victim = i; }
      }
      const bool fresh = !snaps_[victim].used;
      if (!fresh) snap_by_hash_.erase(snaps_[victim].hash);
      backend_->save_state(s.slot, victim);
      snaps_[victim] = Snapshot{h, pos, ++use_clock_, true};
      snap_by_hash_[h] = victim;
      std::lock_guard<std::mutex> lk(mu_);
      stats_.num_allocs++;
      if (fresh) bump_active(static_cast<int64_t>(state_bytes_));
      sync_pool_stats();
    }
  }
  (void)step_ns;
}

void Engine::step_once() {
  const int64_t t_sched = now_ns();
  admit_incoming();
  StepBatch b;
  std::vector<Seq*> order;
  if (!schedule(b, order)) return;
  const int64_t t_fwd = now_ns();
  const int n_rows = static_cast<int>(b.logit_rows.size());
  if (logits_buf_.size() < static_cast<size_t>(n_rows) * cfg_.vocab) logits_buf_.resize(static_cast<size_t>(n_rows) * cfg_.vocab);
  model_->forward(b, logits_buf_.data());
  const int64_t t_sample = now_ns();
  const double step_ms = ns_to_ms(t_sample - t_fwd);
  // Logit row of each segment's last position (-1 when it has none): logits_all segments own a
  // row per token, others one row when they reach their end; rows were appended in this order.
  std::vector<int> last_row(order.size(), -1);
  // Whether a segment that reaches its end samples a token (not a logits-only step, budget left).
  auto samples = [](const Seq& s) { return !s.logits_only_step && s.generated < s.req.max_tokens; };
  // Greedy picks for the segments that end this step, in one backend call (vectorised and spread
  // over the threads; the vocabulary is 248k wide).
  std::vector<int> greedy_rows;
  std::vector<size_t> greedy_seg;
  {
    int r = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const Seq& s = *order[i];
      const int len = b.segs[i].len;
      const bool ends = s.n_computed + len == static_cast<int>(s.tokens.size());
      if (s.req.logits_all) {
        r += len;
        last_row[i] = r - 1;
      } else if (ends) {
        last_row[i] = r++;
      }
      // While min_tokens suppresses the stop tokens, the pick is made per row below.
      const bool suppress = s.generated < s.req.min_tokens && !s.req.stop.empty();
      if (ends && samples(s) && s.sampler->greedy() && !suppress) {
        greedy_rows.push_back(last_row[i]);
        greedy_seg.push_back(i);
      }
    }
  }
  std::vector<int32_t> greedy_pick(order.size(), -1);
  if (!greedy_rows.empty()) {
    std::vector<int32_t> picks(greedy_rows.size());
    backend_->argmax_rows(logits_buf_.data(), greedy_rows.data(), static_cast<int>(greedy_rows.size()), cfg_.vocab,
                          picks.data());
    for (size_t j = 0; j < greedy_seg.size(); ++j) greedy_pick[greedy_seg[j]] = picks[j];
  }
  std::vector<EngineEvent> evs;
  std::vector<Seq*> finished;
  for (size_t i = 0; i < order.size(); ++i) {
    Seq& s = *order[i];
    const SeqSegment& seg = b.segs[i];
    // A prefill chunk: prompt tokens (or a recompute after preemption), not a single decode token.
    const bool was_prefill = s.n_computed < s.prompt_len || seg.len > 1;
    s.n_computed += seg.len;
    if (was_prefill) s.chunk_ms.push_back(step_ms);
    const bool reaches_end = s.n_computed == static_cast<int>(s.tokens.size());
    const float* last = last_row[i] >= 0 ? logits_buf_.data() + static_cast<int64_t>(last_row[i]) * cfg_.vocab : nullptr;
    if (s.req.logits_all) {
      s.logits.insert(s.logits.end(), last - static_cast<int64_t>(seg.len - 1) * cfg_.vocab, last + cfg_.vocab);
      s.logit_rows += seg.len;
    }
    after_chunk(s, t_sample - t_fwd);
    if (!reaches_end) continue;
    if (!samples(s)) {
      finished.push_back(&s);
      continue;
    }
    const bool suppress = s.generated < s.req.min_tokens;
    const int32_t tok = greedy_pick[i] >= 0 ? greedy_pick[i] : s.sampler->sample(last, cfg_.vocab, suppress ? &s.req.stop : nullptr);
    s.tokens.push_back(tok);
    s.generated++;
    const int64_t t = now_ns();
    s.token_ns.push_back(t);
    EngineEvent e;
    e.kind = EngineEvent::kToken;
    e.id = s.id;
    e.token = tok;
    e.index = s.generated - 1;
    e.t_ns = t;
    if (s.req.logprobs >= 0) {
      e.has_logprobs = true;
      e.top_ids.resize(s.req.logprobs);
      e.top_logprobs.resize(s.req.logprobs);
      row_logprobs(last, cfg_.vocab, tok, s.req.logprobs, &e.logprob, e.top_ids.data(), e.top_logprobs.data());
    }
    evs.push_back(std::move(e));
    bool stop = false;
    if (!s.req.ignore_eos)
      for (int32_t st : s.req.stop) stop |= st == tok;
    if (stop || s.generated >= s.req.max_tokens) {
      if (s.req.logits_all && !stop) {
        s.logits_only_step = true;  // evaluate the last token once more for its logits row
      } else {
        finished.push_back(&s);
      }
      s.stop_hit = stop;
    }
  }
  const int64_t t_emit = now_ns();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.steps++;
    stats_.running = static_cast<int>(running_.size());
    stats_.waiting = static_cast<int>(waiting_.size());
    for (auto& e : evs) events_.push_back(std::move(e));
    pipeline_.record("scheduling", "pipeline", 1, static_cast<uint64_t>(t_fwd - t_sched));
    pipeline_.record("forward", "pipeline", 1, static_cast<uint64_t>(t_sample - t_fwd));
    pipeline_.record("sampling", "pipeline", 1, static_cast<uint64_t>(t_emit - t_sample));
    if (ec_.profile)
      for (auto& op : backend_->take_profile()) op_stats_.record(op.name, op.group, op.calls, op.ns);
#if defined(LUMEN_WITH_CUDA)
    CudaGraphStats g;
    if (cuda_graph_stats(*backend_, &g)) {
      stats_.graph_hits = g.hits - graph_base_.graph_hits;
      stats_.graph_misses = g.misses - graph_base_.graph_misses;
      stats_.graph_capture_ms = g.capture_ms - graph_base_.graph_capture_ms;
    }
#endif
  }
  if (!evs.empty() && notify_) notify_();
  for (Seq* s : finished) finish(*s, s->stop_hit ? "stop" : "length");
}

}  // namespace lumen
