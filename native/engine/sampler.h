#pragma once
// Token sampling: greedy (temperature 0), or temperature with top-k / top-p from a seeded stream.
#include <cstdint>
#include <random>
#include <vector>

namespace lumen {

struct SamplingParams {
  float temperature = 0.f;
  int top_k = 0;      // 0 = all
  float top_p = 1.f;  // 1 = all
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  int32_t sample(const float* logits, int vocab);
  bool greedy() const { return p_.temperature <= 0.f; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace lumen
