#pragma once
// 64-byte aligned owning buffer (RAII) for host activations, converted weights and caches.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lumen {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class AlignedBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeThreshold = size_t{4} << 20;

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, bool zero = true) { resize(bytes, zero); }

  void resize(size_t bytes, bool zero = true) {
    // Large buffers (packed weights, KV pool, recurrent state) are 2 MiB aligned and asked to be
    // backed by transparent huge pages: streaming a 1.5 GB model through 4 KiB pages costs a TLB
    // miss every 64 lines (measured: +5-14 % GEMV bandwidth). Best effort; the kernel may refuse.
    const bool huge = bytes >= kHugeThreshold;
    const size_t align = huge ? kHugePage : 64;
    const size_t rounded = (bytes + align - 1) / align * align;
    void* p = rounded ? std::aligned_alloc(align, rounded) : nullptr;
    if (rounded && !p) throw std::bad_alloc();
#if defined(__linux__)
    if (p && huge) madvise(p, rounded, MADV_HUGEPAGE);  // before the first touch
#endif
    if (p && zero) std::memset(p, 0, rounded);
    ptr_.reset(p);
    size_ = bytes;
  }
  void* data() { return ptr_.get(); }
  const void* data() const { return ptr_.get(); }
  template <typename T> T* as() { return static_cast<T*>(ptr_.get()); }
  template <typename T> const T* as() const { return static_cast<const T*>(ptr_.get()); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<void, FreeDeleter> ptr_;
  size_t size_ = 0;
};

}  // namespace lumen
