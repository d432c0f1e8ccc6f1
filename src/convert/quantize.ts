// Float element encodings used by the GGUF writer and the quantizers: bf16 / f16 <-> f32 (round to
// nearest even). The block formats are in quant-legacy.ts and quant-k.ts, the per-type table in
// ggml-codec.ts; the block helpers they share (block counts, f16 fields) are here. Everything works on
// whole rows held in typed arrays; callers stream rows in chunks.

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

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

/** Blocks of `blockElems` values in `n`, checked: `n` a whole number of blocks and `out` big enough for them. */
export function blockCount(name: string, n: number, out: Uint8Array, blockElems: number, blockBytes: number): number {
  if (n % blockElems !== 0) throw new Error(`${name} needs a multiple of ${blockElems} values, got ${n}`);
  const nb = n / blockElems;
  if (out.length < nb * blockBytes) throw new Error(`${name}: output holds ${out.length} bytes, ${nb * blockBytes} needed`);
  return nb;
}

/** An f16 (little-endian) into a block at byte `at`; its value back. */
export const setF16 = (out: Uint8Array, at: number, v: number): void => {
  const h = f32ToF16(v);
  out[at] = h & 0xff;
  out[at + 1] = h >>> 8;
};
export const getF16 = (src: Uint8Array, at: number): number => f16ToF32(src[at]! | (src[at + 1]! << 8));
