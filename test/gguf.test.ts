// GGUF writer and qwen35 converter: format (parsed back by the project's GGUF reader and by
// node-llama-cpp's), metadata, tensor layout, value transforms, dtypes, CLI errors, and
// llama.cpp actually loading and running the converted tiny models.
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command, CommanderError } from 'commander';
import { readGgufFileInfo } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerConvert } from '../src/cli/cmd-convert.js';
import { UsageError } from '../src/util/usage-error.js';
import { ConvertError, convertCheckpoint, fullAttentionInterval, valueHeadPermutation, type OutDtype } from '../src/convert/convert.js';
import { GgmlType, GgufValueType, GgufWriter } from '../src/convert/gguf-writer.js';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from '../src/convert/quantize.js';
import { dequantizeQ8_0, quantizeQ8_0, Q8_0_BLOCK_BYTES } from '../src/convert/quant-legacy.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { parseGguf, type GgufFile } from '../src/model/gguf-reader.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import type { Checkpoint, TextConfig } from '../src/model/types.js';
import { closeAllRefs, compareLogSoftmax, LlamaRef, openRef, pseudoRandomIds } from './helpers/llama-ref.js';

// ------------------------------------------------------------------------------------------
// The project's bounds-checked GGUF reader (src/model/gguf-reader.ts, written from the format
// description, not from the writer).

type ParsedGguf = GgufFile;

const kvValue = (g: ParsedGguf, key: string): unknown => {
  const e = g.kv.get(key);
  if (!e) throw new Error(`GGUF key ${key} missing`);
  return e.value;
};

const typeBytes = (type: number, n: number, ne0: number): number => {
  if (type === GgmlType.F32) return 4 * n;
  if (type === GgmlType.F16 || type === GgmlType.BF16) return 2 * n;
  if (type === GgmlType.Q8_0) { expect(ne0 % 32).toBe(0); return (n / 32) * Q8_0_BLOCK_BYTES; }
  throw new Error(`unexpected type ${type}`);
};

/** A GGUF tensor's values as f32 (F32 / F16 / BF16 / Q8_0). */
function tensorData(g: ParsedGguf, name: string): Float32Array {
  const t = g.tensors.get(name);
  if (!t) throw new Error(`GGUF tensor ${name} missing`);
  const n = t.ne.reduce((a, b) => a * b, 1);
  const start = g.dataStart + t.offset;
  const bytes = g.buf.subarray(start, start + typeBytes(t.type, n, t.ne[0]!));
  const out = new Float32Array(n);
  if (t.type === GgmlType.F32) for (let i = 0; i < n; i++) out[i] = bytes.readFloatLE(i * 4);
  else if (t.type === GgmlType.F16) for (let i = 0; i < n; i++) out[i] = f16ToF32(bytes.readUInt16LE(i * 2));
  else if (t.type === GgmlType.BF16) for (let i = 0; i < n; i++) out[i] = bf16ToF32(bytes.readUInt16LE(i * 2));
  else return dequantizeQ8_0(bytes, n);
  return out;
}

/** A checkpoint tensor's values as f32 (F32 / BF16 / F16 sources). */
function sourceData(ckpt: Checkpoint, name: string): Float32Array {
  const t = ckpt.tensors.get(name);
  if (!t) throw new Error(`source tensor ${name} missing`);
  const bytes = Buffer.alloc(t.nbytes);
  const fd = openSync(t.file, 'r');
  try {
    readSync(fd, bytes, 0, t.nbytes, t.offset);
  } finally {
    closeSync(fd);
  }
  const n = t.shape.reduce((a, b) => a * b, 1);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    out[i] = t.dtype === 'F32' ? bytes.readFloatLE(i * 4) : t.dtype === 'BF16' ? bf16ToF32(bytes.readUInt16LE(i * 2)) : f16ToF32(bytes.readUInt16LE(i * 2));
  }
  return out;
}

/** Grouped value head of tiled slot j (llama.cpp order): slot t·nk + k holds grouped head k·r + t. */
const groupedHeadOf = (j: number, nk: number, nv: number) => (j % nk) * (nv / nk) + Math.floor(j / nk);

// ------------------------------------------------------------------------------------------

describe('element encodings', () => {
  it('bf16 rounds to nearest even and round-trips exactly', () => {
    expect(f32ToBf16(1)).toBe(0x3f80);
    expect(f32ToBf16(-2)).toBe(0xc000);
    // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
    expect(bf16ToF32(f32ToBf16(1 + 2 ** -8))).toBe(1);
    // 1 + 3·2^-8 is halfway as well; the even neighbour is above.
    expect(bf16ToF32(f32ToBf16(1 + 3 * 2 ** -8))).toBe(1 + 2 ** -6);
    for (const bits of [0x0000, 0x8000, 0x3f80, 0x7f7f, 0x0001, 0x7f80, 0xff80]) expect(f32ToBf16(bf16ToF32(bits))).toBe(bits);
    expect(Number.isNaN(bf16ToF32(f32ToBf16(NaN)))).toBe(true);
  });

  it('f16 conversion handles normals, subnormals, overflow and ties', () => {
    expect(f32ToF16(1)).toBe(0x3c00);
    expect(f32ToF16(-0.5)).toBe(0xb800);
    expect(f32ToF16(65504)).toBe(0x7bff);
    expect(f32ToF16(1e6)).toBe(0x7c00);
    expect(f16ToF32(f32ToF16(2 ** -24))).toBe(2 ** -24); // smallest subnormal
    expect(f32ToF16(2 ** -26)).toBe(0); // below half of it
    expect(f16ToF32(f32ToF16(1 + 2 ** -11))).toBe(1); // tie to even
    expect(f16ToF32(f32ToF16(1 + 3 * 2 ** -11))).toBe(1 + 2 ** -9);
    for (let bits = 0; bits < 0x7c00; bits += 97) expect(f32ToF16(f16ToF32(bits))).toBe(bits);
  });

  it('q8_0 blocks: f16 scale = max|x|/127, error within half a step', () => {
    const x = new Float32Array(64).map((_, i) => Math.sin(i * 1.7) * (i < 32 ? 1 : 1e-3));
    x[5] = -2.5;
    const q = new Uint8Array(2 * Q8_0_BLOCK_BYTES);
    quantizeQ8_0(x, q);
    expect(f16ToF32(q[0]! | (q[1]! << 8))).toBeCloseTo(2.5 / 127, 5);
    expect(new Int8Array(q.buffer, 2 + 5, 1)[0]).toBe(-127);
    const back = dequantizeQ8_0(q, 64);
    for (let i = 0; i < 64; i++) expect(Math.abs(back[i]! - x[i]!)).toBeLessThanOrEqual((i < 32 ? 2.5 : 1e-3) / 127 * 0.6 + 1e-9); // half a step + the f16 rounding of the scale;
    expect(() => quantizeQ8_0(new Float32Array(33), new Uint8Array(68))).toThrow(/multiple of 32/);
  });
});

describe('GGUF writer', () => {
  let dir: string;
  beforeAll(() => { dir = mkdtempSync(join(tmpdir(), 'lumen-gguf-w-')); });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('writes a header, kv pairs and aligned tensor data that parse back', async () => {
    const w = new GgufWriter();
    w.addString('general.architecture', 'test');
    w.addU32('t.u32', 7);
    w.addI32('t.i32', -3);
    w.addF32('t.f32', 0.25);
    w.addBool('t.bool', true);
    w.addArray('t.arr', GgufValueType.INT32, [11, 11, 10, 0]);
    w.addArray('t.strs', GgufValueType.STRING, ['a', 'ĠHello', '']);
    w.addTensor('a', [3], GgmlType.F32); // 12 bytes: the next tensor must start at 32
    w.addTensor('b', [32, 2], GgmlType.Q8_0);
    w.addTensor('c', [5], GgmlType.BF16);
    const file = join(dir, 't.gguf');
    w.open(file);
    w.writeTensor('a', new Uint8Array(new Float32Array([1, 2, 3]).buffer));
    const q = new Uint8Array(2 * Q8_0_BLOCK_BYTES);
    quantizeQ8_0(new Float32Array(64).fill(0.5), q);
    w.writeTensor('b', q.subarray(0, Q8_0_BLOCK_BYTES)); // in two chunks
    w.writeTensor('b', q.subarray(Q8_0_BLOCK_BYTES));
    expect(() => w.writeTensor('a', new Uint8Array(4))).toThrow(/expected data for c/);
    w.writeTensor('c', new Uint8Array(10));
    w.close();

    const g = parseGguf(file);
    expect(g.version).toBe(3);
    expect(kvValue(g, 'general.alignment')).toBe(32);
    expect(kvValue(g, 'general.architecture')).toBe('test');
    expect(kvValue(g, 't.u32')).toBe(7);
    expect(kvValue(g, 't.i32')).toBe(-3);
    expect(kvValue(g, 't.f32')).toBe(0.25);
    expect(kvValue(g, 't.bool')).toBe(true);
    expect(g.kv.get('t.arr')).toMatchObject({ type: 9, itemType: GgufValueType.INT32, value: [11, 11, 10, 0] });
    expect(kvValue(g, 't.strs')).toEqual(['a', 'ĠHello', '']);
    expect(g.dataStart % 32).toBe(0);
    expect(g.tensorOrder).toEqual(['a', 'b', 'c']);
    expect(g.tensors.get('a')!.offset).toBe(0);
    expect(g.tensors.get('b')!.offset).toBe(32);
    expect(g.tensors.get('c')!.offset).toBe(32 + 68 + 28); // 68 bytes of Q8_0, padded to 128
    expect(Array.from(tensorData(g, 'a'))).toEqual([1, 2, 3]);
    for (const v of tensorData(g, 'b')) expect(v).toBeCloseTo(0.5, 3); // scale 0.5/127 rounded to f16
    expect(g.buf.length).toBe(g.dataStart + 128 + 32); // last tensor padded too

    // node-llama-cpp's own GGUF parser agrees.
    const info = await readGgufFileInfo(file, { readTensorInfo: true, logWarnings: false });
    expect(info.version).toBe(3);
    expect(info.tensorInfo?.map((t) => t.name)).toEqual(['a', 'b', 'c']);
    expect(info.tensorInfo?.map((t) => Number(t.offset))).toEqual([0, 32, 128]);
  });

  it('refuses incomplete files and bad shapes', () => {
    const w = new GgufWriter();
    w.addTensor('x', [4], GgmlType.F32);
    expect(() => w.addTensor('x', [4], GgmlType.F32)).toThrow(/duplicate/);
    expect(() => w.addTensor('y', [0], GgmlType.F32)).toThrow(/bad shape/);
    expect(() => w.addTensor('z', [33], GgmlType.Q8_0)).toThrow(/not a multiple of the Q8_0 block \(32\)/);
    w.open(join(dir, 'short.gguf'));
    expect(() => w.close()).toThrow(/not written/);
  });
});

describe('value-head re-tiling', () => {
  it('maps tiled slots to grouped heads, identity when nv = nk', () => {
    expect(Array.from(valueHeadPermutation(2, 4))).toEqual([0, 2, 1, 3]);
    expect(Array.from(valueHeadPermutation(3, 6))).toEqual([0, 2, 4, 1, 3, 5]);
    expect(Array.from(valueHeadPermutation(16, 16))).toEqual([...Array(16).keys()]);
    const p = valueHeadPermutation(16, 32);
    for (let j = 0; j < 32; j++) expect(p[j]).toBe(groupedHeadOf(j, 16, 32));
    expect(() => valueHeadPermutation(4, 6)).toThrow(ConvertError);
  });

  it('derives full_attention_interval from layer types', () => {
    const base = { layerTypes: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'] } as TextConfig;
    expect(fullAttentionInterval(base)).toBe(4);
    expect(fullAttentionInterval({ ...base, layerTypes: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'] })).toBe(2);
    expect(() => fullAttentionInterval({ ...base, layerTypes: ['full_attention', 'linear_attention'] })).toThrow(/cannot express/);
  });
});

// ------------------------------------------------------------------------------------------
// Converting synthetic checkpoints.

interface Converted { dir: string; ckpt: Checkpoint; gguf: Record<OutDtype, string>; parsed: ParsedGguf }

describe('qwen35 conversion of synthetic checkpoints', () => {
  let root: string;
  /** nk = nv = 2, tied (0.8B/2B layout). */
  let eq: Converted;
  /** nk = 2, nv = 4, untied (9B layout), bf16 source. */
  let v2: Converted;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'lumen-gguf-'));
    const make = async (name: string, overrides: Partial<TextConfig>, srcDtype: 'f32' | 'bf16', dtypes: OutDtype[]): Promise<Converted> => {
      const dir = join(root, name);
      await writeSynthCheckpoint({ preset: 'tiny', out: dir, dtype: srcDtype, seed: 7, overrides });
      const ckpt = loadCheckpoint(dir);
      const gguf = {} as Record<OutDtype, string>;
      for (const d of dtypes) {
        gguf[d] = join(root, `${name}-${d}.gguf`);
        await convertCheckpoint(dir, gguf[d], { dtype: d });
      }
      return { dir, ckpt, gguf, parsed: parseGguf(gguf[dtypes[0]!]) };
    };
    eq = await make('eq', {}, 'f32', ['f32']);
    v2 = await make('v2', { linearNumValueHeads: 4, tieWordEmbeddings: false }, 'bf16', ['f32', 'bf16', 'q8_0']);
  }, 300_000);

  afterAll(async () => {
    await closeAllRefs();
    rmSync(root, { recursive: true, force: true });
  });

  it('writes the qwen35 metadata of §4', () => {
    const g = v2.parsed;
    const c = v2.ckpt.config;
    expect(g.version).toBe(3);
    expect(kvValue(g, 'general.architecture')).toBe('qwen35');
    expect(kvValue(g, 'general.alignment')).toBe(32);
    expect(kvValue(g, 'general.file_type')).toBe(0);
    const expectU32 = (key: string, v: number) => expect(g.kv.get(key), key).toMatchObject({ type: GgufValueType.UINT32, value: v });
    expectU32('qwen35.block_count', c.numLayers);
    expectU32('qwen35.context_length', c.maxPositionEmbeddings);
    expectU32('qwen35.embedding_length', c.hiddenSize);
    expectU32('qwen35.feed_forward_length', c.intermediateSize);
    expectU32('qwen35.attention.head_count', c.numHeads);
    expectU32('qwen35.attention.head_count_kv', c.numKvHeads);
    expectU32('qwen35.attention.key_length', c.headDim);
    expectU32('qwen35.attention.value_length', c.headDim);
    expectU32('qwen35.rope.dimension_count', c.headDim / 4);
    expectU32('qwen35.ssm.conv_kernel', 4);
    expectU32('qwen35.ssm.state_size', c.linearKeyHeadDim);
    expectU32('qwen35.ssm.group_count', 2);
    expectU32('qwen35.ssm.time_step_rank', 4);
    expectU32('qwen35.ssm.inner_size', 4 * c.linearValueHeadDim);
    expectU32('qwen35.full_attention_interval', 4);
    expect(kvValue(g, 'qwen35.attention.layer_norm_rms_epsilon')).toBeCloseTo(1e-6, 12);
    expect(kvValue(g, 'qwen35.rope.freq_base')).toBe(1e7);
    expect(g.kv.get('qwen35.rope.dimension_sections')).toMatchObject({ itemType: GgufValueType.INT32, value: [11, 11, 10, 0] });
    expect(g.kv.has('qwen35.nextn_predict_layers')).toBe(false);

    expect(kvValue(g, 'tokenizer.ggml.model')).toBe('gpt2');
    expect(kvValue(g, 'tokenizer.ggml.pre')).toBe('qwen35');
    const tokens = kvValue(g, 'tokenizer.ggml.tokens') as string[];
    const types = kvValue(g, 'tokenizer.ggml.token_type') as number[];
    expect(tokens.length).toBe(248320);
    expect(types.length).toBe(248320);
    expect(new Set(tokens).size).toBe(248320);
    expect(tokens[248044]).toBe('<|endoftext|>');
    expect(tokens[248046]).toBe('<|im_end|>');
    expect(types[0]).toBe(1); // normal
    expect(types[248043]).toBe(1);
    for (let id = 248044; id <= 248076; id++) expect(types[id]).toBe(3); // control
    expect(tokens[248077]).toBe('[PAD248077]');
    expect(types[248077]).toBe(5); // unused
    expect(types[248319]).toBe(5);
    const merges = kvValue(g, 'tokenizer.ggml.merges') as string[];
    expect(merges.length).toBeGreaterThan(1000);
    expect(merges.every((m) => m.split(' ').length === 2)).toBe(true);
    expect(kvValue(g, 'tokenizer.ggml.eos_token_id')).toBeGreaterThanOrEqual(248044);
    expect(kvValue(g, 'tokenizer.ggml.padding_token_id')).toBe(248044);
    expect(kvValue(g, 'tokenizer.ggml.add_bos_token')).toBe(false);
    expect(String(kvValue(g, 'tokenizer.chat_template'))).toContain('<|im_start|>');
  });

  it('names tensors as llama.cpp does, in ggml ne order, data 32-byte aligned', () => {
    const c = v2.ckpt.config;
    const g = v2.parsed;
    const H = c.hiddenSize;
    const convDim = 2 * 2 * c.linearKeyHeadDim + 4 * c.linearValueHeadDim;
    const ne = (n: string) => g.tensors.get(n)?.ne;
    expect(ne('token_embd.weight')).toEqual([H, 248320]);
    expect(ne('output.weight')).toEqual([H, 248320]);
    expect(ne('output_norm.weight')).toEqual([H]);
    expect(ne('blk.0.attn_norm.weight')).toEqual([H]);
    expect(ne('blk.0.post_attention_norm.weight')).toEqual([H]);
    expect(ne('blk.0.attn_qkv.weight')).toEqual([H, convDim]);
    expect(ne('blk.0.attn_gate.weight')).toEqual([H, 4 * c.linearValueHeadDim]);
    expect(ne('blk.0.ssm_beta.weight')).toEqual([H, 4]);
    expect(ne('blk.0.ssm_alpha.weight')).toEqual([H, 4]);
    expect(ne('blk.0.ssm_conv1d.weight')).toEqual([4, convDim]);
    expect(ne('blk.0.ssm_dt.bias')).toEqual([4]);
    expect(ne('blk.0.ssm_a')).toEqual([4]);
    expect(ne('blk.0.ssm_norm.weight')).toEqual([c.linearValueHeadDim]);
    expect(ne('blk.0.ssm_out.weight')).toEqual([4 * c.linearValueHeadDim, H]);
    expect(ne('blk.0.ffn_gate.weight')).toEqual([H, c.intermediateSize]);
    expect(ne('blk.0.ffn_down.weight')).toEqual([c.intermediateSize, H]);
    expect(ne('blk.3.attn_q.weight')).toEqual([H, 2 * c.numHeads * c.headDim]);
    expect(ne('blk.3.attn_k.weight')).toEqual([H, c.numKvHeads * c.headDim]);
    expect(ne('blk.3.attn_output.weight')).toEqual([c.numHeads * c.headDim, H]);
    expect(ne('blk.3.attn_q_norm.weight')).toEqual([c.headDim]);
    expect(g.tensors.has('blk.3.attn_qkv.weight')).toBe(false);
    expect(g.tensors.has('blk.0.attn_q.weight')).toBe(false);
    // Tied: no output.weight, llama.cpp reuses token_embd.
    expect(eq.parsed.tensors.has('output.weight')).toBe(false);
    // 4 layers: 3 GDN x 14 + 1 attention x 11 + embd + output_norm (+ output when untied).
    expect(eq.parsed.tensors.size).toBe(3 * 14 + 11 + 2);
    expect(g.tensors.size).toBe(3 * 14 + 11 + 3);
    for (const t of g.tensors.values()) expect(t.offset % 32, t.name).toBe(0);
    expect(g.dataStart % 32).toBe(0);
    // Tensors tile the data section without overlap, up to the file end.
    const sorted = [...g.tensors.values()].sort((a, b) => a.offset - b.offset);
    let end = 0;
    for (const t of sorted) {
      expect(t.offset).toBeGreaterThanOrEqual(end);
      end = t.offset + typeBytes(t.type, t.ne.reduce((a, b) => a * b, 1), t.ne[0]!);
    }
    expect(g.buf.length).toBe(g.dataStart + Math.ceil(end / 32) * 32);
  });

  it('adds 1 to the zero-centred norms, not to linear_attn.norm; ssm_a = -exp(A_log)', () => {
    const { ckpt, parsed: g } = eq;
    const pairs: Array<[string, string, (x: number) => number]> = [
      ['blk.0.attn_norm.weight', 'layers.0.input_layernorm.weight', (x) => x + 1],
      ['blk.1.post_attention_norm.weight', 'layers.1.post_attention_layernorm.weight', (x) => x + 1],
      ['output_norm.weight', 'norm.weight', (x) => x + 1],
      ['blk.3.attn_q_norm.weight', 'layers.3.self_attn.q_norm.weight', (x) => x + 1],
      ['blk.3.attn_k_norm.weight', 'layers.3.self_attn.k_norm.weight', (x) => x + 1],
      ['blk.0.ssm_norm.weight', 'layers.0.linear_attn.norm.weight', (x) => x],
      ['blk.2.ssm_a', 'layers.2.linear_attn.A_log', (x) => -Math.exp(x)],
      ['blk.2.ssm_dt.bias', 'layers.2.linear_attn.dt_bias', (x) => x],
    ];
    for (const [dst, src, f] of pairs) {
      const out = tensorData(g, dst);
      const inp = sourceData(ckpt, src);
      expect(out.length, dst).toBe(inp.length);
      for (let i = 0; i < inp.length; i++) expect(out[i], `${dst}[${i}]`).toBeCloseTo(Math.fround(f(inp[i]!)), 6);
    }
    // Zero-centred norms are near 0 in the checkpoint, so +1 is visible; ssm_a is negative.
    expect(Math.abs(tensorData(g, 'blk.0.attn_norm.weight')[0]! - 1)).toBeLessThan(0.5);
    expect(tensorData(g, 'blk.2.ssm_a').every((v) => v < 0)).toBe(true);
    // 2-D weights are copied bit for bit at f32.
    expect(tensorData(g, 'blk.0.ffn_up.weight')).toEqual(sourceData(ckpt, 'layers.0.mlp.up_proj.weight'));
    expect(tensorData(g, 'blk.3.attn_q.weight')).toEqual(sourceData(ckpt, 'layers.3.self_attn.q_proj.weight'));
  });

  it('keeps value heads in place when nv = nk', () => {
    const { ckpt, parsed: g } = eq;
    const p = 'layers.0.linear_attn.';
    expect(tensorData(g, 'blk.0.attn_qkv.weight')).toEqual(sourceData(ckpt, `${p}in_proj_qkv.weight`));
    expect(tensorData(g, 'blk.0.attn_gate.weight')).toEqual(sourceData(ckpt, `${p}in_proj_z.weight`));
    expect(tensorData(g, 'blk.0.ssm_beta.weight')).toEqual(sourceData(ckpt, `${p}in_proj_b.weight`));
    expect(tensorData(g, 'blk.0.ssm_conv1d.weight')).toEqual(sourceData(ckpt, `${p}conv1d.weight`));
    expect(tensorData(g, 'blk.0.ssm_out.weight')).toEqual(sourceData(ckpt, `${p}out_proj.weight`));
  });

  it('re-tiles value heads (grouped -> tiled) when nv = 2 nk, everywhere they appear', () => {
    const { ckpt, parsed: g } = v2;
    const c = ckpt.config;
    const nk = 2, nv = 4, dk = c.linearKeyHeadDim, dv = c.linearValueHeadDim, H = c.hiddenSize;
    const kd = nk * dk, vd = nv * dv, convDim = 2 * kd + vd;
    const p = 'layers.1.linear_attn.';
    const srcRowOf = (j: number, d: number) => groupedHeadOf(j, nk, nv) * dv + d;

    const qkv = tensorData(g, 'blk.1.attn_qkv.weight');
    const qkvSrc = sourceData(ckpt, `${p}in_proj_qkv.weight`);
    const conv = tensorData(g, 'blk.1.ssm_conv1d.weight');
    const convSrc = sourceData(ckpt, `${p}conv1d.weight`);
    for (let row = 0; row < convDim; row++) {
      const s = row < 2 * kd ? row : 2 * kd + srcRowOf(Math.floor((row - 2 * kd) / dv), (row - 2 * kd) % dv);
      for (const col of [0, 17, H - 1]) expect(qkv[row * H + col]).toBe(qkvSrc[s * H + col]);
      for (let k = 0; k < 4; k++) expect(conv[row * 4 + k]).toBe(convSrc[s * 4 + k]);
    }
    // The permutation is not the identity: slot 1 is grouped head 2.
    expect(qkv[(2 * kd + dv) * H]).toBe(qkvSrc[(2 * kd + 2 * dv) * H]);
    expect(qkv[(2 * kd + dv) * H]).not.toBe(qkvSrc[(2 * kd + dv) * H]);

    const gate = tensorData(g, 'blk.1.attn_gate.weight');
    const gateSrc = sourceData(ckpt, `${p}in_proj_z.weight`);
    for (let row = 0; row < vd; row++) {
      const s = srcRowOf(Math.floor(row / dv), row % dv);
      for (const col of [0, 63, H - 1]) expect(gate[row * H + col]).toBe(gateSrc[s * H + col]);
    }
    for (const [dst, src] of [['ssm_beta.weight', 'in_proj_b.weight'], ['ssm_alpha.weight', 'in_proj_a.weight']]) {
      const o = tensorData(g, `blk.1.${dst}`);
      const i = sourceData(ckpt, `${p}${src}`);
      for (let j = 0; j < nv; j++) expect(Array.from(o.subarray(j * H, (j + 1) * H))).toEqual(Array.from(i.subarray(groupedHeadOf(j, nk, nv) * H, (groupedHeadOf(j, nk, nv) + 1) * H)));
    }
    const a = tensorData(g, 'blk.1.ssm_a');
    const aSrc = sourceData(ckpt, `${p}A_log`);
    const dt = tensorData(g, 'blk.1.ssm_dt.bias');
    const dtSrc = sourceData(ckpt, `${p}dt_bias`);
    for (let j = 0; j < nv; j++) {
      expect(a[j]).toBeCloseTo(-Math.exp(aSrc[groupedHeadOf(j, nk, nv)]!), 5);
      expect(dt[j]).toBe(dtSrc[groupedHeadOf(j, nk, nv)]);
    }
    const out = tensorData(g, 'blk.1.ssm_out.weight');
    const outSrc = sourceData(ckpt, `${p}out_proj.weight`);
    for (const row of [0, 5, H - 1]) {
      for (let col = 0; col < vd; col++) expect(out[row * vd + col]).toBe(outSrc[row * vd + srcRowOf(Math.floor(col / dv), col % dv)]);
    }
    // Not permuted: the shared gated-norm weight, attention layers.
    expect(tensorData(g, 'blk.1.ssm_norm.weight')).toEqual(sourceData(ckpt, `${p}norm.weight`));
    expect(tensorData(g, 'blk.3.attn_v.weight')).toEqual(sourceData(ckpt, 'layers.3.self_attn.v_proj.weight'));
  });

  it('writes 1-D tensors and ssm_conv1d as F32 whatever --dtype says; q8_0 on 2-D weights', () => {
    const bf = parseGguf(v2.gguf.bf16);
    const q8 = parseGguf(v2.gguf.q8_0);
    expect(kvValue(bf, 'general.file_type')).toBe(32);
    expect(kvValue(q8, 'general.file_type')).toBe(7);
    for (const g of [bf, q8]) {
      for (const t of g.tensors.values()) {
        if (t.ne.length === 1 || t.name.endsWith('ssm_conv1d.weight')) expect(t.type, t.name).toBe(GgmlType.F32);
        else expect(t.type, t.name).toBe(g === bf ? GgmlType.BF16 : GgmlType.Q8_0);
      }
    }
    // The bf16 source converts to bf16 exactly; q8_0 stays within its step.
    const src = sourceData(v2.ckpt, 'layers.0.mlp.gate_proj.weight');
    expect(tensorData(bf, 'blk.0.ffn_gate.weight')).toEqual(src);
    const q = tensorData(q8, 'blk.0.ffn_gate.weight');
    let maxErr = 0;
    let maxAbs = 0;
    for (let i = 0; i < src.length; i++) { maxErr = Math.max(maxErr, Math.abs(q[i]! - src[i]!)); maxAbs = Math.max(maxAbs, Math.abs(src[i]!)); }
    expect(maxErr).toBeLessThanOrEqual((maxAbs / 127) * 0.6);
    // Norm +1 survives in F32 for every dtype.
    expect(tensorData(q8, 'output_norm.weight')).toEqual(tensorData(v2.parsed, 'output_norm.weight'));
  });

  it("is readable by node-llama-cpp's GGUF parser", async () => {
    const info = await readGgufFileInfo(v2.gguf.f32, { readTensorInfo: true, logWarnings: false });
    expect(info.metadata.general.architecture).toBe('qwen35');
    expect(info.tensorInfo?.length).toBe(v2.parsed.tensors.size);
    const embd = info.tensorInfo?.find((t) => t.name === 'token_embd.weight');
    expect(embd?.dimensions.map(Number)).toEqual([v2.ckpt.config.hiddenSize, 248320]);
  });

  it('llama.cpp loads the converted models and produces finite, non-uniform outputs', async () => {
    const prompt = pseudoRandomIds(6, 11);
    for (const file of [eq.gguf.f32, v2.gguf.f32, v2.gguf.bf16, v2.gguf.q8_0]) {
      const ref = await openRef(file);
      expect(ref.vocabSize).toBe(248320);
      const all = file.endsWith('f32.gguf');
      const res = await ref.evaluate(prompt, { newTokens: 4, logSoftmax: all ? 'all' : 'last' });
      const rows = all ? prompt.length : 1;
      expect(res.rowPositions).toEqual(all ? [...prompt.keys()] : [prompt.length - 1]);
      expect(res.logSoftmax.length).toBe(rows * 248320);
      expect(res.greedy).toHaveLength(4);
      for (let r = 0; r < rows; r++) {
        const row = res.logSoftmax.subarray(r * 248320, (r + 1) * 248320);
        let max = -Infinity;
        let min = Infinity;
        let sum = 0;
        let nonFinite = 0;
        for (const v of row) {
          if (!Number.isFinite(v)) { nonFinite++; continue; }
          max = Math.max(max, v);
          min = Math.min(min, v);
          sum += Math.exp(v);
        }
        expect(nonFinite, `${file} row ${r}`).toBe(0);
        expect(sum).toBeCloseTo(1, 4);
        // Far from uniform (log 248320 = 12.42): a clear top token and a wide spread.
        expect(max).toBeGreaterThan(-10);
        expect(max - min).toBeGreaterThan(5);
      }
      // Greedy continuation starts with the argmax of the last row.
      const last = res.logSoftmax.subarray((rows - 1) * 248320);
      let am = 0;
      for (let i = 1; i < 248320; i++) if (last[i]! > last[am]!) am = i;
      expect(res.greedy[0]).toBe(am);
    }
  });

  it('converting the same checkpoint twice gives identical files; f32 and bf16 GGUFs of a bf16 source agree', async () => {
    const again = join(root, 'v2-again.gguf');
    await convertCheckpoint(v2.dir, again, { dtype: 'f32' });
    expect(readFileSync(again).equals(readFileSync(v2.gguf.f32))).toBe(true);
    const prompt = pseudoRandomIds(8, 3);
    const a = await (await openRef(v2.gguf.f32)).evaluate(prompt, { newTokens: 8 });
    const b = await (await openRef(v2.gguf.f32)).evaluate(prompt, { newTokens: 8 });
    expect(b.greedy).toEqual(a.greedy); // fresh state each evaluation
    expect(compareLogSoftmax(b.logSoftmax, a.logSoftmax, 248320).maxAbs).toBe(0);
    // llama.cpp runs bf16 weights with bf16-rounded activations: close, not identical.
    const c = await (await openRef(v2.gguf.bf16)).evaluate(prompt, { newTokens: 0 });
    const cmp = compareLogSoftmax(c.logSoftmax, a.logSoftmax, 248320);
    expect(cmp.maxAbs).toBeLessThan(1);
  });

  it('the reference fast path equals the public controlledEvaluate path', async () => {
    const prompt = pseudoRandomIds(5, 9);
    const fast = await openRef(eq.gguf.f32);
    expect(fast.fastPath).toBe(true);
    const slow = await LlamaRef.load(eq.gguf.f32, { publicApiOnly: true });
    try {
      expect(slow.fastPath).toBe(false);
      const a = await fast.evaluate(prompt, { newTokens: 3 });
      const b = await slow.evaluate(prompt, { newTokens: 3 });
      expect(b.greedy).toEqual(a.greedy);
      expect(compareLogSoftmax(b.logSoftmax, a.logSoftmax, 248320).maxAbs).toBe(0);
    } finally {
      await slow.close();
    }
  });

  it('MTP: --mtp writes the nextn block at layer num_hidden_layers and llama.cpp still loads it', async () => {
    const dir = join(root, 'mtp');
    await writeSynthCheckpoint({ preset: 'tiny', out: dir, dtype: 'bf16', seed: 5, mtp: true });
    const file = join(root, 'mtp.gguf');
    await convertCheckpoint(dir, file, { dtype: 'bf16', mtp: true });
    const g = parseGguf(file);
    expect(kvValue(g, 'qwen35.block_count')).toBe(5);
    expect(kvValue(g, 'qwen35.nextn_predict_layers')).toBe(1);
    expect(g.tensors.get('blk.4.nextn.eh_proj.weight')?.ne).toEqual([256, 128]);
    expect(g.tensors.has('blk.4.nextn.enorm.weight')).toBe(true);
    expect(g.tensors.has('blk.4.nextn.hnorm.weight')).toBe(true);
    expect(g.tensors.has('blk.4.nextn.shared_head_norm.weight')).toBe(true);
    expect(g.tensors.has('blk.4.attn_q.weight')).toBe(true);
    const ckpt = loadCheckpoint(dir, { mtp: true });
    const enorm = tensorData(g, 'blk.4.nextn.enorm.weight');
    const src = sourceData(ckpt, 'mtp.pre_fc_norm_embedding.weight');
    for (let i = 0; i < src.length; i++) expect(enorm[i]).toBeCloseTo(src[i]! + 1, 6);
    // Without --mtp the same checkpoint converts to the plain model.
    const plain = join(root, 'mtp-plain.gguf');
    await convertCheckpoint(dir, plain, { dtype: 'bf16' });
    expect(kvValue(parseGguf(plain), 'qwen35.block_count')).toBe(4);
    const ref = await LlamaRef.load(file);
    try {
      const res = await ref.evaluate(pseudoRandomIds(4, 1), { newTokens: 2, logSoftmax: 'last' });
      expect(res.greedy).toHaveLength(2);
    } finally {
      await ref.close();
    }
  });
});

describe('bench convert: bad input', () => {
  const run = async (args: string[]): Promise<{ err?: unknown; code: number }> => {
    const program = new Command('bench').exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
    let code = -1;
    registerConvert(program, (c) => { code = c; });
    try {
      await program.parseAsync(['node', 'bench', 'convert', ...args]);
      return { code };
    } catch (err) {
      return { err, code };
    }
  };
  let dir: string;
  beforeAll(() => { dir = mkdtempSync(join(tmpdir(), 'lumen-gguf-cli-')); });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('names the flag or file at fault', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--out', join(dir, 'x.gguf')], /--model-path/],
      [['--model-path', dir], /--out/],
      [['--model-path', join(dir, 'nope'), '--out', join(dir, 'x.gguf')], /--model-path .*nope/],
      [['--model-path', dir, '--out', join(dir, 'no-dir', 'x.gguf')], /--out: directory .*no-dir does not exist/],
      [['--model-path', dir, '--out', join(dir, 'x.gguf'), '--dtype', 'q3_k'], /--dtype: 'q3_k' is not one of f32, bf16, f16, q8_0, q4_0/],
      [['--model-path', dir, '--out', join(dir, 'x.gguf')], /config\.json/],
    ];
    for (const [args, re] of cases) {
      const { err } = await run(args);
      expect(err, args.join(' ')).toBeInstanceOf(UsageError);
      expect((err as Error).message).toMatch(re);
      expect((err as Error).message).not.toContain('\n');
    }
    const { err } = await run(['--bogus']);
    expect(err).toBeInstanceOf(CommanderError);
  });
});
