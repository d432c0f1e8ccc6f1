// The CUDA backend. One group always runs: the build compiled the CUDA sources exactly when nvcc
// was there, and a CUDA engine on a machine without a usable GPU fails with a clear reason. The
// rest needs a GPU and is skipped otherwise, with the reason in the test name. On a GPU machine it
// checks CUDA against the CPU backend (log-softmax of every evaluated row, 8 sequences batched
// through the paged cache, prompts of 1, 65 and 150 tokens), greedy tokens with CUDA graphs on
// and off, the chunked DeltaNet against the recurrence, the prefix cache, and quantized GGUF files
// (Q8_0, Q4_K_M) against the CPU on their dequantized weights.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { convertCheckpoint } from '../src/convert/convert.js';
import { cudaAvailable, loadEngine } from '../src/engine/engine.js';
import { loadGgufCheckpoint } from '../src/model/gguf-checkpoint.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import { loadAddon } from '../src/engine/native.js';
import type { EngineHandle, EngineOptions, KvCacheDtype, RequestResult } from '../src/engine/types.js';
import type { TextConfig } from '../src/model/types.js';
import { baseOptions, logSoftmaxRow, promptIds, tinyConfig } from './helpers/engine-fixture.js';

const V = 248320;
const ROOT = fileURLToPath(new URL('..', import.meta.url));

function nvccPresent(): boolean {
  if ((process.env.LUMEN_CUDA ?? '').toUpperCase() === 'OFF') return false;
  if (spawnSync('nvcc', ['--version'], { stdio: 'ignore' }).status === 0) return true;
  const cxx = process.env.CUDACXX;
  return (cxx !== undefined && existsSync(cxx)) || existsSync('/usr/local/cuda/bin/nvcc');
}

const addon = loadAddon();
const built = addon.cpuInfo().cudaBuilt;
const gpu = built && cudaAvailable();
const why = gpu ? '' : built ? ' [skipped: no CUDA device is visible]' : ' [skipped: this build has no CUDA backend (no nvcc)]';

describe('CUDA build', () => {
  it('compiled the CUDA sources exactly when nvcc was present', () => {
    expect(built).toBe(nvccPresent());
  });

  it('exports cudaDeviceCount, 0 without a CUDA build', () => {
    const probe = addon as unknown as { cudaDeviceCount?: () => number };
    expect(typeof probe.cudaDeviceCount).toBe('function');
    const n = probe.cudaDeviceCount!();
    expect(Number.isInteger(n) && n >= 0).toBe(true);
    if (!built) expect(n).toBe(0);
  });

  it.skipIf(gpu)(`refuses --device cuda with a reason when no GPU can be used${gpu ? ' [skipped: a GPU is present]' : ''}`, async () => {
    const cfg = tinyConfig({ numLayers: 2, layerTypes: ['linear_attention', 'full_attention'] });
    await expect(loadEngine({ synthetic: cfg }, { ...baseOptions, device: 'cuda' }, {}, { syntheticDtype: 'f32' }))
      .rejects.toThrow(/--device cuda|CUDA|cuda/);
  });
});

// ---- GPU tests

const engines: EngineHandle[] = [];
afterAll(async () => { for (const e of engines) await e.close(); });

async function open(device: 'cpu' | 'cuda', cfg: TextConfig, dtype: 'f32' | 'bf16', opts: Partial<EngineOptions> = {},
  internals: Record<string, unknown> = {}): Promise<EngineHandle> {
  const e = await loadEngine({ synthetic: cfg }, { ...baseOptions, device, ...opts }, {},
    { syntheticDtype: dtype, syntheticSeed: 7, ...internals });
  engines.push(e);
  return e;
}

const LENS = [1, 65, 150, 1, 65, 150, 16, 64];
const NEW = 6;

function batch(e: EngineHandle): Promise<RequestResult[]> {
  return Promise.all(LENS.map((n, i) => e.submit({ prompt: promptIds(n, 300 + i), maxTokens: NEW, ignoreEos: true, logits: 'all' }).done));
}

// Max |Δ log-softmax| over the rows both sides evaluated on the same inputs (prompt rows, then the
// generated rows while the greedy tokens agree), on entries the reference gives > 1e-12.
function compare(ref: RequestResult, got: RequestResult, vocab = V): { maxAbs: number; rows: number } {
  let rows = ref.promptTokens;
  for (let i = 0; i < NEW && ref.tokens[i] === got.tokens[i]; i++) rows++;
  rows = Math.min(rows, ref.logitRows ?? 0, got.logitRows ?? 0);
  let maxAbs = 0;
  for (let r = 0; r < rows; r++) {
    const a = logSoftmaxRow(ref.logits!, r, vocab);
    const b = logSoftmaxRow(got.logits!, r, vocab);
    for (let i = 0; i < vocab; i++) if (a[i]! > -27.6) maxAbs = Math.max(maxAbs, Math.abs(a[i]! - b[i]!));
  }
  return { maxAbs, rows };
}

describe('CUDA backend against the CPU backend', () => {
  // f32 weights run in fp32 on both sides (the foundation tolerance, 1e-3 on log-softmax). bf16
  // weights: prefill products on tensor cores round activations to bf16, the CPU keeps them fp32.
  // The precise GEMM mode (LUMEN_CUDA_PRECISE_GEMM=1: activations split into bf16 hi + lo) must
  // match as tightly as f32; the default mode only gets a bound against gross errors.
  const cases: { name: string; cfg: TextConfig; dtype: 'f32' | 'bf16'; tol: number; precise?: boolean; kv?: KvCacheDtype }[] = [
    { name: 'tiny f32 (value heads = 2 key heads)', cfg: tinyConfig(), dtype: 'f32', tol: 1e-3 },
    { name: 'tiny bf16, precise GEMM mode', cfg: tinyConfig(), dtype: 'bf16', tol: 2e-3, precise: true },
    { name: 'tiny bf16, default mode', cfg: tinyConfig(), dtype: 'bf16', tol: 0.5 },
    // Both backends round K and V to the same f16 values and compute in fp32 (docs/gpu.md).
    { name: 'tiny f32, f16 KV cache on both sides', cfg: tinyConfig(), dtype: 'f32', tol: 1e-3, kv: 'f16' },
    {
      name: 'hidden 256, 4 query heads per KV head, untied, f32',
      cfg: tinyConfig({ hiddenSize: 256, numHeads: 8, numKvHeads: 2, intermediateSize: 512, tieWordEmbeddings: false }),
      dtype: 'f32', tol: 1e-3,
    },
  ];
  for (const c of cases) {
    it.skipIf(!gpu)(`${c.name}: 8 batched sequences, prompts 1/65/150, within ${c.tol}${why}`, async () => {
      // bf16: the CPU reference stores the bf16 values as f32 and runs its exact fp32 path.
      const kv = { kvCacheDtype: c.kv ?? 'f32' } as const;
      const cpu = await batch(await open('cpu', c.cfg, c.dtype, kv, c.dtype === 'bf16' ? { weightDtype: 'f32' } : {}));
      if (c.precise) process.env.LUMEN_CUDA_PRECISE_GEMM = '1';
      let devEngine: EngineHandle;
      try {
        devEngine = await open('cuda', c.cfg, c.dtype, kv);
      } finally {
        delete process.env.LUMEN_CUDA_PRECISE_GEMM;
      }
      expect(devEngine.info.kvCacheDtype).toBe(kv.kvCacheDtype);
      const dev = await batch(devEngine);
      for (let i = 0; i < LENS.length; i++) {
        expect(dev[i]!.finishReason).toBe('length');
        const r = compare(cpu[i]!, dev[i]!);
        expect(r.rows).toBeGreaterThanOrEqual(LENS[i]!);
        expect(r.maxAbs, `sequence ${i} (prompt ${LENS[i]})`).toBeLessThanOrEqual(c.tol);
      }
    });
  }

  // Quantized GGUF files (Q8_0; Q4_K_M: Q4_K + Q6_K) run in their block layout on the GPU, with
  // fp32 activations: the CPU on the same file with its weights dequantized to f32 computes the
  // same products, so the f32 tolerance applies and the greedy tokens agree (docs/gpu.md).
  it.skipIf(!gpu)(`Q8_0 and Q4_K_M GGUF files match the CPU on their dequantized weights within 1e-3${why}`, async () => {
    const work = mkdtempSync(join(tmpdir(), 'lumen-cuda-quant-'));
    try {
      const ckpt = join(work, 'ckpt');
      await writeSynthCheckpoint({
        preset: 'tiny', out: ckpt, dtype: 'f32', seed: 31, vision: false, tokenizerBpeVocab: 479,
        overrides: { vocabSize: 512, eosTokenId: 479, hiddenSize: 256, intermediateSize: 512, numHeads: 4, numKvHeads: 2, linearNumValueHeads: 4 },
      });
      for (const dtype of ['q8_0', 'q4_k_m'] as const) {
        const file = join(work, `${dtype}.gguf`);
        await convertCheckpoint(ckpt, file, { dtype });
        const model = loadGgufCheckpoint(file);
        const run = async (device: 'cpu' | 'cuda', internals: Record<string, unknown>) => {
          const e = await loadEngine(model, { ...baseOptions, device }, {}, internals);
          engines.push(e);
          return Promise.all(LENS.map((n, i) => e.submit({ prompt: promptIds(n, 300 + i).map((t) => t % 512), maxTokens: NEW, ignoreEos: true, logits: 'all' }).done));
        };
        const cpu = await run('cpu', { weightDtype: 'f32' });
        const dev = await run('cuda', {});
        for (let i = 0; i < LENS.length; i++) {
          expect(dev[i]!.finishReason).toBe('length');
          const r = compare(cpu[i]!, dev[i]!, 512);
          expect(r.maxAbs, `${dtype} sequence ${i} (prompt ${LENS[i]})`).toBeLessThanOrEqual(1e-3);
          expect(dev[i]!.tokens, `${dtype} sequence ${i}`).toEqual(cpu[i]!.tokens);
        }
      }
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it.skipIf(!gpu)(`greedy tokens are identical with CUDA graphs on and off${why}`, async () => {
    const cfg = tinyConfig();
    const run = async (graphs: boolean) => {
      const prev = process.env.LUMEN_CUDA_GRAPHS;
      process.env.LUMEN_CUDA_GRAPHS = graphs ? '1' : '0';
      try {
        const e = await open('cuda', cfg, 'bf16', { cudaGraphs: graphs });
        // Different lengths: the decode batch shrinks 8 -> 1, crossing padded buckets.
        return await Promise.all([40, 35, 30, 25, 20, 15, 10, 5].map((n, i) =>
          e.submit({ prompt: promptIds(20 + 7 * i, 500 + i), maxTokens: n, ignoreEos: true }).done));
      } finally {
        if (prev === undefined) delete process.env.LUMEN_CUDA_GRAPHS;
        else process.env.LUMEN_CUDA_GRAPHS = prev;
      }
    };
    const on = await run(true);
    const off = await run(false);
    for (let i = 0; i < on.length; i++) expect(on[i]!.tokens, `sequence ${i}`).toEqual(off[i]!.tokens);
  });

  it.skipIf(!gpu)(`chunked DeltaNet equals the recurrence on the GPU${why}`, async () => {
    const rec = await open('cuda', tinyConfig(), 'f32', { prefillChunk: 512 }, { gdnChunkMin: 1 << 30 });
    const chk = await open('cuda', tinyConfig(), 'f32', { prefillChunk: 50 }, { gdnChunkMin: 1 });
    for (const n of [1, 63, 64, 65, 150]) {
      const p = promptIds(n, 40 + n);
      const a = await rec.submit({ prompt: p, maxTokens: 0, logits: 'all' }).done;
      const b = await chk.submit({ prompt: p, maxTokens: 0, logits: 'all' }).done;
      let m = 0;
      for (let i = 0; i < a.logits!.length; i++) m = Math.max(m, Math.abs(a.logits![i]! - b.logits![i]!));
      expect(m, `len ${n}`).toBeLessThan(1e-3);
    }
  });

  it.skipIf(!gpu)(`prefix-cache hits give the cold logits on the GPU${why}`, async () => {
    const e = await open('cuda', tinyConfig(), 'f32', { prefixCache: true }, { snapshotInterval: 32 });
    const shared = promptIds(96, 77);
    const cold = await e.submit({ prompt: [...shared, ...promptIds(20, 78)], maxTokens: 0, logits: 'all' }).done;
    const warm = await e.submit({ prompt: [...shared, ...promptIds(20, 78)], maxTokens: 0, logits: 'all' }).done;
    expect(warm.cachedPromptTokens).toBeGreaterThan(0);
    const off = cold.logits!.length - warm.logits!.length;
    let m = 0;
    for (let i = 0; i < warm.logits!.length; i++) m = Math.max(m, Math.abs(warm.logits![i]! - cold.logits![off + i]!));
    expect(m).toBeLessThan(1e-3);
  });
});

// The CUDA backend compiled as plain C++ against the CPU emulation of the CUDA execution model
// (native/testing/cuda_emu/): kernel-level checks of the matrix products, then the engine's CUDA
// backend against its CPU backend. Opt-in: it builds the engine once more and takes minutes.
const emu = process.env.LUMEN_TEST_CUDA_EMU === '1';
describe('CUDA backend on the CPU emulation', () => {
  it.skipIf(!emu)(`matches the CPU backend${emu ? '' : ' [skipped: set LUMEN_TEST_CUDA_EMU=1 to run it (builds for the emulation, minutes)]'}`, () => {
    const r = spawnSync('bash', ['native/testing/cuda_emu/run.sh', 'quick'], { cwd: ROOT, encoding: 'utf8', timeout: 1_800_000 });
    expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
  }, 1_900_000);

  // The threads of a block (between barriers) and the blocks of a grid in a shuffled order: a kernel
  // whose result depends on the order reads memory another thread writes without a barrier between.
  it.skipIf(!emu)(`matches it with the threads and blocks run in a shuffled order${emu ? '' : ' [skipped: set LUMEN_TEST_CUDA_EMU=1 to run it]'}`, () => {
    const r = spawnSync('bash', ['native/testing/cuda_emu/run.sh', 'quick', '--schedule=shuffle:11'], { cwd: ROOT, encoding: 'utf8', timeout: 1_800_000 });
    expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toContain('PASS schedule: threads and blocks ran in the order LUMEN_EMU_SCHEDULE=shuffle:11 asks for');
  }, 1_900_000);
});
