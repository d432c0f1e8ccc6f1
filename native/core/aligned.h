#pragma once
// 64-byte aligned owning buffer (RAII) for host activations, converted weights and caches.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace lumen {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, bool zero = true) { resize(bytes, zero); }

  void resize(size_t bytes, bool zero = true) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !p) throw std::bad_alloc();
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
