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

int32_t argmax(const float* x, int64_t n) {
  // Pass 1: the maximum (max(x, acc) keeps acc when x is NaN); pass 2: its first index. x[0]
  // seeds the maximum, as in the scalar version (so a NaN there is returned, like there).
  if (n <= 0) return 0;
  vf m0 = vset1(x[0]), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    m0 = vmax(vload(x + i), m0);
    m1 = vmax(vload(x + i + VW), m1);
  }
  alignas(64) float lanes[2 * VW];
  vstore(lanes, m0);
  vstore(lanes + VW, m1);
  float mx = x[0];
  for (int l = 0; l < 2 * VW; ++l) mx = lanes[l] > mx ? lanes[l] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  if (!(x[0] < mx)) return 0;  // x[0] is the maximum (or NaN)
  const vf mv = vset1(mx);
  int64_t j = 0;
  for (; j + VW <= n; j += VW)
    if (const unsigned m = veq_mask(vload(x + j), mv)) return static_cast<int32_t>(j + __builtin_ctz(m));
  for (; j < n; ++j)
    if (x[j] == mx) return static_cast<int32_t>(j);
  return 0;
}

}  // namespace lumen::cpu::LUMEN_ISA
