// ggml's 32-value block formats Q8_0, Q4_0, Q5_0 and Q5_1: quantizers that reproduce
// ggml-quants.c's reference path (`quantize_row_*_ref`, which `llama-quantize` runs when no
// importance matrix is given) bit for bit, and the matching dequantizers (`dequantize_row_*`).
//
// Float arithmetic mirrors the C code's float32 evaluation: every intermediate result that C keeps
// in a `float` is rounded with Math.fround (exact emulation: each operation on two floats computed
// in double and rounded once to float is the correctly rounded float result). Block layouts
// (little-endian, no padding): docs/quantization.md.
import { blockCount, getF16, setF16 } from './quantize.js';

export const QK_LEGACY = 32;
export const Q8_0_BLOCK_BYTES = 34; // f16 d; int8 qs[32]
export const Q4_0_BLOCK_BYTES = 18; // f16 d; u8 qs[16]
export const Q5_0_BLOCK_BYTES = 22; // f16 d; u8 qh[4]; u8 qs[16]
export const Q5_1_BLOCK_BYTES = 24; // f16 d; f16 m; u8 qh[4]; u8 qs[16]

const fr = Math.fround;
const FLT_MAX = 3.4028234663852886e38;

const checkSizes = (name: string, n: number, out: Uint8Array, blockBytes: number): number => blockCount(name, n, out, QK_LEGACY, blockBytes);

/** Q8_0 (`quantize_row_q8_0_ref`): d = max|x| / 127, q = roundf(x / d). */
export function quantizeQ8_0(src: Float32Array, out: Uint8Array): void {
  const nb = checkSizes('Q8_0', src.length, out, Q8_0_BLOCK_BYTES);
  for (let b = 0; b < nb; b++) {
    const base = b * QK_LEGACY;
    let amax = 0;
    for (let j = 0; j < QK_LEGACY; j++) amax = Math.max(amax, Math.abs(src[base + j]!));
    const d = fr(amax / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    const o = b * Q8_0_BLOCK_BYTES;
    setF16(out, o, d);
    for (let j = 0; j < QK_LEGACY; j++) {
      const v = fr(src[base + j]! * id);
      // roundf: half away from zero; v ± 0.5 is exact in double and |v| <= 127.
      out[o + 2 + j] = (v < 0 ? -Math.floor(0.5 - v) : Math.floor(v + 0.5)) & 0xff;
    }
  }
}

/** `dequantize_row_q8_0`: y = q·d. */
export function dequantizeQ8_0(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let b = 0; b < n / QK_LEGACY; b++) {
    const o = b * Q8_0_BLOCK_BYTES;
    const d = getF16(src, o);
    for (let j = 0; j < QK_LEGACY; j++) out[b * QK_LEGACY + j] = ((src[o + 2 + j]! << 24) >> 24) * d;
  }
  return out;
}

/** The signed value of largest magnitude in a block (the first such, as the C loops keep it). */
function signedAbsMax(src: Float32Array, base: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < QK_LEGACY; j++) {
    const v = src[base + j]!;
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return max;
}

/** Q4_0 (`quantize_row_q4_0_ref`): d = max / -8, q = min(15, (int8)(x/d + 8.5)). */
export function quantizeQ4_0(src: Float32Array, out: Uint8Array): void {
  const nb = checkSizes('Q4_0', src.length, out, Q4_0_BLOCK_BYTES);
  for (let b = 0; b < nb; b++) {
    const base = b * QK_LEGACY;
    const d = fr(signedAbsMax(src, base) / -8);
    const id = d ? fr(1 / d) : 0;
    const o = b * Q4_0_BLOCK_BYTES;
    setF16(out, o, d);
    for (let j = 0; j < 16; j++) {
      const x0 = fr(src[base + j]! * id);
      const x1 = fr(src[base + 16 + j]! * id);
      const xi0 = Math.min(15, Math.trunc(fr(x0 + 8.5)));
      const xi1 = Math.min(15, Math.trunc(fr(x1 + 8.5)));
      out[o + 2 + j] = xi0 | (xi1 << 4);
    }
  }
}

/** `dequantize_row_q4_0`: y[j] = ((qs[j] & 15) - 8)·d, y[j + 16] = ((qs[j] >> 4) - 8)·d. */
export function dequantizeQ4_0(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let b = 0; b < n / QK_LEGACY; b++) {
    const o = b * Q4_0_BLOCK_BYTES;
    const d = getF16(src, o);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j]!;
      out[b * QK_LEGACY + j] = ((q & 15) - 8) * d;
      out[b * QK_LEGACY + 16 + j] = ((q >> 4) - 8) * d;
    }
  }
  return out;
}

/** Q5_0 (`quantize_row_q5_0_ref`): d = max / -16, q = min(31, (int8)(x/d + 16.5)), fifth bits in qh. */
export function quantizeQ5_0(src: Float32Array, out: Uint8Array): void {
  const nb = checkSizes('Q5_0', src.length, out, Q5_0_BLOCK_BYTES);
  for (let b = 0; b < nb; b++) {
    const base = b * QK_LEGACY;
    const d = fr(signedAbsMax(src, base) / -16);
    const id = d ? fr(1 / d) : 0;
    const o = b * Q5_0_BLOCK_BYTES;
    setF16(out, o, d);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const x0 = fr(src[base + j]! * id);
      const x1 = fr(src[base + 16 + j]! * id);
      const xi0 = Math.min(31, Math.trunc(fr(x0 + 16.5)));
      const xi1 = Math.min(31, Math.trunc(fr(x1 + 16.5)));
      out[o + 6 + j] = (xi0 & 15) | ((xi1 & 15) << 4);
      qh |= ((xi0 & 0x10) >>> 4) << j;
      qh |= ((xi1 & 0x10) >>> 4) << (j + 16);
    }
    writeU32(out, o + 2, qh);
  }
}

/** `dequantize_row_q5_0`: y = (q - 16)·d with q's fifth bit from qh. */
export function dequantizeQ5_0(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let b = 0; b < n / QK_LEGACY; b++) {
    const o = b * Q5_0_BLOCK_BYTES;
    const d = getF16(src, o);
    const qh = readU32(src, o + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 6 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[b * QK_LEGACY + j] = (((q & 15) | h0) - 16) * d;
      out[b * QK_LEGACY + 16 + j] = (((q >> 4) | h1) - 16) * d;
    }
  }
  return out;
}

/** Q5_1 (`quantize_row_q5_1_ref`): d = (max - min) / 31, m = min, q = (uint8)((x - min)/d + 0.5). */
export function quantizeQ5_1(src: Float32Array, out: Uint8Array): void {
  const nb = checkSizes('Q5_1', src.length, out, Q5_1_BLOCK_BYTES);
  for (let b = 0; b < nb; b++) {
    const base = b * QK_LEGACY;
    let min = FLT_MAX;
    let max = -FLT_MAX;
    for (let j = 0; j < QK_LEGACY; j++) {
      const v = src[base + j]!;
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const d = fr(fr(max - min) / 31);
    const id = d ? fr(1 / d) : 0;
    const o = b * Q5_1_BLOCK_BYTES;
    setF16(out, o, d);
    setF16(out, o + 2, min);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const x0 = fr(fr(src[base + j]! - min) * id);
      const x1 = fr(fr(src[base + 16 + j]! - min) * id);
      const xi0 = Math.trunc(fr(x0 + 0.5)) & 0xff;
      const xi1 = Math.trunc(fr(x1 + 0.5)) & 0xff;
      out[o + 8 + j] = (xi0 & 15) | ((xi1 & 15) << 4);
      qh |= ((xi0 & 0x10) >>> 4) << j;
      qh |= ((xi1 & 0x10) >>> 4) << (j + 16);
    }
    writeU32(out, o + 4, qh);
  }
}

/** `dequantize_row_q5_1`: y = q·d + m. */
export function dequantizeQ5_1(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let b = 0; b < n / QK_LEGACY; b++) {
    const o = b * Q5_1_BLOCK_BYTES;
    const d = getF16(src, o);
    const m = getF16(src, o + 2);
    const qh = readU32(src, o + 4);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 8 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[b * QK_LEGACY + j] = fr(((q & 15) | h0) * d) + m;
      out[b * QK_LEGACY + 16 + j] = fr(((q >> 4) | h1) * d) + m;
    }
  }
  return out;
}

function writeU32(out: Uint8Array, at: number, v: number): void {
  out[at] = v & 0xff;
  out[at + 1] = (v >>> 8) & 0xff;
  out[at + 2] = (v >>> 16) & 0xff;
  out[at + 3] = (v >>> 24) & 0xff;
}

function readU32(src: Uint8Array, at: number): number {
  return (src[at]! | (src[at + 1]! << 8) | (src[at + 2]! << 16) | (src[at + 3]! << 24)) >>> 0;
}
