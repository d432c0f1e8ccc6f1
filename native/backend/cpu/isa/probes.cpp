// Machine probes for one ISA (probeMachine, the roofline limits): a streaming sum read as several
// side-by-side streams, and a register-only multiply-add burn. Not model kernels: their own table.
#include "backend/cpu/isa/simd.h"
#include "backend/cpu/probes.h"
#if defined(__AVX512BF16__)
#include "backend/cpu/isa/amx.h"
#endif

namespace lumen::cpu::LUMEN_ISA {
namespace {

// S contiguous parts of x read side by side: one read stream per part. A core keeps more lines in
// flight over several streams than over one, and the weight kernels read 4-8 panels side by side,
// so the probe must too. The loop must be as lean as the weight kernels' (one instruction per
// vector, accumulators in registers), or it reads slower than the decode kernel and puts the limit
// too low (figures: docs/performance.md, "Notes moved from the code"). U lines per stream per pass
// keep 4+ independent add chains.
template <int S>
float stream_sum_s(const float* x, int64_t n) {
  constexpr int U = S >= 4 ? 1 : 4 / S;
  const int64_t per = n / S / (U * VW) * (U * VW);
  const float* p[S];
  vf a[S * U];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) p[s] = x + s * per;
#pragma GCC unroll 8
  for (int j = 0; j < S * U; ++j) a[j] = vzero();
  for (int64_t i = 0; i < per; i += U * VW) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) a[s * U + u] = vadd(a[s * U + u], vload(p[s] + i + u * VW));
  }
  float sum = 0;
  for (int j = 0; j < S * U; ++j) sum += vsum(a[j]);
  for (int64_t i = S * per; i < n; ++i) sum += x[i];
  return sum;
}

float stream_sum(const float* x, int64_t n, int streams) {
  switch (streams) {
    case 8: return stream_sum_s<8>(x, n);
    case 4: return stream_sum_s<4>(x, n);
    case 2: return stream_sum_s<2>(x, n);
    default: return stream_sum_s<1>(x, n);
  }
}

double fma_burn(int64_t iters) {
#if defined(__AVX512BF16__)
  // 12 independent vdpbf16ps chains: each does 16 lanes x 2 multiply-adds = 64 FLOPs.
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x3f003f00);
  for (int64_t it = 0; it < iters; ++it)
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)a, (__m512bh)b);
  float s = 0;
  for (int j = 0; j < 12; ++j) s += _mm512_reduce_add_ps(acc[j]);
  volatile float sink = s;
  (void)sink;
  return static_cast<double>(iters) * 12 * 64;
#else
  vf acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = vset1(static_cast<float>(j));
  const vf a = vset1(1.0001f), b = vset1(0.9999f);
  for (int64_t it = 0; it < iters; ++it)
    for (int j = 0; j < 12; ++j) acc[j] = vfma(acc[j], a, b);
  float s = 0;
  for (int j = 0; j < 12; ++j) s += vsum(acc[j]);
  volatile float sink = s;
  (void)sink;
  return static_cast<double>(iters) * 12 * VW * 2;
#endif
}

#if defined(__AVX512BF16__)
// 4 independent chains of 16 x 16 x 32 bf16 tile products (the widest the tiles take), on tiles
// loaded once: 16384 FLOPs each, on varied values in [-1, 1) as weights and activations are (tiles
// of zeros read the same rate here).
double tile_burn(int64_t iters) {
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  uint32_t r = 12345;
  // A bf16 of sign, exponent 119..126 (2^-8 .. 2^-1) and 7 mantissa bits from a linear congruence.
  auto next = [&r] {
    r = r * 1664525u + 1013904223u;
    return static_cast<uint16_t>((r >> 31) << 15 | (119u + (r >> 28 & 7)) << 7 | (r >> 21 & 0x7f));
  };
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = next();
    b[i] = next();
  }
  amx::TileConfig c;
  for (int t = 0; t < 6; ++t) c.set(t, 16, 64);
  amx::configure(c);
  LUMEN_TILE_LOAD(4, a, 64);
  LUMEN_TILE_LOAD(5, b, 64);
  LUMEN_TILE_ZERO(0);
  LUMEN_TILE_ZERO(1);
  LUMEN_TILE_ZERO(2);
  LUMEN_TILE_ZERO(3);
  for (int64_t it = 0; it < iters; ++it) {
    LUMEN_TILE_DPBF16PS(0, 4, 5);
    LUMEN_TILE_DPBF16PS(1, 4, 5);
    LUMEN_TILE_DPBF16PS(2, 4, 5);
    LUMEN_TILE_DPBF16PS(3, 4, 5);
  }
  amx::release();
  return static_cast<double>(iters) * 4 * 16384;
}
#endif

}  // namespace

extern const Probes probe_table;
const Probes probe_table = {
#if defined(__AVX512F__)
    "avx512",
#else
    "avx2",
#endif
    stream_sum, fma_burn,
#if defined(__AVX512BF16__)
    tile_burn,
#else
    nullptr,
#endif
};

}  // namespace lumen::cpu::LUMEN_ISA
