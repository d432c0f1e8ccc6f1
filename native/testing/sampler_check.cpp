#include "testing/sampler_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/argmax.h"
#include "core/cpu_features.h"
#include "core/top_k.h"
#include "engine/sampler.h"

namespace lumen {

// Rows of 1..9000 values (and some of 248 320, the Qwen3.5 vocabulary): normal with spreads from
// 0.01 to 20, many ties, one peak over a flat floor, a few values far below the rest; a tenth of the
// ids banned in a third of them; temperatures 0.7, 1 and 2.5; top_p 1, 0.999, 0.95, 0.5 and 0; 20
// draws a row from the whole row and 20 at a top_k of 1 to 5000. Returns { draws, differences, first }
// (first: the first difference, or "").
Napi::Value SamplerCheck(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsString()) {
    Napi::TypeError::New(env, "samplerCheck(rows, seed, 'avx2' | 'avx512')").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const std::string isa = info[2].As<Napi::String>().Utf8Value();
  if (!(isa == "avx2" && isa_supported(Isa::avx2)) && !(isa == "avx512" && isa_supported(Isa::avx512))) {
    Napi::Error::New(env, "samplerCheck: this machine has no '" + isa + "' kernel table").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const cpu::Kernels& table = isa == "avx512" ? cpu::avx512::table : cpu::avx2::table;
  const int rows = info[0].As<Napi::Number>().Int32Value();
  std::mt19937_64 g(static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()));
  int64_t draws = 0, diffs = 0;
  std::string first;
  std::vector<PickCandidate> work;
  // 20 draws from row x by the sampler (on the table's passes) and by the reference: the candidates
  // of core/top_k.h's scalar top_candidates (top_k 0: the whole row, sorted) drawn by Sampler::draw,
  // the same seed; `what` names the row in the first difference.
  const auto compare = [&](const std::vector<float>& x, const SamplingParams& p, const std::vector<int32_t>* ban,
                           const std::string& what) {
    Sampler sampler(p, table), reference(p, table);
    const int vocab = static_cast<int>(x.size());
    const bool top_k = p.top_k > 0 && p.top_k < vocab;
    for (int k = 0; k < 20; ++k) {
      const int32_t got = sampler.sample(x.data(), vocab, ban);
      int32_t want = -1;
      if (!top_k || row_finite(x.data(), vocab)) {
        const int n = top_candidates(x.data(), vocab, top_k ? p.top_k : 0, p.temperature, ban, work);
        want = n > 0 ? reference.draw(work.data(), n) : top_k ? argmax_scalar(x.data(), vocab) : got;
      }
      ++draws;
      if (got != want) {
        if (diffs == 0)
          first = what + (top_k ? ", top_k " + std::to_string(p.top_k) : "") + ", draw " + std::to_string(k) + ": " +
                  std::to_string(got) + " where the reference gives " + std::to_string(want);
        ++diffs;
      }
    }
  };
  for (int row = 0; row < rows; ++row) {
    const int vocab = row % 25 == 24 ? 248320 : 1 + static_cast<int>(g() % 9000);
    const int kind = row % 6;
    const float spreads[] = {3.2f, 0.01f, 20.f, 1.f, 1.f, 3.f};
    std::normal_distribution<float> nd(0.f, spreads[kind]);
    std::vector<float> x(static_cast<size_t>(vocab));
    for (float& v : x) v = nd(g);
    if (kind == 3)
      for (float& v : x) v = std::round(v * 2) / 2;  // many ties
    if (kind == 4) {
      std::fill(x.begin(), x.end(), 0.f);
      x[g() % static_cast<size_t>(vocab)] = 5.f;  // one peak over a flat floor
    }
    if (kind == 5)
      for (int i = 0; i < vocab / 50; ++i) x[g() % static_cast<size_t>(vocab)] = -200.f;  // far below the rest
    std::vector<int32_t> banned;
    if (row % 3 == 0) {
      for (int i = 0; i < vocab / 10; ++i) banned.push_back(static_cast<int32_t>(g() % static_cast<uint64_t>(vocab)));
      std::sort(banned.begin(), banned.end());
      banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
    }
    const float top_ps[] = {1.f, 0.95f, 0.5f, 0.999f, 0.f};
    const float temps[] = {1.f, 0.7f, 2.5f};
    SamplingParams p;
    p.temperature = temps[row % 3];
    p.top_p = top_ps[row % 5];
    p.top_k = 0;
    p.seed = static_cast<uint64_t>(row);
    const std::string what = "row " + std::to_string(row) + " (" + std::to_string(vocab) + " values, kind " +
                             std::to_string(kind) + ", top_p " + std::to_string(p.top_p) + ")";
    compare(x, p, banned.empty() ? nullptr : &banned, what);
    // The same row at a top_k (all but one candidate where it is not below the row's length; a row of
    // one value draws from the whole row).
    const int top_ks[] = {1, 20, 40, 1000, 5000, 7};
    p.top_k = std::max(1, std::min(top_ks[row % 6], vocab - 1));
    compare(x, p, banned.empty() ? nullptr : &banned, what);
  }
  // Rows at the edges of the rule: all values equal; a span of one denormal (an infinite scale);
  // +-FLT_MAX among ordinary values; values whose scaled logits overflow at temperature 1e-5 (the
  // most likely is drawn); each at top_p 1 and 0.5.
  {
    const float big = std::numeric_limits<float>::max();
    struct Edge {
      std::vector<float> x;
      float t;
    };
    std::vector<Edge> edges;
    edges.push_back({std::vector<float>(1000, 0.5f), 1.f});
    std::vector<float> den(37);
    for (size_t i = 0; i < den.size(); ++i) den[i] = i % 3 == 1 ? 1e-40f : 0.f;
    edges.push_back({den, 1.f});
    std::normal_distribution<float> nd(0.f, 3.f);
    std::vector<float> ext(100);
    for (float& v : ext) v = nd(g);
    ext[7] = big;
    ext[50] = -big;
    ext[93] = big;
    edges.push_back({ext, 1.f});
    std::vector<float> ovf(300);
    for (float& v : ovf) v = 3e34f * nd(g);
    edges.push_back({ovf, 1e-5f});
    for (size_t e = 0; e < edges.size(); ++e)
      for (const float top_p : {1.f, 0.5f}) {
        SamplingParams p;
        p.temperature = edges[e].t;
        p.top_p = top_p;
        p.seed = 77 + e;
        compare(edges[e].x, p, nullptr, "edge row " + std::to_string(e) + " (top_p " + std::to_string(top_p) + ")");
        p.top_k = 20;
        compare(edges[e].x, p, nullptr, "edge row " + std::to_string(e) + " (top_p " + std::to_string(top_p) + ")");
      }
  }
  // Rows a top-k draw has nothing to pick from (-1): a NaN or an infinity at an allowed id, or at a
  // banned one (min_tokens' ban hides no broken logit), with nothing banned and with a ban around it.
  {
    std::normal_distribution<float> nd(0.f, 3.f);
    const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity()};
    for (int v = 0; v < 3; ++v)
      for (const int at : {0, 517, 4999}) {
        std::vector<float> x(5000);
        for (float& e : x) e = nd(g);
        x[static_cast<size_t>(at)] = bad_values[v];
        const std::vector<int32_t> ban_at{at}, ban_near{at == 0 ? 1 : at - 1, 2500};
        SamplingParams p;
        p.temperature = 1.f;
        p.top_k = 40;
        p.seed = 91;
        const std::string what = "a row with " + std::to_string(bad_values[v]) + " at " + std::to_string(at);
        compare(x, p, nullptr, what);
        compare(x, p, &ban_at, what + " (banned)");
        compare(x, p, &ban_near, what + " (a ban beside it)");
      }
  }
  // Bans at the top: the 40 best ids of a row banned (a top_k 20 draws from the 41st to the 60th),
  // and every id banned (the row's argmax, as min_tokens leaves nothing else).
  {
    std::normal_distribution<float> nd(0.f, 3.f);
    std::vector<float> x(5000);
    for (float& e : x) e = nd(g);
    std::vector<int32_t> order(x.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + 40, order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
    std::vector<int32_t> best(order.begin(), order.begin() + 40);
    std::sort(best.begin(), best.end());
    std::vector<int32_t> all(order);
    std::sort(all.begin(), all.end());
    SamplingParams p;
    p.temperature = 1.f;
    p.top_k = 20;
    p.seed = 93;
    compare(x, p, &best, "a row with its 40 best ids banned");
    compare(x, p, &all, "a row with every id banned");
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("draws", static_cast<double>(draws));
  out.Set("differences", static_cast<double>(diffs));
  out.Set("first", first);
  return out;
}

}  // namespace lumen
