// Prefill-sized products (more than 16 activation rows) with block-quantized weights, on the
// integers of quant_matmul.cpp's dot products and llama.cpp's. A panel of 16 weight rows is unpacked
// once and every activation row passes it. Two kernels, each in the order of the llama.cpp code
// that computes the same product on an AVX2 CPU:
//  - Q8_0, Q4_0, Q5_0, IQ4_NL, Q6_K, IQ4_XS ("lanes"): the q8 activations and the weight values
//    widened to int16 in the lane order (k = 0, 1 mod 4, then 2, 3 mod 4, per group of 32; Q6_K's and
//    IQ4_XS's group scales multiplied in), so two `madd` and an `add` give exactly the 8 int32 lanes
//    (4 products each) that quant_matmul.cpp's sign + maddubs + madd give, and the f32 steps after
//    them are the same: each (row, row) pair is bit for bit the decode tiles' result (which are
//    llama.cpp's vec_dot / tinyBLAS order), and kernelCheck checks that. The gain is the unpacking
//    done once per panel instead of once per tile, the pair scales taken per tile in vectors, and
//    no sign step.
//  - Q4_K (llama.cpp repacks Q4_K on AVX2 and computes it as ggml_gemm_q4_K_8x8_q8_K does): the
//    panel interleaved by quads of k across two vectors of 8 rows (one row per 32-bit lane), the
//    q8_K bytes read in place and broadcast; the values are unsigned and below 16, so `maddubs`
//    cannot saturate and its int16 sums add up over a group of 32 before one `madd` by the group's
//    scale: about one multiply per 32 products. Per block the int32 sums times dw x dx go into one
//    f32 accumulator and the mins' sums times dmin x dx into another, subtracted at the end.
// Q5_1 and Q5_K keep quant_matmul.cpp's tiles. Figures: docs/performance.md.
#include <algorithm>
#include <cstring>

#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/quant_simd.h"
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

// The 32 values of a group (bytes, in k order) as int16 in the lane order: A = k = 0, 1 mod 4
// (k 0 1 4 5 8 9 ... 28 29), then B = k = 2, 3 mod 4. madd(A_w, A_x) + madd(B_w, B_x) then holds in
// lane l the sum over k = 4l .. 4l + 3: the int32 lanes quant_matmul.cpp's maddubs + madd make.
template <bool Signed>
inline void lanes_i16(__m256i v, __m256i scale, int16_t* out) {
  const __m256i shuf = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i q = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, shuf), _MM_SHUFFLE(3, 1, 2, 0));
  const __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
  const __m256i wa = Signed ? _mm256_cvtepi8_epi16(a) : _mm256_cvtepu8_epi16(a);
  const __m256i wb = Signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_mullo_epi16(wa, scale));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), _mm256_mullo_epi16(wb, scale));
}
inline __m256i ones16() { return _mm256_set1_epi16(1); }

// One weight block of type T -> its 32 / 256 values as int16 in the lane order (Q6_K's scales and
// IQ4_XS's group scales multiplied in: |scale x value| <= 8064), its f32 scale, and for Q6_K the 16
// int8 scales widened (the -32 offset is taken through the bsums, as quant_matmul.cpp does).
template <DType T>
inline void unpack_block(const uint8_t* w, int16_t* out, float& d, int16_t* sc16) {
  if constexpr (T == DType::q8_0 || T == DType::q4_0 || T == DType::q5_0 || T == DType::iq4_nl) {
    uint16_t dh;
    std::memcpy(&dh, w, 2);
    d = h2f(dh);
    __m256i q;
    if constexpr (T == DType::q8_0) {
      q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
    } else if constexpr (T == DType::q4_0) {
      q = _mm256_sub_epi8(nibbles32(w + 2), _mm256_set1_epi8(8));
    } else if constexpr (T == DType::iq4_nl) {
      q = _mm256_shuffle_epi8(iq4_table(), nibbles32(w + 2));
    } else {
      q = q5_0_values(w);
    }
    lanes_i16<true>(q, ones16(), out);
  } else if constexpr (T == DType::q6_K) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(w);
    d = h2f(b->d);
    for (int i = 0; i < 16; ++i) sc16[i] = b->scales[i];
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h + 32));
      const __m256i hh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
      const __m256i v[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hh, m3), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 2), m3), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 4), m3), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 6), m3), 4))};
      for (int i = 0; i < 4; ++i) {
        const int g = 4 * h + i;  // elements 32 g .. 32 g + 31: scale 2 g for the first 16, 2 g + 1 after
        // In the lane order the first 8 of A and of B are k < 16 of the group.
        const __m256i sc = _mm256_setr_m128i(_mm_set1_epi16(b->scales[2 * g]), _mm_set1_epi16(b->scales[2 * g + 1]));
        lanes_i16<false>(v[i], sc, out + 32 * g);
      }
    }
  } else if constexpr (T == DType::iq4_xs) {
    const auto* b = reinterpret_cast<const BlockIQ4_XS*>(w);
    d = h2f(b->d);
    const __m256i table = iq4_table();
    for (int g = 0; g < 8; ++g)
      lanes_i16<true>(_mm256_shuffle_epi8(table, nibbles32(b->qs + 16 * g)),
                      _mm256_set1_epi16(static_cast<int16_t>(iq4_xs_scale(*b, g))), out + 32 * g);
  }
}

// The thread's scratch: the widened activations, and one unpacked panel.
struct Scratch {
  AlignedBuffer x16, xd, xg;  // [M][K] int16 (lane order), [M][blocks] f32 scales, q8_K: [M][K / 16] bsums / [M][K / 32] pair sums
  AlignedBuffer rows;         // the panel's rows: int16 (lane order) or Q4_K bytes before interleaving
  AlignedBuffer ws, wd;       // Q4_K: interleaved values; block scales
  AlignedBuffer wm, wdm, wsc; // Q6_K: [NP][blocks][16] scales (wsc); Q4_K: mins, dmins, group scales per lane
  AlignedBuffer sct;          // a tile's pair scales dw x dx per block
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
inline void need(AlignedBuffer& b, size_t bytes) {
  if (b.size() < bytes) b.resize(bytes, false);
}

// The activations (q8_0 or q8_K rows) widened to int16 in the lane order, with their per-block
// scales and (q8_K) their 16-element sums.
void widen_acts(ActQuant a, const uint8_t* xq, int64_t M, int64_t K, int16_t* x16, float* xd, int16_t* bsums) {
  const size_t rb = act_row_bytes(a, K);
  for (int64_t m = 0; m < M; ++m) {
    const uint8_t* row = xq + static_cast<size_t>(m) * rb;
    int16_t* xr = x16 + m * K;
    if (a == ActQuant::q8_0) {
      const auto* bl = reinterpret_cast<const BlockQ8_0*>(row);
      for (int64_t b = 0; b < K / QK; ++b) {
        xd[m * (K / QK) + b] = h2f(bl[b].d);
        lanes_i16<true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bl[b].qs)), ones16(), xr + b * QK);
      }
    } else {
      const auto* bl = reinterpret_cast<const BlockQ8_K*>(row);
      for (int64_t b = 0; b < K / QK_K; ++b) {
        xd[m * (K / QK_K) + b] = bl[b].d;
        for (int j = 0; j < QK_K; j += 32)
          lanes_i16<true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bl[b].qs + j)), ones16(), xr + b * QK_K + j);
        std::memcpy(bsums + m * (K / 16) + b * 16, bl[b].bsums, sizeof bl[b].bsums);
      }
    }
  }
}

// R activation rows (from m) x NW weight rows (from r of the panel), each (row, row) pair as
// quant_matmul.cpp computes it: per block the int32 lanes, converted, times dw x dx added into f32
// lanes, Q6_K's -32 offset subtracted in lane 0 first; the lanes summed at the end (plus 0, as
// there). Outputs y[(m + i) ldy + r + j].
template <DType T, int R, int NW>
void tile_lanes(Scratch& s, int64_t m, int r, int64_t K, float* y, int64_t ldy) {
  constexpr int B = T == DType::q6_K || T == DType::iq4_xs ? QK_K : QK;
  const int64_t nb = K / B;
  const int16_t* x16 = s.x16.as<int16_t>() + m * K;
  const float* xd = s.xd.as<float>() + m * nb;
  const int16_t* w16 = s.rows.as<int16_t>() + r * K;
  const float* wd = s.wd.as<float>() + r * nb;
  [[maybe_unused]] const int16_t* bsums = s.xg.as<int16_t>() + m * (K / 16);
  [[maybe_unused]] const int16_t* wsc = s.wsc.as<int16_t>() + r * nb * 16;
  // The pairs' block scales dw x dx, all blocks at once (the same f32 products as one at a time).
  float* sc = s.sct.as<float>();
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NW; ++j) {
      float* o = sc + (i * NW + j) * nb;
      int64_t b = 0;
      for (; b + 8 <= nb; b += 8)
        _mm256_storeu_ps(o + b, _mm256_mul_ps(_mm256_loadu_ps(wd + j * nb + b), _mm256_loadu_ps(xd + i * nb + b)));
      for (; b < nb; ++b) o[b] = wd[j * nb + b] * xd[i * nb + b];
    }
  __m256 acc[R][NW];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NW; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    for (int j = 0; j < NW; ++j) {
      __m256i is[R];
      for (int i = 0; i < R; ++i) is[i] = _mm256_setzero_si256();
      for (int g = 0; g < B / 32; ++g) {
        const int64_t k = b * B + 32 * g;
        const __m256i wa = _mm256_load_si256(reinterpret_cast<const __m256i*>(w16 + j * K + k));
        const __m256i wb = _mm256_load_si256(reinterpret_cast<const __m256i*>(w16 + j * K + k + 16));
        for (int i = 0; i < R; ++i) {
          const __m256i xa = _mm256_load_si256(reinterpret_cast<const __m256i*>(x16 + i * K + k));
          const __m256i xb = _mm256_load_si256(reinterpret_cast<const __m256i*>(x16 + i * K + k + 16));
          const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(wa, xa), _mm256_madd_epi16(wb, xb));
          is[i] = g == 0 ? p : _mm256_add_epi32(is[i], p);
        }
      }
      for (int i = 0; i < R; ++i) {
        __m256i v = is[i];
        if constexpr (T == DType::q6_K) {
          const __m256i scv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wsc + (j * nb + b) * 16));
          const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums + i * (K / 16) + b * 16));
          const int corr = hsum_i32_8(_mm256_madd_epi16(scv, bs));
          v = _mm256_sub_epi32(v, _mm256_setr_epi32(32 * corr, 0, 0, 0, 0, 0, 0, 0));
        }
        acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + (i * NW + j) * nb + b), _mm256_cvtepi32_ps(v), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NW; ++j) y[(m + i) * ldy + r + j] = hsum8(acc[i][j]) + 0.f;
}

// Weight rows n0 .. n0 + nrows (<= NP) unpacked: rows[r] the int16 values, wd[r][b] the block
// scales (Q6_K: wsc[r][b] the 16 scales).
template <DType T>
void unpack_rows(const uint8_t* w, size_t wrow, int64_t nrows, int64_t K, Scratch& s) {
  constexpr int B = T == DType::q6_K || T == DType::iq4_xs ? QK_K : QK;
  const int64_t nb = K / B;
  const size_t bb = row_bytes(T, B);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      unpack_block<T>(w + static_cast<size_t>(r) * wrow + static_cast<size_t>(b) * bb, s.rows.as<int16_t>() + r * K + b * B,
                      s.wd.as<float>()[r * nb + b], s.wsc.as<int16_t>() + (r * nb + b) * 16);
}

template <DType T, int R>
inline void tiles_lanes_m(Scratch& s, int64_t m, int nrows, int64_t K, float* y, int64_t ldy) {
  int r = 0;
  for (; r + 2 <= nrows; r += 2) tile_lanes<T, R, 2>(s, m, r, K, y, ldy);
  if (r < nrows) tile_lanes<T, R, 1>(s, m, r, K, y, ldy);
}

template <DType T>
void gemm_lanes(const uint8_t* xq, int64_t M, int64_t K, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int B = T == DType::q6_K || T == DType::iq4_xs ? QK_K : QK;
  // Activation rows per tile: 3 x 2 pairs (2 x 2 for the 256-value blocks, whose int32 sums stay
  // live across the block's groups).
  constexpr int MRL = B == QK ? 3 : 2;
  const int64_t nb = K / B;
  Scratch& s = scratch();
  need(s.x16, static_cast<size_t>(M * K) * sizeof(int16_t));
  need(s.xd, static_cast<size_t>(M * nb) * sizeof(float));
  need(s.xg, static_cast<size_t>(M * (K / 16)) * sizeof(int16_t) + 64);
  need(s.rows, static_cast<size_t>(NP * K) * sizeof(int16_t));
  need(s.wd, static_cast<size_t>(NP * nb) * sizeof(float));
  need(s.wsc, static_cast<size_t>(NP * nb * 16) * sizeof(int16_t) + 64);
  need(s.sct, static_cast<size_t>(3 * 2 * nb) * sizeof(float));
  widen_acts(dtype_info(T).act, xq, M, K, s.x16.as<int16_t>(), s.xd.as<float>(), s.xg.as<int16_t>());
  const size_t wrow = row_bytes(T, K);
  for (int64_t p = n0; p < n1; p += NP) {
    const int nrows = static_cast<int>(std::min<int64_t>(NP, n1 - p));
    unpack_rows<T>(w + static_cast<size_t>(p) * wrow, wrow, nrows, K, s);
    int64_t m = 0;
    for (; m + MRL <= M; m += MRL) tiles_lanes_m<T, MRL>(s, m, nrows, K, y + p, ldy);
    for (; m < M; ++m) tiles_lanes_m<T, 1>(s, m, nrows, K, y + p, ldy);
  }
}

// 8 x 8 transpose of int32 elements: in[i] row i -> out[j] element j of every row.
inline void transpose8(const __m256i* in, __m256i* out) {
  const __m256 v[8] = {_mm256_castsi256_ps(in[0]), _mm256_castsi256_ps(in[1]), _mm256_castsi256_ps(in[2]),
                       _mm256_castsi256_ps(in[3]), _mm256_castsi256_ps(in[4]), _mm256_castsi256_ps(in[5]),
                       _mm256_castsi256_ps(in[6]), _mm256_castsi256_ps(in[7])};
  const __m256 a0 = _mm256_unpacklo_ps(v[0], v[1]), a1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 a2 = _mm256_unpacklo_ps(v[2], v[3]), a3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 a4 = _mm256_unpacklo_ps(v[4], v[5]), a5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 a6 = _mm256_unpacklo_ps(v[6], v[7]), a7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xee);
  const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xee);
  const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xee);
  const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xee);
  out[0] = _mm256_castps_si256(_mm256_permute2f128_ps(b0, b4, 0x20));
  out[1] = _mm256_castps_si256(_mm256_permute2f128_ps(b1, b5, 0x20));
  out[2] = _mm256_castps_si256(_mm256_permute2f128_ps(b2, b6, 0x20));
  out[3] = _mm256_castps_si256(_mm256_permute2f128_ps(b3, b7, 0x20));
  out[4] = _mm256_castps_si256(_mm256_permute2f128_ps(b0, b4, 0x31));
  out[5] = _mm256_castps_si256(_mm256_permute2f128_ps(b1, b5, 0x31));
  out[6] = _mm256_castps_si256(_mm256_permute2f128_ps(b2, b6, 0x31));
  out[7] = _mm256_castps_si256(_mm256_permute2f128_ps(b3, b7, 0x31));
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

inline __m256i bcast32(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// ---------------------------------------------------------------------------------------------
// Q4_K bytes: the maddubs pair sums of a group of 32 added in int16 over its 8 steps of 4 k
// (|sum| <= 8 x 2 x 15 x 128), then one madd by the group's scale.

// Weight rows n0 .. n0 + nrows of a Q4_K matrix: wq[k4][v][i] = the 4 value bytes (k = 4 k4 ..
// 4 k4 + 3) of row 8 v + i; wsc[b][g][v][i] = group g's scale in both int16 halves.
void unpack_panel_k(const uint8_t* w, size_t wrow, int64_t nrows, int64_t K, Scratch& s) {
  const int64_t nb = K / QK_K;
  uint8_t* rows = s.rows.as<uint8_t>();
  float* wd = s.wd.as<float>();
  float* wdm = s.wdm.as<float>();
  int32_t* wm = s.wm.as<int32_t>();
  int32_t* wsc = s.wsc.as<int32_t>();
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
  int32_t* wq = s.ws.as<int32_t>();
  for (int v = 0; v < 2; ++v)
    for (int64_t k4 = 0; k4 < K / 4; k4 += 8) {
      __m256i in[8], out[8];
      for (int i = 0; i < 8; ++i)
        in[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + (8 * v + i) * K + 4 * k4));
      transpose8(in, out);
      for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(wq + ((k4 + j) * 2 + v) * 8), out[j]);
    }
}

// The q8_K rows' scales and group sums (xd [M][K / 256], xg [M][K / 32]).
void k_act_sums(const uint8_t* xq, int64_t M, int64_t K, float* xd, int16_t* xg) {
  const size_t rb = act_row_bytes(ActQuant::q8_K, K);
  for (int64_t m = 0; m < M; ++m) {
    const auto* bl = reinterpret_cast<const BlockQ8_K*>(xq + static_cast<size_t>(m) * rb);
    for (int64_t b = 0; b < K / QK_K; ++b) {
      xd[m * (K / QK_K) + b] = bl[b].d;
      for (int g = 0; g < 8; ++g)
        xg[m * (K / 32) + b * 8 + g] = static_cast<int16_t>(bl[b].bsums[2 * g] + bl[b].bsums[2 * g + 1]);
    }
  }
}

inline __m256i bcast_bytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// R activation rows (from m; q8_K rows of rb bytes at xq) against the unpacked Q4_K panel, in
// llama.cpp's order for its repacked Q4_K (ggml_gemm_q4_K_8x8_q8_K): per block the int32 sums
// times dw x dx into one f32 accumulator, the mins' sums times dmin x dx into another, subtracted
// at the end.
template <int R>
void tile_k(const Scratch& s, const uint8_t* xq, size_t rb, int64_t m, int64_t K, float* y, int64_t ldy, int nvalid) {
  const int64_t nb = K / QK_K;
  const float* xd = s.xd.as<float>() + m * nb;
  const int16_t* xg = s.xg.as<int16_t>() + m * (K / 32);
  const int32_t* wq = s.ws.as<int32_t>();
  const int32_t* wsc = s.wsc.as<int32_t>();
  const float* wd = s.wd.as<float>();
  const float* wdm = s.wdm.as<float>();
  const int32_t* wm = s.wm.as<int32_t>();
  const BlockQ8_K* xr[R];
  for (int i = 0; i < R; ++i) xr[i] = reinterpret_cast<const BlockQ8_K*>(xq + static_cast<size_t>(m + i) * rb);
  __m256 acc[R][2], accm[R][2];
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = accm[i][0] = accm[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i is[R][2];
    for (int i = 0; i < R; ++i) is[i][0] = is[i][1] = _mm256_setzero_si256();
    const int32_t* wb = wq + b * (QK_K / 4) * 16;
    for (int g = 0; g < 8; ++g)
      {
        __m256i s16[R][2];
        for (int i = 0; i < R; ++i) s16[i][0] = s16[i][1] = _mm256_setzero_si256();
        for (int st = 0; st < 8; ++st) {
          const int k4 = 8 * g + st;
          const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k4 * 16));
          const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k4 * 16 + 8));
          for (int i = 0; i < R; ++i) {
            const __m256i xv = bcast_bytes(xr[i][b].qs + 4 * k4);
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
        for (int i = 0; i < R; ++i) ms[i] = madd_acc(ms[i], mv, bcast32(xg + i * (K / 32) + b * 8 + 2 * j));
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

void gemm_q4_K(const uint8_t* xq, int64_t M, int64_t K, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int KR = 2;  // activation rows per register tile
  const int64_t nb = K / QK_K;
  Scratch& s = scratch();
  need(s.xd, static_cast<size_t>(M * nb) * sizeof(float));
  need(s.xg, static_cast<size_t>(M * (K / 32)) * sizeof(int16_t) + 64);
  need(s.rows, static_cast<size_t>(NP * K));
  need(s.ws, static_cast<size_t>(K * NP));
  need(s.wsc, static_cast<size_t>(nb * 8 * NP) * sizeof(int32_t));
  need(s.wd, static_cast<size_t>(nb * NP) * sizeof(float));
  need(s.wdm, static_cast<size_t>(nb * NP) * sizeof(float));
  need(s.wm, static_cast<size_t>(nb * 4 * NP) * sizeof(int32_t) + 64);
  k_act_sums(xq, M, K, s.xd.as<float>(), s.xg.as<int16_t>());
  const size_t wrow = row_bytes(DType::q4_K, K), rb = act_row_bytes(ActQuant::q8_K, K);
  for (int64_t p = n0; p < n1; p += NP) {
    const int nvalid = static_cast<int>(std::min<int64_t>(NP, n1 - p));
    unpack_panel_k(w + static_cast<size_t>(p) * wrow, wrow, nvalid, K, s);
    int64_t m = 0;
    for (; m + KR <= M; m += KR) tile_k<KR>(s, xq, rb, m, K, y + p, ldy, nvalid);
    if (M - m == 1) tile_k<1>(s, xq, rb, m, K, y + p, ldy, nvalid);
  }
}

}  // namespace

bool gemm_quant(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
                int64_t ldy) {
  const auto* x = static_cast<const uint8_t*>(xq);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (wt) {
    case DType::q8_0: gemm_lanes<DType::q8_0>(x, M, K, wb, n0, n1, y, ldy); return true;
    case DType::q4_0: gemm_lanes<DType::q4_0>(x, M, K, wb, n0, n1, y, ldy); return true;
    case DType::q5_0: gemm_lanes<DType::q5_0>(x, M, K, wb, n0, n1, y, ldy); return true;
    case DType::iq4_nl: gemm_lanes<DType::iq4_nl>(x, M, K, wb, n0, n1, y, ldy); return true;
    case DType::q4_K: gemm_q4_K(x, M, K, wb, n0, n1, y, ldy); return true;
    case DType::q6_K: gemm_lanes<DType::q6_K>(x, M, K, wb, n0, n1, y, ldy); return true;
    case DType::iq4_xs: gemm_lanes<DType::iq4_xs>(x, M, K, wb, n0, n1, y, ldy); return true;
    default: return false;
  }
}

}  // namespace lumen::cpu::LUMEN_ISA
