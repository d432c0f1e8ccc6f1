// Serving overhead benchmark (`npm run bench:serve`): the same sweep cell driven in-process (the
// sweep's own runRow on the engine) and over HTTP (`bench serve` in this process, an SSE client here:
// c concurrent streamed /v1/completions with the same kind of token-id prompts), interleaved round by
// round (the order alternating, so drift and position hit both alike); medians over the rounds. Both
// sides are reduced by the sweep's computeRowFigures: aggregate decode tok/s (decode tokens over the
// union of the requests' decode windows) and TTFT (mean enqueue -> first token; over HTTP the clock is
// the client's: just before the POST -> the first chunk carrying a token).
// Usage: npm run bench:serve -- [--rounds 7] [--isl 128] [--osl 64] [--concurrency 1,8] [--threads 2] [--json FILE]
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { Command } from 'commander';
import { computeRowFigures, type TimedRequest } from '../src/bench/metrics.js';
import { makePrompt, promptVocab } from '../src/bench/prompts.js';
import { runRow } from '../src/bench/runner.js';
import { resolveEngineFlags } from '../src/cli/engine-flags.js';
import type { RequestResult } from '../src/engine/types.js';
import { startServer } from '../src/serve/server.js';
import { ensureBenchModel, median } from './bench-model.js';

const program = new Command('serve-bench')
  .option('--threads <n>', 'engine threads', '2')
  .option('--rounds <n>', 'interleaved rounds (medians reported; at least 5)', (v) => Number(v), 7)
  .option('--isl <n>', 'prompt tokens', (v) => Number(v), 128)
  .option('--osl <n>', 'generated tokens', (v) => Number(v), 64)
  .option('--concurrency <list>', 'concurrencies', '1,8')
  .option('--preset <p>', 'synthetic preset', '0.8b')
  .option('--json <file>', 'also write the results as JSON')
  .parse(process.argv);
const opt = program.opts<{ threads: string; rounds: number; isl: number; osl: number; concurrency: string; preset: string; json?: string }>();
const log = (s: string) => process.stderr.write(`${s}\n`);

interface Figures { decodeTokS: number; ttftMs: number }

async function main(): Promise<void> {
  if (opt.rounds < 5) throw new Error('--rounds: at least 5 (medians over a noisy machine)');
  const levels = opt.concurrency.split(',').map(Number);
  const { dir } = await ensureBenchModel(opt.preset, log, false);
  const maxSeq = opt.isl + opt.osl + 16;
  const engineFlags = resolveEngineFlags({ device: 'cpu', threads: opt.threads, maxSeq: String(maxSeq), maxSeqs: String(Math.max(...levels)) }, 8) as
    ReturnType<typeof resolveEngineFlags> & { maxSeqs: number };
  const sink = new Writable({ write(_c, _e, cb) { cb(); } });
  log(`loading ${dir} ...`);
  const server = await startServer({
    modelDir: dir, embedded: false, host: '127.0.0.1', port: 0, engine: engineFlags, device: 'cpu', verbosity: -1, stderr: sink, stderrIsTTY: false,
  });
  const engine = server.engine;
  const vocab = promptVocab(server.ctx.model.vocabSize);
  const cell = { isl: opt.isl, osl: opt.osl };
  const plan = (seed: number, c: number) => ({ seed, isl: opt.isl, osl: opt.osl, concurrency: c, mode: 'unique' as const, sharedPrefix: 0, vocab });

  const inProcess = async (c: number, seed: number): Promise<Figures> => {
    const out = await runRow(engine, {
      cell, concurrency: c, warmup: 0, iters: 1, maxSeq, seed, prompts: 'unique', sharedPrefix: 0, vocab, profile: false, c1DecodeTokS: null,
    }, new AbortController().signal);
    if (out.row.status !== 'ok' || !out.figures) throw new Error(`in-process row failed: ${out.row.reason}`);
    return { decodeTokS: out.figures.decodeTokS!, ttftMs: out.figures.ttftMs! };
  };

  const overHttp = async (c: number, seed: number): Promise<Figures> => {
    const p = plan(seed, c);
    const one = async (session: number): Promise<TimedRequest> => {
      const prompt = Array.from(makePrompt(p, 0, session));
      const t0 = performance.now();
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt, max_tokens: opt.osl, temperature: 0, ignore_eos: true, stream: true, return_token_ids: true }),
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
      const tokens: number[] = [];
      const tokenMs: number[] = [];
      const reader = res.body!.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const at = performance.now();
        buf += dec.decode(value, { stream: true });
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(6, i); // 'data: '
          buf = buf.slice(i + 2);
          if (ev === '[DONE]') continue;
          const ids = (JSON.parse(ev) as { choices: { token_ids?: number[] }[] }).choices[0]?.token_ids ?? [];
          for (const t of ids) { tokens.push(t); tokenMs.push(at); }
        }
      }
      const result: RequestResult = {
        id: session, tokens, promptTokens: prompt.length, enqueueMs: t0, tokenMs, prefillChunkMs: [], cachedPromptTokens: 0,
        finishReason: tokens.length === opt.osl ? 'length' : 'error',
      };
      return { pass: 0, session, result };
    };
    const timed = await Promise.all(Array.from({ length: c }, (_, s) => one(s)));
    if (timed.some((t) => t.result.tokens.length !== opt.osl)) throw new Error('an HTTP request did not stream osl tokens');
    const f = computeRowFigures(opt.isl, opt.osl, timed, null);
    return { decodeTokS: f.decodeTokS!, ttftMs: f.ttftMs! };
  };

  log('warm-up ...');
  for (const c of levels) {
    await inProcess(c, 90 + c);
    await overHttp(c, 95 + c);
  }
  const res = new Map<number, { inproc: Figures[]; http: Figures[] }>(levels.map((c) => [c, { inproc: [], http: [] }]));
  for (let r = 0; r < opt.rounds; r++) {
    const line: string[] = [];
    for (const c of levels) {
      const slot = res.get(c)!;
      // Fresh prompts every measurement (no prefix-cache hits); the order alternates each round.
      const a = async () => { slot.inproc.push(await inProcess(c, 1000 + r * 10 + c)); };
      const b = async () => { slot.http.push(await overHttp(c, 2000 + r * 10 + c)); };
      if (r % 2 === 0) { await a(); await b(); } else { await b(); await a(); }
      const i = slot.inproc[slot.inproc.length - 1]!, h = slot.http[slot.http.length - 1]!;
      line.push(`c=${c} in-process ${i.decodeTokS.toFixed(1)} tok/s ttft ${i.ttftMs.toFixed(1)} ms | http ${h.decodeTokS.toFixed(1)} tok/s ttft ${h.ttftMs.toFixed(1)} ms`);
    }
    log(`round ${r + 1}/${opt.rounds}: ${line.join('; ')}`);
  }
  await server.close();

  let cpu = 'unknown';
  try {
    cpu = /Model name:\s*(.+)/.exec(execFileSync('lscpu', { encoding: 'utf8' }))?.[1]?.trim() ?? cpu;
  } catch { /* no lscpu */ }
  const out: string[] = [];
  out.push(`model: synthetic ${opt.preset} bf16; cell ${opt.isl}:${opt.osl}; ${opt.threads} engine threads; CPU ${cpu}; medians of ${opt.rounds} interleaved rounds`);
  out.push(`${'c'.padEnd(4)}${'in-process tok/s'.padStart(18)}${'http tok/s'.padStart(12)}${'ratio'.padStart(8)}${'in-process TTFT'.padStart(17)}${'http TTFT'.padStart(11)}${'delta ms'.padStart(10)}  per-round ratios`);
  const summary: Record<string, unknown>[] = [];
  for (const c of levels) {
    const s = res.get(c)!;
    const ti = median(s.inproc.map((x) => x.decodeTokS));
    const th = median(s.http.map((x) => x.decodeTokS));
    const fi = median(s.inproc.map((x) => x.ttftMs));
    const fh = median(s.http.map((x) => x.ttftMs));
    const ratios = s.inproc.map((x, k) => s.http[k]!.decodeTokS / x.decodeTokS);
    const deltas = s.inproc.map((x, k) => s.http[k]!.ttftMs - x.ttftMs);
    out.push(`${String(c).padEnd(4)}${ti.toFixed(1).padStart(18)}${th.toFixed(1).padStart(12)}${(th / ti).toFixed(3).padStart(8)}${fi.toFixed(1).padStart(17)}${fh.toFixed(1).padStart(11)}` +
      `${(fh - fi).toFixed(2).padStart(10)}  ${ratios.map((x) => x.toFixed(3)).join(' ')}`);
    summary.push({
      concurrency: c, inprocess_decode_tok_s: ti, http_decode_tok_s: th, ratio: th / ti, median_round_ratio: median(ratios),
      inprocess_ttft_ms: fi, http_ttft_ms: fh, ttft_delta_ms: fh - fi, median_round_ttft_delta_ms: median(deltas), rounds: s,
    });
  }
  process.stdout.write(`${out.join('\n')}\n`);
  if (opt.json) writeFileSync(opt.json, JSON.stringify({ cpu, isl: opt.isl, osl: opt.osl, threads: opt.threads, rounds: opt.rounds, results: summary }, null, 2));
}

main().catch((err) => {
  process.stderr.write(`serve-bench: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
