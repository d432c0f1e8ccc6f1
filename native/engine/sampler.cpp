#include "engine/sampler.h"

#include "core/argmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lumen {

namespace {

bool is_banned(const std::vector<int32_t>* banned, int32_t id) {
  return banned && std::binary_search(banned->begin(), banned->end(), id);
}

}  // namespace

int32_t Sampler::sample(const float* logits, int vocab, const std::vector<int32_t>* banned) {
  if (p_.temperature <= 0.f) {
    const int32_t best = argmax_scalar(logits, vocab);
    if (best < 0 || !is_banned(banned, best)) return best;
    int32_t pick = -1;
    for (int i = 0; i < vocab; ++i)
      if (!is_banned(banned, i) && (pick < 0 || logits[i] > logits[pick])) pick = i;
    return pick < 0 ? best : pick;
  }
  if (p_.top_k > 0 && p_.top_k < vocab) {
    if (!row_finite(logits, vocab)) return -1;
    const int n = top_candidates(logits, vocab, p_.top_k, p_.temperature, banned, cand_);
    if (n == 0) return argmax_scalar(logits, vocab);
    return draw(cand_.data(), n);
  }
  return draw_all(logits, vocab, banned);
}

int32_t Sampler::draw_all(const float* logits, int vocab, const std::vector<int32_t>* banned) {
  // Every candidate of the row (top_k 0): the same draw as draw() after a sort of the whole row, but
  // only as much of the row is sorted as the draw walks (the candidates are put in order a growing
  // prefix at a time), so a request sampling from the whole vocabulary costs its step O(vocab)
  // instead of a sort of 248 k candidates per token (on the thread every request's step
  // runs on). The prefix is the full sort's prefix: the order is strict (value, then id).
  cand_.clear();
  cand_.reserve(static_cast<size_t>(vocab));
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    if (!std::isfinite(logits[i])) return -1;  // a NaN or an infinity anywhere in the row: nothing to pick from
    if (banned && std::binary_search(banned->begin(), banned->end(), i)) continue;
    const float v = logits[i] / p_.temperature;
    cand_.push_back({v, i});
    mx = std::max(mx, v);
  }
  const int n = static_cast<int>(cand_.size());
  if (n == 0) return argmax_scalar(logits, vocab);
  double total = 0;
  for (const PickCandidate& c : cand_) total += std::exp(static_cast<double>(c.value - mx));
  int sorted = 0;  // cand_[0, sorted) in draw order
  const auto extend = [&](int want) {
    want = std::min(want, n);
    if (want <= sorted) return;
    std::nth_element(cand_.begin() + sorted, cand_.begin() + (want - 1), cand_.end(), candidate_before);
    std::sort(cand_.begin() + sorted, cand_.begin() + want, candidate_before);
    sorted = want;
  };
  extend(256);
  if (!(total > 0 && std::isfinite(total))) return cand_[0].id;  // a scaled logit overflowed: the most likely
  // top_p: the shortest prefix whose probability reaches it (as draw()), the weights in draw order.
  int keep = n;
  double kept = total;
  probs_.clear();
  if (p_.top_p < 1.f) {
    double acc = 0;
    for (int i = 0;; ++i) {
      if (i == sorted) extend(sorted * 8);
      probs_.push_back(std::exp(static_cast<double>(cand_[i].value - mx)));
      acc += probs_.back() / total;
      if (acc >= p_.top_p || i == n - 1) {
        keep = i + 1;
        break;
      }
    }
    kept = 0;
    for (int i = 0; i < keep; ++i) kept += probs_[i];
  }
  std::uniform_real_distribution<double> u(0.0, kept);
  double r = u(rng_);
  for (int i = 0; i < keep; ++i) {
    if (i == sorted) extend(sorted * 8);
    const double w = i < static_cast<int>(probs_.size()) ? probs_[i] : std::exp(static_cast<double>(cand_[i].value - mx));
    r -= w;
    if (r <= 0) return cand_[i].id;
  }
  return cand_[keep - 1].id;
}

int32_t Sampler::draw(const PickCandidate* cand, int n) {
  if (n > 0 && cand[0].id < 0) return -1;  // the pick marked a row that is not finite
  const float mx = cand[0].value;
  double sum = 0;
  probs_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sum += probs_[i] = std::exp(static_cast<double>(cand[i].value - mx));
  if (!(sum > 0 && std::isfinite(sum))) return cand[0].id;  // a scaled logit overflowed: the most likely
  if (p_.top_p < 1.f) {
    double acc = 0;
    int keep = n;
    for (int i = 0; i < n; ++i) {
      acc += probs_[i] / sum;
      if (acc >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    sum = 0;
    for (int i = 0; i < n; ++i) sum += probs_[i];
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (int i = 0; i < n; ++i) {
    r -= probs_[i];
    if (r <= 0) return cand[i].id;
  }
  return cand[n - 1].id;
}

void row_logprobs(const float* logits, int vocab, int32_t token, int n, float* token_logprob, int32_t* top_ids,
                  float* top_logprobs) {
  // One pass for the maximum and the n best (kept sorted, most likely first), one for the sum.
  n = std::clamp(n, 0, std::min(kMaxTopLogprobs, vocab));
  int kept = 0;
  float mx = logits[0];
  for (int i = 0; i < vocab; ++i) {
    const float v = logits[i];
    mx = std::max(mx, v);
    if (n == 0 || (kept == n && !(v > top_logprobs[n - 1]))) continue;
    int j = kept < n ? kept++ : n - 1;
    while (j > 0 && v > top_logprobs[j - 1]) {
      top_logprobs[j] = top_logprobs[j - 1];
      top_ids[j] = top_ids[j - 1];
      --j;
    }
    top_logprobs[j] = v;
    top_ids[j] = i;
  }
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = static_cast<double>(mx) + std::log(sum);
  *token_logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  for (int j = 0; j < n; ++j) top_logprobs[j] = static_cast<float>(static_cast<double>(top_logprobs[j]) - lse);
}

}  // namespace lumen
