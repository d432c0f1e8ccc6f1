// What a long prompt's tokenizing does to the other streams of `bench serve` (`npm run
// bench:tokenize-stall`). Two servers over the same synthetic model (the tokenizer of Qwen3.5's
// 248k vocabulary), one with --tokenizer-workers 0 (every text on the JS thread) and one with the
// default, both loaded once. Each round, on each server in turn: one streamed completion (greedy,
// ignore_eos, --osl tokens); at its --at-th token a second client POSTs /tokenize with a text of --kb
// KiB (English-like words, a fresh text each round so no cache helps); and, as the control, the same
// stream with no text sent. The three configurations are rotated by one every round (roundOrder of
// scripts/bench-model.ts), so over a multiple of 3 rounds each takes each slot equally often (until the
// forty-second session the order was reversed every other round, which kept the middle one in the middle
// slot). Medians over the rounds of: the stream's longest gap between two token chunks, its median gap,
// and the /tokenize answer's latency. Usage: npm run bench:tokenize-stall -- [--rounds 6] [--kb 1024] [--osl 64] [--at 16]
import { writeFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { Command } from 'commander';
import { resolveEngineFlags } from '../src/cli/engine-flags.js';
import { SseParser } from '../src/endpoint/sse.js';
import { startServer, type RunningServer } from '../src/serve/server.js';
import { DEFAULT_TOKENIZER_WORKERS } from '../src/serve/tokenize-pool.js';
import { machineInfo } from '../src/util/machine.js';
import { Rng } from '../src/util/rng.js';
import { median, roundOrder } from './bench-model.js';
import { roundsAdvice } from './serve-rounds.js';

const program = new Command('tokenize-stall-bench')
  .option('--threads <n>', 'engine threads', '2')
  .option('--rounds <n>', 'interleaved rounds, the order rotated every round (medians reported; at least 5; a multiple of 3 gives each configuration each slot equally often)', (v) => Number(v), 6)
  .option('--kb <n>', 'KiB of text the second client sends to /tokenize', (v) => Number(v), 1024)
  .option('--osl <n>', "the stream's tokens", (v) => Number(v), 64)
  .option('--at <n>', 'the stream token at which the text is sent', (v) => Number(v), 16)
  .option('--preset <p>', 'synthetic preset (its tokenizer is the real vocabulary size)', '0.8b')
  .option('--json <file>', 'also write the results as JSON')
  .parse(process.argv);
const opt = program.opts<{ threads: string; rounds: number; kb: number; osl: number; at: number; preset: string; json?: string }>();
const log = (s: string) => process.stderr.write(`${s}\n`);

const WORDS = ['the', 'engine', 'measures', 'latency', 'of', 'every', 'request', 'and', 'its', 'throughput', 'under', 'load',
  'while', 'a', 'cluster', 'serves', 'long', 'prompts', 'with', 'tokens', 'that', 'arrive', 'late', 'café', 'naïve', '2026,', 'models.'];

/** About `bytes` of English-like text: words from WORDS, sentences of 8-20 words, a newline every few sentences. */
function text(bytes: number, seed: number): string {
  const rng = new Rng(seed, 'tokenize-stall');
  const parts: string[] = [];
  let n = 0;
  while (n < bytes) {
    const len = 8 + (rng.nextU32() % 13);
    const s = Array.from({ length: len }, () => WORDS[rng.nextU32() % WORDS.length]).join(' ');
    const line = `${s[0]!.toUpperCase()}${s.slice(1)}.${rng.nextU32() % 4 === 0 ? '\n' : ' '}`;
    parts.push(line);
    n += Buffer.byteLength(line);
  }
  return parts.join('');
}

interface Round { maxGapMs: number; medianGapMs: number; tokenizeMs: number; tokenizeCount: number }

async function round(s: RunningServer, long: string | null): Promise<Round> {
  const body = { prompt: Array.from({ length: 16 }, (_, i) => 1000 + i), max_tokens: opt.osl, temperature: 0, ignore_eos: true, stream: true, return_token_ids: true };
  const res = await fetch(`${s.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 200 || !res.body) throw new Error(`stream: HTTP ${res.status}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  const sse = new SseParser();
  const at: number[] = [];
  let tokenize: Promise<{ ms: number; count: number } | { error: string }> | null = null;
  let tokens = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const now = performance.now();
    for (const ev of sse.push(dec.decode(value, { stream: true }))) {
      if (ev.data === '[DONE]') continue;
      const ids = (JSON.parse(ev.data) as { choices: { token_ids?: number[] }[] }).choices[0]?.token_ids ?? [];
      if (ids.length === 0) continue;
      tokens += ids.length;
      at.push(now);
      if (long !== null && tokenize === null && tokens >= opt.at) {
        const t0 = performance.now();
        tokenize = fetch(`${s.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: long }) })
          .then(async (r) => {
            if (r.status !== 200) return { error: `/tokenize: HTTP ${r.status}: ${await r.text()}` };
            const b = await r.json() as { count: number };
            return { ms: performance.now() - t0, count: b.count };
          }, (err: unknown) => ({ error: `/tokenize: ${String(err)}` }));
      }
    }
  }
  if (tokens !== opt.osl) throw new Error(`the stream gave ${tokens} tokens, not ${opt.osl}`);
  const t = tokenize === null ? { ms: NaN, count: 0 } : await tokenize;
  if ('error' in t) throw new Error(t.error);
  const gaps = at.slice(1).map((x, i) => x - at[i]!);
  return { maxGapMs: Math.max(...gaps), medianGapMs: median(gaps), tokenizeMs: t.ms, tokenizeCount: t.count };
}

async function main(): Promise<void> {
  if (opt.rounds < 5) throw new Error('--rounds: at least 5 (medians over a noisy machine)');
  if (!(opt.at >= 1 && opt.at < opt.osl)) throw new Error('--at: between 1 and --osl - 1');
  // --max-seq sets the body limit (64 bytes a token, at least 1 MiB): room for the text as JSON.
  const maxSeq = Math.max(1024, Math.ceil((opt.kb * 1024 * 1.25) / 64));
  const engine = resolveEngineFlags({ device: 'cpu', threads: opt.threads, maxSeq: String(maxSeq), maxSeqs: '1', kvCacheDtype: 'f16' }, 1) as
    ReturnType<typeof resolveEngineFlags> & { maxSeqs: number };
  const sink = new Writable({ write(_c, _e, cb) { cb(); } });
  const servers = new Map<number, RunningServer>();
  for (const workers of [0, DEFAULT_TOKENIZER_WORKERS]) {
    log(`loading synthetic:${opt.preset} with --tokenizer-workers ${workers} ...`);
    servers.set(workers, await startServer({
      modelDir: `synthetic:${opt.preset}`, embedded: false, host: '127.0.0.1', port: 0, engine, device: 'cpu', verbosity: -1,
      stderr: sink, stderrIsTTY: false, tokenizerWorkers: workers,
    }));
  }
  // The configurations: each server with the long text, and the default one without it (the control).
  const configs = [...servers.keys()].map((w) => ({ name: `${w}`, workers: w, send: true }));
  configs.push({ name: `${DEFAULT_TOKENIZER_WORKERS}, no text sent`, workers: DEFAULT_TOKENIZER_WORKERS, send: false });
  const results = new Map<string, Round[]>(configs.map((c) => [c.name, []]));
  const advice = roundsAdvice(opt.rounds, configs.length, 'configurations');
  if (advice) log(`--rounds: ${advice}`);
  const roundOrders: string[][] = [];
  try {
    for (const [w, s] of servers) await round(s, text(4096, -1 - w)); // warm-up: the engines' first steps, the workers' first texts
    for (let r = 0; r < opt.rounds; r++) {
      // Rotated by one every round: each configuration in each slot equally often over a multiple of 3 rounds.
      const order = roundOrder(configs, r);
      roundOrders.push(order.map((c) => c.name));
      for (const c of order) {
        const x = await round(servers.get(c.workers)!, c.send ? text(opt.kb * 1024, r * 16 + c.workers) : null);
        results.get(c.name)!.push(x);
        log(`round ${r + 1} workers ${c.name}: longest gap ${x.maxGapMs.toFixed(1)} ms, median gap ${x.medianGapMs.toFixed(1)} ms` +
          (c.send ? `, /tokenize ${x.tokenizeMs.toFixed(0)} ms (${x.tokenizeCount} tokens)` : ''));
      }
    }
  } finally {
    for (const s of servers.values()) await s.close();
  }
  const m = machineInfo();
  log(`\n${m.cpuModel}, ${opt.threads} engine threads; ${opt.kb} KiB to /tokenize at token ${opt.at} of a ${opt.osl}-token stream; medians of ${opt.rounds} rounds`);
  log(`order rotated every round${advice ? ` (${advice})` : ''}: ${roundOrders.map((o, r) => `${r + 1}: ${o.join(' / ')}`).join('; ')}`);
  log('| --tokenizer-workers | longest gap (ms) | median gap (ms) | /tokenize (ms) | tokens counted |');
  log('|---|---|---|---|---|');
  const summary: Record<string, unknown> = {};
  for (const [name, rs] of results) {
    const row = {
      maxGapMs: median(rs.map((x) => x.maxGapMs)), medianGapMs: median(rs.map((x) => x.medianGapMs)),
      tokenizeMs: median(rs.map((x) => x.tokenizeMs)), tokenizeCount: median(rs.map((x) => x.tokenizeCount)),
    };
    summary[name] = { ...row, rounds: rs };
    const sent = rs[0]!.tokenizeCount > 0;
    log(`| ${name} | ${row.maxGapMs.toFixed(1)} | ${row.medianGapMs.toFixed(1)} | ${sent ? row.tokenizeMs.toFixed(0) : '–'} | ${sent ? row.tokenizeCount : '–'} |`);
  }
  if (opt.json) writeFileSync(opt.json, `${JSON.stringify({ cpu: m.cpuModel, options: opt, round_orders: roundOrders, results: summary }, null, 2)}\n`);
}

main().catch((err: unknown) => {
  log(`tokenize-stall-bench: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
