#pragma once
// The Qwen3.5 text forward pass over one engine step, written once against the Backend interface.
#include <vector>

#include "backend/backend.h"
#include "model/weights.h"

namespace lumen {

class Qwen35 {
 public:
  Qwen35(Backend& be, const HostWeights& w, int max_step_tokens, int logit_group);

  // Runs the step; writes logits for b.logit_rows (row-major [rows, vocab]) into logits_host.
  void forward(const StepBatch& b, float* logits_host);

  const ModelConfig& config() const { return cfg_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  Backend& be_;
  ModelConfig cfg_;
  BWeights w_;
  int max_tokens_;
  int logit_group_;
  size_t workspace_bytes_ = 0;
  float *x_, *xn_, *o_, *qg_, *k_, *v_, *ao_, *qkv_, *z_, *bb_, *aa_, *go_, *g_, *u_;
  float *rows_, *rows_n_, *logits_;
};

}  // namespace lumen
