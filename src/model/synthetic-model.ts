// `--model-path synthetic:<preset>`: a model of a preset's real shape whose random weights the
// engine generates in memory (native HostWeights::synthetic), with no files written or read. The
// tokenizer and chat template are the ones `bench synth --preset <preset>` writes, built in memory.
//
// The weights are the engine's generator's (one xorshift stream, uniform values), not `bench
// synth`'s (per-tensor streams, Gaussian tables): the same preset and seed give the same shapes and
// tokenizer, not the same weight bytes.

import { createHash } from 'node:crypto';
import { countParams, expectedTensors } from './checkpoint.js';
import { textConfigToJson } from './config.js';
import type { LoadedModel } from './gguf-checkpoint.js';
import { isPresetName, PRESET_NAMES, presetThinksByDefault, type PresetName } from './presets.js';
import { numel } from './safetensors.js';
import { DEFAULT_SYNTH_SEED, resolveSynthConfig, synthGenerationConfig } from './synth.js';
import { buildSynthTokenizer, synthTokenizerConfig } from './synth-tokenizer.js';
import { validateTokenizerConfig } from './tokenizer-files.js';
import type { TokenizerParts } from './tokenizer.js';
import { CheckpointError, type ModelCheckpoint, type SyntheticWeights, type TextConfig } from './types.js';

/** What a `--model-path` starts with to name in-memory synthetic weights. */
export const SYNTHETIC_SCHEME = 'synthetic:';

/** Weight type of `synthetic:<preset>` (bf16, as `bench synth` writes by default). */
export const SYNTHETIC_DTYPE = 'bf16' as const;

/** The generator the reports name. */
export const SYNTHETIC_GENERATOR = 'engine in-memory generator (HostWeights::synthetic)';

/** Whether a --model-path value names synthetic weights (`synthetic:...`, any case), whatever follows. */
export function isSyntheticModelPath(modelPath: string): boolean {
  return modelPath.slice(0, SYNTHETIC_SCHEME.length).toLowerCase() === SYNTHETIC_SCHEME;
}

/**
 * `synthetic:<preset>` -> the weights it names (preset lower-cased; bf16, the default seed); null
 * when the value is not a `synthetic:` path; a CheckpointError when the preset is unknown.
 */
export function syntheticWeightsOf(modelPath: string): SyntheticWeights | null {
  if (!isSyntheticModelPath(modelPath)) return null;
  const preset = modelPath.slice(SYNTHETIC_SCHEME.length).toLowerCase();
  if (!isPresetName(preset)) {
    throw new CheckpointError(
      `${modelPath}: unknown synthetic preset '${modelPath.slice(SYNTHETIC_SCHEME.length)}' (one of ${PRESET_NAMES.join(', ')})`,
    );
  }
  return { preset, dtype: SYNTHETIC_DTYPE, seed: DEFAULT_SYNTH_SEED };
}

/** The model's name in headers and reports: `synthetic:4b`. */
export function syntheticName(w: SyntheticWeights): string {
  return SYNTHETIC_SCHEME + w.preset;
}

/** `synthetic:4b (random weights of the 4B shape, bf16, seed 0; generated in memory, no checkpoint)`. */
export function describeSynthetic(w: SyntheticWeights): string {
  return `${syntheticName(w)} (random weights of the ${syntheticShape(w)} shape, ${w.dtype}, seed ${w.seed}; generated in memory, no checkpoint)`;
}

/** The preset as the shape's name: `tiny`, `0.8B`, `4B`. */
export function syntheticShape(w: SyntheticWeights): string {
  return w.preset === 'tiny' ? 'tiny' : w.preset.toUpperCase();
}

/** Bytes the engine's generated weights take: matrices in `dtype`, vectors and conv filters in f32 (as HostWeights::synthetic). */
export function syntheticWeightBytes(c: TextConfig, dtype: 'bf16' | 'f32'): number {
  let bytes = 0;
  for (const t of expectedTensors(c)) bytes += numel(t.shape) * (t.role.kind === 'matrix' && dtype === 'bf16' ? 2 : 4);
  return bytes;
}

/**
 * The model `synthetic:<preset>` names, as the loaders return models: the preset's config, no
 * tensors and no files (`bytesOnDisk` 0); `configHash` is the sha256 of the text config's JSON
 * (there is no config.json). The engine generates the weights (loadEngine passes `syntheticWeights`).
 */
export function syntheticModel(w: SyntheticWeights): LoadedModel {
  if (!isPresetName(w.preset)) throw new CheckpointError(`unknown synthetic preset '${w.preset}' (one of ${PRESET_NAMES.join(', ')})`);
  const config = resolveSynthConfig(w.preset);
  const hfDtype = w.dtype === 'bf16' ? 'bfloat16' : 'float32';
  const configHash = createHash('sha256').update(JSON.stringify({ text_config: textConfigToJson(config, hfDtype) })).digest('hex');
  return {
    dir: syntheticName(w),
    config,
    configHash,
    prefix: '',
    tensors: new Map(),
    shards: [],
    bytesOnDisk: 0,
    paramCount: countParams(config).text,
    dtype: w.dtype === 'bf16' ? 'BF16' : 'F32',
    hasMtp: false,
    syntheticWeights: { ...w },
    notes: [],
  };
}

/**
 * The tokenizer of a synthetic model: the tokenizer.json, tokenizer_config.json (chat template with
 * the preset's thinking default) and generation_config.json eos ids `bench synth --preset P`
 * writes, built in memory.
 */
export function syntheticTokenizerParts(model: ModelCheckpoint): TokenizerParts {
  const w = model.syntheticWeights;
  if (!w || !isPresetName(w.preset)) throw new CheckpointError(`${model.dir}: not a synthetic model`);
  const preset: PresetName = w.preset;
  const where = syntheticName(w);
  const tokJson = JSON.parse(buildSynthTokenizer().tokenizerJson) as Record<string, unknown>;
  const tokConfig = synthTokenizerConfig(presetThinksByDefault(preset), model.config.maxPositionEmbeddings);
  const tcFile = `${where} tokenizer_config.json (in memory)`;
  validateTokenizerConfig(tokConfig, tcFile);
  return {
    tokJson,
    tokFile: `${where} tokenizer.json (in memory)`,
    tokConfig,
    templateSource: tokConfig.chat_template as string,
    templateFile: tcFile,
    eosHints: [synthGenerationConfig().eos_token_id, model.config.eosTokenId],
    where,
  };
}
