// Prefill-sized products (more than 16 activation rows) with Q4_K weights, computed as llama.cpp
// computes them on an AVX2 CPU: it repacks Q4_K and runs ggml_gemm_q4_K_8x8_q8_K, whose order this
// follows. A panel of 16 weight rows is unpacked once and interleaved by quads of k across two
// vectors of 8 rows (one row per 32-bit lane); blocks of up to 4 panels are passed by every
// activation tile (2 rows; on AVX-512, 4 rows against one 64-byte vector of all 16 weight rows),
// the q8_K bytes read in place and broadcast, the next block's weight bytes prefetched meanwhile.
// The values are unsigned and below 16, so `maddubs` cannot saturate and its int16 sums add up
// over a group of 32 (8 steps of 4 k, |sum| <= 8 x 2 x 15 x 128) before one `madd` by the group's
// scale: about one multiply per 32 products, where quant_matmul.cpp's tiles take a maddubs and a madd per 32 and unpack each
// block once per tile of 4 rows. Per block the int32 sums times dw x dx go into one f32
// accumulator and the mins' sums times dmin x dx into another, subtracted at the end. Q6_K on
// AVX-512 takes the same panels in vec_dot_q6_K_q8_K's order (its 8 int32 lanes per block, each in
// a register of its own). The other types keep quant_matmul.cpp's tiles at every size: their order
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

using namespace lumen::quant;

constexpr int NP = 16;  // weight rows per panel

// acc + the pair sums of a * b (int16 x int16 -> int32).
inline __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// The thread's scratch: the activations' scales and group sums, and the unpacked panels.
struct Scratch {
  AlignedBuffer xd, xg;           // [M][K / 256] q8_K scales, [M][K / 32] pair sums of the bsums
  AlignedBuffer rows;             // a panel's value bytes before interleaving ([NP][K])
  AlignedBuffer ws, wsc, wd, wdm, wm;  // per panel: interleaved values, group scales, d, dmin, mins
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

// A tile's sums to y (rows ldy apart; the first nvalid of the 16 outputs).
template <int R>
inline void store_tile(const __m256 (*acc)[2], float* y, int64_t ldy, int nvalid) {
  for (int i = 0; i < R; ++i) {
    float* yr = y + i * ldy;
    if (nvalid == NP) {
      _mm256_storeu_ps(yr, acc[i][0]);
      _mm256_storeu_ps(yr + 8, acc[i][1]);
    } else {
      alignas(32) float t[NP];
      _mm256_store_ps(t, acc[i][0]);
      _mm256_store_ps(t + 8, acc[i][1]);
      for (int l = 0; l < nvalid; ++l) yr[l] = t[l];
    }
  }
}

// The 4 bytes at p (two int16, or four int8) in every 32-bit lane.
inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
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

// Weight rows n0 .. n0 + nrows of a Q4_K matrix: wq[k4][v][i] = the 4 value bytes (k = 4 k4 ..
// 4 k4 + 3) of row 8 v + i; wsc[b][g][v][i] = group g's scale in both int16 halves.
void unpack_panel_k(const uint8_t* w, size_t wrow, int64_t nrows, int64_t K, Scratch& s, int q) {
  const int64_t nb = K / QK_K;
  uint8_t* rows = s.rows.as<uint8_t>();
  float* wd = s.wd.as<float>() + q * nb * NP;
  float* wdm = s.wdm.as<float>() + q * nb * NP;
  int32_t* wm = s.wm.as<int32_t>() + q * nb * 4 * NP;
  int32_t* wsc = s.wsc.as<int32_t>() + q * nb * 8 * NP;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int r = 0; r < NP; ++r) {
    uint8_t* out = rows + r * K;
    const int v = r / 8, lane = r % 8;
    if (r >= nrows) {
      std::memset(out, 0, static_cast<size_t>(K));
      for (int64_t b = 0; b < nb; ++b) {
        wd[b * NP + r] = wdm[b * NP + r] = 0.f;
        for (int j = 0; j < 4; ++j) wm[((b * 4 + j) * 2 + v) * 8 + lane] = 0;
        for (int g = 0; g < 8; ++g) wsc[((b * 8 + g) * 2 + v) * 8 + lane] = 0;
      }
      continue;
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + static_cast<size_t>(r) * wrow + static_cast<size_t>(b) * sizeof(BlockQ4_K);
      uint16_t dh, dmh;
      std::memcpy(&dh, blk, 2);
      std::memcpy(&dmh, blk + 2, 2);
      wd[b * NP + r] = h2f(dh);
      wdm[b * NP + r] = h2f(dmh);
      const uint8_t* qs = blk + 16;
      uint8_t mins[8];
      for (int g = 0; g < 8; ++g) {
        uint8_t sc;
        k_scale_min(g, blk + 4, sc, mins[g]);
        wsc[((b * 8 + g) * 2 + v) * 8 + lane] = static_cast<int32_t>(sc) | (static_cast<int32_t>(sc) << 16);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (g / 2)));
        const __m256i val = _mm256_and_si256(g % 2 ? _mm256_srli_epi16(q, 4) : q, m4);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * QK_K + 32 * g), val);
      }
      for (int j = 0; j < 4; ++j)
        wm[((b * 4 + j) * 2 + v) * 8 + lane] =
            static_cast<int32_t>(mins[2 * j]) | (static_cast<int32_t>(mins[2 * j + 1]) << 16);
    }
  }
  interleave_panel(s, q, K);
}

// What a tile reads: activation rows m .. m + R (their q8_K blocks, scales and group sums) and
// unpacked panel q of the scratch.
template <int R>
struct TileView {
  int64_t nb;
  const float *xd, *wd, *wdm;
  const int16_t* xg;
  const int32_t *wq, *wsc, *wm;
  const BlockQ8_K* xr[R];
  TileView(const Scratch& s, int q, const uint8_t* xq, size_t rb, int64_t m, int64_t K)
      : nb(K / QK_K),
        xd(s.xd.as<float>() + m * nb),
        wd(s.wd.as<float>() + q * nb * NP),
        wdm(s.wdm.as<float>() + q * nb * NP),
        xg(s.xg.as<int16_t>() + m * (K / 32)),
        wq(s.ws.as<int32_t>() + q * (K / 4) * NP),
        wsc(s.wsc.as<int32_t>() + q * nb * 8 * NP),
        wm(s.wm.as<int32_t>() + q * nb * 4 * NP) {
    for (int i = 0; i < R; ++i) xr[i] = reinterpret_cast<const BlockQ8_K*>(xq + static_cast<size_t>(m + i) * rb);
  }
};

// R activation rows (from m; q8_K rows of rb bytes at xq) against the unpacked Q4_K panel, in
// llama.cpp's order for its repacked Q4_K (ggml_gemm_q4_K_8x8_q8_K): per block the int32 sums
// times dw x dx into one f32 accumulator, the mins' sums times dmin x dx into another, subtracted
// at the end.
template <int R>
void tile_k(const Scratch& s, int q, const uint8_t* xq, size_t rb, int64_t m, int64_t K, float* y, int64_t ldy, int nvalid) {
  const auto& [nb, xd, wd, wdm, xg, wq, wsc, wm, xr] = TileView<R>(s, q, xq, rb, m, K);
  __m256 acc[R][2], accm[R][2];
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = accm[i][0] = accm[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i is[R][2];
    for (int i = 0; i < R; ++i) is[i][0] = is[i][1] = _mm256_setzero_si256();
    const int32_t* wb = wq + b * (QK_K / 4) * 16;
    for (int g = 0; g < 8; ++g) {
      __m256i s16[R][2];
      for (int i = 0; i < R; ++i) s16[i][0] = s16[i][1] = _mm256_setzero_si256();
      for (int st = 0; st < 8; ++st) {
        const int k4 = 8 * g + st;
        const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k4 * 16));
        const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k4 * 16 + 8));
        for (int i = 0; i < R; ++i) {
          const __m256i xv = bcast4(xr[i][b].qs + 4 * k4);
          s16[i][0] = _mm256_add_epi16(s16[i][0], _mm256_maddubs_epi16(w0, xv));
          s16[i][1] = _mm256_add_epi16(s16[i][1], _mm256_maddubs_epi16(w1, xv));
        }
      }
      for (int v = 0; v < 2; ++v) {
        const __m256i sc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wsc + ((b * 8 + g) * 2 + v) * 8));
        for (int i = 0; i < R; ++i) is[i][v] = madd_acc(is[i][v], s16[i][v], sc);
      }
    }
    for (int v = 0; v < 2; ++v) {
      const __m256 dw = _mm256_loadu_ps(wd + b * NP + 8 * v);
      for (int i = 0; i < R; ++i)
        acc[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i][v]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[i * nb + b])), acc[i][v]);
      __m256i ms[R];
      for (int i = 0; i < R; ++i) ms[i] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i mv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wm + ((b * 4 + j) * 2 + v) * 8));
        for (int i = 0; i < R; ++i) ms[i] = madd_acc(ms[i], mv, bcast4(xg + i * (K / 32) + b * 8 + 2 * j));
      }
      const __m256 dm = _mm256_loadu_ps(wdm + b * NP + 8 * v);
      for (int i = 0; i < R; ++i)
        accm[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms[i]), _mm256_mul_ps(dm, _mm256_set1_ps(xd[i * nb + b])), accm[i][v]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < 2; ++v) acc[i][v] = _mm256_sub_ps(acc[i][v], accm[i][v]);
  store_tile<R>(acc, y + m * ldy, ldy, nvalid);
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// tile_k on 64-byte vectors: the panel's 16 weight rows in the 16 lanes of one vector (the
// unpacked layout puts the two 8-row halves side by side), so a step takes one load, and each
// activation row one broadcast, one `maddubs` and one add; the same integer and f32 operations
// per lane as tile_k, so the same bits.
template <int R>
void tile_k512(const Scratch& s, int q, const uint8_t* xq, size_t rb, int64_t m, int64_t K, float* y, int64_t ldy,
               int nvalid) {
  const auto& [nb, xd, wd, wdm, xg, wq, wsc, wm, xr] = TileView<R>(s, q, xq, rb, m, K);
  __m512 acc[R], accm[R];
  for (int i = 0; i < R; ++i) acc[i] = accm[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i is[R];
    for (int i = 0; i < R; ++i) is[i] = _mm512_setzero_si512();
    const int32_t* wb = wq + b * (QK_K / 4) * 16;
    for (int g = 0; g < 8; ++g) {
      __m512i s16[R];
      for (int i = 0; i < R; ++i) s16[i] = _mm512_setzero_si512();
      for (int st = 0; st < 8; ++st) {
        const int k4 = 8 * g + st;
        const __m512i w = _mm512_loadu_si512(wb + k4 * 16);
        for (int i = 0; i < R; ++i) {
          int32_t xv;
          std::memcpy(&xv, xr[i][b].qs + 4 * k4, 4);
          s16[i] = _mm512_add_epi16(s16[i], _mm512_maddubs_epi16(w, _mm512_set1_epi32(xv)));
        }
      }
      const __m512i sc = _mm512_loadu_si512(wsc + (b * 8 + g) * 16);
      for (int i = 0; i < R; ++i) is[i] = _mm512_dpwssd_epi32(is[i], s16[i], sc);
    }
    const __m512 dw = _mm512_loadu_ps(wd + b * NP);
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[i]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[i * nb + b])), acc[i]);
    __m512i ms[R];
    for (int i = 0; i < R; ++i) ms[i] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i mv = _mm512_loadu_si512(wm + (b * 4 + j) * 16);
      for (int i = 0; i < R; ++i) {
        int32_t gv;
        std::memcpy(&gv, xg + i * (K / 32) + b * 8 + 2 * j, 4);
        ms[i] = _mm512_dpwssd_epi32(ms[i], mv, _mm512_set1_epi32(gv));
      }
    }
    const __m512 dm = _mm512_loadu_ps(wdm + b * NP);
    for (int i = 0; i < R; ++i)
      accm[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms[i]), _mm512_mul_ps(dm, _mm512_set1_ps(xd[i * nb + b])), accm[i]);
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << nvalid) - 1);
  for (int i = 0; i < R; ++i) _mm512_mask_storeu_ps(y + (m + i) * ldy, keep, _mm512_sub_ps(acc[i], accm[i]));
}
#endif

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

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Weight rows n0 .. n0 + nrows of a Q6_K matrix, unpacked as unpack_panel_k unpacks Q4_K: wq[k4]
// the 16 rows' 4 value bytes (0..63: the stored 6 bits, the -32 offset kept apart), wsc[b][s] the
// 16 rows' scale of sub-block s (16 values) in both int16 halves, wm[b][l] the 16 rows' offset
// correction pair of lane l (-32 sc[2l], -32 sc[2l + 1] as int16), wd[b] the 16 rows' d.
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

void gemm_q4_K(const uint8_t* xq, int64_t M, int64_t K, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
  constexpr int KR = 4;  // activation rows per register tile
#else
  constexpr int KR = 2;
#endif
  const int64_t nb = K / QK_K;
  Scratch& s = scratch();
  need(s.xd, static_cast<size_t>(M * nb) * sizeof(float));
  need(s.xg, static_cast<size_t>(M * (K / 32)) * sizeof(int16_t) + 64);
  // Panels unpacked per block: as many as keep the block's bytes near 96 KiB (1..4); every
  // activation tile passes the whole block.
  const int npan = static_cast<int>(std::clamp<int64_t>((int64_t{96} << 10) / (K * NP), 1, 4));
  need(s.rows, static_cast<size_t>(NP * K));
  need(s.ws, static_cast<size_t>(npan * K * NP));
  need(s.wsc, static_cast<size_t>(npan * nb * 8 * NP) * sizeof(int32_t));
  need(s.wd, static_cast<size_t>(npan * nb * NP) * sizeof(float));
  need(s.wdm, static_cast<size_t>(npan * nb * NP) * sizeof(float));
  need(s.wm, static_cast<size_t>(npan * nb * 4 * NP) * sizeof(int32_t) + 64);
  k_act_sums(xq, M, K, s.xd.as<float>(), s.xg.as<int16_t>());
  const size_t wrow = row_bytes(DType::q4_K, K), rb = act_row_bytes(ActQuant::q8_K, K);
  panel_blocks<KR>(
      M, n0, n1, npan, w, wrow,
      [&](int q, int64_t p, int64_t nrows) { unpack_panel_k(w + static_cast<size_t>(p) * wrow, wrow, nrows, K, s, q); },
      [&](auto rows, int q, int64_t m, int64_t p, int nvalid) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
        tile_k512<decltype(rows)::value>(s, q, xq, rb, m, K, y + p, ldy, nvalid);
#else
        tile_k<decltype(rows)::value>(s, q, xq, rb, m, K, y + p, ldy, nvalid);
#endif
      });
}

}  // namespace

bool gemm_quant(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  const auto* x = static_cast<const uint8_t*>(xq);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (wt) {
    case DType::q4_K: gemm_q4_K(x, M, K, wb, n0, n1, y, ldy); return true;
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    case DType::q6_K: gemm_q6_K(x, M, K, wb, n0, n1, y, ldy); return true;
#endif
    default: return false;
  }
}

}  // namespace lumen::cpu::LUMEN_ISA
