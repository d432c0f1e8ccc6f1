// Gated DeltaNet kernels for one ISA: the causal conv + SiLU, and the delta rule per value head as
// the token recurrence (decode, short segments) and the chunked WY form (long prefill segments).
// Plain loops over the vector helpers, inlined so each ISA's compile vectorises them (no calls in
// the inner loops). Both forms update S in place ([dk][dv] fp32).
#include <vector>

#include "backend/cpu/gdn_cpu.h"
#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/simd.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

// Keeps the compiler from fusing a product into the add that follows it (GCC contracts a vector
// multiply and add into an FMA, intrinsics included): the Gram sums round every product first.
inline void keep_rounded(vf& p) { asm("" : "+v"(p)); }
inline void keep_rounded(float& p) { asm("" : "+v"(p)); }

// How a GEMM below sums its products: Fused (an FMA per product) or Rounded (each product rounded
// to f32, then added in order), the latter for the Gram matrices, as dot_rounded sums them.
enum class Sum { Fused, Rounded };

// C[i][0:NC] (+)= Σ_r A[i*lda + r] * B[r*ldb + 0:NC] for RR rows, held in registers across r (ZERO:
// C starts from zero instead of its contents).
template <int NC, int RR, bool ZERO, Sum SUM>
inline void gemm_block(const float* A, int64_t lda, const float* B, int64_t ldb, int K, float* C, int64_t ldc) {
  constexpr int NV = NC / VW;
  vf acc[RR][NV];
  for (int a = 0; a < RR; ++a)
    for (int v = 0; v < NV; ++v) acc[a][v] = ZERO ? vzero() : vload(C + a * ldc + v * VW);
  for (int r = 0; r < K; ++r) {
    const float* b = B + static_cast<int64_t>(r) * ldb;
    vf bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = vload(b + v * VW);
    for (int a = 0; a < RR; ++a) {
      const vf av = vset1(A[a * lda + r]);
      for (int v = 0; v < NV; ++v) {
        if constexpr (SUM == Sum::Fused) {
          acc[a][v] = vfma(av, bv[v], acc[a][v]);
        } else {
          vf p = vmul(av, bv[v]);
          keep_rounded(p);
          acc[a][v] = vadd(acc[a][v], p);
        }
      }
    }
  }
  for (int a = 0; a < RR; ++a)
    for (int v = 0; v < NV; ++v) vstore(C + a * ldc + v * VW, acc[a][v]);
}

// 256-bit vectors (16 registers): C in strips of 16 columns, SR rows at a time (6 x 16, BLIS's
// AVX2 tile: 12 accumulators, 2 B vectors, the A broadcast; 4 rows for the rounded sums, which
// need a register for the product), so a B vector loaded feeds SR FMAs. A row at a time, every
// FMA loads a B vector of its own, more than L2 delivers once B (S's half: 32 KiB) leaves L1
// (docs/performance.md, nineteenth session). Each output's sum runs over r in the same order
// either way.
template <int NC, bool ZERO, Sum SUM>
void gemm_strips(const float* A, int64_t lda, int M, const float* B, int64_t ldb, int K, float* C, int64_t ldc) {
  constexpr int SW = 16, SR = SUM == Sum::Fused ? 6 : 4;
  static_assert(NC % SW == 0);
  for (int c = 0; c < NC; c += SW) {
    int i = 0;
    for (; i + SR <= M; i += SR) gemm_block<SW, SR, ZERO, SUM>(A + i * lda, lda, B + c, ldb, K, C + i * ldc + c, ldc);
    for (; i + 2 <= M; i += 2) gemm_block<SW, 2, ZERO, SUM>(A + i * lda, lda, B + c, ldb, K, C + i * ldc + c, ldc);
    for (; i < M; ++i) gemm_block<SW, 1, ZERO, SUM>(A + i * lda, lda, B + c, ldb, K, C + i * ldc + c, ldc);
  }
}

// The GEMM shapes of the chunked form: C[i][0:NC] (+)= Σ_r A[i*lda + r] * B[r][0:NC] for i < M, in
// register blocks of rows (as many as the ISA's registers hold beside a row of B;
// 256-bit vectors with 4 rows or more: gemm_strips; 512-bit ones: strips of 64 columns, 4 rows a
// block, as 2 rows of 128 columns read twice the B vectors per FMA and ran at half the rate; and
// always for more than 128 columns, whose blocks would not fit the registers at any row count).
// Every output's sum runs over r in order either way.
template <int NC, bool ZERO = false, Sum SUM = Sum::Fused>
void gemm_rows(const float* A, int64_t lda, int M, const float* B, int64_t ldb, int K, float* C, int64_t ldc) {
  static_assert(NC % VW == 0);
  constexpr int NV = NC / VW;
  if constexpr (VW == 8 && NC % 16 == 0) {
    if (M >= 4) return gemm_strips<NC, ZERO, SUM>(A, lda, M, B, ldb, K, C, ldc);
  }
  if constexpr (VW == 16 && NC > 64 && NC % 64 == 0) {
    if (M >= 4 || NC > 128) {
      for (int c = 0; c < NC; c += 64) gemm_rows<64, ZERO, SUM>(A, lda, M, B + c, ldb, K, C + c, ldc);
      return;
    }
  }
  // 512-bit: 8 rows a block for the Gram sums' 32-column strips (with 4 rows they took ~10 % longer).
  constexpr int R = VW == 16 ? (NV == 4 ? 4 : (NV <= 2 ? 8 : 2)) : (NV <= 4 ? 2 : 1);
  int i = 0;
  for (; i + R <= M; i += R) gemm_block<NC, R, ZERO, SUM>(A + i * lda, lda, B, ldb, K, C + i * ldc, ldc);
  for (; i < M; ++i) gemm_block<NC, 1, ZERO, SUM>(A + i * lda, lda, B, ldb, K, C + i * ldc, ldc);
}

// C[i][0:NC] += Σ_{r < K_i} A[i*lda + r] * B[r][0:NC] for a lower-triangular A (zeros above the
// diagonal), i < M: rows in groups of kLowerRows, each group's sum stopping at its last row's
// diagonal (the products skipped are exact zeros). Both chunked forms call it, so they keep the
// same bits.
constexpr int kLowerRows = 16;
template <int NC>
void lower_rows(const float* A, int64_t lda, int M, const float* B, int64_t ldb, float* C, int64_t ldc) {
  for (int i0 = 0; i0 < M; i0 += kLowerRows) {
    const int m = M - i0 < kLowerRows ? M - i0 : kLowerRows;
    gemm_rows<NC>(A + i0 * lda, lda, m, B, ldb, i0 + m, C + i0 * ldc, ldc);
  }
}

// Σ a[r]·b[r] with each product rounded to f32 and the sum taken in order of r: the Gram entries
// of both chunked forms (the same bits whichever form computes them).
inline float dot_rounded(const float* __restrict a, const float* __restrict b, int n) {
  float s = 0.f;
  int r = 0;
  for (; r + VW <= n; r += VW) {
    vf p = vmul(vload(a + r), vload(b + r));
    keep_rounded(p);
    alignas(64) float lanes[VW];
    vstore(lanes, p);
    for (int l = 0; l < VW; ++l) s += lanes[l];
  }
  for (; r < n; ++r) {
    float p = a[r] * b[r];
    keep_rounded(p);
    s += p;
  }
  return s;
}

inline void vaxpy(float a, const float* __restrict x, float* __restrict y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
inline float vdot(const float* __restrict a, const float* __restrict b, int n) {
  float s = 0.f;
#pragma GCC ivdep
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Token i's rows and gates, as both forms of the recurrence read them.
struct GdnToken {
  const float *q, *k, *v;
  float* o;
  float decay, beta;
};
inline GdnToken gdn_token(const lumen::cpu::GdnHeadIO& io, int i) {
  return {io.q + i * io.q_stride, io.k + i * io.k_stride, io.v + i * io.v_stride, io.o + i * io.o_stride,
          std::exp(io.g[i * io.bg_stride]), io.beta[i * io.bg_stride]};
}

// The recurrence below (gdn_recurrent) with a block of 8 vectors of columns held in registers
// (e, u in pass one, d in pass two), so the inner loops only stream S: used when dv is a multiple
// of the block.
void gdn_recurrent_blocked(float* S, const lumen::cpu::GdnHeadIO& io, int n, int dk, int dv) {
  constexpr int NB = 8, CB = NB * VW;
  for (int i = 0; i < n; ++i) {
    const auto [q, k, v, o, decay, beta] = gdn_token(io, i);
    const float kq = vdot(k, q, dk);
    const vf dec = vset1(decay), bet = vset1(beta), kqv = vset1(kq);
    for (int c0 = 0; c0 < dv; c0 += CB) {
      vf e[NB], u[NB];
      for (int b = 0; b < NB; ++b) e[b] = u[b] = vzero();
      for (int r = 0; r < dk; ++r) {
        const float* Sr = S + static_cast<int64_t>(r) * dv + c0;
        const vf kr = vset1(k[r]), qr = vset1(q[r]);
        for (int b = 0; b < NB; ++b) {
          const vf sv = vload(Sr + b * VW);
          e[b] = vfma(kr, sv, e[b]);
          u[b] = vfma(qr, sv, u[b]);
        }
      }
      vf d[NB];
      for (int b = 0; b < NB; ++b) {
        d[b] = vmul(bet, vsub(vload(v + c0 + b * VW), vmul(dec, e[b])));
        vstore(o + c0 + b * VW, vfma(kqv, d[b], vmul(dec, u[b])));
      }
      // The last token's pass: S is in cache (pass one just read it), memory idles, so the next
      // head's state is asked for meanwhile, the same rows' lines.
      const float* next = i == n - 1 ? io.next_state : nullptr;
      for (int r = 0; r < dk; ++r) {
        float* Sr = S + static_cast<int64_t>(r) * dv + c0;
        if (next)
          for (int l = 0; l < CB; l += 16) _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<int64_t>(r) * dv + c0 + l), _MM_HINT_T1);
        const vf kr = vset1(k[r]);
        for (int b = 0; b < NB; ++b) vstore(Sr + b * VW, vfma(kr, d[b], vmul(dec, vload(Sr + b * VW))));
      }
    }
  }
}

}  // namespace

// Token-by-token recurrence: decay, predict e = Sᵀk, write k (β(v - e))ᵀ, read o = Sᵀq.
// Two passes over S per token: one read (e and u = Sᵀq together), one read-modify-write that
// applies the decay and the rank-1 write; o = decay·u + (k·q)·d needs no third pass.
void gdn_recurrent(float* S, const lumen::cpu::GdnHeadIO& io, int n, int dk, int dv) {
  if (dv % (8 * VW) == 0) {
    gdn_recurrent_blocked(S, io, n, dk, dv);
    return;
  }
  float e[512], u[512], d[512];
  for (int i = 0; i < n; ++i) {
    const auto [q, k, v, o, decay, beta] = gdn_token(io, i);
    for (int c = 0; c < dv; ++c) e[c] = u[c] = 0.f;
    for (int r = 0; r < dk; ++r) {
      const float* Sr = S + static_cast<int64_t>(r) * dv;
      const float kr = k[r], qr = q[r];
      for (int c = 0; c < dv; ++c) {
        e[c] += kr * Sr[c];
        u[c] += qr * Sr[c];
      }
    }
    const float kq = vdot(k, q, dk);
    for (int c = 0; c < dv; ++c) {
      d[c] = beta * (v[c] - decay * e[c]);
      o[c] = decay * u[c] + kq * d[c];
    }
    for (int r = 0; r < dk; ++r) {
      float* Sr = S + static_cast<int64_t>(r) * dv;
      const float kr = k[r];
      for (int c = 0; c < dv; ++c) Sr[c] = decay * Sr[c] + kr * d[c];
    }
  }
}

namespace {

// A block's L rows from c0: the cumulative log decay G (summed in order) and contiguous copies of
// its keys and queries (Kc, Qc: [L][dk]).
inline void block_rows(const lumen::cpu::GdnHeadIO& io, int c0, int L, int dk, float* G, float* Kc, float* Qc) {
  float acc = 0.f;
  for (int i = 0; i < L; ++i) {
    acc += io.g[(c0 + i) * io.bg_stride];
    G[i] = acc;
    const float* k = io.k + (c0 + i) * io.k_stride;
    const float* q = io.q + (c0 + i) * io.q_stride;
    for (int r = 0; r < dk; ++r) {
      Kc[i * dk + r] = k[r];
      Qc[i * dk + r] = q[r];
    }
  }
}

}  // namespace

// The chunked form (gdn_chunked below) for the Qwen3.5 head (dk = dv = 128) and blocks of
// kGdnBlock tokens, with every product of a block as a register-blocked GEMM (gemm_rows): the Gram
// matrices KKᵀ and QKᵀ against a transposed copy of the block's keys, the forward substitution by
// blocks of rows (the earlier blocks' share as a GEMM, then each row over its block's earlier
// rows), then V' = U + W'S (W' = -W, so every step only adds), O and the state update. The same
// operations in the same order as the general form, so the same bits (kernelCheck compares the
// two).
void gdn_chunked_128(float* S, const lumen::cpu::GdnHeadIO& io, int n, std::vector<float>& scratch) {
  // The row strides of U | W' and of S's working copy are a line past a multiple of 8 lines: at
  // 1 KiB and 512 B, the rows of a column strip fell in a quarter or half of L1's sets, more than
  // its 12 ways held, and every GEMM pass over them missed L1 (docs/performance.md, twenty-ninth
  // session). S is copied in once and back once per call.
  constexpr int D = 128, CB = lumen::cpu::kGdnBlock, UWD = 2 * D + 16, SD = D + 16;
  static_assert(CB % VW == 0 && CB == 64);
  const size_t need = 2 * CB + 2 * static_cast<size_t>(CB) * D + static_cast<size_t>(D) * CB + 2 * static_cast<size_t>(CB) * CB +
                      static_cast<size_t>(CB) * UWD + static_cast<size_t>(D) * SD;
  if (scratch.size() < need) scratch.resize(need);
  float* G = scratch.data();                   // [CB] cumulative log decay (zero past L)
  float* wdec = G + CB;                        // [CB] e^{G_L - G_j} (zero past L)
  float* Kc = wdec + CB;                       // [CB][D] the block's keys
  float* Qc = Kc + CB * D;                     // [CB][D] its queries (later scaled by e^G)
  float* KT = Qc + CB * D;                     // [D][CB] the keys transposed (later scaled by wdec)
  float* A = KT + D * CB;                      // [CB][CB] -β(KKᵀ)⊙D, strictly lower
  float* QK = A + CB * CB;                     // [CB][CB] (QKᵀ)⊙D, lower
  float* UW = QK + CB * CB;                    // [CB][UWD] U | W' per row
  float* Sp = UW + CB * UWD;                   // [D][SD] S, for the whole call
  for (int r = 0; r < D; ++r)
    for (int c = 0; c < D; c += VW) vstore(Sp + r * SD + c, vload(S + r * D + c));
  for (int c0 = 0; c0 < n; c0 += CB) {
    const int L = n - c0 < CB ? n - c0 : CB;
    block_rows(io, c0, L, D, G, Kc, Qc);
    for (int i = L; i < CB; ++i) G[i] = 0.f;
    // KT by 8 x 8 transposes (rows past L zero).
    for (int i0 = 0; i0 < CB; i0 += 8)
      for (int r0 = 0; r0 < D; r0 += 8) {
        __m256 in[8], out[8];
        for (int a = 0; a < 8; ++a) in[a] = i0 + a < L ? _mm256_loadu_ps(Kc + (i0 + a) * D + r0) : _mm256_setzero_ps();
        transpose8(in, out);
        for (int b = 0; b < 8; ++b) _mm256_storeu_ps(KT + (r0 + b) * CB + i0, out[b]);
      }
    // Only the strips of GS columns on or below the diagonal (GS: 16 on 256-bit vectors, 32 on
    // 512-bit ones): the mask below reads row i's entries up to i's vector and zeroes the rest
    // (docs/performance.md, twenty-third session).
    constexpr int GS = VW == 8 ? 16 : 32;
    for (int c = 0; c < L; c += GS) {
      gemm_rows<GS, true, Sum::Rounded>(Kc + c * D, D, L - c, KT + c, CB, D, A + c * CB + c, CB);
      gemm_rows<GS, true, Sum::Rounded>(Qc + c * D, D, L - c, KT + c, CB, D, QK + c * CB + c, CB);
    }
    // The decay mask D[i][j] = e^{G_i - G_j} on j <= i (VW at a time), zeros above.
    for (int i = 0; i < L; ++i) {
      const vf gi = vset1(G[i]), bi = vset1(io.beta[(c0 + i) * io.bg_stride]);
      float* Ai = A + i * CB;
      float* QKi = QK + i * CB;
      for (int j = 0; j <= i; j += VW) {
        const vf d = vexp(vsub(gi, vload(G + j)));
        vstore(Ai + j, vsub(vzero(), vmul(vmul(bi, vload(Ai + j)), d)));
        vstore(QKi + j, vmul(vload(QKi + j), d));
      }
      for (int j = i; j < CB; ++j) Ai[j] = 0.f;
      for (int j = i + 1; j < CB; ++j) QKi[j] = 0.f;
    }
    // Forward substitution with the unit lower-triangular (I + A): U_i = βv_i - Σ_j A_ij U_j, and
    // W'_i = -βe^{G_i}k_i - Σ_j A_ij W'_j, by blocks of FB rows: the sums over the earlier blocks' rows
    // as one GEMM for the block, then the rows of the block in turn. Each output still adds j = 0,
    // 1, ..., i - 1 in order (the same bits as a row at a time, which ran as GEMVs).
    constexpr int FB = 8;
    for (int i0 = 0; i0 < L; i0 += FB) {
      const int i1 = i0 + FB < L ? i0 + FB : L;
      for (int i = i0; i < i1; ++i) {
        float* Ui = UW + i * UWD;
        const float bi = io.beta[(c0 + i) * io.bg_stride], beg = bi * std::exp(G[i]);
        const float* vi = io.v + (c0 + i) * io.v_stride;
        const float* ki = Kc + i * D;
        for (int c = 0; c < D; c += VW) {
          vstore(Ui + c, vmul(vset1(bi), vload(vi + c)));
          vstore(Ui + D + c, vsub(vzero(), vmul(vset1(beg), vload(ki + c))));
        }
      }
      float* Ub = UW + i0 * UWD;
      if (i0 > 0) {
        gemm_rows<2 * D>(A + i0 * CB, CB, i1 - i0, UW, UWD, i0, Ub, UWD);
      }
      for (int i = i0 + 1; i < i1; ++i) {
        gemm_rows<D>(A + i * CB + i0, CB, 1, Ub, UWD, i - i0, UW + i * UWD, UWD);
        gemm_rows<D>(A + i * CB + i0, CB, 1, Ub + D, UWD, i - i0, UW + i * UWD + D, UWD);
      }
    }
    for (int i = 0; i < L; ++i) {
      const vf eg = vset1(std::exp(G[i]));
      for (int r = 0; r < D; r += VW) vstore(Qc + i * D + r, vmul(vload(Qc + i * D + r), eg));
    }
    // The products with S by halves of its columns, so the half they read (36 KiB) stays in L1.
    float* o = io.o + c0 * io.o_stride;
    for (int h = 0; h < D; h += D / 2) {
      gemm_rows<D / 2>(UW + D, UWD, L, Sp + h, SD, D, UW + h, UWD);       // V' = U + W'S (over U)
      gemm_rows<D / 2, true>(Qc, D, L, Sp + h, SD, D, o + h, io.o_stride);  // O = (e^G ⊙ Q) S
      lower_rows<D / 2>(QK, CB, L, UW + h, UWD, o + h, io.o_stride);      // O += ((QKᵀ)⊙D) V'
    }
    // State update: S <- e^{G_L} S + (e^{G_L - G} ⊙ K)ᵀ V'.
    const float gl = G[L - 1];
    const vf egl = vset1(std::exp(gl));
    for (int r = 0; r < D; ++r)
      for (int c = 0; c < D; c += VW) vstore(Sp + r * SD + c, vmul(vload(Sp + r * SD + c), egl));
    for (int j = 0; j < CB; ++j) wdec[j] = j < L ? std::exp(gl - G[j]) : 0.f;
    for (int r = 0; r < D; ++r)
      for (int j = 0; j < CB; j += VW) vstore(KT + r * CB + j, vmul(vload(wdec + j), vload(KT + r * CB + j)));
    for (int h = 0; h < D; h += D / 2) gemm_rows<D / 2>(KT, CB, D, UW + h, UWD, L, Sp + h, SD);
  }
  for (int r = 0; r < D; ++r)
    for (int c = 0; c < D; c += VW) vstore(S + r * D + c, vload(Sp + r * SD + c));
}


// Chunked (WY) form over blocks of C tokens (kGdnBlock; see docs/architecture.md and the
// architecture reference, §3.2): within a block, G = cumulative log decay, A = strictly lower β(KKᵀ)⊙D,
// U = (I+A)⁻¹βV, W = (I+A)⁻¹(βe^G K), V' = U - WS, O = e^G QS + (QKᵀ⊙D)V', S ← e^{G_L}S + (e^{G_L-G}K)ᵀV'.
void gdn_chunked(float* S, const lumen::cpu::GdnHeadIO& io, int n, int dk, int dv, int C,
                 std::vector<float>& scratch) {
  const int Cp = (C + VW - 1) / VW * VW;  // G and the decay row padded to whole vectors
  const size_t need = static_cast<size_t>(C) * (2 * C + dv + dk + dk + dv + dk) + 2 * static_cast<size_t>(Cp) + dv +
                      static_cast<size_t>(dk) * C;  // A doubles as the [dk][L] scaled Kᵀ
  if (scratch.size() < need) scratch.resize(need);
  float* G = scratch.data();
  float* Drow = G + Cp;
  float* A = Drow + Cp;                          // [C][C], later [dk][L]
  float* QK = A + static_cast<int64_t>((C > dk ? C : dk)) * C;  // [C][C]
  float* U = QK + static_cast<int64_t>(C) * C;   // [C][dv]
  float* W = U + static_cast<int64_t>(C) * dv;   // [C][dk]
  float* Kc = W + static_cast<int64_t>(C) * dk;  // [C][dk] contiguous copy of k rows
  float* Vc = Kc + static_cast<int64_t>(C) * dk; // [C][dv] unused spare
  float* Qc = Vc + static_cast<int64_t>(C) * dv; // [C][dk]
  (void)Vc;
  for (int c0 = 0; c0 < n; c0 += C) {
    const int L = n - c0 < C ? n - c0 : C;
    for (int i = L; i < Cp; ++i) G[i] = 0.f;  // padding lanes read by the vectorised decay row
    block_rows(io, c0, L, dk, G, Kc, Qc);
    for (int i = 0; i < L; ++i) {
      const float bi = io.beta[(c0 + i) * io.bg_stride];
      const float* ki = Kc + i * dk;
      const float* qi = Qc + i * dk;
      // Decay row D[j] = exp(G[i] - G[j]), j <= i, VW at a time (G is padded to whole vectors).
      const vf gi = vset1(G[i]);
      for (int j = 0; j <= i; j += VW) vstore(Drow + j, vexp(vsub(gi, vload(G + j))));
      for (int j = 0; j < i; ++j) A[i * C + j] = bi * dot_rounded(ki, Kc + j * dk, dk) * Drow[j];
      for (int j = 0; j <= i; ++j) QK[i * C + j] = dot_rounded(qi, Kc + j * dk, dk) * Drow[j];
    }
    // Forward substitution with the unit lower-triangular (I + A).
    for (int i = 0; i < L; ++i) {
      float* Ui = U + static_cast<int64_t>(i) * dv;
      float* Wi = W + static_cast<int64_t>(i) * dk;
      const float bi = io.beta[(c0 + i) * io.bg_stride], eg = std::exp(G[i]);
      const float* vi = io.v + (c0 + i) * io.v_stride;
      const float* ki = Kc + i * dk;
      for (int c = 0; c < dv; ++c) Ui[c] = bi * vi[c];
      for (int r = 0; r < dk; ++r) Wi[r] = bi * eg * ki[r];
      for (int j = 0; j < i; ++j) {
        const float aij = A[i * C + j];
        vaxpy(-aij, U + static_cast<int64_t>(j) * dv, Ui, dv);
        vaxpy(-aij, W + static_cast<int64_t>(j) * dk, Wi, dk);
      }
    }
    // V' = U - W S and the inter-block part of O, both against the incoming state.
    if (dv == 128) {
      // As GEMMs: U += (-W) S ; O = (e^G ⊙ Q) S ; O += (QKᵀ⊙D) V' (lower-triangular, zeros above).
      for (int i = 0; i < L; ++i) {
        float* o = io.o + (c0 + i) * io.o_stride;
        const float eg = std::exp(G[i]);
        for (int r = 0; r < dk; ++r) {
          W[i * dk + r] = -W[i * dk + r];
          Qc[i * dk + r] *= eg;
        }
        for (int c = 0; c < dv; ++c) o[c] = 0.f;
        for (int j = i + 1; j < L; ++j) QK[i * C + j] = 0.f;
      }
      gemm_rows<128>(W, dk, L, S, dv, dk, U, dv);
      gemm_rows<128>(Qc, dk, L, S, dv, dk, io.o + c0 * io.o_stride, io.o_stride);
      lower_rows<128>(QK, C, L, U, dv, io.o + c0 * io.o_stride, io.o_stride);
    } else {
      for (int i = 0; i < L; ++i) {
        float* Ui = U + static_cast<int64_t>(i) * dv;
        const float* Wi = W + static_cast<int64_t>(i) * dk;
        const float* qi = Qc + i * dk;
        float* o = io.o + (c0 + i) * io.o_stride;
        const float eg = std::exp(G[i]);
        for (int c = 0; c < dv; ++c) o[c] = 0.f;
        for (int r = 0; r < dk; ++r) {
          const float* Sr = S + static_cast<int64_t>(r) * dv;
          const float w = -Wi[r], qq = eg * qi[r];
          for (int c = 0; c < dv; ++c) {
            Ui[c] += w * Sr[c];
            o[c] += qq * Sr[c];
          }
        }
      }
      for (int i = 0; i < L; ++i) {
        float* o = io.o + (c0 + i) * io.o_stride;
        for (int j = 0; j <= i; ++j) vaxpy(QK[i * C + j], U + static_cast<int64_t>(j) * dv, o, dv);
      }
    }
    // State update: S <- e^{G_L} S + (e^{G_L - G} ⊙ K)ᵀ V'.
    const float gl = G[L - 1], egl = std::exp(gl);
    for (int r = 0; r < dk; ++r) {
      float* Sr = S + static_cast<int64_t>(r) * dv;
      for (int c = 0; c < dv; ++c) Sr[c] *= egl;
    }
    // KT[r][j] = e^{G_L - G_j} K[j][r] (reuses A, which is no longer needed; dk*L <= C*C).
    float* KT = A;
    for (int j = 0; j < L; ++j) {
      const float w = std::exp(gl - G[j]);
      for (int r = 0; r < dk; ++r) KT[r * L + j] = w * Kc[j * dk + r];
    }
    if (dv == 128) {
      gemm_rows<128>(KT, L, dk, U, dv, L, S, dv);
    } else {
      for (int r = 0; r < dk; ++r)
        for (int j = 0; j < L; ++j) vaxpy(KT[r * L + j], U + static_cast<int64_t>(j) * dv, S + static_cast<int64_t>(r) * dv, dv);
    }
  }
}

namespace {

// Depthwise causal conv with KC taps, then SiLU, over channels [c0, c1) of one sequence's T rows.
// Tiles of kConvTile channels, token rows in order within a tile: each row's piece is contiguous
// and the H = KC-1 rows before it are still in L1 (a tile of a whole column of T rows walked one
// row stride, 4+ KiB, at a time: a new page per load). The input before row 0 is the state (the
// previous H inputs, oldest first). Per element: w[H]·x[t], then + w[r]·x[t-H+r] for r < H in order.
constexpr int64_t kConvTile = 256;
// Rows ahead that a tile's pass prefetches (4: 2, 3, 8 and 16 measured slower; docs/performance.md,
// twenty-third session).
constexpr int kConvAhead = 4;

template <int KC>
void conv_silu_t(const float* x, int64_t xs, int T, float* state, const float* wT, int64_t cd, int64_t c0, int64_t c1,
                 float* out, int64_t os) {
  constexpr int H = KC - 1;
  for (int64_t a = c0; a < c1; a += kConvTile) {
    const int64_t b = a + kConvTile < c1 ? a + kConvTile : c1;
    for (int t = 0; t < T; ++t) {
      const float* src[H > 0 ? H : 1];  // rows t-H .. t-1, from the state before row 0
      for (int r = 0; r < H; ++r) src[r] = t - H + r >= 0 ? x + (t - H + r) * xs : state + (t + r) * cd;
      const float* xt = x + t * xs;
      float* ot = out + t * os;  // channel c at ot[c - c0]
      // The row kConvAhead on: its piece of x and of the output, a line at a time (the rows are a
      // stride apart, and one row's piece is too short a run for the hardware prefetchers).
      const bool ahead = t + kConvAhead < T;
      const float* xa = ahead ? x + (t + kConvAhead) * xs : nullptr;
      float* oa = ahead ? out + (t + kConvAhead) * os : nullptr;
      int64_t c = a;
      for (; c + VW <= b; c += VW) {
        if (ahead && c % 16 == 0) {  // a line per 16 floats
          _mm_prefetch(reinterpret_cast<const char*>(xa + c), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(oa + (c - c0)), _MM_HINT_T0);
        }
        vf acc = vmul(vload(wT + H * cd + c), vload(xt + c));
        for (int r = 0; r < H; ++r) acc = vfma(vload(wT + r * cd + c), vload(src[r] + c), acc);
        vstore(ot + (c - c0), vsilu(acc));
      }
      for (; c < b; ++c) {
        float acc = wT[H * cd + c] * xt[c];
        for (int r = 0; r < H; ++r) acc += wT[r * cd + c] * src[r][c];
        ot[c - c0] = silu1(acc);
      }
    }
    // The state becomes the last H inputs: position T-H+r, from x, or from the old state when the
    // segment is shorter than H (reading rows above r, not yet overwritten).
    for (int r = 0; r < H; ++r) {
      const float* from = T - H + r >= 0 ? x + (T - H + r) * xs : state + (T + r) * cd;
      for (int64_t c = a; c < b; ++c) state[r * cd + c] = from[c];
    }
  }
}

}  // namespace

void conv_silu(const float* x, int64_t xs, int T, float* state, const float* wT, int kc, int64_t cd, int64_t c0,
               int64_t c1, float* out, int64_t os) {
  switch (kc) {
    case 1: conv_silu_t<1>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 2: conv_silu_t<2>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 3: conv_silu_t<3>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 4: conv_silu_t<4>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 5: conv_silu_t<5>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 6: conv_silu_t<6>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 7: conv_silu_t<7>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    case 8: conv_silu_t<8>(x, xs, T, state, wT, cd, c0, c1, out, os); break;
    default: break;  // the backend rejects other kernel sizes at load
  }
}

}  // namespace lumen::cpu::LUMEN_ISA
