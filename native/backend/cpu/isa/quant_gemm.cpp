// Prefill-sized products (more than 16 activation rows) with Q6_K weights on AVX-512 with VNNI, in
// vec_dot_q6_K_q8_K's order. A panel of 16 weight rows is unpacked once into bytes interleaved by
// quads of k (one row per 32-bit lane of a 64-byte vector); blocks of up to 4 panels are passed by
// every activation tile of 2 rows, the q8_K bytes read in place and broadcast, the next block's
// weight bytes prefetched meanwhile. A tile keeps the 8 int32 lanes of llama.cpp's order per
// block each in a register of its own. Q4_K has panels repacked once at load instead
// (quant_panels.cpp); the other types keep quant_matmul.cpp's tiles at every size: their order
// there is llama.cpp's (vec_dot, tinyBLAS), and a faster int16 kernel in another order was
// measured and not taken (docs/performance.md).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/quant_simd.h"
#include "backend/cpu/isa/simd.h"
#include "core/aligned.h"
#include "core/quant_ref.h"

namespace lumen::cpu::LUMEN_ISA {
namespace {

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
using namespace lumen::quant;

constexpr int NP = 16;  // weight rows per panel

// The thread's scratch: the unpacked panels.
struct Scratch {
  AlignedBuffer rows;          // a panel's value bytes before interleaving ([NP][K])
  AlignedBuffer ws, wsc, wd, wm;  // per panel: interleaved values, sub-block scales, d, offset pairs
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
inline void need(AlignedBuffer& b, size_t bytes) {
  if (b.size() < bytes) b.resize(bytes, false);
}

// 8 x 8 transpose of int32 elements: in[i] row i -> out[j] element j of every row.
inline void transpose8i(const __m256i* in, __m256i* out) {
  __m256 v[8], t[8];
  for (int i = 0; i < 8; ++i) v[i] = _mm256_castsi256_ps(in[i]);
  transpose8(v, t);
  for (int i = 0; i < 8; ++i) out[i] = _mm256_castps_si256(t[i]);
}

// The panel's value bytes (s.rows, [NP][K]) interleaved by quads of k into panel q of s.ws:
// wq[k4][v][i] = the 4 bytes k = 4 k4 .. 4 k4 + 3 of row 8 v + i.
void interleave_panel(Scratch& s, int q, int64_t K) {
  const uint8_t* rows = s.rows.as<uint8_t>();
  int32_t* wq = s.ws.as<int32_t>() + q * (K / 4) * NP;
  for (int v = 0; v < 2; ++v)
    for (int64_t k4 = 0; k4 < K / 4; k4 += 8) {
      __m256i in[8], out[8];
      for (int i = 0; i < 8; ++i)
        in[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + (8 * v + i) * K + 4 * k4));
      transpose8i(in, out);
      for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(wq + ((k4 + j) * 2 + v) * 8), out[j]);
    }
}

// The next block of panels' weight bytes (rows p1 .. p2, contiguous) prefetched to L2 a slice at
// a time while the activation tiles pass the current block, so its unpacking does not wait on
// memory (the rows are read once, a few KiB each: too short for the hardware prefetcher).
struct NextPanels {
  const uint8_t* base;
  int64_t lines, done = 0;
  NextPanels(const uint8_t* w, size_t wrow, int64_t p1, int64_t p2)
      : base(w + static_cast<size_t>(p1) * wrow), lines(std::max<int64_t>(0, p2 - p1) * static_cast<int64_t>(wrow) / 64) {}
  // After tile k of n: the lines up to the share (k + 1) / n of the whole.
  void step(int64_t k, int64_t n) {
    const int64_t upto = lines * (k + 1) / n;
    for (; done < upto; ++done) _mm_prefetch(reinterpret_cast<const char*>(base + 64 * done), _MM_HINT_T1);
  }
};

// Weight rows n0 .. n1 in blocks of npan panels of NP rows: each block unpacked (unpack(q, p, nrows)
// for panel q, first row p), then passed by every activation tile of KR rows, the last M % KR rows
// one at a time (tile(rows, q, m, p, nvalid), rows an integral_constant), the next block's bytes
// prefetched meanwhile.
template <int KR, class Unpack, class Tile>
void panel_blocks(int64_t M, int64_t n0, int64_t n1, int npan, const uint8_t* w, size_t wrow, Unpack&& unpack, Tile&& tile) {
  for (int64_t p0 = n0; p0 < n1; p0 += npan * NP) {
    const int nq = static_cast<int>(std::min<int64_t>(npan, (n1 - p0 + NP - 1) / NP));
    for (int q = 0; q < nq; ++q) unpack(q, p0 + q * NP, std::min<int64_t>(NP, n1 - p0 - q * NP));
    const auto pass = [&](auto rows, int64_t m) {
      for (int q = 0; q < nq; ++q) tile(rows, q, m, p0 + q * NP, static_cast<int>(std::min<int64_t>(NP, n1 - p0 - q * NP)));
    };
    NextPanels next(w, wrow, p0 + npan * NP, std::min(n1, p0 + 2 * npan * NP));
    const int64_t tiles = M / KR + M % KR;
    int64_t m = 0, k = 0;
    for (; m + KR <= M; m += KR, ++k) {
      pass(std::integral_constant<int, KR>{}, m);
      next.step(k, tiles);
    }
    for (; m < M; ++m, ++k) {
      pass(std::integral_constant<int, 1>{}, m);
      next.step(k, tiles);
    }
  }
}

// Weight rows n0 .. n0 + nrows of a Q6_K matrix: wq[k4] the 16 rows' 4 value bytes (0..63: the
// stored 6 bits, the -32 offset kept apart), wsc[b][s] the 16 rows' scale of sub-block s (16
// values) in both int16 halves, wm[b][l] the 16 rows' offset correction pair of lane l (-32 sc[2l],
// -32 sc[2l + 1] as int16), wd[b] the 16 rows' d.
void unpack_panel_q6(const uint8_t* w, size_t wrow, int64_t nrows, int64_t K, Scratch& s, int q) {
  const int64_t nb = K / QK_K;
  uint8_t* rows = s.rows.as<uint8_t>();
  float* wd = s.wd.as<float>() + q * nb * NP;
  int32_t* wm = s.wm.as<int32_t>() + q * nb * 8 * NP;
  int32_t* wsc = s.wsc.as<int32_t>() + q * nb * 16 * NP;
  const auto pair = [](int a, int b) {
    return static_cast<int32_t>(static_cast<uint16_t>(a) | (static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16));
  };
  for (int r = 0; r < NP; ++r) {
    uint8_t* out = rows + r * K;
    if (r >= nrows) {
      std::memset(out, 0, static_cast<size_t>(K));
      for (int64_t b = 0; b < nb; ++b) {
        wd[b * NP + r] = 0.f;
        for (int l = 0; l < 8; ++l) wm[(b * 8 + l) * NP + r] = 0;
        for (int j = 0; j < 16; ++j) wsc[(b * 16 + j) * NP + r] = 0;
      }
      continue;
    }
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ6_K blk;
      std::memcpy(&blk, w + static_cast<size_t>(r) * wrow + static_cast<size_t>(b) * sizeof(BlockQ6_K), sizeof blk);
      wd[b * NP + r] = h2f(blk.d);
      for (int j = 0; j < 16; ++j) wsc[(b * 16 + j) * NP + r] = pair(blk.scales[j], blk.scales[j]);
      for (int l = 0; l < 8; ++l) wm[(b * 8 + l) * NP + r] = pair(-32 * blk.scales[2 * l], -32 * blk.scales[2 * l + 1]);
      for (int h = 0; h < 2; ++h) {
        __m256i v[4];
        q6_K_half(blk.ql, blk.qh, h, v);
        for (int j = 0; j < 4; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * QK_K + 128 * h + 32 * j), v[j]);
      }
    }
  }
  interleave_panel(s, q, K);
}

// The unpacked Q6_K panel q of the scratch.
struct Q6View {
  int64_t nb;
  const float* wd;
  const int32_t *wm, *wsc, *wq;
  Q6View(const Scratch& s, int q, int64_t K)
      : nb(K / QK_K),
        wd(s.wd.as<float>() + q * nb * NP),
        wm(s.wm.as<int32_t>() + q * nb * 8 * NP),
        wsc(s.wsc.as<int32_t>() + q * nb * 16 * NP),
        wq(s.ws.as<int32_t>() + q * (K / 4) * NP) {}
};
// The unpacked Q6_K panel q against activation rows, in vec_dot_q6_K_q8_K's order (as
// quant_matmul.cpp's dot_q6_K and core/quant_ref.cpp): per block 8 int32 lanes, lane l taking the
// steps of 4 values st = l, l + 8, ... (bytes 4l .. 4l + 3 of each 32-byte chunk) times their
// sub-block's scale, and its share of the offset, -32 (sc[2l] bsums[2l] + sc[2l + 1] bsums[2l + 1]);
// acc[l] = fma(dx dw, lane l, acc[l]); the 8 lanes summed at the end as hsum_float_8. A vector lane
// is a weight row: per step one load, and per activation row a broadcast, a `maddubs` and a
// `vpdpwssd`. The lane index is a constant of the unrolled loops, so the int32 lanes stay in
// registers; the f32 lanes wait in the tile's scratch between blocks. (AVX-512 only: a 32-byte
// form, one activation row and two 8-row halves, measured slower than quant_matmul.cpp's tiles,
// whose maddubs + madd + add per 32 products it cannot cut; docs/performance.md.) 64-byte vectors:
// all 16 weight rows of the panel in one, R activation rows per tile.
template <int R>
void tile_q6_512(const Scratch& s, int q, const uint8_t* xq, size_t rb, int64_t m, int64_t K, float* y, int64_t ldy,
                 int nvalid) {
  const auto [nb, wd, wm, wsc, wq] = Q6View(s, q, K);
  const BlockQ8_K* xr[R];
  for (int i = 0; i < R; ++i) xr[i] = reinterpret_cast<const BlockQ8_K*>(xq + static_cast<size_t>(m + i) * rb);
  alignas(64) float fa[R][8][NP] = {};
  for (int64_t b = 0; b < nb; ++b) {
    __m512i ia[R][8];
    for (int l = 0; l < 8; ++l) {
      const __m512i c = _mm512_loadu_si512(wm + (b * 8 + l) * NP);
      for (int i = 0; i < R; ++i) {
        int32_t bs;
        std::memcpy(&bs, xr[i][b].bsums + 2 * l, 4);
        ia[i][l] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), c, _mm512_set1_epi32(bs));
      }
    }
    const int32_t* wb = wq + b * (QK_K / 4) * NP;
    // Chunk c (32 values, sub-blocks 2c and 2c + 1): steps 8c + l, one per lane.
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512i sc0 = _mm512_loadu_si512(wsc + (b * 16 + 2 * c) * NP);
      const __m512i sc1 = _mm512_loadu_si512(wsc + (b * 16 + 2 * c + 1) * NP);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        const int st = 8 * c + l;
        const __m512i wv = _mm512_load_si512(wb + st * NP);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          int32_t xv;
          std::memcpy(&xv, xr[i][b].qs + 4 * st, 4);
          ia[i][l] = _mm512_dpwssd_epi32(ia[i][l], _mm512_maddubs_epi16(wv, _mm512_set1_epi32(xv)), l < 4 ? sc0 : sc1);
        }
      }
    }
    const __m512 dw = _mm512_loadu_ps(wd + b * NP);
    for (int i = 0; i < R; ++i) {
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(xr[i][b].d), dw);
      for (int l = 0; l < 8; ++l)
        _mm512_store_ps(fa[i][l], _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(ia[i][l]), _mm512_load_ps(fa[i][l])));
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << nvalid) - 1);
  for (int i = 0; i < R; ++i) {
    // As hsum_float_8 sums llama.cpp's 8 lanes.
    __m512 r[4];
    for (int l = 0; l < 4; ++l) r[l] = _mm512_add_ps(_mm512_load_ps(fa[i][l + 4]), _mm512_load_ps(fa[i][l]));
    _mm512_mask_storeu_ps(y + (m + i) * ldy, keep, _mm512_add_ps(_mm512_add_ps(r[0], r[2]), _mm512_add_ps(r[1], r[3])));
  }
}

void gemm_q6_K(const uint8_t* xq, int64_t M, int64_t K, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int KR = 2;  // activation rows per register tile (2 x 8 int32 lanes)
  const int64_t nb = K / QK_K;
  Scratch& s = scratch();
  const int npan = static_cast<int>(std::clamp<int64_t>((int64_t{96} << 10) / (K * NP), 1, 4));
  need(s.rows, static_cast<size_t>(NP * K));
  need(s.ws, static_cast<size_t>(npan * K * NP));
  need(s.wsc, static_cast<size_t>(npan * nb * 16 * NP) * sizeof(int32_t));
  need(s.wd, static_cast<size_t>(npan * nb * NP) * sizeof(float));
  need(s.wm, static_cast<size_t>(npan * nb * 8 * NP) * sizeof(int32_t));
  const size_t wrow = row_bytes(DType::q6_K, K), rb = act_row_bytes(ActQuant::q8_K, K);
  panel_blocks<KR>(
      M, n0, n1, npan, w, wrow,
      [&](int q, int64_t p, int64_t nrows) { unpack_panel_q6(w + static_cast<size_t>(p) * wrow, wrow, nrows, K, s, q); },
      [&](auto rows, int q, int64_t m, int64_t p, int nvalid) {
        tile_q6_512<decltype(rows)::value>(s, q, xq, rb, m, K, y + p, ldy, nvalid);
      });
}
#endif

}  // namespace

bool gemm_quant([[maybe_unused]] const void* xq, [[maybe_unused]] int64_t M, [[maybe_unused]] int64_t K,
                [[maybe_unused]] const void* w, [[maybe_unused]] DType wt, [[maybe_unused]] int64_t n0,
                [[maybe_unused]] int64_t n1, [[maybe_unused]] float* y, [[maybe_unused]] int64_t ldy) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
  if (wt == DType::q6_K) {
    gemm_q6_K(static_cast<const uint8_t*>(xq), M, K, static_cast<const uint8_t*>(w), n0, n1, y, ldy);
    return true;
  }
#endif
  return false;
}

}  // namespace lumen::cpu::LUMEN_ISA
