#include "addon/kernel_bench.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <xmmintrin.h>  // _mm_getcsr, _mm_setcsr

#include "backend/cpu/kernels.h"
#include "backend/cpu/probes.h"
#include "core/aligned.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/quant_ref.h"
#include "core/thread_pool.h"

namespace lumen {
namespace {

struct BenchOpts {
  bool gdn = false;  // the DeltaNet recurrence instead of a matmul (type "GDN")
  DType type = DType::q4_K;
  int rows = 1;
  int64_t k = 1024;
  int64_t mib = 256;
  int threads = 2;
  int pairs = 12;
};

int64_t int_field(const Napi::Object& o, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!o.Has(key) || o.Get(key).IsUndefined()) return def;
  const Napi::Value v = o.Get(key);
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : std::nan("");
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) || d != std::floor(d))
    throw std::invalid_argument("kernelBench: " + std::string(key) + " must be an integer from " + std::to_string(lo) +
                                " to " + std::to_string(hi));
  return static_cast<int64_t>(d);
}

BenchOpts parse(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsObject()) throw std::invalid_argument("kernelBench: expects an options object");
  const Napi::Object o = info[0].As<Napi::Object>();
  BenchOpts b;
  const std::string name = o.Has("type") && o.Get("type").IsString() ? o.Get("type").As<Napi::String>().Utf8Value() : "";
  b.gdn = name == "GDN";
  if (b.gdn)
    b.type = DType::f32;  // the state's type
  else if (!dtype_from_name(name.c_str(), b.type) || b.type == DType::f16)
    throw std::invalid_argument("kernelBench: type must be F32, BF16, a block-quantized type (Q8_0, Q4_K, Q6_K, ...) or GDN, got '" +
                                name + "'");
  b.rows = static_cast<int>(int_field(o, "rows", b.rows, 1, 16));
  if (!b.gdn) {  // GDN's heads are 128 x 128 whatever k says
    const int64_t block = dtype_info(b.type).block;  // 1 for F32 / BF16 (any row length)
    b.k = int_field(o, "k", b.k, std::max<int64_t>(block, 16), 16384);
    if (b.k % block != 0)
      throw std::invalid_argument("kernelBench: k must be a multiple of " + std::to_string(block) + " for " + dtype_info(b.type).name);
  }
  b.mib = int_field(o, "mib", b.mib, 1, 4096);
  b.threads = static_cast<int>(int_field(o, "threads", b.threads, 1, 256));
  b.pairs = static_cast<int>(int_field(o, "pairs", b.pairs, 1, 1000));
  return b;
}

// A weight matrix of the type with random values and block scales of ~1/256 (random f16 bits
// would include NaNs and subnormals).
void fill_weights(DType t, uint8_t* w, size_t bytes, std::mt19937& rng) {
  for (size_t i = 0; i < bytes; ++i) w[i] = static_cast<uint8_t>(rng());
  if (t == DType::f32) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
      const float f = u(rng);
      std::memcpy(w + i, &f, 4);
    }
    return;
  }
  if (t == DType::bf16) {
    for (size_t i = 0; i + 2 <= bytes; i += 2) {
      uint16_t v;
      std::memcpy(&v, w + i, 2);
      v = static_cast<uint16_t>(0x3f00 | (v & 0x80ff));  // +-[0.5, 1)
      std::memcpy(w + i, &v, 2);
    }
    return;
  }
  const size_t bb = static_cast<size_t>(dtype_info(t).bytes);
  const uint16_t scale = 0x1c00;  // f16 1/256
  const bool two = t == DType::q4_K || t == DType::q5_K || t == DType::q5_1;  // d and dmin / m
  const size_t at = t == DType::q6_K ? 208 : 0;
  for (size_t b = 0; b + bb <= bytes; b += bb) {
    std::memcpy(w + b + at, &scale, 2);
    if (two) std::memcpy(w + b + 2, &scale, 2);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Subnormals flushed (FTZ | DAZ) on this thread while in scope, as the engine's threads run.
struct FlushDenormals {
  unsigned csr = _mm_getcsr();
  FlushDenormals() { _mm_setcsr(csr | 0x8040); }
  ~FlushDenormals() { _mm_setcsr(csr); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
};

// Seconds per call of `pass` over a slice that stays in L2 on this thread: 5 measurements of 64
// calls each.
template <typename Pass>
std::vector<double> cache_passes(Pass&& pass) {
  constexpr int kReps = 64;
  std::vector<double> tc;
  for (int r = 0; r < 5; ++r) {
    const int64_t t0 = now_ns();
    for (int i = 0; i < kReps; ++i) pass();
    tc.push_back(static_cast<double>(now_ns() - t0) / 1e9 / kReps);
  }
  return tc;
}

// A plain read of `floats` floats at data, each thread its share as 4 streams (the bandwidth
// probe's read), summed into sinks[tid]; seconds. The bytes are summed as floats (random patterns
// for the quantized types) with subnormals flushed, so no microcode assist slows the read.
double read_pass(ThreadPool& pool, const float* data, int64_t floats, std::vector<float>& sinks) {
  const auto& probes = cpu::probes();
  const int64_t t0 = now_ns();
  pool.run([&](int tid, int nth) {
    const int64_t per = floats / nth;
    const int64_t len = tid == nth - 1 ? floats - per * tid : per;
    const FlushDenormals ftz;
    sinks[static_cast<size_t>(tid)] += probes.stream_sum(data + per * tid, len, 4);
  });
  return static_cast<double>(now_ns() - t0) / 1e9;
}

// Seconds per kernel pass and per read pass over the same bytes, measured in pairs of alternating
// order (A B, B A, ...): both see the same machine, whatever the neighbours do to the bandwidth
// meanwhile. Each pass was warmed up once by the caller.
struct Pairs {
  std::vector<double> kernel, read, ratio;
};
template <typename KernelPass, typename ReadPass>
Pairs alternate(int pairs, KernelPass&& kernel_pass, ReadPass&& read) {
  Pairs p;
  for (int i = 0; i < pairs; ++i) {
    double a, b;
    if (i % 2 == 0) {
      a = kernel_pass();
      b = read();
    } else {
      b = read();
      a = kernel_pass();
    }
    p.kernel.push_back(a);
    p.read.push_back(b);
    p.ratio.push_back(b / a);
  }
  return p;
}

// The rates every kernelBench result reports: `bytes` over the pairs' passes (medians and bests),
// and `small_bytes` over the in-L2 passes `tc` (seconds).
void set_rates(Napi::Object& res, double bytes, const Pairs& p, double small_bytes, const std::vector<double>& tc) {
  res.Set("bytes", bytes);
  res.Set("kernelGBs", bytes / median(p.kernel) / 1e9);
  res.Set("readGBs", bytes / median(p.read) / 1e9);
  res.Set("kernelOverRead", median(p.ratio));
  res.Set("kernelGBsBest", bytes / *std::min_element(p.kernel.begin(), p.kernel.end()) / 1e9);
  res.Set("readGBsBest", bytes / *std::min_element(p.read.begin(), p.read.end()) / 1e9);
  res.Set("cacheGBs", small_bytes / median(tc) / 1e9);
  res.Set("cacheBytes", small_bytes);
}

// The kernel over weight rows [0, N) as the backend splits a product (cpu/matmul.cpp): 1..3 rows
// (and the row-major and packed bf16 matrices at every decode size) as four streams a quarter of
// the matrix apart (packed bf16 at 7..16 rows: three, a third apart), each thread its share of
// every quarter and the panels past the last whole quarter a piece of their own (decode_region);
// more rows in pieces of ~256 KiB of weights, each thread its own contiguous share
// (matmul_quantized's two runs). Unlike the backend, whose threads take pieces from a shared list
// (a core that is late takes fewer), each thread here keeps a fixed share: a pass lasts as long as
// its slower thread, so a descheduled core slows this figure more than it slows the engine's.
struct Product {
  const cpu::Kernels& K;
  DType t;
  bool quant, panels;  // block-quantized; repacked into panels (K.packs_quant_panels)
  bool packed_bf16;    // bf16 in vdpbf16ps panels (K.pack_bf16; xq: x rounded to bf16)
  int rows;
  int64_t k, n;
  const void* w;       // the stored (or, for panel types, packed) matrix
  const void* xq;      // activations: quantized, or split (bf16) / plain (f32)
  const void* xa;      // the panels' activation side (nullptr when none)
  float* y;

  void run(int tid, int nth) const {
    const int64_t np = (n + cpu::kPanel - 1) / cpu::kPanel;
    if (!quant || rows <= 3) {
      const int streams = cpu::decode_streams(packed_bf16, rows);  // as decode_region
      const int64_t q = np / streams;                        // panels per quarter (third)
      const int64_t p0 = q * tid / nth, p1 = q * (tid + 1) / nth;
      for (int64_t p = p0; p < p1; p += 8) piece(p, std::min(p1, p + 8), q);
      if (tid == nth - 1 && streams * q < np) piece(streams * q, np, 0);  // past the last whole quarter
      return;
    }
    const int64_t share = np / nth, p0 = tid * share, p1 = tid == nth - 1 ? np : p0 + share;
    const int64_t per = std::max<int64_t>(1, (int64_t{256} << 10) / static_cast<int64_t>(cpu::kPanel * row_bytes(t, k)));
    for (int64_t p = p0; p < p1; p += per) piece(p, std::min(p1, p + per), 0);
  }
  // Panels [p0, p1): with slice > 0, also the panels slice, 2 slice and 3 slice on (the streams);
  // with slice 0 adjacent (matmul_quant_streams then runs matmul_quant's tiles).
  void piece(int64_t p0, int64_t p1, int64_t slice) const {
    if (packed_bf16)
      K.matmul_packed(static_cast<const uint16_t*>(xq), rows, k, static_cast<const uint16_t*>(w), n, p0, p1, y, n, slice);
    else if (panels)
      K.matmul_quant_panels(t, xq, xa, rows, k, w, n, p0, p1, y, n, slice);
    else if (quant)
      K.matmul_quant_streams(xq, rows, k, w, t, n, p0, p1, y, n, slice);
    else
      K.matmul_streams(static_cast<const float*>(xq), rows, k, w, t, n, p0, p1, y, n, slice);
  }
};

// The DeltaNet decode recurrence (gdn_recurrent) over per-head f32 states of 128 x 128 (every
// Qwen3.5 size's linear-attention head), rows = tokens per head (1: a decode step), far beyond the
// caches, dealt as the backend's gdn_decode deals them: runs of 8 adjacent heads from a shared
// counter, each head's pass asking for the next head of its run. Each pass reads and writes every
// state once: the bytes reported are the state's (its traffic is twice that).
Napi::Object gdn_bench(Napi::Env env, const BenchOpts& o) {
  const cpu::Kernels& K = cpu::kernels();
  constexpr int dk = 128, dv = 128, kRun = 8;
  constexpr int64_t head_floats = int64_t{dk} * dv;
  const int64_t heads = std::max<int64_t>(64 * o.threads, (o.mib << 20) / (head_floats * 4));
  if (heads * head_floats * 4 > (int64_t{4096} << 20))
    throw std::invalid_argument("kernelBench: GDN with " + std::to_string(o.threads) + " threads needs over 4096 MiB of state");
  const int T = o.rows;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  AlignedBuffer state(static_cast<size_t>(heads * head_floats) * 4, false);
  float* S = state.as<float>();
  for (int64_t i = 0; i < heads * head_floats; ++i) S[i] = 0.01f * u(rng);
  // One token's q, k (l2-normalised; q also by 1/sqrt(dk)), v and gates, shared by every head (the
  // engine's are in L1 too: the conv just wrote them).
  std::vector<float> q(static_cast<size_t>(T) * dk), k(static_cast<size_t>(T) * dk), v(static_cast<size_t>(T) * dv);
  std::vector<float> beta(static_cast<size_t>(T), 0.5f), g(static_cast<size_t>(T), std::log(0.95f));
  for (int t = 0; t < T; ++t) {
    double nq = 0, nk = 0;
    for (int i = 0; i < dk; ++i) {
      q[t * dk + i] = u(rng);
      k[t * dk + i] = u(rng);
      nq += q[t * dk + i] * q[t * dk + i];
      nk += k[t * dk + i] * k[t * dk + i];
    }
    for (int i = 0; i < dk; ++i) {
      q[t * dk + i] = static_cast<float>(q[t * dk + i] / std::sqrt(nq) / std::sqrt(static_cast<double>(dk)));
      k[t * dk + i] = static_cast<float>(k[t * dk + i] / std::sqrt(nk));
    }
    for (int i = 0; i < dv; ++i) v[t * dv + i] = u(rng);
  }
  // NaN until written (every head's outputs must be).
  std::vector<float> out(static_cast<size_t>(heads) * T * dv, std::numeric_limits<float>::quiet_NaN());
  auto io_of = [&](int64_t h, const float* next) {
    cpu::GdnHeadIO io{q.data(), k.data(), v.data(), beta.data(), g.data(), out.data() + h * T * dv, dk, dk, dv, 1, dv, next};
    return io;
  };
  auto run_heads = [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      K.gdn_recurrent(S + h * head_floats, io_of(h, h + 1 < h1 ? S + (h + 1) * head_floats : nullptr), T, dk, dv);
  };
  ThreadPool pool(o.threads);
  std::vector<float> sinks(static_cast<size_t>(o.threads));
  const int64_t floats = heads * head_floats;
  const auto kernel_pass = [&] {
    const FlushDenormals ftz;  // the caller's share (the pool's workers flush already)
    const int64_t t0 = now_ns();
    pool.parallel_dealt(heads, kRun, run_heads);
    return static_cast<double>(now_ns() - t0) / 1e9;
  };
  const auto read = [&] { return read_pass(pool, S, floats, sinks); };
  kernel_pass();
  const int64_t written = std::count_if(out.begin(), out.end(), [](float x) { return !std::isnan(x); });
  read();
  const Pairs pairs = alternate(o.pairs, kernel_pass, read);
  // In L2: one thread over 4 heads (256 KiB), repeated.
  constexpr int64_t small_heads = 4;
  std::vector<double> tc;
  {
    const FlushDenormals ftz;
    tc = cache_passes([&] { run_heads(0, small_heads); });
  }
  const double bytes = static_cast<double>(state.size()), small_bytes = static_cast<double>(small_heads * head_floats * 4);
  auto res = Napi::Object::New(env);
  res.Set("isa", active_isa_name());
  res.Set("type", "GDN");
  res.Set("layout", "f32 state, 128 x 128 a head, read and written once a pass");
  res.Set("rows", T);
  res.Set("k", static_cast<double>(dk));
  res.Set("n", static_cast<double>(heads));
  res.Set("storedBytes", bytes);
  res.Set("threads", o.threads);
  res.Set("pairs", o.pairs);
  set_rates(res, bytes, pairs, small_bytes, tc);
  res.Set("outputs", static_cast<double>(out.size()));
  res.Set("outputsWritten", static_cast<double>(written));
  // Per state value and token: two multiply-adds (e, u) and a multiply and a multiply-add (the write).
  res.Set("macPerByte", 3.0 * T / 4.0);
  res.Set("sink", static_cast<double>(sinks[0]) + static_cast<double>(S[0]) + static_cast<double>(out[0]));
  return res;
}

}  // namespace

Napi::Value KernelBench(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    const BenchOpts o = parse(info);
    if (o.gdn) return gdn_bench(env, o);
    const cpu::Kernels& K = cpu::kernels();
    const DType t = o.type;
    const size_t wrow = row_bytes(t, o.k);
    const int64_t panel_bytes = cpu::kPanel * static_cast<int64_t>(wrow);
    const int64_t panels = std::max<int64_t>(32 * o.threads, (o.mib << 20) / panel_bytes);
    // Whole panels of 16 rows, at least 32 per thread (8 per stream): with many threads and long
    // rows that is more than --mib asks for; the bytes measured are reported, and a matrix past the
    // limit refused.
    if (panels * panel_bytes > (int64_t{4096} << 20))
      throw std::invalid_argument("kernelBench: " + std::to_string(o.threads) + " threads at k = " + std::to_string(o.k) +
                                  " need a matrix of " + std::to_string((panels * panel_bytes) >> 20) +
                                  " MiB (32 panels of 16 rows per thread), over the 4096 MiB limit");
    const int64_t n = panels * cpu::kPanel;
    std::mt19937 rng(7);
    AlignedBuffer stored(static_cast<size_t>(n) * wrow, false);
    fill_weights(t, stored.as<uint8_t>(), stored.size(), rng);
    const bool quant = is_quant(t);
    const bool panel_type = quant && K.packs_quant_panels(t);
    AlignedBuffer packed;
    if (panel_type) {
      packed.resize(K.quant_panel_bytes(t, o.k) * static_cast<size_t>(panels), false);
      K.pack_quant_panels(t, stored.data(), n, o.k, 0, panels, packed.data());
      stored = AlignedBuffer();
    }
    // bf16 where the engine packs it (AVX-512 BF16): the same panels.
    const bool packed_bf16 = cpu::packs_bf16(K, t, o.k);
    if (packed_bf16) {
      packed.resize(stored.size(), false);
      K.pack_bf16(stored.as<uint16_t>(), n, o.k, 0, panels, packed.as<uint16_t>());
      stored = AlignedBuffer();
    }
    const AlignedBuffer& mat = panel_type || packed_bf16 ? packed : stored;
    // Activations.
    std::vector<float> x(static_cast<size_t>(o.rows * o.k));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (float& v : x) v = u(rng);
    std::vector<float> xs;
    AlignedBuffer xq, xa, xb;
    const void* act = x.data();
    if (quant) {
      const ActQuant a = dtype_info(t).act;
      xq.resize(quant::act_row_bytes(a, o.k) * static_cast<size_t>(o.rows) + 64);
      K.quantize_act(a, x.data(), o.rows, o.k, xq.data());
      act = xq.data();
      const size_t ab = K.panel_act_bytes(a, o.rows, o.k);
      if (panel_type && ab > 0) {
        xa.resize(ab + 64);
        K.panel_act(a, xq.data(), o.rows, o.k, xa.data());
      }
    } else if (packed_bf16) {
      xb.resize(x.size() * 2 + 64);
      K.to_bf16(x.data(), xb.as<uint16_t>(), static_cast<int64_t>(x.size()));
      act = xb.data();
    } else if (t == DType::bf16) {
      xs.resize(x.size());
      K.split_x(x.data(), o.rows, o.k, xs.data());
      act = xs.data();
    }
    // NaN until written: the outputs a kernel pass leaves unwritten are counted (a split that
    // skipped panels would read fewer bytes and look faster).
    std::vector<float> y(static_cast<size_t>(o.rows * n), std::numeric_limits<float>::quiet_NaN());
    const Product prod{K, t, quant, panel_type, packed_bf16, o.rows, o.k, n, mat.data(), act, xa.size() ? xa.data() : nullptr, y.data()};

    ThreadPool pool(o.threads);
    std::vector<float> sinks(static_cast<size_t>(o.threads));
    const auto kernel_pass = [&] {
      const int64_t t0 = now_ns();
      pool.run([&](int tid, int nth) { prod.run(tid, nth); });
      return static_cast<double>(now_ns() - t0) / 1e9;
    };
    const auto read = [&] { return read_pass(pool, mat.as<float>(), static_cast<int64_t>(mat.size() / sizeof(float)), sinks); };
    kernel_pass();
    const int64_t written = std::count_if(y.begin(), y.end(), [](float v) { return !std::isnan(v); });
    read();
    const Pairs pairs = alternate(o.pairs, kernel_pass, read);
    const double bytes = static_cast<double>(mat.size());
    // A panel's bytes as the kernel reads them: the packed layout's where the type is packed (Q8_0's
    // panels pad a row's odd block to a pair, so they can exceed the stored rows').
    const int64_t read_panel_bytes = static_cast<int64_t>(mat.size()) / panels;
    // In L2: one thread over the first ~256 KiB of the matrix (at least one panel: more for long
    // rows, reported as cacheBytes), repeated.
    const int64_t small_panels = std::clamp<int64_t>((int64_t{256} << 10) / read_panel_bytes, 1, panels);
    const Product small{K, t, quant, panel_type, packed_bf16, o.rows, o.k, small_panels * cpu::kPanel, mat.data(), act, prod.xa, y.data()};
    const std::vector<double> tc = cache_passes([&] { small.run(0, 1); });
    const double small_bytes = static_cast<double>(small_panels * read_panel_bytes);
    // Multiply-adds per byte read: rows x a panel's elements over its bytes as read.
    const double macs_per_byte = static_cast<double>(o.rows) * static_cast<double>(o.k) * cpu::kPanel / static_cast<double>(read_panel_bytes);

    auto res = Napi::Object::New(env);
    res.Set("isa", active_isa_name());  // the ISA path as every bench header names it (cpuInfo().isa)
    res.Set("type", dtype_info(t).name);
    // The layout the kernel read, as the engine stores this type on this ISA.
    res.Set("layout", packed_bf16 ? (amx_enabled() ? "bf16 panels (AMX tiles)" : "bf16 panels (vdpbf16ps)") : panel_type ? "quantized panels" : quant ? "quantized rows" : "rows");
    res.Set("rows", o.rows);
    res.Set("k", static_cast<double>(o.k));
    res.Set("n", static_cast<double>(n));
    res.Set("storedBytes", static_cast<double>(n) * static_cast<double>(wrow));
    res.Set("threads", o.threads);
    res.Set("pairs", o.pairs);
    set_rates(res, bytes, pairs, small_bytes, tc);
    res.Set("outputs", static_cast<double>(y.size()));
    res.Set("outputsWritten", static_cast<double>(written));
    res.Set("macPerByte", macs_per_byte);
    res.Set("sink", static_cast<double>(sinks[0]) + static_cast<double>(y[0]));
    return res;
  } catch (const std::exception& e) {
    Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
    return env.Undefined();
  }
}

}  // namespace lumen
