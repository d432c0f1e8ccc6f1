// Batching benchmark (the engine issue's measurement): aggregate decode tok/s at concurrency 1, 4
// and 8 on the synthetic Qwen3.5-0.8B-shaped bf16 checkpoint, 128-token prompts, and the batching
// efficiency aggregate(c) / (c x aggregate(1)). Each round runs every concurrency once, in turn
// (interleaved, so drift on a shared machine hits all of them alike); medians over rounds.
// The c requests of a measurement are submitted together and admitted in one step; the rate is
// the steady-state one (the window where all c streams decode). Usage: npm run bench:batch -- [flags]
import { writeFileSync } from 'node:fs';
import { Command } from 'commander';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { loadEngine } from '../src/engine/engine.js';
import { steadyDecodeRate } from '../src/bench/metrics.js';
import { formatOpsReport } from '../src/bench/profile.js';
import { benchIds, ensureBenchModel, median } from './bench-model.js';

const program = new Command('batch-bench')
  .option('--threads <n>', 'engine threads', (v) => Number(v), 2)
  .option('--rounds <n>', 'interleaved rounds (medians reported)', (v) => Number(v), 3)
  .option('--prompt <n>', 'prompt tokens per sequence', (v) => Number(v), 128)
  .option('--tokens <n>', 'tokens generated per sequence', (v) => Number(v), 48)
  .option('--concurrency <list>', 'concurrencies', '1,4,8')
  .option('--preset <p>', 'synthetic preset', '0.8b')
  .option('--profile', 'print the per-op profile of each concurrency (summed over rounds)')
  .option('--json <file>', 'also write the results as JSON')
  .parse(process.argv);
const opt = program.opts<{ threads: number; rounds: number; prompt: number; tokens: number; concurrency: string; preset: string; profile?: boolean; json?: string }>();
const log = (s: string) => process.stderr.write(`${s}\n`);

async function main(): Promise<void> {
  const levels = opt.concurrency.split(',').map(Number);
  if (levels.some((c) => !Number.isInteger(c) || c < 1)) throw new Error(`--concurrency: not a list of positive integers: ${opt.concurrency}`);
  const maxC = Math.max(...levels);
  const { dir } = await ensureBenchModel(opt.preset, log, false);
  const engine = await loadEngine(loadCheckpoint(dir), {
    device: 'cpu', threads: opt.threads, blockSize: 16, kvcache: 'paged', maxSeq: opt.prompt + opt.tokens + 8,
    maxSeqs: maxC, prefillChunk: 512, stepTokenBudget: Math.max(2048, maxC * opt.prompt), prefixCache: false,
    profile: opt.profile ?? false,
  });
  const decodeOnly = new Map<number, NonNullable<ReturnType<typeof engine.takeProfile>>[]>();
  async function measure(c: number, seed: number): Promise<number> {
    const runs = await Promise.all(Array.from({ length: c }, (_, i) =>
      engine.submit({ prompt: benchIds(opt.prompt, seed * 100 + i), maxTokens: opt.tokens, ignoreEos: true }).done));
    for (const r of runs) if (r.finishReason !== 'length') throw new Error(`request ended with ${r.finishReason}: ${r.error ?? ''}`);
    const rate = steadyDecodeRate(runs.map((r) => r.tokenMs));
    if (rate === null) throw new Error(`c=${c}: the streams never decoded together`);
    return rate;
  }
  log(`warm-up ...`);
  for (const c of levels) await measure(c, 9000 + c);
  engine.takeProfile();
  const rates = new Map<number, number[]>(levels.map((c) => [c, []]));
  for (let r = 0; r < opt.rounds; r++) {
    const line: string[] = [];
    for (const c of levels) {
      const x = await measure(c, r * 10 + c);
      rates.get(c)!.push(x);
      line.push(`c=${c} ${x.toFixed(1)}`);
      if (opt.profile) { const p = engine.takeProfile(); if (p) (decodeOnly.get(c) ?? decodeOnly.set(c, []).get(c)!).push(p); }
    }
    log(`round ${r + 1}/${opt.rounds}: ${line.join(', ')} tok/s`);
  }
  const base = median(rates.get(1) ?? rates.get(levels[0]!)!);
  const out: string[] = [];
  out.push(`model: synthetic ${opt.preset} bf16; ${opt.threads} threads; prompt ${opt.prompt}, ${opt.tokens} generated; steady-state aggregate decode, medians of ${opt.rounds}`);
  out.push(`${'concurrency'.padEnd(12)}${'tok/s'.padStart(10)}${'step ms'.padStart(10)}${'speedup'.padStart(10)}${'efficiency'.padStart(12)}`);
  for (const c of levels) {
    const m = median(rates.get(c)!);
    out.push(`${String(c).padEnd(12)}${m.toFixed(1).padStart(10)}${((1000 * c) / m).toFixed(1).padStart(10)}${(m / base).toFixed(2).padStart(10)}${(m / (c * base)).toFixed(2).padStart(12)}`);
  }
  process.stdout.write(`${out.join('\n')}\n`);
  if (opt.profile) {
    for (const c of levels) {
      const ps = decodeOnly.get(c) ?? [];
      const merged = new Map<string, { name: string; group: string; calls: number; totalUs: number; selfUs: number }>();
      for (const p of ps) for (const o of p.ops) {
        const m = merged.get(o.name) ?? { ...o, calls: 0, totalUs: 0, selfUs: 0 };
        m.calls += o.calls; m.totalUs += o.totalUs; m.selfUs += o.selfUs;
        merged.set(o.name, m);
      }
      process.stderr.write(`${formatOpsReport(`c=${c}, ${opt.rounds} rounds (prefill included)`, [...merged.values()])}\n`);
    }
  }
  if (opt.json) writeFileSync(opt.json, JSON.stringify({ rates: Object.fromEntries(rates), threads: opt.threads }, null, 2));
  await engine.close();
}

main().catch((err) => {
  process.stderr.write(`batch-bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
