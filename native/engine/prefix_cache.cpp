#include "engine/prefix_cache.h"

#include <algorithm>
#include <climits>

#include "backend/backend.h"

namespace lumen {
namespace {

uint64_t mix_hash(uint64_t h, const int32_t* t, int n) {
  // FNV-1a over the ids, seeded with the previous block's hash (chained).
  h ^= 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

PrefixCache::PrefixCache(BlockPool& blocks, Backend& backend, CounterSink& counters, int block_size,
                         int snapshot_interval, int n_snapshots)
    : blocks_(blocks),
      backend_(backend),
      counters_(counters),
      block_size_(block_size),
      snapshot_interval_(snapshot_interval),
      snaps_(static_cast<size_t>(std::max(0, n_snapshots))) {}

int PrefixCache::lookup(Sequence& s) {
  if (!enabled()) return 0;
  const int bs = block_size_;
  const int full = s.prompt_len / bs;
  s.block_hash.resize(full);
  uint64_t h = 0;
  for (int i = 0; i < full; ++i) s.block_hash[i] = h = mix_hash(h, s.tokens.data() + i * bs, bs);
  int matched = 0;
  for (int i = 0; i < full; ++i) {
    auto it = by_hash_.find(s.block_hash[i]);
    if (it == by_hash_.end()) break;
    const auto& cb = by_block_[it->second];
    if (!std::equal(cb.tokens.begin(), cb.tokens.end(), s.tokens.begin() + i * bs)) break;
    matched = i + 1;
  }
  // The longest matched chain that ends at a snapshot and leaves a prompt token to compute (its
  // logits start the generation).
  int use = 0, snap = -1;
  for (int nb = std::min(matched, (s.prompt_len - 1) / bs); nb > 0; --nb) {
    auto it = snap_by_hash_.find(s.block_hash[nb - 1]);
    if (it != snap_by_hash_.end() && snaps_[it->second].pos == nb * bs) {
      use = nb;
      snap = it->second;
      break;
    }
  }
  // An exact repeat can use blocks up to the last boundary before the prompt's last token; when
  // those are cached but no snapshot is there (a prompt of whole blocks snapshots its end, which a
  // repeat cannot use), this run snapshots that point, at the cost of one more prefill stop, taken
  // only by prompts seen before.
  const int rep_blocks = (s.prompt_len - 1) / bs;
  s.repeat_point = rep_blocks > use && matched >= rep_blocks ? rep_blocks * bs : 0;
  if (use == 0) return 0;
  for (int i = 0; i < use; ++i) {
    const int b = by_hash_[s.block_hash[i]];
    blocks_.retain(b);
    by_block_[b].last_use = ++use_clock_;
    s.block_table.push_back(b);
  }
  backend_.load_state(snap, s.slot);
  snaps_[snap].last_use = ++use_clock_;
  s.n_computed = use * bs;
  s.cached_blocks = use;
  s.cached_prompt_tokens = use * bs;
  counters_.count_prefix_hit(use * bs);
  return use * bs;
}

void PrefixCache::after_step(Sequence& s) {
  if (!enabled()) return;
  const int bs = block_size_;
  const int full_done = std::min(s.n_computed, s.prompt_len) / bs;
  int admitted = 0;
  for (int i = s.cached_blocks; i < full_done && i < static_cast<int>(s.block_hash.size()); ++i) {
    const uint64_t h = s.block_hash[i];
    if (!by_hash_.count(h)) {
      const int blk = s.block_table[i];
      blocks_.retain(blk);
      blocks_.mark_cached(blk);
      CachedBlock cb;
      cb.hash = h;
      cb.last_use = ++use_clock_;
      cb.tokens.assign(s.tokens.begin() + i * bs, s.tokens.begin() + (i + 1) * bs);
      by_hash_[h] = blk;
      by_block_[blk] = std::move(cb);
      ++admitted;
    }
    s.cached_blocks = i + 1;
  }
  if (admitted) counters_.count_prefix_admit(admitted * bs);
  const int pos = s.n_computed;
  const bool at_point = pos > 0 && pos <= s.prompt_len && pos % bs == 0 &&
                        (pos % snapshot_interval_ == 0 || pos == s.prompt_len / bs * bs || pos == s.repeat_point);
  if (at_point) {
    const uint64_t h = s.block_hash[pos / bs - 1];
    if (!snap_by_hash_.count(h)) take_snapshot(s, h, pos);
  }
}

void PrefixCache::take_snapshot(Sequence& s, uint64_t hash, int pos) {
  // A free snapshot buffer, else the least recently used one.
  int victim = -1;
  uint64_t oldest = UINT64_MAX;
  for (int i = 0; i < static_cast<int>(snaps_.size()); ++i) {
    if (!snaps_[i].used) {
      victim = i;
      break;
    }
    if (snaps_[i].last_use < oldest) {
      oldest = snaps_[i].last_use;
      victim = i;
    }
  }
  const bool fresh = !snaps_[victim].used;
  if (!fresh) snap_by_hash_.erase(snaps_[victim].hash);
  backend_.save_state(s.slot, victim);
  snaps_[victim] = Snapshot{hash, pos, ++use_clock_, true};
  snap_by_hash_[hash] = victim;
  if (fresh) ++snapshots_used_;
  counters_.count_allocs(1);
  counters_.memory_changed();
}

int PrefixCache::snapshot_stop(const Sequence& s) const {
  if (!enabled()) return INT32_MAX;
  const int bs = block_size_;
  const int last_full = s.prompt_len / bs * bs;
  int next = (s.n_computed / snapshot_interval_ + 1) * snapshot_interval_;
  if (last_full > s.n_computed && last_full < next) next = last_full;
  if (s.repeat_point > s.n_computed && s.repeat_point < next) next = s.repeat_point;
  return next < s.prompt_len ? next : INT32_MAX;
}

int PrefixCache::evictable() const { return blocks_.cache_only(); }

bool PrefixCache::evict_one() {
  int victim = -1;
  uint64_t oldest = UINT64_MAX;
  for (const auto& [b, cb] : by_block_)
    if (blocks_.refs(b) == 1 && cb.last_use < oldest) {
      oldest = cb.last_use;
      victim = b;
    }
  if (victim < 0) return false;
  by_hash_.erase(by_block_[victim].hash);
  by_block_.erase(victim);
  blocks_.unmark_cached(victim);
  blocks_.release(victim);
  counters_.count_eviction();
  counters_.memory_changed();
  return true;
}

}  // namespace lumen
