#pragma once
// Persistent worker pool: threads are created once and woken per parallel region (no thread
// creation per call). The caller participates as thread 0. Workers spin briefly before sleeping
// on an atomic wait, so back-to-back regions (a decode step is ~100 of them) cost little.
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace lumen {

// Flush denormals to zero on the calling thread (FTZ + DAZ). Decaying recurrent state underflows
// into the denormal range, where x86 arithmetic is ~100x slower; their contribution is below
// float precision anyway.
void set_flush_denormals();

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(tid, n_threads) on every thread, returns when all are done.
  void run(const std::function<void(int, int)>& fn);

  // Deals [0, n) out in chunks of `chunk` from a shared counter, so a thread that runs slower (a
  // core shared with another process) takes fewer chunks instead of holding up the region.
  template <typename F>
  void parallel_chunks(int64_t n, int64_t chunk, F&& fn) {
    if (n <= 0) return;
    const int64_t nchunks = (n + chunk - 1) / chunk;
    if (n_threads_ == 1 || nchunks <= 1) {
      fn(int64_t{0}, n);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int, int) {
      for (;;) {
        const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
        if (c >= nchunks) return;
        const int64_t b = c * chunk;
        fn(b, b + chunk < n ? b + chunk : n);
      }
    });
  }

  // Splits [0, n) into contiguous ranges, one per thread; fn(begin, end).
  template <typename F>
  void parallel_for(int64_t n, F&& fn, int64_t grain = 1) {
    if (n <= 0) return;
    const int64_t max_parts = (n + grain - 1) / grain;
    if (n_threads_ == 1 || max_parts <= 1) {
      fn(int64_t{0}, n);
      return;
    }
    run([&](int tid, int nth) {
      const int64_t parts = max_parts < nth ? max_parts : nth;
      if (tid >= parts) return;
      const int64_t per = (max_parts + parts - 1) / parts * grain;
      const int64_t b = tid * per;
      const int64_t e = b + per < n ? b + per : n;
      if (b < e) fn(b, e);
    });
  }

 private:
  void worker(int tid);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace lumen
