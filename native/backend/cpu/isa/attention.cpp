// Paged attention rows for one ISA: scores and weighted values of a GQA group's query heads over
// a sequence's scattered KV blocks, several blocks read side by side, the next ones prefetched.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/simd.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

// Attention over a paged run of rows (see kernels.h). A core reads several streams faster than
// one (figures: docs/performance.md, v23), so S blocks are read side by side, S as large
// as the accumulators (S x NQ vectors) allow.
template <int NQ>
constexpr int attn_streams() {
  constexpr int budget = VW == 16 ? 24 : 12;
  return NQ * 4 <= budget ? 4 : NQ * 2 <= budget ? 2 : 1;
}

// The rows of block t, for prefetching: a later block of this run, else one of `next`, else none.
template <typename T>
struct PagedRun {
  const T* const* blk;
  int nblk;
  const T* const* next;
  int n_next;
  const T* at(int t) const { return t < nblk ? blk[t] : t - nblk < n_next ? next[t - nblk] : nullptr; }
};

// Scores of NQ heads against S rows (any addresses); out index js[s]; with PF, pf[s] is a row to
// prefetch, a line per line consumed (never null: without a row to fetch it repeats rows[s]).
// T: the rows' element type, float or uint16_t (an f16 KV cache, widened exactly as it is read). The
// scalar tails (row lengths off the vector width) use std::fma, so both types give the same bits
// whatever the compiler contracts.
template <int NQ, int S, bool PF, typename T>
inline void scores_step(const float* q, int64_t qs, const T* const* rows, int64_t n, float scale, float* out,
                        int64_t os, const int* js, const T* const* pf) {
  vf acc[S][NQ];
  for (int r = 0; r < S; ++r)
    for (int h = 0; h < NQ; ++h) acc[r][h] = vzero();
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    vf kv[S];
    for (int r = 0; r < S; ++r) {
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(pf[r] + i), _MM_HINT_T0);
      kv[r] = kvload(rows[r] + i);
    }
    for (int h = 0; h < NQ; ++h) {
      const vf qv = vload(q + h * qs + i);
      for (int r = 0; r < S; ++r) acc[r][h] = vfma(qv, kv[r], acc[r][h]);
    }
  }
  if constexpr (S * NQ <= VW) {
    if (i == n) {
      // All S x NQ sums in one tree (vsum_lanes: the same bits as a vsum each), scaled as a vector.
      vf in[VW];
      for (int l = 0; l < VW; ++l) in[l] = l < S * NQ ? acc[l / NQ][l % NQ] : vzero();
      alignas(64) float sums[VW];
      vstore(sums, vmul(vsum_lanes(in), vset1(scale)));
      for (int r = 0; r < S; ++r)
        for (int h = 0; h < NQ; ++h) out[h * os + js[r]] = sums[r * NQ + h];
      return;
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int r = 0; r < S; ++r) {
      float sum = vsum(acc[r][h]);
      for (int64_t j = i; j < n; ++j) sum = std::fma(q[h * qs + j], kvscalar(rows[r] + j), sum);
      out[h * os + js[r]] = sum * scale;
    }
}

// o_h += Σ_s w[h * ws + js[s]] rows[s] for NQ heads; o stays in L1 (NQ x n floats) and is read
// and written once per S rows.
template <int NQ, int S, bool PF, typename T>
inline void values_step(const float* w, int64_t ws, const T* const* rows, int64_t n, float* o, int64_t os,
                        const int* js, const T* const* pf) {
  vf wv[S][NQ];
  for (int r = 0; r < S; ++r)
    for (int h = 0; h < NQ; ++h) wv[r][h] = vset1(w[h * ws + js[r]]);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    vf vv[S];
    for (int r = 0; r < S; ++r) {
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(pf[r] + i), _MM_HINT_T0);
      vv[r] = kvload(rows[r] + i);
    }
    for (int h = 0; h < NQ; ++h) {
      vf acc = vload(o + h * os + i);
      for (int r = 0; r < S; ++r) acc = vfma(wv[r][h], vv[r], acc);
      vstore(o + h * os + i, acc);
    }
  }
  for (; i < n; ++i)
    for (int h = 0; h < NQ; ++h) {
      float acc = o[h * os + i];
      for (int r = 0; r < S; ++r) acc = std::fma(w[h * ws + js[r]], kvscalar(rows[r] + i), acc);
      o[h * os + i] = acc;
    }
}

// Walks the run: groups of S full blocks side by side (row r of each), each prefetching the block
// S further on; then the remaining blocks one at a time, two rows per step, prefetching the next.
// Without PF (rows expected in cache) nothing is prefetched.
template <int NQ, bool Values, bool PF, typename T>
void attn_run(const float* x, int64_t xs, const T* const* blk, int bs, int ctx, int64_t n, float scale, float* y,
              int64_t ys, const T* const* next, int n_next) {
  constexpr int S = attn_streams<NQ>();
  const int nblk = (ctx + bs - 1) / bs, nfull = ctx / bs;
  const PagedRun<T> run{blk, nblk, next, n_next};
  auto step = [&]<int R>(const T* const* rows, const int* js, const T* const* pf) {
    if constexpr (Values)
      values_step<NQ, R, PF, T>(x, xs, rows, n, y, ys, js, pf);
    else
      scores_step<NQ, R, PF, T>(x, xs, rows, n, scale, y, ys, js, pf);
  };
  // Row r of block t to prefetch, or `self` (a line already being read) when there is none.
  auto pf_row = [&](int t, int r, const T* self) {
    const T* p = PF ? run.at(t) : nullptr;
    return p ? p + r * n : self;
  };
  int b = 0;
  for (; b + S <= nfull; b += S)
    for (int r = 0; r < bs; ++r) {
      const T* rows[S];
      const T* pf[S];
      int js[S];
      for (int t = 0; t < S; ++t) {
        rows[t] = blk[b + t] + r * n;
        pf[t] = pf_row(b + S + t, r, rows[t]);
        js[t] = (b + t) * bs + r;
      }
      step.template operator()<S>(rows, js, pf);
    }
  for (; b < nblk; ++b) {
    const int nr = std::min(bs, ctx - b * bs);
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
      const T* rows[2] = {blk[b] + r * n, blk[b] + (r + 1) * n};
      const T* pf[2] = {pf_row(b + 1, r, rows[0]), pf_row(b + 1, r + 1, rows[1])};
      const int js[2] = {b * bs + r, b * bs + r + 1};
      step.template operator()<2>(rows, js, pf);
    }
    if (r < nr) {
      const T* rows[1] = {blk[b] + r * n};
      const T* pf[1] = {pf_row(b + 1, r, rows[0])};
      const int js[1] = {b * bs + r};
      step.template operator()<1>(rows, js, pf);
    }
  }
}

template <int NQ, bool Values, typename T>
void attn_run_pf(const float* x, int64_t xs, const T* const* blk, int bs, int ctx, int64_t n, float scale, float* y,
                 int64_t ys, const T* const* next, int n_next) {
  if (n_next < 0)
    attn_run<NQ, Values, false, T>(x, xs, blk, bs, ctx, n, scale, y, ys, nullptr, 0);
  else
    attn_run<NQ, Values, true, T>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next);
}

template <bool Values, typename T>
void attn_dispatch(const float* x, int64_t xs, int nq, const T* const* blk, int bs, int ctx, int64_t n, float scale,
                   float* y, int64_t ys, const T* const* next, int n_next) {
  switch (nq) {
    case 4: attn_run_pf<4, Values, T>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 2: attn_run_pf<2, Values, T>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 8: attn_run_pf<8, Values, T>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 1: attn_run_pf<1, Values, T>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    default:  // any other group size, a head at a time (rows then come from cache after the first)
      for (int h = 0; h < nq; ++h)
        attn_run_pf<1, Values, T>(x + h * xs, xs, blk, bs, ctx, n, scale, y + h * ys, ys, next, n_next);
  }
}

// ---- A prefill tile's attention with the queries as vector lanes (attn_tile, kernels.h) ----
// Query row i of the tile is lane i % VW of vector i / VW: qt[d * ldq + i] = q_i[d]. A key's
// scores against every query then come from one broadcast of each of its elements, with no
// horizontal sums, and the probabilities come out as pt[j * ldq + i] (key j's row of lanes), which
// the softmax walks down the keys lane-wise and the values read as broadcasts. Every sum runs in a
// fixed order that does not depend on the tile: a score over d = 0 .. n-1, the softmax's max and
// sum over the keys in order, an output element over the keys in order.

#if defined(__AVX512F__)
constexpr int kTileKeys = 8, kTileQv = 2, kValQ = 8, kValDv = 2;
#else
constexpr int kTileKeys = 4, kTileQv = 2, kValQ = 4, kValDv = 2;
#endif

// Scores of KJ consecutive rows at k (stride n) against NV query vectors, scaled, into pt rows;
// pf: the rows to prefetch meanwhile (the same span of the next block), or null.
template <int NV, int KJ, bool PF, typename T>
inline void tile_scores_keys(const float* qt, int64_t ldq, const T* k, int64_t n, float scale, float* pt,
                             const T* pf) {
  vf acc[KJ][NV];
  for (int j = 0; j < KJ; ++j)
    for (int v = 0; v < NV; ++v) acc[j][v] = vzero();
  // Key element d of row j broadcast against the query vectors, d in order. f16 keys are widened
  // VW elements of each row at a time into kw (one conversion per vector, not per element), then
  // broadcast from there: the same values in the same order, so the same bits.
  int64_t d = 0;
  if constexpr (!std::is_same_v<T, float>) {
    alignas(64) float kw[KJ][VW];
    for (; d + VW <= n; d += VW) {
      for (int j = 0; j < KJ; ++j) {
        if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(pf + j * n + d), _MM_HINT_T0);
        vstore(kw[j], kvload(k + j * n + d));
      }
      for (int e = 0; e < VW; ++e) {
        vf qv[NV];
        for (int v = 0; v < NV; ++v) qv[v] = vload(qt + (d + e) * ldq + v * VW);
        for (int j = 0; j < KJ; ++j) {
          const vf kb = vset1(kw[j][e]);
          for (int v = 0; v < NV; ++v) acc[j][v] = vfma(qv[v], kb, acc[j][v]);
        }
      }
    }
  }
  for (; d < n; ++d) {
    if constexpr (PF)
      if (d % VW == 0)
        for (int j = 0; j < KJ; ++j) _mm_prefetch(reinterpret_cast<const char*>(pf + j * n + d), _MM_HINT_T0);
    vf qv[NV];
    for (int v = 0; v < NV; ++v) qv[v] = vload(qt + d * ldq + v * VW);
    for (int j = 0; j < KJ; ++j) {
      const vf kb = vset1(kvscalar(k + j * n + d));
      for (int v = 0; v < NV; ++v) acc[j][v] = vfma(qv[v], kb, acc[j][v]);
    }
  }
  const vf sc = vset1(scale);
  for (int j = 0; j < KJ; ++j)
    for (int v = 0; v < NV; ++v) vstore(pt + j * ldq + v * VW, vmul(acc[j][v], sc));
}

// Scores of rows [0, r1) of one block (row r at k + r * n) against the NV query vectors at qt;
// next: the block whose rows to prefetch alongside, or null.
template <int NV, typename T>
inline void tile_scores_block(const float* qt, int64_t ldq, const T* k, const T* next, int r1, int64_t n,
                              float scale, float* pt) {
  int r = 0;
  for (; r + kTileKeys <= r1; r += kTileKeys) {
    if (next)
      tile_scores_keys<NV, kTileKeys, true, T>(qt, ldq, k + r * n, n, scale, pt + r * ldq, next + r * n);
    else
      tile_scores_keys<NV, kTileKeys, false, T>(qt, ldq, k + r * n, n, scale, pt + r * ldq, nullptr);
  }
  for (; r < r1; ++r) tile_scores_keys<NV, 1, false, T>(qt, ldq, k + r * n, n, scale, pt + r * ldq, nullptr);
}

// o_i[d0 .. d0 + DV*VW) (+)= Σ_{j in [j0, j1)} pt[j * ldq + i] v_j for QB query rows i0 ..; v_j
// at vrow(j). `first`: the outputs start at zero instead of their stored values.
template <int QB, int DV, typename T>
inline void tile_values_rows(const float* pt, int64_t ldq, int i0, const T* const* vblk, int bs, int j0, int j1,
                             int64_t n, int64_t d0, float* const* o, bool first) {
  vf acc[QB][DV];
  for (int q = 0; q < QB; ++q)
    for (int v = 0; v < DV; ++v) acc[q][v] = first ? vzero() : vload(o[i0 + q] + d0 + v * VW);
  const float* p = pt + static_cast<int64_t>(j0) * ldq + i0;
  for (int j = j0, b = j0 / bs; j < j1; ++b) {
    const int r1 = std::min(j1, (b + 1) * bs);
    const T* vr = vblk[b] + static_cast<int64_t>(j - b * bs) * n + d0;
    for (; j < r1; ++j, vr += n, p += ldq) {
      vf vv[DV];
      for (int v = 0; v < DV; ++v) vv[v] = kvload(vr + v * VW);
      for (int q = 0; q < QB; ++q) {
        const vf w = vset1(p[q]);
        for (int v = 0; v < DV; ++v) acc[q][v] = vfma(w, vv[v], acc[q][v]);
      }
    }
  }
  for (int q = 0; q < QB; ++q)
    for (int v = 0; v < DV; ++v) vstore(o[i0 + q] + d0 + v * VW, acc[q][v]);
}

// Query rows [0, nr) in groups of QB, output elements [d, d + DV*VW).
template <int DV, typename T>
inline void tile_values_d(const float* pt, int64_t ldq, int nr, const T* const* vblk, int bs, int j0, int j1,
                          int64_t n, int64_t d, float* const* o, bool first) {
  int i = 0;
  for (; i + kValQ <= nr; i += kValQ) tile_values_rows<kValQ, DV, T>(pt, ldq, i, vblk, bs, j0, j1, n, d, o, first);
  if constexpr (kValQ > 4)
    for (; i + 4 <= nr; i += 4) tile_values_rows<4, DV, T>(pt, ldq, i, vblk, bs, j0, j1, n, d, o, first);
  for (; i < nr; ++i) tile_values_rows<1, DV, T>(pt, ldq, i, vblk, bs, j0, j1, n, d, o, first);
}

template <typename T>
void attn_tile_kv(const float* const* q, const int32_t* ctx, int nr, const T* const* kblk, const T* const* vblk, int bs,
                  int64_t n, float scale, float* const* o, std::vector<float>& scratch) {
  const int nv = (nr + VW - 1) / VW;
  const int64_t ldq = static_cast<int64_t>(nv) * VW;
  int ctx_max = 0;
  for (int i = 0; i < nr; ++i) ctx_max = std::max(ctx_max, ctx[i]);
  const size_t qt_elems = static_cast<size_t>(n) * ldq, pt_elems = static_cast<size_t>(ctx_max) * ldq;
  if (scratch.size() < qt_elems + pt_elems + 2 * ldq) scratch.resize(qt_elems + pt_elems + 2 * ldq);
  float* qt = scratch.data();
  float* pt = qt + qt_elems;
  float* lim = pt + pt_elems;            // per lane: its context as a float, exact below 2^24 (padding: 1)
  float* inv_sum = pt + pt_elems + ldq;  // per lane: 1 / its softmax sum
  for (int64_t d = 0; d < n; ++d) {
    float* row = qt + d * ldq;
    for (int i = 0; i < nr; ++i) row[i] = q[i][d];
    for (int64_t i = nr; i < ldq; ++i) row[i] = 0.f;
  }
  for (int64_t i = 0; i < ldq; ++i) lim[i] = static_cast<float>(i < nr ? ctx[i] : 1);

  // Scores, a block at a time (its rows contiguous), the next block prefetched alongside.
  const int nblk = (ctx_max + bs - 1) / bs;
  for (int b = 0; b < nblk; ++b) {
    const int r1 = std::min(bs, ctx_max - b * bs);
    const T* next = b + 1 < nblk ? kblk[b + 1] : vblk[0];
    float* ptb = pt + static_cast<int64_t>(b) * bs * ldq;
    int v = 0;
    for (; v + kTileQv <= nv; v += kTileQv)
      tile_scores_block<kTileQv, T>(qt + v * VW, ldq, kblk[b], v == 0 ? next : nullptr, r1, n, scale, ptb + v * VW);
    for (; v < nv; ++v) tile_scores_block<1, T>(qt + v * VW, ldq, kblk[b], v == 0 ? next : nullptr, r1, n, scale, ptb + v * VW);
  }

  // Softmax down the keys, lane-wise: the largest score, then exp(x - max) and their sum in key
  // order (keys at or past a lane's context, lim > j false: 0); the outputs are divided by the sum
  // at the end.
  const vf ninf = vset1(-INFINITY), zero = vzero();
  for (int v = 0; v < nv; ++v) {
    const vf lv = vload(lim + v * VW);
    float* col = pt + v * VW;
    vf mx = ninf;
    for (int j = 0; j < ctx_max; ++j) mx = vmax(vgt_select(lv, vset1(static_cast<float>(j)), vload(col + j * ldq), ninf), mx);
    vf sum = zero;
    for (int j = 0; j < ctx_max; ++j) {
      const vf e = vgt_select(lv, vset1(static_cast<float>(j)), vexp(vsub(vload(col + j * ldq), mx)), zero);
      vstore(col + j * ldq, e);
      sum = vadd(sum, e);
    }
    vstore(inv_sum + v * VW, vdiv(vset1(1.f), sum));
  }

  // Values over spans of keys (a span's rows stay in cache while every query group passes them).
  constexpr int kSpan = 128;
  for (int j0 = 0; j0 < ctx_max; j0 += kSpan) {
    const int j1 = std::min(ctx_max, j0 + kSpan);
    const bool first = j0 == 0;
    // Each slice of the values' elements serves every query group while it is in L1.
    int64_t d = 0;
    for (; d + kValDv * VW <= n; d += kValDv * VW) tile_values_d<kValDv, T>(pt, ldq, nr, vblk, bs, j0, j1, n, d, o, first);
    for (; d + VW <= n; d += VW) tile_values_d<1, T>(pt, ldq, nr, vblk, bs, j0, j1, n, d, o, first);
    for (; d < n; ++d)  // a row length off the vector width: the last elements one by one, keys in order
      for (int i = 0; i < nr; ++i) {
        float acc = first ? 0.f : o[i][d];
        for (int j = j0; j < j1; ++j) acc = std::fma(pt[static_cast<int64_t>(j) * ldq + i], kvscalar(vblk[j / bs] + (j % bs) * n + d), acc);
        o[i][d] = acc;
      }
  }
  for (int i = 0; i < nr; ++i) {
    const vf inv = vset1(inv_sum[i]);
    int64_t d = 0;
    for (; d + VW <= n; d += VW) vstore(o[i] + d, vmul(vload(o[i] + d), inv));
    for (; d < n; ++d) o[i][d] *= inv_sum[i];
  }
}

}  // namespace

void attn_tile(const float* const* q, const int32_t* ctx, int nr, const float* const* kblk, const float* const* vblk,
               int bs, int64_t n, float scale, float* const* o, std::vector<float>& scratch) {
  attn_tile_kv(q, ctx, nr, kblk, vblk, bs, n, scale, o, scratch);
}
void attn_tile_f16(const float* const* q, const int32_t* ctx, int nr, const uint16_t* const* kblk,
                   const uint16_t* const* vblk, int bs, int64_t n, float scale, float* const* o, std::vector<float>& scratch) {
  attn_tile_kv(q, ctx, nr, kblk, vblk, bs, n, scale, o, scratch);
}

void attn_scores(const float* q, int64_t qs, int nq, const float* const* blk, int bs, int ctx, int64_t n, float scale,
                 float* out, int64_t os, const float* const* next, int n_next) {
  attn_dispatch<false>(q, qs, nq, blk, bs, ctx, n, scale, out, os, next, n_next);
}
void attn_scores_f16(const float* q, int64_t qs, int nq, const uint16_t* const* blk, int bs, int ctx, int64_t n,
                     float scale, float* out, int64_t os, const uint16_t* const* next, int n_next) {
  attn_dispatch<false>(q, qs, nq, blk, bs, ctx, n, scale, out, os, next, n_next);
}

void attn_values(const float* w, int64_t ws, int nq, const float* const* blk, int bs, int ctx, int64_t n, float* o,
                 int64_t os, const float* const* next, int n_next) {
  attn_dispatch<true>(w, ws, nq, blk, bs, ctx, n, 1.f, o, os, next, n_next);
}
void attn_values_f16(const float* w, int64_t ws, int nq, const uint16_t* const* blk, int bs, int ctx, int64_t n, float* o,
                     int64_t os, const uint16_t* const* next, int n_next) {
  attn_dispatch<true>(w, ws, nq, blk, bs, ctx, n, 1.f, o, os, next, n_next);
}

void to_f16(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
#if defined(__AVX512F__)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  }
  for (; i < n; ++i) out[i] = f2h(x[i]);
}

}  // namespace lumen::cpu::LUMEN_ISA
