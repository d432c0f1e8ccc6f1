#include "addon/machine_probe.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/aligned.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace lumen {

Napi::Value ProbeMachine(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int threads = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 0;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto& K = cpu::kernels();
  ThreadPool pool(threads);
  // Bandwidth: read a 1 GiB buffer (far beyond the caches) several times; best pass wins. Passes
  // alternate between 1, 4 and 8 side-by-side streams per thread: one stream per core leaves
  // bandwidth unused on this machine (25 vs 35 GB/s in a slow phase, 53 vs 76 in a fast one), and
  // a limit that a plain loop cannot reach but our kernels can would put them above 100 %.
  const size_t n = (size_t{1} << 30) / sizeof(float);
  AlignedBuffer buf(n * sizeof(float), false);
  float* x = buf.as<float>();
  pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) { std::fill(x + b, x + e, 1.0f); }, 1 << 20);
  constexpr int kStreams[] = {1, 4, 8};
  constexpr size_t kPatterns = std::size(kStreams);
  double best_by[kPatterns] = {};
  std::vector<float> sinks(threads);
  for (int rep = 0; rep < 3; ++rep)
    for (size_t si = 0; si < kPatterns; ++si) {
      const int64_t t0 = now_ns();
      pool.run([&](int tid, int nth) {
        const size_t per = n / nth;
        const int64_t len = static_cast<int64_t>(tid == nth - 1 ? n - per * tid : per);
        sinks[tid] += K.stream_sum(x + per * tid, len, kStreams[si]);
      });
      const double s = static_cast<double>(now_ns() - t0) / 1e9;
      best_by[si] = std::max(best_by[si], static_cast<double>(n * sizeof(float)) / s / 1e9);
    }
  const double best_bw = *std::max_element(best_by, best_by + kPatterns);
  // Peak: independent multiply-add chains in registers on every thread; best of 3.
  double best_flops = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> flops(threads);
    const int64_t t0 = now_ns();
    pool.run([&](int tid, int) { flops[tid] = K.fma_burn(20'000'000); });
    const double s = static_cast<double>(now_ns() - t0) / 1e9;
    double total = 0;
    for (double f : flops) total += f;
    best_flops = std::max(best_flops, total / s / 1e9);
  }
  auto o = Napi::Object::New(env);
  o.Set("threads", threads);
  o.Set("readGBs", best_bw);
  o.Set("readGBs1Stream", best_by[0]);
  o.Set("peakGflops", best_flops);
  o.Set("peakKind", active_isa() == Isa::avx512 ? "bf16 dot (vdpbf16ps)" : "f32 FMA");
  o.Set("sink", static_cast<double>(sinks[0]));
  return o;
}

}  // namespace lumen
