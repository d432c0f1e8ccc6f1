#pragma once
// Recurrent-state slots: one per admitted sequence (its Gated DeltaNet conv window and state in
// backend memory). The slot count bounds the sequences running at once (--max-seqs).
#include <stdexcept>
#include <vector>

namespace lumen {

class StateSlots {
 public:
  explicit StateSlots(int n) : total_(n) {
    free_.reserve(n);
    for (int s = n - 1; s >= 0; --s) free_.push_back(s);  // slot 0 is taken first
  }
  int total() const { return total_; }
  int free_count() const { return static_cast<int>(free_.size()); }
  int used() const { return total_ - free_count(); }
  bool any_free() const { return !free_.empty(); }

  int take() {
    if (free_.empty()) throw std::logic_error("no free state slot");
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  void release(int s) { free_.push_back(s); }

 private:
  int total_;
  std::vector<int> free_;
};

}  // namespace lumen
