#include "addon/sampler_bench.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "backend/backend.h"
#include "core/top_k.h"
#include "engine/sampler.h"

namespace lumen {
namespace {

struct Opts {
  int vocab = 248320;
  int rows = 8;
  int draws = 200;
  float temperature = 1.f;
  float top_p = 1.f;
  int top_logprobs = 5;
  int top_k = 20;
  std::string isa;
};

double num_field(const Napi::Object& o, const char* key, double def, double lo, double hi, bool integer) {
  if (!o.Has(key) || o.Get(key).IsUndefined()) return def;
  const Napi::Value v = o.Get(key);
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : std::nan("");
  if (!(d >= lo && d <= hi) || (integer && d != std::floor(d)))
    throw std::invalid_argument("samplerBench: " + std::string(key) + " must be " + (integer ? "an integer" : "a number") +
                                " from " + std::to_string(lo) + " to " + std::to_string(hi));
  return d;
}

Opts parse(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsObject()) throw std::invalid_argument("samplerBench: expects an options object");
  const Napi::Object o = info[0].As<Napi::Object>();
  Opts b;
  b.vocab = static_cast<int>(num_field(o, "vocab", b.vocab, 1, 1 << 20, true));
  b.rows = static_cast<int>(num_field(o, "rows", b.rows, 1, 64, true));
  b.draws = static_cast<int>(num_field(o, "draws", b.draws, 1, 100000, true));
  b.temperature = static_cast<float>(num_field(o, "temperature", b.temperature, 1e-3, 100, false));
  b.top_p = static_cast<float>(num_field(o, "topP", b.top_p, 0, 1, false));
  b.top_logprobs = static_cast<int>(num_field(o, "topLogprobs", b.top_logprobs, 0, kMaxTopLogprobs, true));
  b.top_k = static_cast<int>(num_field(o, "topK", b.top_k, 1, kMaxPickK, true));
  b.isa = o.Has("isa") && o.Get("isa").IsString() ? o.Get("isa").As<Napi::String>().Utf8Value()
                                                   : active_isa() == Isa::avx512 ? "avx512" : "avx2";
  return b;
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2] / 1e6;
}

}  // namespace

Napi::Value SamplerBench(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    const Opts o = parse(info);
    const bool avx512 = o.isa == "avx512";
    if (!(avx512 || o.isa == "avx2") || !isa_supported(avx512 ? Isa::avx512 : Isa::avx2))
      throw std::invalid_argument("samplerBench: isa must be 'avx2' or 'avx512', a table this machine runs; got '" + o.isa + "'");
    const cpu::Kernels& K = avx512 ? cpu::avx512::table : cpu::avx2::table;
    // Rows of normal logits (spread 3.2, the synthetic models' head), one after another as a step's
    // rows are: o.rows of them, so with the vocabulary's 1 MB rows the set is past a core's L2.
    std::mt19937_64 g(7);
    std::normal_distribution<float> nd(0.f, 3.2f);
    std::vector<float> rows(static_cast<size_t>(o.vocab) * static_cast<size_t>(o.rows));
    for (float& v : rows) v = nd(g);
    SamplingParams p;
    p.temperature = o.temperature;
    p.top_p = o.top_p;
    p.seed = 11;
    Sampler whole(p, K), sorted(p, K);
    SamplingParams pk = p;
    pk.top_k = o.top_k;
    Sampler top_k(pk, K);
    std::vector<PickCandidate> work;
    std::vector<double> draw_ns, sort_ns, argmax_ns, lp_ns, pick_ns, scalar_pick_ns, top_k_draw_ns;
    std::vector<PickCandidate> picked(static_cast<size_t>(o.top_k)), pick_scratch;
    std::vector<int32_t> top_ids(static_cast<size_t>(kMaxTopLogprobs));
    std::vector<float> top_lp(static_cast<size_t>(kMaxTopLogprobs));
    double sink = 0;
    // Each measurement on the next row, the seven interleaved.
    for (int d = 0; d < o.draws; ++d) {
      const float* x = rows.data() + static_cast<size_t>(d % o.rows) * static_cast<size_t>(o.vocab);
      int64_t t0 = now_ns();
      sink += whole.sample(x, o.vocab);
      draw_ns.push_back(static_cast<double>(now_ns() - t0));
      x = rows.data() + static_cast<size_t>((d + 1) % o.rows) * static_cast<size_t>(o.vocab);
      t0 = now_ns();
      const int n = top_candidates(x, o.vocab, 0, p.temperature, nullptr, work);
      sink += sorted.draw(work.data(), n);
      sort_ns.push_back(static_cast<double>(now_ns() - t0));
      x = rows.data() + static_cast<size_t>((d + 2) % o.rows) * static_cast<size_t>(o.vocab);
      t0 = now_ns();
      sink += K.argmax(x, o.vocab);
      argmax_ns.push_back(static_cast<double>(now_ns() - t0));
      x = rows.data() + static_cast<size_t>((d + 3) % o.rows) * static_cast<size_t>(o.vocab);
      t0 = now_ns();
      float lp = 0;
      row_logprobs(x, o.vocab, d % o.vocab, o.top_logprobs, &lp, top_ids.data(), top_lp.data(), K);
      lp_ns.push_back(static_cast<double>(now_ns() - t0));
      sink += lp;
      x = rows.data() + static_cast<size_t>((d + 4) % o.rows) * static_cast<size_t>(o.vocab);
      t0 = now_ns();
      sink += K.top_candidates(x, o.vocab, o.top_k, p.temperature, picked.data(), pick_scratch);
      pick_ns.push_back(static_cast<double>(now_ns() - t0));
      x = rows.data() + static_cast<size_t>((d + 5) % o.rows) * static_cast<size_t>(o.vocab);
      t0 = now_ns();
      sink += top_candidates(x, o.vocab, o.top_k, p.temperature, nullptr, work);
      scalar_pick_ns.push_back(static_cast<double>(now_ns() - t0));
      x = rows.data() + static_cast<size_t>((d + 6) % o.rows) * static_cast<size_t>(o.vocab);
      t0 = now_ns();
      sink += top_k.sample(x, o.vocab);
      top_k_draw_ns.push_back(static_cast<double>(now_ns() - t0));
    }
    auto res = Napi::Object::New(env);
    res.Set("isa", avx512 ? "avx512" : "avx2");
    res.Set("vocab", o.vocab);
    res.Set("rows", o.rows);
    res.Set("draws", o.draws);
    res.Set("drawMs", median_ms(draw_ns));
    res.Set("sortedDrawMs", median_ms(sort_ns));
    res.Set("argmaxMs", median_ms(argmax_ns));
    res.Set("logprobsMs", median_ms(lp_ns));
    res.Set("topKPickMs", median_ms(pick_ns));
    res.Set("scalarTopKPickMs", median_ms(scalar_pick_ns));
    res.Set("topKDrawMs", median_ms(top_k_draw_ns));
    res.Set("sink", sink);
    return res;
  } catch (const std::exception& e) {
    Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
    return env.Undefined();
  }
}

}  // namespace lumen
