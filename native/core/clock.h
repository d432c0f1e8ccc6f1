#pragma once
// The engine's monotonic clock: every timestamp that reaches the CLI comes from here.
#include <chrono>
#include <cstdint>

namespace lumen {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double ns_to_ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace lumen
