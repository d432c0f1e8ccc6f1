// The CUDA device check's driver (scripts/gpu-check.sh runs it from dist/, one phase per process
// so a CUDA fault in one phase cannot poison the next):
//   node dist/scripts/gpu-check-driver.js correctness|graphs|perf|quant-perf
//   node dist/scripts/gpu-check-driver.js summary STATUS_A STATUS_B SECONDS   (summary.md on stdout)
// Environment (set by gpu-check.sh): CHECK_OUT (results folder), CHECK_DRY=1 (the "device" is the
// CPU backend with small models, to check the script and the pack on a CPU machine), and for the
// correctness bound of the default bf16 mode CHECK_BF16_TOL (default 0.5).
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { convertCheckpoint } from '../src/convert/convert.js';
import { loadEngine, type EngineInternals } from '../src/engine/engine.js';
import type { EngineHandle, EngineOptions, KvCacheDtype, RequestResult } from '../src/engine/types.js';
import { loadGgufCheckpoint } from '../src/model/gguf-checkpoint.js';
import { presetConfig } from '../src/model/presets.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import type { ModelCheckpoint, TextConfig } from '../src/model/types.js';

const OUT = process.env.CHECK_OUT ?? `${process.cwd()}/gpu-check-out`;
const DRY = process.env.CHECK_DRY === '1';
const DEV = DRY ? 'cpu' : 'cuda';
const THREADS = Math.max(1, os.cpus().length);
const V = 248320;

type Json = Record<string, unknown>;
type BackendStats = { graph_hits?: number; graph_misses?: number; capture_ms?: number; logit_rows_to_host?: number; picked_rows?: number } & Json;

const say = (s: string): void => { process.stderr.write(`  ${s}\n`); appendFileSync(`${OUT}/gpu-check.log`, `  ${s}\n`); };
const save = (name: string, obj: unknown): void => writeFileSync(`${OUT}/${name}.json`, JSON.stringify(obj, null, 1));
const readJson = (name: string): Json | null => {
  try { return JSON.parse(readFileSync(`${OUT}/${name}.json`, 'utf8')) as Json; } catch { return null; }
};

function tiny(over: Partial<TextConfig> = {}): TextConfig {
  const numLayers = over.numLayers ?? 4;
  return {
    hiddenSize: 128, numLayers, intermediateSize: 384, numHeads: 2, numKvHeads: 1, headDim: 256,
    linearNumKeyHeads: 2, linearNumValueHeads: 4, linearKeyHeadDim: 128, linearValueHeadDim: 128,
    linearConvKernelDim: 4, vocabSize: V, rmsNormEps: 1e-6, ropeTheta: 1e7, partialRotaryFactor: 0.25,
    mropeSection: [11, 11, 10],
    layerTypes: Array.from({ length: numLayers }, (_, i) => ((i + 1) % 4 === 0 ? 'full_attention' : 'linear_attention')),
    tieWordEmbeddings: true, eosTokenId: 248044, maxPositionEmbeddings: 262144, mtpNumHiddenLayers: 0,
    ...over,
  };
}

function ids(n: number, seed: number, vocab = 248000): number[] {
  let s = (seed * 2654435761) >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; out.push(s % vocab); }
  return out;
}

const BASE: Omit<EngineOptions, 'device'> = {
  threads: THREADS, blockSize: 16, kvcache: 'paged', maxSeq: 1024, maxSeqs: 8, prefillChunk: 512, stepTokenBudget: 2048, prefixCache: false,
};

interface Opened { e: EngineHandle; loadS: number; close(): Promise<BackendStats | null> }

// Opens an engine; with graphs set, also through the backend's environment switch (the option
// alone needs the engine to pass it on). Backend counters land in a stats file at close. With
// `model`, the engine loads that checkpoint (a GGUF file) instead of random weights of `cfg`.
async function open(device: 'cpu' | 'cuda', cfg: TextConfig, dtype: 'f32' | 'bf16', opts: Partial<EngineOptions> = {},
  internals: EngineInternals = {}, graphs = true, model?: ModelCheckpoint): Promise<Opened> {
  process.env.LUMEN_CUDA_GRAPHS = graphs ? '1' : '0';
  const statsFile = `${OUT}/.stats-${process.pid}-${Math.random().toString(36).slice(2)}.jsonl`;
  process.env.LUMEN_CUDA_STATS_FILE = statsFile;
  const t0 = Date.now();
  const e = await loadEngine(model ?? { synthetic: cfg }, { ...BASE, device, cudaGraphs: graphs, ...opts }, {},
    { syntheticDtype: dtype, syntheticSeed: 7, ...internals });
  const loadS = (Date.now() - t0) / 1000;
  return {
    e, loadS,
    async close() {
      await e.close();
      if (!existsSync(statsFile)) return null;
      const lines = readFileSync(statsFile, 'utf8').trim().split('\n');
      rmSync(statsFile, { force: true });
      try { return JSON.parse(lines[lines.length - 1]!) as BackendStats; } catch { return null; }
    },
  };
}

function logSoftmax(buf: Float32Array, row: number, V: number): Float64Array {
  const o = row * V;
  let mx = -Infinity;
  for (let i = 0; i < V; i++) mx = Math.max(mx, buf[o + i]!);
  let sum = 0;
  for (let i = 0; i < V; i++) sum += Math.exp(buf[o + i]! - mx);
  const lse = mx + Math.log(sum);
  const out = new Float64Array(V);
  for (let i = 0; i < V; i++) out[i] = buf[o + i]! - lse;
  return out;
}

// Rows evaluated on identical inputs: the prompt rows, then generated rows while tokens agree.
function compare(ref: RequestResult, got: RequestResult, newTokens: number, V: number) {
  let rows = ref.promptTokens;
  for (let i = 0; i < newTokens && ref.tokens[i] === got.tokens[i]; i++) rows++;
  rows = Math.min(rows, ref.logitRows ?? 0, got.logitRows ?? 0);
  let maxLs = 0, maxRaw = 0, argmaxSame = 0;
  for (let r = 0; r < rows; r++) {
    const a = logSoftmax(ref.logits!, r, V), b = logSoftmax(got.logits!, r, V);
    let am = 0, bm = 0;
    for (let i = 0; i < V; i++) {
      if (a[i]! > -27.6) maxLs = Math.max(maxLs, Math.abs(a[i]! - b[i]!));
      maxRaw = Math.max(maxRaw, Math.abs(ref.logits![r * V + i]! - got.logits![r * V + i]!));
      if (a[i]! > a[am]!) am = i;
      if (b[i]! > b[bm]!) bm = i;
    }
    if (am === bm) argmaxSame++;
    if (!Number.isFinite(maxLs)) break;
  }
  return { rows, maxLs: Number.isFinite(maxLs) ? maxLs : 1e30, maxRaw, argmaxSame };
}

async function correctness(): Promise<boolean> {
  const LENS = [1, 65, 150, 1, 65, 150, 16, 64];
  const NEW = 6;
  // bf16 weights: the default prefill GEMM rounds activations to bf16 (tensor cores), so it gets a
  // loose bound that only catches gross errors; the precise mode (activations split into bf16
  // hi + lo, LUMEN_CUDA_PRECISE_GEMM=1) must match the CPU as tightly as f32 does.
  const BF16_TOL = Number(process.env.CHECK_BF16_TOL ?? 0.5);
  const small4: Partial<TextConfig> = { hiddenSize: 256, numLayers: 8, numHeads: 8, numKvHeads: 2, intermediateSize: 512, layerTypes: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention', 'linear_attention', 'linear_attention', 'linear_attention', 'full_attention'] };
  // Quantized GGUF files, written here: the CPU reference runs the same file with its weights
  // dequantized to f32 (the products the GPU's quantized kernels compute, fp32 activations), so the
  // f32 tolerance applies (docs/gpu.md, "Quantized weights").
  const quant = await quantModels();
  // kv: the KV cache's element type on both sides (f16: both round K and V with the same conversion;
  // on the emulation the two sat 2.3e-4 apart, docs/parity.md).
  const cases: { name: string; cfg: TextConfig; dtype: 'f32' | 'bf16'; tol: number; precise?: boolean; model?: ModelCheckpoint; kv?: KvCacheDtype }[] = [
    { name: 'tiny f32, value heads = 2 key heads, 2 q heads per kv head', cfg: tiny(), dtype: 'f32', tol: 1e-3 },
    { name: 'tiny bf16, precise GEMM mode', cfg: tiny(), dtype: 'bf16', tol: 2e-3, precise: true },
    { name: 'tiny bf16, default mode (bf16 activations in tensor-core GEMMs)', cfg: tiny(), dtype: 'bf16', tol: BF16_TOL },
    { name: 'hidden 256, 4 q heads per kv head, nk = nv, untied, f32', cfg: tiny({ hiddenSize: 256, numHeads: 8, numKvHeads: 2, intermediateSize: 512, linearNumValueHeads: 2, tieWordEmbeddings: false }), dtype: 'f32', tol: 1e-3 },
    { name: 'hidden 256, 4 q heads per kv head, 8 layers, bf16, precise GEMM mode', cfg: tiny(small4), dtype: 'bf16', tol: 2e-3, precise: true },
    { name: 'tiny f32, f16 KV cache', cfg: tiny(), dtype: 'f32', tol: 1e-3, kv: 'f16' },
    ...quant.models.map((q) => ({ name: `${q.name} GGUF (CPU reference on its weights dequantized to f32)`, cfg: q.model.config, dtype: 'f32' as const, tol: 1e-3, model: q.model })),
  ];
  const results: Json[] = [];
  let pass = true;
  // A dry run only checks the script (and one quantized file's path through it).
  for (const c of DRY ? [...cases.slice(0, 2), ...cases.filter((x) => x.kv), ...cases.filter((x) => x.model).slice(0, 1)] : cases) {
    const t0 = Date.now();
    const vocab = c.cfg.vocabSize;
    const reqs = (e: EngineHandle) => Promise.all(LENS.map((n, i) => e.submit({ prompt: ids(n, 300 + i, Math.min(vocab, 248000)), maxTokens: NEW, ignoreEos: true, logits: 'all' }).done));
    // bf16 models: the CPU reference keeps the bf16 values but stores them as f32, so it runs its
    // exact fp32 path (its own bf16 kernels round activations to bf16 as well); quantized files:
    // their weights dequantized to f32.
    const exact = c.dtype === 'bf16' || c.model !== undefined;
    const kv = { kvCacheDtype: c.kv ?? 'f32' };
    const cpu = await open('cpu', c.cfg, c.dtype, kv, exact ? { weightDtype: 'f32' } : {}, true, c.model);
    const ref = await reqs(cpu.e);
    await cpu.close();
    // f16 cases: the f16 rounding's own effect on the CPU (its f32 cache against its f16 cache).
    // The device's f16 run must sit well within it of the CPU's (a device that kept f32 values
    // would sit about the whole effect away): below half of it, as on the emulation (docs/gpu.md).
    let effect: number | null = null;
    if (c.kv === 'f16') {
      const cpu32 = await open('cpu', c.cfg, c.dtype, { kvCacheDtype: 'f32' }, exact ? { weightDtype: 'f32' } : {}, true, c.model);
      const exact32 = await reqs(cpu32.e);
      await cpu32.close();
      effect = Math.max(...LENS.map((_, i) => compare(exact32[i]!, ref[i]!, NEW, vocab).maxLs));
    }
    if (c.precise) process.env.LUMEN_CUDA_PRECISE_GEMM = '1';
    // (A dry run's "device" is the CPU backend: it mirrors the reference's exact path.)
    const dev = await open(DEV, c.cfg, c.dtype, kv, DRY && exact ? { weightDtype: 'f32' } : {}, true, c.model);
    delete process.env.LUMEN_CUDA_PRECISE_GEMM;
    let got: RequestResult[] | undefined;
    let error: string | null = null;
    if (dev.e.info.kvCacheDtype !== kv.kvCacheDtype) error = `the engine built a ${dev.e.info.kvCacheDtype} KV cache, not ${kv.kvCacheDtype}`;
    try { got = await reqs(dev.e); } catch (err) { error = String(err); }
    const stats = await dev.close();
    const per: Json[] = [];
    let worst = 0;
    if (got) {
      for (let i = 0; i < LENS.length; i++) {
        if (got[i]!.finishReason === 'error') { error = got[i]!.error ?? 'error'; break; }
        const r = compare(ref[i]!, got[i]!, NEW, vocab);
        per.push({ prompt: LENS[i], rows: r.rows, maxAbsLogSoftmax: r.maxLs, maxAbsLogits: r.maxRaw, argmaxSame: r.argmaxSame,
          tokensSame: JSON.stringify(ref[i]!.tokens) === JSON.stringify(got[i]!.tokens) });
        worst = Math.max(worst, r.maxLs);
        if (r.rows < LENS[i]!) error = `only ${r.rows} comparable rows for prompt ${LENS[i]}`;
      }
    }
    const ok = !error && worst <= c.tol && (effect === null || worst < 0.5 * effect);
    pass &&= ok;
    results.push({ case: c.name, dtype: c.dtype, kvCacheDtype: kv.kvCacheDtype, tol: c.tol, ok, worstMaxAbsLogSoftmax: worst, f16Effect: effect, error, perSequence: per, backendStats: stats, seconds: (Date.now() - t0) / 1000 });
    say(`(a) ${ok ? 'PASS' : 'FAIL'} ${c.name}: max |Δ log-softmax| ${worst.toExponential(2)} (tol ${c.tol}${effect === null ? '' : `; below half the f16 rounding's effect ${effect.toExponential(2)}`})${error ? ` error: ${error}` : ''}`);
  }
  quant.cleanup();
  save('correctness', { pass, device: DEV, results });
  return pass;
}

// A small synthetic checkpoint (hidden 256, so the K-quant blocks are real; a 512-token tokenizer)
// converted to Q8_0 and Q4_K_M (Q4_K + Q6_K), in a temporary folder.
async function quantModels(): Promise<{ models: { name: string; model: ModelCheckpoint }[]; cleanup(): void }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'lumen-gpu-check-quant-'));
  const ckpt = path.join(dir, 'ckpt');
  await writeSynthCheckpoint({
    preset: 'tiny', out: ckpt, dtype: 'f32', seed: 31, vision: false, tokenizerBpeVocab: 479,
    overrides: { vocabSize: 512, eosTokenId: 479, hiddenSize: 256, intermediateSize: 512, numHeads: 4, numKvHeads: 2, linearNumValueHeads: 4 },
  });
  const models: { name: string; model: ModelCheckpoint }[] = [];
  for (const dtype of ['q8_0', 'q4_k_m'] as const) {
    const file = path.join(dir, `${dtype}.gguf`);
    await convertCheckpoint(ckpt, file, { dtype });
    models.push({ name: dtype.toUpperCase(), model: loadGgufCheckpoint(file) });
  }
  return { models, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

async function graphs(): Promise<boolean> {
  const models: { name: string; cfg: TextConfig; dtype: 'bf16'; maxSeq: number }[] = [
    { name: 'tiny bf16', cfg: tiny(), dtype: 'bf16', maxSeq: 1024 },
    { name: 'synthetic:0.8b bf16', cfg: presetConfig(DRY ? 'tiny' : '0.8b'), dtype: 'bf16', maxSeq: 512 },
  ];
  const OUTS = [40, 35, 30, 25, 20, 15, 10, 5];  // the decode batch shrinks 8 -> 1 across buckets
  const results: Json[] = [];
  let pass = true;
  for (const m of DRY ? models.slice(0, 1) : models) {
    const run = async (on: boolean) => {
      const h = await open(DEV, m.cfg, m.dtype, { maxSeq: m.maxSeq }, {}, on);
      let res: RequestResult[] | undefined;
      let error: string | null = null;
      try {
        res = await Promise.all(OUTS.map((n, i) => h.e.submit({ prompt: ids(20 + 9 * i, 500 + i), maxTokens: n, ignoreEos: true }).done));
        for (const r of res) if (r.finishReason === 'error') error = r.error ?? 'error';
      } catch (err) { error = String(err); }
      const stats = await h.close();
      return { tokens: res ? res.map((r) => r.tokens) : null, stats, error, loadS: h.loadS };
    };
    const on = await run(true);
    const off = await run(false);
    const same = !on.error && !off.error && JSON.stringify(on.tokens) === JSON.stringify(off.tokens);
    const used = DRY || (!!on.stats && (on.stats.graph_hits ?? 0) > 0 && !!off.stats && off.stats.graph_hits === 0);
    const ok = same && used;
    pass &&= ok;
    results.push({ model: m.name, ok, tokensIdentical: same, graphsOn: on.stats, graphsOff: off.stats, errors: [on.error, off.error] });
    say(`(b) ${ok ? 'PASS' : 'FAIL'} ${m.name}: tokens ${same ? 'identical' : 'DIFFER'}; graphs on: ${JSON.stringify(on.stats)}; off: ${JSON.stringify(off.stats)}${on.error || off.error ? ` errors: ${on.error} / ${off.error}` : ''}`);
  }
  // Device sampling (docs/gpu.md, Numerics): greedy and top-k/top-p rows are reduced on the GPU and
  // only ids or k candidates come back; asking for logprobs brings every row back whole and samples
  // on the host. Both must give the same tokens on the same device (the same logits, the same
  // seeded draw); the CPU backend's tokens are reported (f32: expected equal, not required, since
  // a draw near a probability boundary may flip on a 1e-5 logit difference).
  const sampling = { name: 'tiny f32, 3 greedy + 5 top-k/top-p requests', cfg: tiny(), dtype: 'f32' as const };
  const reqs = OUTS.map((n, i) => ({
    prompt: ids(3 + 11 * i, 900 + i), maxTokens: Math.min(n, 12), ignoreEos: true,
    ...(i >= 3 ? { temperature: i === 7 ? 1.3 : 0.8, topK: i === 6 ? 1024 : 40, topP: i === 5 ? 0.9 : 1, seed: 4000 + i } : {}),
  }));
  const sample = async (device: 'cpu' | 'cuda', whole: boolean) => {
    const h = await open(device, sampling.cfg, sampling.dtype);
    let tokens: number[][] | null = null;
    let error: string | null = null;
    try {
      const res = await Promise.all(reqs.map((r) => h.e.submit(whole ? { ...r, logprobs: 0 } : r).done));
      for (const r of res) if (r.finishReason === 'error') error = r.error ?? 'error';
      tokens = res.map((r) => r.tokens);
    } catch (err) { error = String(err); }
    return { tokens, error, stats: await h.close() };
  };
  const picked = await sample(DEV, false);
  const wholeRows = await sample(DEV, true);
  const cpuRef = await sample('cpu', false);
  const sameHost = !picked.error && !wholeRows.error && JSON.stringify(picked.tokens) === JSON.stringify(wholeRows.tokens);
  const sameCpu = !picked.error && !cpuRef.error && JSON.stringify(picked.tokens) === JSON.stringify(cpuRef.tokens);
  const noRows = DRY || (picked.stats?.logit_rows_to_host === 0 && (num(picked.stats?.picked_rows) ?? 0) > 0);
  const sampOk = sameHost && noRows;
  pass &&= sampOk;
  results.push({ model: sampling.name, sampling: true, ok: sampOk, tokensIdentical: sameHost, tokensEqualCpu: sameCpu,
    picked: picked.stats, wholeRows: wholeRows.stats, errors: [picked.error, wholeRows.error, cpuRef.error] });
  say(`(b) ${sampOk ? 'PASS' : 'FAIL'} device sampling, ${sampling.name}: tokens ${sameHost ? 'identical' : 'DIFFER'} to host sampling on whole rows, ` +
      `${sameCpu ? 'equal to' : 'differ from'} the CPU backend's; picked run: ${JSON.stringify(picked.stats)}`);
  save('graphs', { pass, device: DEV, results });
  return pass;
}

// ---- performance

function shapeBytes(c: TextConfig) {
  const H = c.hiddenSize, I = c.intermediateSize, nh = c.numHeads, nkv = c.numKvHeads, hd = c.headDim;
  const nk = c.linearNumKeyHeads, nv = c.linearNumValueHeads, dk = c.linearKeyHeadDim, dv = c.linearValueHeadDim;
  const kd = nk * dk, vd = nv * dv, cd = 2 * kd + vd;
  let layerParams = 0, nFull = 0;
  for (const t of c.layerTypes) {
    layerParams += 3 * H * I;
    if (t === 'full_attention') { nFull++; layerParams += 2 * nh * hd * H + 2 * nkv * hd * H + H * nh * hd; }
    else layerParams += cd * H + vd * H + 2 * nv * H + H * vd;
  }
  const nLin = c.layerTypes.length - nFull;
  const head = c.vocabSize * H;
  return {
    layerParams, head, nFull, nLin,
    kvPerToken: nFull * 2 * nkv * hd * 4,                                      // fp32 cache, bytes
    stateBytes: nLin * (nv * dk * dv + (c.linearConvKernelDim - 1) * cd) * 4,  // per sequence, fp32
  };
}

async function timed(e: EngineHandle, n: number, isl: number, osl: number, seed: number) {
  const t0 = e.nowMs();
  const res = await Promise.all(Array.from({ length: n }, (_, i) => e.submit({ prompt: ids(isl, seed + i), maxTokens: osl, ignoreEos: true }).done));
  const wall = (e.nowMs() - t0) / 1000;
  for (const r of res) if (r.finishReason === 'error') throw new Error(r.error);
  return { res, wall };
}

const num = (x: unknown): number | undefined => (typeof x === 'number' ? x : undefined);

async function perfModel(name: string, cfg: TextConfig, cells: [number, number][], concs: number[], model?: ModelCheckpoint): Promise<Json> {
  const maxIsl = Math.max(128, ...cells.map((c) => c[0]));
  const opts = { maxSeq: Math.max(maxIsl, DRY ? 256 : 2048) + 512, maxSeqs: 8, prefillChunk: 2048, stepTokenBudget: 2048 };
  const h = await open(DEV, cfg, 'bf16', opts, {}, true, model);
  const e = h.e;
  const gib = (b: number | undefined) => (b === undefined ? '-' : (b / 2 ** 30).toFixed(2));
  const memory = { kvPool: e.info.kvPool ?? null, kvPoolBytes: e.info.kvPoolBytes ?? null, kvBlocks: e.info.kvBlocksTotal,
    hostWeightsReleased: e.info.hostWeightsReleased ?? false, rssBeforeReleaseBytes: e.info.rssBeforeReleaseBytes ?? null,
    rssAfterReleaseBytes: e.info.rssAfterReleaseBytes ?? null };
  say(`(c) ${name}: loaded in ${h.loadS.toFixed(1)} s (${e.info.gpuName ?? e.info.isa}, weights ${gib(e.info.weightBytes)} GiB); ` +
      `KV pool ${e.info.kvBlocksTotal} blocks, ${gib(e.info.kvPoolBytes)} GiB (${e.info.kvPool ?? '?'}); host weights ` +
      `${e.info.hostWeightsReleased ? `released, RSS ${gib(e.info.rssBeforeReleaseBytes)} -> ${gib(e.info.rssAfterReleaseBytes)} GiB` : 'kept'}`);
  const rows: Json[] = [];
  try {
    await timed(e, 2, 32, 8, 1);  // warm-up: captures small buckets, first launches
    for (const [isl, osl] of cells)
      for (const c of concs) {
        const { res, wall } = await timed(e, c, isl, osl, 1000 * isl + c);
        const ttft = res.map((r) => r.tokenMs[0]! - r.enqueueMs);
        const tpot = res.map((r) => (r.tokenMs[r.tokenMs.length - 1]! - r.tokenMs[0]!) / Math.max(1, r.tokenMs.length - 1));
        const gen = res.reduce((s, r) => s + r.tokens.length, 0);
        const row = { model: name, isl, osl, concurrency: c, wallS: wall, outputTokS: gen / wall,
          meanTtftMs: ttft.reduce((a, b) => a + b, 0) / c, meanTpotMs: tpot.reduce((a, b) => a + b, 0) / c,
          decodeTokSPerSeq: 1000 / (tpot.reduce((a, b) => a + b, 0) / c) };
        rows.push(row);
        say(`(c) ${name} ${isl}:${osl} c=${c}: ${row.outputTokS.toFixed(1)} tok/s out, TTFT ${row.meanTtftMs.toFixed(1)} ms, TPOT ${row.meanTpotMs.toFixed(2)} ms`);
      }
    // (d) decode at c=1 and c=8, prefill of 2048 tokens (best of 3).
    const d1 = await timed(e, 1, 128, DRY ? 16 : 256, 77);
    const r1 = d1.res[0]!;
    const dec1 = (r1.tokenMs.length - 1) / ((r1.tokenMs[r1.tokenMs.length - 1]! - r1.tokenMs[0]!) / 1000);
    const d8 = await timed(e, 8, 128, DRY ? 16 : 256, 88);
    const first = Math.max(...d8.res.map((r) => r.tokenMs[0]!));
    const last = Math.min(...d8.res.map((r) => r.tokenMs[r.tokenMs.length - 1]!));
    let toks = 0;
    for (const r of d8.res) toks += r.tokenMs.filter((t) => t >= first && t <= last).length;
    const dec8 = toks / Math.max(1e-9, (last - first) / 1000);
    let pre = Infinity;
    const PL = DRY ? 256 : 2048;
    for (let k = 0; k < 3; k++) {
      const p = await timed(e, 1, PL, 1, 900 + k);
      pre = Math.min(pre, (p.res[0]!.tokenMs[0]! - p.res[0]!.enqueueMs) / 1000);
    }
    const sb = shapeBytes(cfg);
    const probe = readJson('probe') ?? {};
    const torch = readJson('torch') ?? {};
    const avgCtx = 128 + (DRY ? 8 : 128);
    // Weights once per step: bf16 matrices, or a GGUF file's weights as the engine holds them.
    const weightStep = model ? e.info.weightBytes : 2 * (sb.layerParams + sb.head);
    const bytesStep = weightStep + avgCtx * sb.kvPerToken + 2 * sb.stateBytes;
    const copyGbps = num(probe.copy_gbps);
    const bw = copyGbps ? copyGbps * 1e9 : NaN;
    const roofTokS = bw / bytesStep;
    const attnFlops = sb.nFull * 2 * cfg.numHeads * cfg.headDim * PL * PL;  // QKᵀ and PV, causal half
    const prefillFlops = 2 * sb.layerParams * PL + attnFlops + 2 * sb.head;
    const rateTflops = num(torch.torch_bf16_tflops) ?? num(probe.mma_bf16_tflops) ?? NaN;
    const achievedTflops = prefillFlops / pre / 1e12;
    const roof = {
      model: name, bytesPerDecodeStep: bytesStep, copyGBps: probe.copy_gbps ?? null, readGBps: probe.read_gbps ?? null,
      decodeTokSC1: dec1, decodeRooflineTokS: roofTokS, decodeFractionOfRoofline: dec1 / roofTokS,
      decodeTokSC8: dec8, batchingEfficiencyC8: dec8 / (8 * dec1),
      prefillTokens: PL, prefillSeconds: pre, prefillTokS: PL / pre, prefillTflops: achievedTflops,
      matrixRateTflops: rateTflops, matrixRateSource: torch.torch_bf16_tflops ? 'torch bf16 matmul 8192^3' : 'gpu-probe mma.sync issue rate',
      prefillFractionOfMatrixRate: achievedTflops / rateTflops,
    };
    say(`(d) ${name}: decode c=1 ${dec1.toFixed(1)} tok/s vs roofline ${roofTokS.toFixed(1)} (${(100 * roof.decodeFractionOfRoofline).toFixed(1)} %); ` +
        `prefill ${PL} ${roof.prefillTokS.toFixed(0)} tok/s = ${achievedTflops.toFixed(1)} TFLOP/s vs ${Number(rateTflops).toFixed(0)} (${(100 * roof.prefillFractionOfMatrixRate).toFixed(1)} %); ` +
        `c=8 ${dec8.toFixed(1)} tok/s, batching efficiency ${roof.batchingEfficiencyC8.toFixed(2)}`);
    const devicePeak = e.stats().devicePeakBytes ?? null;
    const stats = await h.close();
    return { rows, roof, memory: { ...memory, devicePeakBytes: devicePeak }, backendStats: stats, loadS: h.loadS };
  } catch (err) {
    const stats = await h.close().catch(() => null);
    say(`(c/d) ${name}: ERROR ${err}`);
    return { rows, error: String(err), backendStats: stats, loadS: h.loadS };
  }
}

async function perf(): Promise<boolean> {
  const models: [string, TextConfig][] = DRY ? [['tiny', presetConfig('tiny')]] : [['synthetic:4b', presetConfig('4b')], ['synthetic:0.8b', presetConfig('0.8b')]];
  const cells: [number, number][] = DRY ? [[128, 16], [256, 16]] : [[128, 128], [2048, 128]];
  const out: Json[] = [];
  for (const [name, cfg] of models) out.push(await perfModel(name, cfg, cells, [1, 8]));
  save('perf', { device: DEV, models: out });
  return true;
}

// (e) A quantized model's speed: the pack carries no weights, so a 0.8B-shaped synthetic checkpoint
// is written and converted to Q8_0 here (on every core), then measured as (d) measures, the bytes
// per step being the file's weights as the engine holds them. Run only when time is left.
async function quantPerf(): Promise<boolean> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'lumen-gpu-check-qperf-'));
  try {
    const preset = DRY ? 'tiny' : '0.8b';
    const t0 = Date.now();
    const ckpt = path.join(dir, 'ckpt');
    await writeSynthCheckpoint({ preset, out: ckpt, dtype: 'bf16', seed: 7, vision: false });
    const file = path.join(dir, 'q8_0.gguf');
    await convertCheckpoint(ckpt, file, { dtype: 'q8_0', threads: THREADS });
    rmSync(ckpt, { recursive: true, force: true });
    const model = loadGgufCheckpoint(file);
    say(`(e) synthetic ${preset} converted to Q8_0 in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const r = await perfModel(`synthetic ${preset} Q8_0 GGUF`, model.config, [], [], model);
    save('quant-perf', { device: DEV, models: [r] });
    return !r.error;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// summary.md from the phases' JSON files (whatever phases ran).
function summary(a: string, b: string, secs: string): string {
  const rd = (n: string): any => readJson(n);
  const f = (x: unknown, d = 1) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '-');
  const lines = [`# GPU check (${secs} s)`, '', `- (a) CUDA vs CPU logits: **${a}**`, `- (b) greedy tokens, graphs on = off: **${b}**`];
  const probe = rd('probe'), torch = rd('torch');
  if (probe) lines.push(`- device: ${probe.name}, copy ${f(probe.copy_gbps, 0)} GB/s (read+write), read ${f(probe.read_gbps, 0)} GB/s, mma.sync bf16 ${f(probe.mma_bf16_tflops, 0)} TFLOP/s${torch ? `, torch bf16 matmul ${f(torch.torch_bf16_tflops, 0)} TFLOP/s` : ''}`);
  const c = rd('correctness');
  if (c) { lines.push('', '## (a)', '', '| case | max abs d log-softmax | tol | ok |', '|---|---|---|---|'); for (const r of c.results) lines.push(`| ${r.case} | ${r.worstMaxAbsLogSoftmax.toExponential(2)} | ${r.tol} | ${r.ok ? 'yes' : `NO ${r.error ?? ''}`} |`); }
  const g = rd('graphs');
  if (g) { lines.push('', '## (b)', '', '| model | identical | hits on | misses on | capture ms | hits off |', '|---|---|---|---|---|---|'); for (const r of g.results) if (!r.sampling) lines.push(`| ${r.model} | ${r.tokensIdentical} | ${r.graphsOn?.graph_hits ?? '-'} | ${r.graphsOn?.graph_misses ?? '-'} | ${f(r.graphsOn?.capture_ms)} | ${r.graphsOff?.graph_hits ?? '-'} |`);
    for (const r of g.results) if (r.sampling) lines.push('', `Device sampling (${r.model}): tokens ${r.tokensIdentical ? 'identical' : 'DIFFER'} to host sampling on whole rows, ${r.tokensEqualCpu ? 'equal to' : 'differ from'} the CPU backend's; whole rows copied ${r.picked?.logit_rows_to_host ?? '-'}, rows picked on the device ${r.picked?.picked_rows ?? '-'} (${r.ok ? 'pass' : 'FAIL'}).`); }
  const p = rd('perf');
  if (p) {
    lines.push('', '## (c) sweep (engine API)', '', '| model | isl:osl | c | out tok/s | TTFT ms | TPOT ms |', '|---|---|---|---|---|---|');
    for (const m of p.models) for (const r of m.rows) lines.push(`| ${r.model} | ${r.isl}:${r.osl} | ${r.concurrency} | ${f(r.outputTokS)} | ${f(r.meanTtftMs)} | ${f(r.meanTpotMs, 2)} |`);
    lines.push('', '## (d) against the ceilings', '', '| model | decode c=1 tok/s | roofline tok/s | % | prefill tok/s | TFLOP/s | matrix rate | % | c=8 tok/s | batching eff. |', '|---|---|---|---|---|---|---|---|---|---|');
    for (const m of p.models) { const r = m.roof; if (!r) { lines.push(`| ${m.rows[0]?.model ?? '?'} | error: ${m.error} |`); continue; }
      lines.push(`| ${r.model} | ${f(r.decodeTokSC1)} | ${f(r.decodeRooflineTokS)} | ${f(100 * r.decodeFractionOfRoofline)} | ${f(r.prefillTokS, 0)} | ${f(r.prefillTflops)} | ${f(r.matrixRateTflops, 0)} (${r.matrixRateSource}) | ${f(100 * r.prefillFractionOfMatrixRate)} | ${f(r.decodeTokSC8)} | ${f(r.batchingEfficiencyC8, 2)} |`); }
    lines.push('', 'Targets (issue 6, H200, 4B): decode c=1 >= 85 % of the roofline, prefill 2048 >= 50 % of the matrix rate, batching efficiency at c=8 >= 0.8.');
    const g2 = (b: unknown) => (typeof b === 'number' ? (b / 2 ** 30).toFixed(2) : '-');
    lines.push('', 'Memory (engine API, default KV sizing: max_seq x max_seqs):', '');
    for (const m of p.models) { const mm = m.memory; if (!mm) continue;
      lines.push(`- ${m.roof?.model ?? m.rows[0]?.model ?? '?'}: KV pool ${mm.kvBlocks} blocks, ${g2(mm.kvPoolBytes)} GiB (${mm.kvPool}); host weights ${mm.hostWeightsReleased ? `released after upload, RSS ${g2(mm.rssBeforeReleaseBytes)} -> ${g2(mm.rssAfterReleaseBytes)} GiB` : 'kept'}; device allocator peak ${g2(mm.devicePeakBytes)} GiB`); }
  }
  const q = rd('quant-perf');
  if (q) {
    lines.push('', '## (e) a quantized GGUF (Q8_0, converted at check time)', '', '| model | decode c=1 tok/s | roofline tok/s | % | prefill tok/s | c=8 tok/s | batching eff. |', '|---|---|---|---|---|---|---|');
    for (const m of q.models) { const r = m.roof; if (!r) { lines.push(`| ? | error: ${m.error} |`); continue; }
      lines.push(`| ${r.model} | ${f(r.decodeTokSC1)} | ${f(r.decodeRooflineTokS)} | ${f(100 * r.decodeFractionOfRoofline)} | ${f(r.prefillTokS, 0)} | ${f(r.decodeTokSC8)} | ${f(r.batchingEfficiencyC8, 2)} |`); }
  }
  return lines.join('\n');
}

const phases: Record<string, () => Promise<boolean>> = { correctness, graphs, perf, 'quant-perf': quantPerf };
const phase = process.argv[2] ?? '';
if (phase === 'summary') {
  const [a = 'skipped', b = 'skipped', secs = '?'] = process.argv.slice(3);
  console.log(summary(a, b, secs));
} else if (!phases[phase]) {
  console.error(`unknown phase ${phase}`);
  process.exit(2);
} else {
  try {
    const ok = await phases[phase]!();
    process.exit(ok ? 0 : 1);
  } catch (err) {
    say(`${phase}: ERROR ${err instanceof Error && err.stack ? err.stack : err}`);
    process.exit(1);
  }
}
