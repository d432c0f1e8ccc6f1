// Shared types for checkpoints: what the TypeScript loader hands to the native engine.

import { oneLine } from '../util/text.js';

export type DType = 'BF16' | 'F16' | 'F32';

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
  mtpNumHiddenLayers: number;
}

/**
 * One tensor of a checkpoint, located inside a safetensors file.
 * `name` is canonical: the HF name with `model.language_model.` or `model.` stripped
 * (`embed_tokens.weight`, `layers.3.self_attn.q_proj.weight`, `norm.weight`), except
 * `lm_head.weight` and `mtp.*`, which keep their names.
 */
export interface TensorRef {
  name: string;
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
