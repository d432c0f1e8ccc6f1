#include "addon/pool_check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace lumen {
namespace {

// Piece p of region r writes out[p * kPer + i] = r * 1000 + p (a worker into its own shadow).
// In every third region the first piece a worker takes stalls for 2 ms, as a descheduled core.
struct CheckWork final : StealableWork {
  static constexpr int64_t kPer = 64;
  std::vector<int64_t>* out = nullptr;
  std::vector<std::vector<int64_t>>* shadows = nullptr;
  int64_t region = 0;
  bool stall = false;
  std::atomic<bool> stalled{false};

  void compute(int64_t p, int tid, bool direct) override {
    if (!direct && stall && !stalled.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    int64_t* dst = direct ? out->data() : (*shadows)[static_cast<size_t>(tid)].data();
    for (int64_t i = 0; i < kPer; ++i) dst[p * kPer + i] = region * 1000 + p;
  }
  void commit(int64_t p, int tid) override {
    const int64_t* src = (*shadows)[static_cast<size_t>(tid)].data();
    std::copy(src + p * kPer, src + (p + 1) * kPer, out->data() + p * kPer);
  }
};

}  // namespace

Napi::Value PoolCheck(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int threads = info.Length() > 0 && info[0].IsNumber() ? std::max(2, info[0].As<Napi::Number>().Int32Value()) : 2;
  const int regions = info.Length() > 1 && info[1].IsNumber() ? std::max(1, info[1].As<Napi::Number>().Int32Value()) : 120;
  constexpr int64_t kPieces = 24;
  std::vector<int64_t> out(kPieces * CheckWork::kPer, -1);
  std::vector<std::vector<int64_t>> shadows(static_cast<size_t>(threads), std::vector<int64_t>(out.size()));
  int64_t taken = 0, wrong = 0, late = 0, chunk_wrong = 0, job_wrong = 0;
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
      w.region = r;
      w.stall = r % 3 == 0;
      w.stalled.store(false);
      taken += pool.run_stealable(slot, w, kPieces, 100'000);
      auto check = [&] {
        for (int64_t p = 0; p < kPieces; ++p)
          for (int64_t i = 0; i < CheckWork::kPer; ++i) wrong += out[static_cast<size_t>(p * CheckWork::kPer + i)] != r * 1000 + p;
      };
      check();
      // The caller reuses the outputs at once (as the next op reuses a matmul's output buffer).
      std::fill(out.begin(), out.end(), int64_t{-7});

      std::vector<int> hits(37, 0);
      pool.parallel_chunks(int64_t{37}, int64_t{1}, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) ++hits[static_cast<size_t>(c)];
      });
      chunk_wrong += std::count_if(hits.begin(), hits.end(), [](int h) { return h != 1; });

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
  o.Set("taken", static_cast<double>(taken));
  o.Set("wrongOutputs", static_cast<double>(wrong));
  o.Set("lateOverwrites", static_cast<double>(late));
  o.Set("chunkMiscounts", static_cast<double>(chunk_wrong));
  o.Set("jobMiscounts", static_cast<double>(job_wrong));
  return o;
}

}  // namespace lumen
