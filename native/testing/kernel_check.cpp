#include "testing/kernel_check.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/probes.h"
#include "core/argmax.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/top_k.h"
#include "testing/quant_check.h"

namespace lumen {
namespace {

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

// The sampler kernels' weight exp(e) for e = v - shift in f32 (e <= 0), in double: 0 below e^-87.3,
// where their vectorised exp stops.
double floored_exp_ref(float e) { return e >= -87.3f ? std::exp(static_cast<double>(e)) : 0.0; }

// Relative error with an absolute floor (values near zero).
double rel_err(double got, double want) { return std::fabs(got - want) / std::max(1e-6, std::fabs(want)); }

// Worst error of y [M, N] against x [M, K] . w [N, K]^T summed in double, relative to the sum of
// |terms| (cancellation makes a plain relative error meaningless); a NaN output (left unwritten)
// counts as 1.
double matmul_err(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N, int64_t K,
                  const std::vector<float>& y) {
  double err = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(x[static_cast<size_t>(m * K + k)]) * w[static_cast<size_t>(n * K + k)];
        ref += t;
        mag += std::fabs(t);
      }
      const double got = y[static_cast<size_t>(m * N + n)];
      err = std::max(err, std::isnan(got) ? 1.0 : std::fabs(got - ref) / std::max(mag, 1e-30));
    }
  return err;
}

// Packed bf16 matmul (AVX-512 BF16 only) in every way the backend calls it: whole panel ranges,
// odd chunks (tile groups cut short), and the sliced streams of decode-sized batches with the
// remainder panels apart. Against a double sum of the same bf16-rounded operands, relative to
// the sum of |terms|. Every output is first set to NaN, so a panel left out fails too. Batch
// invariance: every row of a batch has the bits of the same row computed alone, whole and in the
// decode streams (a sequence's tokens must not depend on the batch around them, nor a token
// recomputed in a prefill after a preemption on the one decoded first).
void check_packed(Napi::Object& obj, const cpu::Kernels& K) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  double mm_err = 0;
  int mm_cases = 0, row_cases = 0, row_mismatches = 0, batch_rows = 0, batch_mismatches = 0;
  for (int64_t Kd : {2, 64, 1030})
    for (int64_t N : {5, 16, 72, 200})
      for (int64_t M : {1, 2, 5, 6, 7, 8, 9, 16, 17, 23}) {
        std::vector<uint16_t> w(static_cast<size_t>(N * Kd)), xb(static_cast<size_t>(M * Kd));
        for (auto& v : w) v = f32_to_bf16(u(rng));
        for (auto& v : xb) v = f32_to_bf16(u(rng));
        // The same bf16 values as f32, for the reference.
        std::vector<float> wf(w.size()), xf(xb.size());
        for (size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_f32(w[i]);
        for (size_t i = 0; i < xb.size(); ++i) xf[i] = bf16_to_f32(xb[i]);
        std::vector<uint16_t> packed(static_cast<size_t>(cpu::packed_elems(N, Kd)));
        const int64_t P = (N + cpu::kPanel - 1) / cpu::kPanel;
        K.pack_bf16(w.data(), N, Kd, 0, P, packed.data());
        // The rows read back from the panels (the embedding's lookup), bit for bit.
        if (M == 1) {
          std::vector<float> row(static_cast<size_t>(Kd));
          for (int64_t n = 0; n < N; ++n) {
            cpu::packed_bf16_row(packed.data(), Kd, n, row.data());
            row_cases += 1;
            row_mismatches += std::memcmp(row.data(), wf.data() + n * Kd, static_cast<size_t>(Kd) * 4) != 0;
          }
        }
        // mode 0: whole; 1: in chunks of 5 panels; 2: as the backend's decode streams read them
        // (cpu::decode_streams of them, far apart, the remainder panels apart).
        auto run = [&](int mode, int64_t rows, const uint16_t* x, float* y) {
          if (mode == 0) K.matmul_packed(x, rows, Kd, packed.data(), N, 0, P, y, N, 0);
          if (mode == 1)
            for (int64_t p0 = 0; p0 < P; p0 += 5) K.matmul_packed(x, rows, Kd, packed.data(), N, p0, std::min(P, p0 + 5), y, N, 0);
          if (mode == 2) {
            const int64_t S = cpu::decode_streams(true, rows), Q = P / S;
            for (int64_t p0 = 0; p0 < Q; p0 += 2) K.matmul_packed(x, rows, Kd, packed.data(), N, p0, std::min(Q, p0 + 2), y, N, Q);
            K.matmul_packed(x, rows, Kd, packed.data(), N, S * Q, P, y, N, 0);
          }
        };
        for (int mode = 0; mode < 3; ++mode) {
          if (mode == 2 && M > 16) continue;  // the backend slices decode-sized batches only
          std::vector<float> y(static_cast<size_t>(M * N), std::numeric_limits<float>::quiet_NaN());
          run(mode, M, xb.data(), y.data());
          mm_err = std::max(mm_err, matmul_err(xf, wf, M, N, Kd, y));
          ++mm_cases;
          if (M == 1 || mode == 1) continue;
          // Each row alone, whole and in the decode streams.
          for (int64_t m = 0; m < M; ++m)
            for (int alone : {0, 2}) {
              std::vector<float> y1(static_cast<size_t>(N), std::numeric_limits<float>::quiet_NaN());
              run(alone, 1, xb.data() + m * Kd, y1.data());
              batch_rows += 1;
              batch_mismatches += std::memcmp(y1.data(), y.data() + m * N, static_cast<size_t>(N) * 4) != 0;
            }
        }
      }
  obj.Set("packedMatmulCases", mm_cases);
  obj.Set("packedMatmulMaxErr", mm_err);
  obj.Set("packedRowCases", row_cases);
  obj.Set("packedRowMismatches", row_mismatches);
  obj.Set("packedBatchRows", batch_rows);
  obj.Set("packedBatchMismatches", batch_mismatches);
}

Napi::Object check_table(Napi::Env env, const cpu::Kernels& K, const cpu::Probes& probes) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto obj = Napi::Object::New(env);

  // argmax: random rows (odd lengths reach the scalar tails), planted ties, NaNs and infinities
  // (the row's pick is then -1, wherever they sit: the first value, the vector part, the tail),
  // signed zeros; the kernel keeps a first index per vector lane: ties within one lane (32 apart),
  // across lanes, between the vector part and the tail, and a maximum that moves every step.
  // max_value on the same rows against std::max in order (and n = 0: -inf).
  int mismatches = 0, cases = 0, max_mismatches = 0, non_finite_missed = 0;
  max_mismatches += K.max_value(nullptr, 0) != -std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 7, 16, 33, 64, 1000, 248077}) {
    for (int variant = 0; variant < 14; ++variant) {
      std::vector<float> x(n);
      for (auto& v : x) v = u(rng);
      bool planted = false;  // a NaN or an infinity in the row
      if (variant == 1 && n > 2) x[n - 1] = x[n / 2] = 5.f;                       // tie: first wins
      if (variant == 2 && n > 3) { x[1] = nan; planted = true; }                      // NaN in the vector part
      if (variant == 3) { x[0] = nan; planted = true; }                               // NaN first
      if (variant == 4) for (auto& v : x) v = -std::fabs(v) - 1.f;                // all negative
      if (variant == 5 && n > 2) { for (auto& v : x) v = -1.f; x[n - 1] = 0.f; x[n / 2] = -0.f; }
      if (variant == 6 && n > 40) x[3] = x[35] = 5.f;                              // one lane twice
      if (variant == 7 && n > 40) x[20] = x[4] = 5.f;                               // two lanes
      if (variant == 8 && n > 2) x[0] = x[n - 1] = 5.f;                             // x[0] and the tail
      if (variant == 9) for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);  // rising: n - 1
      if (variant == 10 && n > 2) {                                                  // NaN but x[0]
        for (auto& v : x) v = nan;
        x[0] = -2.f;
        x[n / 2] = inf;
        planted = true;
      }
      if (variant == 11) { x[n - 1] = inf; planted = true; }                          // +inf last (the tail)
      if (variant == 12) { x[n / 2] = -inf; planted = true; }                         // -inf in the middle
      if (variant == 13 && n > 40) { x[n - 33] = nan; planted = true; }               // NaN in the last vectors
      const int32_t got = K.argmax(x.data(), n);
      mismatches += got != argmax_scalar(x.data(), n);
      non_finite_missed += planted && got != -1;
      float mx = -std::numeric_limits<float>::infinity();
      for (float v : x) mx = std::max(mx, v);
      max_mismatches += K.max_value(x.data(), n) != mx;
      ++cases;
    }
  }
  obj.Set("argmaxCases", cases);
  obj.Set("argmaxMismatches", mismatches);
  obj.Set("argmaxNonFiniteMissed", non_finite_missed);
  obj.Set("maxValueMismatches", max_mismatches);

  // SwiGLU over a wide input range (exp clamps at both ends), and NaN propagation.
  std::vector<float> g(4099), up(4099), out(4099);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = -100.f + 200.f * static_cast<float>(i) / static_cast<float>(g.size() - 1);
    up[i] = u(rng);
  }
  K.swiglu(g.data(), up.data(), out.data(), static_cast<int64_t>(g.size()));
  double swiglu_err = 0;
  for (size_t i = 0; i < g.size(); ++i) swiglu_err = std::max(swiglu_err, rel_err(out[i], silu_ref(g[i]) * up[i]));
  obj.Set("swigluMaxRelErr", swiglu_err);
  std::vector<float> gn(16, 1.f), un(16, 1.f), on(16);
  gn[3] = std::numeric_limits<float>::quiet_NaN();
  K.swiglu(gn.data(), un.data(), on.data(), 16);
  obj.Set("swigluNanPropagates", std::isnan(on[3]) && !std::isnan(on[2]));

  // Causal conv (4 taps) + SiLU, the state carried across calls of 2, 1, 3, 9 and 300 rows (shorter
  // and longer than the window, one and several channel tiles), over all channels of a count off the
  // vector width and over a sub-range of them (the others untouched).
  double conv_err = 0;
  constexpr std::array<std::array<int, 3>, 2> conv_cases{{{70, 0, 70}, {600, 5, 590}}};  // cd, c0, c1
  for (const auto& cc : conv_cases) {
    const int cd = cc[0], c0 = cc[1], c1 = cc[2], kc = 4;
    std::vector<float> wT(static_cast<size_t>(kc) * cd), state(static_cast<size_t>(kc - 1) * cd);
    for (auto& v : wT) v = u(rng);
    for (auto& v : state) v = u(rng);
    std::vector<std::vector<double>> hist(static_cast<size_t>(cd));  // every input so far, per channel
    for (int c = 0; c < cd; ++c)
      for (int r = 0; r < kc - 1; ++r) hist[c].push_back(state[r * cd + c]);
    constexpr std::array<int, 5> conv_lengths{2, 1, 3, 9, 300};
    for (const int T : conv_lengths) {
      std::vector<float> x(static_cast<size_t>(T) * cd), y(x.size(), 0.f);
      for (auto& v : x) v = u(rng);
      const std::vector<float> st0 = state;
      K.conv_silu(x.data(), cd, T, state.data(), wT.data(), kc, cd, c0, c1, y.data() + c0, cd);  // channel c at y[t cd + c]
      for (int c = 0; c < cd; ++c) {
        if (c < c0 || c >= c1) {  // outside the range: neither output nor state written
          for (int t = 0; t < T; ++t) conv_err = std::max(conv_err, static_cast<double>(std::fabs(y[t * cd + c])));
          for (int r = 0; r < kc - 1; ++r) conv_err = std::max(conv_err, static_cast<double>(std::fabs(state[r * cd + c] - st0[r * cd + c])));
          continue;
        }
        auto& h = hist[c];
        const size_t n0 = h.size();
        for (int t = 0; t < T; ++t) h.push_back(x[t * cd + c]);
        for (int t = 0; t < T; ++t) {
          double acc = 0, mag = 0;  // mag: the sum of |terms|, the scale of the f32 sum's rounding
          for (int r = 0; r < kc; ++r) {
            acc += wT[r * cd + c] * h[n0 + t + 1 - kc + r];
            mag += std::fabs(wT[r * cd + c] * h[n0 + t + 1 - kc + r]);
          }
          const double want = silu_ref(acc);
          conv_err = std::max(conv_err, std::fabs(y[t * cd + c] - want) / std::max(std::fabs(want), mag));
        }
        for (int r = 0; r < kc - 1; ++r) conv_err = std::max(conv_err, rel_err(state[r * cd + c], h[h.size() - (kc - 1) + r]));
      }
    }
  }
  obj.Set("convMaxRelErr", conv_err);

  // Gated RMSNorm of one 128-wide head.
  std::vector<float> o(128), z(128), w(128), o0;
  for (auto& v : o) v = u(rng);
  for (auto& v : z) v = 4.f * u(rng);
  for (auto& v : w) v = u(rng);
  o0 = o;
  K.gated_rmsnorm(o.data(), z.data(), w.data(), 128, 1e-6f);
  double ss = 0;
  for (float v : o0) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / 128 + 1e-6);
  double norm_err = 0;
  for (int i = 0; i < 128; ++i) norm_err = std::max(norm_err, rel_err(o[i], o0[i] * inv * w[i] * silu_ref(z[i])));
  obj.Set("gatedNormMaxRelErr", norm_err);

  // Softmax numerators exp(x - max) and their sum, 37 scores (a vector tail) down to -80.
  std::vector<float> sc(37), sc0;
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = -80.f * static_cast<float>(i) / 36.f + 0.5f * u(rng);
  sc0 = sc;
  const float mx = *std::max_element(sc0.begin(), sc0.end());
  const float sum = K.exp_shift_sum(sc.data(), static_cast<int64_t>(sc.size()), mx);
  double exp_err = 0, sum_ref = 0;
  for (size_t i = 0; i < sc.size(); ++i) {
    const double e = std::exp(static_cast<double>(sc0[i] - mx));  // the kernel subtracts in fp32 too
    sum_ref += e;
    exp_err = std::max(exp_err, std::fabs(sc[i] - e) / e);
  }
  obj.Set("expMaxRelErr", std::max(exp_err, rel_err(sum, sum_ref)));

  // The whole-vocabulary sampler's passes (row_bounds, bucket_mass, bucket_members) against the
  // rule in scalar code: rows of every length class (a vector tail, the vocabulary), each as one
  // piece and as pieces cut at odd offsets; planted NaNs and infinities (the vector part, the tail);
  // rows narrow and wide against kBucketNats, values far below the rest (a weight of 0), a span of
  // one denormal (an infinite scale: every candidate in the last bucket) and temperatures 0.7, 1
  // and 2.5 (the engine's threads flush denormals; this thread does not). Each bucket's members:
  // the ids the scalar rule puts there, in order, with the value x / t bit for bit and the weight
  // within 4 ulp of std::exp (0 below e^-87.3; every bucket on rows up to 5000 values, every ninth
  // past that); each bucket's mass within 1e-6 of the reference weights' sum.
  {
    int64_t bound_cases = 0, bound_mismatches = 0, member_cases = 0, member_mismatches = 0;
    double weight_err = 0, mass_err = 0;
    const float temps[] = {0.7f, 1.f, 2.5f};
    int variant = 0;
    for (int n : {1, 5, 16, 37, 100, 1000, 4099, 248320}) {
      for (int kind = 0; kind < 5; ++kind, ++variant) {
        std::normal_distribution<float> nd(0.f, kind == 1 ? 0.02f : kind == 2 ? 30.f : 3.2f);
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = nd(rng);
        if (kind == 3)
          for (int i = 0; i < n; i += 7) x[static_cast<size_t>(i)] = -300.f;  // weights of 0
        if (kind == 4)  // a span of one denormal: the scale overflows to inf, the best's distance is 0 * inf
          for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = i % 3 == 1 ? 1e-40f : 0.f;
        // Bounds: the row as it is, then with a NaN or an infinity planted.
        float lo = 0, hi = 0;
        ++bound_cases;
        bound_mismatches += !K.row_bounds(x.data(), n, &lo, &hi) || lo != *std::min_element(x.begin(), x.end()) ||
                            hi != *std::max_element(x.begin(), x.end());
        for (float bad : {nan, inf, -inf}) {
          std::vector<float> y = x;
          y[static_cast<size_t>((variant * 131 + 17) % n)] = bad;
          float l2 = 0, h2 = 0;
          ++bound_cases;
          bound_mismatches += K.row_bounds(y.data(), n, &l2, &h2);
        }
        const float t = temps[variant % 3];
        constexpr int kBuckets = 64;  // fewer than the sampler's 1024, so every bucket is checked on the small rows
        const float vmax = hi / t, span = std::min(64.f, vmax - lo / t);
        const cpu::BucketRule rule{t, vmax, span > 0 ? kBuckets / span : 0.f, kBuckets};
        const auto bucket_ref = [&](float v) {
          const float d = (vmax - v) * rule.scale;
          return d < static_cast<float>(kBuckets - 1) ? static_cast<int>(d) : kBuckets - 1;
        };
        std::vector<double> ref(kBuckets, 0.0);
        for (const float xi : x) {
          const float v = xi / t;
          ref[static_cast<size_t>(bucket_ref(v))] += floored_exp_ref(v - vmax);
        }
        // Cut points: none, and pieces at offsets that are no multiple of a vector.
        std::vector<int> cuts = {0};
        for (int c = 13; c < n; c += 13 + c / 3) cuts.push_back(c);
        cuts.push_back(n);
        for (int whole = 0; whole < 2; ++whole) {
          const std::vector<int> at = whole ? std::vector<int>{0, n} : cuts;
          std::vector<double> mass(kBuckets, 0.0);
          for (size_t c = 0; c + 1 < at.size(); ++c) K.bucket_mass(x.data() + at[c], at[c + 1] - at[c], rule, mass.data());
          for (int b = 0; b < kBuckets; ++b)
            mass_err = std::max(mass_err, std::fabs(mass[static_cast<size_t>(b)] - ref[static_cast<size_t>(b)]) /
                                              std::max(1e-30, ref[static_cast<size_t>(b)]));
          for (int b = 0; b < kBuckets; b += n > 5000 ? 9 : 1) {
            std::vector<cpu::BucketMember> got;
            for (size_t c = 0; c + 1 < at.size(); ++c)
              K.bucket_members(x.data() + at[c], at[c + 1] - at[c], at[c], rule, b, got);
            size_t k = 0;
            for (int i = 0; i < n; ++i) {
              const float v = x[static_cast<size_t>(i)] / t;
              if (bucket_ref(v) != b) continue;
              ++member_cases;
              if (k >= got.size() || got[k].id != i || std::memcmp(&got[k].value, &v, 4) != 0) {
                ++member_mismatches;
                continue;
              }
              const float e = v - vmax;
              const double want = floored_exp_ref(e);
              weight_err = std::max(weight_err, want == 0 ? std::fabs(static_cast<double>(got[k].weight))
                                                          : std::fabs(got[k].weight - want) / want);
              ++k;
            }
            member_mismatches += static_cast<int64_t>(got.size() - std::min(got.size(), k));  // members the rule does not give
          }
        }
      }
    }
    obj.Set("sampleBoundCases", static_cast<double>(bound_cases));
    obj.Set("sampleBoundMismatches", static_cast<double>(bound_mismatches));
    obj.Set("sampleMemberCases", static_cast<double>(member_cases));
    obj.Set("sampleMemberMismatches", static_cast<double>(member_mismatches));
    obj.Set("sampleWeightMaxRelErr", weight_err);
    obj.Set("sampleMassMaxRelErr", mass_err);
  }

  // Log-softmax's passes: exp_sum against the sum of exps in double (rows down to -300 below the
  // shift: terms of 0), top_values against the scalar insertion of each value in order (k of 0, 1,
  // 5 and 20, rows shorter than k, ties planted across vectors and in the tail; a rising row, where
  // every vector beats the k-th).
  {
    int64_t top_cases = 0, top_mismatches = 0;
    double sum_err = 0;
    int variant = 0;
    for (int n : {1, 3, 16, 19, 100, 1000, 4099, 248320}) {
      for (int kind = 0; kind < 3; ++kind, ++variant) {
        std::normal_distribution<float> nd(0.f, 3.2f);
        std::vector<float> x(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          float& v = x[static_cast<size_t>(i)];
          v = kind == 2 ? static_cast<float>(i) * 1e-3f : nd(rng);
          if (kind == 1) v = std::round(v);  // ties everywhere
          if (kind == 0 && i % 11 == 0) v = -300.f;
        }
        const float shift = *std::max_element(x.begin(), x.end());
        double want = 0;
        for (const float v : x) want += floored_exp_ref(v - shift);
        sum_err = std::max(sum_err, rel_err(K.exp_sum(x.data(), n, shift), want));
        for (int k : {0, 1, 5, 20}) {
          std::vector<int32_t> ids(20, -1), rids(20, -1);
          std::vector<float> vals(20, nan), rvals(20, nan);
          int kept = 0;
          for (int i = 0; i < n && k > 0; ++i) {
            const float v = x[static_cast<size_t>(i)];
            if (kept == k && !(v > rvals[static_cast<size_t>(k - 1)])) continue;
            int j = kept < k ? kept++ : k - 1;
            for (; j > 0 && v > rvals[static_cast<size_t>(j - 1)]; --j) {
              rvals[static_cast<size_t>(j)] = rvals[static_cast<size_t>(j - 1)];
              rids[static_cast<size_t>(j)] = rids[static_cast<size_t>(j - 1)];
            }
            rvals[static_cast<size_t>(j)] = v;
            rids[static_cast<size_t>(j)] = i;
          }
          ++top_cases;
          top_mismatches += K.top_values(x.data(), n, k, ids.data(), vals.data()) != kept || ids != rids ||
                            std::memcmp(vals.data(), rvals.data(), sizeof(float) * static_cast<size_t>(kept)) != 0;
        }
      }
    }
    obj.Set("logprobSumMaxRelErr", sum_err);
    obj.Set("topValueCases", static_cast<double>(top_cases));
    obj.Set("topValueMismatches", static_cast<double>(top_mismatches));
  }

  // A top-k pick against core/top_k.h's top_candidates: the same candidates, values bit for bit and
  // in the same order, for k of 1, 3, 20, 40 and 1024 (more than some rows hold) on rows with ties
  // everywhere, all equal, rising and falling (the bar moves at every cut, or never; falling with
  // late values just above the k-th best: a bar set too high drops them), ordinary
  // rows at temperatures 0.7, 1, 2.5 and 1e-5 over values that overflow to +-inf there; and the
  // first id -1 for a row holding a NaN or an infinity (all NaN included).
  {
    int64_t cases = 0, mismatches = 0, marks_missed = 0;
    std::vector<PickCandidate> want, got(1024), scratch;
    int variant = 0;
    for (int n : {1, 5, 17, 100, 1000, 4099, 248320}) {
      for (int kind = 0; kind < 7; ++kind, ++variant) {
        std::normal_distribution<float> nd(0.f, 3.2f);
        std::vector<float> x(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          float& v = x[static_cast<size_t>(i)];
          v = nd(rng);
          if (kind == 1) v = std::round(v);                                // ties everywhere
          if (kind == 2) v = 0.25f;                                          // all equal
          if (kind == 3) v = static_cast<float>(i) * 1e-3f;                  // rising
          if (kind == 4) v = -static_cast<float>(i) * 1e-3f;                 // falling
          if (kind == 5) v = (i % 2 ? 3e33f : -3e33f) * std::fabs(v) + v;  // past FLT_MAX at t = 1e-5
          if (kind == 6) v = -static_cast<float>(i) * 1e-3f;
        }
        // Falling, then at the end for each k a value between the k-th and the (k-1)-th best seen
        // before: it is among the k best, and only a bar at the k-th value (not above) keeps it.
        if (kind == 6 && n > 4 + 2 * 1024 + 64)
          for (int j = 0; j < 4; ++j)
            x[static_cast<size_t>(n - 1 - j)] = -(static_cast<float>(std::array<int, 4>{3, 20, 40, 1024}[static_cast<size_t>(j)]) - 1.5f) * 1e-3f;
        const float t = kind == 5 ? 1e-5f : std::array<float, 3>{0.7f, 1.f, 2.5f}[static_cast<size_t>(variant % 3)];
        for (int k : {1, 3, 20, 40, 1024}) {
          const int nw = top_candidates(x.data(), n, k, t, nullptr, want);
          std::fill(got.begin(), got.end(), PickCandidate{nan, -7});
          const int ng = K.top_candidates(x.data(), n, k, t, got.data(), scratch);
          ++cases;
          bool same = ng == nw;
          for (int j = 0; same && j < nw; ++j)
            same = got[static_cast<size_t>(j)].id == want[static_cast<size_t>(j)].id &&
                   std::memcmp(&got[static_cast<size_t>(j)].value, &want[static_cast<size_t>(j)].value, 4) == 0;
          mismatches += !same;
        }
        for (float bad : {nan, inf, -inf}) {
          std::vector<float> y = x;
          y[static_cast<size_t>((variant * 37 + 11) % n)] = bad;
          for (int k : {1, 40}) {
            got[0] = {0.f, 5};
            K.top_candidates(y.data(), n, k, t, got.data(), scratch);
            ++cases;
            marks_missed += got[0].id != -1;
          }
        }
      }
    }
    std::vector<float> all_nan(50, nan);
    got[0] = {0.f, 5};
    K.top_candidates(all_nan.data(), 50, 3, 1.f, got.data(), scratch);
    marks_missed += got[0].id != -1;
    obj.Set("topKCases", static_cast<double>(cases));
    obj.Set("topKMismatches", static_cast<double>(mismatches));
    obj.Set("topKMarksMissed", static_cast<double>(marks_missed));
  }

  // Attention over a paged run: every query-group size the kernels specialise (1, 2, 4, 8) and
  // the generic path (3, 5); contexts that end inside a block, on a block boundary, and that leave
  // full blocks after the side-by-side groups (2, 5, 9 blocks); blocks scattered and out of order;
  // a row length off the vector width; with and without prefetching. The error is relative to the
  // sum of |terms| (cancellation makes a plain relative error meaningless).
  double rows_err = 0;
  for (int nq : {1, 2, 3, 4, 5, 8})
    for (int ctx : {1, 7, 16, 23, 80, 141})
      for (int n : {256, 37}) {
        const int bs = 16, nblk = (ctx + bs - 1) / bs;
        const int64_t qs = 2 * n + 3, os = ctx + 2;
        std::vector<float> pool(static_cast<size_t>(2 * nblk + 1) * bs * n);  // K and V blocks, interleaved
        for (auto& e : pool) e = u(rng);
        std::vector<const float*> kb(nblk), vb(nblk);
        for (int b = 0; b < nblk; ++b) {
          const int slot = (b * 7) % nblk;  // scattered: block b of the run lives at pool slot 2*slot
          kb[b] = pool.data() + static_cast<size_t>(2 * slot) * bs * n;
          vb[b] = kb[b] + static_cast<size_t>(bs) * n;
        }
        auto row = [&](const std::vector<const float*>& blk, int j) { return blk[j / bs] + (j % bs) * n; };
        std::vector<float> q(nq * qs), wgt(nq * os), sco(nq * os, 0.f), ov(nq * n), ov0;
        for (auto* vec : {&q, &wgt, &ov})
          for (auto& e : *vec) e = u(rng);
        ov0 = ov;
        // Both ways of calling: prefetching (the blocks after, then `next`), and rows in cache (-1).
        const bool pf = (nq + ctx + n) % 2 == 0;
        K.attn_scores(q.data(), qs, nq, kb.data(), bs, ctx, n, 0.5f, sco.data(), os, vb.data(), pf ? 1 : -1);
        K.attn_values(wgt.data(), os, nq, vb.data(), bs, ctx, n, ov.data(), n, nullptr, pf ? 0 : -1);
        for (int h = 0; h < nq; ++h) {
          for (int j = 0; j < ctx; ++j) {
            double ref = 0, mag = 0;
            for (int i = 0; i < n; ++i) {
              ref += static_cast<double>(q[h * qs + i]) * row(kb, j)[i];
              mag += std::fabs(static_cast<double>(q[h * qs + i]) * row(kb, j)[i]);
            }
            rows_err = std::max(rows_err, std::fabs(sco[h * os + j] - 0.5 * ref) / (0.5 * mag));
          }
          for (int i = 0; i < n; ++i) {
            double ref = ov0[h * n + i], mag = std::fabs(ref);
            for (int j = 0; j < ctx; ++j) {
              ref += static_cast<double>(wgt[h * os + j]) * row(vb, j)[i];
              mag += std::fabs(static_cast<double>(wgt[h * os + j]) * row(vb, j)[i]);
            }
            rows_err = std::max(rows_err, std::fabs(ov[h * n + i] - ref) / mag);
          }
        }
      }
  obj.Set("attnRowsMaxErr", rows_err);

  // A prefill tile's attention (attn_tile) against a double-precision causal softmax: query rows
  // of 1..9 tokens x group sizes 1, 2, 4 and 8 (lane counts below, at and past a vector and two),
  // contexts from one key to several blocks (ending inside and on a block boundary), scattered
  // blocks, row lengths 256 and off the vector width. Error relative to the sum of |terms| of
  // each output (the values' weights are probabilities, so this is also a bound on the absolute
  // error over max |v|). Then the order independence: each query row alone in a call gives the
  // same bits as in the tile.
  double tile_err = 0;
  int tile_order_diffs = 0;
  // A tile's nr = ntok x group query rows of n random values (row i at qp[i]) and their contexts
  // (token i / group sees pos0 + i / group + 1 keys).
  auto tile_queries = [&](int nr, int n, int group, int pos0, std::vector<float>& qs, std::vector<const float*>& qp,
                          std::vector<int32_t>& cx) {
    qs.resize(static_cast<size_t>(nr) * n);
    for (auto& e : qs) e = u(rng);
    qp.resize(nr);
    cx.resize(nr);
    for (int i = 0; i < nr; ++i) {
      qp[i] = qs.data() + static_cast<size_t>(i) * n;
      cx[i] = pos0 + i / group + 1;
    }
  };
  for (int group : {1, 2, 4, 8})
    for (int ntok : {1, 3, 8, 9})
      for (int pos0 : {0, 5, 16, 70})
        for (int n : {256, 40}) {
          if ((group + ntok + pos0) % 3 == 0 && n == 256) continue;  // thin the grid a little
          const int bs = 16, ctx_max = pos0 + ntok, nblk = (ctx_max + bs - 1) / bs, nr = ntok * group;
          std::vector<float> pool(static_cast<size_t>(2 * nblk) * bs * n);
          for (auto& e : pool) e = 2.f * u(rng);
          std::vector<const float*> kb(nblk), vb(nblk);
          for (int b = 0; b < nblk; ++b) {
            const int slot = (b * 7 + 1) % nblk;  // 7: coprime to every nblk here (1, 2, 5), so a permutation
            kb[b] = pool.data() + static_cast<size_t>(2 * slot) * bs * n;
            vb[b] = kb[b] + static_cast<size_t>(bs) * n;
          }
          auto row = [&](const std::vector<const float*>& blk, int j) { return blk[j / bs] + (j % bs) * n; };
          std::vector<float> qs, os(static_cast<size_t>(nr) * n, NAN);
          std::vector<const float*> qp;
          std::vector<int32_t> cx;
          tile_queries(nr, n, group, pos0, qs, qp, cx);
          std::vector<float*> op(nr);
          for (int i = 0; i < nr; ++i) op[i] = os.data() + static_cast<size_t>(i) * n;
          std::vector<float> scratch;
          const float scale = 1.f / std::sqrt(static_cast<float>(n));
          K.attn_tile(qp.data(), cx.data(), nr, kb.data(), vb.data(), bs, n, scale, op.data(), scratch);
          for (int i = 0; i < nr; ++i) {
            std::vector<double> p(cx[i]);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < cx[i]; ++j) {
              double dot = 0;
              for (int d = 0; d < n; ++d) dot += static_cast<double>(qp[i][d]) * row(kb, j)[d];
              p[j] = dot * scale;
              mx = std::max(mx, p[j]);
            }
            for (auto& e : p) sum += e = std::exp(e - mx);
            for (int d = 0; d < n; ++d) {
              double ref = 0, mag = 0;
              for (int j = 0; j < cx[i]; ++j) {
                ref += p[j] / sum * row(vb, j)[d];
                mag += std::fabs(p[j] / sum * row(vb, j)[d]);
              }
              const double got = op[i][d];
              tile_err = std::max(tile_err, std::isnan(got) ? 1.0 : std::fabs(got - ref) / std::max(mag, 1e-30));
            }
            std::vector<float> alone(n, NAN);
            float* ao = alone.data();
            K.attn_tile(&qp[i], &cx[i], 1, kb.data(), vb.data(), bs, n, scale, &ao, scratch);
            tile_order_diffs += std::memcmp(alone.data(), op[i], sizeof(float) * n) != 0;
          }
        }
  obj.Set("attnTileMaxErr", tile_err);
  obj.Set("attnTileOrderDiffs", tile_order_diffs);

  // The f16 KV cache's kernels: on keys and values rounded to f16, the f16 kernels (widening as
  // they read) against the f32 kernels fed the same rounded values as f32 must give the same bits
  // (the widening is exact and every sum keeps its order), so the f32 kernels' accuracy checks
  // above carry over. Rows (every group size, contexts inside and past the side-by-side groups,
  // with and without prefetching, row lengths 256 and off the vector width) and prompt tiles.
  // Then to_f16 against core/dtype.h's f32_to_f16 (nearest-even; halfway cases, subnormals,
  // overflow to inf, NaN kept NaN) over lengths off the vector width.
  int f16_diffs = 0;
  {
    // nblk K and V blocks of bs rows of n values, f16-rounded, held both as f16 and as the same
    // values in f32; block b of the run at pool slot (b * mul + add) % nblk (scattered).
    struct HalfPool {
      std::vector<float> p32;
      std::vector<uint16_t> p16;
      std::vector<const float*> kb, vb;
      std::vector<const uint16_t*> kh, vh;
    };
    auto half_pool = [&](int nblk, int bs, int n, float amp, int mul, int add) {
      HalfPool h;
      const size_t elems = static_cast<size_t>(2 * nblk) * bs * n;
      h.p32.resize(elems);
      h.p16.resize(elems);
      for (size_t i = 0; i < elems; ++i) {
        h.p16[i] = f32_to_f16(amp * u(rng));
        h.p32[i] = f16_to_f32(h.p16[i]);
      }
      for (int b = 0; b < nblk; ++b) {
        const size_t off = static_cast<size_t>(2 * ((b * mul + add) % nblk)) * bs * n;
        h.kb.push_back(h.p32.data() + off);
        h.vb.push_back(h.kb.back() + static_cast<size_t>(bs) * n);
        h.kh.push_back(h.p16.data() + off);
        h.vh.push_back(h.kh.back() + static_cast<size_t>(bs) * n);
      }
      return h;
    };
    auto differ = [](const std::vector<float>& a, const std::vector<float>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0;
    };
    for (int nq : {1, 2, 3, 4, 8})
      for (int ctx : {1, 23, 80, 141})
        for (int n : {256, 37}) {
          const int bs = 16, nblk = (ctx + bs - 1) / bs;
          const int64_t qs = 2 * n + 3, os = ctx + 2;
          const HalfPool h = half_pool(nblk, bs, n, 1.f, 7, 0);
          const auto &kb = h.kb, &vb = h.vb;
          const auto &kh = h.kh, &vh = h.vh;
          std::vector<float> q(nq * qs), wgt(nq * os), s32(nq * os, 0.f), s16(nq * os, 0.f), o32(nq * n);
          for (auto* vec : {&q, &wgt, &o32})
            for (auto& e : *vec) e = u(rng);
          std::vector<float> o16 = o32;
          const bool pf = (nq + ctx + n) % 2 == 0;
          K.attn_scores(q.data(), qs, nq, kb.data(), bs, ctx, n, 0.5f, s32.data(), os, vb.data(), pf ? 1 : -1);
          K.attn_scores_f16(q.data(), qs, nq, kh.data(), bs, ctx, n, 0.5f, s16.data(), os, vh.data(), pf ? 1 : -1);
          K.attn_values(wgt.data(), os, nq, vb.data(), bs, ctx, n, o32.data(), n, nullptr, pf ? 0 : -1);
          K.attn_values_f16(wgt.data(), os, nq, vh.data(), bs, ctx, n, o16.data(), n, nullptr, pf ? 0 : -1);
          f16_diffs += differ(s32, s16) + differ(o32, o16);
        }
    for (int group : {1, 4, 8})
      for (int ntok : {1, 9})
        for (int pos0 : {0, 16, 70})
          for (int n : {256, 40}) {
            const int bs = 16, ctx_max = pos0 + ntok, nblk = (ctx_max + bs - 1) / bs, nr = ntok * group;
            const HalfPool h = half_pool(nblk, bs, n, 2.f, 7, 1);
            const auto &kb = h.kb, &vb = h.vb;
            const auto &kh = h.kh, &vh = h.vh;
            std::vector<float> qs, o32(static_cast<size_t>(nr) * n, NAN), o16 = o32;
            std::vector<const float*> qp;
            std::vector<int32_t> cx;
            tile_queries(nr, n, group, pos0, qs, qp, cx);
            std::vector<float*> op32(nr), op16(nr);
            for (int i = 0; i < nr; ++i) {
              op32[i] = o32.data() + static_cast<size_t>(i) * n;
              op16[i] = o16.data() + static_cast<size_t>(i) * n;
            }
            std::vector<float> scratch;
            const float scale = 1.f / std::sqrt(static_cast<float>(n));
            K.attn_tile(qp.data(), cx.data(), nr, kb.data(), vb.data(), bs, n, scale, op32.data(), scratch);
            K.attn_tile_f16(qp.data(), cx.data(), nr, kh.data(), vh.data(), bs, n, scale, op16.data(), scratch);
            f16_diffs += differ(o32, o16);
          }
  }
  obj.Set("attnF16Diffs", f16_diffs);
  int to_f16_diffs = 0;
  {
    std::vector<float> xs;
    for (int i = 0; i < 300; ++i) xs.push_back(8.f * u(rng));
    // halfway between two f16 values (ties to even both ways), subnormal halves, overflow, NaN.
    for (float f : {1.f + 1.f / 2048.f, 1.f + 3.f / 2048.f, -1.f - 1.f / 2048.f, 3e-5f, -6.1e-6f, 1e-8f, 65504.f,
                    65520.f, 1e6f, -1e6f, 0.f, -0.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
      xs.push_back(f);
    for (size_t len : {xs.size(), xs.size() - 3, size_t{5}}) {
      std::vector<uint16_t> got(len, 0xFFFF);
      K.to_f16(xs.data() + (xs.size() - len), got.data(), static_cast<int64_t>(len));
      for (size_t i = 0; i < len; ++i) {
        const float x = xs[xs.size() - len + i];
        const uint16_t want = f32_to_f16(x);
        const bool both_nan = std::isnan(x) && (got[i] & 0x7C00) == 0x7C00 && (got[i] & 0x3FF) != 0;
        to_f16_diffs += !both_nan && got[i] != want;
      }
    }
  }
  obj.Set("toF16Diffs", to_f16_diffs);

  // o *= sigmoid(gate) over a wide gate range (37 elements: a vector tail).
  std::vector<float> og(37), gg(37), og0;
  for (size_t i = 0; i < og.size(); ++i) {
    og[i] = u(rng);
    gg[i] = -90.f + 180.f * static_cast<float>(i) / 36.f;
  }
  og0 = og;
  K.mul_sigmoid(og.data(), gg.data(), static_cast<int64_t>(og.size()));
  double sig_err = 0;
  for (size_t i = 0; i < og.size(); ++i) {
    const double want = og0[i] / (1.0 + std::exp(-static_cast<double>(gg[i])));
    sig_err = std::max(sig_err, std::fabs(og[i] - want) / std::max(1e-30, std::fabs(want)));
  }
  obj.Set("sigmoidMaxRelErr", sig_err);

  // The bandwidth probe's streaming sum: every element counted once, for each stream count and
  // lengths that leave tails (a part shorter than two vectors, n not a multiple of the streams).
  double ssum_err = 0;
  for (int64_t n : {1, 5, 33, 257, 1000, 4099})
    for (int streams : {1, 2, 4, 8}) {
      std::vector<float> xs(static_cast<size_t>(n));
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += xs[static_cast<size_t>(i)] = static_cast<float>(i % 7 + 1);
      ssum_err = std::max(ssum_err, rel_err(probes.stream_sum(xs.data(), n, streams), want));
    }
  obj.Set("streamSumMaxRelErr", ssum_err);

  // Gated DeltaNet, one value head from a non-zero state: the token recurrence and the chunked
  // (WY) form, against the recurrence in double (S <- e^g S; d = beta (v - S^T k); S += k d^T;
  // o = S^T q). The Qwen3.5 head (dk = dv = 128) and a smaller one; lengths inside one block, on
  // its edge, and over several. Errors relative to the largest |o| and |S| of the reference. For
  // the Qwen3.5 head also the chunked form as GEMMs (gdn_chunked_128), which must give the general
  // form's bits.
  {
    double rec_err = 0, chunk_err = 0;
    int gemm_cases = 0, gemm_mismatches = 0;  // the GEMM form (dk = dv = 128) against the general one, bit for bit
    int span_cases = 0, span_mismatches = 0;  // each chunked form over blocks in separate calls against one call
    std::vector<float> scratch;
    for (int dk : {128, 32})
      for (int n : {1, 17, 64, 65, 150}) {
        const int dv = dk;
        std::vector<float> q(static_cast<size_t>(n) * dk), k(q.size()), v(static_cast<size_t>(n) * dv), beta(n), g(n);
        for (int i = 0; i < n; ++i) {
          double nq = 0, nk = 0;
          for (int r = 0; r < dk; ++r) {
            q[i * dk + r] = u(rng);
            k[i * dk + r] = u(rng);
            nq += static_cast<double>(q[i * dk + r]) * q[i * dk + r];
            nk += static_cast<double>(k[i * dk + r]) * k[i * dk + r];
          }
          for (int r = 0; r < dk; ++r) {  // l2-normalised, q also by 1/sqrt(dk), as the backend does
            q[i * dk + r] = static_cast<float>(q[i * dk + r] / std::sqrt(nq * dk));
            k[i * dk + r] = static_cast<float>(k[i * dk + r] / std::sqrt(nk));
          }
          for (int c = 0; c < dv; ++c) v[i * dv + c] = u(rng);
          beta[i] = 0.5f + 0.49f * u(rng);
          g[i] = -0.75f + 0.74f * u(rng);  // log decay in (-1.49, -0.01)
        }
        std::vector<float> S0(static_cast<size_t>(dk) * dv);
        for (auto& e : S0) e = u(rng);
        std::vector<double> Sr(S0.begin(), S0.end()), orf(static_cast<size_t>(n) * dv);
        for (int i = 0; i < n; ++i) {
          const double dec = std::exp(static_cast<double>(g[i]));
          for (auto& e : Sr) e *= dec;
          for (int c = 0; c < dv; ++c) {
            double e = 0;
            for (int r = 0; r < dk; ++r) e += Sr[static_cast<size_t>(r) * dv + c] * k[i * dk + r];
            const double d = beta[i] * (v[i * dv + c] - e);
            for (int r = 0; r < dk; ++r) Sr[static_cast<size_t>(r) * dv + c] += k[i * dk + r] * d;
          }
          for (int c = 0; c < dv; ++c) {
            double o = 0;
            for (int r = 0; r < dk; ++r) o += Sr[static_cast<size_t>(r) * dv + c] * q[i * dk + r];
            orf[static_cast<size_t>(i) * dv + c] = o;
          }
        }
        double omax = 1e-30, smax = 1e-30;
        for (double e : orf) omax = std::max(omax, std::fabs(e));
        for (double e : Sr) smax = std::max(smax, std::fabs(e));
        std::vector<float> chunked_so;  // the general chunked form's S then o, for the GEMM form
        const int n_forms = dk == 128 ? 3 : 2;  // recurrence, chunked, and for dk = 128 its GEMM form
        for (int form = 0; form < n_forms; ++form) {
          std::vector<float> S = S0, o(orf.size(), std::numeric_limits<float>::quiet_NaN());
          const cpu::GdnHeadIO io{q.data(), k.data(), v.data(), beta.data(), g.data(), o.data(), dk, dk, dv, 1, dv};
          if (form == 0)
            K.gdn_recurrent(S.data(), io, n, dk, dv);
          else if (form == 1)
            K.gdn_chunked(S.data(), io, n, dk, dv, cpu::kGdnBlock, scratch);
          else
            K.gdn_chunked_128(S.data(), io, n, scratch);
          double err = 0;
          for (size_t i = 0; i < o.size(); ++i) err = std::max(err, std::isnan(o[i]) ? 1.0 : std::fabs(o[i] - orf[i]) / omax);
          for (size_t i = 0; i < S.size(); ++i) err = std::max(err, std::fabs(S[i] - Sr[i]) / smax);
          (form == 0 ? rec_err : chunk_err) = std::max(form == 0 ? rec_err : chunk_err, err);
          if (form >= 1 && n > cpu::kGdnBlock) {
            // A block at a time (the backend's spans): the chunked forms' own blocks, so the same bits.
            std::vector<float> S2 = S0, o2(o.size(), std::numeric_limits<float>::quiet_NaN());
            for (int t0 = 0; t0 < n; t0 += cpu::kGdnBlock) {
              const int m = std::min(cpu::kGdnBlock, n - t0);
              const cpu::GdnHeadIO span{q.data() + t0 * dk, k.data() + t0 * dk, v.data() + t0 * dv, beta.data() + t0, g.data() + t0,
                                        o2.data() + t0 * dv, dk, dk, dv, 1, dv};
              if (form == 1)
                K.gdn_chunked(S2.data(), span, m, dk, dv, cpu::kGdnBlock, scratch);
              else
                K.gdn_chunked_128(S2.data(), span, m, scratch);
            }
            ++span_cases;
            if (std::memcmp(S2.data(), S.data(), S.size() * sizeof(float)) != 0 ||
                std::memcmp(o2.data(), o.data(), o.size() * sizeof(float)) != 0)
              ++span_mismatches;
          }
          if (form == 1) {
            chunked_so = S;
            chunked_so.insert(chunked_so.end(), o.begin(), o.end());
          } else if (form == 2) {
            ++gemm_cases;
            S.insert(S.end(), o.begin(), o.end());
            if (std::memcmp(S.data(), chunked_so.data(), S.size() * sizeof(float)) != 0) ++gemm_mismatches;
          }
        }
      }
    obj.Set("gdnRecurrentMaxErr", rec_err);
    obj.Set("gdnChunkedMaxErr", chunk_err);
    obj.Set("gdnGemmFormCases", gemm_cases);
    obj.Set("gdnGemmFormMismatches", gemm_mismatches);
    obj.Set("gdnSpanCases", span_cases);
    obj.Set("gdnSpanMismatches", span_mismatches);
  }

  // Row-major f32 / bf16 products: the decode stream tiles (whole panel ranges, odd chunks, the
  // four sliced streams with the remainder panels apart) and the prefill GEMM (whole, and in row
  // pieces that start off the panel width). K off the vector widths reaches the tails, N off the
  // panel the partial panels. Against matmul_err's double sums; every output starts as NaN, so a
  // row left out fails too. The stream tiles' batches also against their rows alone, bit for bit.
  {
    double mm_err = 0;
    int mm_cases = 0, batch_mismatches = 0;
    for (DType wt : {DType::f32, DType::bf16})
      for (int64_t Kd : {1, 7, 64, 100, 1030, 2100})  // 2100: the GEMM's k slices (2048 on AVX2)
        for (int64_t N : {5, 16, 72, 200})
          for (int64_t M : {1, 2, 3, 5, 6, 7, 8, 13, 16, 17, 23}) {
            std::vector<float> wf(static_cast<size_t>(N * Kd)), xf(static_cast<size_t>(M * Kd));
            for (auto& v : wf) v = u(rng);
            for (auto& v : xf) v = u(rng);
            std::vector<uint16_t> wb(wf.size());
            if (wt == DType::bf16)
              for (size_t i = 0; i < wf.size(); ++i) wf[i] = bf16_to_f32(wb[i] = f32_to_bf16(wf[i]));
            const void* w = wt == DType::bf16 ? static_cast<const void*>(wb.data()) : wf.data();
            std::vector<float> xs(xf.size());
            K.split_x(xf.data(), M, Kd, xs.data());
            const float* xk = wt == DType::bf16 ? xs.data() : xf.data();
            const int64_t P = (N + cpu::kPanel - 1) / cpu::kPanel, Q = P / 4;
            for (int mode = 0; mode < 5; ++mode) {
              if (mode <= 2 && M > 16) continue;  // decode-sized batches only
              std::vector<float> y(static_cast<size_t>(M * N), std::numeric_limits<float>::quiet_NaN());
              if (mode == 0) K.matmul_streams(xk, M, Kd, w, wt, N, 0, P, y.data(), N, 0);
              if (mode == 1)
                for (int64_t p0 = 0; p0 < P; p0 += 3) K.matmul_streams(xk, M, Kd, w, wt, N, p0, std::min(P, p0 + 3), y.data(), N, 0);
              if (mode == 2) {
                for (int64_t p0 = 0; p0 < Q; p0 += 2) K.matmul_streams(xk, M, Kd, w, wt, N, p0, std::min(Q, p0 + 2), y.data(), N, Q);
                K.matmul_streams(xk, M, Kd, w, wt, N, 4 * Q, P, y.data(), N, 0);
              }
              if (mode == 3) K.gemm(xf.data(), M, Kd, w, wt, 0, N, y.data(), N);
              if (mode == 4)
                for (int64_t r = 0; r < N; r += 37) K.gemm(xf.data(), M, Kd, w, wt, r, std::min(N, r + 37), y.data(), N);
              mm_err = std::max(mm_err, matmul_err(xf, wf, M, N, Kd, y));
              ++mm_cases;
              // A batch's stream tiles give each row the bits of that row alone (the same FMAs in
              // the same order per output, whatever tile covers it).
              if (mode <= 2 && M > 1)
                for (int64_t m = 0; m < M; ++m) {
                  std::vector<float> y1(static_cast<size_t>(N));
                  K.matmul_streams(xk + m * Kd, 1, Kd, w, wt, N, 0, P, y1.data(), N, 0);
                  if (std::memcmp(y1.data(), y.data() + m * N, y1.size() * sizeof(float)) != 0) ++batch_mismatches;
                }
            }
          }
    obj.Set("rowMatmulCases", mm_cases);
    obj.Set("rowMatmulMaxErr", mm_err);
    obj.Set("rowStreamBatchMismatches", batch_mismatches);
  }

  if (K.pack_bf16 && cpu_features().avx512bf16) check_packed(obj, K);
  return obj;
}

}  // namespace

Napi::Value KernelCheck(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto res = Napi::Object::New(env);
  const auto& f = cpu_features();
  if (f.avx2 && f.fma) res.Set("avx2", check_table(env, cpu::avx2::table, cpu::avx2::probe_table));
  if (f.avx512) res.Set("avx512", check_table(env, cpu::avx512::table, cpu::avx512::probe_table));
  // The quantized kernels use VNNI in the AVX-512 table (every CPU with AVX-512 BF16 has it).
  if (f.avx2 && f.fma) res.Get("avx2").As<Napi::Object>().Set("quant", check_quant_table(env, cpu::avx2::table));
  if (f.avx512 && f.avx512vnni) res.Get("avx512").As<Napi::Object>().Set("quant", check_quant_table(env, cpu::avx512::table));
  // Where the AVX-512 table's packed bf16 products run on AMX tiles, the same checks with them
  // switched off: the vdpbf16ps tiles the table runs elsewhere.
  if (amx_usable() && cpu::avx512::table.pack_bf16) {
    struct AmxOff {
      AmxOff() { set_amx_enabled(false); }
      ~AmxOff() { set_amx_enabled(true); }
    } off;
    auto o = Napi::Object::New(env);
    check_packed(o, cpu::avx512::table);
    res.Set("avx512NoAmx", o);
  }
  return res;
}

}  // namespace lumen
