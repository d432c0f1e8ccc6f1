#pragma once
// A request as the engine tracks it from submit to finish: its tokens (prompt, then generated),
// how many of them the caches hold, its KV block table and recurrent-state slot, and what it has
// produced so far. Owned by the engine; the scheduler and the prefix cache work on it.
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/sampler.h"

namespace lumen {

// The most a logits-"all" request's rows may hold (positions x vocabulary x 4 bytes).
constexpr int64_t kMaxLogitsAllBytes = int64_t{2} << 30;

struct RequestSpec {
  std::vector<int32_t> prompt;
  int max_tokens = 0;  // tokens to generate at most (0: evaluate the prompt only)
  SamplingParams sampling;
  std::vector<int32_t> stop;
  bool ignore_eos = false;
  bool logits_all = false;
  bool stream = false;  // a token event per generated token (callers that stream); else only the step counts
  int min_tokens = 0;   // the stop tokens cannot be sampled before this many tokens
  int logprobs = -1;    // -1: none; n >= 0: each token's logprob and the n most likely alternatives
};

struct Sequence {
  uint64_t id = 0;
  RequestSpec req;
  std::vector<int32_t> tokens;  // prompt, then generated
  int prompt_len = 0;
  int n_computed = 0;           // tokens whose KV / recurrent state is in the caches
  int generated = 0;
  int slot = -1;                // recurrent-state slot while admitted
  std::vector<int32_t> block_table;  // KV block ids, position p in block_table[p / block_size]
  std::vector<uint64_t> block_hash;  // chained hash of each full prompt block
  int cached_blocks = 0;        // leading blocks registered in (or taken from) the prefix cache
  int cached_prompt_tokens = 0;
  // The prompt's blocks were all cached up to its repeat point (the last block boundary before its
  // last token) but no snapshot sat there: this run stops there and snapshots, so a repeat of it hits.
  int repeat_point = 0;
  uint64_t admit_order = 0;     // admission order: preemption takes the youngest
  bool parked = false;          // waiting for memory (counted once per wait)
  bool logits_only_step = false;  // the extra evaluation of the last token for logits "all"
  bool stop_hit = false;
  bool done = false;
  int64_t enqueue_ns = 0;
  std::vector<int64_t> token_ns;
  std::vector<double> prefill_chunk_ms;  // wall time of each step that ran a prefill chunk of it
  // How many of prefill_chunk_ms ran up to its first token (the rest are recomputes after a preemption
  // that came after it); -1 before the first token.
  int prefill_chunks_to_first = -1;
  // Tokens it had generated at each preemption: its recompute runs before token preempted_after[i]
  // (the gap from token preempted_after[i] - 1 to it holds the recompute prefill, or the TTFT when 0).
  std::vector<int32_t> preempted_after;
  std::vector<int64_t> readmit_ns;  // when it was admitted again after each preemption (its recompute's start)
  std::vector<float> logits;
  int logit_rows = 0;
  std::unique_ptr<Sampler> sampler;

  int pending() const { return static_cast<int>(tokens.size()) - n_computed; }
  // One token left to compute, past the prompt: the sequence decodes this step.
  bool decoding() const { return pending() == 1 && n_computed >= prompt_len; }
  // Whether reaching its end this step samples a token (not a logits-only step, budget left).
  bool samples() const { return !logits_only_step && generated < req.max_tokens; }
};

}  // namespace lumen
