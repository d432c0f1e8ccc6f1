// ggml's 256-value super-block formats Q4_K, Q5_K and Q6_K: quantizers that reproduce
// ggml-quants.c's reference path (`quantize_row_q4_K_ref` / `_q5_K_ref` over make_qkx2_quants,
// `quantize_row_q6_K_ref` over make_qx_quants; what `llama-quantize` runs without an importance
// matrix) bit for bit, and the matching dequantizers (`dequantize_row_q*_K`).
//
// Float arithmetic mirrors the C code's float32 evaluation: every intermediate the C code keeps in
// a `float` is rounded with Math.fround, in the C code's evaluation order (left to right; no
// contraction into FMAs, which the reference build does not use). nearest_int is the C code's
// 1.5·2^23 trick (round half to even). Block layouts: docs/quantization.md.
import { blockCount, getF16, setF16 } from './quantize.js';

export const QK_K = 256;
export const Q4_K_BLOCK_BYTES = 144; // f16 d; f16 dmin; u8 scales[12]; u8 qs[128]
export const Q5_K_BLOCK_BYTES = 176; // f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
export const Q6_K_BLOCK_BYTES = 210; // u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d

const fr = Math.fround;
const GROUP_MAX_EPS = fr(1e-15);
const F0_1 = fr(0.1);

/** ggml's nearest_int: round half to even through the float32 sum with 1.5·2^23 (|x| <= 2^22). */
function nearestInt(x: number): number {
  return fr(x + 12582912) - 12582912;
}

const checkSizes = (name: string, n: number, out: Uint8Array, blockBytes: number): number => blockCount(name, n, out, QK_K, blockBytes);

// Scratch shared by the quantizers (single-threaded JS).
const L = new Uint8Array(QK_K);
const Laux = new Uint8Array(32);
const weights = new Float32Array(32);
const scales = new Float32Array(16);
const mins = new Float32Array(8);
let theMin = 0;

/**
 * make_qkx2_quants over n = 32 values x[x0 ..] with weights: an affine (scale, min) fit searched
 * over nstep + 1 candidate scales; levels go to L[l0 ..], the min (negated) to `theMin`.
 */
function makeQkx2Quants(
  nmax: number, x: Float32Array, x0: number, w: Float32Array, l0: number, rmin: number, rdelta: number, nstep: number,
): number {
  const n = 32;
  let min = x[x0]!;
  let max = x[x0]!;
  let sumW = w[0]!;
  let sumX = fr(sumW * x[x0]!);
  for (let i = 1; i < n; i++) {
    const xi = x[x0 + i]!;
    if (xi < min) min = xi;
    if (xi > max) max = xi;
    const wi = w[i]!;
    sumW = fr(sumW + wi);
    sumX = fr(sumX + fr(wi * xi));
  }
  if (min > 0) min = 0;
  if (max === min) {
    for (let i = 0; i < n; i++) L[l0 + i] = 0;
    theMin = -min;
    return 0;
  }
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    const l = nearestInt(fr(iscale * fr(x[x0 + i]! - min)));
    const q = Math.max(0, Math.min(nmax, l));
    L[l0 + i] = q;
    const diff = fr(fr(fr(scale * q) + min) - x[x0 + i]!);
    bestError = fr(bestError + fr(w[i]! * fr(diff * diff)));
  }
  if (nstep < 1) {
    theMin = -min;
    return scale;
  }
  for (let is = 0; is <= nstep; is++) {
    // `min` may have moved to an accepted candidate's: the C code re-reads it here and below.
    iscale = fr(fr(fr(rmin + fr(rdelta * is)) + nmax) / fr(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[x0 + i]!;
      const l = Math.max(0, Math.min(nmax, nearestInt(fr(iscale * fr(xi - min)))));
      Laux[i] = l;
      const wl = fr(w[i]! * l);
      sumL = fr(sumL + wl);
      sumL2 = fr(sumL2 + fr(wl * l));
      sumXL = fr(sumXL + fr(wl * xi));
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let thisScale = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let thisMin = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fr(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        const diff = fr(fr(fr(thisScale * Laux[i]!) + thisMin) - x[x0 + i]!);
        curError = fr(curError + fr(w[i]! * fr(diff * diff)));
      }
      if (curError < bestError) {
        for (let i = 0; i < n; i++) L[l0 + i] = Laux[i]!;
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  theMin = -min;
  return scale;
}

/** Lq: int8 levels (0 .. 2·nmax - 1 after the offset) for make_qx_quants. */
const Lq = new Int8Array(QK_K);

/**
 * make_qx_quants with rmse_type 1 and no importance weights over n values x[x0 ..]: a symmetric
 * scale searched over 19 candidates, weighted by x²; levels + nmax go to Lq[l0 ..].
 */
function makeQxQuants(n: number, nmax: number, x: Float32Array, x0: number, l0: number): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[x0 + i]!);
    if (ax > amax) {
      amax = ax;
      max = x[x0 + i]!;
    }
  }
  if (amax < GROUP_MAX_EPS) {
    for (let i = 0; i < n; i++) Lq[l0 + i] = 0;
    return 0;
  }
  let iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[x0 + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * xi))));
    Lq[l0 + i] = l + nmax;
    const w = fr(xi * xi);
    sumlx = fr(sumlx + fr(fr(w * xi) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  let scale = suml2 ? fr(sumlx / suml2) : 0;
  let best = fr(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(-fr(nmax + fr(F0_1 * is)) / max);
    sumlx = 0;
    suml2 = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[x0 + i]!;
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * xi))));
      const w = fr(xi * xi);
      sumlx = fr(sumlx + fr(fr(w * xi) * l));
      suml2 = fr(suml2 + fr(fr(w * l) * l));
    }
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      for (let i = 0; i < n; i++) {
        Lq[l0 + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * x[x0 + i]!))));
      }
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

/** The 6-bit (scale, min) pair j of a Q4_K / Q5_K block's 12 scale bytes (get_scale_min_k4). */
export function scaleMinK4(j: number, q: Uint8Array, at: number): [number, number] {
  if (j < 4) return [q[at + j]! & 63, q[at + j + 4]! & 63];
  return [(q[at + j + 4]! & 0xf) | ((q[at + j - 4]! >> 6) << 4), (q[at + j + 4]! >> 4) | ((q[at + j]! >> 6) << 4)];
}

/**
 * The shared part of Q4_K and Q5_K: per 32-value sub-block an affine fit, scales and mins as
 * 6-bit fractions of the block maxima, then the levels requantized against the stored scales.
 * Writes d, dmin and the scale bytes at out[o ..]; leaves the levels in L.
 */
function quantizeKBlock(x: Float32Array, base: number, out: Uint8Array, o: number, nmax: number, rmin: number, nstep: number): void {
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) {
      const v = x[base + 32 * j + l]!;
      sumX2 = fr(sumX2 + fr(v * v));
    }
    const avX = fr(Math.sqrt(fr(sumX2 / 32)));
    for (let l = 0; l < 32; l++) weights[l] = avX + Math.abs(x[base + 32 * j + l]!);
    scales[j] = makeQkx2Quants(nmax, x, base + 32 * j, weights, 32 * j, rmin, F0_1, nstep);
    mins[j] = theMin;
    if (scales[j]! > maxScale) maxScale = scales[j]!;
    if (mins[j]! > maxMin) maxMin = mins[j]!;
  }
  const invScale = maxScale > 0 ? fr(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? fr(63 / maxMin) : 0;
  const sc = o + 4;
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(fr(invScale * scales[j]!)) & 0xff);
    const lm = Math.min(63, nearestInt(fr(invMin * mins[j]!)) & 0xff);
    if (j < 4) {
      out[sc + j] = ls;
      out[sc + j + 4] = lm;
    } else {
      out[sc + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      out[sc + j - 4] |= (ls >> 4) << 6;
      out[sc + j] |= (lm >> 4) << 6;
    }
  }
  setF16(out, o, fr(maxScale / 63));
  setF16(out, o + 2, fr(maxMin / 63));
  const d16 = getF16(out, o);
  const dmin16 = getF16(out, o + 2);
  for (let j = 0; j < 8; j++) {
    const [s, m] = scaleMinK4(j, out, sc);
    const d = fr(d16 * s);
    if (!d) continue;
    const dm = fr(dmin16 * m);
    for (let ii = 0; ii < 32; ii++) {
      const l = nearestInt(fr(fr(x[base + 32 * j + ii]! + dm) / d));
      L[32 * j + ii] = Math.max(0, Math.min(nmax, l));
    }
  }
}

/** Q4_K (`quantize_row_q4_K_ref`). */
export function quantizeQ4_K(src: Float32Array, out: Uint8Array): void {
  const nb = checkSizes('Q4_K', src.length, out, Q4_K_BLOCK_BYTES);
  for (let i = 0; i < nb; i++) {
    const o = i * Q4_K_BLOCK_BYTES;
    quantizeKBlock(src, i * QK_K, out, o, 15, -1, 20);
    let q = o + 16;
    for (let j = 0; j < QK_K; j += 64) {
      for (let l = 0; l < 32; l++) out[q + l] = L[j + l]! | (L[j + l + 32]! << 4);
      q += 32;
    }
  }
}

/** Q5_K (`quantize_row_q5_K_ref`). */
export function quantizeQ5_K(src: Float32Array, out: Uint8Array): void {
  const nb = checkSizes('Q5_K', src.length, out, Q5_K_BLOCK_BYTES);
  for (let i = 0; i < nb; i++) {
    const o = i * Q5_K_BLOCK_BYTES;
    quantizeKBlock(src, i * QK_K, out, o, 31, -0.5, 15);
    const qh = o + 16;
    let ql = o + 48;
    out.fill(0, qh, qh + 32);
    let m1 = 1;
    let m2 = 2;
    for (let n = 0; n < QK_K; n += 64) {
      for (let j = 0; j < 32; j++) {
        let l1 = L[n + j]!;
        if (l1 > 15) { l1 -= 16; out[qh + j] |= m1; }
        let l2 = L[n + j + 32]!;
        if (l2 > 15) { l2 -= 16; out[qh + j] |= m2; }
        out[ql + j] = l1 | (l2 << 4);
      }
      m1 <<= 2;
      m2 <<= 2;
      ql += 32;
    }
  }
}

/** Q6_K (`quantize_row_q6_K_ref`). */
export function quantizeQ6_K(src: Float32Array, out: Uint8Array): void {
  const nb = checkSizes('Q6_K', src.length, out, Q6_K_BLOCK_BYTES);
  for (let i = 0; i < nb; i++) {
    const base = i * QK_K;
    const o = i * Q6_K_BLOCK_BYTES;
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let ib = 0; ib < 16; ib++) {
      const scale = makeQxQuants(16, 32, src, base + 16 * ib, 16 * ib);
      scales[ib] = scale;
      if (Math.abs(scale) > maxAbsScale) {
        maxAbsScale = Math.abs(scale);
        maxScale = scale;
      }
    }
    if (maxAbsScale < GROUP_MAX_EPS) {
      out.fill(0, o, o + Q6_K_BLOCK_BYTES);
      continue;
    }
    const iscale = fr(-128 / maxScale);
    setF16(out, o + 208, fr(1 / iscale));
    const d16 = getF16(out, o + 208);
    for (let ib = 0; ib < 16; ib++) out[o + 192 + ib] = Math.min(127, nearestInt(fr(iscale * scales[ib]!))) & 0xff;
    for (let j = 0; j < 16; j++) {
      const d = fr(d16 * ((out[o + 192 + j]! << 24) >> 24));
      if (!d) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(src[base + 16 * j + ii]! / d));
        Lq[16 * j + ii] = Math.max(-32, Math.min(31, l)) + 32;
      }
    }
    let ql = o;
    let qh = o + 128;
    for (let j = 0; j < QK_K; j += 128) {
      for (let l = 0; l < 32; l++) {
        const a = Lq[j + l]!, b = Lq[j + l + 32]!, c = Lq[j + l + 64]!, e = Lq[j + l + 96]!;
        out[ql + l] = (a & 0xf) | ((c & 0xf) << 4);
        out[ql + l + 32] = (b & 0xf) | ((e & 0xf) << 4);
        out[qh + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
      }
      ql += 64;
      qh += 32;
    }
  }
}

/** `dequantize_row_q4_K` / `_q5_K` (with the fifth bits when `five`). */
function dequantizeQ45K(src: Uint8Array, n: number, five: boolean): Float32Array {
  const out = new Float32Array(n);
  const bb = five ? Q5_K_BLOCK_BYTES : Q4_K_BLOCK_BYTES;
  for (let i = 0; i < n / QK_K; i++) {
    const o = i * bb;
    const d = getF16(src, o);
    const min = getF16(src, o + 2);
    const qh = o + 16;
    let q = five ? o + 48 : o + 16;
    let y = i * QK_K;
    let u1 = 1;
    let u2 = 2;
    for (let j = 0, is = 0; j < QK_K; j += 64, is += 2) {
      const [s1, m1] = scaleMinK4(is, src, o + 4);
      const [s2, m2] = scaleMinK4(is + 1, src, o + 4);
      const d1 = fr(d * s1), mm1 = fr(min * m1);
      const d2 = fr(d * s2), mm2 = fr(min * m2);
      for (let l = 0; l < 32; l++) out[y++] = fr(d1 * ((src[q + l]! & 0xf) + (five && src[qh + l]! & u1 ? 16 : 0))) - mm1;
      for (let l = 0; l < 32; l++) out[y++] = fr(d2 * ((src[q + l]! >> 4) + (five && src[qh + l]! & u2 ? 16 : 0))) - mm2;
      q += 32;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
  return out;
}

export function dequantizeQ4_K(src: Uint8Array, n: number): Float32Array {
  return dequantizeQ45K(src, n, false);
}

export function dequantizeQ5_K(src: Uint8Array, n: number): Float32Array {
  return dequantizeQ45K(src, n, true);
}

/** `dequantize_row_q6_K`: y = d·scale·(q - 32), q from 4 low bits in ql and 2 high bits in qh. */
export function dequantizeQ6_K(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n / QK_K; i++) {
    const o = i * Q6_K_BLOCK_BYTES;
    const d = getF16(src, o + 208);
    let ql = o;
    let qh = o + 128;
    let sc = o + 192;
    let y = i * QK_K;
    const s = (k: number) => (src[sc + k]! << 24) >> 24;
    for (let n0 = 0; n0 < QK_K; n0 += 128) {
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const h = src[qh + l]!;
        const q1 = ((src[ql + l]! & 0xf) | ((h & 3) << 4)) - 32;
        const q2 = ((src[ql + l + 32]! & 0xf) | (((h >> 2) & 3) << 4)) - 32;
        const q3 = ((src[ql + l]! >> 4) | (((h >> 4) & 3) << 4)) - 32;
        const q4 = ((src[ql + l + 32]! >> 4) | (((h >> 6) & 3) << 4)) - 32;
        out[y + l] = fr(d * s(is)) * q1;
        out[y + l + 32] = fr(d * s(is + 2)) * q2;
        out[y + l + 64] = fr(d * s(is + 4)) * q3;
        out[y + l + 96] = fr(d * s(is + 6)) * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
  return out;
}
