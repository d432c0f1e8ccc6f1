#include "engine/sampler.h"

#include "core/argmax.h"

#include <algorithm>
#include <cmath>

namespace lumen {

int32_t Sampler::sample(const float* logits, int vocab) {
  if (p_.temperature <= 0.f) return argmax_scalar(logits, vocab);
  cand_.clear();
  cand_.reserve(vocab);
  for (int i = 0; i < vocab; ++i) cand_.emplace_back(logits[i] / p_.temperature, i);
  size_t n = cand_.size();
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = static_cast<size_t>(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const float mx = cand_[0].first;
  double sum = 0;
  std::vector<double> probs(n);
  for (size_t i = 0; i < n; ++i) sum += probs[i] = std::exp(static_cast<double>(cand_[i].first - mx));
  if (p_.top_p < 1.f) {
    double acc = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      acc += probs[i] / sum;
      if (acc >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    sum = 0;
    for (size_t i = 0; i < n; ++i) sum += probs[i];
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= probs[i];
    if (r <= 0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace lumen
