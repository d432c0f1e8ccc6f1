#pragma once
// Memory for the weights' in-memory copies (packed panels, row-major copies): chunks of 2 MiB
// aligned memory asked to be backed by transparent huge pages, handed out in order. A matrix of a
// few MiB then sits on huge pages too (an AlignedBuffer of its own gets them only from 4 MiB on),
// so a decode stream through it misses the TLB once per 2 MiB instead of once per 4 KiB page, and
// the matrices of one layer lie side by side. Figures: docs/performance.md.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/aligned.h"

namespace lumen {

class WeightArena {
 public:
  static constexpr size_t kChunk = size_t{32} << 20;
  static constexpr size_t kOwn = kChunk / 4;  // larger requests get a buffer of their own

  // `bytes` of uninitialised memory, 64-byte aligned (2 MiB aligned for a buffer of its own),
  // valid as long as the arena.
  void* alloc(size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (bytes >= kOwn) {
      buffers_.push_back(std::make_unique<AlignedBuffer>(bytes, false));
      return buffers_.back()->data();
    }
    if (!chunk_ || used_ + bytes > kChunk) {
      buffers_.push_back(std::make_unique<AlignedBuffer>(kChunk, false));
      chunk_ = buffers_.back()->as<unsigned char>();
      used_ = 0;
    }
    void* p = chunk_ + used_;
    used_ += bytes;
    return p;
  }

 private:
  std::vector<std::unique_ptr<AlignedBuffer>> buffers_;
  unsigned char* chunk_ = nullptr;  // the chunk small requests come from
  size_t used_ = 0;
};

}  // namespace lumen
