#include "backend/cpu/gdn_cpu.h"

#include <cmath>

#include "backend/cpu/kernels.h"

namespace lumen::cpu {

void gdn_recurrent(float* S, const GdnHeadIO& io, int n, int dk, int dv) {
  const Kernels& K = kernels();
  std::vector<float> e(dv), d(dv);
  for (int i = 0; i < n; ++i) {
    const float* q = io.q + i * io.q_stride;
    const float* k = io.k + i * io.k_stride;
    const float* v = io.v + i * io.v_stride;
    float* o = io.o + i * io.o_stride;
    const float decay = std::exp(io.g[i * io.bg_stride]);
    const float beta = io.beta[i * io.bg_stride];
    // Decay the state, and read the prediction e = Sᵀk from the decayed state.
    std::fill(e.begin(), e.end(), 0.f);
    for (int r = 0; r < dk; ++r) {
      float* Sr = S + static_cast<int64_t>(r) * dv;
      K.scale(Sr, decay, dv);
      K.axpy(k[r], Sr, e.data(), dv);
    }
    for (int c = 0; c < dv; ++c) d[c] = beta * (v[c] - e[c]);
    // Rank-1 write, then the readout o = Sᵀq from the updated state.
    std::fill(o, o + dv, 0.f);
    for (int r = 0; r < dk; ++r) {
      float* Sr = S + static_cast<int64_t>(r) * dv;
      K.axpy(k[r], d.data(), Sr, dv);
      K.axpy(q[r], Sr, o, dv);
    }
  }
}

void gdn_chunked(float* S, const GdnHeadIO& io, int n, int dk, int dv, int chunk, std::vector<float>& scratch) {
  const Kernels& K = kernels();
  const int C = chunk;
  // Scratch layout: G[C], A[C*C], U[C*dv], W[C*dk], KK[C*C] (q·k), tmp[dv]
  const size_t need = C + 2 * static_cast<size_t>(C) * C + static_cast<size_t>(C) * dv +
                      static_cast<size_t>(C) * dk + dv;
  if (scratch.size() < need) scratch.resize(need);
  float* G = scratch.data();
  float* A = G + C;
  float* QK = A + C * C;
  float* U = QK + C * C;
  float* W = U + static_cast<int64_t>(C) * dv;
  float* tmp = W + static_cast<int64_t>(C) * dk;

  for (int c0 = 0; c0 < n; c0 += C) {
    const int L = n - c0 < C ? n - c0 : C;
    auto qrow = [&](int i) { return io.q + (c0 + i) * io.q_stride; };
    auto krow = [&](int i) { return io.k + (c0 + i) * io.k_stride; };
    auto vrow = [&](int i) { return io.v + (c0 + i) * io.v_stride; };
    auto beta = [&](int i) { return io.beta[(c0 + i) * io.bg_stride]; };
    float acc = 0.f;
    for (int i = 0; i < L; ++i) {
      acc += io.g[(c0 + i) * io.bg_stride];
      G[i] = acc;  // cumulative log decay from the chunk start
    }
    // A[i][j] = beta_i (k_i·k_j) exp(G_i - G_j) for j < i; QK[i][j] = (q_i·k_j) exp(G_i - G_j) for j <= i.
    for (int i = 0; i < L; ++i) {
      for (int j = 0; j < i; ++j) {
        const float dec = std::exp(G[i] - G[j]);
        A[i * C + j] = beta(i) * K.dot(krow(i), krow(j), dk) * dec;
      }
      for (int j = 0; j <= i; ++j) QK[i * C + j] = K.dot(qrow(i), krow(j), dk) * std::exp(G[i] - G[j]);
    }
    // Forward substitution with (I + A): U = (I+A)^-1 (beta V), W = (I+A)^-1 (beta exp(G) K).
    for (int i = 0; i < L; ++i) {
      float* Ui = U + static_cast<int64_t>(i) * dv;
      float* Wi = W + static_cast<int64_t>(i) * dk;
      const float bi = beta(i), eg = std::exp(G[i]);
      const float* vi = vrow(i);
      const float* ki = krow(i);
      for (int c = 0; c < dv; ++c) Ui[c] = bi * vi[c];
      for (int r = 0; r < dk; ++r) Wi[r] = bi * eg * ki[r];
      for (int j = 0; j < i; ++j) {
        const float aij = A[i * C + j];
        if (aij == 0.f) continue;
        K.axpy(-aij, U + static_cast<int64_t>(j) * dv, Ui, dv);
        K.axpy(-aij, W + static_cast<int64_t>(j) * dk, Wi, dk);
      }
    }
    // V' = U - W S (stored over U), using the chunk's incoming state.
    for (int i = 0; i < L; ++i) {
      float* Ui = U + static_cast<int64_t>(i) * dv;
      const float* Wi = W + static_cast<int64_t>(i) * dk;
      for (int r = 0; r < dk; ++r) K.axpy(-Wi[r], S + static_cast<int64_t>(r) * dv, Ui, dv);
    }
    // O_i = exp(G_i) Sᵀ q_i + Σ_{j<=i} QK[i][j] V'_j
    for (int i = 0; i < L; ++i) {
      float* o = io.o + (c0 + i) * io.o_stride;
      const float* qi = qrow(i);
      std::fill(tmp, tmp + dv, 0.f);
      for (int r = 0; r < dk; ++r) K.axpy(qi[r], S + static_cast<int64_t>(r) * dv, tmp, dv);
      const float eg = std::exp(G[i]);
      for (int c = 0; c < dv; ++c) o[c] = eg * tmp[c];
      for (int j = 0; j <= i; ++j) K.axpy(QK[i * C + j], U + static_cast<int64_t>(j) * dv, o, dv);
    }
    // S <- exp(G_L) S + Σ_j exp(G_L - G_j) k_j V'_jᵀ
    const float gl = G[L - 1];
    const float egl = std::exp(gl);
    for (int j = 0; j < L; ++j) A[j] = std::exp(gl - G[j]);  // reuse A's first row as weights
    for (int r = 0; r < dk; ++r) {
      float* Sr = S + static_cast<int64_t>(r) * dv;
      K.scale(Sr, egl, dv);
      for (int j = 0; j < L; ++j) K.axpy(A[j] * krow(j)[r], U + static_cast<int64_t>(j) * dv, Sr, dv);
    }
  }
}

}  // namespace lumen::cpu
