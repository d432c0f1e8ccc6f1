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
  x_ = alloc(T * c.hidden);
  xn_ = alloc(T * c.hidden);
  o_ = alloc(T * c.hidden);
  if (c.n_full_layers() > 0) {
    qg_ = alloc(T * 2 * c.n_heads * c.head_dim);
    k_ = alloc(T * c.n_kv_heads * c.head_dim);
    v_ = alloc(T * c.n_kv_heads * c.head_dim);
    ao_ = alloc(T * c.n_heads * c.head_dim);
  } else {
    qg_ = k_ = v_ = ao_ = nullptr;
  }
  if (c.n_linear_layers() > 0) {
    qkv_ = alloc(T * c.conv_dim());
    z_ = alloc(T * c.value_dim());
    bb_ = alloc(T * c.lin_v_heads);
    aa_ = alloc(T * c.lin_v_heads);
    go_ = alloc(T * c.value_dim());
  } else {
    qkv_ = z_ = bb_ = aa_ = go_ = nullptr;
  }
  g_ = alloc(T * c.intermediate);
  u_ = alloc(T * c.intermediate);
  rows_ = alloc(static_cast<size_t>(logit_group) * c.hidden);
  rows_n_ = alloc(static_cast<size_t>(logit_group) * c.hidden);
  logits_ = alloc(static_cast<size_t>(logit_group) * c.vocab);
}

void Qwen35::forward(const StepBatch& b, float* logits_host) {
  const ModelConfig& c = cfg_;
  const int T = b.n_tokens;
  if (T <= 0 || T > max_tokens_) throw std::runtime_error("step of " + std::to_string(T) + " tokens exceeds the workspace");
  const int64_t H = c.hidden;
  be_.begin_step(b);
  const int R = static_cast<int>(b.logit_rows.size());
  // Where the head writes rows [r0, r0 + n): the host buffer itself when the backend's memory is
  // host memory, else the backend's buffer (copied out below).
  auto head_out = [&](int r0) { return be_.host_memory() ? logits_host + static_cast<int64_t>(r0) * c.vocab : logits_; };
  auto head = [&](int r0, int n) {
    be_.gather_rows(x_, r0, n, rows_, c.hidden);
    be_.rmsnorm(rows_, w_.final_norm, rows_n_, n, c.hidden, c.eps);
    be_.matmul(rows_n_, n, w_.head, head_out(r0));
  };
  be_.run_body(b, [&] {
    be_.embed(w_.embed, x_);
    for (const BLayer& L : w_.layers) {
      be_.rmsnorm(x_, L.in_norm, xn_, T, c.hidden, c.eps);
      if (L.is_full) {
        const WMat* ws[] = {&L.q, &L.k, &L.v};
        float* const ys[] = {qg_, k_, v_};
        be_.matmul_group(xn_, T, ws, ys, 3);
        be_.attention(c, L, qg_, k_, v_, ao_);
        be_.matmul(ao_, T, L.o, o_);
      } else {
        const WMat* ws[] = {&L.qkv, &L.z, &L.b, &L.a};
        float* const ys[] = {qkv_, z_, bb_, aa_};
        be_.matmul_group(xn_, T, ws, ys, 4);
        be_.gdn(c, L, qkv_, z_, bb_, aa_, go_);
        be_.matmul(go_, T, L.out, o_);
      }
      be_.add(x_, o_, T * H);
      be_.rmsnorm(x_, L.post_norm, xn_, T, c.hidden, c.eps);
      const WMat* mlp[] = {&L.gate, &L.up};
      float* const mlp_out[] = {g_, u_};
      be_.matmul_group(xn_, T, mlp, mlp_out, 2);
      be_.swiglu(g_, u_, g_, static_cast<int64_t>(T) * c.intermediate);
      be_.matmul(g_, T, L.down, o_);
      be_.add(x_, o_, T * H);
    }
    // The vocabulary head only for the rows whose logits are wanted (first group inside the body).
    if (R > 0) head(0, std::min(R, logit_group_));
  });
  for (int r0 = 0; r0 < R; r0 += logit_group_) {
    const int n = std::min(logit_group_, R - r0);
    if (r0 > 0) head(r0, n);
    be_.logits_to_host(head_out(r0), logits_host + static_cast<int64_t>(r0) * c.vocab, static_cast<int64_t>(n) * c.vocab);
  }
  be_.end_step();
}

}  // namespace lumen
