// Paged attention rows for one ISA: scores and weighted values of a GQA group's query heads over
// a sequence's scattered KV blocks, several blocks read side by side, the next ones prefetched.
#include <algorithm>

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
struct PagedRun {
  const float* const* blk;
  int nblk;
  const float* const* next;
  int n_next;
  const float* at(int t) const { return t < nblk ? blk[t] : t - nblk < n_next ? next[t - nblk] : nullptr; }
};

// Scores of NQ heads against S rows (any addresses); out index js[s]; with PF, pf[s] is a row to
// prefetch, a line per line consumed (never null: without a row to fetch it repeats rows[s]).
template <int NQ, int S, bool PF>
inline void scores_step(const float* q, int64_t qs, const float* const* rows, int64_t n, float scale, float* out,
                        int64_t os, const int* js, const float* const* pf) {
  vf acc[S][NQ];
  for (int r = 0; r < S; ++r)
    for (int h = 0; h < NQ; ++h) acc[r][h] = vzero();
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    vf kv[S];
    for (int r = 0; r < S; ++r) {
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(pf[r] + i), _MM_HINT_T0);
      kv[r] = vload(rows[r] + i);
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
      for (int64_t j = i; j < n; ++j) sum += q[h * qs + j] * rows[r][j];
      out[h * os + js[r]] = sum * scale;
    }
}

// o_h += Σ_s w[h * ws + js[s]] rows[s] for NQ heads; o stays in L1 (NQ x n floats) and is read
// and written once per S rows.
template <int NQ, int S, bool PF>
inline void values_step(const float* w, int64_t ws, const float* const* rows, int64_t n, float* o, int64_t os,
                        const int* js, const float* const* pf) {
  vf wv[S][NQ];
  for (int r = 0; r < S; ++r)
    for (int h = 0; h < NQ; ++h) wv[r][h] = vset1(w[h * ws + js[r]]);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    vf vv[S];
    for (int r = 0; r < S; ++r) {
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(pf[r] + i), _MM_HINT_T0);
      vv[r] = vload(rows[r] + i);
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
      for (int r = 0; r < S; ++r) acc += w[h * ws + js[r]] * rows[r][i];
      o[h * os + i] = acc;
    }
}

// Walks the run: groups of S full blocks side by side (row r of each), each prefetching the block
// S further on; then the remaining blocks one at a time, two rows per step, prefetching the next.
// Without PF (rows expected in cache) nothing is prefetched.
template <int NQ, bool Values, bool PF>
void attn_run(const float* x, int64_t xs, const float* const* blk, int bs, int ctx, int64_t n, float scale, float* y,
              int64_t ys, const float* const* next, int n_next) {
  constexpr int S = attn_streams<NQ>();
  const int nblk = (ctx + bs - 1) / bs, nfull = ctx / bs;
  const PagedRun run{blk, nblk, next, n_next};
  auto step = [&]<int R>(const float* const* rows, const int* js, const float* const* pf) {
    if constexpr (Values)
      values_step<NQ, R, PF>(x, xs, rows, n, y, ys, js, pf);
    else
      scores_step<NQ, R, PF>(x, xs, rows, n, scale, y, ys, js, pf);
  };
  // Row r of block t to prefetch, or `self` (a line already being read) when there is none.
  auto pf_row = [&](int t, int r, const float* self) {
    const float* p = PF ? run.at(t) : nullptr;
    return p ? p + r * n : self;
  };
  int b = 0;
  for (; b + S <= nfull; b += S)
    for (int r = 0; r < bs; ++r) {
      const float* rows[S];
      const float* pf[S];
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
      const float* rows[2] = {blk[b] + r * n, blk[b] + (r + 1) * n};
      const float* pf[2] = {pf_row(b + 1, r, rows[0]), pf_row(b + 1, r + 1, rows[1])};
      const int js[2] = {b * bs + r, b * bs + r + 1};
      step.template operator()<2>(rows, js, pf);
    }
    if (r < nr) {
      const float* rows[1] = {blk[b] + r * n};
      const float* pf[1] = {pf_row(b + 1, r, rows[0])};
      const int js[1] = {b * bs + r};
      step.template operator()<1>(rows, js, pf);
    }
  }
}

template <int NQ, bool Values>
void attn_run_pf(const float* x, int64_t xs, const float* const* blk, int bs, int ctx, int64_t n, float scale, float* y,
                 int64_t ys, const float* const* next, int n_next) {
  if (n_next < 0)
    attn_run<NQ, Values, false>(x, xs, blk, bs, ctx, n, scale, y, ys, nullptr, 0);
  else
    attn_run<NQ, Values, true>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next);
}

template <bool Values>
void attn_dispatch(const float* x, int64_t xs, int nq, const float* const* blk, int bs, int ctx, int64_t n, float scale,
                   float* y, int64_t ys, const float* const* next, int n_next) {
  switch (nq) {
    case 4: attn_run_pf<4, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 2: attn_run_pf<2, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 8: attn_run_pf<8, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    case 1: attn_run_pf<1, Values>(x, xs, blk, bs, ctx, n, scale, y, ys, next, n_next); return;
    default:  // any other group size, a head at a time (rows then come from cache after the first)
      for (int h = 0; h < nq; ++h)
        attn_run_pf<1, Values>(x + h * xs, xs, blk, bs, ctx, n, scale, y + h * ys, ys, next, n_next);
  }
}

}  // namespace

void attn_scores(const float* q, int64_t qs, int nq, const float* const* blk, int bs, int ctx, int64_t n, float scale,
                 float* out, int64_t os, const float* const* next, int n_next) {
  attn_dispatch<false>(q, qs, nq, blk, bs, ctx, n, scale, out, os, next, n_next);
}

void attn_values(const float* w, int64_t ws, int nq, const float* const* blk, int bs, int ctx, int64_t n, float* o,
                 int64_t os, const float* const* next, int n_next) {
  attn_dispatch<true>(w, ws, nq, blk, bs, ctx, n, 1.f, o, os, next, n_next);
}

}  // namespace lumen::cpu::LUMEN_ISA
