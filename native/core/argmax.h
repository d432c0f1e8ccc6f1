#pragma once
// Index of the largest value (lowest index on ties; NaN never wins unless it is x[0]): the
// portable greedy pick, and the reference the vectorised CPU kernel matches.
#include <cstdint>

namespace lumen {

inline int32_t argmax_scalar(const float* x, int64_t n) {
  int32_t best = 0;
  float bv = x[0];
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > bv) {
      bv = x[i];
      best = static_cast<int32_t>(i);
    }
  return best;
}

}  // namespace lumen
