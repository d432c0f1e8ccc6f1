// kernelCheck's part for the block-quantized kernels of one ISA table (backend/cpu/isa/
// quant_matmul.cpp), on random valid blocks of every type generated here:
//  - dequantization (the table's row_to_f32) against a second scalar dequantizer written here from
//    the format description (docs: gguf-quant-formats), element for element;
//  - the activation quantization (q8_0, q8_1, q8_K) against core/quant_ref.cpp's reference, byte
//    for byte, on rows that include exact rounding ties and planted maxima of either sign;
//  - the packed dot products (matmul_quant: tiles of 1..16 rows, longer batches, cut row ranges;
//    matmul_quant_streams: the decode regions' four far-apart panel streams; Q4_K and Q8_0
//    repacked into panels: matmul_quant_panels against matmul_quant (Q4_K) or vec_dot (Q8_0) bit
//    for bit)
//    and the scalar reference's vec_dot against an f64 sum of the dequantized operands, relative
//    to the sum of |terms|;
//  - the whole quantized product against the f64 product with the unquantized activations, within
//    the bound the activation quantization implies: per element at most half a quantization step
//    plus the rounding of the block scale to f16, times |w|, summed.
#include "testing/quant_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/quant_ref.h"

namespace lumen {
namespace {

using namespace quant;

// A random f16 scale of magnitude in [2^-10, 2^-4), either sign (or positive only).
uint16_t rand_scale(std::mt19937& rng, bool positive = false) {
  std::uniform_real_distribution<float> mag(-10.f, -4.f);
  const float v = std::exp2(mag(rng)) * (positive || (rng() & 1) ? 1.f : -1.f);
  return f32_to_f16(v);
}

// `nb` random valid blocks of type t (every byte random, the scales finite f16).
std::vector<unsigned char> random_blocks(DType t, int64_t nb, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(t);
  std::vector<unsigned char> out(static_cast<size_t>(nb) * info.bytes);
  for (auto& b : out) b = static_cast<unsigned char>(rng());
  for (int64_t i = 0; i < nb; ++i) {
    unsigned char* p = out.data() + i * info.bytes;
    auto put = [&](size_t off, uint16_t h) { std::memcpy(p + off, &h, 2); };
    switch (t) {
      case DType::q8_0: case DType::q4_0: case DType::q5_0: put(0, rand_scale(rng)); break;
      case DType::q5_1: put(0, rand_scale(rng, true)); put(2, rand_scale(rng)); break;
      case DType::q4_K: case DType::q5_K: put(0, rand_scale(rng, true)); put(2, rand_scale(rng, true)); break;
      case DType::q6_K: put(208, rand_scale(rng)); break;
      case DType::iq4_nl: case DType::iq4_xs: put(0, rand_scale(rng)); break;
      default: break;
    }
  }
  return out;
}

// The second dequantizer: each type's formula as the format description states it.
float deq_element(DType t, const unsigned char* blk, int i) {
  auto h = [&](size_t off) { uint16_t v; std::memcpy(&v, blk + off, 2); return f16_to_f32(v); };
  switch (t) {
    case DType::q8_0: return h(0) * static_cast<float>(static_cast<int8_t>(blk[2 + i]));
    case DType::q4_0: {
      const int q = i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4;
      return static_cast<float>(q - 8) * h(0);
    }
    case DType::q5_0: case DType::q5_1: {
      const size_t qh_off = t == DType::q5_0 ? 2 : 4, qs_off = qh_off + 4;
      uint32_t qh;
      std::memcpy(&qh, blk + qh_off, 4);
      const int lo = i < 16 ? blk[qs_off + i] & 15 : blk[qs_off + i - 16] >> 4;
      const int q = lo | static_cast<int>(((qh >> i) & 1u) << 4);
      return t == DType::q5_0 ? static_cast<float>(q - 16) * h(0) : static_cast<float>(q) * h(0) + h(2);
    }
    case DType::q4_K: case DType::q5_K: {
      const int g = i / 64, l = i % 32, hi = (i % 64) >= 32;
      const unsigned char* s = blk + 4;
      const int j = 2 * g + hi;
      int sc, m;
      if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
      } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      }
      const unsigned char* qs = blk + (t == DType::q4_K ? 16 : 48) + 32 * g;
      int q = hi ? qs[l] >> 4 : qs[l] & 15;
      if (t == DType::q5_K && (blk[16 + l] & (1u << (2 * g + hi)))) q += 16;
      return h(0) * static_cast<float>(sc) * static_cast<float>(q) - h(2) * static_cast<float>(m);
    }
    case DType::q6_K: {
      const int half = i / 128, r = i % 128, l = r % 32, quarter = r / 32;
      const unsigned char* ql = blk + 64 * half;
      const unsigned char* qh = blk + 128 + 32 * half;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * half);
      const int low = quarter == 0 ? ql[l] & 15 : quarter == 1 ? ql[l + 32] & 15 : quarter == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
      const int q = (low | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
      return h(208) * static_cast<float>(sc[l / 16 + 2 * quarter]) * static_cast<float>(q);
    }
    case DType::iq4_nl: case DType::iq4_xs: {
      // The levels as the format description lists them (docs: gguf-quant-formats).
      static const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      const int g = t == DType::iq4_nl ? 0 : i / 32, l = i % 32;
      const unsigned char* qs = blk + (t == DType::iq4_nl ? 2 : 8) + 16 * g;
      const int q = l < 16 ? qs[l] & 15 : qs[l - 16] >> 4;
      if (t == DType::iq4_nl) return h(0) * static_cast<float>(levels[q]);
      uint16_t sh;
      std::memcpy(&sh, blk + 2, 2);
      const int ls = ((blk[4 + g / 2] >> (4 * (g % 2))) & 15) | (((sh >> (2 * g)) & 3) << 4);
      return h(0) * static_cast<float>(ls - 32) * static_cast<float>(levels[q]);
    }
    default: return 0.f;
  }
}

// An activation row: some zero blocks; in the other even blocks random values, a planted maximum
// 1.27 (negative where b % 4 == 2, so the q8_K sign convention is exercised) and exact rounding
// ties (x * 127 / amax = k + 0.5); the odd blocks random values at a scale of their own (so 8
// adjacent blocks' scales differ).
std::vector<float> activation_row(int64_t K, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(K));
  for (auto& v : x) v = u(rng);
  for (int64_t b = 0; b < K / 32; ++b) {
    float* blk = x.data() + b * 32;
    if (b % 7 == 3) { std::fill(blk, blk + 32, 0.f); continue; }
    if (b % 2) {  // a scale of the block's own (the kernels take 8 blocks' scales at once)
      for (int j = 0; j < 32; ++j) blk[j] *= 0.25f * static_cast<float>(1 + b % 5);
      continue;
    }
    blk[5] = b % 4 ? -1.27f : 1.27f;  // amax = 1.27: 127 / amax = 100
    blk[9] = 0.005f * 3;              // x * 100 = 1.5: a tie
    blk[11] = -0.025f;                // -2.5: a tie
  }
  return x;
}

// f64 dot of one weight row with one activation row, both dequantized; and the sum of |terms|.
void f64_dot(const float* w, const float* x, int64_t K, double& dot, double& mag) {
  dot = 0;
  mag = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double t = static_cast<double>(w[k]) * x[k];
    dot += t;
    mag += std::fabs(t);
  }
}

}  // namespace

Napi::Object check_quant_table(Napi::Env env, const cpu::Kernels& Kt) {
  std::mt19937 rng(11);
  auto obj = Napi::Object::New(env);
  const DType types[] = {DType::q8_0, DType::q4_0, DType::q5_0, DType::q5_1, DType::q4_K,
                         DType::q5_K, DType::q6_K, DType::iq4_nl, DType::iq4_xs};
  for (DType t : types) {
    const DTypeInfo& info = dtype_info(t);
    const ActQuant act = info.act;
    auto r = Napi::Object::New(env);
    // Dequantization against the formula, on 64 blocks.
    {
      const int64_t nb = 64, K = nb * info.block;
      const auto w = random_blocks(t, nb, rng);
      std::vector<float> got(static_cast<size_t>(K));
      Kt.row_to_f32(w.data(), t, 0, K, got.data());
      int64_t bad = 0;
      for (int64_t i = 0; i < K; ++i) {
        const float want = deq_element(t, w.data() + (i / info.block) * info.bytes, static_cast<int>(i % info.block));
        bad += !(got[static_cast<size_t>(i)] == want || std::fabs(got[static_cast<size_t>(i)] - want) <= 1e-6f * std::fabs(want));
      }
      r.Set("dequantElements", K);
      r.Set("dequantMismatches", bad);
    }
    // Activation quantization: the table's against the reference, byte for byte (the 32-value
    // activations also at K = 288: 9 blocks a row, so the scales' 8-block steps leave a tail).
    int64_t act_bytes = 0, act_mismatch = 0;
    std::vector<int64_t> act_ks = {256, 1024, 2816};
    if (act_block(act) == QK) act_ks.push_back(288);
    for (int64_t K : act_ks) {
      const int64_t M = 5;
      std::vector<float> x;
      for (int64_t m = 0; m < M; ++m) {
        const auto row = activation_row(K, rng);
        x.insert(x.end(), row.begin(), row.end());
      }
      const size_t rb = act_row_bytes(act, K);
      std::vector<unsigned char> a(rb * M), b(rb * M);
      Kt.quantize_act(act, x.data(), M, K, a.data());
      for (int64_t m = 0; m < M; ++m) quantize_row(act, x.data() + m * K, b.data() + m * rb, K);
      act_bytes += static_cast<int64_t>(a.size());
      for (size_t i = 0; i < a.size(); ++i) act_mismatch += a[i] != b[i];
    }
    r.Set("actBytes", act_bytes);
    r.Set("actMismatches", act_mismatch);
    // Dot products: matmul_quant in tiles of 1..16 rows, a prefill-sized batch, and cut ranges.
    double dot_err = 0, ref_err = 0, bound_ratio = 0;
    int64_t cases = 0, bound_violations = 0, batch_rows = 0, batch_mismatch = 0, ref_exact_rows = 0, ref_exact_mismatch = 0;
    int64_t panel_rows = 0, panel_mismatch = 0;
    int64_t act_panel_bytes = 0, act_panel_mismatch = 0;
    // The 32-value types also at K = 288: an odd number of blocks (Q8_0's panels end on a half pair).
    std::vector<int64_t> dot_ks = {256, 1024};
    if (info.block == QK) dot_ks.push_back(288);
    for (int64_t K : dot_ks) {
      // 60 rows: four whole panel streams whose last panel is partial; 71: four streams of one
      // panel each and a partial remainder panel apart.
      const int64_t N = K == 256 ? 60 : 71;
      const auto w = random_blocks(t, N * K / info.block, rng);
      std::vector<float> wf(static_cast<size_t>(N * K));
      Kt.row_to_f32(w.data(), t, 0, N * K, wf.data());
      const size_t wrow = row_bytes(t, K), rb = act_row_bytes(act, K);
      // Repacked into 16-row panels (the last one partial), where the table has them for t.
      const bool panels = Kt.packs_quant_panels(t);
      const int64_t P = (N + 15) / 16;
      std::vector<unsigned char> packed(panels ? static_cast<size_t>(P) * Kt.quant_panel_bytes(t, K) : 0);
      if (panels) {
        Kt.pack_quant_panels(t, w.data(), N, K, 0, 2, packed.data());
        Kt.pack_quant_panels(t, w.data(), N, K, 2, P, packed.data());
      }
      for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 40, 41}) {
        std::vector<float> x;
        for (int64_t m = 0; m < M; ++m) {
          const auto row = activation_row(K, rng);
          x.insert(x.end(), row.begin(), row.end());
        }
        std::vector<unsigned char> xq(rb * static_cast<size_t>(M));
        Kt.quantize_act(act, x.data(), M, K, xq.data());
        std::vector<float> xd(static_cast<size_t>(M * K));
        for (int64_t m = 0; m < M; ++m) {
          // The quantized activations' values: q * d per block.
          for (int64_t b = 0; b < K / act_block(act); ++b) {
            const unsigned char* blk = xq.data() + m * rb + b * act_block_bytes(act);
            float d;
            const int8_t* qs;
            if (act == ActQuant::q8_K) {
              std::memcpy(&d, blk, 4);
              qs = reinterpret_cast<const int8_t*>(blk + 4);
            } else {
              uint16_t h;
              std::memcpy(&h, blk, 2);
              d = f16_to_f32(h);
              qs = reinterpret_cast<const int8_t*>(blk + (act == ActQuant::q8_1 ? 4 : 2));
            }
            for (int j = 0; j < act_block(act); ++j) xd[static_cast<size_t>(m * K + b * act_block(act) + j)] = qs[j] * d;
          }
        }
        // Whole range, then the same rows in cut ranges (n0 > 0, ends inside a 16-row panel), and
        // for 1..3 rows as the decode regions read them: four far-apart panel streams, the
        // panels past the last whole quarter apart.
        for (int mode = 0; mode < 3; ++mode) {
          if (mode == 2 && M > 3) continue;
          std::vector<float> y(static_cast<size_t>(M * N), std::numeric_limits<float>::quiet_NaN());
          if (mode == 0)
            Kt.matmul_quant(xq.data(), M, K, w.data(), t, 0, N, y.data(), N);
          else if (mode == 1)
            for (int64_t n0 = 0; n0 < N; n0 += 11) Kt.matmul_quant(xq.data(), M, K, w.data(), t, n0, std::min(N, n0 + 11), y.data(), N);
          else {
            const int64_t P = (N + 15) / 16, Q = P / 4;
            Kt.matmul_quant_streams(xq.data(), M, K, w.data(), t, N, 0, Q, y.data(), N, Q);
            Kt.matmul_quant_streams(xq.data(), M, K, w.data(), t, N, 4 * Q, P, y.data(), N, 0);
          }
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double ref, mag;
              f64_dot(wf.data() + n * K, xd.data() + m * K, K, ref, mag);
              const double got = y[static_cast<size_t>(m * N + n)];
              dot_err = std::max(dot_err, std::isnan(got) ? 1.0 : std::fabs(got - ref) / std::max(mag, 1e-30));
              if (mode == 0 && m < 2) {
                const float sref = vec_dot(t, w.data() + n * wrow, xq.data() + m * rb, K);
                ref_err = std::max(ref_err, std::fabs(sref - ref) / std::max(mag, 1e-30));
                // Q4_K and Q6_K: the reference follows llama.cpp's order to the last operation
                // (quant_ref.cpp), so the kernels must give its result bit for bit.
                if (t == DType::q4_K || t == DType::q6_K) {
                  const float g = static_cast<float>(got);
                  ref_exact_rows += 1;
                  ref_exact_mismatch += std::memcmp(&g, &sref, 4) != 0;
                }
              }
              if (mode == 0) {
                // Against the unquantized activations: per block, |x^ - x| <= step * (0.5 + 127 * 2^-11)
                // (half a step, and the step's rounding to f16; q8_K keeps an f32 step), plus f32 sums.
                double exact, emag;
                f64_dot(wf.data() + n * K, x.data() + m * K, K, exact, emag);
                double bound = 1e-5 * (emag + mag);
                const int ab = act_block(act);
                for (int64_t b = 0; b < K / ab; ++b) {
                  float amax = 0;
                  double wabs = 0;
                  for (int j = 0; j < ab; ++j) {
                    amax = std::max(amax, std::fabs(x[static_cast<size_t>(m * K + b * ab + j)]));
                    wabs += std::fabs(wf[static_cast<size_t>(n * K + b * ab + j)]);
                  }
                  const double step = amax / 127.0;
                  bound += wabs * step * (act == ActQuant::q8_K ? 0.5 + 1e-6 : 0.5 + 127.0 / 2048.0);
                }
                const double e = std::fabs(got - exact);
                bound_violations += e > bound;
                bound_ratio = std::max(bound_ratio, e / bound);
              }
            }
          ++cases;
          // The same products from the panels (mode 1: one panel per call), bit for bit: Q4_K's as
          // the row tiles' (the same order), Q8_0's as the reference's vec_dot (per block one f32
          // fma; the row tiles keep llama.cpp's x86 lanes).
          if (panels) {
            std::vector<unsigned char> xa(Kt.panel_act_bytes(act, M, K));
            if (!xa.empty()) Kt.panel_act(act, xq.data(), M, K, xa.data());
            const void* xap = xa.empty() ? nullptr : xa.data();
            // The one-pass form the decode products take (quantize_act_panels): the same bytes.
            if (mode == 0) {
              std::vector<unsigned char> xq1(xq.size()), xa1(xa.size());
              Kt.quantize_act_panels(act, x.data(), M, K, xq1.data(), xa.empty() ? nullptr : xa1.data());
              std::vector<unsigned char> xr(xq.size());  // and the rows against the reference
              for (int64_t m = 0; m < M; ++m) quantize_row(act, x.data() + m * K, xr.data() + m * rb, K);
              act_panel_bytes += static_cast<int64_t>(xq1.size() + xa1.size());
              for (size_t i = 0; i < xq1.size(); ++i) act_panel_mismatch += (xq1[i] != xq[i]) + (xq1[i] != xr[i]);
              for (size_t i = 0; i < xa1.size(); ++i) act_panel_mismatch += xa1[i] != xa[i];
            }
            std::vector<float> yp(static_cast<size_t>(M * N), std::numeric_limits<float>::quiet_NaN());
            if (mode == 0)
              Kt.matmul_quant_panels(t, xq.data(), xap, M, K, packed.data(), N, 0, P, yp.data(), N, 0);
            else if (mode == 1)
              for (int64_t p = 0; p < P; ++p) Kt.matmul_quant_panels(t, xq.data(), xap, M, K, packed.data(), N, p, p + 1, yp.data(), N, 0);
            else {
              const int64_t Q = P / 4;
              Kt.matmul_quant_panels(t, xq.data(), xap, M, K, packed.data(), N, 0, Q, yp.data(), N, Q);
              Kt.matmul_quant_panels(t, xq.data(), xap, M, K, packed.data(), N, 4 * Q, P, yp.data(), N, 0);
            }
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                const size_t i = static_cast<size_t>(m * N + n);
                const float want = t == DType::q8_0 ? vec_dot(t, w.data() + n * wrow, xq.data() + m * rb, K) : y[i];
                panel_rows += 1;
                panel_mismatch += std::memcmp(&yp[i], &want, 4) != 0;
              }
            // The panels' rows read back (the embedding's lookup), where the table can.
            if (mode == 0 && M == 1 && Kt.quant_panel_row(t, nullptr, K, 0, nullptr)) {
              std::vector<float> row(static_cast<size_t>(K));
              for (int64_t n = 0; n < N; ++n) {
                Kt.quant_panel_row(t, packed.data(), K, n, row.data());
                for (int64_t k = 0; k < K; ++k) {
                  panel_rows += 1;
                  panel_mismatch += std::memcmp(&row[static_cast<size_t>(k)], &wf[static_cast<size_t>(n * K + k)], 4) != 0;
                }
              }
            }
          }
          // Prefill batches (more than 16 rows) against the same rows one at a time, bit for bit:
          // every type sums each (row, row) pair in the same order at every batch size (Q6_K's
          // prefill panels, quant_gemm.cpp, and its decode tiles both in vec_dot_q6_K_q8_K's order).
          if (mode == 0 && M > 16) {
            std::vector<float> y1(static_cast<size_t>(N));
            for (int64_t m = 0; m < M; ++m) {
              Kt.matmul_quant(xq.data() + m * rb, 1, K, w.data(), t, 0, N, y1.data(), N);
              for (int64_t n = 0; n < N; ++n) {
                float a = y[static_cast<size_t>(m * N + n)], b = y1[static_cast<size_t>(n)];
                uint32_t ua, ub;
                std::memcpy(&ua, &a, 4);
                std::memcpy(&ub, &b, 4);
                batch_rows += 1;
                batch_mismatch += ua != ub;
              }
            }
          }
        }
      }
    }
    r.Set("batchRows", batch_rows);
    r.Set("batchRowMismatches", batch_mismatch);
    r.Set("refExactRows", ref_exact_rows);
    r.Set("refExactMismatches", ref_exact_mismatch);
    r.Set("panelRows", panel_rows);
    r.Set("panelMismatches", panel_mismatch);
    r.Set("actPanelBytes", act_panel_bytes);
    r.Set("actPanelMismatches", act_panel_mismatch);
    r.Set("dotCases", cases);
    r.Set("dotMaxErr", dot_err);
    r.Set("refDotMaxErr", ref_err);
    r.Set("actBoundViolations", bound_violations);
    r.Set("actBoundMaxRatio", bound_ratio);
    obj.Set(info.name, r);
  }
  return obj;
}

}  // namespace lumen
