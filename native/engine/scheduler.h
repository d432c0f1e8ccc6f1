#pragma once
// The scheduler: which sequences run in the next step and how many tokens each computes. It admits
// waiting sequences while a state slot and their KV blocks are free, beyond the blocks the running
// sequences still need to reach their next token (otherwise they park), puts every running
// sequence's decode token first and prefill chunks after them, oldest first, within the step token
// budget, allocates KV blocks on demand (evicting unused cached blocks, preempting
// the youngest sequence when the pool is full), and lays the step out as a StepBatch.
#include <deque>
#include <vector>

#include "engine/block_pool.h"
#include "engine/counter_sink.h"
#include "engine/prefix_cache.h"
#include "engine/sequence.h"
#include "engine/state_slots.h"

namespace lumen {

class Backend;
struct StepBatch;

struct SchedulerConfig {
  int block_size = 16;
  bool paged = true;  // false: each slot owns a fixed run of blocks_per_seq blocks
  int blocks_per_seq = 0;
  int prefill_chunk = 512;
  int step_token_budget = 2048;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, BlockPool& blocks, StateSlots& slots, PrefixCache& prefix, Backend& backend,
            CounterSink& counters);

  void add(Sequence* s) { waiting_.push_back(s); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  // Whether a running or waiting request asked for every position's logits.
  bool any_logits_all() const {
    for (const Sequence* s : running_)
      if (s->req.logits_all) return true;
    for (const Sequence* s : waiting_)
      if (s->req.logits_all) return true;
    return false;
  }

  // Builds the next step into b; order[i] is the sequence of b.segs[i]. False when nothing can run.
  bool schedule(StepBatch& b, std::vector<Sequence*>& order);
  // Takes a finished (or cancelled, or failed) sequence out: its blocks and slot go back.
  void remove(Sequence& s);

 private:
  void admit();
  bool ensure_blocks(Sequence& s, int upto_tokens);
  void release(Sequence& s);
  void preempt(Sequence& s);
  int tokens_to_next(const Sequence& s) const;  // positions s needs KV room for before its next token
  int blocks_short(const Sequence& s) const;    // blocks it lacks for them

  SchedulerConfig cfg_;
  BlockPool& blocks_;
  StateSlots& slots_;
  PrefixCache& prefix_;
  Backend& backend_;
  CounterSink& counters_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  uint64_t admissions_ = 0;
};

}  // namespace lumen
