// Runs the real engine with the CUDA backend on the CPU emulation (emu_runtime.cc) against the
// CPU backend: the same checks the GPU device check makes, on small shapes, so indexing,
// synchronisation and graph-capture logic of the CUDA code run somewhere before a GPU is lent.
// Passing here says nothing about real GPU behaviour (memory model, timing, the tensor-core
// fragment layouts beyond the PTX ISA description the emulation follows).
//
// Usage: emu_check [quick]   (exit status 0 when every check passes)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

using namespace lumen;

namespace {

int g_vocab = 4096;

ModelConfig tiny(int hidden = 128, int heads = 2, int kv = 1, int nk = 2, int nv = 4, int layers = 4, bool tied = true) {
  ModelConfig c;
  c.hidden = hidden;
  c.n_layers = layers;
  c.intermediate = 3 * hidden;
  c.n_heads = heads;
  c.n_kv_heads = kv;
  c.head_dim = 256;
  c.lin_k_heads = nk;
  c.lin_v_heads = nv;
  c.lin_dk = 128;
  c.lin_dv = 128;
  c.conv_kernel = 4;
  c.vocab = g_vocab;
  c.tied = tied;
  for (int i = 0; i < layers; ++i) c.is_full.push_back((i + 1) % 4 == 0);
  return c;
}

std::vector<int32_t> ids(int n, uint32_t seed) {
  uint32_t s = seed * 2654435761u;
  if (!s) s = 1;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    out.push_back(static_cast<int32_t>(s % static_cast<uint32_t>(g_vocab)));
  }
  return out;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  int rows = 0;
  int prompt = 0;
  std::string finish, error;
};

EngineConfig base(const std::string& device, DType dt) {
  EngineConfig ec;
  ec.device = device;
  ec.threads = 2;
  ec.block_size = 16;
  ec.paged = true;
  ec.max_seq = 512;
  ec.max_seqs = 8;
  ec.prefill_chunk = 512;
  ec.step_token_budget = 1024;
  ec.prefix_cache = false;
  ec.synthetic_dtype = dt;
  ec.synthetic_seed = 7;
  return ec;
}

std::vector<Result> run(const ModelConfig& cfg, const EngineConfig& ec, const std::vector<RequestSpec>& reqs) {
  Engine e(cfg, {}, ec, nullptr);
  std::vector<uint64_t> order;
  for (const auto& r : reqs) order.push_back(e.submit(r));
  std::map<uint64_t, Result> done;
  while (done.size() < reqs.size()) {
    for (auto& ev : e.drain()) {
      if (ev.kind == EngineEvent::kLoadError) throw std::runtime_error("load: " + ev.error);
      if (ev.kind != EngineEvent::kDone) continue;
      Result r;
      r.tokens = ev.tokens;
      r.logits = std::move(ev.logits);
      r.rows = ev.logit_rows;
      r.prompt = ev.prompt_tokens;
      r.finish = ev.finish;
      r.error = ev.error;
      done[ev.id] = std::move(r);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<Result> out;
  for (uint64_t id : order) out.push_back(std::move(done[id]));
  return out;
}

// Max |Δ log-softmax| over rows evaluated on identical inputs.
double compare(const Result& a, const Result& b, int new_tokens, int* rows_out) {
  int rows = a.prompt;
  for (int i = 0; i < new_tokens && i < static_cast<int>(a.tokens.size()) && i < static_cast<int>(b.tokens.size()) &&
                  a.tokens[i] == b.tokens[i];
       ++i)
    ++rows;
  rows = std::min({rows, a.rows, b.rows});
  *rows_out = rows;
  double worst = 0;
  const int V = g_vocab;
  for (int r = 0; r < rows; ++r) {
    auto lse = [&](const std::vector<float>& l) {
      double mx = -INFINITY;
      for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(l[static_cast<size_t>(r) * V + i]));
      double s = 0;
      for (int i = 0; i < V; ++i) s += std::exp(l[static_cast<size_t>(r) * V + i] - mx);
      return mx + std::log(s);
    };
    const double la = lse(a.logits), lb = lse(b.logits);
    for (int i = 0; i < V; ++i) {
      const double x = a.logits[static_cast<size_t>(r) * V + i] - la, y = b.logits[static_cast<size_t>(r) * V + i] - lb;
      if (x > -27.6) worst = std::max(worst, std::isfinite(y) ? std::fabs(x - y) : 1e30);
    }
  }
  return worst;
}

int g_fail = 0;
void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_fail;
}

std::string read_last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  const std::vector<int> lens = quick ? std::vector<int>{1, 65, 20} : std::vector<int>{1, 65, 150, 1, 65, 150, 16, 64};
  const int NEW = 4;
  auto batch = [&](uint32_t seed) {
    std::vector<RequestSpec> v;
    for (size_t i = 0; i < lens.size(); ++i) {
      RequestSpec r;
      r.prompt = ids(lens[i], seed + static_cast<uint32_t>(i));
      r.max_tokens = NEW;
      r.ignore_eos = true;
      r.logits_all = true;
      v.push_back(r);
    }
    return v;
  };
  const std::string stats = "/tmp/lumen-cuda-emu-stats.jsonl";
  setenv("LUMEN_CUDA_STATS_FILE", stats.c_str(), 1);

  struct Case {
    std::string name;
    ModelConfig cfg;
    DType dt;
    double tol;
  };
  std::vector<Case> cases = {
      {"tiny f32 (nv = 2 nk, 2 q heads per kv head)", tiny(), DType::f32, 1e-3},
      {"tiny bf16", tiny(), DType::bf16, 3e-2},
      {"hidden 256, 4 q heads per kv head, nk = nv, untied, f32", tiny(256, 8, 2, 2, 2, 4, false), DType::f32, 1e-3},
  };
  if (quick) cases.resize(1);
  for (const auto& c : cases) {
    try {
      const auto ref = run(c.cfg, base("cpu", c.dt), batch(300));
      const auto got = run(c.cfg, base("cuda", c.dt), batch(300));
      double worst = 0;
      bool ok = true;
      for (size_t i = 0; i < lens.size(); ++i) {
        if (got[i].finish == "error") {
          ok = false;
          std::printf("  sequence %zu: error %s\n", i, got[i].error.c_str());
          continue;
        }
        int rows = 0;
        const double d = compare(ref[i], got[i], NEW, &rows);
        worst = std::max(worst, d);
        if (rows < lens[i]) ok = false;
        std::printf("  prompt %3d: %d rows, max |d log-softmax| %.3e, tokens %s\n", lens[i], rows, d,
                    ref[i].tokens == got[i].tokens ? "same" : "differ");
      }
      char buf[160];
      std::snprintf(buf, sizeof buf, "(a) %s: max %.3e (tol %.0e)", c.name.c_str(), worst, c.tol);
      report(ok && worst <= c.tol, buf);
    } catch (const std::exception& e) {
      report(false, "(a) " + c.name + ": " + e.what());
    }
  }

  // (b) greedy tokens with graphs on and off; the decode batch shrinks across padded buckets.
  try {
    std::vector<RequestSpec> reqs;
    const int outs[] = {12, 11, 9, 7, 6, 4, 3, 2};
    for (int i = 0; i < (quick ? 3 : 8); ++i) {
      RequestSpec r;
      r.prompt = ids(5 + 7 * i, 500 + i);
      r.max_tokens = outs[i];
      r.ignore_eos = true;
      reqs.push_back(r);
    }
    std::remove(stats.c_str());
    setenv("LUMEN_CUDA_GRAPHS", "1", 1);
    const auto on = run(tiny(), base("cuda", DType::bf16), reqs);
    const std::string s_on = read_last_line(stats);
    setenv("LUMEN_CUDA_GRAPHS", "0", 1);
    const auto off = run(tiny(), base("cuda", DType::bf16), reqs);
    const std::string s_off = read_last_line(stats);
    unsetenv("LUMEN_CUDA_GRAPHS");
    const auto cpu = run(tiny(), base("cpu", DType::bf16), reqs);
    bool same = true, same_cpu = true;
    for (size_t i = 0; i < reqs.size(); ++i) {
      same &= on[i].tokens == off[i].tokens && on[i].finish == "length";
      same_cpu &= on[i].tokens == cpu[i].tokens;
    }
    std::printf("  graphs on: %s\n  graphs off: %s\n", s_on.c_str(), s_off.c_str());
    const bool hits = s_on.find("\"graph_hits\":0,") == std::string::npos && s_off.find("\"graph_hits\":0,") != std::string::npos;
    report(same && hits, "(b) greedy tokens identical with graphs on and off, graphs replayed when on");
    std::printf("  (info) greedy tokens %s the CPU backend's\n", same_cpu ? "equal" : "differ from");
  } catch (const std::exception& e) {
    report(false, std::string("(b) ") + e.what());
  }

  if (!quick) {
    // Chunked DeltaNet against the recurrence, and prefill split into chunks of 50.
    try {
      std::vector<RequestSpec> reqs;
      for (int n : {1, 63, 64, 65, 150}) {
        RequestSpec r;
        r.prompt = ids(n, 40 + n);
        r.max_tokens = 0;
        r.logits_all = true;
        reqs.push_back(r);
      }
      auto rec_cfg = base("cuda", DType::f32);
      rec_cfg.gdn_chunk_min = 1 << 30;
      auto chk_cfg = base("cuda", DType::f32);
      chk_cfg.gdn_chunk_min = 1;
      chk_cfg.prefill_chunk = 50;
      const auto a = run(tiny(), rec_cfg, reqs);
      const auto b = run(tiny(), chk_cfg, reqs);
      double m = 0;
      for (size_t i = 0; i < reqs.size(); ++i)
        for (size_t k = 0; k < a[i].logits.size() && k < b[i].logits.size(); ++k)
          m = std::max(m, static_cast<double>(std::fabs(a[i].logits[k] - b[i].logits[k])));
      char buf[128];
      std::snprintf(buf, sizeof buf, "chunked DeltaNet (continued across prefill chunks) = recurrence: max |d logits| %.3e", m);
      report(m < 1e-3, buf);
    } catch (const std::exception& e) {
      report(false, std::string("chunked: ") + e.what());
    }
    // Prefix cache on the device: warm rows equal cold rows.
    try {
      auto ec = base("cuda", DType::f32);
      ec.prefix_cache = true;
      ec.snapshot_interval = 32;
      std::vector<int32_t> p = ids(96, 77), tail = ids(20, 78);
      p.insert(p.end(), tail.begin(), tail.end());
      RequestSpec r;
      r.prompt = p;
      r.logits_all = true;
      Engine e(tiny(), {}, ec, nullptr);
      auto once = [&]() {
        const uint64_t id = e.submit(r);
        for (;;) {
          for (auto& ev : e.drain())
            if (ev.kind == EngineEvent::kDone && ev.id == id) return ev;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      };
      const auto cold = once();
      const auto warm = once();
      double m = 0;
      const size_t off = cold.logits.size() - warm.logits.size();
      for (size_t k = 0; k < warm.logits.size(); ++k) m = std::max(m, static_cast<double>(std::fabs(warm.logits[k] - cold.logits[off + k])));
      char buf[128];
      std::snprintf(buf, sizeof buf, "prefix cache on the device: %d cached tokens, max |d logits| %.3e", warm.cached_prompt_tokens, m);
      report(warm.cached_prompt_tokens > 0 && m < 1e-3, buf);
    } catch (const std::exception& e) {
      report(false, std::string("prefix cache: ") + e.what());
    }
  }
  std::printf("%s: %d failed\n", g_fail ? "FAILED" : "ALL PASSED", g_fail);
  return g_fail ? 1 : 0;
}
