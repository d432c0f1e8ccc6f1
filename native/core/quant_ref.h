#pragma once
// The ggml block formats (byte layouts as llama.cpp's ggml-common.h defines them; geometry in
// core/dtype.h) and their scalar reference code: dequantization of every weight type, the
// activation quantizations (q8_0, q8_1, q8_K) exactly as llama.cpp's x86 CPU backend computes
// them, and the per-row dot products as integer block sums scaled per block. The vectorised
// kernels (backend/cpu/isa/quant_matmul.cpp) must give the same quantized activations bit for
// bit and the same dot products up to the order of the float additions; kernelCheck holds them
// to that.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace lumen::quant {

constexpr int QK = 32;    // elements of a q8_0 / q4_0 / q5_0 / q5_1 / q8_1 block
constexpr int QK_K = 256; // elements of a K-quant block

#pragma pack(push, 1)
struct BlockQ8_0 { uint16_t d; int8_t qs[QK]; };
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[QK]; };  // s = d * sum(qs)
struct BlockQ4_0 { uint16_t d; uint8_t qs[QK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
// y = d * kIQ4NL[nibble]; the nibbles as Q4_0's (low: elements 0..15, high: 16..31).
struct BlockIQ4_NL { uint16_t d; uint8_t qs[QK / 2]; };
// 8 groups of 32, each as an IQ4_NL block with scale d * (ls - 32), ls a 6-bit value: low 4 bits
// in nibble g % 2 of scales_l[g / 2], high 2 bits at bits 2g, 2g + 1 of scales_h.
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
#pragma pack(pop)

// The 16 non-linear levels of IQ4_NL / IQ4_XS (ggml-common.h: kvalues_iq4nl).
inline constexpr int8_t kIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 6-bit scale of group g (0..7) of an IQ4_XS block, minus 32 (-32..31).
inline int iq4_xs_scale(const BlockIQ4_XS& b, int g) {
  return (((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b.scales_h >> (2 * g)) & 3) << 4)) - 32;
}

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 &&
              sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292 && sizeof(BlockIQ4_NL) == 18 &&
              sizeof(BlockIQ4_XS) == 136);

// Elements and bytes of an activation block.
inline int act_block(ActQuant a) { return a == ActQuant::q8_K ? QK_K : QK; }
inline size_t act_block_bytes(ActQuant a) {
  return a == ActQuant::q8_K ? sizeof(BlockQ8_K) : a == ActQuant::q8_1 ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0);
}
// Bytes of one row of `k` activations quantized as `a` (k a multiple of its block).
inline size_t act_row_bytes(ActQuant a, int64_t k) { return static_cast<size_t>(k / act_block(a)) * act_block_bytes(a); }

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block.
inline void k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// `k` weights of type t (a row, or several) -> f32. t may be any type of core/dtype.h.
void dequantize_row(DType t, const void* src, float* dst, int64_t k);

// Activations -> blocks, as llama.cpp's x86 quantize_row_q8_0 / _q8_1 / _q8_K (k a multiple of
// the block).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t k);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t k);
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t k);
void quantize_row(ActQuant a, const float* x, void* y, int64_t k);

// One weight row of type t (k elements) against one activation row quantized as dtype_info(t).act:
// per block the integer sums, scaled as llama.cpp scales them, added up in order (Q8_0 / Q4_0 /
// Q5_0: sum = fma(sumi, dw dx, sum) per block, the order of the Q8_0 panels on both tables).
float vec_dot(DType t, const void* w, const void* xq, int64_t k);

}  // namespace lumen::quant
