#include "core/thread_pool.h"

#include <immintrin.h>

namespace lumen {

void set_flush_denormals() { _mm_setcsr(_mm_getcsr() | 0x8040); }

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  threads_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& th : threads_) th.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  // Wait for the workers; regions are short, so spin, but yield the core when a worker is slow to
  // finish (it may have been descheduled on a busy machine).
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 4000)
      _mm_pause();
    else
      std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::worker(int tid) {
  set_flush_denormals();
  uint64_t seen = 0;  // the generation before any region; a region may start before this thread runs
  for (;;) {
    // Spin a while for the next region, then sleep until the generation changes.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 20000; ++spin) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(tid, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace lumen
