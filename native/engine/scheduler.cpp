#include "engine/scheduler.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <utility>

#include "backend/backend.h"
#include "core/clock.h"

namespace lumen {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool& blocks, StateSlots& slots, PrefixCache& prefix,
                     Backend& backend, CounterSink& counters)
    : cfg_(cfg), blocks_(blocks), slots_(slots), prefix_(prefix), backend_(backend), counters_(counters) {}

int Scheduler::tokens_to_next(const Sequence& s) const {
  // A decoder: the token it computes this step. Otherwise everything computed so far plus the next
  // token (the first, or the first after a recompute), never more than the request can ever use
  // (submit() checked that this fits the pool, so a parked request always gets in once nothing runs).
  if (s.decoding()) return s.n_computed + 1;
  return std::min(static_cast<int>(s.tokens.size()) + 1, s.prompt_len + s.req.max_tokens);
}

int Scheduler::blocks_short(const Sequence& s) const {
  if (s.done || s.slot < 0) return 0;
  const int need = (tokens_to_next(s) + cfg_.block_size - 1) / cfg_.block_size;
  return std::max(0, need - static_cast<int>(s.block_table.size()));
}

void Scheduler::admit() {
  // Admit waiting sequences while a slot is free and enough KV blocks (whole prompt + first token)
  // are free or evictable beyond those the running sequences still need to reach their next token:
  // a decoder's next block, a prefiller's (one admitted earlier in this loop too) rest of its prompt
  // and first token. The step plans those first, so a sequence admitted into their blocks would be
  // preempted before it computed anything.
  int reserved = 0;
  if (cfg_.paged)
    for (const Sequence* r : running_) reserved += blocks_short(*r);
  while (!waiting_.empty() && slots_.any_free()) {
    Sequence& s = *waiting_.front();
    const int need_blocks = (tokens_to_next(s) + cfg_.block_size - 1) / cfg_.block_size;
    if (cfg_.paged && blocks_.free_count() + prefix_.evictable() - reserved < need_blocks) break;
    waiting_.pop_front();
    s.parked = false;
    s.slot = slots_.take();
    s.admit_order = ++admissions_;
    backend_.reset_state(s.slot);
    counters_.count_allocs(1);
    // Re-admitted after a preemption: its recompute starts now (the sweep's gap figures need when,
    // not only after which token). A request for every position's logits recomputes them all: a
    // hit on its own cached blocks would skip rows it lost.
    const bool readmitted = !s.preempted_after.empty();
    if (readmitted) s.readmit_ns.push_back(now_ns());
    if (s.n_computed == 0 && !(readmitted && s.req.logits_all)) prefix_.lookup(s);
    // After the lookup: cached blocks it took are the request's now (active, not only the cache's),
    // and no longer evictable; what it still needs is set aside for the next admission.
    if (cfg_.paged) reserved += blocks_short(s);
    counters_.memory_changed();
    running_.push_back(&s);
  }
  for (Sequence* s : waiting_)
    if (!s->parked) {
      s->parked = true;
      counters_.count_park();
    }
}

bool Scheduler::ensure_blocks(Sequence& s, int upto_tokens) {
  const int bs = cfg_.block_size;
  const int need = (upto_tokens + bs - 1) / bs;
  if (!cfg_.paged) {
    // Contiguous layout: the slot owns a fixed run of blocks, taken whole at admission.
    if (s.block_table.empty()) {
      for (int i = 0; i < cfg_.blocks_per_seq; ++i) {
        const int b = s.slot * cfg_.blocks_per_seq + i;
        if (!blocks_.take(b)) throw std::logic_error("contiguous KV range already in use");
        s.block_table.push_back(b);
      }
      counters_.count_allocs(1);
      counters_.memory_changed();
    }
    return true;
  }
  int added = 0;
  while (static_cast<int>(s.block_table.size()) < need) {
    int b = blocks_.alloc();
    if (b < 0 && prefix_.evict_one()) b = blocks_.alloc();
    if (b < 0) break;
    s.block_table.push_back(b);
    ++added;
  }
  counters_.count_allocs(static_cast<uint64_t>(added));
  counters_.memory_changed();
  return static_cast<int>(s.block_table.size()) >= need;
}

void Scheduler::release(Sequence& s) {
  for (int b : s.block_table) blocks_.release(b);
  s.block_table.clear();
  s.cached_blocks = 0;
  if (s.slot >= 0) {
    slots_.release(s.slot);
    s.slot = -1;
  }
  counters_.memory_changed();
}

void Scheduler::preempt(Sequence& s) {
  // Recompute later: drop the caches, keep the tokens generated so far.
  s.preempted_after.push_back(static_cast<int32_t>(s.tokens.size()) - s.prompt_len);
  release(s);
  s.n_computed = 0;
  s.cached_prompt_tokens = 0;
  s.logits.clear();  // logits "all": the recompute produces the rows again, from its cache hit on
  s.logit_rows = 0;
  running_.erase(std::remove(running_.begin(), running_.end(), &s), running_.end());
  waiting_.push_front(&s);
  counters_.count_preemption();
}

void Scheduler::remove(Sequence& s) {
  release(s);
  running_.erase(std::remove(running_.begin(), running_.end(), &s), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &s), waiting_.end());
}

bool Scheduler::schedule(StepBatch& b, std::vector<Sequence*>& order) {
  b = StepBatch{};
  order.clear();
  admit();
  int budget = cfg_.step_token_budget;
  // Decode tokens first (one per sequence), then prefill chunks, oldest first.
  std::vector<Sequence*> by_age(running_.begin(), running_.end());
  std::sort(by_age.begin(), by_age.end(), [](Sequence* a, Sequence* c) { return a->admit_order < c->admit_order; });
  std::vector<std::pair<Sequence*, int>> plan;
  for (int pass = 0; pass < 2; ++pass) {
    for (Sequence* s : by_age) {
      if (s->done || s->slot < 0) continue;
      const int pending = s->pending();
      const bool decode = s->decoding();
      if ((pass == 0) != decode || pending <= 0 || budget <= 0) continue;
      int len = 1;
      if (!decode) {
        len = std::min({pending, cfg_.prefill_chunk, budget});
        const int stop = prefix_.snapshot_stop(*s);
        if (stop != INT32_MAX) len = std::min(len, stop - s->n_computed);
      }
      while (!ensure_blocks(*s, s->n_computed + len)) {
        // Out of blocks: shrink a prefill chunk to what is there, else preempt the youngest.
        const int have = static_cast<int>(s->block_table.size()) * cfg_.block_size - s->n_computed;
        if (!decode && have > 0) {
          len = have;
          continue;
        }
        Sequence* victim = nullptr;
        for (auto it = by_age.rbegin(); it != by_age.rend(); ++it)
          if (!(*it)->done && (*it)->slot >= 0) {
            victim = *it;
            break;
          }
        bool planned = false;
        for (auto& pr : plan) planned |= pr.first == victim;
        if (!victim || planned) {
          len = 0;
          break;
        }
        preempt(*victim);
        if (victim == s) {
          len = 0;
          break;
        }
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
    seg.n_blocks = (s->n_computed + len + cfg_.block_size - 1) / cfg_.block_size;
    seg.decode_from = s->prompt_len;
    b.block_tables.insert(b.block_tables.end(), s->block_table.begin(), s->block_table.begin() + seg.n_blocks);
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

}  // namespace lumen
