#pragma once
// Token sampling: greedy (temperature 0), or temperature with top-k / top-p from a seeded stream.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/top_k.h"

namespace lumen {

// Temperatures below this sample greedily.
constexpr float kGreedyBelowTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 0.f;
  int top_k = 0;      // 0 = all
  float top_p = 1.f;  // 1 = all
  uint64_t seed = 0;
};

class Sampler {
 public:
  // k: the CPU kernel table whose passes the whole-vocabulary draw runs (the sampler runs on the
  // host whatever the backend; samplerCheck names a table to check each).
  explicit Sampler(const SamplingParams& p, const cpu::Kernels& k = cpu::kernels()) : p_(p), k_(&k), rng_(p.seed) {
    // A temperature this small is greedy: dividing logits by it would overflow to inf (and NaN
    // probabilities). vLLM draws the same line.
    if (p_.temperature < kGreedyBelowTemperature) p_.temperature = 0.f;
  }
  // `banned` (optional): ids that may not be picked, sorted ascending (min_tokens suppressing the stop tokens).
  // -1 when the row holds a NaN or an infinity (nothing to pick from).
  int32_t sample(const float* logits, int vocab, const std::vector<int32_t>* banned = nullptr);
  // The draw of a non-greedy pick from the top_k best candidates (top_candidates' order), as
  // sample() draws after its own pick: what a backend's device-side top-k hands back. -1 when the
  // first candidate's id is -1 (the pick found a NaN or an infinity in the row).
  int32_t draw(const PickCandidate* cand, int n);
  bool greedy() const { return p_.temperature <= 0.f; }
  const SamplingParams& params() const { return p_; }

 private:
  // sample() with every candidate of the row (top_k 0 or at least the vocabulary).
  int32_t draw_all(const float* logits, int vocab, const std::vector<int32_t>* banned);
  // sample() with the top_k best candidates (0 < top_k < vocabulary), drawn as draw() draws.
  int32_t draw_top_k(const float* logits, int vocab, const std::vector<int32_t>* banned);
  // draw_all's pieces: the runs of ids between the banned ones.
  void allowed_runs(int vocab, const std::vector<int32_t>* banned);
  SamplingParams p_;
  const cpu::Kernels* k_;
  std::mt19937_64 rng_;
  std::vector<PickCandidate> cand_;         // draw_top_k: the row's best candidates
  std::vector<PickCandidate> pick_scratch_;  // draw_top_k: the table pick's scratch
  std::vector<double> probs_;
  std::vector<std::pair<int32_t, int32_t>> runs_;  // draw_all: [begin, end) of the allowed ids
  std::vector<cpu::BucketMember> members_;         // draw_all: one bucket's candidates
  std::vector<double> mass_;                       // draw_all: the weight of each bucket
};

// Most top-logprob alternatives a request may ask for.
constexpr int kMaxTopLogprobs = 20;

// Log-softmax of one logits row (raw logits, before temperature or any ban): the logprob of
// `token`, and the `n` most likely ids with their logprobs, most likely first (ties: lower id).
// n <= kMaxTopLogprobs; top_ids / top_logprobs hold n entries. k: the CPU kernel table whose
// passes it runs (as Sampler's).
void row_logprobs(const float* logits, int vocab, int32_t token, int n, float* token_logprob, int32_t* top_ids,
                  float* top_logprobs, const cpu::Kernels& k = cpu::kernels());

}  // namespace lumen
