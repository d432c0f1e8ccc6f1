#include "engine/sampler.h"

#include "core/argmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lumen {

namespace {

bool is_banned(const std::vector<int32_t>* banned, int32_t id) {
  return banned && std::binary_search(banned->begin(), banned->end(), id);
}

}  // namespace

int32_t Sampler::sample(const float* logits, int vocab, const std::vector<int32_t>* banned) {
  if (p_.temperature <= 0.f) {
    const int32_t best = argmax_scalar(logits, vocab);
    if (best < 0 || !is_banned(banned, best)) return best;
    int32_t pick = -1;
    for (int i = 0; i < vocab; ++i)
      if (!is_banned(banned, i) && (pick < 0 || logits[i] > logits[pick])) pick = i;
    return pick < 0 ? best : pick;
  }
  if (p_.top_k > 0 && p_.top_k < vocab) {
    if (!row_finite(logits, vocab)) return -1;
    const int n = top_candidates(logits, vocab, p_.top_k, p_.temperature, banned, cand_);
    if (n == 0) return argmax_scalar(logits, vocab);
    return draw(cand_.data(), n);
  }
  return draw_all(logits, vocab, banned);
}

int32_t Sampler::draw_all(const float* logits, int vocab, const std::vector<int32_t>* banned) {
  // Every candidate of the row (top_k 0): the same draw as draw() after a sort of the whole row
  // (walk the candidates from the most likely, subtracting each one's weight from a uniform r), but
  // without the sort. The candidates fall into buckets of their distance below the best value
  // (kBucketNats / kBuckets wide), which the sorted order visits one after another; the weights of
  // each bucket are summed in one pass, the bucket where the walk ends is found from those sums,
  // and only that bucket's candidates are put in order. A request sampling from the whole
  // vocabulary costs its step a few passes over the row, not a sort of 248 k candidates a token on
  // the thread every request's step runs on. (The sums are added in another order than the sorted
  // walk's, which moves a draw only when r falls within a rounding error of a boundary.)
  cand_.clear();
  cand_.reserve(static_cast<size_t>(vocab));
  float mx = -std::numeric_limits<float>::infinity(), mn = std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    if (!std::isfinite(logits[i])) return -1;  // a NaN or an infinity anywhere in the row: nothing to pick from
    if (is_banned(banned, i)) continue;
    const float v = logits[i] / p_.temperature;
    cand_.push_back({v, i});
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  if (cand_.empty()) return argmax_scalar(logits, vocab);
  // The buckets span the row's values (at most kBucketNats below the best: past that, weights below
  // e^-64 of the best share the last bucket), so a narrow row is cut as finely as a wide one.
  constexpr int kBuckets = 1024;
  constexpr float kBucketNats = 64.f;
  const float span = std::min(kBucketNats, mx - mn);
  const float scale = span > 0 ? kBuckets / span : 0.f;
  // Non-increasing in the value (a larger value is never in a later bucket), so the sorted order is
  // the buckets in turn, each in its own order.
  const auto bucket_of = [&](float v) {
    const float d = (mx - v) * scale;
    return d < static_cast<float>(kBuckets - 1) ? static_cast<int>(d) : kBuckets - 1;
  };
  // In float (a quarter of a double exp's time over 248 k values), summed in double.
  const auto weight = [&](float v) { return static_cast<double>(std::exp(v - mx)); };
  mass_.assign(kBuckets, 0.0);
  double total = 0;
  for (const PickCandidate& c : cand_) {
    const double w = weight(c.value);
    mass_[static_cast<size_t>(bucket_of(c.value))] += w;
    total += w;
  }
  if (!(total > 0 && std::isfinite(total))) {  // a scaled logit overflowed: the most likely
    return std::min_element(cand_.begin(), cand_.end(), candidate_before)->id;
  }
  // Bucket b's candidates in draw order (into run_): gathered in id order, which is already the
  // draw order when their values are all equal.
  const auto bucket_run = [&](int b) {
    run_.clear();
    bool equal = true;
    for (const PickCandidate& c : cand_)
      if (bucket_of(c.value) == b) {
        equal = equal && (run_.empty() || c.value == run_.front().value);
        run_.push_back(c);
      }
    if (!equal) std::sort(run_.begin(), run_.end(), candidate_before);
  };
  // top_p: the shortest prefix whose probability reaches it (draw()'s rule): it ends in bucket
  // keep_b, after its first keep_j candidates; kept is its weight.
  int keep_b = kBuckets - 1;
  size_t keep_j = std::numeric_limits<size_t>::max();
  double kept = total;
  if (p_.top_p < 1.f) {
    double acc = 0;
    bool found = false;
    for (int b = 0; b < kBuckets && !found; ++b) {
      if (mass_[static_cast<size_t>(b)] == 0) continue;
      if ((acc + mass_[static_cast<size_t>(b)]) / total < p_.top_p && b < kBuckets - 1) {
        acc += mass_[static_cast<size_t>(b)];
        continue;
      }
      bucket_run(b);
      for (size_t j = 0; j < run_.size(); ++j) {
        acc += weight(run_[j].value);
        if (acc / total >= p_.top_p) {
          keep_b = b;
          keep_j = j + 1;
          found = true;
          break;
        }
      }
    }
    kept = acc;  // not found (rounding): every candidate is kept, as draw() keeps n
  }
  // The last bucket holding a kept candidate: always walked, so r outlasting the walk by a rounding
  // error ends on the last kept candidate, as in draw().
  int last_b = keep_b;
  while (last_b > 0 && mass_[static_cast<size_t>(last_b)] == 0) --last_b;
  std::uniform_real_distribution<double> u(0.0, kept);
  double r = u(rng_);
  for (int b = 0; b <= last_b; ++b) {
    const double m = mass_[static_cast<size_t>(b)];
    if (m == 0) continue;
    const bool partial = b == keep_b && keep_j != std::numeric_limits<size_t>::max();
    if (!partial && b < last_b && r - m > 0) {
      r -= m;
      continue;
    }
    bucket_run(b);
    const size_t end_j = partial ? std::min(keep_j, run_.size()) : run_.size();
    for (size_t j = 0; j < end_j; ++j) {
      r -= weight(run_[j].value);
      if (r <= 0 || (b == last_b && j + 1 == end_j)) return run_[j].id;
    }
  }
  return std::min_element(cand_.begin(), cand_.end(), candidate_before)->id;  // not reached: last_b is walked
}

int32_t Sampler::draw(const PickCandidate* cand, int n) {
  if (n > 0 && cand[0].id < 0) return -1;  // the pick marked a row that is not finite
  const float mx = cand[0].value;
  double sum = 0;
  probs_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sum += probs_[i] = std::exp(static_cast<double>(cand[i].value - mx));
  if (!(sum > 0 && std::isfinite(sum))) return cand[0].id;  // a scaled logit overflowed: the most likely
  if (p_.top_p < 1.f) {
    double acc = 0;
    int keep = n;
    for (int i = 0; i < n; ++i) {
      acc += probs_[i] / sum;
      if (acc >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    sum = 0;
    for (int i = 0; i < n; ++i) sum += probs_[i];
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (int i = 0; i < n; ++i) {
    r -= probs_[i];
    if (r <= 0) return cand[i].id;
  }
  return cand[n - 1].id;
}

void row_logprobs(const float* logits, int vocab, int32_t token, int n, float* token_logprob, int32_t* top_ids,
                  float* top_logprobs) {
  // One pass for the maximum and the n best (kept sorted, most likely first), one for the sum.
  n = std::clamp(n, 0, std::min(kMaxTopLogprobs, vocab));
  int kept = 0;
  float mx = logits[0];
  for (int i = 0; i < vocab; ++i) {
    const float v = logits[i];
    mx = std::max(mx, v);
    if (n == 0 || (kept == n && !(v > top_logprobs[n - 1]))) continue;
    int j = kept < n ? kept++ : n - 1;
    while (j > 0 && v > top_logprobs[j - 1]) {
      top_logprobs[j] = top_logprobs[j - 1];
      top_ids[j] = top_ids[j - 1];
      --j;
    }
    top_logprobs[j] = v;
    top_ids[j] = i;
  }
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = static_cast<double>(mx) + std::log(sum);
  *token_logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  for (int j = 0; j < n; ++j) top_logprobs[j] = static_cast<float>(static_cast<double>(top_logprobs[j]) - lse);
}

}  // namespace lumen
