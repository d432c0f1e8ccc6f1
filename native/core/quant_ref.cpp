// Scalar reference code of the ggml block formats (see quant_ref.h): written from the format
// description, checked against llama.cpp's outputs by the parity tests.
#include "core/quant_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lumen::quant {
namespace {

inline float h2f(uint16_t h) { return f16_to_f32(h); }

// The 5th bits of a Q5_0 / Q5_1 block: bit j of qh is element j's, bit j + 16 element j + 16's.
inline uint32_t qh32(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// Round to nearest, ties to even (the default rounding mode; what llama.cpp's vroundps and its
// nearest_int compute).
inline int round_even(float v) { return static_cast<int>(std::nearbyint(v)); }

// The 64 signed values of half h of a Q6_K block, and their 4 scales, in element order.
void q6_half(const BlockQ6_K& b, int h, int8_t out[128]) {
  const uint8_t* ql = b.ql + 64 * h;
  const uint8_t* qh = b.qh + 32 * h;
  for (int l = 0; l < 32; ++l) {
    out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
    out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
    out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
    out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
  }
}

// The 256 unsigned 4- or 5-bit values of a Q4_K / Q5_K block in element order.
void k_values(const uint8_t* qs, const uint8_t* qh, uint8_t out[QK_K]) {
  for (int g = 0; g < 4; ++g) {
    const uint8_t* q = qs + 32 * g;
    for (int l = 0; l < 32; ++l) {
      out[64 * g + l] = static_cast<uint8_t>((q[l] & 0xF) + (qh && (qh[l] & (1u << (2 * g))) ? 16 : 0));
      out[64 * g + 32 + l] = static_cast<uint8_t>((q[l] >> 4) + (qh && (qh[l] & (2u << (2 * g))) ? 16 : 0));
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* y, int64_t k) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case DType::f32: std::memcpy(y, p, static_cast<size_t>(k) * 4); return;
    case DType::bf16:
    case DType::f16:
      for (int64_t i = 0; i < k; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        y[i] = t == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return;
    case DType::q8_0:
      for (int64_t i = 0; i < k / QK; ++i) {
        BlockQ8_0 b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int j = 0; j < QK; ++j) y[i * QK + j] = b.qs[j] * d;
      }
      return;
    case DType::q4_0:
      for (int64_t i = 0; i < k / QK; ++i) {
        BlockQ4_0 b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int j = 0; j < QK / 2; ++j) {
          y[i * QK + j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
          y[i * QK + j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
        }
      }
      return;
    case DType::q5_0:
    case DType::q5_1:
      for (int64_t i = 0; i < k / QK; ++i) {
        float d, m = 0.f;
        uint32_t qh;
        const uint8_t* qs;
        BlockQ5_0 b0;
        BlockQ5_1 b1;
        if (t == DType::q5_0) {
          std::memcpy(&b0, p + i * sizeof b0, sizeof b0);
          d = h2f(b0.d);
          qh = qh32(b0.qh);
          qs = b0.qs;
        } else {
          std::memcpy(&b1, p + i * sizeof b1, sizeof b1);
          d = h2f(b1.d);
          m = h2f(b1.m);
          qh = qh32(b1.qh);
          qs = b1.qs;
        }
        const int off = t == DType::q5_0 ? 16 : 0;
        for (int j = 0; j < QK / 2; ++j) {
          const int x0 = ((qs[j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10)) - off;
          const int x1 = ((qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10)) - off;
          y[i * QK + j] = static_cast<float>(x0) * d + m;
          y[i * QK + j + 16] = static_cast<float>(x1) * d + m;
        }
      }
      return;
    case DType::q4_K:
    case DType::q5_K:
      for (int64_t i = 0; i < k / QK_K; ++i) {
        uint8_t v[QK_K];
        float d, dmin;
        uint8_t scales[12];
        if (t == DType::q4_K) {
          BlockQ4_K b;
          std::memcpy(&b, p + i * sizeof b, sizeof b);
          d = h2f(b.d), dmin = h2f(b.dmin);
          std::memcpy(scales, b.scales, 12);
          k_values(b.qs, nullptr, v);
        } else {
          BlockQ5_K b;
          std::memcpy(&b, p + i * sizeof b, sizeof b);
          d = h2f(b.d), dmin = h2f(b.dmin);
          std::memcpy(scales, b.scales, 12);
          k_values(b.qs, b.qh, v);
        }
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          k_scale_min(j, scales, sc, m);
          const float d1 = d * sc, m1 = dmin * m;
          for (int l = 0; l < 32; ++l) y[i * QK_K + 32 * j + l] = d1 * v[32 * j + l] - m1;
        }
      }
      return;
    case DType::q6_K:
      for (int64_t i = 0; i < k / QK_K; ++i) {
        BlockQ6_K b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int h = 0; h < 2; ++h) {
          int8_t v[128];
          q6_half(b, h, v);
          for (int l = 0; l < 128; ++l) y[i * QK_K + 128 * h + l] = d * b.scales[8 * h + l / 16] * v[l];
        }
      }
      return;
    case DType::iq4_nl:
      for (int64_t i = 0; i < k / QK; ++i) {
        BlockIQ4_NL b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int j = 0; j < QK / 2; ++j) {
          y[i * QK + j] = d * kIQ4NL[b.qs[j] & 0xF];
          y[i * QK + j + 16] = d * kIQ4NL[b.qs[j] >> 4];
        }
      }
      return;
    case DType::iq4_xs:
      for (int64_t i = 0; i < k / QK_K; ++i) {
        BlockIQ4_XS b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int g = 0; g < 8; ++g) {
          const float dl = d * static_cast<float>(iq4_xs_scale(b, g));
          const uint8_t* qs = b.qs + 16 * g;
          for (int j = 0; j < 16; ++j) {
            y[i * QK_K + 32 * g + j] = dl * kIQ4NL[qs[j] & 0xF];
            y[i * QK_K + 32 * g + j + 16] = dl * kIQ4NL[qs[j] >> 4];
          }
        }
      }
      return;
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t k) {
  for (int64_t i = 0; i < k / QK; ++i, x += QK) {
    float amax = 0.f;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK; ++j) y[i].qs[j] = static_cast<int8_t>(round_even(x[j] * id));
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t k) {
  for (int64_t i = 0; i < k / QK; ++i, x += QK) {
    float amax = 0.f;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    y[i].d = f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
      const int q = round_even(x[j] * id);
      y[i].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    y[i].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t k) {
  for (int64_t i = 0; i < k / QK_K; ++i, x += QK_K) {
    float max = 0.f, amax = 0.f;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {  // the first element of the largest magnitude, with its sign
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.f) {
      y[i].d = 0.f;
      std::memset(y[i].qs, 0, sizeof y[i].qs);
      std::memset(y[i].bsums, 0, sizeof y[i].bsums);
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, round_even(iscale * x[j])));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.f / iscale;
  }
}

void quantize_row(ActQuant a, const float* x, void* y, int64_t k) {
  switch (a) {
    case ActQuant::q8_0: quantize_row_q8_0(x, static_cast<BlockQ8_0*>(y), k); return;
    case ActQuant::q8_1: quantize_row_q8_1(x, static_cast<BlockQ8_1*>(y), k); return;
    case ActQuant::q8_K: quantize_row_q8_K(x, static_cast<BlockQ8_K*>(y), k); return;
    case ActQuant::none: return;
  }
}

float vec_dot(DType t, const void* w, const void* xq, int64_t k) {
  const auto* p = static_cast<const unsigned char*>(w);
  float sum = 0.f;
  switch (t) {
    case DType::q8_0:
    case DType::q4_0:
    case DType::q5_0: {
      const auto* y = static_cast<const BlockQ8_0*>(xq);
      const int64_t nb = k / QK;
      for (int64_t i = 0; i < nb; ++i) {
        float v[QK];
        const size_t bb = static_cast<size_t>(dtype_info(t).bytes);
        // The weight block's integers: dequantize with d = 1 (exact: small integers).
        unsigned char blk[34];
        std::memcpy(blk, p + i * bb, bb);
        const uint16_t one = 0x3c00;  // 1.0 in f16
        std::memcpy(blk, &one, 2);
        dequantize_row(t, blk, v, QK);
        int sumi = 0;
        for (int j = 0; j < QK; ++j) sumi += static_cast<int>(v[j]) * y[i].qs[j];
        uint16_t dw;
        std::memcpy(&dw, p + i * bb, 2);
        sum = std::fma(static_cast<float>(sumi), h2f(dw) * h2f(y[i].d), sum);
      }
      return sum;
    }
    case DType::q5_1: {
      const auto* y = static_cast<const BlockQ8_1*>(xq);
      for (int64_t i = 0; i < k / QK; ++i) {
        BlockQ5_1 b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        const uint32_t qh = qh32(b.qh);
        int sumi = 0;
        for (int j = 0; j < QK / 2; ++j) {
          const int x0 = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10);
          const int x1 = (b.qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
          sumi += x0 * y[i].qs[j] + x1 * y[i].qs[j + 16];
        }
        sum += (h2f(b.d) * h2f(y[i].d)) * static_cast<float>(sumi) + h2f(b.m) * h2f(y[i].s);
      }
      return sum;
    }
    case DType::q4_K:
    case DType::q5_K: {
      // Q4_K in the order of llama.cpp's repacked Q4_K (ggml_gemv / ggml_gemm_q4_K_8x8_q8_K, what it
      // runs for Q4_K on x86): per block the exact integer sums, the scales' part into one f32 sum
      // and the mins' part into another, each fma(sum, dw * dx, acc), subtracted at the end. Q5_K
      // (vec_dot's order up to its 8 lanes) adds both per block.
      const auto* y = static_cast<const BlockQ8_K*>(xq);
      float acc = 0.f, accm = 0.f;
      for (int64_t i = 0; i < k / QK_K; ++i) {
        uint8_t v[QK_K];
        uint16_t dh, dmh;
        uint8_t scales[12];
        if (t == DType::q4_K) {
          BlockQ4_K b;
          std::memcpy(&b, p + i * sizeof b, sizeof b);
          dh = b.d, dmh = b.dmin;
          std::memcpy(scales, b.scales, 12);
          k_values(b.qs, nullptr, v);
        } else {
          BlockQ5_K b;
          std::memcpy(&b, p + i * sizeof b, sizeof b);
          dh = b.d, dmh = b.dmin;
          std::memcpy(scales, b.scales, 12);
          k_values(b.qs, b.qh, v);
        }
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          k_scale_min(j, scales, sc, m);
          int32_t dot = 0;
          for (int l = 0; l < 32; ++l) dot += v[32 * j + l] * y[i].qs[32 * j + l];
          isum += sc * dot;
          msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        if (t == DType::q4_K) {
          acc = std::fma(static_cast<float>(isum), h2f(dh) * y[i].d, acc);
          accm = std::fma(static_cast<float>(msum), h2f(dmh) * y[i].d, accm);
          continue;
        }
        const float d = y[i].d * h2f(dh), dmin = y[i].d * h2f(dmh);
        sum += d * static_cast<float>(isum) - dmin * static_cast<float>(msum);
      }
      return t == DType::q4_K ? acc - accm : sum;
    }
    case DType::q6_K: {
      // llama.cpp's vec_dot_q6_K_q8_K on x86 (AVX2, and AVX-512, which runs the same code): 8 int32
      // lanes, lane l holding bytes 4l .. 4l + 3 of each 32-byte chunk of the block times their
      // scales, minus 32 x (bsums[2l] sc[2l] + bsums[2l + 1] sc[2l + 1]); per block
      // acc[l] = fma(dx * dw, lane l, acc[l]); at the end the lanes summed as hsum_float_8 does.
      const auto* y = static_cast<const BlockQ8_K*>(xq);
      float acc[8] = {};
      for (int64_t i = 0; i < k / QK_K; ++i) {
        BlockQ6_K b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        int32_t lane[8] = {};
        for (int h = 0; h < 2; ++h) {
          int8_t v[128];
          q6_half(b, h, v);
          for (int e = 0; e < 128; ++e) {
            const int el = 128 * h + e;  // element (and q8 byte) index
            lane[(el % 32) / 4] += b.scales[el / 16] * ((v[e] + 32) * y[i].qs[el]);
          }
        }
        for (int l = 0; l < 8; ++l)
          lane[l] -= 32 * (y[i].bsums[2 * l] * b.scales[2 * l] + y[i].bsums[2 * l + 1] * b.scales[2 * l + 1]);
        const float d = y[i].d * h2f(b.d);
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lane[l]), acc[l]);
      }
      const float r[4] = {acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]};
      return (r[0] + r[2]) + (r[1] + r[3]);
    }
    case DType::iq4_nl: {
      const auto* y = static_cast<const BlockQ8_0*>(xq);
      for (int64_t i = 0; i < k / QK; ++i) {
        BlockIQ4_NL b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        int sumi = 0;
        for (int j = 0; j < QK / 2; ++j) sumi += y[i].qs[j] * kIQ4NL[b.qs[j] & 0xF] + y[i].qs[j + 16] * kIQ4NL[b.qs[j] >> 4];
        sum += (h2f(y[i].d) * h2f(b.d)) * static_cast<float>(sumi);
      }
      return sum;
    }
    case DType::iq4_xs: {
      // As ggml's x86 code: the group sums times their scale (ls - 32) added up in int32, one
      // float multiply per super-block.
      const auto* y = static_cast<const BlockQ8_K*>(xq);
      for (int64_t i = 0; i < k / QK_K; ++i) {
        BlockIQ4_XS b;
        std::memcpy(&b, p + i * sizeof b, sizeof b);
        int32_t isum = 0;
        for (int g = 0; g < 8; ++g) {
          const uint8_t* qs = b.qs + 16 * g;
          const int8_t* q8 = y[i].qs + 32 * g;
          int32_t dot = 0;
          for (int j = 0; j < 16; ++j) dot += q8[j] * kIQ4NL[qs[j] & 0xF] + q8[j + 16] * kIQ4NL[qs[j] >> 4];
          isum += iq4_xs_scale(b, g) * dot;
        }
        sum += (h2f(b.d) * y[i].d) * static_cast<float>(isum);
      }
      return sum;
    }
    case DType::f32:
    case DType::bf16:
    case DType::f16: return 0.f;  // not a quantized type: the float kernels apply
  }
  return sum;
}

}  // namespace lumen::quant
