#include "model/qwen35.h"

#include <algorithm>
#include <stdexcept>

namespace lumen {

Qwen35::Qwen35(Backend& be, const HostWeights& w, int max_step_tokens, int logit_group)
    : be_(be), cfg_(w.config()), max_tokens_(max_step_tokens), logit_group_(logit_group) {
  be_.bind_weights(w, w_);
  const ModelConfig& c = cfg_;
  const size_t T = static_cast<size_t>(max_step_tokens);
  auto alloc = [&](size_t n) {
    workspace_bytes_ += n * sizeof(float);
    return be_.scratch(n);
  };
  resid_ = alloc(T * c.hidden);
  normed_ = alloc(T * c.hidden);
  block_out_ = alloc(T * c.hidden);
  if (c.n_full_layers() > 0) {
    q_gate_ = alloc(T * 2 * c.n_heads * c.head_dim);
    keys_ = alloc(T * c.n_kv_heads * c.head_dim);
    values_ = alloc(T * c.n_kv_heads * c.head_dim);
    attn_out_ = alloc(T * c.n_heads * c.head_dim);
  } else {
    q_gate_ = keys_ = values_ = attn_out_ = nullptr;
  }
  if (c.n_linear_layers() > 0) {
    gdn_qkv_ = alloc(T * c.conv_dim());
    gdn_z_ = alloc(T * c.value_dim());
    gdn_b_ = alloc(T * c.lin_v_heads);
    gdn_a_ = alloc(T * c.lin_v_heads);
    gdn_out_ = alloc(T * c.value_dim());
  } else {
    gdn_qkv_ = gdn_z_ = gdn_b_ = gdn_a_ = gdn_out_ = nullptr;
  }
  mlp_gate_ = alloc(T * c.intermediate);
  mlp_up_ = alloc(T * c.intermediate);
  head_rows_ = alloc(static_cast<size_t>(logit_group) * c.hidden);
  head_normed_ = alloc(static_cast<size_t>(logit_group) * c.hidden);
  head_logits_ = alloc(static_cast<size_t>(logit_group) * c.vocab);
}

void Qwen35::forward(const StepBatch& b, float* logits_host, const RowPick* picks, int32_t* ids, PickCandidate* cands) {
  const ModelConfig& c = cfg_;
  const int T = b.n_tokens;
  if (T <= 0 || T > max_tokens_) throw std::runtime_error("step of " + std::to_string(T) + " tokens exceeds the workspace");
  const int64_t H = c.hidden;
  be_.begin_step(b);
  const int R = static_cast<int>(b.logit_rows.size());
  // Where the head writes rows [r0, r0 + n): the host buffer itself when the backend's memory is
  // host memory, else the backend's buffer (copied out below).
  auto head_out = [&](int r0) { return be_.host_memory() ? logits_host + static_cast<int64_t>(r0) * c.vocab : head_logits_; };
  auto head = [&](int r0, int n) {
    be_.gather_rows(resid_, r0, n, head_rows_, c.hidden);
    be_.rmsnorm(head_rows_, w_.final_norm, head_normed_, n, c.hidden, c.eps);
    be_.matmul(head_normed_, n, w_.head, head_out(r0));
  };
  be_.run_body(b, [&] {
    be_.embed(w_.embed, resid_);
    for (const BLayer& L : w_.layers) {
      be_.rmsnorm(resid_, L.in_norm, normed_, T, c.hidden, c.eps);
      if (L.is_full) {
        const WMat* ws[] = {&L.q, &L.k, &L.v};
        float* const ys[] = {q_gate_, keys_, values_};
        be_.matmul_group(normed_, T, ws, ys, 3);
        be_.attention(c, L, q_gate_, keys_, values_, attn_out_);
        be_.matmul(attn_out_, T, L.o, block_out_);
      } else {
        const WMat* ws[] = {&L.qkv, &L.z, &L.b, &L.a};
        float* const ys[] = {gdn_qkv_, gdn_z_, gdn_b_, gdn_a_};
        be_.matmul_group(normed_, T, ws, ys, 4);
        be_.gdn(c, L, gdn_qkv_, gdn_z_, gdn_b_, gdn_a_, gdn_out_);
        be_.matmul(gdn_out_, T, L.out, block_out_);
      }
      be_.add(resid_, block_out_, T * H);
      be_.rmsnorm(resid_, L.post_norm, normed_, T, c.hidden, c.eps);
      const WMat* mlp[] = {&L.gate, &L.up};
      float* const mlp_out[] = {mlp_gate_, mlp_up_};
      be_.matmul_group(normed_, T, mlp, mlp_out, 2);
      be_.swiglu(mlp_gate_, mlp_up_, mlp_gate_, static_cast<int64_t>(T) * c.intermediate);
      be_.matmul(mlp_gate_, T, L.down, block_out_);
      be_.add(resid_, block_out_, T * H);
    }
    // The vocabulary head only for the rows whose logits are wanted (first group inside the body).
    if (R > 0) head(0, std::min(R, logit_group_));
  });
  for (int r0 = 0; r0 < R; r0 += logit_group_) {
    const int n = std::min(logit_group_, R - r0);
    if (r0 > 0) head(r0, n);
    be_.pick_rows(head_out(r0), n, c.vocab, picks + r0, logits_host + static_cast<int64_t>(r0) * c.vocab, ids + r0, cands);
  }
  be_.end_step();
}

}  // namespace lumen
