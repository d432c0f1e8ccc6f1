// Element encodings used by the GGUF writer: bf16 / f16 <-> f32 and ggml's Q8_0 block format.
// Everything works on whole rows held in typed arrays; callers stream rows in chunks.

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** Q8_0: blocks of 32 weights, each an f16 scale followed by 32 int8 values (34 bytes). */
export const Q8_0_BLOCK = 32;
export const Q8_0_BLOCK_BYTES = 2 + Q8_0_BLOCK;

/** bf16 bits -> f32 (exact). */
export function bf16ToF32(bits: number): number {
  u32Scratch[0] = (bits & 0xffff) << 16;
  return f32Scratch[0]!;
}

/** f32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet). */
export function f32ToBf16(x: number): number {
  f32Scratch[0] = x;
  const u = u32Scratch[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  const rounded = u + 0x7fff + ((u >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

/** f16 bits -> f32 (exact). */
export function f16ToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** f32 -> f16 bits, round to nearest even, overflow to infinity, subnormals kept. */
export function f32ToF16(x: number): number {
  f32Scratch[0] = x;
  return f32BitsToF16(u32Scratch[0]!);
}

/** f32 bit pattern -> f16 bits (see f32ToF16). */
export function f32BitsToF16(u: number): number {
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  let mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal half (or zero): shift the implicit-one mantissa right, rounding to nearest even.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let h = mant >>> shift;
    if (rest > half || (rest === half && (h & 1))) h += 1;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h += 1; // may carry into the exponent: still correct
  return sign | h;
}

/** Decode `n` source elements of the given dtype from `src` (little-endian bytes) into `dst`. */
export function decodeToF32(dtype: 'F32' | 'F16' | 'BF16', src: Uint8Array, dst: Float32Array, n: number): void {
  if (dtype === 'F32') {
    if ((src.byteOffset & 3) === 0) {
      dst.set(new Float32Array(src.buffer, src.byteOffset, n));
    } else {
      const dv = new DataView(src.buffer, src.byteOffset, n * 4);
      for (let i = 0; i < n; i++) dst[i] = dv.getFloat32(i * 4, true);
    }
    return;
  }
  // Little-endian host assumed for the typed-array fast path (x86 / arm64).
  const u16 = (src.byteOffset & 1) === 0 ? new Uint16Array(src.buffer, src.byteOffset, n) : null;
  const dv = u16 ? null : new DataView(src.buffer, src.byteOffset, n * 2);
  const at = (i: number) => (u16 ? u16[i]! : dv!.getUint16(i * 2, true));
  if (dtype === 'BF16') {
    const out = new Uint32Array(dst.buffer, dst.byteOffset, n);
    if (u16) for (let i = 0; i < n; i++) out[i] = u16[i]! << 16;
    else for (let i = 0; i < n; i++) out[i] = at(i) << 16;
  } else {
    for (let i = 0; i < n; i++) dst[i] = f16ToF32(at(i));
  }
}

/** Encode f32 values as bf16 little-endian bytes into `out` (2·n bytes). */
export function encodeBf16(src: Float32Array, out: Uint8Array): void {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const write = u16View(out, src.length);
  for (let i = 0; i < src.length; i++) {
    const u = bits[i]!;
    write[i] = (u & 0x7fffffff) > 0x7f800000 ? ((u >>> 16) | 0x40) & 0xffff : ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
  }
}

/** Encode f32 values as f16 little-endian bytes into `out` (2·n bytes). */
export function encodeF16(src: Float32Array, out: Uint8Array): void {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const write = u16View(out, src.length);
  for (let i = 0; i < src.length; i++) write[i] = f32BitsToF16(bits[i]!);
}

/** A Uint16Array over `out` (which must be 2-byte aligned: callers allocate it). */
function u16View(out: Uint8Array, n: number): Uint16Array {
  if ((out.byteOffset & 1) !== 0) throw new Error('unaligned output buffer');
  return new Uint16Array(out.buffer, out.byteOffset, n);
}

/**
 * Quantize f32 values (length a multiple of 32) into Q8_0 blocks, the way ggml's reference
 * quantizer does: d = max|x| / 127 stored as f16, q = round(x / d) (half away from zero).
 */
export function quantizeQ8_0(src: Float32Array, out: Uint8Array): void {
  if (src.length % Q8_0_BLOCK !== 0) throw new Error(`Q8_0 needs a multiple of ${Q8_0_BLOCK} values, got ${src.length}`);
  const nb = src.length / Q8_0_BLOCK;
  const dv = new DataView(out.buffer, out.byteOffset, nb * Q8_0_BLOCK_BYTES);
  const qs = new Int8Array(out.buffer, out.byteOffset, nb * Q8_0_BLOCK_BYTES);
  for (let b = 0; b < nb; b++) {
    const base = b * Q8_0_BLOCK;
    let amax = 0;
    for (let j = 0; j < Q8_0_BLOCK; j++) {
      const a = Math.abs(src[base + j]!);
      if (a > amax) amax = a;
    }
    const d = Math.fround(amax / 127);
    const id = d !== 0 ? Math.fround(1 / d) : 0;
    const o = b * Q8_0_BLOCK_BYTES;
    dv.setUint16(o, f32ToF16(d), true);
    for (let j = 0; j < Q8_0_BLOCK; j++) {
      const v = Math.fround(src[base + j]! * id);
      // C roundf (half away from zero); v + 0.5 is exact in double and |v| <= 127.
      qs[o + 2 + j] = v < 0 ? -((0.5 - v) | 0) : (v + 0.5) | 0;
    }
  }
}

/** Inverse of quantizeQ8_0 (for checks). */
export function dequantizeQ8_0(src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  const dv = new DataView(src.buffer, src.byteOffset, (n / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES);
  for (let b = 0; b < n / Q8_0_BLOCK; b++) {
    const o = b * Q8_0_BLOCK_BYTES;
    const d = f16ToF32(dv.getUint16(o, true));
    for (let j = 0; j < Q8_0_BLOCK; j++) out[b * Q8_0_BLOCK + j] = d * dv.getInt8(o + 2 + j);
  }
  return out;
}
