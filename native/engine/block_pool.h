#pragma once
// KV block pool: fixed-size blocks of `block_size` token positions for every full-attention layer,
// handed out by id with reference counts (a block can be shared by sequences through the prefix
// cache). Free blocks are kept on a stack so recently freed (cache-warm) blocks are reused first.
// The prefix cache marks the blocks it holds a reference on; the pool counts those it alone holds
// (reclaimable: the cache can evict them), kept up to date on every reference change.
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace lumen {

class BlockPool {
 public:
  explicit BlockPool(int n_blocks) : refs_(n_blocks, 0), cached_(n_blocks, 0) {
    free_.reserve(n_blocks);
    for (int i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
  }
  int total() const { return static_cast<int>(refs_.size()); }
  int free_count() const { return static_cast<int>(free_.size()); }
  int used() const { return total() - free_count(); }

  // Returns -1 when empty.
  int alloc() {
    if (free_.empty()) return -1;
    const int b = free_.back();
    free_.pop_back();
    refs_[b] = 1;
    ++allocs_;
    return b;
  }
  // Takes a specific free block (contiguous layout); false if it is in use.
  bool take(int b) {
    if (refs_[b] != 0) return false;
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i] == b) {
        free_[i] = free_.back();
        free_.pop_back();
        break;
      }
    refs_[b] = 1;
    ++allocs_;
    return true;
  }
  void retain(int b) {
    if (cached_[b] && refs_[b] == 1) --cache_only_;
    ++refs_[b];
  }
  void release(int b) {
    if (refs_[b] <= 0) throw std::logic_error("KV block released twice");
    if (cached_[b] && refs_[b] == 1) throw std::logic_error("KV block released while the prefix cache holds it");
    if (--refs_[b] == 0) {
      free_.push_back(b);
    } else if (cached_[b] && refs_[b] == 1) {
      ++cache_only_;
    }
  }
  // The prefix cache took a reference on b (mark after its retain), or is about to drop it (unmark
  // before its release).
  void mark_cached(int b) {
    if (cached_[b]) throw std::logic_error("KV block cached twice");
    cached_[b] = 1;
    if (refs_[b] == 1) ++cache_only_;
  }
  void unmark_cached(int b) {
    if (!cached_[b]) throw std::logic_error("KV block not cached");
    if (refs_[b] == 1) --cache_only_;
    cached_[b] = 0;
  }
  int refs(int b) const { return refs_[b]; }
  // Blocks only the prefix cache holds: in use, but reclaimable.
  int cache_only() const { return cache_only_; }
  uint64_t allocs() const { return allocs_; }

 private:
  std::vector<int> refs_;
  std::vector<uint8_t> cached_;
  std::vector<int> free_;
  int cache_only_ = 0;
  uint64_t allocs_ = 0;
};

}  // namespace lumen
