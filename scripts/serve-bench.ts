// Serving overhead benchmark (`npm run bench:serve`): the same sweep cell driven in-process (the
// sweep's own runRow on the engine) and over HTTP (`bench serve` in this process, an SSE client here:
// c concurrent streamed /v1/completions with the same kind of token-id prompts) and through the endpoint
// sweep's client (below), interleaved round by round, the three rotated every round (scripts/serve-rounds.ts,
// serveRoundOrder: over a multiple of 3 rounds each takes each slot equally often, so drift and position hit
// all alike). Each side's figures are medians over the rounds; every comparison of two sides (a ratio, a
// TTFT delta) is taken within each round and the median of those per-round figures is printed. Both
// sides are reduced by the same functions: the steady-state aggregate decode tok/s (the window where
// all c streams decode, as bench:batch), the sweep's decode_tok_s (computeRowFigures: decode tokens over
// the union of the decode windows, which also prices how the c requests happened to be admitted) and
// TTFT (mean enqueue -> first token; over HTTP the clock is the client's: just before the POST -> the
// first chunk carrying a token). `start spread`: first token of the last stream minus that of the first
// (in-process the c requests are admitted in one step; over HTTP they arrive on c connections).
// `paired TTFT overhead`: per HTTP request, the client's TTFT minus the engine's own TTFT of that same
// request (native enqueue -> first token): what HTTP adds, free of the prefill time's noise. `endpoint
// sweep`: the same cell through `bench --endpoint`'s own client (runRow over src/endpoint's EngineHandle,
// text prompts of exactly isl tokens), its decode_tok_s and TTFT as multiples of the in-process row's
// (each round's own, and their median).
// Usage: npm run bench:serve -- [--rounds 6] [--isl 128] [--osl 64] [--concurrency 1,8] [--threads 2] [--json FILE]
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { Command } from 'commander';
import { computeRowFigures, steadyDecodeRate, type TimedRequest } from '../src/bench/metrics.js';
import { makePrompt, promptVocab } from '../src/bench/prompts.js';
import { runRow } from '../src/bench/runner.js';
import { resolveEngineFlags } from '../src/cli/engine-flags.js';
import type { RequestResult } from '../src/engine/types.js';
import type { GenerationResult } from '../src/serve/generation.js';
import { HttpPool } from '../src/endpoint/http-pool.js';
import { SseParser } from '../src/endpoint/sse.js';
import { EndpointEngine } from '../src/endpoint/endpoint-engine.js';
import { endpointProbe } from '../src/endpoint/endpoint-probe.js';
import { serverTokenizer } from '../src/endpoint/text-tokenizer.js';
import { startServer } from '../src/serve/server.js';
import { cpuSample, otherCpuShare } from '../src/util/machine.js';
import { ensureBenchModel, median } from './bench-model.js';
import {
  formatServeRows, roundsAdvice, SERVE_FIGURE_RULES, SERVE_SIDES, SERVE_TABLE_HEAD, SERVE_TABLE_RULE, serveRoundOrder, summarizeServe,
  type EndpointFigures, type ServeFigures as Figures, type ServeSide, type ServeSummary,
} from './serve-rounds.js';

const program = new Command('serve-bench')
  .option('--threads <n>', 'engine threads', '2')
  .option('--rounds <n>', 'interleaved rounds, the order rotated every round (medians reported; at least 5; a multiple of 3 gives each measurement each slot equally often)', (v) => Number(v), 6)
  .option('--isl <n>', 'prompt tokens', (v) => Number(v), 128)
  .option('--osl <n>', 'generated tokens', (v) => Number(v), 64)
  .option('--concurrency <list>', 'concurrencies', '1,8')
  .option('--preset <p>', 'synthetic preset', '0.8b')
  .option('--json <file>', 'also write the results as JSON')
  .parse(process.argv);
const opt = program.opts<{ threads: string; rounds: number; isl: number; osl: number; concurrency: string; preset: string; json?: string }>();
const log = (s: string) => process.stderr.write(`${s}\n`);

function figuresOf(timed: readonly TimedRequest[], f: { decodeTokS: number | null; ttftMs: number | null }): Figures {
  const firsts = timed.map((t) => t.result.tokenMs[0]!);
  const steady = steadyDecodeRate(timed.map((t) => t.result.tokenMs));
  if (steady === null || f.decodeTokS === null || f.ttftMs === null) throw new Error('no decode window');
  return { steadyTokS: steady, decodeTokS: f.decodeTokS, ttftMs: f.ttftMs, spreadMs: Math.max(...firsts) - Math.min(...firsts) };
}

async function main(): Promise<void> {
  if (opt.rounds < 5) throw new Error('--rounds: at least 5 (medians over a noisy machine)');
  const advice = roundsAdvice(opt.rounds, SERVE_SIDES.length);
  if (advice) log(`--rounds: ${advice}`);
  const levels = opt.concurrency.split(',').map(Number);
  const { dir } = await ensureBenchModel(opt.preset, log);
  const maxSeq = opt.isl + opt.osl + 16;
  const engineFlags = resolveEngineFlags({ device: 'cpu', threads: opt.threads, maxSeq: String(maxSeq), maxSeqs: String(Math.max(...levels)) }, 8) as
    ReturnType<typeof resolveEngineFlags> & { maxSeqs: number };
  const sink = new Writable({ write(_c, _e, cb) { cb(); } });
  log(`loading ${dir} ...`);
  const server = await startServer({
    modelDir: dir, embedded: false, host: '127.0.0.1', port: 0, engine: engineFlags, device: 'cpu', verbosity: -1, stderr: sink, stderrIsTTY: false,
  });
  const engine = server.engine;
  const finished: GenerationResult[] = [];
  server.ctx.onFinished = (r) => { finished.push(r); };
  const vocab = promptVocab(server.ctx.model.vocabSize);
  const cell = { isl: opt.isl, osl: opt.osl };
  const plan = (seed: number, c: number) => ({ seed, isl: opt.isl, osl: opt.osl, concurrency: c, mode: 'unique' as const, sharedPrefix: 0, vocab });

  const inProcess = async (c: number, seed: number): Promise<Figures> => {
    const out = await runRow(engine, {
      cell, concurrency: c, warmup: 0, iters: 1, maxSeq, seed, prompts: 'unique', sharedPrefix: 0, vocab, profile: false, c1DecodeTokS: null,
    }, new AbortController().signal);
    if (out.row.status !== 'ok' || !out.figures) throw new Error(`in-process row failed: ${out.row.reason}`);
    return figuresOf(out.timed, out.figures);
  };

  // The client keeps a pool of connections (as benchmark clients do: src/endpoint/http-pool.ts, the
  // endpoint sweep's) and opens the c it needs before the measurement, so the c requests reach the
  // server together, as the sweep's c submits reach the engine.
  const pool = new HttpPool(server.url);

  const overHttp = async (c: number, seed: number): Promise<Figures> => {
    const p = plan(seed, c);
    await pool.warm(c, '/health');
    const one = async (session: number): Promise<TimedRequest> => {
      const prompt = Array.from(makePrompt(p, 0, session));
      const body = { prompt, max_tokens: opt.osl, temperature: 0, ignore_eos: true, stream: true, return_token_ids: true };
      const tokens: number[] = [];
      const tokenMs: number[] = [];
      const sse = new SseParser();
      let raw = '';
      // Sent = the body is written on the connected socket (the client's TTFT start, as `bench --endpoint` stamps it).
      let t0 = performance.now();
      const status = await pool.stream('/v1/completions', body, {
        onSent: (at) => { t0 = at; },
        onData: (d, at) => {
          raw += d;
          for (const ev of sse.push(d)) {
            if (ev.data === '[DONE]') continue;
            const ids = (JSON.parse(ev.data) as { choices: { token_ids?: number[] }[] }).choices[0]?.token_ids ?? [];
            for (const t of ids) { tokens.push(t); tokenMs.push(at); }
          }
        },
      });
      if (status !== 200) throw new Error(`HTTP ${status}: ${raw}`);
      const result: RequestResult = {
        id: session, tokens, promptTokens: prompt.length, enqueueMs: t0, tokenMs, prefillChunkMs: [], cachedPromptTokens: 0,
        finishReason: tokens.length === opt.osl ? 'length' : 'error',
      };
      return { pass: 0, session, result };
    };
    finished.length = 0;
    const timed = await Promise.all(Array.from({ length: c }, (_, s) => one(s)));
    if (timed.some((t) => t.result.tokens.length !== opt.osl)) throw new Error('an HTTP request did not stream osl tokens');
    // The engine's view of each request, matched by its output tokens.
    const paired: number[] = [];
    for (const t of timed) {
      const key = t.result.tokens.join(',');
      const g = finished.find((f) => f.tokens.join(',') === key);
      if (g?.ttftMs != null) paired.push(t.result.tokenMs[0]! - t.result.enqueueMs - g.ttftMs);
    }
    return { ...figuresOf(timed, computeRowFigures(opt.isl, opt.osl, timed, null)), ...(paired.length ? { pairedTtftMs: median(paired) } : {}) };
  };

  // The endpoint sweep's own client (`bench --endpoint`): runRow over EndpointEngine, prompts sent as text
  // of exactly isl tokens, times from the SSE chunks. Its TTFT and decode_tok_s beside the in-process row's
  // are the benchmark behind docs/endpoint.md's "how close the endpoint sweep comes".
  const tokenizer = (await serverTokenizer(pool, server.ctx.model.name, { timeoutMs: 30_000 })).tok!;
  const endpointEngine = new EndpointEngine(pool, tokenizer, { api: 'completions', model: server.ctx.model.name, timeoutMs: 600_000 });
  const endpointSweep = async (c: number, seed: number): Promise<EndpointFigures> => {
    const probe = endpointProbe(endpointEngine, { isl: opt.isl, osl: opt.osl, seed, overheadTokens: 0 });
    const out = await runRow(endpointEngine, {
      cell, concurrency: c, warmup: 0, iters: 1, maxSeq, seed, prompts: 'unique', sharedPrefix: 0, vocab: tokenizer.vocab, profile: false, c1DecodeTokS: null,
    }, new AbortController().signal, {}, probe);
    if (out.row.status !== 'ok' || out.row.decode_tok_s === null || out.row.ttft_ms === null) throw new Error(`endpoint row failed: ${out.row.reason}`);
    return { decodeTokS: out.row.decode_tok_s, ttftMs: out.row.ttft_ms };
  };

  log('warm-up ...');
  for (const c of levels) {
    await inProcess(c, 90 + c);
    await overHttp(c, 95 + c);
    await endpointSweep(c, 97 + c);
  }
  const res = new Map<number, { inproc: Figures[]; http: Figures[]; endpoint: EndpointFigures[] }>(
    levels.map((c) => [c, { inproc: [], http: [], endpoint: [] }]));
  // Share of the machine's CPU that other processes took during each round's three measurements of a concurrency.
  const others: number[] = [];
  const roundOrders: ServeSide[][] = [];
  for (let r = 0; r < opt.rounds; r++) {
    // The three measurements rotated by one every round (the same order for every concurrency).
    const order = serveRoundOrder(r);
    roundOrders.push(order);
    const line: string[] = [];
    for (const c of levels) {
      const slot = res.get(c)!;
      // Fresh prompts every measurement (no prefix-cache hits).
      const before = cpuSample();
      for (const side of order) {
        if (side === 'in-process') slot.inproc.push(await inProcess(c, 1000 + r * 10 + c));
        else if (side === 'http') slot.http.push(await overHttp(c, 2000 + r * 10 + c));
        else slot.endpoint.push(await endpointSweep(c, 3000 + r * 10 + c));
      }
      const other = otherCpuShare(before, cpuSample());
      if (other !== null) others.push(other);
      const i = slot.inproc[slot.inproc.length - 1]!, h = slot.http[slot.http.length - 1]!, e = slot.endpoint[slot.endpoint.length - 1]!;
      line.push(`c=${c} in-process ${i.steadyTokS.toFixed(1)} tok/s (sweep ${i.decodeTokS.toFixed(1)}) ttft ${i.ttftMs.toFixed(1)} ms | ` +
        `http ${h.steadyTokS.toFixed(1)} tok/s (sweep ${h.decodeTokS.toFixed(1)}) ttft ${h.ttftMs.toFixed(1)} ms spread ${h.spreadMs.toFixed(0)} ms` +
        ` paired +${(h.pairedTtftMs ?? NaN).toFixed(2)} ms | endpoint sweep ${e.decodeTokS.toFixed(1)} tok/s ttft ${e.ttftMs.toFixed(1)} ms`);
    }
    log(`round ${r + 1}/${opt.rounds} (${order.join(', ')}): ${line.join('; ')}; other processes ${others.slice(-levels.length).map((x) => `${(x * 100).toFixed(0)}%`).join('/')} of the CPU`);
  }
  pool.close();
  await server.close();

  let cpu = 'unknown';
  try {
    cpu = /Model name:\s*(.+)/.exec(execFileSync('lscpu', { encoding: 'utf8' }))?.[1]?.trim() ?? cpu;
  } catch { /* no lscpu */ }
  const out: string[] = [];
  out.push(`model: synthetic ${opt.preset} bf16; cell ${opt.isl}:${opt.osl}; ${opt.threads} engine threads; CPU ${cpu}; ${opt.rounds} interleaved rounds; ` +
    `other processes took ${others.length ? `${(median(others) * 100).toFixed(0)}% (median; ${(Math.min(...others) * 100).toFixed(0)}-${(Math.max(...others) * 100).toFixed(0)}%)` : 'an unknown share'} of the CPU`);
  out.push(`order rotated every round${advice ? ` (${advice})` : ''}: ${roundOrders.map((o, r) => `${r + 1}: ${o.join(', ')}`).join('; ')}`);
  out.push(SERVE_TABLE_RULE);
  out.push(SERVE_TABLE_HEAD);
  const summary: ServeSummary[] = [];
  for (const c of levels) {
    const s = res.get(c)!;
    const row = summarizeServe(c, s.inproc, s.http, s.endpoint);
    out.push(...formatServeRows(row));
    summary.push(row);
  }
  process.stdout.write(`${out.join('\n')}\n`);
  if (opt.json) {
    writeFileSync(opt.json, JSON.stringify({
      cpu, isl: opt.isl, osl: opt.osl, threads: opt.threads, rounds: opt.rounds, round_orders: roundOrders, figure_rules: SERVE_FIGURE_RULES,
      other_cpu_share: others, results: summary,
    }, null, 2));
  }
}

main().catch((err) => {
  process.stderr.write(`serve-bench: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
