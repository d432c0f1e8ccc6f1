#include "core/thread_pool.h"

#include <immintrin.h>

#include <stdexcept>
#include <utility>

#include "core/clock.h"

namespace lumen {

void set_flush_denormals() { _mm_setcsr(_mm_getcsr() | 0x8040); }

namespace {
// Spin on a condition; after a while yield the core (the thread we wait for may have been
// descheduled on a busy machine, and it may need this core).
template <typename Pred>
void spin_until(Pred&& done) {
  for (int spin = 0; !done(); ++spin) {
    if (spin < 4000)
      _mm_pause();
    else
      std::this_thread::yield();
  }
}
// The next unclaimed piece of a stealable region, from the front or the back of [low, high) of
// ends, or -1 when none is left.
int64_t claim_piece(std::atomic<uint64_t>& ends, bool front) {
  uint64_t e = ends.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t lo = e & 0xffffffffu, hi = e >> 32;
    if (lo >= hi) return -1;
    const uint64_t next = front ? e + 1 : e - (uint64_t{1} << 32);
    if (ends.compare_exchange_weak(e, next, std::memory_order_relaxed)) return static_cast<int64_t>(front ? lo : hi - 1);
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  try {
    threads_.reserve(n_threads_ - 1);
    for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { worker(t); });
  } catch (...) {
    // A thread the system refused (a container's limit): the ones started must be joined before
    // the vector goes, or their destructors end the process.
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    for (auto& th : threads_) th.join();
    throw;
  }
}

void ThreadPool::note_failure() noexcept {
  try {
    std::lock_guard<std::mutex> lk(failure_mu_);
    if (!failure_) failure_ = std::current_exception();
  } catch (...) {
  }
  failed_.store(true, std::memory_order_release);
}

void ThreadPool::rethrow_failure() {
  if (!failed_.load(std::memory_order_acquire)) return;
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lk(failure_mu_);
    e = std::exchange(failure_, nullptr);
    failed_.store(false, std::memory_order_relaxed);
  }
  if (e) std::rethrow_exception(e);
}

ThreadPool::~ThreadPool() {
  drain();
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& th : threads_) th.join();
}

int ThreadPool::acquire_slot() {
  const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
  Slot& s = slots_[g % kSlots];
  spin_until([&] { return s.pending.load(std::memory_order_acquire) == 0; });
  return static_cast<int>(g % kSlots);
}

void ThreadPool::drain() {
  for (Slot& s : slots_) spin_until([&] { return s.pending.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::open_claims(Slot& s, int64_t n, bool from_both_ends) {
  if (n > int64_t{0xffffffff}) throw std::length_error("ThreadPool: more than 2^32 - 1 pieces in one region");
  s.ends.store(static_cast<uint64_t>(n) << 32, std::memory_order_relaxed);
  s.from_both_ends = from_both_ends;
}

ThreadPool::Slot& ThreadPool::publish_slot() { return slots_[acquire_slot()]; }

void ThreadPool::publish(Slot& s) {
  s.pending.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  generation_.notify_all();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  Slot& s = publish_slot();
  s.kind = Kind::kJob;
  s.job = &fn;
  publish(s);
  try {
    fn(0, n_threads_);
  } catch (...) {
    note_failure();  // the workers still run fn: wait for them before it goes
  }
  spin_until([&] { return s.pending.load(std::memory_order_acquire) == 0; });
  rethrow_failure();
}

int64_t ThreadPool::run_stealable(int slot, StealableWork& work, int64_t n, int64_t patience_ns, bool from_both_ends) {
  if (n <= 0) return 0;
  if (n_threads_ == 1) {
    for (int64_t p = 0; p < n; ++p) work.compute(p, 0, true);
    return 0;
  }
  // A work object is reused only after the workers have left its slot, so it must run in it.
  if (static_cast<uint64_t>(slot) != (generation_.load(std::memory_order_relaxed) + 1) % kSlots)
    throw std::logic_error("ThreadPool::run_stealable: a region was started after acquire_slot()");
  Slot& s = publish_slot();  // already free: the caller acquired it to fill `work`
  if (s.state_cap < n) {
    s.state = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(n));
    s.state_cap = n;
  }
  for (int64_t p = 0; p < n; ++p) s.state[p].store(kOpen, std::memory_order_relaxed);
  s.kind = Kind::kStealable;
  s.work = &work;
  open_claims(s, n, from_both_ends);
  publish(s);
  // The caller's own pieces are noted here, not in the shared states: writing those would bounce
  // their cache lines between the cores on every piece.
  mine_.assign(static_cast<size_t>(n), false);
  for (;;) {
    const int64_t p = claim_piece(s.ends, true);
    if (p < 0) break;
    try {
      work.compute(p, 0, true);
    } catch (...) {
      note_failure();
    }
    mine_[static_cast<size_t>(p)] = true;
  }
  // Every piece is claimed. Wait for the workers' pieces; take over one that is still open after
  // patience_ns (its worker is descheduled or far behind). A worker past its own CAS is publishing
  // a finished piece, which takes a moment, so that one is waited for.
  int64_t taken = 0;
  const int64_t idle_from = now_ns();
  for (int64_t p = 0; p < n; ++p) {
    if (mine_[static_cast<size_t>(p)]) continue;
    int polls = 0;  // the clock is read every 64th poll
    spin_until([&] {
      uint8_t st = s.state[p].load(std::memory_order_acquire);
      if (st == kDone) return true;
      if (st != kOpen || (++polls & 63) != 0 || now_ns() - idle_from <= patience_ns ||
          !s.state[p].compare_exchange_strong(st, kTaken, std::memory_order_acq_rel))
        return false;
      try {
        work.compute(p, 0, true);
      } catch (...) {
        note_failure();
      }
      ++taken;
      return true;
    });
  }
  rethrow_failure();
  return taken;
}

void ThreadPool::run_dealt(int64_t n, const std::function<void(int, int64_t)>& fn, bool from_both_ends) {
  Slot& s = publish_slot();
  s.kind = Kind::kDealt;
  s.dealt = &fn;
  open_claims(s, n, from_both_ends);
  s.worker_done.store(0, std::memory_order_relaxed);
  publish(s);
  int64_t mine = 0;
  for (;;) {
    const int64_t c = claim_piece(s.ends, true);
    if (c < 0) break;
    try {
      fn(0, c);
    } catch (...) {
      note_failure();
    }
    ++mine;
  }
  // Only a made claim is waited for; fn stays valid until then (a worker calls it only after a
  // successful claim, and is done with it before it counts the claim).
  spin_until([&] { return s.worker_done.load(std::memory_order_acquire) == n - mine; });
  rethrow_failure();
}

void ThreadPool::worker_dealt(Slot& s, int tid) {
  for (;;) {
    const int64_t c = claim_piece(s.ends, !s.from_both_ends);
    if (c < 0) return;
    try {
      (*s.dealt)(tid, c);
    } catch (...) {
      note_failure();
    }
    s.worker_done.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::worker_pieces(Slot& s, int tid) {
  for (;;) {
    const int64_t p = claim_piece(s.ends, !s.from_both_ends);
    if (p < 0) return;
    std::exception_ptr failed;
    try {
      s.work->compute(p, tid, false);
    } catch (...) {
      failed = std::current_exception();
    }
    uint8_t open = kOpen;
    if (s.state[p].compare_exchange_strong(open, kCommitting, std::memory_order_acq_rel)) {
      // Only the piece that is published counts: one the caller took over was computed there.
      try {
        if (failed) std::rethrow_exception(failed);
        s.work->commit(p, tid);
      } catch (...) {
        note_failure();
      }
      s.state[p].store(kDone, std::memory_order_release);  // failed or not: the caller must not wait
    }
    // else the caller took the piece over: these outputs are dropped.
  }
}

void ThreadPool::worker(int tid) {
  set_flush_denormals();
  uint64_t seen = 0;  // the last region this thread has been through; regions are taken in order
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
    if (stop_.load(std::memory_order_acquire)) return;
    ++seen;
    Slot& s = slots_[seen % kSlots];
    switch (s.kind) {
      case Kind::kJob:
        try {
          (*s.job)(tid, n_threads_);
        } catch (...) {
          note_failure();
        }
        break;
      case Kind::kDealt: worker_dealt(s, tid); break;
      case Kind::kStealable: worker_pieces(s, tid); break;
    }
    s.pending.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace lumen
