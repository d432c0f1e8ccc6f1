// Batching benchmark (the engine issue's measurement): aggregate decode tok/s at concurrency 1, 4
// and 8 on the synthetic Qwen3.5-0.8B-shaped bf16 checkpoint, 128-token prompts, and the batching
// efficiency aggregate(c) / (c x aggregate(1)). Each round runs every concurrency once, in turn
// (interleaved, so drift on a shared machine hits all of them alike); medians over rounds, and the
// speedup over c=1 (and the efficiency) the median of each round's own ratio: a median c=8 over a
// median c=1 divides one round's figure by another's (docs/performance.md, "How to measure").
// The c requests of a measurement are submitted together and admitted in one step; the rate is
// the steady-state one (the window where all c streams decode).
// `--addons A,B` loads two builds of the native addon into this process and interleaves them in
// every round (A/B of a kernel change on a noisy machine); `--reloads N` loads every build's engine
// afresh N times (the load order alternated), `--rounds` rounds each time. Two byte-identical
// copies of one build, listed as two addons, ran several per cent apart in most processes, and
// still up to ×1.08 with every module loaded before the first engine (cause unknown;
// docs/performance.md, twenty-sixth and twenty-seventh sessions): list a copy of the baseline as
// a third build, an A/A control, and read a change against it.
// `--kv-cache-dtype f32,f16` runs every build with each KV cache type, interleaved as builds are.
// `--gguf FILE` measures a GGUF file instead of the synthetic preset. `--in-memory` has the engine
// generate the preset's weights (as `--model-path synthetic:<preset>`, seed 0) instead of writing a
// checkpoint into .models/ (seed 1) on first use and loading it: nothing is written to disk.
// Usage: npm run bench:batch -- [flags]
import { writeFileSync } from 'node:fs';
import { Command } from 'commander';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { loadGgufCheckpoint } from '../src/model/gguf-checkpoint.js';
import { syntheticModel } from '../src/model/synthetic-model.js';
import { DEFAULT_SYNTH_SEED } from '../src/model/synth.js';
import { choiceArg } from '../src/cli/flag-values.js';
import { resolveDevice } from '../src/engine/device.js';
import { loadEngine } from '../src/engine/engine.js';
import { loadAddon } from '../src/engine/native.js';
import { KV_CACHE_DTYPES, type EngineHandle, type KvCacheDtype, type ProfileReport } from '../src/engine/types.js';
import { steadyDecodeRate } from '../src/bench/metrics.js';
import { formatOpsReport } from '../src/bench/profile.js';
import { machineInfo } from '../src/util/machine.js';
import { benchIds, ensureBenchModel, geoMeanRatio, median, roundOrder, speedupsOverC1 } from './bench-model.js';

const program = new Command('batch-bench')
  .option('--threads <n>', 'engine threads', (v) => Number(v), 2)
  .option('--device <d>', 'cpu | cuda | auto', 'cpu')
  .option('--no-cuda-graphs', 'CUDA: run every decode step eagerly (no graph replay)')
  .option('--rounds <n>', 'interleaved rounds (medians reported)', (v) => Number(v), 3)
  .option('--reloads <n>', 'load every engine afresh this many times, --rounds rounds each (the load order alternated)', (v) => Number(v), 1)
  .option('--prompt <n>', 'prompt tokens per sequence', (v) => Number(v), 128)
  .option('--tokens <n>', 'tokens generated per sequence', (v) => Number(v), 48)
  .option('--concurrency <list>', 'concurrencies (0 = prefill tok/s of one --prefill-tokens prompt)', '1,4,8')
  .option('--prefill-tokens <n>', 'prompt length of the prefill measurement (concurrency 0)', (v) => Number(v), 512)
  .option('--preset <p>', 'synthetic preset', '0.8b')
  .option('--in-memory', 'generate the preset\'s weights in the engine (synthetic:<preset>, seed 0) instead of writing a checkpoint to .models/')
  .option('--gguf <file>', 'benchmark this GGUF file instead of the synthetic preset (e.g. one bench:peer --quant made)')
  .option('--addons <list>', 'comma-separated addon builds to compare (default: the installed one)')
  .option('--kv-cache-dtype <list>', 'KV cache element types, comma-separated (f32, f16); more than one: each build with each, interleaved like builds', 'f32')
  .option('--profile', 'print the per-op profile of each concurrency (decode steps after every stream has started, summed over rounds; prefill only for concurrency 0)')
  .option('--temperature <t>', 'sample every request at this temperature (0: greedy, the default); with --top-k 0 each token is drawn from the whole vocabulary', (v) => Number(v), 0)
  .option('--top-k <k>', 'top-k of the sampled requests (0: the whole vocabulary)', (v) => Number(v), 0)
  .option('--logprobs <n>', 'ask every request for its tokens\' logprobs and n alternatives (0..20): each token is then picked on the host from its whole logits row, as bench serve does for a request with logprobs (-1: none)', (v) => Number(v), -1)
  .option('--json <file>', 'also write the results as JSON')
  .parse(process.argv);
const opt = program.opts<{ temperature: number; topK: number; logprobs: number; prefillTokens: number; threads: number; device: string; cudaGraphs: boolean; rounds: number; reloads: number; prompt: number; tokens: number; concurrency: string; preset: string; inMemory?: boolean; gguf?: string; addons?: string; profile?: boolean; json?: string; kvCacheDtype: string }>();
const log = (s: string) => process.stderr.write(`${s}\n`);

interface Variant { name: string; addon?: string; addonIndex: number; kv: KvCacheDtype; engine?: EngineHandle; isa?: string; rates: Map<number, number[]>; profiles: Map<number, ProfileReport[]> }

async function measure(engine: EngineHandle, c: number, seed: number): Promise<number> {
  if (c === 0) {
    // Prefill of one --prefill-tokens prompt: prompt tokens over enqueue -> first token, after an
    // untimed prefill of another prompt on the same engine (the first prefill after other work ran
    // 5-35 % slower: docs/performance.md, twenty-ninth session; bench:peer does the same).
    await engine.submit({ prompt: benchIds(opt.prefillTokens, seed + 7777), maxTokens: 1, ignoreEos: true }).done;
    const r = await engine.submit({ prompt: benchIds(opt.prefillTokens, seed), maxTokens: 1, ignoreEos: true }).done;
    return opt.prefillTokens / ((r.tokenMs[0]! - r.enqueueMs) / 1000);
  }
  // With --profile, drop what was recorded up to the first step that gave every stream a token (a
  // step gives a sequence at most one), so the report covers decode steps (the prefill of c prompts
  // would otherwise dominate it). A step listener, not a token event per token crossing to JS.
  let started = false;
  const stopListening = opt.profile ? engine.onStep((tokens) => { if (!started && tokens === c) { started = true; engine.takeProfile(); } }) : undefined;
  const sampling = {
    ...(opt.temperature > 0 ? { temperature: opt.temperature, topK: opt.topK, seed: seed * 100 } : {}),
    ...(opt.logprobs >= 0 ? { logprobs: opt.logprobs } : {}),
  };
  const runs = await Promise.all(Array.from({ length: c }, (_, i) =>
    engine.submit({ prompt: benchIds(opt.prompt, seed * 100 + i), maxTokens: opt.tokens, ignoreEos: true, ...sampling }).done));
  stopListening?.();
  for (const r of runs) if (r.finishReason !== 'length') throw new Error(`request ended with ${r.finishReason}: ${r.error ?? ''}`);
  const rate = steadyDecodeRate(runs.map((r) => r.tokenMs));
  if (rate === null) throw new Error(`c=${c}: the streams never decoded together`);
  return rate;
}

async function main(): Promise<void> {
  const levels = opt.concurrency.split(',').map(Number);
  if (levels.some((c) => !Number.isInteger(c) || c < 0)) throw new Error(`--concurrency: not a list of positive integers: ${opt.concurrency}`);
  if (!(Number.isFinite(opt.temperature) && opt.temperature >= 0)) throw new Error(`--temperature: not a number >= 0: ${opt.temperature}`);
  if (!Number.isInteger(opt.topK) || opt.topK < 0) throw new Error(`--top-k: not an integer >= 0: ${opt.topK}`);
  if (!Number.isInteger(opt.logprobs) || opt.logprobs < -1 || opt.logprobs > 20) throw new Error(`--logprobs: not an integer from -1 to 20: ${opt.logprobs}`);
  const maxC = Math.max(...levels);
  const device = resolveDevice(choiceArg('--device', ['cpu', 'cuda', 'auto'] as const)(opt.device));
  const ckpt = opt.gguf !== undefined ? loadGgufCheckpoint(opt.gguf)
    : opt.inMemory ? syntheticModel({ preset: opt.preset, dtype: 'bf16', seed: DEFAULT_SYNTH_SEED })
      : loadCheckpoint((await ensureBenchModel(opt.preset, log)).dir);
  const addons: (string | undefined)[] = opt.addons ? opt.addons.split(',') : [undefined];
  if (!Number.isInteger(opt.reloads) || opt.reloads < 1) throw new Error(`--reloads: not a positive integer: ${opt.reloads}`);
  if (!Number.isInteger(opt.rounds) || opt.rounds < 1) throw new Error(`--rounds: not a positive integer: ${opt.rounds}`);
  const kvs = opt.kvCacheDtype.split(',').map((k) => choiceArg('--kv-cache-dtype', KV_CACHE_DTYPES)(k));
  const variants: Variant[] = addons.flatMap((a, addonIndex) => kvs.map((kv) => ({
    name: `${a ?? 'engine'}${kvs.length > 1 ? ` (KV ${kv})` : ''}`, addon: a, addonIndex, kv, rates: new Map(levels.map((c) => [c, []])), profiles: new Map(),
  })));
  const load = (a: string | undefined, kv: KvCacheDtype): Promise<EngineHandle> => loadEngine(ckpt, {
    kvCacheDtype: kv,
    device, cudaGraphs: opt.cudaGraphs, threads: opt.threads, blockSize: 16, kvcache: 'paged', maxSeq: Math.max(opt.prompt + opt.tokens, opt.prefillTokens + 1) + 8,
    maxSeqs: Math.max(1, maxC), prefillChunk: Math.max(512, opt.prefillTokens), stepTokenBudget: Math.max(2048, maxC * opt.prompt, opt.prefillTokens), prefixCache: false,
    profile: opt.profile ?? false,
  }, {}, a ? { addonPath: a } : {});
  // Every build's module loaded before any engine: two copies of one build ran ×1.02–1.29 apart at
  // c=8 when the second module was loaded after the first engine's memory; loaded first, they
  // still ran up to ×1.08 apart (docs/performance.md, twenty-sixth and twenty-seventh sessions),
  // so an A/B lists a copy of its baseline as a control.
  for (const a of addons) loadAddon(a);
  const total = opt.reloads * opt.rounds;
  for (let l = 0; l < opt.reloads; l++) {
    // A fresh engine per build, loaded in alternating order.
    for (const v of l % 2 === 0 ? variants : [...variants].reverse()) {
      v.engine = await load(v.addon, v.kv);
      v.isa = v.engine.info.isa;
    }
    log(`warm-up${opt.reloads > 1 ? ` (engines loaded ${l + 1}/${opt.reloads})` : ''} ...`);
    for (const v of variants) {
      for (const c of levels) await measure(v.engine!, c, 9000 + c);
      v.engine!.takeProfile();
    }
    for (let k = 0; k < opt.rounds; k++) {
      const r = l * opt.rounds + k;
      const line: string[] = [];
      for (const c of levels) {
        // Rotate the order every round: the engine measured first after a switch runs measurably
        // slower at c=1 (an A/A run showed +8 % for the second slot), and with three builds a middle
        // slot kept by reversing alone ran up to ~6 % faster (twenty-sixth session).
        const order = roundOrder(variants, r);
        for (const v of order) {
          const x = await measure(v.engine!, c, r * 10 + c);
          v.rates.get(c)!.push(x);
          line.push(`${variants.length > 1 ? `${v.name} ` : ''}c=${c} ${x.toFixed(1)}`);
          const p = opt.profile ? v.engine!.takeProfile() : null;
          if (p) v.profiles.set(c, [...(v.profiles.get(c) ?? []), p]);
        }
      }
      log(`round ${r + 1}/${total}: ${line.join(', ')} tok/s`);
    }
    for (const v of variants) await v.engine!.close();
  }
  const out: string[] = [];
  const cpu = machineInfo().cpuModel;
  out.push(`CPU: ${cpu}; ISA path: ${variants.map((v) => v.isa).join(' / ')}; device: ${device}${device === 'cuda' ? `, graphs ${opt.cudaGraphs ? 'on' : 'off'}` : ''}`);
  out.push(`model: ${opt.gguf !== undefined ? opt.gguf : `synthetic ${opt.preset} bf16${opt.inMemory ? ' (generated in memory)' : ''}`}; ${opt.threads} threads; prompt ${opt.prompt}, ${opt.tokens} generated; KV cache ${kvs.join(' / ')}; ${opt.temperature > 0 ? `sampled at temperature ${opt.temperature}, top-k ${opt.topK === 0 ? '0 (the whole vocabulary)' : opt.topK}` : 'greedy'}${opt.logprobs >= 0 ? `; logprobs with ${opt.logprobs} alternatives (every token picked on the host)` : ''}; steady-state aggregate decode, medians of ${total} rounds${opt.reloads > 1 ? ` (${opt.reloads} loads of each engine x ${opt.rounds})` : ''}${levels.includes(0) ? '; prefill timed after an untimed one of its own' : ''}${opt.profile ? '; measured with the per-op profile on (its clocks add to every op: compare rates only with rates taken the same way)' : ''}`);
  const speedups = new Map<Variant, Map<number, number[]> | null>();
  for (const v of variants) {
    if (variants.length > 1) out.push(`addon: ${v.name}`);
    const perRound = speedupsOverC1(v.rates);
    speedups.set(v, perRound);
    out.push(`${'concurrency'.padEnd(12)}${'tok/s'.padStart(10)}${'step ms'.padStart(10)}${'speedup'.padStart(10)}${'efficiency'.padStart(12)}`);
    for (const c of levels) {
      const m = median(v.rates.get(c)!);
      if (c === 0) { out.push(`${`prefill ${opt.prefillTokens}`.padEnd(12)}${m.toFixed(1).padStart(10)}  (prompt tok/s, one sequence)`); continue; }
      const sp = perRound === null ? NaN : median(perRound.get(c)!);
      const cell = (x: number) => (Number.isNaN(x) ? '-' : x.toFixed(2));
      out.push(`${String(c).padEnd(12)}${m.toFixed(1).padStart(10)}${((1000 * c) / m).toFixed(1).padStart(10)}${cell(sp).padStart(10)}${cell(sp / c).padStart(12)}`);
    }
    if (perRound === null) out.push('speedup and efficiency: - (they are over c=1, which --concurrency does not list)');
    else if (perRound.size > 1) {
      out.push(`speedup: the median of each round's c over the same round's c=1 (efficiency: that / c); rounds: ${[...perRound].filter(([c]) => c > 1).map(([c, rs]) => `c=${c} ${rs.map((x) => x.toFixed(2)).join(' / ')}`).join('; ')}`);
    }
  }
  // Each build after the first as the geometric mean of its per-round ratios to the first: with
  // the rotating order, a multiple of the number of builds in rounds cancels the slot effect. A
  // byte-identical copy of the first build listed as well (an A/A control) shows what two copies
  // differ by on their own (docs/performance.md, twenty-sixth session). With several KV cache
  // types, a build is set against the first build with the same cache, and the first build's other
  // caches against its first: each ratio changes one thing.
  for (const b of variants.slice(1)) {
    const a = b.addonIndex === 0 ? variants[0]! : variants.find((v) => v.addonIndex === 0 && v.kv === b.kv)!;
    out.push(`ratio ${b.name} / ${a.name} (geometric mean of per-round ratios, order rotated${total % variants.length ? `; use a multiple of ${variants.length} rounds` : ''}): ` + levels.map((c) => {
      return `c=${c} ${geoMeanRatio(b.rates.get(c)!, a.rates.get(c)!).toFixed(3)}`;
    }).join(', '));
  }
  process.stdout.write(`${out.join('\n')}\n`);
  if (opt.profile) {
    for (const v of variants) {
      for (const c of levels) {
        const merged = new Map<string, { name: string; group: string; calls: number; totalUs: number; selfUs: number }>();
        for (const p of v.profiles.get(c) ?? []) for (const o of p.ops) {
          const m = merged.get(o.name) ?? { ...o, calls: 0, totalUs: 0, selfUs: 0 };
          m.calls += o.calls; m.totalUs += o.totalUs; m.selfUs += o.selfUs;
          merged.set(o.name, m);
        }
        process.stderr.write(`${formatOpsReport(`${v.name} c=${c}, ${total} rounds (${c === 0 ? 'prefill' : 'decode steps'})`, [...merged.values()])}\n`);
      }
    }
  }
  if (opt.json) {
    writeFileSync(opt.json, JSON.stringify({ cpu, threads: opt.threads, model: opt.gguf ?? `synthetic ${opt.preset} bf16`, reloads: opt.reloads,
      sampling: opt.temperature > 0 ? { temperature: opt.temperature, topK: opt.topK } : 'greedy', logprobs: opt.logprobs, variants: variants.map((v) => ({
      name: v.name, isa: v.isa, rates: Object.fromEntries(v.rates),
      speedupOverC1: Object.fromEntries([...(speedups.get(v) ?? [])].map(([c, rs]) => [c, { median: median(rs), rounds: rs }])),
    })), speedupRule: 'the median over the rounds of each round\'s aggregate decode at c over the same round\'s at c=1' }, null, 2));
  }
}

main().catch((err) => {
  process.stderr.write(`batch-bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
