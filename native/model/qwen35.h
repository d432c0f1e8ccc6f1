#pragma once
// The Qwen3.5 text forward pass over one engine step, written once against the Backend interface.
#include <vector>

#include "backend/backend.h"
#include "checkpoint/weights.h"

namespace lumen {

class Qwen35 {
 public:
  Qwen35(Backend& be, const HostWeights& w, int max_step_tokens, int logit_group);

  // Runs the step. For logit row r (b.logit_rows' order) picks[r] says what comes back
  // (Backend::pick_rows): its logits into logits_host + r * vocab ([rows, vocab]), its greedy id
  // into ids[r], or its top-k candidates into cands.
  void forward(const StepBatch& b, float* logits_host, const RowPick* picks, int32_t* ids, PickCandidate* cands);

  const ModelConfig& config() const { return cfg_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  Backend& be_;
  ModelConfig cfg_;
  BWeights w_;
  int max_tokens_;
  int logit_group_;
  size_t workspace_bytes_ = 0;
  // Step activations in backend memory, [step tokens, width] unless noted.
  float *resid_, *normed_, *block_out_;            // residual stream, its RMSNorm, a block's output
  float *q_gate_, *keys_, *values_, *attn_out_;    // full attention: query|gate per head, K, V, output
  float *gdn_qkv_, *gdn_z_, *gdn_b_, *gdn_a_, *gdn_out_;  // Gated DeltaNet projections and output
  float *mlp_gate_, *mlp_up_;                      // SwiGLU inputs (the gate becomes the product)
  float *head_rows_, *head_normed_, *head_logits_; // vocabulary head, [logit group, width]
};

}  // namespace lumen
