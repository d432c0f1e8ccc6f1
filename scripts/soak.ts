// Soak run: keeps one engine busy with random traffic and checks, at every quiescent point (no
// request in flight), that nothing leaked and nothing drifted. Usage:
//   npm run soak -- --minutes 20 [--seed 1] [--json FILE]
// Traffic per round: 1..2 x max-seqs requests, some in one burst and some trickling in; prompt
// lengths 1..max-seq (some sharing a prefix, so the prefix cache hits and evicts), random output
// lengths, greedy and sampled, random stop tokens; cancellations right after submit (waiting or
// mid-prefill) and after a random number of tokens (mid-decode); now and then a request that must
// be refused. The KV pool holds 1.5 longest sequences, so requests park and get preempted.
// Checks at each quiescent point: every state slot free, every used KV block held by the prefix
// cache, active bytes equal to the baseline (what only the cache holds is not active), and two
// probe requests (one too short to be cached, one that the cache serves when it still holds it)
// give their solo greedy tokens. Over the run: every result well formed, RSS not growing.
// Exit 0 when every check held, 1 otherwise. docs/reliability.md has the figures.
import { writeFileSync } from 'node:fs';
import { Command } from 'commander';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { ensureEmbeddedModel } from '../src/model/embedded.js';
import { loadEngine } from '../src/engine/engine.js';
import type { EngineHandle, EngineOptions, EngineStats, RequestOptions, RequestResult } from '../src/engine/types.js';
import { Rng } from '../src/util/rng.js';
import { median } from './bench-model.js';

const program = new Command('soak')
  .option('--minutes <m>', 'how long to run', (v) => Number(v), 20)
  .option('--seed <n>', 'seed of the request mix (timing still varies run to run)', (v) => Number(v), 1)
  .option('--model-path <dir>', 'checkpoint (default: the embedded tiny model)')
  .option('--max-seq <n>', 'engine --max-seq', (v) => Number(v), 512)
  .option('--max-seqs <n>', 'engine sequences in flight', (v) => Number(v), 4)
  .option('--threads <n>', 'engine threads', (v) => Number(v), 2)
  .option('--json <file>', 'also write the summary as JSON')
  .parse(process.argv);
const opt = program.opts<{ minutes: number; seed: number; modelPath?: string; maxSeq: number; maxSeqs: number; threads: number; json?: string }>();
for (const [flag, v, min] of [['--minutes', opt.minutes, 0.01], ['--max-seq', opt.maxSeq, 64], ['--max-seqs', opt.maxSeqs, 2], ['--threads', opt.threads, 1]] as const) {
  if (!Number.isFinite(v) || v < min) {
    process.stderr.write(`soak: ${flag} must be a number >= ${min}\n`);
    process.exit(2);
  }
}
const log = (s: string) => process.stderr.write(`${s}\n`);
const gc = (globalThis as { gc?: () => void }).gc;

type CancelMode = 'none' | 'early' | 'decode';
interface Planned {
  req: RequestOptions; cancel: CancelMode; cancelAt: number; delayMs: number;
  /** Greedy requests whose tokens are known: the short probe's solo tokens up to a stop token. */
  expect?: { tokens: number[]; finish: 'stop' | 'length' };
}
interface Mix { maxSeq: number; prefixes: number[][]; seen: number[]; probe: { prompt: number[]; solo: number[] } }

const VOCAB_LIMIT = 240_000; // ordinary token ids in every Qwen3.5 vocabulary

function ids(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.nextU32() % VOCAB_LIMIT);
}

function plan(rng: Rng, mix: Mix): Planned {
  const { maxSeq, prefixes, seen, probe } = mix;
  if (rng.nextFloat() < 0.1) {
    // The short probe among the traffic, told to stop at one of its own solo tokens: it must give
    // its solo tokens up to that token's first occurrence, whatever it is batched with.
    const stop = probe.solo[rng.nextU32() % probe.solo.length]!;
    const upto = probe.solo.indexOf(stop) + 1;
    return {
      req: { prompt: probe.prompt, maxTokens: probe.solo.length, stopTokens: [stop] }, cancel: 'none', cancelAt: 0,
      delayMs: rng.nextFloat() < 0.5 ? 0 : rng.nextU32() % 25, expect: { tokens: probe.solo.slice(0, upto), finish: 'stop' },
    };
  }
  const r = rng.nextFloat();
  // Prompt lengths: mostly short, a fifth anywhere up to max-seq - 1.
  let len = r < 0.8 ? 1 + (rng.nextU32() % 96) : 1 + (rng.nextU32() % (maxSeq - 1));
  let prompt: number[];
  if (rng.nextFloat() < 0.4) {
    const p = prefixes[rng.nextU32() % prefixes.length]!;
    len = Math.min(maxSeq - 1, p.length + 1 + (rng.nextU32() % 48));
    prompt = [...p, ...ids(rng, len - p.length)];
  } else {
    prompt = ids(rng, len);
  }
  const room = maxSeq - prompt.length;
  const maxTokens = Math.min(room, rng.nextFloat() < 0.85 ? rng.nextU32() % 40 : rng.nextU32() % (room + 1));
  const greedy = rng.nextFloat() < 0.5;
  const req: RequestOptions = {
    prompt, maxTokens, ignoreEos: rng.nextFloat() < 0.7,
    ...(greedy ? {} : {
      temperature: 0.1 + 1.4 * rng.nextFloat(), topK: rng.nextU32() % 60, topP: 0.5 + 0.5 * rng.nextFloat(), seed: rng.nextU32(),
    }),
    // Stop tokens drawn from tokens the model has produced, so some requests really stop.
    ...(rng.nextFloat() < 0.3 && seen.length ? { stopTokens: Array.from({ length: 1 + (rng.nextU32() % 3) }, () => seen[rng.nextU32() % seen.length]!) } : {}),
    // Logits of every position (the extra evaluation of the last token included); no stop tokens,
    // so the row count is exact.
    ...(prompt.length <= 24 && maxTokens <= 4 && rng.nextFloat() < 0.1 ? { logits: 'all' as const, ignoreEos: true } : {}),
  };
  const c = rng.nextFloat();
  const cancel: CancelMode = c < 0.12 ? 'early' : c < 0.27 && maxTokens > 1 ? 'decode' : 'none';
  return {
    req, cancel,
    cancelAt: cancel === 'early' ? rng.nextU32() % 8 : 1 + (rng.nextU32() % Math.max(1, maxTokens - 1)),
    delayMs: rng.nextFloat() < 0.5 ? 0 : rng.nextU32() % 25,
  };
}

/** A request the engine must refuse at submit, with the message it must give. */
function badRequest(rng: Rng, maxSeq: number): { req: RequestOptions; expect: RegExp } {
  switch (rng.nextU32() % 3) {
    case 0: return { req: { prompt: ids(rng, maxSeq), maxTokens: 1 }, expect: new RegExp(`needs ${maxSeq + 1} tokens.*max_seq ${maxSeq}`) };
    case 1: return { req: { prompt: [5, 1 << 30, 7], maxTokens: 1 }, expect: /token id 1073741824 is outside the vocabulary/ };
    default: return { req: { prompt: [], maxTokens: 1 }, expect: /prompt is empty/ };
  }
}

interface Tally {
  rounds: number; requests: number; refused: number; tokens: number;
  finish: Record<string, number>; cancelledWaitingOrPrefill: number; cancelledMidDecode: number;
  prefixHitRequests: number; preemptions: number; parkWaits: number; evictions: number; isolationChecks: number;
  failures: string[];
}

function checkResult(p: Planned, r: RequestResult, t: Tally, seen: number[]): void {
  if (p.expect) {
    t.isolationChecks++;
    if (r.finishReason !== p.expect.finish || r.tokens.join(',') !== p.expect.tokens.join(','))
      t.failures.push(`request ${r.id}: the batched probe gave ${r.finishReason} [${r.tokens.join(',')}], solo gives ${p.expect.finish} [${p.expect.tokens.join(',')}]`);
  }
  const fail = (m: string): void => { t.failures.push(`request ${r.id}: ${m}`); };
  t.finish[r.finishReason] = (t.finish[r.finishReason] ?? 0) + 1;
  t.tokens += r.tokens.length;
  for (const x of r.tokens.slice(0, 4)) seen[(seen.length < 64 ? seen.length : r.id % 64)] = x;
  if (r.cachedPromptTokens > 0) t.prefixHitRequests++;
  if (r.finishReason === 'error') {
    fail(`engine error: ${r.error}`);
    return;
  }
  if (r.tokens.length > p.req.maxTokens) fail(`${r.tokens.length} tokens for max ${p.req.maxTokens}`);
  if (r.tokenMs.length !== r.tokens.length) fail(`${r.tokenMs.length} token times for ${r.tokens.length} tokens`);
  for (let i = 1; i < r.tokenMs.length; i++) if (r.tokenMs[i]! < r.tokenMs[i - 1]!) fail('token times go backwards');
  if (r.tokens.some((x) => !Number.isInteger(x) || x < 0)) fail('a token id out of range');
  if (r.promptTokens !== p.req.prompt.length) fail(`promptTokens ${r.promptTokens} for a ${p.req.prompt.length}-token prompt`);
  if (r.finishReason === 'length' && r.tokens.length !== p.req.maxTokens) fail(`'length' after ${r.tokens.length} of ${p.req.maxTokens}`);
  if (r.finishReason === 'stop') {
    const last = r.tokens[r.tokens.length - 1];
    if (p.req.ignoreEos || last === undefined || !(p.req.stopTokens ?? []).includes(last)) fail(`'stop' without a stop token last`);
  }
  if (r.finishReason === 'cancelled') {
    if (p.cancel === 'none') fail('cancelled without a cancel');
    if (r.tokens.length === 0) t.cancelledWaitingOrPrefill++;
    else t.cancelledMidDecode++;
  }
  if (p.req.logits === 'all' && r.finishReason !== 'cancelled') {
    const rows = p.req.prompt.length + r.tokens.length;
    if (r.logitRows !== rows) fail(`${r.logitRows} logit rows for ${rows} positions`);
  }
}

function run(e: EngineHandle, p: Planned, t: Tally, seen: number[]): Promise<void> {
  return new Promise<void>((resolve) => {
    const go = () => {
      const h = e.submit(p.req, p.cancel === 'decode' ? (ev) => { if (ev.index + 1 === p.cancelAt) h.cancel(); } : undefined);
      if (p.cancel === 'early') {
        if (p.cancelAt === 0) h.cancel();
        else setTimeout(() => h.cancel(), p.cancelAt);
      }
      void h.done.then((r) => { checkResult(p, r, t, seen); resolve(); });
    };
    if (p.delayMs === 0) go();
    else setTimeout(go, p.delayMs);
  });
}

function quiescentFailures(s: EngineStats, base: EngineStats): string[] {
  const out: string[] = [];
  if (s.stateSlotsFree !== s.stateSlotsTotal) out.push(`${s.stateSlotsTotal - s.stateSlotsFree} state slot(s) still taken`);
  if (s.kvBlocksUsed !== s.prefixCachedBlocks) out.push(`${s.kvBlocksUsed} KV blocks used, the prefix cache holds ${s.prefixCachedBlocks}`);
  if (s.kvBlocksUsed + s.kvBlocksFree !== s.kvBlocksTotal) out.push(`used ${s.kvBlocksUsed} + free ${s.kvBlocksFree} != ${s.kvBlocksTotal} blocks`);
  if (s.snapshotsUsed > s.snapshotsTotal) out.push(`${s.snapshotsUsed} snapshots of ${s.snapshotsTotal}`);
  // What only the prefix cache holds (its blocks and snapshots) is reclaimable and not active: with no
  // request in flight the level is the baseline's (the workspace).
  if (s.activeBytes !== base.activeBytes) out.push(`active bytes ${s.activeBytes}, expected the baseline's ${base.activeBytes} (no request holds anything)`);
  return out;
}

async function main(): Promise<number> {
  const dir = opt.modelPath ?? await ensureEmbeddedModel();
  const ck = loadCheckpoint(dir);
  const cfg = ck.config;
  const fullLayers = cfg.layerTypes.filter((l) => l === 'full_attention').length;
  const kvBytesPerToken = cfg.numKvHeads * cfg.headDim * 2 * 4 * fullLayers;
  const opts: EngineOptions = {
    device: 'cpu', threads: opt.threads, blockSize: 16, kvcache: 'paged', maxSeq: opt.maxSeq, maxSeqs: opt.maxSeqs,
    prefillChunk: 64, stepTokenBudget: 256, prefixCache: true,
    // One and a half longest sequences: a few long requests decoding together outgrow it.
    kvMemoryBytes: Math.ceil(1.5 * opt.maxSeq) * kvBytesPerToken,
  };
  const e = await loadEngine(ck, opts);
  const rng = new Rng(opt.seed, 'soak');
  const prefixes = [16, 48, 100, 200].map((n) => ids(rng, Math.min(n, opt.maxSeq - 2)));
  // Probe A is shorter than a block (never cached: always computed cold); probe B is cacheable
  // (served from the prefix cache and its snapshot when they survive, computed cold otherwise).
  const probeRng = new Rng(opt.seed, 'probe');
  const probes = [ids(probeRng, 12), ids(probeRng, 100)].map((prompt) => ({ prompt, maxTokens: 16, ignoreEos: true }));
  const solo = [] as number[][];
  for (const p of probes) solo.push((await e.submit(p).done).tokens);
  const base = e.stats();
  const t: Tally = {
    rounds: 0, requests: 0, refused: 0, tokens: 0, finish: {}, cancelledWaitingOrPrefill: 0, cancelledMidDecode: 0,
    prefixHitRequests: 0, preemptions: 0, parkWaits: 0, evictions: 0, isolationChecks: 0, failures: [],
  };
  const rss: number[] = [];
  const seen: number[] = [];
  const mix: Mix = { maxSeq: opt.maxSeq, prefixes, seen, probe: { prompt: probes[0]!.prompt, solo: solo[0]! } };
  let probeMismatches = 0, leakChecks = 0;
  const t0 = performance.now();
  const deadline = t0 + opt.minutes * 60_000;
  log(`soak: ${opt.minutes} min, seed ${opt.seed}, ${dir}, max-seq ${opt.maxSeq}, ${opt.maxSeqs} seqs, pool ${e.info.kvBlocksTotal} blocks, ${e.info.isa}`);
  let nextLog = t0 + 30_000;
  while (performance.now() < deadline) {
    const n = 1 + (rng.nextU32() % (2 * opt.maxSeqs));
    const planned = Array.from({ length: n }, () => plan(rng, mix));
    const inFlight: Promise<void>[] = [];
    for (const p of planned) {
      if (rng.nextFloat() < 0.05) {
        const bad = badRequest(rng, opt.maxSeq);
        try {
          e.submit(bad.req);
          t.failures.push(`round ${t.rounds}: a bad request was accepted (${bad.expect.source})`);
        } catch (err) {
          const msg = err instanceof Error ? err.message : String(err);
          if (!bad.expect.test(msg)) t.failures.push(`round ${t.rounds}: bad request refused with '${msg}', expected ${bad.expect.source}`);
          t.refused++;
        }
      }
      inFlight.push(run(e, p, t, seen));
    }
    t.requests += n;
    await Promise.all(inFlight);
    // Quiescent: no request in flight.
    const s = e.stats();
    leakChecks++;
    for (const f of quiescentFailures(s, base)) t.failures.push(`round ${t.rounds}: ${f}`);
    for (let i = 0; i < probes.length; i++) {
      const r = await e.submit(probes[i]!).done;
      if (r.tokens.join(',') !== solo[i]!.join(',')) {
        probeMismatches++;
        t.failures.push(`round ${t.rounds}: probe ${i} gave ${r.tokens.slice(0, 8).join(',')}... instead of ${solo[i]!.slice(0, 8).join(',')}...`);
      }
    }
    gc?.();
    rss.push(process.memoryUsage().rss);
    t.rounds++;
    if (performance.now() > nextLog) {
      nextLog += 30_000;
      log(`  ${((performance.now() - t0) / 60_000).toFixed(1)} min: ${t.rounds} rounds, ${t.requests} requests, ${t.failures.length} failures, RSS ${(rss[rss.length - 1]! / 2 ** 20).toFixed(0)} MiB`);
    }
  }
  const end = e.stats();
  t.preemptions = end.preemptions - base.preemptions;
  t.parkWaits = end.parkWaits - base.parkWaits;
  t.evictions = end.evictions - base.evictions;
  await e.close();
  // RSS: the median of the second fifth of the quiescent points (allocators and caches settled)
  // against the median of the last fifth.
  const fifth = Math.max(1, Math.floor(rss.length / 5));
  const settled = median(rss.slice(fifth, 2 * fifth).length ? rss.slice(fifth, 2 * fifth) : rss);
  const final = median(rss.slice(-fifth));
  const growth = final - settled;
  const rssLimit = Math.max(16 * 2 ** 20, 0.03 * settled);
  if (rss.length >= 10 && growth > rssLimit) t.failures.push(`RSS grew ${(growth / 2 ** 20).toFixed(1)} MiB (settled ${(settled / 2 ** 20).toFixed(0)} MiB)`);
  const summary = {
    minutes: (performance.now() - t0) / 60_000, seed: opt.seed, model: dir, isa: e.info.isa, gc: gc !== undefined,
    engine: { maxSeq: opt.maxSeq, maxSeqs: opt.maxSeqs, kvBlocks: e.info.kvBlocksTotal, prefillChunk: opts.prefillChunk, stepTokenBudget: opts.stepTokenBudget },
    rounds: t.rounds, requests: t.requests, refusedBadRequests: t.refused, tokensGenerated: t.tokens, finish: t.finish,
    cancelledWaitingOrPrefill: t.cancelledWaitingOrPrefill, cancelledMidDecode: t.cancelledMidDecode,
    prefixHitRequests: t.prefixHitRequests, preemptions: t.preemptions, parkWaits: t.parkWaits, evictions: t.evictions,
    leakChecks, probeChecks: leakChecks * probes.length, probeMismatches, batchedProbeChecks: t.isolationChecks,
    rssMiB: { settled: settled / 2 ** 20, final: final / 2 ** 20, growth: growth / 2 ** 20, limit: rssLimit / 2 ** 20, checked: rss.length >= 10 },
    failures: t.failures,
  };
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  if (opt.json) writeFileSync(opt.json, `${JSON.stringify(summary, null, 2)}\n`);
  log(`soak: ${t.failures.length === 0 ? 'ok' : `${t.failures.length} FAILURES`} (${t.rounds} rounds, ${t.requests} requests, ${leakChecks} leak checks, ${probeMismatches} probe mismatches)`);
  return t.failures.length === 0 ? 0 : 1;
}

main().then((code) => process.exit(code), (err) => {
  process.stderr.write(`soak: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
