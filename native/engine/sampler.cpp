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
    const int32_t best = k_->argmax(logits, vocab);  // argmax_scalar's pick, vectorised
    if (best < 0 || !is_banned(banned, best)) return best;
    int32_t pick = -1;
    for (int i = 0; i < vocab; ++i)
      if (!is_banned(banned, i) && (pick < 0 || logits[i] > logits[pick])) pick = i;
    return pick < 0 ? best : pick;
  }
  if (p_.top_k > 0 && p_.top_k < vocab) return draw_top_k(logits, vocab, banned);
  return draw_all(logits, vocab, banned);
}

int32_t Sampler::draw_top_k(const float* logits, int vocab, const std::vector<int32_t>* banned) {
  // core/top_k.h's top_candidates (the scalar reference samplerCheck compares with) by the CPU
  // kernel table's one-pass pick over the whole row. With ids banned (min_tokens' stop tokens, a
  // handful as a rule, thousands at most), the pick keeps k + (banned ids in the row) candidates
  // and the banned ones are dropped from them: at most that many of the best can be banned, so the
  // first k left are the k best allowed ones, in the same order, bit for bit.
  int64_t n_banned = 0;
  if (banned)
    for (const int32_t id : *banned) n_banned += id >= 0 && id < vocab;
  const int keep = static_cast<int>(std::min<int64_t>(p_.top_k + n_banned, vocab));
  cand_.resize(static_cast<size_t>(keep));
  int n = k_->top_candidates(logits, vocab, keep, p_.temperature, cand_.data(), pick_scratch_);
  // A NaN or an infinity anywhere in the row, banned ids included (the pick's mark): nothing to pick from.
  if (cand_[0].id < 0) return -1;
  if (n_banned > 0) {
    n = static_cast<int>(std::remove_if(cand_.begin(), cand_.begin() + n,
                                        [&](const PickCandidate& c) { return is_banned(banned, c.id); }) -
                         cand_.begin());
    n = std::min(n, p_.top_k);
    if (n == 0) return argmax_scalar(logits, vocab);  // every id banned
  }
  return draw(cand_.data(), n);
}

void Sampler::allowed_runs(int vocab, const std::vector<int32_t>* banned) {
  runs_.clear();
  int32_t from = 0;
  if (banned)
    for (const int32_t id : *banned) {  // sorted; ids outside the row ignored
      if (id < from || id >= vocab) continue;
      if (id > from) runs_.emplace_back(from, id);
      from = id + 1;
    }
  if (from < vocab) runs_.emplace_back(from, vocab);
}

int32_t Sampler::draw_all(const float* logits, int vocab, const std::vector<int32_t>* banned) {
  // Every candidate of the row (top_k 0): the same draw as draw() after a sort of the whole row
  // (walk the candidates from the most likely, subtracting each one's weight from a uniform r), but
  // without the sort. The candidates fall into buckets of their distance below the best value
  // (kBucketNats / kBuckets wide), which the sorted order visits one after another; the weights of
  // each bucket are summed in one pass, the bucket where the walk ends is found from those sums,
  // and only that bucket's candidates are put in order. A request sampling from the whole
  // vocabulary costs its step a few vectorised passes over the row (the CPU kernel table's
  // row_bounds, bucket_mass and bucket_members), not a sort of 248 k candidates a token on the
  // thread every request's step runs on. (The weights are float exps summed in double, in another
  // order than the sorted walk's, which moves a draw only when r falls within a rounding error of a
  // boundary.)
  float lo = 0, hi = 0;
  if (!k_->row_bounds(logits, vocab, &lo, &hi)) return -1;  // a NaN or an infinity anywhere in the row
  allowed_runs(vocab, banned);
  if (runs_.empty()) return argmax_scalar(logits, vocab);  // every id banned
  if (banned) {  // the bounds of the allowed ids only
    lo = std::numeric_limits<float>::infinity();
    hi = -lo;
    for (const auto& [b, e] : runs_) {
      float l = 0, h = 0;
      k_->row_bounds(logits + b, e - b, &l, &h);
      lo = std::min(lo, l);
      hi = std::max(hi, h);
    }
  }
  // Dividing by a positive temperature keeps the order, so these are the candidates' extremes.
  const float mx = hi / p_.temperature, mn = lo / p_.temperature;
  // The most likely allowed candidate (the lowest id of the best value).
  const auto most_likely = [&]() {
    for (const auto& [b, e] : runs_)
      for (int32_t i = b; i < e; ++i)
        if (logits[i] / p_.temperature == mx) return i;
    return runs_.front().first;  // not reached: mx is one of them
  };
  if (!std::isfinite(mx)) return most_likely();  // a scaled logit overflowed: the most likely
  // The buckets span the row's values (at most kBucketNats below the best: past that, weights below
  // e^-64 of the best share the last bucket), so a narrow row is cut as finely as a wide one.
  constexpr int kBuckets = 1024;
  constexpr float kBucketNats = 64.f;
  const float span = std::min(kBucketNats, mx - mn);
  // A larger value is never in a later bucket, so the sorted order is the buckets in turn, each in
  // its own order.
  const cpu::BucketRule rule{p_.temperature, mx, span > 0 ? kBuckets / span : 0.f, kBuckets};
  mass_.assign(kBuckets, 0.0);
  for (const auto& [b, e] : runs_) k_->bucket_mass(logits + b, e - b, rule, mass_.data());
  double total = 0;
  for (const double m : mass_) total += m;
  if (!(total > 0 && std::isfinite(total))) return most_likely();  // not reached: the best weighs 1
  // Bucket b's candidates in draw order (into members_): gathered in id order, which is already the
  // draw order when their values are all equal.
  const auto bucket_run = [&](int b) {
    members_.clear();
    for (const auto& [r0, r1] : runs_) k_->bucket_members(logits + r0, r1 - r0, r0, rule, b, members_);
    const bool equal = std::all_of(members_.begin(), members_.end(),
                                   [&](const cpu::BucketMember& m) { return m.value == members_.front().value; });
    if (!equal)
      std::sort(members_.begin(), members_.end(), [](const cpu::BucketMember& x, const cpu::BucketMember& y) {
        return x.value > y.value || (x.value == y.value && x.id < y.id);
      });
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
      for (size_t j = 0; j < members_.size(); ++j) {
        acc += members_[j].weight;
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
    const size_t end_j = partial ? std::min(keep_j, members_.size()) : members_.size();
    for (size_t j = 0; j < end_j; ++j) {
      r -= members_[j].weight;
      if (r <= 0 || (b == last_b && j + 1 == end_j)) return members_[j].id;
    }
  }
  return most_likely();  // not reached: last_b is walked
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
                  float* top_logprobs, const cpu::Kernels& k) {
  // One pass for the n best (kept sorted, most likely first: the first is the maximum), one for the
  // sum: the CPU kernel table's, vectorised. With no alternatives asked for, a pass for the maximum.
  n = std::clamp(n, 0, std::min(kMaxTopLogprobs, vocab));
  k.top_values(logits, vocab, n, top_ids, top_logprobs);
  const float mx = n > 0 ? top_logprobs[0] : k.max_value(logits, vocab);
  const double lse = static_cast<double>(mx) + std::log(k.exp_sum(logits, vocab, mx));
  *token_logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  for (int j = 0; j < n; ++j) top_logprobs[j] = static_cast<float>(static_cast<double>(top_logprobs[j]) - lse);
}

}  // namespace lumen
