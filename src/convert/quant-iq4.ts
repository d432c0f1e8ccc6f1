// ggml's 4-bit non-linear formats IQ4_NL (32-value blocks) and IQ4_XS (256-value super-blocks of
// eight 32-value groups with 6-bit scales): quantizers that reproduce what `llama-quantize` runs
// without an importance matrix (ggml_quantize_chunk -> quantize_iq4_nl / quantize_iq4_xs with
// quant_weights == NULL, both over quantize_row_iq4_nl_impl with ntry = 7: weights x², a first fit
// from the largest value, then 15 more candidate scales (itry - 127) / max kept when they raise
// (Σwqx)² / Σwq²) bit for bit, and the matching dequantizers (`dequantize_row_iq4_nl` / `_xs`).
//
// Float arithmetic mirrors the C code's float32 evaluation: every intermediate the C code keeps in
// a `float` is rounded with Math.fround, in the C code's evaluation order (no FMA contraction, which
// the reference build does not use). Block layouts: docs/quantization.md.
import { blockCount, getF16, setF16 } from './quantize.js';

export const IQ4_NL_BLOCK_BYTES = 18; // f16 d; u8 qs[16]
export const IQ4_XS_BLOCK_BYTES = 136; // f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]

/** kvalues_iq4nl: the 16 levels a 4-bit index selects. */
export const IQ4_LEVELS: readonly number[] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

const fr = Math.fround;
const GROUP_MAX_EPS = fr(1e-15);
const NTRY = 7;

/** ggml's nearest_int: round half to even through the float32 sum with 1.5·2^23 (|x| <= 2^22). */
function nearestInt(x: number): number {
  return fr(x + 12582912) - 12582912;
}

/** best_index_int8(16, kvalues_iq4nl, x): the nearest level's index (ties to the upper one). */
function bestIndex(x: number): number {
  const v = IQ4_LEVELS;
  if (x <= v[0]!) return 0;
  if (x >= v[15]!) return 15;
  let ml = 0;
  let mu = 15;
  while (mu - ml > 1) {
    const mav = (ml + mu) >> 1;
    if (x < v[mav]!) mu = mav;
    else ml = mav;
  }
  return fr(x - v[mu - 1]!) < fr(v[mu]! - x) ? mu - 1 : mu;
}

// Scratch (single-threaded JS).
const L = new Uint8Array(256);
const weight = new Float32Array(32);
const scales = new Float32Array(8);

/**
 * quantize_row_iq4_nl_impl(superBlock, 32, x + base, ...) without quant weights, ntry = 7: the
 * group scales into `scales`, the levels into L, and the block's bytes at out[o ..]: for IQ4_NL
 * (superBlock 32) f16 d and the 16 index bytes; for IQ4_XS (256) f16 d, scales_h, scales_l, qs.
 */
function quantizeBlock(superBlock: number, x: Float32Array, base: number, out: Uint8Array, o: number): void {
  const nGroups = superBlock / 32;
  const qsAt = nGroups > 1 ? o + 8 : o + 2;
  out.fill(0, o, o + (nGroups > 1 ? IQ4_XS_BLOCK_BYTES : IQ4_NL_BLOCK_BYTES));
  let maxScale = 0;
  let amaxScale = 0;
  const values = IQ4_LEVELS;
  for (let ib = 0; ib < nGroups; ib++) {
    const xb = base + 32 * ib;
    for (let j = 0; j < 32; j++) weight[j] = fr(x[xb + j]! * x[xb + j]!);
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 32; j++) {
      const ax = Math.abs(x[xb + j]!);
      if (ax > amax) {
        amax = ax;
        max = x[xb + j]!;
      }
    }
    if (amax < GROUP_MAX_EPS) {
      scales[ib] = 0;
      continue;
    }
    let d = fr(-max / values[0]!);
    let id = fr(1 / d);
    let sumqx = 0;
    let sumq2 = 0;
    for (let j = 0; j < 32; j++) {
      const xj = x[xb + j]!;
      const l = bestIndex(fr(id * xj));
      L[32 * ib + j] = l;
      const q = values[l]!;
      const wq = fr(weight[j]! * q);
      sumqx = fr(sumqx + fr(wq * xj));
      sumq2 = fr(sumq2 + fr(wq * q));
    }
    d = sumq2 > 0 ? fr(sumqx / sumq2) : 0;
    let best = fr(d * sumqx);
    for (let itry = -NTRY; itry <= NTRY; itry++) {
      id = fr((itry + values[0]!) / max);
      sumqx = 0;
      sumq2 = 0;
      for (let j = 0; j < 32; j++) {
        const xj = x[xb + j]!;
        const q = values[bestIndex(fr(id * xj))]!;
        const wq = fr(weight[j]! * q);
        sumqx = fr(sumqx + fr(wq * xj));
        sumq2 = fr(sumq2 + fr(wq * q));
      }
      if (sumq2 > 0 && fr(sumqx * sumqx) > fr(best * sumq2)) {
        d = fr(sumqx / sumq2);
        best = fr(d * sumqx);
      }
    }
    scales[ib] = d;
    const absD = Math.abs(d);
    if (absD > amaxScale) {
      amaxScale = absD;
      maxScale = d;
    }
  }

  if (nGroups > 1) {
    const d = fr(-maxScale / 32);
    setF16(out, o, d);
    const id = d ? fr(1 / d) : 0;
    let scalesH = 0;
    for (let ib = 0; ib < nGroups; ib++) {
      let l = nearestInt(fr(id * scales[ib]!));
      l = Math.max(-32, Math.min(31, l));
      const dl = fr(d * l);
      const idl = dl ? fr(1 / dl) : 0;
      const xb = base + 32 * ib;
      for (let j = 0; j < 32; j++) L[32 * ib + j] = bestIndex(fr(idl * x[xb + j]!));
      l += 32;
      const lo = l & 0xf;
      const hi = l >> 4;
      if (ib % 2 === 0) out[o + 4 + (ib >> 1)] = lo;
      else out[o + 4 + (ib >> 1)] |= lo << 4;
      scalesH |= hi << (2 * (ib % 8));
    }
    out[o + 2] = scalesH & 0xff;
    out[o + 3] = scalesH >>> 8;
  } else {
    setF16(out, o, scales[0]!);
    const id = scales[0] ? fr(1 / scales[0]!) : 0;
    for (let j = 0; j < 32; j++) L[j] = bestIndex(fr(id * x[base + j]!));
  }
  for (let i = 0; i < nGroups; i++) {
    for (let j = 0; j < 16; j++) out[qsAt + 16 * i + j] = L[32 * i + j]! | (L[32 * i + 16 + j]! << 4);
  }
}

/** IQ4_NL (`quantize_iq4_nl`, no importance matrix). */
export function quantizeIQ4_NL(src: Float32Array, out: Uint8Array): void {
  const nb = blockCount('IQ4_NL', src.length, out, 32, IQ4_NL_BLOCK_BYTES);
  for (let b = 0; b < nb; b++) quantizeBlock(32, src, 32 * b, out, b * IQ4_NL_BLOCK_BYTES);
}

/** IQ4_XS (`quantize_iq4_xs`, no importance matrix). */
export function quantizeIQ4_XS(src: Float32Array, out: Uint8Array): void {
  const nb = blockCount('IQ4_XS', src.length, out, 256, IQ4_XS_BLOCK_BYTES);
  for (let b = 0; b < nb; b++) quantizeBlock(256, src, 256 * b, out, b * IQ4_XS_BLOCK_BYTES);
}

/** `dequantize_row_iq4_nl`: y[j] = d·T[qs[j] & 15], y[j + 16] = d·T[qs[j] >> 4]. */
export function dequantizeIQ4_NL(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let b = 0; b < n / 32; b++) {
    const o = b * IQ4_NL_BLOCK_BYTES;
    const d = getF16(src, o);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j]!;
      out[32 * b + j] = d * IQ4_LEVELS[q & 15]!;
      out[32 * b + 16 + j] = d * IQ4_LEVELS[q >> 4]!;
    }
  }
  return out;
}

/** `dequantize_row_iq4_xs`: group g has scale dl = d·(ls - 32), ls = scales_l nibble | scales_h bits << 4. */
export function dequantizeIQ4_XS(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let b = 0; b < n / 256; b++) {
    const o = b * IQ4_XS_BLOCK_BYTES;
    const d = getF16(src, o);
    const sh = src[o + 2]! | (src[o + 3]! << 8);
    for (let g = 0; g < 8; g++) {
      const ls = ((src[o + 4 + (g >> 1)]! >> (4 * (g % 2))) & 0xf) | (((sh >> (2 * g)) & 3) << 4);
      const dl = fr(d * (ls - 32));
      const qs = o + 8 + 16 * g;
      for (let j = 0; j < 16; j++) {
        const q = src[qs + j]!;
        out[256 * b + 32 * g + j] = dl * IQ4_LEVELS[q & 15]!;
        out[256 * b + 32 * g + 16 + j] = dl * IQ4_LEVELS[q >> 4]!;
      }
    }
  }
  return out;
}
