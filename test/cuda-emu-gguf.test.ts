// Quantized GGUF files on the CUDA backend, run on the CPU emulation of the CUDA execution model
// (native/testing/cuda_emu/, no GPU): synthetic checkpoints converted by `bench convert`'s code to
// Q8_0 and Q4_K_M, loaded by the GGUF loader, and handed to the emulation check, which runs the
// CUDA backend against the CPU backend on the same file (emu_check.cc, gguf_cases): within the f32
// tolerance and with equal greedy tokens against the CPU on the dequantized weights (the CPU's
// quantized run, whose activations are quantized to q8 blocks, is only reported). A file with a type the GPU kernels lack
// (Q4_0) must be refused naming a tensor. Opt-in like the rest of the emulation: it builds the
// engine once more and takes minutes.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { convertCheckpoint } from '../src/convert/convert.js';
import type { QuantDtype } from '../src/convert/quant-mix.js';
import { loadGgufCheckpoint } from '../src/model/gguf-checkpoint.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import type { TextConfig } from '../src/model/types.js';
import { writeEmuModelSpec } from './helpers/emu-model-spec.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const emu = process.env.LUMEN_TEST_CUDA_EMU === '1';
const BPE = 479;  // a small tokenizer: vocab 512
const SMALL = { vocabSize: BPE + 33, eosTokenId: BPE };

interface Model {
  label: string;
  overrides: Partial<TextConfig>;
  dtype: QuantDtype;
  expect: 'ok' | 'refused';
  /** ggml types the file must hold (what the case claims to cover). */
  types: string[];
}

const MODELS: Model[] = [
  { label: 'q8_0 hidden 256', overrides: { ...SMALL, hiddenSize: 256, intermediateSize: 512, numHeads: 4, numKvHeads: 2, linearNumValueHeads: 4 }, dtype: 'q8_0', expect: 'ok', types: ['Q8_0'] },
  { label: 'q4_k_m hidden 256', overrides: { ...SMALL, hiddenSize: 256, intermediateSize: 512, numHeads: 4, numKvHeads: 2, linearNumValueHeads: 4 }, dtype: 'q4_k_m', expect: 'ok', types: ['Q4_K', 'Q6_K'] },
  // Rows of 128: Q5_0 and Q8_0 fallbacks beside Q4_K / Q6_K on the 512- and 256-value rows, and
  // q|k|v of different types (merged launches split by type).
  { label: 'q4_k_m hidden 128 untied (fallbacks)', overrides: { ...SMALL, tieWordEmbeddings: false }, dtype: 'q4_k_m', expect: 'ok', types: ['Q5_0', 'Q8_0', 'Q4_K', 'Q6_K'] },
  { label: 'q4_0 hidden 128 (no GPU kernels)', overrides: { ...SMALL }, dtype: 'q4_0', expect: 'refused', types: ['Q4_0'] },
];

let work: string | undefined;
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('quantized GGUF files on the CUDA backend (CPU emulation)', () => {
  it.skipIf(!emu)(`match the CPU backend${emu ? '' : ' [skipped: set LUMEN_TEST_CUDA_EMU=1 to run it (builds for the emulation, minutes)]'}`, async () => {
    // LUMEN_EMU_GGUF_DIR: write the models and specs there and keep them (to rerun run.sh gguf by hand).
    const keep = process.env.LUMEN_EMU_GGUF_DIR;
    if (keep) mkdirSync(keep, { recursive: true });
    else work = mkdtempSync(join(tmpdir(), 'lumen-emu-gguf-'));
    const dir0 = keep ?? work!;
    const specs: string[] = [];
    for (const [i, m] of MODELS.entries()) {
      const dir = join(dir0, `ckpt${i}`);
      await writeSynthCheckpoint({ preset: 'tiny', out: dir, dtype: 'f32', seed: 31 + i, overrides: m.overrides, tokenizerBpeVocab: BPE, vision: false });
      const file = join(dir0, `m${i}-${m.dtype}.gguf`);
      await convertCheckpoint(dir, file, { dtype: m.dtype });
      const model = loadGgufCheckpoint(file);
      const held = new Set([...model.tensors.values()].map((t) => t.dtype as string));
      for (const t of m.types) expect(held.has(t), `${m.label}: ${t} in ${[...held].join(', ')}`).toBe(true);
      const spec = join(dir0, `m${i}.spec`);
      writeEmuModelSpec(model, m.label, m.expect, spec);
      specs.push(spec);
    }
    const r = spawnSync('bash', ['native/testing/cuda_emu/run.sh', 'gguf', ...specs], { cwd: ROOT, encoding: 'utf8', timeout: 1_800_000 });
    const out = `${r.stdout}\n${r.stderr}`;
    expect(r.status, out).toBe(0);
    // Every model reported: the kernels on its matrices and the engine comparison for each loaded
    // one, one refusal.
    expect(out.match(/^PASS \(gguf\)/gm)?.length ?? 0, out).toBe(MODELS.reduce((n, m) => n + (m.expect === 'ok' ? 2 : 1), 0));
    expect(out, out).toMatch(/refused: .*CUDA backend: tensor \S+ is Q4_0 .*--device cpu/);
  }, 1_900_000);
});
