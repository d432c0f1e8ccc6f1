// The valid files every fuzz case starts from, written once per run with the project's own
// writers: a small synthetic checkpoint (one safetensors file), the same model in two shards with
// an index, and its GGUF conversion (`bench convert`'s writeGguf, q8_0).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { writeGguf } from '../../src/convert/convert.js';
import { loadCheckpoint } from '../../src/model/checkpoint.js';
import { writeSynthCheckpoint } from '../../src/model/synth.js';
import type { TextConfig } from '../../src/model/types.js';
import { ggufLayout, type GgufLayout } from './gguf-layout.js';

/** BPE tokens of the fuzz tokenizer; its 33 special tokens follow, filling the 512-entry vocabulary. */
export const FUZZ_BPE_VOCAB = 479;

/**
 * A Qwen3.5-layout model small enough that a case loads in milliseconds: 4 layers (3 linear
 * attention, 1 full attention), hidden 64, value heads twice the key heads (the grouped layout).
 */
export const FUZZ_MODEL: Partial<TextConfig> = {
  vocabSize: 512,
  eosTokenId: FUZZ_BPE_VOCAB,
  hiddenSize: 64,
  intermediateSize: 128,
  numLayers: 4,
  numHeads: 2,
  numKvHeads: 1,
  headDim: 32,
  linearNumKeyHeads: 2,
  linearNumValueHeads: 4,
  linearKeyHeadDim: 32,
  linearValueHeadDim: 32,
};

/** A checkpoint directory and the bytes of each file in it. */
export interface BaseDir {
  dir: string;
  files: Map<string, Buffer>;
}

export interface SafetensorsLayout {
  /** Length of the JSON header (the u64 at offset 0). */
  headerLen: number;
  header: Record<string, unknown>;
  dataStart: number;
  /** The data section (everything after the header). */
  data: Buffer;
  /** Tensors in header order with absolute data ranges. */
  tensors: Array<{ name: string; start: number; end: number; dtype: string }>;
}

export interface BaseSet {
  root: string;
  config: TextConfig;
  single: BaseDir;
  sharded: BaseDir;
  ggufFile: string;
  gguf: Buffer;
  safetensors: SafetensorsLayout;
  ggufLayout: GgufLayout;
  /** Tensor names of the sharded checkpoint and their shard file. */
  shardOf: Map<string, string>;
}

function readDir(dir: string): BaseDir {
  const files = new Map<string, Buffer>();
  for (const f of readdirSync(dir).sort()) files.set(f, readFileSync(path.join(dir, f)));
  return { dir, files };
}

export function safetensorsLayout(bytes: Buffer): SafetensorsLayout {
  const headerLen = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.toString('utf8', 8, 8 + headerLen)) as Record<string, unknown>;
  const dataStart = 8 + headerLen;
  const tensors: SafetensorsLayout['tensors'] = [];
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const t = e as { dtype: string; data_offsets: [number, number] };
    tensors.push({ name, start: dataStart + t.data_offsets[0], end: dataStart + t.data_offsets[1], dtype: t.dtype });
  }
  return { headerLen, header, dataStart, data: bytes.subarray(dataStart), tensors };
}

/** Writes the base files under `root` and reads them back. */
export async function writeBase(root: string): Promise<BaseSet> {
  const singleDir = path.join(root, 'base-single');
  const shardedDir = path.join(root, 'base-sharded');
  const common = { preset: 'tiny' as const, dtype: 'bf16' as const, seed: 11, tokenizerBpeVocab: FUZZ_BPE_VOCAB, overrides: FUZZ_MODEL };
  const res = await writeSynthCheckpoint({ ...common, out: singleDir, shards: 1 });
  await writeSynthCheckpoint({ ...common, out: shardedDir, shards: 2 });
  const ggufFile = path.join(root, 'base.gguf');
  writeGguf(loadCheckpoint(singleDir), ggufFile, { dtype: 'q8_0' });

  const single = readDir(singleDir);
  const sharded = readDir(shardedDir);
  const gguf = readFileSync(ggufFile);
  const index = JSON.parse(sharded.files.get('model.safetensors.index.json')!.toString('utf8')) as { weight_map: Record<string, string> };
  return {
    root,
    config: res.config,
    single,
    sharded,
    ggufFile,
    gguf,
    safetensors: safetensorsLayout(single.files.get('model.safetensors')!),
    ggufLayout: ggufLayout(gguf),
    shardOf: new Map(Object.entries(index.weight_map)),
  };
}
