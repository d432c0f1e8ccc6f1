#pragma once
// Index of the largest value (lowest index on ties), or -1 when the row holds a value that is not
// finite (NaN or infinity): the portable greedy pick, and the reference the vectorised CPU kernel
// and the CUDA pick kernel match. A linear head over finite activations gives finite logits, so a
// NaN or infinity means broken weights or an overflow: the engine fails the request rather than
// pick a token from it.
#include <cmath>
#include <cstdint>

namespace lumen {

inline bool row_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

inline int32_t argmax_scalar(const float* x, int64_t n) {
  if (n <= 0) return 0;
  if (!row_finite(x, n)) return -1;
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
