// Reusable synthetic-checkpoint fixtures for tests: write a small real-layout checkpoint into a
// fresh temporary directory, plus helpers to damage safetensors files in controlled ways.
//
//   const fx = await synthFixture({ overrides: { linearNumValueHeads: 4 } });
//   ... loadCheckpoint(fx.dir) ...
//   fx.cleanup();            // or cleanupAllFixtures() in afterAll
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { writeSynthCheckpoint, type SynthOptions, type SynthResult } from '../../src/model/synth.js';
import type { PresetName } from '../../src/model/presets.js';
import { readSafetensorsHeader, readTensorBytes, writeSafetensors } from '../../src/model/safetensors.js';
import type { DType, TextConfig } from '../../src/model/types.js';

export interface FixtureOptions extends Omit<SynthOptions, 'out' | 'preset'> {
  /** Default 'tiny'. */
  preset?: PresetName;
}

export interface Fixture {
  dir: string;
  result: SynthResult;
  cleanup(): void;
}

/**
 * A small vocabulary for loader/structure tests that never tokenize: writes ~1 MB instead of
 * ~64 MB. Use with `tokenizer: false` (the synthetic tokenizer needs vocab >= 248077).
 */
export const SMALL_VOCAB: Partial<TextConfig> = { vocabSize: 1024, eosTokenId: 0 };

const live = new Set<string>();

/** Creates an empty temporary directory (removed by cleanupAllFixtures). */
export function tempDir(tag = 'fixture'): string {
  const d = mkdtempSync(path.join(tmpdir(), `lumen-${tag}-`));
  live.add(d);
  return d;
}

/** Writes a synthetic checkpoint (default: tiny, bf16, seed 1, one shard) into a fresh temp dir. */
export async function synthFixture(opts: FixtureOptions = {}): Promise<Fixture> {
  const root = tempDir('synth');
  const dir = path.join(root, 'model');
  const result = await writeSynthCheckpoint({ preset: 'tiny', seed: 1, ...opts, out: dir });
  return { dir, result, cleanup: () => { rmSync(root, { recursive: true, force: true }); live.delete(root); } };
}

/** Loader-test fixture: tiny shape with SMALL_VOCAB and no tokenizer (fast). Overrides merge on top. */
export function smallFixture(opts: FixtureOptions = {}): Promise<Fixture> {
  return synthFixture({ tokenizer: false, ...opts, overrides: { ...SMALL_VOCAB, ...(opts.overrides ?? {}) } });
}

export function cleanupAllFixtures(): void {
  for (const d of live) rmSync(d, { recursive: true, force: true });
  live.clear();
}

export interface RawTensor {
  name: string;
  dtype: DType;
  shape: number[];
  data: Uint8Array;
}

/** Reads every tensor of a (small) safetensors file into memory, in header order. */
export function readAllTensors(file: string): { tensors: RawTensor[]; metadata: Record<string, string> | null } {
  const h = readSafetensorsHeader(file);
  const tensors = [...h.tensors.values()].map((e) => ({
    name: e.name, dtype: e.dtype, shape: e.shape.slice(), data: new Uint8Array(readTensorBytes({ file, offset: e.offset, nbytes: e.nbytes })),
  }));
  return { tensors, metadata: h.metadata };
}

/** Rewrites a safetensors file after `edit` changed its tensor list (drop, rename, reshape...). */
export function rewriteSafetensors(file: string, edit: (tensors: RawTensor[]) => RawTensor[]): void {
  const { tensors, metadata } = readAllTensors(file);
  writeSafetensors(file, edit(tensors), metadata);
}

/** Writes a safetensors file with an arbitrary (possibly invalid) header object and data bytes. */
export function writeRawSafetensors(file: string, header: unknown, data: Uint8Array = new Uint8Array(0)): void {
  let json = Buffer.from(JSON.stringify(header), 'utf8');
  const pad = (8 - (json.length % 8)) % 8;
  json = Buffer.concat([json, Buffer.alloc(pad, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(file, Buffer.concat([len, json, Buffer.from(data)]));
}

/** Reads, edits and rewrites config.json (`edit` may mutate in place or return a new object). */
export function editConfig(dir: string, edit: (cfg: Record<string, any>) => Record<string, any> | void): void {
  const file = path.join(dir, 'config.json');
  const cfg = JSON.parse(readFileSync(file, 'utf8')) as Record<string, any>;
  const out = edit(cfg) ?? cfg;
  writeFileSync(file, JSON.stringify(out, null, 2));
}

/** A smallFixture with one bf16 NaN in layer 1's down_proj: every hidden state after it, and every logit, is NaN. */
export async function nanFixture(): Promise<Fixture> {
  const f = await smallFixture();
  const file = path.join(f.dir, 'model.safetensors');
  const bytes = readFileSync(file);
  const headerLen = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLen).toString('utf8')) as Record<string, { dtype: string; data_offsets: [number, number] }>;
  const hit = Object.entries(header).find(([k, v]) => k.includes('layers.1.mlp.down_proj') && v.dtype === 'BF16');
  if (!hit) throw new Error('nanFixture: no bf16 layers.1.mlp.down_proj in the fixture');
  bytes.writeUInt16LE(0x7fc0, 8 + headerLen + hit[1].data_offsets[0]);
  writeFileSync(file, bytes);
  return f;
}

/** The engine's error for a request whose logits for generated token `index` hold NaN or infinite values. */
export function nanLogitsError(index: number): string {
  return `the logits that choose generated token ${index} (0-based) are not all finite (NaN or infinite): ` +
    'the weights hold NaN or infinite values, or the computation overflowed';
}
