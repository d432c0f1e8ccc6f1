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

float max_value(const float* x, int64_t n) {
  // Four lanes' worth of running maxima (one chain of max latency per 4 vectors, not per element),
  // each lane as std::max(m, x) keeps it: x only when m < x, so NaN is never taken.
  vf m[4] = {vset1(-INFINITY), vset1(-INFINITY), vset1(-INFINITY), vset1(-INFINITY)};
  int64_t i = 0;
  for (; i + 4 * VW <= n; i += 4 * VW)
    for (int u = 0; u < 4; ++u) m[u] = vmax(vload(x + i + u * VW), m[u]);
  for (; i + VW <= n; i += VW) m[0] = vmax(vload(x + i), m[0]);
  alignas(64) float lanes[4 * VW];
  for (int u = 0; u < 4; ++u) vstore(lanes + u * VW, m[u]);
  float r = -INFINITY;
  for (float v : lanes) r = std::max(r, v);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
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
  // One pass (the logits row is read once: a decode step's picks read rows of ~1 MB that the head
  // just wrote): per lane the largest value and the index it was first seen at (a lane takes a
  // value only when strictly greater; indices as floats, exact below 2^24), and per lane the sum
  // of x - x, which is 0 for finite values and NaN once a NaN or infinity passed; then the largest
  // value over the lanes and the lowest index holding it, then the tail in order. As
  // argmax_scalar: the lowest index of a tie, and -1 when a value is not finite.
  if (n <= 0) return 0;
  if (!std::isfinite(x[0])) return -1;
  vf v0 = vset1(x[0]), v1 = v0, i0 = vzero(), i1 = i0, f0 = vzero(), f1 = vzero();
  int64_t i = 0;
  if (n < (int64_t{1} << 24)) {
    alignas(64) static constexpr float kLanes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    vf idx = vload(kLanes);
    const vf half = vset1(static_cast<float>(VW)), step = vset1(static_cast<float>(2 * VW));
    for (; i + 2 * VW <= n; i += 2 * VW) {
      const vf a = vload(x + i), b = vload(x + i + VW);
      i0 = vgt_select(a, v0, idx, i0);
      v0 = vgt_select(a, v0, a, v0);
      i1 = vgt_select(b, v1, vadd(idx, half), i1);
      v1 = vgt_select(b, v1, b, v1);
      f0 = vadd(f0, vsub(a, a));
      f1 = vadd(f1, vsub(b, b));
      idx = vadd(idx, step);
    }
  }
  alignas(64) float v[2 * VW], ix[2 * VW], fin[VW];
  vstore(v, v0);
  vstore(v + VW, v1);
  vstore(ix, i0);
  vstore(ix + VW, i1);
  vstore(fin, vadd(f0, f1));
  for (int l = 0; l < VW; ++l)
    if (fin[l] != 0.f) return -1;
  float best = x[0];
  int64_t at = 0;
  for (int l = 0; l < 2 * VW; ++l) {
    const auto li = static_cast<int64_t>(ix[l]);
    if (v[l] > best || (v[l] == best && li < at)) {
      best = v[l];
      at = li;
    }
  }
  for (; i < n; ++i) {
    if (!std::isfinite(x[i])) return -1;
    if (x[i] > best) {
      best = x[i];
      at = i;
    }
  }
  return static_cast<int32_t>(at);
}

}  // namespace lumen::cpu::LUMEN_ISA
