#pragma once
// Accumulated per-op wall times (calls and nanoseconds per op name), shared by the backends'
// profilers and the engine's pipeline stages.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace lumen {

class OpProfile {
 public:
  void record(const std::string& name, const std::string& group, uint64_t calls, uint64_t ns) {
    OpStat& s = stats_[name];
    if (s.name.empty()) {
      s.name = name;
      s.group = group;
    }
    s.calls += calls;
    s.ns += ns;
  }
  // Everything recorded since the last take(), in name order; clears.
  std::vector<OpStat> take() {
    std::vector<OpStat> r;
    for (auto& [k, v] : stats_) r.push_back(v);
    stats_.clear();
    return r;
  }

 private:
  std::map<std::string, OpStat> stats_;
};

}  // namespace lumen
