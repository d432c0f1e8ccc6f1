// The ggml tensor types the GGUF writer produces, each with its f32 -> bytes encoder and its
// scalar bytes -> f32 decoder (the reference the engine's kernels and the tests check against).
// Block sizes and bytes per block come from the GGUF reader's type table (ggmlTensorBytes).
import { ggmlTensorBytes } from '../model/gguf-reader.js';
import { GgmlType } from './gguf-writer.js';
import {
  dequantizeQ4_0, dequantizeQ5_0, dequantizeQ5_1, dequantizeQ8_0, quantizeQ4_0, quantizeQ5_0, quantizeQ5_1, quantizeQ8_0,
} from './quant-legacy.js';
import { dequantizeQ4_K, dequantizeQ5_K, dequantizeQ6_K, quantizeQ4_K, quantizeQ5_K, quantizeQ6_K } from './quant-k.js';
import { dequantizeIQ4_NL, dequantizeIQ4_XS, quantizeIQ4_NL, quantizeIQ4_XS } from './quant-iq4.js';
import { decodeToF32, encodeBf16, encodeF16 } from './quantize.js';

export interface GgmlCodec {
  /** Values per block (1 for the float types). */
  block: number;
  /** Encode f32 values (a multiple of `block`) into `out` (exactly the type's bytes for them). */
  encode(src: Float32Array, out: Uint8Array): void;
  /** Decode `n` values from `src`. */
  decode(src: Uint8Array, n: number): Float32Array;
}

const floatDecoder = (dtype: 'F16' | 'BF16') => (src: Uint8Array, n: number) => {
  const out = new Float32Array(n);
  decodeToF32(dtype, src, out, n);
  return out;
};

export const GGML_CODECS: Readonly<Record<GgmlType, GgmlCodec>> = {
  [GgmlType.F32]: {
    block: 1,
    encode: (src, out) => out.set(new Uint8Array(src.buffer, src.byteOffset, src.length * 4)),
    decode: (src, n) => {
      const out = new Float32Array(n);
      decodeToF32('F32', src, out, n);
      return out;
    },
  },
  [GgmlType.F16]: { block: 1, encode: encodeF16, decode: floatDecoder('F16') },
  [GgmlType.BF16]: { block: 1, encode: encodeBf16, decode: floatDecoder('BF16') },
  [GgmlType.Q8_0]: { block: 32, encode: quantizeQ8_0, decode: dequantizeQ8_0 },
  [GgmlType.Q4_0]: { block: 32, encode: quantizeQ4_0, decode: dequantizeQ4_0 },
  [GgmlType.Q5_0]: { block: 32, encode: quantizeQ5_0, decode: dequantizeQ5_0 },
  [GgmlType.Q5_1]: { block: 32, encode: quantizeQ5_1, decode: dequantizeQ5_1 },
  [GgmlType.Q4_K]: { block: 256, encode: quantizeQ4_K, decode: dequantizeQ4_K },
  [GgmlType.Q5_K]: { block: 256, encode: quantizeQ5_K, decode: dequantizeQ5_K },
  [GgmlType.Q6_K]: { block: 256, encode: quantizeQ6_K, decode: dequantizeQ6_K },
  [GgmlType.IQ4_NL]: { block: 32, encode: quantizeIQ4_NL, decode: dequantizeIQ4_NL },
  [GgmlType.IQ4_XS]: { block: 256, encode: quantizeIQ4_XS, decode: dequantizeIQ4_XS },
};

/** Byte offsets of each block's f16 scale fields (d, and dmin or m), and the block size in bytes. */
const SCALE_FIELDS: Partial<Record<GgmlType, { bytes: number; at: number[] }>> = {
  [GgmlType.F16]: { bytes: 2, at: [0] },
  [GgmlType.Q8_0]: { bytes: 34, at: [0] },
  [GgmlType.Q4_0]: { bytes: 18, at: [0] },
  [GgmlType.Q5_0]: { bytes: 22, at: [0] },
  [GgmlType.Q5_1]: { bytes: 24, at: [0, 2] },
  [GgmlType.Q4_K]: { bytes: 144, at: [0, 2] },
  [GgmlType.Q5_K]: { bytes: 176, at: [0, 2] },
  [GgmlType.Q6_K]: { bytes: 210, at: [208] },
  [GgmlType.IQ4_NL]: { bytes: 18, at: [0] },
  [GgmlType.IQ4_XS]: { bytes: 136, at: [0] },
};

/**
 * The first block (F16: element) of encoded `type` bytes whose f16 scale is infinite or NaN, or -1:
 * what llama.cpp's ggml_validate_row_data rejects. Values beyond the f16 range overflow there.
 */
export function firstNonFiniteBlock(type: GgmlType, bytes: Uint8Array): number {
  const f = SCALE_FIELDS[type];
  if (!f) return -1;
  for (let b = 0, o = 0; o < bytes.length; b++, o += f.bytes) {
    for (const at of f.at) if ((bytes[o + at + 1]! & 0x7c) === 0x7c) return b;
  }
  return -1;
}

/** Bytes of `n` values of `type` (n a multiple of the block). */
export function encodedBytes(type: GgmlType, n: number): number {
  const b = ggmlTensorBytes(type, [n]);
  if (typeof b === 'string') throw new Error(`${GgmlType[type]}: ${n} values ${b}`);
  return b;
}

/** Encode f32 values as `type` into a fresh buffer. */
export function encodeAs(type: GgmlType, vals: Float32Array): Uint8Array {
  if (type === GgmlType.F32) return new Uint8Array(vals.buffer, vals.byteOffset, vals.length * 4);
  const out = new Uint8Array(encodedBytes(type, vals.length));
  GGML_CODECS[type].encode(vals, out);
  return out;
}

/** Decode `n` values of `type` from `src` (scalar reference). */
export function decodeAs(type: GgmlType, src: Uint8Array, n: number): Float32Array {
  return GGML_CODECS[type].decode(src, n);
}
