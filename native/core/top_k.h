#pragma once
// The k best candidates of a logits row for top-k sampling: value = logit / temperature, sorted
// largest first, ties by lower id. The host sampler draws from them; the device pick kernel
// (backend/cuda/k_sample.cu) must give exactly these, which its emulation check compares.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace lumen {

struct PickCandidate {
  float value;
  int32_t id;
};

inline bool candidate_before(const PickCandidate& a, const PickCandidate& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// Fills `work` with the candidates of the row (ids in `banned`, sorted ascending, left out), sorted;
// keeps the best k (k <= 0: all). Returns how many were kept.
inline int top_candidates(const float* logits, int vocab, int k, float temperature, const std::vector<int32_t>* banned,
                          std::vector<PickCandidate>& work) {
  work.clear();
  work.reserve(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) {
    if (banned && std::binary_search(banned->begin(), banned->end(), i)) continue;
    work.push_back({logits[i] / temperature, i});
  }
  const size_t n = work.size();
  if (k > 0 && static_cast<size_t>(k) < n) {
    std::partial_sort(work.begin(), work.begin() + k, work.end(), candidate_before);
    work.resize(static_cast<size_t>(k));
  } else {
    std::sort(work.begin(), work.end(), candidate_before);
  }
  return static_cast<int>(work.size());
}

}  // namespace lumen
