#pragma once
// Shared pieces of the CUDA backend: checked calls (errors become std::runtime_error, never an
// abort), RAII device and pinned buffers and stream, and the one device allocator whose counters
// feed the engine's memory statistics.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace lumen::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  // Clear a non-sticky error so the next call does not report it again.
  (void)cudaGetLastError();
  std::string f(file);
  const size_t slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  throw std::runtime_error(std::string("CUDA error in ") + what + " (" + f + ":" + std::to_string(line) +
                           "): " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace lumen::cuda

#define LUMEN_CUDA_CHECK(call)                                                      \
  do {                                                                              \
    const cudaError_t lumen_err_ = (call);                                          \
    if (lumen_err_ != cudaSuccess) ::lumen::cuda::throw_cuda(lumen_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports bad launch configurations at once (execution errors surface at
// the next synchronisation, which end_step() does every step).
#define LUMEN_CUDA_LAUNCHED(name)                                                   \
  do {                                                                              \
    const cudaError_t lumen_err_ = cudaGetLastError();                              \
    if (lumen_err_ != cudaSuccess) ::lumen::cuda::throw_cuda(lumen_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)

namespace lumen::cuda {

class DeviceAllocator;

// Owns one cudaMalloc'd range; returns it to its allocator when destroyed. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset() noexcept;

 private:
  friend class DeviceAllocator;
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(owner_, o.owner_);
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  DeviceAllocator* owner_ = nullptr;
};

struct AllocStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
};

// Every device allocation of the backend (weights, KV pool, state slots, activations) goes
// through here; the allocator must outlive its buffers.
class DeviceAllocator {
 public:
  DeviceBuffer alloc(size_t bytes, const char* what) {
    DeviceBuffer b;
    if (bytes == 0) return b;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw std::runtime_error(std::string("out of device memory: ") + what + " needs " + mib(bytes) + " MiB (" +
                               mib(free_b) + " MiB free of " + mib(total_b) + " MiB; " + cudaGetErrorString(e) + ")");
    }
    b.ptr_ = p;
    b.bytes_ = bytes;
    b.owner_ = this;
    stats_.current_bytes += static_cast<int64_t>(bytes);
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    stats_.num_allocs++;
    return b;
  }
  const AllocStats& stats() const { return stats_; }

 private:
  friend class DeviceBuffer;
  void release(void* p, size_t bytes) noexcept {
    (void)cudaFree(p);  // errors while freeing are not recoverable and not worth a throw in a destructor
    stats_.current_bytes -= static_cast<int64_t>(bytes);
    stats_.num_frees++;
  }
  static std::string mib(size_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); }
  AllocStats stats_;
};

inline void DeviceBuffer::reset() noexcept {
  if (ptr_ && owner_) owner_->release(ptr_, bytes_);
  ptr_ = nullptr;
  bytes_ = 0;
  owner_ = nullptr;
}

// Page-locked host memory (staging for uploads of step metadata and logits downloads).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { reset(); }
  void resize(size_t bytes) {
    if (bytes <= bytes_) return;
    reset();
    LUMEN_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
    bytes_ = bytes;
  }
  void reset() noexcept {
    if (ptr_) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// One non-blocking stream, destroyed with its owner.
class Stream {
 public:
  Stream() { LUMEN_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_) (void)cudaStreamDestroy(s_);
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace lumen::cuda
