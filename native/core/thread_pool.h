#pragma once
// Persistent worker pool: threads are created once and woken per parallel region (no thread
// creation per call). The caller participates as thread 0. Workers spin briefly before sleeping
// on an atomic wait, so back-to-back regions (a decode step is ~100 of them) cost little.
//
// Regions are numbered; region g lives in slot g % kSlots and workers take regions in order. A
// blocking region (run) returns when every thread has finished it. A stealable region
// (run_stealable) returns as soon as all its pieces are in place, even while a worker is still
// inside it: on a shared machine a worker is sometimes descheduled for a millisecond or more while
// it holds a piece, and the caller, having run out of pieces, takes that piece over instead of
// waiting. A worker may therefore lag up to kSlots - 1 regions behind the caller.
//
// An exception thrown by a region's function on any thread (an allocation that fails) does not end
// the process: the region still waits for what it must, and the caller rethrows the first one when
// the region ends (a worker's, from a piece the caller took over, at the end of a later region).
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace lumen {

// Flush denormals to zero on the calling thread (FTZ + DAZ). Decaying recurrent state underflows
// into the denormal range, where x86 arithmetic is ~100x slower; their contribution is below
// float precision anyway.
void set_flush_denormals();

// The pieces of a stealable region. Computing a piece must be repeatable (the same inputs give
// the same outputs) and must not write anything but its outputs, because the caller may compute a
// piece that a descheduled worker is still computing. The object and everything compute() reads
// must stay valid until the workers have left the region (see ThreadPool::acquire_slot).
class StealableWork {
 public:
  virtual ~StealableWork() = default;
  // Computes piece p: in place (direct, the caller) or into worker tid's private outputs.
  virtual void compute(int64_t p, int tid, bool direct) = 0;
  // Copies worker tid's private outputs of piece p in place.
  virtual void commit(int64_t p, int tid) = 0;
};

class ThreadPool {
 public:
  static constexpr int kSlots = 16;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Waits until every worker has left every region (a worker may still be finishing a piece that
  // the caller took over): call before freeing anything a region read.
  void drain();

  // Runs fn(tid, n_threads) on every thread, returns when all are done.
  void run(const std::function<void(int, int)>& fn);

  // Waits until the workers have left the region that last used the next region's slot, and
  // returns that slot: its StealableWork may be refilled now.
  int acquire_slot();
  // Runs pieces [0, n) of `work` as the next region, in `slot` (what acquire_slot() returned, with
  // no region started since; `work` is the slot's). Every thread claims the next piece from the
  // front of the list (0, 1, ...), or with from_both_ends the caller from the front and the workers
  // from the back (n - 1, n - 2, ...) until they meet: a list laid out as two runs that each end in
  // the middle then gives each core a run of its own, in order (see CpuBackend::decode_region).
  // The caller takes over a worker's unfinished piece once it has had nothing else to do for
  // patience_ns. Returns the pieces taken over.
  int64_t run_stealable(int slot, StealableWork& work, int64_t n, int64_t patience_ns, bool from_both_ends = false);
  // parallel_dealt's region: fn(tid, c) for claims c in [0, n) taken in order, or with
  // from_both_ends the caller's from the front and the workers' from the back (as run_stealable).
  void run_dealt(int64_t n, const std::function<void(int, int64_t)>& fn, bool from_both_ends = false);

  // Deals [0, n) out from a shared counter, `per_claim` items at a time, so a thread that runs
  // slower (a core shared with another process) claims fewer instead of holding up the region.
  // fn(begin, end), or fn(tid, begin, end), once per claim. Returns when every claim is done: a
  // worker that has not claimed yet (descheduled, or still in an earlier stealable region) is
  // not waited for, and finds the region over when it gets there.
  template <typename F>
  void parallel_dealt(int64_t n, int64_t per_claim, F&& fn, bool from_both_ends = false) {
    if (n <= 0) return;
    const int64_t n_claims = (n + per_claim - 1) / per_claim;
    auto call = [&](int tid, int64_t c) {
      const int64_t b = c * per_claim, e = b + per_claim < n ? b + per_claim : n;
      if constexpr (std::is_invocable_v<F&, int, int64_t, int64_t>)
        fn(tid, b, e);
      else
        fn(b, e);
    };
    if (n_threads_ == 1 || n_claims <= 1) {
      for (int64_t c = 0; c < n_claims; ++c) call(0, c);
      return;
    }
    const std::function<void(int, int64_t)> f = call;
    run_dealt(n_claims, f, from_both_ends);
  }

  // fn(i) once for each i in [0, n), one item a claim (parallel_dealt's dealing): for items of
  // uneven or unknown cost, such as a step's logits rows finished on the host.
  template <typename F>
  void parallel_each(int64_t n, F&& fn) {
    parallel_dealt(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) fn(i);
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
  // A piece of a stealable region: claimed from `ends`, then computed; a worker's piece becomes
  // kCommitting -> kDone when it wins the race to publish, kTaken when the caller took it over.
  enum PieceState : uint8_t { kOpen = 0, kCommitting = 1, kDone = 2, kTaken = 3 };
  enum class Kind : uint8_t { kJob, kDealt, kStealable };
  struct Slot {
    Kind kind = Kind::kJob;
    const std::function<void(int, int)>* job = nullptr;       // blocking region
    const std::function<void(int, int64_t)>* dealt = nullptr;  // dealt region; valid while a claim is open
    StealableWork* work = nullptr;                            // stealable region
    std::atomic<uint64_t> ends{0};        // the unclaimed pieces (claims) [low 32 bits, high 32 bits)
    bool from_both_ends = false;          // the workers claim from the back
    std::atomic<int64_t> worker_done{0};  // claims finished by workers
    std::unique_ptr<std::atomic<uint8_t>[]> state;
    int64_t state_cap = 0;
    std::atomic<int> pending{0};  // workers that have not left this slot's region yet
  };

  void worker(int tid);
  // Keeps the exception being handled for the caller; rethrown (once) by rethrow_failure().
  void note_failure() noexcept;
  void rethrow_failure();
  void worker_pieces(Slot& s, int tid);
  void worker_dealt(Slot& s, int tid);
  Slot& publish_slot();
  // Claims [0, n) of s open, to be taken from the front, or from both ends (see run_stealable).
  static void open_claims(Slot& s, int64_t n, bool from_both_ends);
  // Opens the next region in s (its fields set): every worker has it pending.
  void publish(Slot& s);

  int n_threads_;
  std::vector<std::thread> threads_;
  Slot slots_[kSlots];
  std::vector<bool> mine_;  // run_stealable: the pieces the caller computed
  std::atomic<uint64_t> generation_{0};  // the last region published
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::mutex failure_mu_;
  std::exception_ptr failure_;
};

}  // namespace lumen
