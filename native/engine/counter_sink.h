#pragma once
// Where the scheduler and the prefix cache report what they did: the engine turns each call into
// its published counters (under its lock, at once, so a caller that has seen an event reads
// counters that include it). The pools' sizes are not reported here: the engine reads them from
// the pools themselves when memory_changed() says they moved.
#include <cstdint>

namespace lumen {

class CounterSink {
 public:
  virtual ~CounterSink() = default;
  virtual void count_allocs(uint64_t n) = 0;   // KV block runs, blocks, slots, snapshots taken
  virtual void count_park() = 0;               // a request started waiting for memory
  virtual void count_preemption() = 0;
  virtual void count_eviction() = 0;           // a cached block dropped to make room
  virtual void count_prefix_hit(int tokens) = 0;
  virtual void count_prefix_admit(int tokens) = 0;
  virtual void memory_changed() = 0;           // blocks, slots or snapshots in use changed
};

}  // namespace lumen
