// config.json -> TextConfig for Qwen3.5 checkpoints.
//
// Accepts the real layout (text parameters nested under `text_config`, multimodal keys at top
// level) and flattened copies (text keys at top level). Where a key is absent we fall back to the
// HF defaults, which equal the 9B values; the keys that decide tensor shapes are required.

import { engineLimits } from '../engine/limits.js';
import { isJsonObject, preview } from '../util/json.js';
import { CheckpointError, type LayerType, type TextConfig } from './types.js';

type Json = Record<string, unknown>;

/** Largest integer a size field may hold: the engine takes sizes as 32-bit signed integers. */
export const MAX_CONFIG_INT = 2 ** 31 - 1;
/** Most decoder layers a config may declare (Qwen3.5 has at most 64). */
export const MAX_LAYERS = 1024;
/** Largest float32: eps and theta reach the engine as float32. */
const MAX_F32 = 3.4028234663852886e38;

/** Default full-attention interval: layer i is full attention iff (i + 1) % 4 == 0. */
export const DEFAULT_FULL_ATTENTION_INTERVAL = 4;

/** max_position_embeddings when a config (or a GGUF's qwen35.context_length) does not state it: Qwen3.5's. */
export const DEFAULT_MAX_POSITIONS = 262144;

/** Derives layer types from a full-attention interval. */
export function deriveLayerTypes(numLayers: number, interval = DEFAULT_FULL_ATTENTION_INTERVAL): LayerType[] {
  const out: LayerType[] = [];
  for (let i = 0; i < numLayers; i++) out.push((i + 1) % interval === 0 ? 'full_attention' : 'linear_attention');
  return out;
}

/** Where `tie_word_embeddings` was stated, if anywhere. */
export interface TieFlags {
  /** Value in text_config (nested layout only). */
  textConfig?: boolean;
  /** Value at top level (for a flat config this is the only place). */
  topLevel?: boolean;
}

export interface ParsedConfig {
  config: TextConfig;
  /** True when the text keys sit under `text_config`. */
  nested: boolean;
  tie: TieFlags;
}

/**
 * Parses a Qwen3.5 config.json object. `file` names the file in error messages.
 * Throws CheckpointError (`<file>: text_config.hidden_size is missing`) on missing or bad values.
 */
export function parseConfig(json: unknown, file: string): TextConfig {
  return parseConfigDetailed(json, file).config;
}

/** As parseConfig, plus the layout found and where tie_word_embeddings was stated. */
export function parseConfigDetailed(json: unknown, file: string): ParsedConfig {
  if (!isJsonObject(json)) throw new CheckpointError(`${file}: expected a JSON object at top level`);
  if (json.text_config !== undefined && json.text_config !== null && !isJsonObject(json.text_config)) {
    throw new CheckpointError(`${file}: text_config must be an object (got ${preview(json.text_config)})`);
  }
  const nested = isJsonObject(json.text_config);
  const tc: Json = nested ? (json.text_config as Json) : json;
  const keyPrefix = nested ? 'text_config.' : '';
  const where = (key: string) => `${keyPrefix}${key}`;

  const fail = (key: string, what: string): never => {
    throw new CheckpointError(`${file}: ${where(key)} ${what}`);
  };
  const posInt = (key: string, dflt?: number, max = MAX_CONFIG_INT): number => {
    const v = tc[key];
    if (v === undefined || v === null) {
      if (dflt !== undefined) return dflt;
      return fail(key, 'is missing');
    }
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) return fail(key, `must be a positive integer (got ${preview(v)})`);
    if (v > max) return fail(key, `is ${v}, above the limit of ${max}`);
    return v;
  };
  const posNum = (v: unknown, key: string, dflt: number, max = MAX_F32): number => {
    if (v === undefined || v === null) return dflt;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) return fail(key, `must be a positive number (got ${preview(v)})`);
    if (v > max) return fail(key, `is ${v}, above the limit of ${max}`);
    if (Math.fround(v) === 0) return fail(key, `is ${v}, which is 0 as a float32 (the engine's precision)`);
    return v;
  };

  const hiddenSize = posInt('hidden_size');
  const numLayers = posInt('num_hidden_layers', undefined, MAX_LAYERS);
  const intermediateSize = posInt('intermediate_size');
  const numHeads = posInt('num_attention_heads');
  const numKvHeads = posInt('num_key_value_heads');
  const headDim = posInt('head_dim');
  const linearNumKeyHeads = posInt('linear_num_key_heads');
  const linearNumValueHeads = posInt('linear_num_value_heads');
  const linearKeyHeadDim = posInt('linear_key_head_dim');
  const linearValueHeadDim = posInt('linear_value_head_dim');
  const linearConvKernelDim = posInt('linear_conv_kernel_dim');
  const vocabSize = posInt('vocab_size');
  const maxPositionEmbeddings = posInt('max_position_embeddings', DEFAULT_MAX_POSITIONS);
  const maxPositionsDefaulted = tc.max_position_embeddings === undefined || tc.max_position_embeddings === null;

  const rmsNormEps = posNum(tc.rms_norm_eps, 'rms_norm_eps', 1e-6);
  if (rmsNormEps >= 1) fail('rms_norm_eps', `must be below 1 (got ${rmsNormEps})`);
  const limits = engineLimits();
  if (linearConvKernelDim > limits.maxConvKernel) fail('linear_conv_kernel_dim', `is ${linearConvKernelDim}; the engine supports 1..${limits.maxConvKernel}`);
  if (linearKeyHeadDim > limits.maxLinearHeadDim) fail('linear_key_head_dim', `is ${linearKeyHeadDim}; the engine supports 1..${limits.maxLinearHeadDim}`);
  if (linearValueHeadDim > limits.maxLinearHeadDim) fail('linear_value_head_dim', `is ${linearValueHeadDim}; the engine supports 1..${limits.maxLinearHeadDim}`);

  // RoPE: `rope_parameters` (current HF) or `rope_scaling` (older), else top-level keys.
  let ropeKey = 'rope_parameters';
  let rope: Json = {};
  if (isJsonObject(tc.rope_parameters)) rope = tc.rope_parameters;
  else if (isJsonObject(tc.rope_scaling)) { rope = tc.rope_scaling; ropeKey = 'rope_scaling'; }
  const ropeTheta = posNum(rope.rope_theta ?? tc.rope_theta, rope.rope_theta !== undefined ? `${ropeKey}.rope_theta` : 'rope_theta', 1e7);
  const partialRotaryFactor = posNum(
    rope.partial_rotary_factor ?? tc.partial_rotary_factor,
    rope.partial_rotary_factor !== undefined ? `${ropeKey}.partial_rotary_factor` : 'partial_rotary_factor',
    0.25,
  );
  if (partialRotaryFactor > 1) fail('partial_rotary_factor', `must be in (0, 1] (got ${partialRotaryFactor})`);
  const rotaryDim = headDim * partialRotaryFactor;
  if (!Number.isInteger(rotaryDim) || rotaryDim % 2 !== 0) {
    fail('partial_rotary_factor', `gives a rotary dimension of ${rotaryDim} for head_dim ${headDim}; it must be an even integer`);
  }
  // The engine holds the factor as a float32 and rounds head_dim x it (native/checkpoint/config.h).
  const engineRotary = Math.round(headDim * Math.fround(partialRotaryFactor));
  if (engineRotary !== rotaryDim) {
    fail('partial_rotary_factor', `(${partialRotaryFactor}) is not exact in float32: head_dim ${headDim} x it rounds to ${engineRotary} in the engine, not ${rotaryDim}`);
  }
  let mropeSection = [11, 11, 10];
  const ms = rope.mrope_section ?? tc.mrope_section;
  if (ms !== undefined && ms !== null) {
    if (!Array.isArray(ms) || ms.length === 0 || ms.length > 4 ||
        !ms.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x <= MAX_CONFIG_INT)) {
      fail(`${ropeKey}.mrope_section`, `must be an array of 1 to 4 non-negative integers (got ${preview(ms)})`);
    }
    mropeSection = (ms as number[]).slice();
  }

  // Settings that change the computation where the engine implements one value only: another value
  // is another model, which would run here with wrong numbers rather than fail. Absent: the value below.
  // `at`: the key as named in the message (a text key gets its text_config. prefix).
  const implemented = (v: unknown, at: string, accepted: readonly unknown[], what: string): void => {
    if (v !== undefined && v !== null && !accepted.includes(v)) {
      throw new CheckpointError(`${file}: ${at} is ${preview(v)}; the engine implements ${accepted.map((a) => JSON.stringify(a)).join(' or ')} only (${what})`);
    }
  };
  implemented(tc.model_type, where('model_type'), ['qwen3_5_text', 'qwen3_5'], 'Qwen3.5 dense models');
  if (nested) implemented(json.model_type, 'model_type', ['qwen3_5'], 'Qwen3.5 dense models');
  implemented(tc.hidden_act, where('hidden_act'), ['silu'], 'the SwiGLU MLP');
  implemented(tc.attention_bias, where('attention_bias'), [false], 'attention projections without biases');
  implemented(tc.attn_output_gate, where('attn_output_gate'), [true], 'the gated attention output');
  // Qwen2-VL's older configs call the default multimodal rotary "mrope".
  implemented(rope.rope_type ?? rope.type, where(`${ropeKey}.rope_type`), ['default', 'mrope'], 'unscaled rotary positions');
  for (const k of ['num_experts', 'num_local_experts']) {
    const n = tc[k];
    if (typeof n === 'number' && n > 0) fail(k, `is ${n}: a mixture-of-experts model, which the engine does not run (dense Qwen3.5 only)`);
  }

  // Layer types: explicit list, else derived from full_attention_interval (default 4).
  let layerTypes: LayerType[];
  if (tc.layer_types !== undefined && tc.layer_types !== null) {
    const lt = tc.layer_types;
    if (!Array.isArray(lt)) return fail('layer_types', 'must be an array');
    if (lt.length !== numLayers) fail('layer_types', `has ${lt.length} entries but num_hidden_layers is ${numLayers}`);
    layerTypes = lt.map((t, i) => {
      if (t !== 'linear_attention' && t !== 'full_attention') {
        return fail(`layer_types[${i}]`, `is ${preview(t)}; expected "linear_attention" or "full_attention"`);
      }
      return t;
    });
  } else {
    const interval = posInt('full_attention_interval', DEFAULT_FULL_ATTENTION_INTERVAL);
    layerTypes = deriveLayerTypes(numLayers, interval);
  }

  // Tied embeddings: text_config first, then top level; HF's default for Qwen3.5 is untied.
  const tie: TieFlags = {};
  if (nested && tc.tie_word_embeddings !== undefined && tc.tie_word_embeddings !== null) {
    if (typeof tc.tie_word_embeddings !== 'boolean') fail('tie_word_embeddings', 'must be true or false');
    tie.textConfig = tc.tie_word_embeddings as boolean;
  }
  if (json.tie_word_embeddings !== undefined && json.tie_word_embeddings !== null) {
    if (typeof json.tie_word_embeddings !== 'boolean') {
      throw new CheckpointError(`${file}: tie_word_embeddings must be true or false`);
    }
    tie.topLevel = json.tie_word_embeddings;
  }
  const tieWordEmbeddings = tie.textConfig ?? tie.topLevel ?? false;

  // EOS: text_config or top level; a list takes its first entry.
  let eosTokenId = 248044;
  const eosRaw = tc.eos_token_id ?? json.eos_token_id;
  if (eosRaw !== undefined && eosRaw !== null) {
    const e = Array.isArray(eosRaw) ? eosRaw[0] : eosRaw;
    if (typeof e !== 'number' || !Number.isInteger(e) || e < 0) fail('eos_token_id', `must be a non-negative integer (got ${preview(eosRaw)})`);
    eosTokenId = e as number;
  }
  if (eosTokenId >= vocabSize) fail('eos_token_id', `(${eosTokenId}) is not below vocab_size (${vocabSize})`);

  let mtpNumHiddenLayers = 1;
  if (tc.mtp_num_hidden_layers !== undefined && tc.mtp_num_hidden_layers !== null) {
    const m = tc.mtp_num_hidden_layers;
    if (typeof m !== 'number' || !Number.isInteger(m) || m < 0) fail('mtp_num_hidden_layers', `must be a non-negative integer (got ${preview(m)})`);
    if ((m as number) > MAX_LAYERS) fail('mtp_num_hidden_layers', `is ${m as number}, above the limit of ${MAX_LAYERS}`);
    mtpNumHiddenLayers = m as number;
  }

  if (numHeads % numKvHeads !== 0) {
    fail('num_attention_heads', `(${numHeads}) must be a multiple of num_key_value_heads (${numKvHeads})`);
  }
  if (linearNumValueHeads % linearNumKeyHeads !== 0) {
    fail('linear_num_value_heads', `(${linearNumValueHeads}) must be a multiple of linear_num_key_heads (${linearNumKeyHeads})`);
  }

  const config: TextConfig = {
    hiddenSize, numLayers, intermediateSize, numHeads, numKvHeads, headDim,
    linearNumKeyHeads, linearNumValueHeads, linearKeyHeadDim, linearValueHeadDim, linearConvKernelDim,
    vocabSize, rmsNormEps, ropeTheta, partialRotaryFactor, mropeSection, layerTypes,
    tieWordEmbeddings, eosTokenId, maxPositionEmbeddings, mtpNumHiddenLayers,
    ...(maxPositionsDefaulted ? { maxPositionsDefaulted } : {}),
  };
  return { config, nested, tie };
}

/**
 * The HF `text_config` object for a TextConfig (every field, real key names), as written by the
 * synthetic checkpoint generator and usable by anything that needs to emit a config.json.
 */
export function textConfigToJson(c: TextConfig, dtype: 'bfloat16' | 'float32' | 'float16' = 'bfloat16'): Json {
  return {
    model_type: 'qwen3_5_text',
    attention_bias: false,
    attention_dropout: 0.0,
    attn_output_gate: true,
    dtype,
    eos_token_id: c.eosTokenId,
    full_attention_interval: DEFAULT_FULL_ATTENTION_INTERVAL,
    head_dim: c.headDim,
    hidden_act: 'silu',
    hidden_size: c.hiddenSize,
    initializer_range: 0.02,
    intermediate_size: c.intermediateSize,
    layer_types: c.layerTypes.slice(),
    linear_conv_kernel_dim: c.linearConvKernelDim,
    linear_key_head_dim: c.linearKeyHeadDim,
    linear_num_key_heads: c.linearNumKeyHeads,
    linear_num_value_heads: c.linearNumValueHeads,
    linear_value_head_dim: c.linearValueHeadDim,
    mamba_ssm_dtype: 'float32',
    max_position_embeddings: c.maxPositionEmbeddings,
    mlp_only_layers: [],
    mtp_num_hidden_layers: c.mtpNumHiddenLayers,
    mtp_use_dedicated_embeddings: false,
    num_attention_heads: c.numHeads,
    num_hidden_layers: c.numLayers,
    num_key_value_heads: c.numKvHeads,
    rms_norm_eps: c.rmsNormEps,
    rope_parameters: {
      mrope_interleaved: true,
      mrope_section: c.mropeSection.slice(),
      partial_rotary_factor: c.partialRotaryFactor,
      rope_theta: c.ropeTheta,
      rope_type: 'default',
    },
    tie_word_embeddings: c.tieWordEmbeddings,
    use_cache: true,
    vocab_size: c.vocabSize,
  };
}

/** Derived sizes used by shape checks and the engine. */
export function derivedDims(c: TextConfig): {
  keyDim: number; valueDim: number; convDim: number; qProjRows: number; kvDim: number; rotaryDim: number;
} {
  const keyDim = c.linearNumKeyHeads * c.linearKeyHeadDim;
  const valueDim = c.linearNumValueHeads * c.linearValueHeadDim;
  return {
    keyDim,
    valueDim,
    convDim: 2 * keyDim + valueDim,
    qProjRows: 2 * c.numHeads * c.headDim,
    kvDim: c.numKvHeads * c.headDim,
    rotaryDim: Math.round(c.headDim * c.partialRotaryFactor),
  };
}
