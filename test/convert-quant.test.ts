// Quantized GGUF writing (bench convert --dtype q8_0 | q4_0 | q4_k | q5_k | q6_k | q4_k_m | q5_k_m |
// q6_k_m | iq4_nl | iq4_xs) against llama.cpp's own quantizer (llama_model_quantize of the prebuilt libllama that
// node-llama-cpp ships, run by test/helpers/llama-quantize.ts):
//  - per format, our quantizers give the same bytes as llama.cpp's from the same f32 values,
//    including edge-case blocks (zeros, constants, one-sided, tiny, large, ties);
//  - the dequantizers give ggml's dequantized floats bit for bit, decode random blocks as a
//    per-element formula written from the block layouts (blockFormula below) does, and round-trip
//    within each format's step;
//  - on whole synthetic models (the 4B value-head layout with rows that are multiples of 256, and
//    rows that are not: hidden 160, ffn 336), every scheme's file has exactly the per-tensor
//    types, metadata and tensor bytes of the file llama.cpp's quantizer writes from our f32 GGUF;
//  - llama.cpp loads each of our files and gives the same logits on it as on its own file;
//  - the MTP block (--mtp) and the worker-thread writer (--threads, through the compiled CLI: needs
//    `npm run build`) give the same bytes;
//  - weights a type cannot hold, bad --dtype and --threads values are one-line errors.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerConvert } from '../src/cli/cmd-convert.js';
import { convertCheckpoint } from '../src/convert/convert.js';
import { decodeAs, encodeAs, encodedBytes, firstNonFiniteBlock } from '../src/convert/ggml-codec.js';
import { GgmlType, GgufValueType, GgufWriter, ggmlTypeName } from '../src/convert/gguf-writer.js';
import { fallbackType, planQuantTypes, QUANT_DTYPES, QUANT_SCHEMES, useMoreBits, type QuantDtype } from '../src/convert/quant-mix.js';
import { f16ToF32 } from '../src/convert/quantize.js';
import { usableCpus } from '../src/engine/native.js';
import { loadGgufCheckpoint } from '../src/model/gguf-checkpoint.js';
import { parseGguf, type GgufFile } from '../src/model/gguf-reader.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import type { TextConfig } from '../src/model/types.js';
import { UsageError } from '../src/util/usage-error.js';
import { closeAllRefs, compareLogSoftmax, openRef, pseudoRandomIds } from './helpers/llama-ref.js';
import { llamaQuantize } from './helpers/llama-quantize.js';
import { rewriteSafetensors } from './helpers/synth-fixture.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const execFileP = promisify(execFile);
let work: string;
beforeAll(() => { work = mkdtempSync(join(tmpdir(), 'lumen-quant-')); });
afterAll(async () => {
  await closeAllRefs();
  if (work) rmSync(work, { recursive: true, force: true });
});

/** Deterministic uniform [0, 1) stream (LCG; the quantizers, not the generator, are under test). */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const tensorBytes = (g: GgufFile, name: string): Buffer => {
  const t = g.tensors.get(name);
  if (!t) throw new Error(`${g.file}: tensor ${name} missing`);
  return g.buf.subarray(g.dataStart + t.offset, g.dataStart + t.offset + t.nbytes);
};

/** Index of the first differing byte, or -1. */
function firstDiff(a: Uint8Array, b: Uint8Array): number {
  if (a.length !== b.length) return Math.min(a.length, b.length);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}

// ------------------------------------------------------------------------------------------
// Per format

const ROW = 1024;

/** Rows of test values: ordinary, heavy-tailed and edge-case blocks (each row one kind). */
function formatTestData(): { rows: number; data: Float32Array; kinds: string[] } {
  const r = lcg(42);
  const gauss = () => (r() + r() + r() + r() - 2) * 1.7;
  const kinds: Array<[string, (i: number) => number]> = [
    ['gaussian', () => gauss()],
    ['gaussian x 0.02', () => gauss() * 0.02],
    ['heavy tails', () => (r() < 0.03 ? gauss() * 30 : gauss())],
    ['uniform', () => r() * 2 - 1],
    ['positive only', () => r() * 3],
    ['negative only', () => -r() * 3 - 0.5],
    ['zeros', () => 0],
    ['constant', () => 0.75],
    ['alternating ±1', (i) => (i % 2 ? 1 : -1)],
    ['grid (ties)', (i) => ((i * 7) % 33) / 4 - 4],
    ['one-hot per 32', (i) => (i % 32 === 5 ? 2.5 : 0)],
    ['tiny (1e-20)', () => gauss() * 1e-20],
    ['large (300)', () => gauss() * 300],
    ['mixed scales per 16', (i) => gauss() * 10 ** ((Math.floor(i / 16) % 5) - 2)],
    ['sparse', () => (r() < 0.1 ? gauss() : 0)],
    ['half zero half large', (i) => (i % 256 < 128 ? 0 : gauss() * 5)],
  ];
  const rows = kinds.length * 2;
  const data = new Float32Array(rows * ROW);
  for (let row = 0; row < rows; row++) {
    const f = kinds[row % kinds.length]![1];
    for (let i = 0; i < ROW; i++) data[row * ROW + i] = f(i);
  }
  return { rows, data, kinds: kinds.map(([k]) => k) };
}

/** A minimal qwen35 GGUF (the hyper-parameters llama.cpp's loader reads) holding one f32 tensor. */
function writeOneTensorGguf(file: string, name: string, ne: number[], data: Float32Array): void {
  const w = new GgufWriter();
  const a = 'qwen35';
  w.addString('general.architecture', a);
  const u32: Record<string, number> = {
    block_count: 1, context_length: 4096, embedding_length: ne[0]!, feed_forward_length: 512,
    'attention.head_count': 2, 'attention.head_count_kv': 1, 'attention.key_length': 256, 'attention.value_length': 256,
    'rope.dimension_count': 64, 'ssm.conv_kernel': 4, 'ssm.state_size': 128, 'ssm.group_count': 2,
    'ssm.time_step_rank': 2, 'ssm.inner_size': 256, full_attention_interval: 1,
  };
  for (const [k, v] of Object.entries(u32)) w.addU32(`${a}.${k}`, v);
  w.addF32(`${a}.attention.layer_norm_rms_epsilon`, 1e-6);
  w.addF32(`${a}.rope.freq_base`, 1e7);
  w.addArray(`${a}.rope.dimension_sections`, GgufValueType.INT32, [11, 11, 10, 0]);
  w.addTensor(name, ne, GgmlType.F32);
  w.open(file);
  w.writeTensor(name, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  w.close();
}

/** llama_ftype whose --pure quantization gives `type`. */
const PURE_FTYPE: Array<[GgmlType, number]> = [
  [GgmlType.Q8_0, 7], [GgmlType.Q4_0, 2], [GgmlType.Q5_0, 8], [GgmlType.Q5_1, 9],
  [GgmlType.Q4_K, 15], [GgmlType.Q5_K, 17], [GgmlType.Q6_K, 18], [GgmlType.IQ4_NL, 25], [GgmlType.IQ4_XS, 30],
];
/** Values per block of the quantized formats. */
const BLOCK_VALUES: Partial<Record<GgmlType, number>> = {
  [GgmlType.Q8_0]: 32, [GgmlType.Q4_0]: 32, [GgmlType.Q5_0]: 32, [GgmlType.Q5_1]: 32, [GgmlType.IQ4_NL]: 32,
  [GgmlType.Q4_K]: 256, [GgmlType.Q5_K]: 256, [GgmlType.Q6_K]: 256, [GgmlType.IQ4_XS]: 256,
};
/** Byte offsets of each block's f16 scales. */
const F16_FIELDS: Partial<Record<GgmlType, number[]>> = {
  [GgmlType.Q8_0]: [0], [GgmlType.Q4_0]: [0], [GgmlType.Q5_0]: [0], [GgmlType.Q5_1]: [0, 2], [GgmlType.IQ4_NL]: [0],
  [GgmlType.Q4_K]: [0, 2], [GgmlType.Q5_K]: [0, 2], [GgmlType.Q6_K]: [208], [GgmlType.IQ4_XS]: [0],
};

describe('reference quantizers: the bytes of llama.cpp\'s quantizer, per format', () => {
  const { rows, data, kinds } = formatTestData();
  let input: string;
  beforeAll(() => {
    input = join(work, 'formats-f32.gguf');
    writeOneTensorGguf(input, 'blk.0.ffn_up.weight', [ROW, rows], data);
  });

  it.each(PURE_FTYPE.map(([t, f]) => [ggmlTypeName(t), t, f] as const))('%s: byte-identical on every kind of block', async (_name, type, ftype) => {
    const out = join(work, `formats-${ftype}.gguf`);
    await llamaQuantize(input, out, { ftype, pure: true });
    const g = parseGguf(out);
    expect(g.tensors.get('blk.0.ffn_up.weight')!.type).toBe(type);
    const ref = tensorBytes(g, 'blk.0.ffn_up.weight');
    const ours = encodeAs(type, data);
    const rowBytes = encodedBytes(type, ROW);
    expect(ours.length).toBe(ref.length);
    for (let row = 0; row < rows; row++) {
      const d = firstDiff(ours.subarray(row * rowBytes, (row + 1) * rowBytes), ref.subarray(row * rowBytes, (row + 1) * rowBytes));
      expect(d, `row ${row} (${kinds[row % kinds.length]}): first differing byte ${d}`).toBe(-1);
    }
  }, 60_000);
});

// ------------------------------------------------------------------------------------------
// Dequantizers

/**
 * The value of element k of a block, from the layouts of docs/quantization.md (the same facts as
 * llama.cpp's ggml-common.h), written per element rather than per loop as the decoders are.
 */
function blockFormula(type: GgmlType, b: Uint8Array, k: number): number {
  const f16 = (at: number) => f16ToF32(b[at]! | (b[at + 1]! << 8));
  const u32 = (at: number) => (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
  const nib = (at: number, hi: boolean) => (hi ? b[at]! >> 4 : b[at]! & 15);
  const scaleMin = (j: number): [number, number] => {
    const s = (i: number) => b[4 + i]!;
    return j < 4
      ? [s(j) & 63, s(j + 4) & 63]
      : [(s(j + 4) & 15) | ((s(j - 4) >> 6) << 4), (s(j + 4) >> 4) | ((s(j) >> 6) << 4)];
  };
  const f = Math.fround;
  switch (type) {
    case GgmlType.Q8_0: return f(f16(0) * ((b[2 + k]! << 24) >> 24));
    case GgmlType.Q4_0: return f(f16(0) * (nib(2 + (k % 16), k >= 16) - 8));
    case GgmlType.Q5_0: return f(f16(0) * ((nib(6 + (k % 16), k >= 16) | (((u32(2) >>> k) & 1) << 4)) - 16));
    case GgmlType.Q5_1: return f(f(f16(0) * (nib(8 + (k % 16), k >= 16) | (((u32(4) >>> k) & 1) << 4))) + f16(2));
    case GgmlType.Q4_K:
    case GgmlType.Q5_K: {
      const g = Math.floor(k / 64), l = k % 32, hi = k % 64 >= 32;
      const [sc, m] = scaleMin(2 * g + (hi ? 1 : 0));
      const five = type === GgmlType.Q5_K;
      let q = nib((five ? 48 : 16) + 32 * g + l, hi);
      if (five && (b[16 + l]! & (1 << (2 * g + (hi ? 1 : 0))))) q += 16;
      return f(f(f(f16(0) * sc) * q) - f(f16(2) * m));
    }
    case GgmlType.Q6_K: {
      const half = Math.floor(k / 128), r = k % 128, l = r % 32, quarter = Math.floor(r / 32);
      const ql = half * 64 + l + (quarter % 2) * 32;
      const low = nib(ql, quarter >= 2);
      const high = (b[128 + half * 32 + l]! >> (2 * quarter)) & 3;
      const sc = (b[192 + half * 8 + Math.floor(l / 16) + 2 * quarter]! << 24) >> 24;
      return f(f(f16(208) * sc) * ((low | (high << 4)) - 32));
    }
    case GgmlType.IQ4_NL:
    case GgmlType.IQ4_XS: {
      // kvalues_iq4nl, as docs/gguf-quant-formats.md lists it.
      const T = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
      if (type === GgmlType.IQ4_NL) return f(f16(0) * T[nib(2 + (k % 16), k % 32 >= 16)]!);
      const g = Math.floor(k / 32);
      const ls = ((b[4 + (g >> 1)]! >> (4 * (g % 2))) & 15) | ((((b[2]! | (b[3]! << 8)) >> (2 * g)) & 3) << 4);
      return f(f(f16(0) * (ls - 32)) * T[nib(8 + 16 * g + (k % 16), k % 32 >= 16)]!);
    }
    default: throw new Error(`no formula for ${ggmlTypeName(type)}`);
  }
}

describe('dequantizers', () => {
  // llama.cpp re-quantizing a quantized file to all-F32 writes ggml's own dequantization
  // (dequantize_row_*) of it: our decoders must give exactly those floats.
  it.each(PURE_FTYPE.map(([t, f]) => [ggmlTypeName(t), t, f] as const))('%s: bit-identical to ggml\'s dequantization', async (_name, type, ftype) => {
    const r = lcg(ftype + 100);
    const rows = 8;
    const x = new Float32Array(rows * ROW).map(() => (r() + r() + r() - 1.5) * (r() < 0.05 ? 8 : 1));
    const f32 = join(work, `deq-${ftype}-in.gguf`);
    const q = join(work, `deq-${ftype}-q.gguf`);
    const back = join(work, `deq-${ftype}-f32.gguf`);
    writeOneTensorGguf(f32, 'blk.0.ffn_up.weight', [ROW, rows], x);
    await llamaQuantize(f32, q, { ftype, pure: true });
    await llamaQuantize(q, back, { ftype: 0, allowRequantize: true });
    const g = parseGguf(back);
    expect(g.tensors.get('blk.0.ffn_up.weight')!.type).toBe(GgmlType.F32);
    const theirs = tensorBytes(g, 'blk.0.ffn_up.weight');
    const ours = decodeAs(type, tensorBytes(parseGguf(q), 'blk.0.ffn_up.weight'), x.length);
    const d = firstDiff(new Uint8Array(ours.buffer), theirs);
    expect(d, `first differing byte ${d} (value ${d >> 2})`).toBe(-1);
  }, 60_000);

  it.each(PURE_FTYPE.map(([t]) => [ggmlTypeName(t), t] as const))('%s decodes random blocks as the layout says', (_name, type) => {
    const r = lcg(type * 7919 + 1);
    const values = 512;
    const bytes = new Uint8Array(encodedBytes(type, values));
    const blockValues = BLOCK_VALUES[type]!;
    const blockBytes = bytes.length / (values / blockValues);
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(r() * 256);
    // Keep the f16 scales finite and moderate: exponent field 01xxx (2^-14 .. 2^1).
    for (let o = 0; o < bytes.length; o += blockBytes) {
      for (const at of F16_FIELDS[type]!) {
        bytes[o + at + 1] = (bytes[o + at + 1]! & 0x83) | 0x30;
      }
    }
    const got = decodeAs(type, bytes, values);
    for (let k = 0; k < values; k++) {
      const blk = Math.floor(k / blockValues);
      const want = blockFormula(type, bytes.subarray(blk * blockBytes, (blk + 1) * blockBytes), k % blockValues);
      expect(got[k], `${ggmlTypeName(type)} value ${k}`).toBe(want);
    }
  });

  // RMS error / RMS value on gaussian data: the formats' resolution, with room to spare (Q8_0 ~0.4 %,
  // Q6_K ~1 %, Q5 ~3 %, Q4 ~6-8 % on this data).
  const RMS_BOUND: Array<[GgmlType, number]> = [
    [GgmlType.Q8_0, 0.006], [GgmlType.Q6_K, 0.02], [GgmlType.Q5_K, 0.04], [GgmlType.Q5_0, 0.05], [GgmlType.Q5_1, 0.05],
    [GgmlType.Q4_K, 0.08], [GgmlType.Q4_0, 0.11], [GgmlType.IQ4_NL, 0.09], [GgmlType.IQ4_XS, 0.09],
  ];
  it.each(RMS_BOUND.map(([t, b]) => [ggmlTypeName(t), t, b] as const))('%s round-trips within its resolution (relative RMS < %d)', (_n, type, bound) => {
    const r = lcg(5);
    const x = new Float32Array(64 * 256).map(() => r() + r() + r() + r() - 2);
    const y = decodeAs(type, encodeAs(type, x), x.length);
    let se = 0;
    let sx = 0;
    let maxRel = 0;
    for (let i = 0; i < x.length; i++) {
      se += (y[i]! - x[i]!) ** 2;
      sx += x[i]! ** 2;
    }
    const rel = Math.sqrt(se / sx);
    expect(rel).toBeLessThan(bound);
    expect(rel).toBeGreaterThan(bound / 20); // it does quantize
    // Every value within one quantization step of its block's range.
    const step = BLOCK_VALUES[type]!;
    // IQ4: 16 non-uniform levels over 240 units, the widest gap 24 (a "step" of range / 10).
    const levels = { [GgmlType.Q8_0]: 254, [GgmlType.Q4_0]: 15, [GgmlType.Q5_0]: 31, [GgmlType.Q5_1]: 31, [GgmlType.Q4_K]: 15, [GgmlType.Q5_K]: 31, [GgmlType.Q6_K]: 63, [GgmlType.IQ4_NL]: 10, [GgmlType.IQ4_XS]: 10 } as Record<number, number>;
    for (let b = 0; b < x.length / step; b++) {
      let lo = Infinity;
      let hi = -Infinity;
      for (let i = b * step; i < (b + 1) * step; i++) { lo = Math.min(lo, x[i]!); hi = Math.max(hi, x[i]!); }
      const range = Math.max(hi, 0) - Math.min(lo, 0);
      for (let i = b * step; i < (b + 1) * step; i++) maxRel = Math.max(maxRel, Math.abs(y[i]! - x[i]!) / (range / levels[type]!));
    }
    expect(maxRel).toBeLessThan(step === 256 ? 2 : 1.05);
  });

  it('zero blocks decode to zeros in every format', () => {
    for (const [type] of PURE_FTYPE) {
      const y = decodeAs(type, encodeAs(type, new Float32Array(256)), 256);
      expect(y.every((v) => v === 0), ggmlTypeName(type)).toBe(true);
    }
  });

  it('finds the blocks whose f16 scales overflow (what llama.cpp\'s row validation rejects)', () => {
    const x = new Float32Array(512).fill(0.5);
    x[300] = 1e9; // block 9 of Q8_0 / Q4_0, block 1 of the K types
    expect(firstNonFiniteBlock(GgmlType.Q8_0, encodeAs(GgmlType.Q8_0, x))).toBe(9);
    expect(firstNonFiniteBlock(GgmlType.Q4_0, encodeAs(GgmlType.Q4_0, x))).toBe(9);
    expect(firstNonFiniteBlock(GgmlType.Q4_K, encodeAs(GgmlType.Q4_K, x))).toBe(1);
    expect(firstNonFiniteBlock(GgmlType.Q6_K, encodeAs(GgmlType.Q6_K, x))).toBe(1);
    expect(firstNonFiniteBlock(GgmlType.F16, encodeAs(GgmlType.F16, x))).toBe(300);
    x[300] = 0.5;
    x[40] = -1e5; // Q5_1 stores the block minimum as f16
    expect(firstNonFiniteBlock(GgmlType.Q5_1, encodeAs(GgmlType.Q5_1, x))).toBe(1);
    expect(firstNonFiniteBlock(GgmlType.Q8_0, encodeAs(GgmlType.Q8_0, x))).toBe(-1);
  });

  it('length errors name the format', () => {
    expect(() => encodeAs(GgmlType.Q4_K, new Float32Array(160))).toThrow(/Q4_K: 160 values has row length 160, not a multiple of the Q4_K block \(256\)/);
    expect(() => encodeAs(GgmlType.Q5_0, new Float32Array(48))).toThrow(/Q5_0/);
  });
});

// ------------------------------------------------------------------------------------------
// The mix table

describe('mix rules', () => {
  it('use_more_bits picks llama.cpp\'s layers', () => {
    const pick = (n: number) => [...Array(n).keys()].filter((i) => useMoreBits(i, n));
    expect(pick(8)).toEqual([0, 3, 6, 7]);
    expect(pick(24)).toEqual([0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
    expect(pick(4)).toEqual([2, 3]);
  });

  it('falls back as tensor_type_fallback does', () => {
    expect(fallbackType(GgmlType.Q4_K, 512)).toBe(GgmlType.Q4_K);
    expect(fallbackType(GgmlType.Q4_K, 160)).toBe(GgmlType.Q5_0);
    expect(fallbackType(GgmlType.Q5_K, 160)).toBe(GgmlType.Q5_1);
    expect(fallbackType(GgmlType.Q6_K, 160)).toBe(GgmlType.Q8_0);
    expect(fallbackType(GgmlType.Q6_K, 336)).toBe(GgmlType.F16);
    expect(fallbackType(GgmlType.Q8_0, 336)).toBe(GgmlType.F16);
    expect(fallbackType(GgmlType.Q4_0, 160)).toBe(GgmlType.Q4_0);
  });

  it('docs/quantization.md lists QUANT_SCHEMES as they are', () => {
    const doc = readFileSync(join(ROOT, 'docs', 'quantization.md'), 'utf8');
    const rows = doc.split('\n').filter((l) => /^\| `i?q\d/.test(l)).map((l) => l.split('|').slice(1, -1).map((c) => c.trim().replace(/`/g, '')));
    expect(rows.map((r) => r[0])).toEqual([...QUANT_DTYPES]);
    for (const [dtype, llama, fileType, base, output, moreBits] of rows) {
      const s = QUANT_SCHEMES[dtype as QuantDtype];
      expect(llama, dtype).toBe(`${s.llama.pure ? '--pure ' : ''}${s.llama.ftypeName}`);
      expect(Number(fileType), dtype).toBe(s.fileType);
      expect([base, output, moreBits], dtype).toEqual([s.base, s.output, s.attnVMoreBits].map(ggmlTypeName));
      expect(s.ffnDownMoreBits, dtype).toBe(s.attnVMoreBits);
    }
  });

  it('q4_k_m: Q6_K output, Q6_K attn_v/attn_qkv/ffn_down on the more-bits layers, 1-D and conv untouched', () => {
    const t = (name: string, ne: number[]) => ({ name, ne });
    const tensors = [t('token_embd.weight', [256, 512]), t('output_norm.weight', [256])];
    for (let i = 0; i < 8; i++) {
      tensors.push(t(`blk.${i}.${i % 4 === 3 ? 'attn_v' : 'attn_qkv'}.weight`, [256, 512]), t(`blk.${i}.ffn_down.weight`, [512, 256]),
        t(`blk.${i}.ffn_up.weight`, [256, 512]), t(`blk.${i}.ssm_conv1d.weight`, [4, 512]), t(`blk.${i}.ssm_a`, [4]));
    }
    const m = planQuantTypes('q4_k_m', tensors, 8);
    expect(m.get('token_embd.weight')).toBe(GgmlType.Q6_K); // tied
    for (let i = 0; i < 8; i++) {
      const more = [0, 3, 6, 7].includes(i) ? GgmlType.Q6_K : GgmlType.Q4_K;
      expect(m.get(`blk.${i}.${i % 4 === 3 ? 'attn_v' : 'attn_qkv'}.weight`), `layer ${i}`).toBe(more);
      expect(m.get(`blk.${i}.ffn_down.weight`), `layer ${i}`).toBe(more);
      expect(m.get(`blk.${i}.ffn_up.weight`)).toBe(GgmlType.Q4_K);
      expect(m.has(`blk.${i}.ssm_conv1d.weight`)).toBe(false);
      expect(m.has(`blk.${i}.ssm_a`)).toBe(false);
    }
    expect(m.has('output_norm.weight')).toBe(false);
    // Untied: the embedding is an ordinary weight, the head gets Q6_K.
    const u = planQuantTypes('q4_k_m', [...tensors, t('output.weight', [256, 512])], 8);
    expect(u.get('token_embd.weight')).toBe(GgmlType.Q4_K);
    expect(u.get('output.weight')).toBe(GgmlType.Q6_K);
    // Pure: no exceptions.
    expect(new Set(planQuantTypes('q4_k', tensors, 8).values())).toEqual(new Set([GgmlType.Q4_K]));
  });

  it('iq4_nl / iq4_xs: Q6_K output, Q5_K ffn_down on the first n/8 layers, Q5_K attn_v/attn_qkv only when n_gqa >= 4', () => {
    const t = (name: string, ne: number[]) => ({ name, ne });
    const tensors = [t('token_embd.weight', [256, 512])];
    for (let i = 0; i < 16; i++) {
      tensors.push(t(`blk.${i}.${i % 4 === 3 ? 'attn_v' : 'attn_qkv'}.weight`, [256, 512]), t(`blk.${i}.ffn_down.weight`, [512, 256]),
        t(`blk.${i}.ffn_up.weight`, [256, 512]), t(`blk.${i}.ssm_out.weight`, [160, 256]));
    }
    for (const [dtype, base] of [['iq4_nl', GgmlType.IQ4_NL], ['iq4_xs', GgmlType.IQ4_XS]] as const) {
      for (const nGqa of [2, 4]) {
        const m = planQuantTypes(dtype, tensors, 16, nGqa);
        expect(m.get('token_embd.weight'), dtype).toBe(GgmlType.Q6_K); // tied
        for (let i = 0; i < 16; i++) {
          expect(m.get(`blk.${i}.${i % 4 === 3 ? 'attn_v' : 'attn_qkv'}.weight`), `${dtype} gqa ${nGqa} layer ${i}`).toBe(nGqa >= 4 ? GgmlType.Q5_K : base);
          expect(m.get(`blk.${i}.ffn_down.weight`), `${dtype} layer ${i}`).toBe(i < 2 ? GgmlType.Q5_K : base);
          expect(m.get(`blk.${i}.ffn_up.weight`)).toBe(base);
          expect(m.get(`blk.${i}.ssm_out.weight`)).toBe(GgmlType.IQ4_NL); // rows of 160: IQ4_XS falls back to IQ4_NL
        }
      }
    }
    expect(fallbackType(GgmlType.IQ4_XS, 160)).toBe(GgmlType.IQ4_NL);
    expect(fallbackType(GgmlType.IQ4_XS, 336)).toBe(GgmlType.F16);
    expect(fallbackType(GgmlType.IQ4_NL, 336)).toBe(GgmlType.F16);
    // Output rows that the base block does not divide: Q8_0 (IQ4_XS at 160; IQ4_NL's Q6_K falls back to Q8_0 too).
    const head = [t('token_embd.weight', [160, 512])];
    expect(planQuantTypes('iq4_xs', head, 1).get('token_embd.weight')).toBe(GgmlType.Q8_0);
    expect(planQuantTypes('iq4_nl', head, 1).get('token_embd.weight')).toBe(GgmlType.Q8_0);
  });
});

// ------------------------------------------------------------------------------------------
// Whole models

interface Shape {
  name: string;
  overrides: Partial<TextConfig>;
  seed: number;
  /** The schemes checked on it (default: all). */
  dtypes?: readonly QuantDtype[];
}

// A small tokenizer (479 BPE tokens + 33 specials = vocab 512) keeps the embedding small, so the
// tied embedding really is K-quantized at hidden 256 and every scheme runs in seconds.
const BPE = 479;
const SMALL = { vocabSize: BPE + 33, eosTokenId: BPE };
const SHAPES: Shape[] = [
  {
    name: 'nv = 2 nk (4B layout), tied, hidden 256, 8 layers: rows multiples of 256',
    overrides: { ...SMALL, hiddenSize: 256, numLayers: 8, intermediateSize: 512, numHeads: 2, numKvHeads: 1, linearNumValueHeads: 4 },
    seed: 201,
  },
  {
    name: 'untied, hidden 160, ffn 336: the Q5_0 / Q5_1 / Q8_0 / F16 fallbacks',
    overrides: { ...SMALL, hiddenSize: 160, numLayers: 4, intermediateSize: 336, numHeads: 2, numKvHeads: 1, tieWordEmbeddings: false },
    seed: 202,
  },
  {
    name: 'n_gqa 4 (4 heads, 1 KV head), untied, hidden 256, 8 layers: the IQ4 mixes\' Q5_K attn_v / attn_qkv',
    overrides: { ...SMALL, hiddenSize: 256, numLayers: 8, intermediateSize: 512, numHeads: 4, numKvHeads: 1, tieWordEmbeddings: false },
    seed: 204,
    dtypes: ['iq4_nl', 'iq4_xs'],
  },
];

describe.each(SHAPES)('whole model, $name', (shape) => {
  let dir: string;
  let f32: string;
  const ours = new Map<QuantDtype, string>();
  const theirs = new Map<QuantDtype, string>();
  const tag = `s${shape.seed}`;

  beforeAll(async () => {
    dir = join(work, tag);
    await writeSynthCheckpoint({ preset: 'tiny', out: dir, dtype: 'f32', seed: shape.seed, overrides: shape.overrides, tokenizerBpeVocab: BPE, vision: false });
    f32 = join(work, `${tag}-f32.gguf`);
    await convertCheckpoint(dir, f32, { dtype: 'f32' });
  }, 120_000);

  it.each(shape.dtypes ?? QUANT_DTYPES)('%s: the tensor types, metadata and bytes of llama-quantize\'s file', async (dtype) => {
    const s = QUANT_SCHEMES[dtype];
    const mine = join(work, `${tag}-${dtype}.gguf`);
    const ref = join(work, `${tag}-${dtype}-llama.gguf`);
    await convertCheckpoint(dir, mine, { dtype });
    await llamaQuantize(f32, ref, { ftype: s.fileType, pure: s.llama.pure });
    ours.set(dtype, mine);
    theirs.set(dtype, ref);
    const a = parseGguf(mine);
    const b = parseGguf(ref);
    expect([...a.tensors.keys()].sort()).toEqual([...b.tensors.keys()].sort());
    const typesOf = (g: GgufFile) => Object.fromEntries([...g.tensors.values()].map((t) => [t.name, ggmlTypeName(t.type)]));
    expect(typesOf(a)).toEqual(typesOf(b));
    // Same metadata (llama.cpp copies ours and sets general.file_type and quantization_version).
    expect(a.kv.get('general.file_type')?.value).toBe(s.fileType);
    expect([...a.kv.keys()].sort()).toEqual([...b.kv.keys()].sort());
    for (const [k, v] of a.kv) expect(b.kv.get(k), k).toEqual(v);
    for (const name of a.tensors.keys()) {
      const d = firstDiff(tensorBytes(a, name), tensorBytes(b, name));
      expect(d, `${name} (${ggmlTypeName(a.tensors.get(name)!.type)}): first differing byte ${d}`).toBe(-1);
    }
  }, 120_000);

  it('the loader names each file\'s format: the file type, or the base type of a pure K file (ours and llama-quantize\'s alike)', () => {
    expect(ours.size).toBe((shape.dtypes ?? QUANT_DTYPES).length);
    for (const [dtype, file] of ours) {
      const want = dtype === 'q4_k' || dtype === 'q5_k' ? `${dtype.toUpperCase()} (pure)` : QUANT_SCHEMES[dtype].llama.ftypeName;
      for (const f of [file, theirs.get(dtype)!]) {
        const m = loadGgufCheckpoint(f, { hash: false });
        expect(m.format!.name, `${dtype}: ${f}`).toBe(want);
        expect(m.notes.some((n) => n.includes(`reported as ${want}`)), `${dtype}: the note`).toBe(want.endsWith('(pure)'));
      }
    }
  });

  it('exercises what it claims: K-quants, the more-bits layers and the fallbacks', () => {
    const types = (dtype: QuantDtype) => new Set([...parseGguf(ours.get(dtype)!).tensors.values()].map((t) => ggmlTypeName(t.type)));
    const typeIn = (dtype: QuantDtype, n: string) => ggmlTypeName(parseGguf(ours.get(dtype)!).tensors.get(n)!.type);
    if (shape === SHAPES[2]) {
      for (const dtype of ['iq4_nl', 'iq4_xs'] as const) {
        expect(typeIn(dtype, 'blk.1.attn_qkv.weight'), dtype).toBe('Q5_K');
        expect(typeIn(dtype, 'blk.3.attn_v.weight'), dtype).toBe('Q5_K');
        expect(typeIn(dtype, 'blk.0.ffn_down.weight'), dtype).toBe('Q5_K');
        expect(typeIn(dtype, 'blk.1.ffn_down.weight'), dtype).toBe(dtype.toUpperCase());
        expect(typeIn(dtype, 'output.weight'), dtype).toBe('Q6_K');
        expect(typeIn(dtype, 'token_embd.weight'), dtype).toBe(dtype.toUpperCase());
      }
      return;
    }
    const g = parseGguf(ours.get('q4_k_m')!);
    const type = (n: string) => ggmlTypeName(g.tensors.get(n)!.type);
    if (shape === SHAPES[0]) {
      expect(types('iq4_xs')).toEqual(new Set(['F32', 'IQ4_XS', 'Q5_K', 'Q6_K']));
      expect(types('iq4_nl')).toEqual(new Set(['F32', 'IQ4_NL', 'Q5_K', 'Q6_K']));
      expect(type('token_embd.weight')).toBe('Q6_K');
      expect(type('blk.0.attn_qkv.weight')).toBe('Q6_K');
      expect(type('blk.1.attn_qkv.weight')).toBe('Q4_K');
      expect(type('blk.3.attn_v.weight')).toBe('Q6_K');
      expect(type('blk.3.ffn_down.weight')).toBe('Q6_K');
      expect(type('blk.4.ffn_down.weight')).toBe('Q4_K');
      expect(types('q5_k_m')).toEqual(new Set(['F32', 'Q5_K', 'Q6_K']));
      expect(types('q4_0')).toEqual(new Set(['F32', 'Q4_0', 'Q6_K']));
    } else {
      expect(type('output.weight')).toBe('Q8_0');
      expect(type('token_embd.weight')).toBe('Q5_0');
      expect(type('blk.0.ffn_down.weight')).toBe('F16');
      expect(type('blk.0.ssm_out.weight')).toBe('Q4_K'); // rows of 256 (the value dim) keep the K-quant
      expect(types('q5_k')).toEqual(new Set(['F32', 'F16', 'Q5_1', 'Q5_K']));
      expect(types('q6_k')).toEqual(new Set(['F32', 'F16', 'Q8_0', 'Q6_K']));
      // IQ4_XS on rows of 160 falls back to IQ4_NL, ffn_down (336) to F16; ssm_out (256) keeps IQ4_XS.
      expect(types('iq4_xs')).toEqual(new Set(['F32', 'F16', 'Q8_0', 'IQ4_NL', 'IQ4_XS']));
      expect(typeIn('iq4_xs', 'blk.0.ssm_out.weight')).toBe('IQ4_XS');
      expect(typeIn('iq4_xs', 'output.weight')).toBe('Q8_0');
      expect(types('iq4_nl')).toEqual(new Set(['F32', 'F16', 'Q8_0', 'IQ4_NL']));
    }
  });

  // The compiled CLI (dist/, `npm run build`) runs the quantizer worker threads.
  if (shape === SHAPES[0]) it('bench convert --threads 2 (worker threads) writes the same bytes as the in-process writer', async () => {
    for (const dtype of ['q4_k_m', 'q5_k', 'iq4_xs'] as const) {
      const out = join(work, `${tag}-${dtype}-threads.gguf`);
      const { stderr } = await execFileP(process.execPath, [join(ROOT, 'bin', 'bench.js'), 'convert', '--model-path', dir, '--out', out, '--dtype', dtype, '--threads', '2'], { cwd: ROOT });
      // The CLI starts no more workers than the usable CPUs: with one, --threads 2 runs in its own thread.
      expect(stderr).toContain(usableCpus() >= 2 ? '(2 quantizer threads)' : '(1 quantizer thread; --threads 2 capped at the 1 usable CPUs)');
      expect(readFileSync(out).equals(readFileSync(ours.get(dtype)!)), dtype).toBe(true);
    }
  }, 120_000);

  it.each(shape.dtypes ?? QUANT_DTYPES)('%s: llama.cpp loads our file and gives the logits it gives on its own', async (dtype) => {
    const prompt = pseudoRandomIds(24, shape.seed, 0, BPE);
    const a = await (await openRef(ours.get(dtype)!, { contextSize: 128 })).evaluate(prompt, { newTokens: 4 });
    const b = await (await openRef(theirs.get(dtype)!, { contextSize: 128 })).evaluate(prompt, { newTokens: 4 });
    const cmp = compareLogSoftmax(a.logSoftmax, b.logSoftmax, a.vocabSize);
    expect(cmp.maxAbs).toBe(0);
    expect(a.greedy).toEqual(b.greedy);
    // And the quantization is visible: not the f32 model's logits.
    const f = await (await openRef(f32, { contextSize: 128 })).evaluate(prompt, { newTokens: 0 });
    expect(compareLogSoftmax(a.logSoftmax, f.logSoftmax, a.vocabSize).maxAbs).toBeGreaterThan(0);
  }, 60_000);
});

describe('whole model with the MTP block (--mtp)', () => {
  let dir: string;
  let f32: string;
  beforeAll(async () => {
    dir = join(work, 'mtp');
    f32 = join(work, 'mtp-f32.gguf');
    await writeSynthCheckpoint({
      preset: 'tiny', out: dir, dtype: 'f32', seed: 203, mtp: true, tokenizerBpeVocab: BPE, vision: false,
      overrides: { ...SMALL, hiddenSize: 256, numLayers: 8, intermediateSize: 512, numHeads: 2, numKvHeads: 1 },
    });
    await convertCheckpoint(dir, f32, { dtype: 'f32', mtp: true });
  }, 120_000);

  it.each(['q4_k_m', 'q8_0'] as const)('%s: the nextn layer counts in block_count; types and bytes as llama-quantize', async (dtype) => {
    const mine = join(work, `mtp-${dtype}.gguf`);
    const ref = join(work, `mtp-${dtype}-llama.gguf`);
    await convertCheckpoint(dir, mine, { dtype, mtp: true });
    await llamaQuantize(f32, ref, { ftype: QUANT_SCHEMES[dtype].fileType });
    const a = parseGguf(mine);
    const b = parseGguf(ref);
    expect(a.kv.get('qwen35.block_count')?.value).toBe(9);
    expect(a.tensors.has('blk.8.nextn.eh_proj.weight')).toBe(true);
    for (const t of b.tensors.values()) {
      expect(ggmlTypeName(a.tensors.get(t.name)!.type), t.name).toBe(ggmlTypeName(t.type));
      expect(firstDiff(tensorBytes(a, t.name), tensorBytes(b, t.name)), t.name).toBe(-1);
    }
    expect(a.tensors.size).toBe(b.tensors.size);
    // 9 attn_v / attn_qkv tensors and block_count 9: the more-bits layers are 0, 3, 6, 7, 8.
    if (dtype === 'q4_k_m') {
      const more = [...Array(9).keys()].filter((i) => ggmlTypeName(a.tensors.get(`blk.${i}.ffn_down.weight`)!.type) === 'Q6_K');
      expect(more).toEqual([0, 3, 6, 7, 8]);
    }
  }, 120_000);
});

// ------------------------------------------------------------------------------------------

describe('bench convert --dtype: bad input', () => {
  const run = async (args: string[]): Promise<unknown> => {
    const program = new Command('bench').exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
    registerConvert(program, () => {});
    try {
      await program.parseAsync(['node', 'bench', 'convert', ...args]);
      return undefined;
    } catch (err) {
      return err;
    }
  };

  it('weights a quantized type cannot hold: a one-line error naming the tensor and row', async () => {
    const dir = join(work, 'bad-weights');
    await writeSynthCheckpoint({
      preset: 'tiny', out: dir, dtype: 'f32', seed: 9, tokenizerBpeVocab: BPE, vision: false,
      overrides: { ...SMALL, hiddenSize: 256, numLayers: 4, intermediateSize: 512, numHeads: 2, numKvHeads: 1 },
    });
    const file = join(dir, 'model.safetensors');
    const poke = (value: number) => rewriteSafetensors(file, (ts) => ts.map((t) => {
      if (t.name !== 'model.language_model.layers.1.mlp.up_proj.weight') return t;
      const data = new Uint8Array(t.data);
      new DataView(data.buffer).setFloat32((3 * 256 + 5) * 4, value, true); // row 3
      return { ...t, data };
    }));
    poke(NaN);
    for (const dtype of ['q4_k_m', 'q8_0'] as const) {
      const err = await run(['--model-path', dir, '--out', join(work, 'bad.gguf'), '--dtype', dtype, '-q']);
      expect(err, dtype).toBeInstanceOf(UsageError);
      expect((err as Error).message).toMatch(/tensor layers\.1\.mlp\.up_proj\.weight \(blk\.1\.ffn_up\.weight\) has a non-finite value \(NaN\) in row 3; cannot write it as (Q4_K|Q8_0)/);
      expect((err as Error).message).not.toContain('\n');
    }
    poke(1e7); // d = 1e7 / 127 overflows Q8_0's f16 scale
    const err = await run(['--model-path', dir, '--out', join(work, 'bad.gguf'), '--dtype', 'q8_0', '-q']);
    expect((err as Error).message).toMatch(/up_proj\.weight \(blk\.1\.ffn_up\.weight\) row 3: values beyond the f16 range of Q8_0.s scales/);
    // The same weights are fine where the f16 range does not matter.
    expect(await run(['--model-path', dir, '--out', join(work, 'ok.gguf'), '--dtype', 'f32', '-q'])).toBeUndefined();
  }, 60_000);

  it('an unknown dtype is a one-line usage error listing the choices', async () => {
    for (const bad of ['q3_k', 'q4_k_s', 'iq3_xs', 'q8']) {
      const err = await run(['--model-path', work, '--out', join(work, 'x.gguf'), '--dtype', bad]);
      expect(err, bad).toBeInstanceOf(UsageError);
      const msg = (err as Error).message;
      expect(msg).toContain(`--dtype: '${bad}' is not one of f32, bf16, f16, ${QUANT_DTYPES.join(', ')}`);
      expect(msg).not.toContain('\n');
    }
  });

  it('--threads must be a whole number of at least 1', async () => {
    for (const bad of ['0', 'two', '-1']) {
      const err = await run(['--model-path', work, '--out', join(work, 'x.gguf'), '--dtype', 'q4_k_m', '--threads', bad]);
      expect(err, bad).toBeInstanceOf(UsageError);
      expect((err as Error).message).toMatch(/^--threads: /);
    }
  });

  it('dtype names are case-insensitive (Q4_K_M as llama.cpp spells it)', async () => {
    // Accepted as a dtype, so the next problem reported is the directory's missing config.json.
    const err = await run(['--model-path', work, '--out', join(work, 'x.gguf'), '--dtype', 'Q4_K_M']);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as Error).message).toMatch(/config\.json/);
  });
});
