// A K-quant GGUF for tests without a quantizer: the metadata, vectors and conv taps of an f32 GGUF
// (bench convert's), with every matrix replaced by random *valid* blocks of the type the
// `Q4_K_M` mix gives it (llama-quantize's rules: the embedding / output Q6_K; attn_v, attn_qkv
// and ffn_down Q6_K on the "more bits" layers, i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2; Q4_K
// elsewhere), or every matrix Q6_K (`Q6_K`), IQ4_NL (`IQ4_NL`) or IQ4_XS (`IQ4_XS`). The block scales are chosen so the weights have about the synthetic checkpoint's
// spread. This tests the loader and the kernels against llama.cpp on identical weights; it is not
// a quantizer (the weights do not approximate anything). Row lengths must be multiples of 256.
import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { f32ToF16 } from '../../src/convert/quantize.js';
import { parseGgufHeader, type GgufKv } from '../../src/model/gguf-reader.js';
import { Rng } from '../../src/util/rng.js';

const Q4_K = 12;
const Q6_K = 14;
const IQ4_NL = 20;
const IQ4_XS = 23;
const F32 = 0;
const BLOCK_BYTES: Record<number, number> = { [Q4_K]: 144, [Q6_K]: 210, [IQ4_NL]: 18, [IQ4_XS]: 136 };
const BLOCK_VALUES: Record<number, number> = { [Q4_K]: 256, [Q6_K]: 256, [IQ4_NL]: 32, [IQ4_XS]: 256 };
export type RandomQuantMix = 'Q4_K_M' | 'Q6_K' | 'IQ4_NL' | 'IQ4_XS';
const FILE_TYPE: Record<RandomQuantMix, number> = { Q4_K_M: 15, Q6_K: 18, IQ4_NL: 25, IQ4_XS: 30 };

/** The Q4_K_M type of a 2-D tensor `name` in a model of `nLayers` layers. */
function mixType(name: string, nLayers: number, mix: RandomQuantMix): number {
  if (mix === 'Q6_K') return Q6_K;
  if (mix === 'IQ4_NL') return IQ4_NL;
  if (mix === 'IQ4_XS') return IQ4_XS;
  if (name === 'token_embd.weight' || name === 'output.weight') return Q6_K;
  const m = /^blk\.(\d+)\.(attn_v|attn_qkv|ffn_down)\.weight$/.exec(name);
  if (m) {
    const i = Number(m[1]);
    const e = Math.floor(nLayers / 8);
    if (i < e || i >= Math.floor((7 * nLayers) / 8) || (i - e) % 3 === 2) return Q6_K;
  }
  return Q4_K;
}

function randomBlocks(type: number, nBlocks: number, amplitude: number, rng: Rng): Buffer {
  const bb = BLOCK_BYTES[type]!;
  const out = Buffer.alloc(nBlocks * bb);
  for (let i = 0; i < out.length; i++) out[i] = Math.floor(rng.nextFloat() * 256);
  for (let b = 0; b < nBlocks; b++) {
    const o = b * bb;
    const jitter = 0.5 + rng.nextFloat();
    if (type === IQ4_NL || type === IQ4_XS) {
      // w = d T[q] (IQ4_XS: d (ls - 32) T[q], ls in 0..63): rms of T ~ 65, of ls - 32 ~ 18.5.
      const d = (amplitude / (type === IQ4_NL ? 65 : 1200)) * jitter * (rng.nextFloat() < 0.5 ? -1 : 1);
      out.writeUInt16LE(f32ToF16(d), o);
    } else if (type === Q4_K) {
      // w = d sc q - dmin m with sc, m in 0..63 and q in 0..15: spread ~ 240 d, mean ~0 at dmin = 7.5 d.
      const d = (amplitude / 240) * jitter;
      out.writeUInt16LE(f32ToF16(d), o);
      out.writeUInt16LE(f32ToF16(7.5 * d), o + 2);
    } else {
      // w = d sc (q - 32) with sc a signed byte and q in 0..63: spread ~ 1000 d.
      const d = (amplitude / 1000) * jitter * (rng.nextFloat() < 0.5 ? -1 : 1);
      out.writeUInt16LE(f32ToF16(d), o + 208);
    }
  }
  return out;
}

class Sink {
  parts: Buffer[] = [];
  size = 0;
  put(b: Buffer): void { this.parts.push(b); this.size += b.length; }
  u32(v: number): void { const b = Buffer.alloc(4); b.writeUInt32LE(v); this.put(b); }
  u64(v: number | bigint): void { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); this.put(b); }
  str(s: string): void { const b = Buffer.from(s, 'utf8'); this.u64(b.length); this.put(b); }
  scalar(type: number, v: unknown): void {
    const b = Buffer.alloc(8);
    switch (type) {
      case 0: b.writeUInt8(v as number); return this.put(b.subarray(0, 1));
      case 1: b.writeInt8(v as number); return this.put(b.subarray(0, 1));
      case 2: b.writeUInt16LE(v as number); return this.put(b.subarray(0, 2));
      case 3: b.writeInt16LE(v as number); return this.put(b.subarray(0, 2));
      case 4: b.writeUInt32LE(v as number); return this.put(b.subarray(0, 4));
      case 5: b.writeInt32LE(v as number); return this.put(b.subarray(0, 4));
      case 6: b.writeFloatLE(v as number); return this.put(b.subarray(0, 4));
      case 7: b.writeUInt8(v ? 1 : 0); return this.put(b.subarray(0, 1));
      case 8: return this.str(v as string);
      case 10: b.writeBigUInt64LE(BigInt(v as number)); return this.put(b);
      case 11: b.writeBigInt64LE(BigInt(v as number)); return this.put(b);
      case 12: b.writeDoubleLE(v as number); return this.put(b);
      default: throw new Error(`value type ${type}`);
    }
  }
  kv(key: string, e: GgufKv): void {
    this.str(key);
    this.u32(e.type);
    if (e.type === 9) {
      const arr = e.value as unknown[];
      this.u32(e.itemType!);
      this.u64(arr.length);
      for (const x of arr) this.scalar(e.itemType!, x);
    } else {
      this.scalar(e.type, e.value);
    }
  }
}

/** Writes `out`: `src` (an f32 GGUF) with its matrices as random blocks of the `mix` layout. */
export function writeRandomQuantGguf(src: string, out: string, mix: RandomQuantMix, seed: number): void {
  const g = parseGgufHeader(src);
  const rng = new Rng(seed);
  const nLayers = g.kv.get('qwen35.block_count')!.value as number;
  const a = g.alignment;
  const pad = (n: number) => (a - (n % a)) % a;
  const tensors: Array<{ name: string; ne: number[]; type: number; data: Buffer }> = [];
  const fd = openSync(src, 'r');
  try {
    for (const name of g.tensorOrder) {
      const t = g.tensors.get(name)!;
      if (t.type !== F32) throw new Error(`${src}: tensor ${name} is not F32`);
      if (t.ne.length === 2 && !name.endsWith('ssm_conv1d.weight')) {
        const type = mixType(name, nLayers, mix);
        if (t.ne[0]! % 256 !== 0) throw new Error(`${name}: row length ${t.ne[0]} is not a multiple of 256`);
        const amplitude = name === 'token_embd.weight' || name === 'output.weight' ? 4 / Math.sqrt(t.ne[0]!) : 1 / Math.sqrt(t.ne[0]!);
        tensors.push({ name, ne: t.ne, type, data: randomBlocks(type, (t.ne[0]! / BLOCK_VALUES[type]!) * t.ne[1]!, amplitude, rng) });
      } else {
        const data = Buffer.alloc(t.nbytes);
        readSync(fd, data, 0, t.nbytes, g.dataStart + t.offset);
        tensors.push({ name, ne: t.ne, type: t.type, data });
      }
    }
  } finally {
    closeSync(fd);
  }
  const h = new Sink();
  h.put(Buffer.from('GGUF', 'latin1'));
  h.u32(3);
  h.u64(tensors.length);
  h.u64(g.kv.size);
  for (const [key, e] of g.kv) h.kv(key, key === 'general.file_type' ? { type: 4, value: FILE_TYPE[mix] } : e);
  let offset = 0;
  for (const t of tensors) {
    h.str(t.name);
    h.u32(t.ne.length);
    for (const d of t.ne) h.u64(d);
    h.u32(t.type);
    h.u64(offset);
    offset += t.data.length + pad(t.data.length);
  }
  h.put(Buffer.alloc(pad(h.size)));
  for (const t of tensors) {
    h.put(t.data);
    h.put(Buffer.alloc(pad(t.data.length)));
  }
  const ofd = openSync(out, 'w');
  try {
    for (const p of h.parts) writeSync(ofd, p);
  } finally {
    closeSync(ofd);
  }
}
