// Which ggml type each tensor of a quantized qwen35 GGUF gets: llama.cpp's per-tensor rules
// (src/llama-quant.cpp: tensor_allows_quantization, llama_tensor_get_type_impl for the file types
// below, tensor_type_fallback), restricted to what a dense qwen35 model contains. QUANT_SCHEMES is
// the one table: the writer, `bench convert --help`, docs/quantization.md and the tests read it.
import { GgmlType } from './gguf-writer.js';

export const QUANT_DTYPES = ['q8_0', 'q4_0', 'q4_k', 'q5_k', 'q6_k', 'q4_k_m', 'q5_k_m', 'q6_k_m', 'iq4_nl', 'iq4_xs'] as const;
export type QuantDtype = (typeof QUANT_DTYPES)[number];

export function isQuantDtype(s: string): s is QuantDtype {
  return (QUANT_DTYPES as readonly string[]).includes(s);
}

export interface QuantScheme {
  /** What llama-quantize call writes the same file (the tests run exactly this). */
  llama: { ftypeName: string; pure: boolean };
  /** llama_ftype written to general.file_type (llama-quantize writes the ftype it was given, --pure or not). */
  fileType: number;
  /** The 2-D weights' type (llama_ftype_get_default_type). */
  base: GgmlType;
  /** The output head, and the token embedding when tied (llama.cpp quantizes the shared tensor as the output). */
  output: GgmlType;
  /** attn_v / attn_qkv on the layers `layers` picks (else `base`). */
  attnVMoreBits: GgmlType;
  /** ffn_down on the layers `layers` picks (else `base`). */
  ffnDownMoreBits: GgmlType;
  /**
   * Which layers get the *MoreBits types: 'use_more_bits' (the Q4_K_M / Q5_K_M rule: attn_v and
   * ffn_down on use_more_bits(i, n)); 'iq4' (llama.cpp's IQ4_NL / IQ4_XS rule: attn_v / attn_qkv on
   * every layer when n_head / n_head_kv >= 4, ffn_down on the first n / 8 layers).
   */
  layers: 'use_more_bits' | 'iq4';
  summary: string;
}

const rules = (base: GgmlType, output: GgmlType, moreBits: GgmlType, layers: QuantScheme['layers'] = 'use_more_bits') =>
  ({ base, output, attnVMoreBits: moreBits, ffnDownMoreBits: moreBits, layers });

export const QUANT_SCHEMES: Readonly<Record<QuantDtype, QuantScheme>> = {
  q8_0: {
    llama: { ftypeName: 'Q8_0', pure: false }, fileType: 7, ...rules(GgmlType.Q8_0, GgmlType.Q8_0, GgmlType.Q8_0),
    summary: 'every 2-D weight Q8_0 (as llama-quantize Q8_0)',
  },
  q4_0: {
    llama: { ftypeName: 'Q4_0', pure: false }, fileType: 2, ...rules(GgmlType.Q4_0, GgmlType.Q6_K, GgmlType.Q4_0),
    summary: '2-D weights Q4_0, output / tied embedding Q6_K (as llama-quantize Q4_0)',
  },
  q4_k: {
    llama: { ftypeName: 'Q4_K_M', pure: true }, fileType: 15, ...rules(GgmlType.Q4_K, GgmlType.Q4_K, GgmlType.Q4_K),
    summary: 'pure: every 2-D weight Q4_K, output and embedding included (as llama-quantize --pure Q4_K_M)',
  },
  q5_k: {
    llama: { ftypeName: 'Q5_K_M', pure: true }, fileType: 17, ...rules(GgmlType.Q5_K, GgmlType.Q5_K, GgmlType.Q5_K),
    summary: 'pure: every 2-D weight Q5_K (as llama-quantize --pure Q5_K_M)',
  },
  q6_k: {
    llama: { ftypeName: 'Q6_K', pure: true }, fileType: 18, ...rules(GgmlType.Q6_K, GgmlType.Q6_K, GgmlType.Q6_K),
    summary: 'pure: every 2-D weight Q6_K (as llama-quantize --pure Q6_K)',
  },
  q4_k_m: {
    llama: { ftypeName: 'Q4_K_M', pure: false }, fileType: 15, ...rules(GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.Q6_K),
    summary: 'Q4_K; output / tied embedding Q6_K; attn_v, attn_qkv, ffn_down Q6_K on the use_more_bits layers (llama-quantize Q4_K_M)',
  },
  q5_k_m: {
    llama: { ftypeName: 'Q5_K_M', pure: false }, fileType: 17, ...rules(GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.Q6_K),
    summary: 'Q5_K; output / tied embedding Q6_K; attn_v, attn_qkv, ffn_down Q6_K on the use_more_bits layers (llama-quantize Q5_K_M)',
  },
  q6_k_m: {
    llama: { ftypeName: 'Q6_K', pure: false }, fileType: 18, ...rules(GgmlType.Q6_K, GgmlType.Q6_K, GgmlType.Q6_K),
    summary: "llama-quantize's Q6_K mix (llama.cpp has no Q6_K_M): every 2-D weight Q6_K; for qwen35 the same types as q6_k",
  },
  iq4_nl: {
    llama: { ftypeName: 'IQ4_NL', pure: false }, fileType: 25, ...rules(GgmlType.IQ4_NL, GgmlType.Q6_K, GgmlType.Q5_K, 'iq4'),
    summary: 'IQ4_NL; output / tied embedding Q6_K; ffn_down Q5_K on the first n/8 layers, attn_v/attn_qkv Q5_K if n_head/n_head_kv >= 4 (llama-quantize IQ4_NL, no imatrix)',
  },
  iq4_xs: {
    llama: { ftypeName: 'IQ4_XS', pure: false }, fileType: 30, ...rules(GgmlType.IQ4_XS, GgmlType.Q6_K, GgmlType.Q5_K, 'iq4'),
    summary: 'IQ4_XS (IQ4_NL on rows not a multiple of 256); output Q6_K; ffn_down Q5_K on the first n/8 layers, attn_v/attn_qkv Q5_K if n_head/n_head_kv >= 4 (llama-quantize IQ4_XS, no imatrix)',
  },
};

/** ggml block size of the types the mixes use. */
const BLOCK: Partial<Record<GgmlType, number>> = {
  [GgmlType.Q8_0]: 32, [GgmlType.Q4_0]: 32, [GgmlType.Q5_0]: 32, [GgmlType.Q5_1]: 32,
  [GgmlType.Q4_K]: 256, [GgmlType.Q5_K]: 256, [GgmlType.Q6_K]: 256, [GgmlType.F16]: 1,
  [GgmlType.IQ4_NL]: 32, [GgmlType.IQ4_XS]: 256,
};

/** tensor_type_fallback: a 256-block type on rows that are not a multiple of 256, then F16 if 32 does not divide either. */
const FALLBACK: Partial<Record<GgmlType, GgmlType>> = {
  [GgmlType.Q4_K]: GgmlType.Q5_0,
  [GgmlType.Q5_K]: GgmlType.Q5_1,
  [GgmlType.Q6_K]: GgmlType.Q8_0,
  [GgmlType.IQ4_XS]: GgmlType.IQ4_NL,
};

export function fallbackType(type: GgmlType, ncols: number): GgmlType {
  if (ncols % BLOCK[type]! === 0) return type;
  const next = FALLBACK[type] ?? type;
  return ncols % BLOCK[next]! === 0 ? next : GgmlType.F16;
}

/** use_more_bits: the first and last eighth of the layers and every third one in between. */
export function useMoreBits(i: number, n: number): boolean {
  const e = Math.trunc(n / 8);
  return i < e || i >= Math.trunc((7 * n) / 8) || (i - e) % 3 === 2;
}

/** ggml_n_dims: dimensions up to the last one that is not 1. */
const nDims = (ne: readonly number[]) => {
  let n = ne.length;
  while (n > 1 && ne[n - 1] === 1) n--;
  return n;
};

/**
 * tensor_allows_quantization for the tensors a qwen35 GGUF holds: 2-D or more, the name ends in
 * "weight", and it is not a norm or ssm_conv1d (1-D tensors, ssm_a, ssm_dt.bias stay as written).
 */
export function llamaQuantizes(name: string, ne: readonly number[]): boolean {
  return nDims(ne) >= 2 && name.endsWith('weight') && !name.includes('_norm.weight') && !name.includes('ssm_conv1d');
}

type Category = 'output' | 'token_embd' | 'attn_v' | 'ffn_down' | 'other';

/** tensor_get_category, for the names a qwen35 GGUF uses (attn_qkv counts as attn_v, as llama.cpp treats it). */
function category(name: string): Category {
  if (name === 'output.weight') return 'output';
  if (name === 'token_embd.weight') return 'token_embd';
  if (name.includes('attn_qkv.weight') || name.includes('attn_v.weight')) return 'attn_v';
  if (name.includes('ffn_down')) return 'ffn_down';
  return 'other';
}

/** llama.cpp's tensor order (weight_name_comparer): by layer (non-layer tensors first), then by name. */
function llamaOrder(a: string, b: string): number {
  const layer = (s: string) => { const m = /^blk\.(\d+)\./.exec(s); return m ? Number(m[1]) : -1; };
  const la = layer(a), lb = layer(b);
  if (la !== lb) return la - lb;
  return a < b ? -1 : a > b ? 1 : 0;
}

export interface MixTensor {
  name: string;
  /** ggml order: ne[0] is the row length. */
  ne: readonly number[];
}

/**
 * The type of every tensor llama.cpp would quantize, for `dtype` over the file's tensors
 * (`blockCount`: qwen35.block_count; `nGqa`: llama.cpp's n_gqa(), head_count / head_count_kv in
 * integer division, which only the 'iq4' rule reads); tensors it leaves alone are absent from the map.
 */
export function planQuantTypes(dtype: QuantDtype, tensors: readonly MixTensor[], blockCount: number, nGqa = 0): Map<string, GgmlType> {
  const s = QUANT_SCHEMES[dtype];
  const names = tensors.map((t) => t.name);
  const tied = !names.includes('output.weight');
  const nAttnV = names.filter((n) => category(n) === 'attn_v').length;
  let iAttnV = 0;
  let iFfnDown = 0;
  const out = new Map<string, GgmlType>();
  for (const t of [...tensors].sort((a, b) => llamaOrder(a.name, b.name))) {
    if (!llamaQuantizes(t.name, t.ne)) continue;
    const cat = category(t.name);
    let type = s.base;
    if (!s.llama.pure) {
      if (cat === 'output' || (tied && cat === 'token_embd')) {
        // Rows that the base type's block does not divide go to Q8_0 before any fallback.
        type = t.ne[0]! % BLOCK[s.base]! !== 0 ? GgmlType.Q8_0 : s.output;
      } else if (cat === 'attn_v') {
        if (s.layers === 'iq4' ? nGqa >= 4 : useMoreBits(iAttnV, nAttnV)) type = s.attnVMoreBits;
        iAttnV++;
      } else if (cat === 'ffn_down') {
        if (s.layers === 'iq4' ? iFfnDown < Math.trunc(blockCount / 8) : useMoreBits(iFfnDown, blockCount)) type = s.ffnDownMoreBits;
        iFfnDown++;
      }
    }
    out.set(t.name, fallbackType(type, t.ne[0]!));
  }
  return out;
}
