// Synthetic Qwen3.5 checkpoints: real directory layout, real tensor names and shapes, seeded random
// weights of realistic scale, written tensor by tensor so even the 9B preset never sits in memory.
//
// Weight initialisation (per tensor, its own PRNG stream keyed on (seed, canonical name), so the
// values do not depend on sharding, prefix or tensor order):
//   embed_tokens / lm_head            N(0, (4/sqrt(H))^2)   -> logits with sd ~4 (top ~18 of 248k)
//   input projections (q/k/v, qkv, z,  N(0, 1/fan_in)        -> O(1) activations
//     gate/up, mtp.fc)
//   in_proj_a, in_proj_b              N(0, 0.5^2/fan_in)
//   output projections (o_proj,        N(0, 1.5^2/fan_in)    -> the layers, not the input token's
//     out_proj, down_proj)                                      embedding, dominate the residual
//   zero-centred RMSNorm weights      N(0, 0.05^2)          (applied as 1 + w)
//   linear_attn.norm.weight           1 + N(0, 0.05^2)      (plain multiplicative)
//   linear_attn.A_log                 log(U(1, 16))
//   linear_attn.dt_bias               softplus^-1(dt), dt ~ logU(1e-3, 0.1)
//   linear_attn.conv1d.weight         U(-0.5, 0.5)
//
// Why output gain 1.5: with a tied head the logit of the current input token t carries
// |E_t|^2 / rms(h) ~ 16 / rms(h) through the residual stream; at gain 0.5 (rms(h) ~ 0.8 in the
// tiny model) that beats the best of 248k random logits (~20) about half the time and greedy
// decoding repeats its input. At 1.5 the residual rms is ~2 (tiny) to ~5 (0.8b) and greedy output
// varies (f64 reference, tiny, 6 seeds x 24 steps: 22-24 distinct tokens). Top-2 gaps follow
// Gaussian extreme-value statistics: median ~0.6, occasionally < 0.01 -- ample for f32-vs-f32
// parity, not for bf16-vs-f32 greedy comparisons. (Heavier-tailed embedding rows widen the gaps
// but push the logit range past what llama.cpp's f32 probabilities can represent.)
//
// bf16 values are the f32 values rounded to nearest even. Like the published Qwen3.5 checkpoints,
// a bf16 synth stores linear_attn.A_log and linear_attn.norm.weight as F32 (f32SsmParams).

import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseConfig, textConfigToJson } from './config.js';
import { countParams, expectedTensors, isCheckpointFileName, PREFIX_NESTED } from './checkpoint.js';
import { presetConfig, presetThinksByDefault, type PresetName } from './presets.js';
import { DTYPE_SIZE, f32ArrayToBf16, numel, SafetensorsWriter, type TensorSpec } from './safetensors.js';
import { buildSynthTokenizer, BPE_VOCAB_SIZE, SPECIAL_TOKENS, synthTokenizerConfig } from './synth-tokenizer.js';
import { isTokenizerFileName } from './tokenizer.js';
import type { DType, TextConfig } from './types.js';
import { Rng, standardNormalTable, uniformTable } from '../util/rng.js';

export type SynthDType = 'bf16' | 'f32';

/** The seed of `bench synth` without --seed, and of `--model-path synthetic:<preset>`. */
export const DEFAULT_SYNTH_SEED = 0;

export interface SynthOptions {
  preset: PresetName;
  /** Output directory (created; earlier model*.safetensors / index files in it are removed first). */
  out: string;
  /** Default 'bf16'. */
  dtype?: SynthDType;
  /** Default DEFAULT_SYNTH_SEED (0). Same seed -> bit-identical tensors. */
  seed?: number;
  /** Number of safetensors shards (1 -> model.safetensors; N > 1 -> model-0000i-of-0000N + index). Default 1. */
  shards?: number;
  /** Text-config fields replacing the preset's (e.g. { linearNumValueHeads: 4 }, { tieWordEmbeddings: false }). */
  overrides?: Partial<TextConfig>;
  /** Write mtp.* tensors. Default false. */
  mtp?: boolean;
  /** Write a tiny model.visual.* stub (exercises the loader's skip path). Default true. */
  vision?: boolean;
  /** Write tokenizer.json / tokenizer_config.json. Default true (requires vocab >= tokenizerBpeVocab + 33). */
  tokenizer?: boolean;
  /**
   * BPE tokens of the written tokenizer (default 248044, the real layout: specials at their real
   * ids). A smaller value writes a small tokenizer (fewer merges, specials right after the BPE
   * tokens) that fits a small vocab_size; generation_config.json then names those special ids.
   */
  tokenizerBpeVocab?: number;
  /** Weight-name prefix. Default 'model.language_model.' (real layout); 'model.' mimics flattened copies. */
  prefix?: 'model.language_model.' | 'model.';
  /** Write the text keys at the top level of config.json instead of under text_config. Default false. */
  flatConfig?: boolean;
  /** Store A_log and linear_attn.norm.weight as F32 in a bf16 checkpoint (as Qwen3.5 ships). Default true. */
  f32SsmParams?: boolean;
  /** Chat template's thinking default. Default: true for 4b/9b, false otherwise. */
  thinkingDefault?: boolean;
  /** Called after each tensor with bytes written so far and the total. */
  onProgress?: (doneBytes: number, totalBytes: number) => void;
}

export interface SynthResult {
  dir: string;
  config: TextConfig;
  /** Files written (absolute paths). */
  files: string[];
  /** Total bytes of the safetensors files. */
  bytes: number;
  /** Text-model parameters (no MTP, no vision). */
  paramCount: number;
  mtpParamCount: number;
  seconds: number;
}

/** The preset's config with overrides applied (layer types re-derived when only the layer count changes). Validated. */
export function resolveSynthConfig(preset: PresetName, overrides: Partial<TextConfig> = {}): TextConfig {
  const base = presetConfig(preset);
  const c: TextConfig = { ...base, ...overrides };
  if (overrides.layerTypes) {
    if (overrides.numLayers === undefined) c.numLayers = overrides.layerTypes.length;
  } else if (overrides.numLayers !== undefined && overrides.numLayers !== base.numLayers) {
    c.layerTypes = [];
    for (let i = 0; i < c.numLayers; i++) c.layerTypes.push((i + 1) % 4 === 0 ? 'full_attention' : 'linear_attention');
  }
  c.layerTypes = c.layerTypes.slice();
  c.mropeSection = c.mropeSection.slice();
  // Round-trip through the config parser: the same checks a loader applies.
  return parseConfig({ text_config: textConfigToJson(c) }, `synth config (preset ${preset})`);
}

type Init =
  | { kind: 'normal'; mean: number; std: number }
  | { kind: 'uniform'; lo: number; hi: number }
  | { kind: 'a_log' }
  | { kind: 'dt_bias' };

function initFor(name: string, shape: number[], c: TextConfig): Init {
  const H = c.hiddenSize;
  if (name === 'embed_tokens.weight' || name === 'lm_head.weight') return { kind: 'normal', mean: 0, std: 4 / Math.sqrt(H) };
  if (name.endsWith('linear_attn.A_log')) return { kind: 'a_log' };
  if (name.endsWith('linear_attn.dt_bias')) return { kind: 'dt_bias' };
  if (name.endsWith('linear_attn.conv1d.weight')) return { kind: 'uniform', lo: -0.5, hi: 0.5 };
  if (name.endsWith('linear_attn.norm.weight')) return { kind: 'normal', mean: 1, std: 0.05 };
  if (shape.length === 1) return { kind: 'normal', mean: 0, std: 0.05 }; // zero-centred RMSNorm weights
  const fanIn = shape[shape.length - 1]!;
  let gain = 1;
  if (/(o_proj|out_proj|down_proj)\.weight$/.test(name)) gain = OUT_GAIN;
  else if (/in_proj_[ab]\.weight$/.test(name)) gain = 0.5;
  return { kind: 'normal', mean: 0, std: gain / Math.sqrt(fanIn) };
}

const CHUNK = 1 << 20;
/** Output projections: std = OUT_GAIN / sqrt(fan_in). */
const OUT_GAIN = 1.5;

class TableCache {
  private bf16 = new Map<string, Uint16Array>();
  private f32 = new Map<string, Float32Array>();

  get(init: Init & { kind: 'normal' | 'uniform' }, dtype: DType): Uint16Array | Float32Array {
    const key = init.kind === 'normal' ? `n:${init.mean}:${init.std}` : `u:${init.lo}:${init.hi}`;
    const cache = dtype === 'F32' ? this.f32 : this.bf16;
    const hit = cache.get(key);
    if (hit) return hit;
    const t = new Float32Array(65536);
    if (init.kind === 'normal') {
      const q = standardNormalTable();
      for (let i = 0; i < 65536; i++) t[i] = init.mean + init.std * q[i]!;
    } else {
      t.set(uniformTable(init.lo, init.hi));
    }
    const table = dtype === 'F32' ? t : f32ArrayToBf16(t);
    cache.set(key, table as never);
    return table;
  }
}

interface PlannedTensor {
  canonical: string;
  spec: TensorSpec;
  init: Init;
  nbytes: number;
}

function writeTensorData(w: SafetensorsWriter, t: PlannedTensor, seed: number, tables: TableCache): void {
  const rng = new Rng(seed, t.canonical);
  const n = numel(t.spec.shape);
  const f32 = t.spec.dtype === 'F32';
  if (t.init.kind === 'normal' || t.init.kind === 'uniform') {
    const table = tables.get(t.init, t.spec.dtype);
    if (f32) {
      const buf = new Float32Array(Math.min(n, CHUNK));
      for (let done = 0; done < n; done += CHUNK) {
        const m = Math.min(CHUNK, n - done);
        const out = m === buf.length ? buf : buf.subarray(0, m);
        rng.fillF32FromTable(out, table as Float32Array);
        w.writeArray(out);
      }
    } else {
      const buf = new Uint16Array(Math.min(n, CHUNK));
      for (let done = 0; done < n; done += CHUNK) {
        const m = Math.min(CHUNK, n - done);
        const out = m === buf.length ? buf : buf.subarray(0, m);
        rng.fillU16FromTable(out, table as Uint16Array);
        w.writeArray(out);
      }
    }
    return;
  }
  // Small per-head vectors: exact draws.
  const vals = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    if (t.init.kind === 'a_log') {
      vals[i] = Math.log(1 + 15 * rng.nextFloat());
    } else {
      const dt = Math.exp(Math.log(1e-3) + (Math.log(0.1) - Math.log(1e-3)) * rng.nextFloat());
      vals[i] = Math.log(Math.expm1(dt)); // softplus^-1
    }
  }
  w.writeArray(f32 ? vals : f32ArrayToBf16(vals));
}

function shardName(i: number, n: number): string {
  return `model-${String(i + 1).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.safetensors`;
}

/** generation_config.json of a synthetic model (its tokenizer of `bpeVocab` BPE tokens names the special ids). */
export function synthGenerationConfig(bpeVocab = BPE_VOCAB_SIZE): Record<string, unknown> {
  const endOfText = bpeVocab + SPECIAL_TOKENS.indexOf('<|endoftext|>');
  const imEnd = bpeVocab + SPECIAL_TOKENS.indexOf('<|im_end|>');
  return {
    bos_token_id: endOfText,
    eos_token_id: [imEnd, endOfText],
    pad_token_id: endOfText,
    do_sample: true,
    temperature: 0.7,
    top_k: 20,
    top_p: 0.8,
  };
}

/** Vision-tower stub tensors (names under model.visual.; never read by the text engine). */
const VISION_STUB: Array<{ name: string; shape: number[] }> = [
  { name: 'model.visual.patch_embed.proj.weight', shape: [16, 3, 2, 2, 2] },
  { name: 'model.visual.blocks.0.norm1.weight', shape: [16] },
];

/**
 * Every tensor a synth checkpoint of `config` holds, in natural order (one shard at least each: the
 * most shards there can be is their number).
 */
function planSynthTensors(config: TextConfig, opts: Pick<SynthOptions, 'mtp' | 'vision' | 'prefix' | 'dtype' | 'f32SsmParams'>): PlannedTensor[] {
  const prefix = opts.prefix ?? PREFIX_NESTED;
  const mainDType: DType = (opts.dtype ?? 'bf16') === 'bf16' ? 'BF16' : 'F32';
  const f32Ssm = opts.f32SsmParams ?? true;
  const planned: PlannedTensor[] = [];
  for (const t of expectedTensors(config, { mtp: !!opts.mtp })) {
    const fullName = t.group === 'text' ? prefix + t.name : t.name;
    const ssm = t.name.endsWith('linear_attn.A_log') || t.name.endsWith('linear_attn.norm.weight');
    const dt: DType = ssm && f32Ssm ? 'F32' : mainDType;
    planned.push({
      canonical: t.name,
      spec: { name: fullName, dtype: dt, shape: t.shape },
      init: initFor(t.name, t.shape, config),
      nbytes: numel(t.shape) * DTYPE_SIZE[dt],
    });
  }
  if (opts.vision ?? true) {
    for (const v of VISION_STUB) {
      planned.push({
        canonical: v.name,
        spec: { name: v.name, dtype: mainDType, shape: v.shape },
        init: { kind: 'normal', mean: 0, std: 0.02 },
        nbytes: numel(v.shape) * DTYPE_SIZE[mainDType],
      });
    }
  }
  return planned;
}

/** How many tensors a synth checkpoint of `config` holds: the largest shard count it can be written in. */
export function synthTensorCount(config: TextConfig, opts: Pick<SynthOptions, 'mtp' | 'vision'>): number {
  return planSynthTensors(config, opts).length;
}

/** The largest seed: the weights' generator seeds from 32 bits (src/util/rng.ts folds the bits above in). */
export const MAX_SYNTH_SEED = 0xffffffff;

/**
 * A file of a checkpoint in a model directory: one its loaders read there (the checkpoint's config,
 * index and weights; the tokenizer's files), or HF's other chat template file (chat_template.json).
 */
export function isCheckpointFile(name: string): boolean {
  return isCheckpointFileName(name) || isTokenizerFileName(name) || CHAT_TEMPLATE_FILES.includes(name);
}

/** HF's chat template files beside tokenizer_config.json (either replaces the template written into it). */
const CHAT_TEMPLATE_FILES: readonly string[] = ['chat_template.jinja', 'chat_template.json'];

/**
 * Writes a synthetic Qwen3.5 checkpoint directory: config.json, generation_config.json,
 * model.safetensors (or N shards + model.safetensors.index.json), tokenizer.json,
 * tokenizer_config.json. Streams tensor data; memory use stays at a few MB for any preset.
 */
export async function writeSynthCheckpoint(opts: SynthOptions): Promise<SynthResult> {
  const t0 = performance.now();
  const dtype: SynthDType = opts.dtype ?? 'bf16';
  if (dtype !== 'bf16' && dtype !== 'f32') throw new Error(`synth: dtype must be bf16 or f32 (got ${String(dtype)})`);
  const seed = opts.seed ?? DEFAULT_SYNTH_SEED;
  if (!Number.isSafeInteger(seed) || seed < 0 || seed > MAX_SYNTH_SEED) throw new Error(`synth: seed must be an integer 0..${MAX_SYNTH_SEED} (got ${seed})`);
  const nShards = opts.shards ?? 1;
  if (!Number.isInteger(nShards) || nShards < 1) throw new Error(`synth: shards must be a positive integer (got ${nShards})`);
  const config = resolveSynthConfig(opts.preset, opts.overrides);
  const withTokenizer = opts.tokenizer ?? true;
  const bpeVocab = opts.tokenizerBpeVocab ?? BPE_VOCAB_SIZE;
  const tokenizerSize = bpeVocab + SPECIAL_TOKENS.length;
  if (withTokenizer && config.vocabSize < tokenizerSize) {
    throw new Error(`synth: vocab_size ${config.vocabSize} is smaller than the tokenizer (${tokenizerSize} ids); pass tokenizer: false or a smaller tokenizerBpeVocab`);
  }
  const planned = planSynthTensors(config, opts);
  // Before anything on disk changes: a refused write leaves an existing checkpoint as it was.
  if (nShards > planned.length) throw new Error(`synth: ${nShards} shards but only ${planned.length} tensors`);
  const dir = path.resolve(opts.out);
  mkdirSync(dir, { recursive: true });
  // Weight files of an earlier write (another shard count) would be picked up by a loader, and a
  // chat template file would replace the one written into tokenizer_config.json.
  for (const f of readdirSync(dir)) {
    if (/^model.*\.safetensors$/.test(f) || f === 'model.safetensors.index.json' || CHAT_TEMPLATE_FILES.includes(f)) rmSync(path.join(dir, f), { force: true });
  }

  const totalData = planned.reduce((s, t) => s + t.nbytes, 0);
  const shardOf: PlannedTensor[][] = Array.from({ length: nShards }, () => []);
  {
    // Each shard takes an equal share of what the previous shards left, and at least one tensor.
    let acc = 0;
    let shardStart = 0;
    let s = 0;
    for (let i = 0; i < planned.length; i++) {
      const remainingTensors = planned.length - i;
      const laterShards = nShards - s - 1;
      const share = (totalData - shardStart) / (nShards - s);
      if (shardOf[s]!.length > 0 && laterShards > 0 && (acc - shardStart >= share || remainingTensors <= laterShards)) {
        s++;
        shardStart = acc;
      }
      shardOf[s]!.push(planned[i]!);
      acc += planned[i]!.nbytes;
    }
  }
  // Within a shard, F32 tensors first so every tensor stays aligned to its element size.
  for (const list of shardOf) list.sort((a, b) => DTYPE_SIZE[b.spec.dtype] - DTYPE_SIZE[a.spec.dtype]);

  // --- tensor data
  const files: string[] = [];
  const tables = new TableCache();
  const weightMap: Record<string, string> = {};
  let bytes = 0;
  let doneData = 0;
  for (let s = 0; s < nShards; s++) {
    const name = nShards === 1 ? 'model.safetensors' : shardName(s, nShards);
    const file = path.join(dir, name);
    const w = new SafetensorsWriter(file, shardOf[s]!.map((t) => t.spec));
    try {
      for (const t of shardOf[s]!) {
        writeTensorData(w, t, seed, tables);
        weightMap[t.spec.name] = name;
        doneData += t.nbytes;
        opts.onProgress?.(doneData, totalData);
        if (t.nbytes >= 8 * CHUNK) await new Promise((r) => setImmediate(r));
      }
      w.close();
    } catch (err) {
      w.abort();
      throw err;
    }
    bytes += w.totalBytes;
    files.push(file);
  }
  if (nShards > 1) {
    const sorted: Record<string, string> = {};
    for (const k of Object.keys(weightMap).sort()) sorted[k] = weightMap[k]!;
    const indexFile = path.join(dir, 'model.safetensors.index.json');
    writeFileSync(indexFile, JSON.stringify({ metadata: { total_size: totalData }, weight_map: sorted }, null, 2) + '\n');
    files.push(indexFile);
  }

  // --- config.json
  const hfDType = dtype === 'bf16' ? 'bfloat16' : 'float32';
  const text = textConfigToJson(config, hfDType);
  const top: Record<string, unknown> = {
    architectures: ['Qwen3_5ForConditionalGeneration'],
    model_type: 'qwen3_5',
    image_token_id: 248056,
    video_token_id: 248057,
    vision_start_token_id: 248053,
    vision_end_token_id: 248054,
    tie_word_embeddings: config.tieWordEmbeddings,
    dtype: hfDType,
  };
  const vision = {
    model_type: 'qwen3_5',
    depth: 1,
    hidden_size: 16,
    intermediate_size: 64,
    num_heads: 1,
    in_channels: 3,
    patch_size: 2,
    temporal_patch_size: 2,
    spatial_merge_size: 2,
    out_hidden_size: config.hiddenSize,
    hidden_act: 'gelu_pytorch_tanh',
  };
  const provenance = { preset: opts.preset, seed, dtype, generator: 'lumen-bench synth v1' };
  const configJson = opts.flatConfig
    ? { ...top, ...text, model_type: 'qwen3_5_text', vision_config: vision, lumen_synth: provenance }
    : { ...top, text_config: text, vision_config: vision, lumen_synth: provenance };
  const configFile = path.join(dir, 'config.json');
  writeFileSync(configFile, JSON.stringify(configJson, null, 2) + '\n');
  files.push(configFile);

  const genFile = path.join(dir, 'generation_config.json');
  writeFileSync(genFile, JSON.stringify(synthGenerationConfig(bpeVocab), null, 2) + '\n');
  files.push(genFile);

  if (withTokenizer) {
    const tokFile = path.join(dir, 'tokenizer.json');
    writeFileSync(tokFile, buildSynthTokenizer(bpeVocab).tokenizerJson);
    const tcFile = path.join(dir, 'tokenizer_config.json');
    const think = opts.thinkingDefault ?? presetThinksByDefault(opts.preset);
    writeFileSync(tcFile, JSON.stringify(synthTokenizerConfig(think, config.maxPositionEmbeddings, bpeVocab), null, 2) + '\n');
    files.push(tokFile, tcFile);
  }

  const params = countParams(config);
  return {
    dir,
    config,
    files,
    bytes,
    paramCount: params.text,
    mtpParamCount: opts.mtp ? params.mtp : 0,
    seconds: (performance.now() - t0) / 1000,
  };
}
