// Shared types for checkpoints: what the TypeScript loader hands to the native engine.

import { oneLine } from '../util/text.js';

/** Element types of safetensors checkpoints. */
export type DType = 'BF16' | 'F16' | 'F32';

/** The ggml block-quantized types the engine runs (native/core/dtype.h has their geometry). */
export const QUANT_TYPES = ['Q8_0', 'Q4_0', 'Q5_0', 'Q5_1', 'Q4_K', 'Q5_K', 'Q6_K', 'IQ4_NL', 'IQ4_XS'] as const;
export type QuantType = (typeof QUANT_TYPES)[number];
/** Any weight type the engine binds: safetensors' element types and the GGUF quantizations. */
export type WeightDType = DType | QuantType;

export function isWeightDType(s: string): s is WeightDType {
  return s === 'BF16' || s === 'F16' || s === 'F32' || (QUANT_TYPES as readonly string[]).includes(s);
}

export type LayerType = 'linear_attention' | 'full_attention';

/** Text-model parameters of a Qwen3.5 checkpoint (from config.json, text_config nested or flat). */
export interface TextConfig {
  hiddenSize: number;
  numLayers: number;
  intermediateSize: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  linearNumKeyHeads: number;
  linearNumValueHeads: number;
  linearKeyHeadDim: number;
  linearValueHeadDim: number;
  linearConvKernelDim: number;
  vocabSize: number;
  rmsNormEps: number;
  ropeTheta: number;
  partialRotaryFactor: number;
  /** mRoPE sections (text-only input makes them irrelevant to the math; GGUF needs them). */
  mropeSection: number[];
  layerTypes: LayerType[];
  tieWordEmbeddings: boolean;
  eosTokenId: number;
  maxPositionEmbeddings: number;
  /** Set when the file did not state it and maxPositionEmbeddings is DEFAULT_MAX_POSITIONS (src/model/config.ts). */
  maxPositionsDefaulted?: boolean;
  mtpNumHiddenLayers: number;
  /**
   * DeltaNet value heads in llama.cpp's tiled order (value head j reads key head j mod nk) rather
   * than the checkpoint's grouped order (key head j / (nv / nk)): set for GGUF files, whose value
   * heads llama.cpp's converter re-tiles; absent (false) for safetensors.
   */
  linearValueHeadsTiled?: boolean;
}

/**
 * One tensor of a checkpoint, located inside a safetensors file.
 * `name` is canonical: the HF name with `model.language_model.` or `model.` stripped
 * (`embed_tokens.weight`, `layers.3.self_attn.q_proj.weight`, `norm.weight`), except
 * `lm_head.weight` and `mtp.*`, which keep their names.
 */
export interface TensorRef {
  name: string;
  /** The tensor's own name in its file where that differs from `name` (a GGUF's `blk.0.attn_norm.weight`): what the engine's errors name. */
  storedName?: string;
  /** Absolute path of the safetensors file. */
  file: string;
  /** Absolute byte offset of the data inside the file (header already accounted for). */
  offset: number;
  nbytes: number;
  dtype: DType;
  /** PyTorch order, e.g. [out, in]. */
  shape: number[];
  /** What it is for (src/model/tensor-roles.ts), its decoder layer (-1 outside them), its value fold. */
  role: string;
  layer: number;
  fold?: 'plus_one' | 'neg_exp';
}

export interface Checkpoint {
  dir: string;
  config: TextConfig;
  /** sha256 of config.json's bytes, hex. */
  configHash: string;
  /** Weight name prefix detected (`model.language_model.` or `model.`). */
  prefix: string;
  /** Canonical name -> tensor. Vision tensors are never included; mtp.* only when asked. */
  tensors: Map<string, TensorRef>;
  shards: string[];
  bytesOnDisk: number;
  /** Parameter count of the text model (the tensors above, excluding mtp.*). */
  paramCount: number;
  /** Dominant weight dtype of the text tensors. */
  dtype: DType;
  hasMtp: boolean;
}

/** A tensor of any weight format (a GGUF tensor: `offset` is absolute, `fold` absent, already applied). */
export interface WeightRef extends Omit<TensorRef, 'dtype'> {
  dtype: WeightDType;
}

/** How a model's weights are stored, for reports (GGUF files; absent for safetensors checkpoints). */
export interface WeightFormat {
  container: 'gguf';
  /** The file's quantization (general.file_type: `Q4_K_M`, `Q8_0`, `BF16`, ...). */
  name: string;
  /** Stored bits per weight over the model's tensors. */
  bitsPerWeight: number;
  /** Tensors per ggml type. */
  tensorTypes: Record<string, number>;
  /** File names (the parts of a split file in order). */
  files: string[];
  /** sha256 of the files' bytes, in order (hex). */
  sha256?: string;
}

/**
 * Random weights the engine generates in memory (`--model-path synthetic:<preset>`): no files, so
 * no tensors to bind. The native generator (HostWeights::synthetic), not `bench synth`'s.
 */
export interface SyntheticWeights {
  /** A preset of src/model/presets.ts. */
  preset: string;
  dtype: 'bf16' | 'f32';
  seed: number;
}

/** A model as the engine and the reports take it: a safetensors Checkpoint, a GGUF file, or synthetic weights. */
export interface ModelCheckpoint extends Omit<Checkpoint, 'tensors' | 'dtype'> {
  tensors: Map<string, WeightRef>;
  /** Dominant weight type of the text tensors. */
  dtype: WeightDType;
  format?: WeightFormat;
  /** Set for `synthetic:<preset>`: `tensors` and `shards` are empty and the engine generates the weights. */
  syntheticWeights?: SyntheticWeights;
  /**
   * What the loader tolerated, skipped or decided (tensors left out, the tie of the embeddings): the
   * sweep, serve and convert show them (loadedModelNotes), so nothing is left out silently; bench
   * prompt, the verification interface, prints only its result.
   */
  notes?: readonly string[];
}

/** A loaded model's notes, each prefixed as the sweep, serve and convert show them. */
export function loadedModelNotes(ckpt: Pick<ModelCheckpoint, 'notes'>): string[] {
  return (ckpt.notes ?? []).map((n) => `model: ${n}`);
}

/**
 * Error in a checkpoint: the message names the file or tensor at fault. It is always one line:
 * control characters that came from the files (a tensor name with a newline) are escaped.
 */
export class CheckpointError extends Error {
  constructor(message: string) {
    super(oneLine(message));
    this.name = 'CheckpointError';
  }
}
