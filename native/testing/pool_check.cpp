#include "testing/pool_check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace lumen {
namespace {

using Clock = std::chrono::steady_clock;
// A handshake that has not happened after this long is a defect in the pool: the check counts it
// and goes on instead of hanging the test run.
constexpr auto kHandshakeLimit = std::chrono::seconds(10);

// Spins (yielding) until done() or the limit; false on timeout.
template <typename Pred>
bool wait_for(Pred&& done) {
  const auto until = Clock::now() + kHandshakeLimit;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

// Piece p of region r writes out[p * kPer + i] = r * 1000 + p (a worker into its own shadow).
//
// In every third region the situation under test is forced, not left to the scheduler: the first
// worker to take a piece announces it (`held`) and then stays inside that piece until the caller
// has taken it over, as a core descheduled mid-piece would; and the caller, in its own first
// piece, waits until some worker holds one, so it cannot finish every piece itself before a worker
// wakes. Each such region therefore has exactly one piece taken over, on any machine and load.
struct CheckWork final : StealableWork {
  static constexpr int64_t kPer = 64;
  std::vector<int64_t>* out = nullptr;
  std::vector<std::vector<int64_t>>* shadows = nullptr;
  int64_t region = 0;
  bool stall = false;
  std::atomic<bool> stalled{false};       // a worker has claimed the stalling role
  std::atomic<int64_t> held{-1};          // the piece that worker holds
  std::atomic<bool> taken_over{false};    // the caller has computed that piece itself
  bool caller_waited = false;             // caller only: its first piece waited for `held`
  std::atomic<int>* timeouts = nullptr;

  void reset(int64_t r, bool s) {
    region = r;
    stall = s;
    stalled.store(false);
    held.store(-1);
    taken_over.store(false);
    caller_waited = false;
  }

  void compute(int64_t p, int tid, bool direct) override {
    if (stall && direct) {
      if (!caller_waited) {
        caller_waited = true;
        if (!wait_for([&] { return held.load(std::memory_order_acquire) >= 0; })) timeouts->fetch_add(1);
      }
      if (p == held.load(std::memory_order_acquire)) taken_over.store(true, std::memory_order_release);
    } else if (stall && !stalled.exchange(true)) {
      held.store(p, std::memory_order_release);
      if (!wait_for([&] { return taken_over.load(std::memory_order_acquire); })) timeouts->fetch_add(1);
    }
    int64_t* dst = direct ? out->data() : (*shadows)[static_cast<size_t>(tid)].data();
    for (int64_t i = 0; i < kPer; ++i) dst[p * kPer + i] = region * 1000 + p;
  }
  void commit(int64_t p, int tid) override {
    const int64_t* src = (*shadows)[static_cast<size_t>(tid)].data();
    std::copy(src + p * kPer, src + (p + 1) * kPer, out->data() + p * kPer);
  }
};

// A stealable region whose pieces throw where the scenario says: on a worker (direct == false), on
// the caller, or on a worker that is holding a piece the caller takes over (that worker's exception
// must not count: the piece was computed by the caller). The caller's first piece waits until a
// worker has claimed one, so a worker always computes a piece (forced, not left to the scheduler).
struct ThrowingWork final : StealableWork {
  enum class Mode { kWorkerThrows, kCallerThrows, kTakenOverWorkerThrows };
  Mode mode = Mode::kWorkerThrows;
  std::atomic<int64_t> held{-1};
  std::atomic<bool> taken_over{false};
  std::atomic<bool> caller_started{false};  // workers' pieces wait for it, so the caller gets pieces too
  bool caller_waited = false;
  std::atomic<int>* timeouts = nullptr;

  void compute(int64_t p, int, bool direct) override {
    if (direct) {
      if (!caller_waited) {
        caller_waited = true;
        caller_started.store(true, std::memory_order_release);
        if (!wait_for([&] { return held.load(std::memory_order_acquire) >= 0; })) timeouts->fetch_add(1);
        if (mode == Mode::kCallerThrows) throw std::runtime_error("caller piece failed");
      }
      if (p == held.load(std::memory_order_acquire)) taken_over.store(true, std::memory_order_release);
      return;
    }
    if (!wait_for([&] { return caller_started.load(std::memory_order_acquire); })) timeouts->fetch_add(1);
    int64_t none = -1;
    if (!held.compare_exchange_strong(none, p)) return;  // only the first worker piece plays the scenario
    if (mode == Mode::kTakenOverWorkerThrows) {
      if (!wait_for([&] { return taken_over.load(std::memory_order_acquire); })) timeouts->fetch_add(1);
      throw std::runtime_error("late worker piece failed");
    }
    if (mode == Mode::kWorkerThrows) throw std::runtime_error("worker piece failed");
  }
  void commit(int64_t, int) override {}
};

}  // namespace

Napi::Value PoolFailureCheck(const Napi::CallbackInfo& info) {
  // Each scenario: the message the caller caught ("" when none), then whether the pool still runs a
  // plain blocking region on every thread afterwards without an exception.
  Napi::Env env = info.Env();
  const int threads = info.Length() > 0 && info[0].IsNumber() ? std::max(2, info[0].As<Napi::Number>().Int32Value()) : 2;
  std::atomic<int> timeouts{0};
  auto o = Napi::Object::New(env);
  ThreadPool pool(threads);
  auto caught = [&](auto&& region) -> std::string {
    try {
      region();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  auto usable = [&] {
    std::vector<int> ran(static_cast<size_t>(threads), 0);
    const std::string e = caught([&] { pool.run([&](int tid, int) { ++ran[static_cast<size_t>(tid)]; }); });
    return e.empty() && std::all_of(ran.begin(), ran.end(), [](int h) { return h == 1; });
  };
  auto report = [&](const char* name, const std::string& msg) {
    auto r = Napi::Object::New(env);
    r.Set("caught", msg);
    r.Set("usableAfter", usable());
    o.Set(name, r);
  };
  report("runWorker", caught([&] {
    pool.run([&](int tid, int) {
      if (tid == 1) throw std::runtime_error("worker job failed");
    });
  }));
  report("runCaller", caught([&] {
    pool.run([&](int tid, int) {
      if (tid == 0) throw std::runtime_error("caller job failed");
    });
  }));
  std::atomic<int> dealt_calls{0};
  report("dealt", caught([&] {
    pool.parallel_dealt(int64_t{37}, int64_t{1}, [&](int64_t b, int64_t) {
      dealt_calls.fetch_add(1);
      if (b == 5) throw std::runtime_error("claim 5 failed");
    });
  }));
  o.Set("dealtCalls", dealt_calls.load());
  const std::pair<const char*, ThrowingWork::Mode> stealable[] = {
      {"stealableWorker", ThrowingWork::Mode::kWorkerThrows},
      {"stealableCaller", ThrowingWork::Mode::kCallerThrows},
      {"stealableTakenOver", ThrowingWork::Mode::kTakenOverWorkerThrows},
  };
  std::vector<ThrowingWork> works(ThreadPool::kSlots);
  for (const auto& [name, mode] : stealable) {
    const std::string msg = caught([&] {
      const int slot = pool.acquire_slot();
      ThrowingWork& w = works[static_cast<size_t>(slot)];
      w.mode = mode;
      w.held.store(-1);
      w.taken_over.store(false);
      w.caller_started.store(false);
      w.caller_waited = false;
      w.timeouts = &timeouts;
      // Patience: the caller takes a held piece over at once in the taken-over scenario, never in
      // the others (the worker must be the one to finish it).
      const int64_t patience = mode == ThrowingWork::Mode::kTakenOverWorkerThrows ? 0 : int64_t{60} * 1'000'000'000;
      pool.run_stealable(slot, w, 8, patience);
    });
    report(name, msg);
  }
  pool.drain();
  o.Set("handshakeTimeouts", timeouts.load());
  return o;
}

Napi::Value PoolCheck(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int threads = info.Length() > 0 && info[0].IsNumber() ? std::max(2, info[0].As<Napi::Number>().Int32Value()) : 2;
  const int regions = info.Length() > 1 && info[1].IsNumber() ? std::max(1, info[1].As<Napi::Number>().Int32Value()) : 120;
  constexpr int64_t kPieces = 24;
  std::vector<int64_t> out(kPieces * CheckWork::kPer, -1);
  std::vector<std::vector<int64_t>> shadows(static_cast<size_t>(threads), std::vector<int64_t>(out.size()));
  int64_t taken = 0, taken_in_stalls = 0, stall_regions = 0, wrong = 0, late = 0, dealt_wrong = 0, job_wrong = 0;
  std::atomic<int> timeouts{0};
  {
    ThreadPool pool(threads);
    std::vector<CheckWork> works(ThreadPool::kSlots);
    for (int r = 1; r <= regions; ++r) {
      // A stealable region, then a work-conserving one and a blocking one, so a late worker is
      // still in an earlier region when later ones start.
      const int slot = pool.acquire_slot();
      CheckWork& w = works[static_cast<size_t>(slot)];
      w.out = &out;
      w.shadows = &shadows;
      w.timeouts = &timeouts;
      w.reset(r, r % 3 == 0);
      // Every other region (stealable and dealt) claims from both ends of the list (the caller
      // from the front, the workers from the back), the others all from the front: the same
      // invariants hold in both.
      const int64_t t = pool.run_stealable(slot, w, kPieces, 100'000, r % 2 == 0);
      taken += t;
      if (w.stall) {
        ++stall_regions;
        taken_in_stalls += t;
      }
      for (int64_t p = 0; p < kPieces; ++p)
        for (int64_t i = 0; i < CheckWork::kPer; ++i) wrong += out[static_cast<size_t>(p * CheckWork::kPer + i)] != r * 1000 + p;
      // The caller reuses the outputs at once (as the next op reuses a matmul's output buffer).
      std::fill(out.begin(), out.end(), int64_t{-7});

      std::vector<int> hits(37, 0);
      pool.parallel_dealt(int64_t{37}, int64_t{1}, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) ++hits[static_cast<size_t>(c)];
      }, r % 2 == 0);
      dealt_wrong += std::count_if(hits.begin(), hits.end(), [](int h) { return h != 1; });

      std::vector<int> ran(static_cast<size_t>(threads), 0);
      pool.run([&](int tid, int) { ++ran[static_cast<size_t>(tid)]; });
      job_wrong += std::count_if(ran.begin(), ran.end(), [](int h) { return h != 1; });
      // The blocking region waited for every worker, so a late worker is past this region's
      // pieces now: whatever it computed for a piece taken over must not have landed.
      late += std::count_if(out.begin(), out.end(), [](int64_t v) { return v != -7; });
    }
    pool.drain();
  }
  late += std::count_if(out.begin(), out.end(), [](int64_t v) { return v != -7; });  // the pool is gone
  auto o = Napi::Object::New(env);
  o.Set("regions", regions);
  o.Set("stallRegions", static_cast<double>(stall_regions));
  o.Set("taken", static_cast<double>(taken));
  o.Set("takenInStallRegions", static_cast<double>(taken_in_stalls));
  o.Set("handshakeTimeouts", timeouts.load());
  o.Set("wrongOutputs", static_cast<double>(wrong));
  o.Set("lateOverwrites", static_cast<double>(late));
  o.Set("chunkMiscounts", static_cast<double>(dealt_wrong));  // the name test/thread-pool.test.ts reads
  o.Set("jobMiscounts", static_cast<double>(job_wrong));
  return o;
}

}  // namespace lumen
