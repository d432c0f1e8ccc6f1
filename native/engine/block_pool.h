#pragma once
// KV block pool: fixed-size blocks of `block_size` token positions for every full-attention layer,
// handed out by id with reference counts (a block can be shared by sequences through the prefix
// cache). Free blocks are kept on a stack so recently freed (cache-warm) blocks are reused first.
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace lumen {

class BlockPool {
 public:
  explicit BlockPool(int n_blocks) : refs_(n_blocks, 0) {
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
  void retain(int b) { ++refs_[b]; }
  void release(int b) {
    if (refs_[b] <= 0) throw std::logic_error("KV block released twice");
    if (--refs_[b] == 0) free_.push_back(b);
  }
  int refs(int b) const { return refs_[b]; }
  uint64_t allocs() const { return allocs_; }

 private:
  std::vector<int> refs_;
  std::vector<int> free_;
  uint64_t allocs_ = 0;
};

}  // namespace lumen
