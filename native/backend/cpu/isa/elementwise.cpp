// Elementwise kernels and reductions for one ISA: dot / axpy / scale, embedding rows, SwiGLU, the
// sigmoid gate, the gated RMSNorm, the softmax numerators and argmax, on a vectorised exp.
#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/isa/simd.h"
#include "core/quant_ref.h"

namespace lumen::cpu::LUMEN_ISA {

float dot(const float* a, const float* b, int64_t n) {
  vf acc0 = vzero(), acc1 = vzero();
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    acc0 = vfma(vload(a + i), vload(b + i), acc0);
    acc1 = vfma(vload(a + i + VW), vload(b + i + VW), acc1);
  }
  for (; i + VW <= n; i += VW) acc0 = vfma(vload(a + i), vload(b + i), acc0);
  float s = vsum(acc0) + vsum(acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const vf av = vset1(a);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(y + i, vfma(av, vload(x + i), vload(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void scale(float* y, float a, int64_t n) {
  const vf av = vset1(a);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(y + i, vmul(av, vload(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

float sumsq(const float* x, int64_t n) { return dot(x, x, n); }

void row_to_f32(const void* w, DType wt, int64_t row, int64_t cols, float* out) {
  if (is_quant(wt) || wt == DType::f16) {
    lumen::quant::dequantize_row(wt, static_cast<const unsigned char*>(w) + static_cast<size_t>(row) * row_bytes(wt, cols), out, cols);
  } else if (wt == DType::bf16) {
    const uint16_t* p = static_cast<const uint16_t*>(w) + row * cols;
    for (int64_t i = 0; i < cols; ++i) out[i] = bf16f(p[i]);
  } else {
    std::memcpy(out, static_cast<const float*>(w) + row * cols, static_cast<size_t>(cols) * 4);
  }
}

void mul_sigmoid(float* o, const float* gate, int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW)
    vstore(o + i, vdiv(vload(o + i), vadd(vset1(1.f), vexp(vsub(vzero(), vload(gate + i))))));
  for (; i < n; ++i) o[i] /= 1.f + std::exp(-gate[i]);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(out + i, vmul(vsilu(vload(gate + i)), vload(up + i)));
  for (; i < n; ++i) out[i] = silu1(gate[i]) * up[i];
}

void gated_rmsnorm(float* o, const float* z, const float* w, int64_t n, float eps) {
  const float inv = 1.f / std::sqrt(dot(o, o, n) / static_cast<float>(n) + eps);
  const vf iv = vset1(inv);
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstore(o + i, vmul(vmul(vmul(vload(o + i), iv), vload(w + i)), vsilu(vload(z + i))));
  for (; i < n; ++i) o[i] = o[i] * inv * w[i] * silu1(z[i]);
}

float exp_shift_sum(float* x, int64_t n, float shift) {
  const vf sh = vset1(shift);
  vf acc = vzero();
  int64_t i = 0;
  for (; i + VW <= n; i += VW) {
    const vf e = vexp(vsub(vload(x + i), sh));
    vstore(x + i, e);
    acc = vadd(acc, e);
  }
  float s = vsum(acc);
  for (; i < n; ++i) s += x[i] = std::exp(x[i] - shift);
  return s;
}

namespace {
// Per lane the largest value so far and the index it was first seen at (a lane keeps its first
// index of a tie: it takes a value only when strictly greater, and NaN never is).
#if defined(__AVX512F__)
struct ArgLanes {
  __m512 v;
  __m512i i;
};
inline ArgLanes arg_start(float x0) { return {_mm512_set1_ps(x0), _mm512_setzero_si512()}; }
inline void arg_step(ArgLanes& a, const float* x, __m512i idx) {
  const __m512 v = _mm512_loadu_ps(x);
  const __mmask16 gt = _mm512_cmp_ps_mask(v, a.v, _CMP_GT_OQ);
  a.v = _mm512_mask_mov_ps(a.v, gt, v);
  a.i = _mm512_mask_mov_epi32(a.i, gt, idx);
}
inline __m512i arg_lanes_from(int64_t i) { return _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(i)), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)); }
inline __m512i arg_add(__m512i i, int d) { return _mm512_add_epi32(i, _mm512_set1_epi32(d)); }
inline void arg_store(const ArgLanes& a, float* v, int32_t* i) {
  _mm512_storeu_ps(v, a.v);
  _mm512_storeu_si512(i, a.i);
}
#else
struct ArgLanes {
  __m256 v;
  __m256i i;
};
inline ArgLanes arg_start(float x0) { return {_mm256_set1_ps(x0), _mm256_setzero_si256()}; }
inline void arg_step(ArgLanes& a, const float* x, __m256i idx) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256 gt = _mm256_cmp_ps(v, a.v, _CMP_GT_OQ);
  a.v = _mm256_blendv_ps(a.v, v, gt);
  a.i = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a.i), _mm256_castsi256_ps(idx), gt));
}
inline __m256i arg_lanes_from(int64_t i) { return _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
inline __m256i arg_add(__m256i i, int d) { return _mm256_add_epi32(i, _mm256_set1_epi32(d)); }
inline void arg_store(const ArgLanes& a, float* v, int32_t* i) {
  _mm256_storeu_ps(v, a.v);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(i), a.i);
}
#endif
}  // namespace

int32_t argmax(const float* x, int64_t n) {
  // One pass (the logits row is read once: a decode step's picks read rows of ~1 MB that the head
  // just wrote): per lane the first index of its largest value, then the largest value over the
  // lanes and the lowest index holding it, then the tail in order. As argmax_scalar: the lowest
  // index of a tie, and NaN never wins unless it is x[0] (then every lane keeps x[0]).
  if (n <= 0) return 0;
  if (x[0] != x[0]) return 0;
  ArgLanes a0 = arg_start(x[0]), a1 = a0;
  int64_t i = 0;
  if (n >= 2 * VW && n <= 0x7fffffff) {
    auto idx = arg_lanes_from(0);
    for (; i + 2 * VW <= n; i += 2 * VW) {
      arg_step(a0, x + i, idx);
      arg_step(a1, x + i + VW, arg_add(idx, VW));
      idx = arg_add(idx, 2 * VW);
    }
  }
  alignas(64) float v[2 * VW];
  alignas(64) int32_t ix[2 * VW];
  arg_store(a0, v, ix);
  arg_store(a1, v + VW, ix + VW);
  float best = x[0];
  int64_t at = 0;
  for (int l = 0; l < 2 * VW; ++l)
    if (v[l] > best || (v[l] == best && ix[l] < at)) {
      best = v[l];
      at = ix[l];
    }
  for (; i < n; ++i)
    if (x[i] > best) {
      best = x[i];
      at = i;
    }
  return static_cast<int32_t>(at);
}

}  // namespace lumen::cpu::LUMEN_ISA
