// The whole-vocabulary sampler's passes over a logits row (kernels.h, BucketRule): the row's
// bounds, each bucket's weight, and one bucket's candidates; log-softmax's (logprobs): the sum of
// the row's exps and its k largest values; and a top-k pick's k best candidates. Every lane
// computes the same IEEE operations in the same order (a division, a subtraction, a product,
// vexp), and a piece's tail goes through the same vector code on a padded copy, so a value, weight
// and bucket are the same bits in both passes, on both tables and wherever the piece starts.
#include <algorithm>
#include <limits>

#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/simd.h"

namespace lumen::cpu::LUMEN_ISA {

namespace {

// store_trunc / store_f64: the lanes truncated to int32 / widened to double, stored (aligned).
// ge_bits, gt_bits, lt_bits: per lane, 1 where the comparison holds, as bit i of the result for
// lane i. keep_where_ge: x where a >= b, else 0.
#if defined(__AVX512F__)
inline void store_trunc(int32_t* p, vf a) { _mm512_store_si512(p, _mm512_cvttps_epi32(a)); }
inline void store_f64(double* p, vf a) {
  _mm512_store_pd(p, _mm512_cvtps_pd(_mm512_castps512_ps256(a)));
  _mm512_store_pd(p + 8, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
}
inline unsigned ge_bits(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline unsigned gt_bits(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline unsigned lt_bits(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline vf keep_where_ge(vf x, vf a, vf b) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, b, _CMP_GE_OQ), x); }
#else
inline void store_trunc(int32_t* p, vf a) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), _mm256_cvttps_epi32(a)); }
inline void store_f64(double* p, vf a) {
  _mm256_store_pd(p, _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
  _mm256_store_pd(p + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
}
inline unsigned ge_bits(vf a, vf b) { return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ))); }
inline unsigned gt_bits(vf a, vf b) { return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ))); }
inline unsigned lt_bits(vf a, vf b) { return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ))); }
inline vf keep_where_ge(vf x, vf a, vf b) { return _mm256_and_ps(x, _mm256_cmp_ps(a, b, _CMP_GE_OQ)); }
#endif

// vexp's lower clamp: below it the weight is 0 rather than exp(-87.3).
constexpr float kExpFloor = -87.3f;

inline vf floored_exp(vf e) { return keep_where_ge(vexp(e), e, vset1(kExpFloor)); }

struct Lanes {
  vf t, top, scale, last;
  explicit Lanes(const BucketRule& r)
      : t(vset1(r.temperature)), top(vset1(r.vmax)), scale(vset1(r.scale)), last(vset1(static_cast<float>(r.buckets - 1))) {}
  vf value(vf x) const { return vdiv(x, t); }
  // min(d, buckets - 1) with d = (vmax - v) * scale: its truncation is the bucket (d >= 0; vmin
  // returns its second operand for a NaN, so nothing reaches past the last bucket).
  vf bucket(vf v) const { return vmin(vmul(vsub(top, v), scale), last); }
  vf weight(vf v) const { return floored_exp(vsub(v, top)); }
};

// A piece's last n < VW values as a vector (the rest of the lanes 0; the caller uses only n).
inline vf load_tail(const float* x, int64_t n) {
  alignas(64) float buf[VW] = {};
  std::copy(x, x + n, buf);
  return vload(buf);
}

}  // namespace

bool row_bounds(const float* x, int64_t n, float* lo, float* hi) {
  // x - x is 0 for a finite value and NaN otherwise: summed per lane, NaN once one is not finite.
  vf mx[2] = {vset1(-INFINITY), vset1(-INFINITY)}, mn[2] = {vset1(INFINITY), vset1(INFINITY)}, bad = vzero();
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW)
    for (int u = 0; u < 2; ++u) {
      const vf v = vload(x + i + u * VW);
      mx[u] = vmax(mx[u], v);
      mn[u] = vmin(mn[u], v);
      bad = vadd(bad, vsub(v, v));
    }
  alignas(64) float a[VW], b[VW], c[VW];
  vstore(a, vmax(mx[0], mx[1]));
  vstore(b, vmin(mn[0], mn[1]));
  vstore(c, bad);
  float h = -std::numeric_limits<float>::infinity(), l = std::numeric_limits<float>::infinity();
  for (int j = 0; j < VW; ++j) {
    if (c[j] != 0.f) return false;
    h = std::max(h, a[j]);
    l = std::min(l, b[j]);
  }
  for (; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
    h = std::max(h, x[i]);
    l = std::min(l, x[i]);
  }
  *lo = l;
  *hi = h;
  return true;
}

void bucket_mass(const float* x, int64_t n, const BucketRule& rule, double* mass) {
  // Four vectors' weights and buckets at a time, then their additions: the four exps' chains of
  // dependent FMAs run side by side rather than each behind the previous vector's additions.
  constexpr int kU = 4;
  const Lanes L(rule);
  alignas(64) double w[kU * VW];
  alignas(64) int32_t d[kU * VW];
  const auto put = [&](int u, vf xv) {
    const vf v = L.value(xv);
    store_f64(w + u * VW, L.weight(v));
    store_trunc(d + u * VW, L.bucket(v));
  };
  int64_t i = 0;
  for (; i + kU * VW <= n; i += kU * VW) {
    for (int u = 0; u < kU; ++u) put(u, vload(x + i + u * VW));
    for (int j = 0; j < kU * VW; ++j) mass[d[j]] += w[j];
  }
  for (; i < n; i += VW) {
    const int64_t lanes = std::min<int64_t>(VW, n - i);
    put(0, lanes == VW ? vload(x + i) : load_tail(x + i, lanes));
    for (int64_t j = 0; j < lanes; ++j) mass[d[j]] += w[j];
  }
}

void bucket_members(const float* x, int64_t n, int32_t id0, const BucketRule& rule, int b,
                    std::vector<BucketMember>& out) {
  // A candidate is in bucket b when b <= min(d, buckets - 1) < b + 1 (the truncation, for d >= 0).
  const Lanes L(rule);
  const vf lo = vset1(static_cast<float>(b)), hi = vset1(static_cast<float>(b + 1));
  alignas(64) float v[VW], w[VW];
  const auto scan = [&](vf xv, int64_t at, int64_t lanes) {
    const vf val = L.value(xv);
    const vf d = L.bucket(val);
    unsigned bits = ge_bits(d, lo) & lt_bits(d, hi);
    if (lanes < VW) bits &= (1u << lanes) - 1;
    if (bits == 0) return;
    vstore(v, val);
    vstore(w, L.weight(val));
    for (; bits != 0; bits &= bits - 1) {
      const int j = __builtin_ctz(bits);
      out.push_back({v[j], id0 + static_cast<int32_t>(at + j), w[j]});
    }
  };
  int64_t i = 0;
  for (; i + VW <= n; i += VW) scan(vload(x + i), i, VW);
  if (i < n) scan(load_tail(x + i, n - i), i, n - i);
}

double exp_sum(const float* x, int64_t n, float shift) {
  // Two vectors at a time, each term widened to double and summed per lane.
  const vf sh = vset1(shift);
  alignas(64) double w[2 * VW];
  double acc[2 * VW] = {};
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    store_f64(w, floored_exp(vsub(vload(x + i), sh)));
    store_f64(w + VW, floored_exp(vsub(vload(x + i + VW), sh)));
    for (int j = 0; j < 2 * VW; ++j) acc[j] += w[j];
  }
  for (; i < n; i += VW) {
    const int64_t lanes = std::min<int64_t>(VW, n - i);
    store_f64(w, floored_exp(vsub(lanes == VW ? vload(x + i) : load_tail(x + i, lanes), sh)));
    for (int64_t j = 0; j < lanes; ++j) acc[j] += w[j];
  }
  double s = 0;
  for (const double a : acc) s += a;
  return s;
}

int top_values(const float* x, int64_t n, int k, int32_t* ids, float* vals) {
  // Each value offered in id order, as the scalar insertion does; a vector whose values none beat
  // the k-th is passed over whole (a superset of the lanes to offer: the k-th only rises within it).
  if (k <= 0) return 0;
  int kept = 0;
  const auto offer = [&](int64_t i) {
    const float v = x[i];
    if (kept == k && !(v > vals[k - 1])) return;
    int j = kept < k ? kept++ : k - 1;
    for (; j > 0 && v > vals[j - 1]; --j) {
      vals[j] = vals[j - 1];
      ids[j] = ids[j - 1];
    }
    vals[j] = v;
    ids[j] = static_cast<int32_t>(i);
  };
  int64_t i = 0;
  for (; i < n && kept < k; ++i) offer(i);
  for (; i + VW <= n; i += VW)
    for (unsigned bits = gt_bits(vload(x + i), vset1(vals[k - 1])); bits != 0; bits &= bits - 1) offer(i + __builtin_ctz(bits));
  for (; i < n; ++i) offer(i);
  return kept;
}

int top_candidates(const float* x, int64_t n, int k, float t, PickCandidate* out, std::vector<PickCandidate>& scratch) {
  // One pass: each value x / t (vdiv, the scalar division's bits) that can still be among the k
  // best is kept in scratch; whenever scratch reaches its cap, the k best of it are kept and the
  // k-th's value becomes the bar. Past the bar only a value above it can be among the k best: a
  // value equal to it comes at a higher id than every kept candidate holding it, so after the k
  // kept. Before the first cut every ordered value passes (NaN never: nth_element needs an order).
  if (k < 1) return 0;  // the contract is k >= 1 (nothing to keep, no row to mark)
  const size_t cap = 2 * static_cast<size_t>(k) + 4 * VW;
  scratch.clear();
  scratch.reserve(cap + VW);
  const vf tv = vset1(t), none = vset1(-INFINITY);
  vf bad = vzero();
  bool cut = false;
  vf bar = none;
  alignas(64) float v[VW];
  const auto keep_best = [&] {
    std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), candidate_before);
    scratch.resize(static_cast<size_t>(k));
    bar = vset1(scratch[static_cast<size_t>(k - 1)].value);
    cut = true;
  };
  const auto scan = [&](vf xv, int64_t at, int64_t lanes) {
    bad = vadd(bad, vsub(xv, xv));
    const vf val = vdiv(xv, tv);
    unsigned bits = cut ? gt_bits(val, bar) : ge_bits(val, none);
    if (lanes < VW) bits &= (1u << lanes) - 1;
    if (bits == 0) return;
    vstore(v, val);
    for (; bits != 0; bits &= bits - 1) {
      const int j = __builtin_ctz(bits);
      scratch.push_back({v[j], static_cast<int32_t>(at + j)});
    }
    if (scratch.size() >= cap) keep_best();
  };
  int64_t i = 0;
  for (; i + VW <= n; i += VW) scan(vload(x + i), i, VW);
  if (i < n) scan(load_tail(x + i, n - i), i, n - i);  // its padding lanes are 0, finite
  alignas(64) float b[VW];
  vstore(b, bad);
  const bool finite = std::all_of(b, b + VW, [](float e) { return e == 0.f; });
  const size_t m = std::min(scratch.size(), static_cast<size_t>(k));
  std::partial_sort(scratch.begin(), scratch.begin() + static_cast<int64_t>(m), scratch.end(), candidate_before);
  std::copy(scratch.begin(), scratch.begin() + static_cast<int64_t>(m), out);
  if (!finite) out[0] = {m > 0 ? out[0].value : 0.f, -1};  // a row of NaNs keeps no candidate: the mark still goes out
  return static_cast<int>(m);
}

}  // namespace lumen::cpu::LUMEN_ISA
