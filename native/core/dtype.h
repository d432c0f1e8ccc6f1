#pragma once
// Element types of weights: one table of their geometry (elements and bytes per block; plain
// types are blocks of one), the activation quantization each quantized type's dot products take
// (as llama.cpp's CPU backend: ggml-cpu's vec_dot_type), and the scalar conversions between
// f32, bf16 and f16 (round-to-nearest-even). Block layouts: core/quant_ref.h.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lumen {

enum class DType : uint8_t { f32, bf16, f16, q8_0, q4_0, q5_0, q5_1, q4_K, q5_K, q6_K, iq4_nl, iq4_xs };

// How activations are quantized for a weight type's integer dot products.
enum class ActQuant : uint8_t { none, q8_0, q8_1, q8_K };

struct DTypeInfo {
  DType type;
  const char* name;  // as GGUF / the manifest names it
  int block;         // elements per block
  int bytes;         // bytes per block
  ActQuant act;
};

inline constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "F32", 1, 4, ActQuant::none},       {DType::bf16, "BF16", 1, 2, ActQuant::none},
    {DType::f16, "F16", 1, 2, ActQuant::none},       {DType::q8_0, "Q8_0", 32, 34, ActQuant::q8_0},
    {DType::q4_0, "Q4_0", 32, 18, ActQuant::q8_0},   {DType::q5_0, "Q5_0", 32, 22, ActQuant::q8_0},
    {DType::q5_1, "Q5_1", 32, 24, ActQuant::q8_1},   {DType::q4_K, "Q4_K", 256, 144, ActQuant::q8_K},
    {DType::q5_K, "Q5_K", 256, 176, ActQuant::q8_K}, {DType::q6_K, "Q6_K", 256, 210, ActQuant::q8_K},
    {DType::iq4_nl, "IQ4_NL", 32, 18, ActQuant::q8_0}, {DType::iq4_xs, "IQ4_XS", 256, 136, ActQuant::q8_K},
};

inline const DTypeInfo& dtype_info(DType t) { return kDTypes[static_cast<int>(t)]; }
inline bool is_quant(DType t) { return dtype_info(t).block > 1; }
// Bytes of one element of a plain type (f32, bf16, f16); 0 for block types.
inline size_t dtype_size(DType t) { return is_quant(t) ? 0 : static_cast<size_t>(dtype_info(t).bytes); }
// Bytes of a row of `cols` elements (a multiple of the block for block types).
inline size_t row_bytes(DType t, int64_t cols) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(cols / i.block) * static_cast<size_t>(i.bytes);
}
// The type of a manifest name (F32, BF16, ..., Q6_K, IQ4_NL, IQ4_XS); false when unknown.
inline bool dtype_from_name(const char* s, DType& out) {
  for (const DTypeInfo& i : kDTypes)
    if (std::strcmp(i.name, s) == 0) {
      out = i.type;
      return true;
    }
  return false;
}

// Lower-case name (f32, bf16, f16, q8_0, q4_k, ...), as the engine info reports it.
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::q8_0: return "q8_0";
    case DType::q4_0: return "q4_0";
    case DType::q5_0: return "q5_0";
    case DType::q5_1: return "q5_1";
    case DType::q4_K: return "q4_k";
    case DType::q5_K: return "q5_k";
    case DType::q6_K: return "q6_k";
    case DType::iq4_nl: return "iq4_nl";
    case DType::iq4_xs: return "iq4_xs";
  }
  return "?";
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) { man <<= 1; --exp; }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f32 -> f16 bits, round to nearest even (as F16C's vcvtps2ph with rounding 0), subnormals kept,
// overflow to infinity, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t exp = (u >> 23) & 0xffu;
  uint32_t man = u & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    const int shift = 14 - e;
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rest = man & ((1u << shift) - 1);
    uint32_t h = man >> shift;
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (man >> 13);
  const uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still right
  return static_cast<uint16_t>(sign | h);
}

}  // namespace lumen
