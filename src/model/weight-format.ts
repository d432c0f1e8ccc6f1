// How a model's weights are stored, in the words the reports use (the sweep's header, its JSON
// provenance and notes): `Q4_K_M, 4.89 bits/weight` with the per-type tensor counts and the files'
// content hash for GGUF files; the dominant element type for safetensors checkpoints; for
// synthetic weights, that they are random and generated in memory (preset, dtype, seed; no hash).
import path from 'node:path';
import { SYNTHETIC_GENERATOR, syntheticShape, syntheticWeightBytes } from './synthetic-model.js';
import type { ModelCheckpoint } from './types.js';
import { bytesText } from '../util/bytes-text.js';

export interface WeightFormatJson {
  container: 'gguf' | 'safetensors' | 'synthetic';
  /** The quantization (GGUF general.file_type) or the dominant element type. */
  name: string;
  bits_per_weight: number;
  /** GGUF: tensors per ggml type. */
  tensor_types?: Record<string, number>;
  files?: string[];
  /** GGUF: sha256 of the files' bytes, in order. */
  sha256?: string;
  /** Synthetic weights (`--model-path synthetic:<preset>`): no file, so no hash. */
  synthetic?: true;
  preset?: string;
  dtype?: 'bf16' | 'f32';
  seed?: number;
  generator?: string;
  /** The generated weights' bytes in host memory. */
  in_memory_bytes?: number;
}

const ELEMENT_BITS: Record<string, number> = { F32: 32, F16: 16, BF16: 16 };

export function weightFormatJson(m: ModelCheckpoint): WeightFormatJson {
  const w = m.syntheticWeights;
  if (w) {
    return {
      container: 'synthetic', name: m.dtype, bits_per_weight: ELEMENT_BITS[m.dtype] ?? 0, synthetic: true, preset: w.preset,
      dtype: w.dtype, seed: w.seed, generator: SYNTHETIC_GENERATOR, in_memory_bytes: syntheticWeightBytes(m.config, w.dtype),
    };
  }
  const f = m.format;
  if (!f) return { container: 'safetensors', name: m.dtype, bits_per_weight: ELEMENT_BITS[m.dtype] ?? 0 };
  return {
    container: 'gguf', name: f.name, bits_per_weight: Number(f.bitsPerWeight.toFixed(4)), tensor_types: { ...f.tensorTypes },
    files: f.files.slice(), ...(f.sha256 !== undefined ? { sha256: f.sha256 } : {}),
  };
}

/**
 * One line: `Q8_0, 8.50 bits/weight (GGUF; 32 Q8_0, 23 F32 tensors; sha256 1a2b3c4d5e6f)`, `BF16 safetensors`, or
 * `synthetic BF16: random weights of the tiny shape, seed 0, 63.6 MiB generated in memory (no file, no hash)`.
 */
export function weightFormatLine(m: ModelCheckpoint): string {
  const j = weightFormatJson(m);
  if (j.container === 'safetensors') return `${j.name} safetensors`;
  if (j.container === 'synthetic') {
    return `synthetic ${j.name}: random weights of the ${syntheticShape(m.syntheticWeights!)} shape, seed ${j.seed}, ${bytesText(j.in_memory_bytes ?? 0)} generated in memory (no file, no hash)`;
  }
  const types = Object.entries(j.tensor_types ?? {}).sort((a, b) => b[1] - a[1]).map(([t, n]) => `${n} ${t}`).join(', ');
  const parts = (j.files?.length ?? 1) > 1 ? `, ${j.files!.length} split files` : '';
  return `${j.name}, ${j.bits_per_weight.toFixed(2)} bits/weight (GGUF${parts}; ${types} tensors${j.sha256 ? `; sha256 ${j.sha256.slice(0, 12)}` : ''})`;
}

/** Where the weights that ran are: a GGUF's file (the first part of a split file), else the checkpoint directory. */
export function weightsPath(m: ModelCheckpoint): string {
  return m.format && m.format.files.length > 0 ? path.join(m.dir, m.format.files[0]!) : m.dir;
}

/** The weights' format in one word: a GGUF's file type (`Q4_K_M`), else the checkpoint's dtype. */
export function weightsFormatName(m: ModelCheckpoint): string {
  return m.format ? m.format.name : m.dtype;
}
