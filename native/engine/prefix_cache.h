#pragma once
// The prefix cache: full prompt blocks (block_size tokens) keyed by a chained hash of their
// tokens, shared between sequences through the block pool's reference counts, and recurrent-state
// snapshots at fixed points of the prompt. A hybrid model's recurrent state cannot be rebuilt from
// KV blocks, so a cached prefix is reusable only up to a position where a snapshot was taken:
// multiples of the snapshot interval, each prompt's last full block (for prompts that extend it), and
// for a prompt of whole blocks seen before without a usable snapshot, the last block boundary before
// its last token (for exact repeats: `Sequence::repeat_point`).
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/counter_sink.h"
#include "engine/sequence.h"

namespace lumen {

class Backend;

class PrefixCache {
 public:
  // n_snapshots: size of the snapshot pool (the backend's, from init_snapshots); 0 disables caching.
  PrefixCache(BlockPool& blocks, Backend& backend, CounterSink& counters, int block_size, int snapshot_interval,
              int n_snapshots);

  bool enabled() const { return !snaps_.empty(); }
  // Hashes the sequence's full prompt blocks (s.block_hash), then takes the longest cached chain
  // that ends at a snapshot and leaves at least one prompt token to compute: its blocks join the
  // block table, the snapshot is loaded into the sequence's slot. Returns the tokens reused.
  int lookup(Sequence& s);
  // After a step: registers the sequence's newly completed full prompt blocks, and snapshots its
  // state when it stands at a snapshot point.
  void after_step(Sequence& s);
  // The next position after s.n_computed where a prefill chunk must stop so a snapshot can be
  // taken there; INT32_MAX when none is left in the prompt.
  int snapshot_stop(const Sequence& s) const;
  // Cached blocks no sequence holds (reclaimable), and dropping the least recently used of them.
  int evictable() const;
  bool evict_one();

  int cached_blocks() const { return static_cast<int>(by_block_.size()); }
  int snapshots_used() const { return snapshots_used_; }
  int snapshots_total() const { return static_cast<int>(snaps_.size()); }

 private:
  struct CachedBlock {
    uint64_t hash = 0;
    uint64_t last_use = 0;
    std::vector<int32_t> tokens;
  };
  struct Snapshot {
    uint64_t hash = 0;  // of the prompt block it ends at
    int pos = 0;
    uint64_t last_use = 0;
    bool used = false;
  };
  void take_snapshot(Sequence& s, uint64_t hash, int pos);

  BlockPool& blocks_;
  Backend& backend_;
  CounterSink& counters_;
  int block_size_;
  int snapshot_interval_;
  std::unordered_map<uint64_t, int> by_hash_;  // chained hash -> block
  std::unordered_map<int, CachedBlock> by_block_;
  std::vector<Snapshot> snaps_;
  std::unordered_map<uint64_t, int> snap_by_hash_;
  int snapshots_used_ = 0;
  uint64_t use_clock_ = 0;  // least-recently-used order of blocks and snapshots
};

}  // namespace lumen
