// `bench --endpoint`: the sweep driven over HTTP, against the project's own `bench serve` (the embedded
// model on a random port) and against small local servers that each misbehave in one chosen way. No
// assertion reads a time, a rate or a scheduling outcome: token counts, notes, empty columns, exit codes.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parse } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runSweep, type SweepBackend, type SweepIO } from '../src/bench/sweep.js';
import { resolveSweepConfig, type RawSweepOptions } from '../src/cli/sweep-options.js';
import { connectEndpoint } from '../src/endpoint/connect.js';
import { HttpPool } from '../src/endpoint/http-pool.js';
import type { RunningServer } from '../src/serve/server.js';
import { UsageError } from '../src/util/usage-error.js';
import { startFakeOpenAI, TEMPLATE_TOKENS, type FakeServer } from './helpers/fake-openai.js';
import { startWireServer, wordStream, type WireOptions, type WireServer } from './helpers/fake-wire.js';
import { API_KEY, startTestServer } from './helpers/serve-fixture.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-endpoint-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const backend: SweepBackend = {
  ensureEmbeddedModel: () => { throw new Error('no model is loaded for --endpoint'); },
  loadCheckpoint: () => { throw new Error('no model is loaded for --endpoint'); },
  loadEngine: () => { throw new Error('no model is loaded for --endpoint'); },
  resolveDevice: () => { throw new Error('no device for --endpoint'); },
  usableCpus: () => 1,
  connectEndpoint,
};

type Row = Record<string, string>;
interface Run { code: number; rows: Row[]; report: Record<string, any>; stderr: string }

async function sweep(raw: RawSweepOptions, env: NodeJS.ProcessEnv = {}): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const out = new PassThrough();
  const err = new PassThrough();
  out.on('data', (d: Buffer) => { stdout += d.toString(); });
  err.on('data', (d: Buffer) => { stderr += d.toString(); });
  const prefix = path.join(tmp, `run-${Math.random().toString(36).slice(2)}`);
  const cfg = resolveSweepConfig({ warmup: '1', output: prefix, ...raw }, env);
  const io: SweepIO = { stdout: out, stderr: err, stderrIsTTY: false, env, argv: ['node', 'bench'], handleSignals: false };
  const code = await runSweep(cfg, backend, io);
  const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8')) as Record<string, any>;
  expect(readFileSync(`${prefix}.csv`, 'utf8')).toBe(stdout);
  return { code, rows: parse(stdout, { columns: true }) as Row[], report, stderr };
}

const ENGINE_COLUMNS = ['admitted_tok', 'retires', 'peak_active_bytes', 'num_allocs', 'num_inflight_park_waits'];

describe('against bench serve (the embedded model)', () => {
  let server: RunningServer;
  beforeAll(async () => { server = await startTestServer(); }, 120_000);
  afterAll(async () => { await server?.close(); });
  const env = { LUMEN_KEY: API_KEY };

  it('gives ok rows whose token counts are isl and osl from usage and whose engine columns come from /metrics', async () => {
    const r = await sweep({ endpoint: server.url, apiKeyEnv: 'LUMEN_KEY', cells: '24:6', concurrency: '1,2', iters: '2' }, env);
    expect(r.code).toBe(0);
    expect(r.rows.map((x) => `${x.concurrency}:${x.status}`)).toEqual(['1:ok', '2:ok']);
    for (const [i, row] of r.rows.entries()) {
      const c = Number(row.concurrency);
      const rep = r.report.rows[i];
      // Every timed request: the server counted isl prompt tokens and generated osl (usage), none unchecked.
      expect(rep.endpoint.prompt_tokens).toMatchObject({ isl: 24, mismatched: 0, unchecked: 0 });
      expect(rep.endpoint.prompt_tokens.server).toMatchObject({ n: 2 * c, min: 24, max: 24 });
      expect(rep.endpoint.completion_tokens_server).toMatchObject({ n: 2 * c, min: 6, max: 6 });
      expect(rep.generated_tokens).toBe(2 * c * 6);
      expect(rep.endpoint.tokens_per_chunk_from).toEqual(['continuous_usage_stats']);
      expect(rep.endpoint.metrics.family).toBe('lumen');
      // The engine's own counters over the timed passes (two scrapes of /metrics): 2 x c sequences retired.
      expect(Number(row.retires)).toBe(2 * c);
      const adm = rep.endpoint.metrics.columns.admitted_tok;
      expect(adm.metric).toBe('lumen:prefix_admitted_tokens_total');
      expect(Number(row.admitted_tok)).toBe(adm.after - adm.before);
      expect(row.num_allocs).not.toBe('');
      expect(row.num_inflight_park_waits).toBe('0');
      expect(row.prefill_chunk_ms_p50).toBe('');
      expect(row.notes).toContain('prefill_chunk_ms_p50, prefill_chunk_ms_max empty');
      expect(row.notes).not.toMatch(/prompt length|without usage|could not be fitted/);
      expect(Number(row.ttft_ms)).toBeGreaterThan(0);
      expect(Number(row.decode_tok_s)).toBeGreaterThan(0);
      expect(rep.load.requested_concurrency).toBe(c);
      expect(rep.load.achieved_concurrency).toBeGreaterThan(0);
    }
    // The first row saw the server's high-water mark rise (the pool was never used before); later rows
    // whose mark did not rise leave it empty and say so.
    for (const row of r.rows) {
      if (row.peak_active_bytes === '') expect(row.notes).toMatch(/peak_active_bytes empty: the server's high-water mark/);
    }
    expect(r.report.endpoint).toMatchObject({ url: server.url, api: 'chat', model: server.ctx.model.name, metrics: 'lumen', api_key_env: 'LUMEN_KEY' });
    expect(r.report.endpoint.tokenizer).toMatch(/server's \/tokenize/);
    expect(r.report.endpoint.server).toMatch(/^lumen-bench serve \d/);
    expect(JSON.stringify(r.report)).not.toContain(API_KEY);
  }, 120_000);

  it('drives /v1/completions with --api completions, and the open loop with --request-rate', async () => {
    const r = await sweep({
      endpoint: `${server.url}/v1`, apiKeyEnv: 'LUMEN_KEY', api: 'completions', cells: '16:4', concurrency: '2',
      requestRate: 'inf', numRequests: '5', goodput: 'ttft:1e9,tpot:1e9,e2el:1e9',
    }, env);
    expect(r.code).toBe(0);
    const rep = r.report.rows[0];
    expect(rep.status).toBe('ok');
    expect(rep.timed_requests).toBe(5);
    expect(rep.endpoint.prompt_tokens).toMatchObject({ mismatched: 0, unchecked: 0 });
    expect(rep.load).toMatchObject({ request_rate: 'inf', requests: 5 });
    expect(rep.load.goodput).toMatchObject({ met: 5, total: 5, share: 1 });
    expect(rep.notes).toMatch(/open loop: 5 timed requests at an infinite rate/);
    expect(Number(rep.retires)).toBe(5);
    expect(r.report.sweep.load).toMatchObject({ kind: 'open loop', request_rate: 'inf', num_requests: 5 });
  }, 120_000);

  it('prints the 21-column CSV through the CLI (npx bench --endpoint)', async () => {
    const child = spawn(process.execPath, [path.join(ROOT, 'bin', 'bench.js'), '--endpoint', server.url, '--api-key-env', 'LUMEN_KEY',
      '--cells', '16:4', '--concurrency', '1', '--warmup', '0'], { cwd: ROOT, env: { ...process.env, LUMEN_KEY: API_KEY }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    const code = await new Promise<number | null>((res) => child.on('close', res));
    expect(code, stderr).toBe(0);
    const lines = stdout.trim().split('\n');
    expect(lines[0]!.split(',').length).toBe(21);
    const rows = parse(stdout, { columns: true }) as Row[];
    expect(rows).toHaveLength(1);
    expect(rows[0]!.status).toBe('ok');
    expect(stderr).toContain(server.url);
    expect(stderr).toContain(server.ctx.model.name);
  }, 120_000);
});

describe('against small local servers', () => {
  const servers: FakeServer[] = [];
  const start = async (b: Parameters<typeof startFakeOpenAI>[0]) => {
    const s = await startFakeOpenAI(b);
    servers.push(s);
    return s;
  };
  afterAll(async () => { for (const s of servers) await s.close(); });

  it('asks for exactly osl tokens, greedy, with usage, and sizes chat prompts net of the template', async () => {
    const s = await start({});
    const r = await sweep({ endpoint: s.url, cells: '20:5', concurrency: '1' });
    expect(r.code).toBe(0);
    const body = s.bodies[0]!;
    expect(body).toMatchObject({ model: 'fake-model', max_tokens: 5, min_tokens: 5, ignore_eos: true, temperature: 0, stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true } });
    const content = (body.messages as { content: string }[])[0]!.content;
    expect(content.split(' ').length).toBe(20 - TEMPLATE_TOKENS);
    expect(r.report.endpoint.overhead_tokens).toBe(TEMPLATE_TOKENS);
    // The role-only first chunk counts for vLLM's mark, not for TTFT; its time is kept beside it.
    expect(r.report.rows[0].endpoint.ttft_first_choices_ms.n).toBe(1);
    expect(r.report.rows[0].endpoint.metrics.family).toBe('none');
    expect(r.rows[0]!.notes).toMatch(/admitted_tok, retires, peak_active_bytes, num_allocs, num_inflight_park_waits empty: GET \/metrics answered HTTP 404/);
    for (const c of ENGINE_COLUMNS) expect(r.rows[0]![c]).toBe('');
  });

  it('a server that ignores include_usage: ok rows, tokens estimated by the tokenizer, and a note saying so', async () => {
    const s = await start({ usage: false });
    const r = await sweep({ endpoint: s.url, cells: '12:4', concurrency: '1,2' });
    expect(r.code).toBe(0);
    for (const [i, row] of r.rows.entries()) {
      expect(row.status).toBe('ok');
      expect(row.notes).toMatch(/timed requests came without usage \(the server ignored stream_options\.include_usage\): their output tokens are estimates/);
      expect(r.report.rows[i].endpoint.requests_without_usage).toBe(Number(row.concurrency));
      expect(r.report.rows[i].endpoint.prompt_tokens.unchecked).toBe(Number(row.concurrency));
      expect(r.report.rows[i].generated_tokens).toBe(4 * Number(row.concurrency));
    }
  });

  it('a server that sends several tokens per chunk: each chunk split into its tokens, the distribution reported', async () => {
    const est = await start({ tokensPerChunk: 3, continuousUsage: false, metrics: 'vllm' });
    const r = await sweep({ endpoint: est.url, cells: '10:6', concurrency: '1', iters: '2' });
    expect(r.code).toBe(0);
    const rep = r.report.rows[0];
    expect(rep.endpoint.tokens_per_chunk_histogram).toEqual({ 3: 4 });
    expect(rep.endpoint.tokens_per_chunk_from).toEqual(['tokenizer']);
    expect(rep.generated_tokens).toBe(12);
    // 6 tokens in 2 chunks: the first chunk's 3 tokens at TTFT (2 gaps of 0), the second's 3 gaps split evenly.
    expect(rep.distributions.itl_ms.n).toBe(2 * 5);
    expect(r.rows[0]!.notes).toMatch(/tokens per chunk estimated by the tokenizer for 2 of 2 timed requests/);
    // The chunks are counted (here by the server's /tokenize) after the row's last request, never between
    // a closed-loop session's requests; the warm-up's are never counted.
    const first = est.arrivals.indexOf('stream');
    const last = est.arrivals.lastIndexOf('stream');
    expect(est.arrivals.slice(first, last)).not.toContain('tokenize');
    expect(est.arrivals.slice(last).filter((a) => a === 'tokenize')).toHaveLength(2 * 2);
    // vLLM's /metrics: retires from vllm:request_success_total; the rest empty, said why.
    expect(r.rows[0]!.retires).toBe('2');
    expect(r.rows[0]!.admitted_tok).toBe('');
    expect(r.rows[0]!.notes).toMatch(/admitted_tok, peak_active_bytes, num_allocs, num_inflight_park_waits empty: the server's \/metrics \(vllm:\*\) has no metric/);

    const cont = await start({ tokensPerChunk: 2 });
    const c = await sweep({ endpoint: cont.url, cells: '10:6', concurrency: '1' });
    expect(c.report.rows[0].endpoint.tokens_per_chunk_histogram).toEqual({ 2: 3 });
    expect(c.report.rows[0].endpoint.tokens_per_chunk_from).toEqual(['continuous_usage_stats']);
    expect(c.rows[0]!.notes).not.toMatch(/estimated/);
  });

  it('a server that closes kept-alive connections after each stream: every request sent again on a fresh one, rows ok', async () => {
    const s = await start({ closeAfterStream: true });
    const r = await sweep({ endpoint: s.url, cells: '10:4', concurrency: '1,2', iters: '2' });
    expect(r.code).toBe(0);
    for (const row of r.rows) expect(row.status).toBe('ok');
    // Closed loop: each session's requests after its first find their connection closed.
    expect(s.dropped).toBeGreaterThan(0);
    // Every request served once: the timed ones and the warm-up's 1 + 2.
    expect(s.streamed).toBe(r.report.rows.reduce((a: number, row: { timed_requests: number }) => a + row.timed_requests, 0) + 3);
  });

  it('a server that stops early: the real count in the row and a note', async () => {
    const s = await start({ stopAfter: 3 });
    const r = await sweep({ endpoint: s.url, cells: '10:8', concurrency: '1' });
    expect(r.code).toBe(0);
    const row = r.rows[0]!;
    expect(row.status).toBe('ok');
    expect(row.notes).toMatch(/1 of 1 timed requests did not generate exactly osl=8 tokens \(generated 3\.\.3\)/);
    expect(row.notes).toMatch(/ended early with finish_reason stop/);
    expect(r.report.rows[0].generated_tokens).toBe(3);
  });

  it('a server whose prompt count differs from the tokenizer: the mismatch is in the notes and the JSON', async () => {
    const s = await start({ extraPromptTokens: 1 });
    const r = await sweep({ endpoint: s.url, api: 'completions', cells: '10:2', concurrency: '1' });
    expect(r.code).toBe(0);
    expect(r.report.endpoint.overhead_tokens).toBe(0);
    expect(r.rows[0]!.status).toBe('ok');
    expect(r.rows[0]!.notes).toMatch(/prompt length: the server counted 11 prompt tokens, not isl=10, for 1 of 1 timed requests/);
    expect(r.report.rows[0].endpoint.prompt_tokens).toMatchObject({ isl: 10, mismatched: 1, unchecked: 0 });
  });

  it('a server that returns 500s mid-sweep: error rows for those cells, the others ok, exit 3', async () => {
    const s = await start({ failFromTokens: 20 });
    const r = await sweep({ endpoint: s.url, cells: '10:4,24:4', concurrency: '1,2' });
    expect(r.code).toBe(3);
    expect(r.rows.map((x) => `${x.isl}:${x.concurrency}:${x.status}`)).toEqual(['10:1:ok', '10:2:ok', '24:1:error', '24:2:error']);
    expect(r.rows[2]!.reason).toMatch(/^server error: HTTP 500 from POST \/v1\/chat\/completions: simulated server failure \(during warm-up\)$/);
    for (const c of ENGINE_COLUMNS) expect(r.rows[2]![c]).toBe('');
  });

  it('a server without /tokenize and no --tokenizer: a usage error naming the flag', async () => {
    const s = await start({ tokenize: false });
    const cfg = resolveSweepConfig({ endpoint: s.url, cells: '8:2', concurrency: '1' }, {});
    const io: SweepIO = { stdout: new PassThrough(), stderr: new PassThrough(), stderrIsTTY: false, env: {}, argv: [], handleSignals: false };
    const p = runSweep(cfg, backend, io);
    await expect(p).rejects.toBeInstanceOf(UsageError);
    await expect(p).rejects.toThrow(/^--tokenizer: required: the server at .* has no usable \/tokenize \(POST \/tokenize answered HTTP 404/);
  });

  it('a --model the server does not list, whose /tokenize then fails: the usage error names --model and what is served', async () => {
    const s = await start({ tokenize: false });
    const cfg = resolveSweepConfig({ endpoint: s.url, cells: '8:2', concurrency: '1', model: 'nosuch' }, {});
    const io: SweepIO = { stdout: new PassThrough(), stderr: new PassThrough(), stderrIsTTY: false, env: {}, argv: [], handleSignals: false };
    await expect(runSweep(cfg, backend, io)).rejects.toThrow(/^--model nosuch: the server at .* serves \S+ \(and its \/tokenize refused this one: POST \/tokenize answered HTTP 404/);
  });

  it('an unreachable endpoint: every row an error row saying so, exit 3', async () => {
    const s = await start({});
    const url = s.url;
    await s.close();
    servers.pop();
    const r = await sweep({ endpoint: url, cells: '8:2', concurrency: '1,2' });
    expect(r.code).toBe(3);
    expect(r.rows.map((x) => x.status)).toEqual(['error', 'error']);
    expect(r.rows[0]!.reason).toMatch(new RegExp(`^endpoint ${url.replace(/[.]/g, '\\.')} unreachable: .*ECONNREFUSED`));
    expect(r.report.status).toBe('load_failed');
  });

  it('a server that never finishes a response: the request fails at --timeout-s and the row says so, exit 3', async () => {
    const s = await start({ hang: true });
    const r = await sweep({ endpoint: s.url, cells: '8:2', concurrency: '1', timeoutS: '0.2', warmup: '0' });
    expect(r.code).toBe(3);
    expect(r.rows[0]!.reason).toBe('server error: POST /v1/chat/completions: no complete response within 0.2 s (--timeout-s)');
  });

  it('a server that keeps a stream open after data: [DONE]: the request ends at [DONE], as for OpenAI\'s clients (it waited for --timeout-s)', async () => {
    const s = await start({ keepOpenAfterDone: true });
    const r = await sweep({ endpoint: s.url, cells: '8:2', concurrency: '1,2', timeoutS: '600', warmup: '0' });
    expect(r.code, r.rows.map((x) => x.reason).join('; ')).toBe(0);
    expect(r.rows.map((x) => x.status)).toEqual(['ok', 'ok']);
  });

  it('keeps --shared-prefix: every prompt text of the run starts with the same words', async () => {
    const s = await start({});
    const r = await sweep({ endpoint: s.url, api: 'completions', cells: '16:2', concurrency: '2', sharedPrefix: '6' });
    expect(r.code).toBe(0);
    const prompts = s.bodies.map((b) => String(b.prompt).split(' '));
    expect(prompts).toHaveLength(4);
    for (const p of prompts) {
      expect(p).toHaveLength(16);
      expect(p.slice(0, 6)).toEqual(prompts[0]!.slice(0, 6));
    }
    expect(new Set(prompts.map((p) => p.join(' '))).size).toBe(4);
    expect(r.rows[0]!.notes).toContain('shared-prefix=6');
  });

  it('a bad endpoint flag is a one-line usage error from the CLI, exit 2', async () => {
    const child = spawn(process.execPath, [path.join(ROOT, 'bin', 'bench.js'), '--endpoint', 'http://127.0.0.1:1', '--threads', '2'],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    const code = await new Promise<number | null>((res) => child.on('close', res));
    expect(code).toBe(2);
    expect(stderr).toBe('bench: --threads sets up the in-process engine; with --endpoint the server has its own settings\n');
  });

  it('never opens fewer connections than requests in flight (the cap is the concurrency)', async () => {
    const s = await start({});
    const r = await sweep({ endpoint: s.url, cells: '8:3', concurrency: '3', requestRate: 'inf', numRequests: '7' });
    expect(r.code).toBe(0);
    expect(r.report.rows[0].timed_requests).toBe(7);
    expect(s.maxInFlight).toBeLessThanOrEqual(3);
  });
});

describe('against servers that send exactly the wrong bytes', () => {
  const servers: WireServer[] = [];
  const start = async (o: WireOptions) => {
    const s = await startWireServer(o);
    servers.push(s);
    return s;
  };
  afterAll(async () => { for (const s of servers) await s.close(); });
  const tokenizeBodies = (s: WireServer) => s.requests.filter((q) => q.path === '/tokenize').map((q) => q.body!);

  it('a vLLM /tokenize that adds a BOS unless told not to: asked without special tokens, so chunk counts match usage', async () => {
    const s = await start({ bos: 'vllm', perChunk: 2 });
    const r = await sweep({ endpoint: s.url, api: 'completions', cells: '16:64', concurrency: '1', warmup: '0' });
    expect(r.code).toBe(0);
    const bodies = tokenizeBodies(s);
    expect(bodies.length).toBeGreaterThan(32);
    for (const b of bodies) expect(b).toMatchObject({ add_special_tokens: false });
    const rep = r.report.rows[0];
    expect(rep.endpoint.tokens_per_chunk_from).toEqual(['tokenizer']);
    expect(rep.endpoint.tokens_per_chunk_histogram).toEqual({ 2: 32 });
    expect(rep.endpoint.tokenizer_count_minus_usage).toMatchObject({ n: 1, min: 0, max: 0 });
    expect(rep.endpoint.prompt_tokens).toMatchObject({ mismatched: 0, unchecked: 0 });
    expect(r.report.endpoint.overhead_tokens).toBe(1); // the BOS the server adds to every prompt, measured once
    expect(r.rows[0]!.notes).not.toMatch(/disagreed/);
  });

  it('llama.cpp\'s /tokenize shape: {content} with add_special false', async () => {
    const s = await start({ shape: 'llamacpp', perChunk: 2 });
    const r = await sweep({ endpoint: s.url, api: 'completions', cells: '12:8', concurrency: '1', warmup: '0' });
    expect(r.code).toBe(0);
    expect(r.report.endpoint.tokenizer).toMatch(/llama\.cpp shape/);
    const content = tokenizeBodies(s).filter((b) => b.content !== undefined);
    expect(content.length).toBeGreaterThan(4);
    for (const b of content) expect(b).toMatchObject({ add_special: false });
    expect(r.report.rows[0].endpoint.tokens_per_chunk_histogram).toEqual({ 2: 4 });
  });

  it('a tokenizer whose per-chunk counts exceed usage (a BOS on every count): the surplus spread over all chunks, and a note with by how much', async () => {
    const s = await start({ bos: 'always', perChunk: 2 });
    const r = await sweep({ endpoint: s.url, api: 'completions', cells: '16:64', concurrency: '1', warmup: '0' });
    expect(r.code).toBe(0);
    const rep = r.report.rows[0];
    expect(rep.generated_tokens).toBe(64);
    // 32 chunks of 2 tokens, each counted 3: every chunk 2 again, none emptied (the timeline ends at the last chunk).
    expect(rep.endpoint.tokens_per_chunk_histogram).toEqual({ 2: 32 });
    expect(rep.endpoint.tokenizer_count_minus_usage).toMatchObject({ n: 1, min: 32, max: 32 });
    expect(r.rows[0]!.notes).toMatch(/tokens per chunk: the tokenizer's per-chunk counts disagreed with the server's usage total for 1 of 1 requests counted by the tokenizer \(tokenizer minus server: \+32 tokens, up to 50% of the total\); the difference was spread over each request's chunks in proportion/);
  });

  it('stream events that are not objects (data: null, choices: [null], choices: "x"): an error row naming what came, exit 3, no crash', async () => {
    const cases: [string, RegExp][] = [
      ['null', /the stream sent an event that is not a JSON object: null/],
      ['[1,2]', /the stream sent an event that is not a JSON object: \[1,2\] \(an array\)/],
      ['{"choices":[null]}', /the stream sent an event whose choices\[0\] is not an object: null/],
      ['{"choices":[7]}', /choices\[0\] is not an object: 7 \(a number\)/],
      ['{"choices":"x"}', /the stream sent an event whose choices is not a list: "x" \(a string\)/],
      // Another wire's event (llama.cpp's /completion): its text would have been dropped, the row ok with no tokens.
      ['{"content":"w7 ","stop":false}', /the stream sent an event with no choices list \(not an OpenAI \/v1\/chat\/completions chunk\): \{"content":"w7 ","stop":false\} \(an object\)/],
    ];
    for (const [bad, reason] of cases) {
      const s = await start({ stream: (b) => { const ev = wordStream(Number(b.max_tokens)); return [ev[0]!, bad, ...ev.slice(1)]; } });
      const r = await sweep({ endpoint: s.url, cells: '8:4,8:6', concurrency: '1', warmup: '0' });
      expect(r.code).toBe(3);
      expect(r.rows.map((x) => x.status)).toEqual(['error', 'error']);
      expect(r.rows[0]!.reason).toMatch(/^server error: /);
      expect(r.rows[0]!.reason).toMatch(reason);
    }
  });

  it('a stream of no choice at all (only a usage chunk, then [DONE]): an error row, not an ok row of no tokens', async () => {
    const s = await start({ stream: (b) => wordStream(Number(b.max_tokens)).filter((e) => !e.startsWith('{"choices":[{')) });
    const r = await sweep({ endpoint: s.url, cells: '8:4', concurrency: '1', warmup: '0' });
    expect(r.code).toBe(3);
    expect(r.rows[0]!.status).toBe('error');
    expect(r.rows[0]!.reason).toMatch(/the stream ended \(data: \[DONE\]\) without a single choice: no text and no finish_reason/);
  });

  it('a server that answers stream: true with one JSON body: the error row says it does not stream, exit 3', async () => {
    const s = await start({ ignoreStream: true });
    const r = await sweep({ endpoint: s.url, cells: '8:4', concurrency: '1', warmup: '0' });
    expect(r.code).toBe(3);
    expect(r.rows[0]!.status).toBe('error');
    expect(r.rows[0]!.reason).toMatch(/the server answered stream: true with content-type application\/json, not an event stream/);
  });

  it('a data handler that throws fails that request with the error, never the process', async () => {
    const s = await start({});
    const pool = new HttpPool(s.url);
    const p = pool.stream('/v1/completions', { model: 'm', prompt: 'w1', max_tokens: 2, stream: true }, { onData: () => { throw new TypeError('boom'); } });
    await expect(p).rejects.toMatchObject({ kind: 'protocol', message: 'POST /v1/completions: boom' });
    pool.close();
  });

  it('a JSON reply past the cap is refused with a clear error, not buffered (json(), /v1/models)', async () => {
    const s = await start({ models: { status: 200, bytes: 17 * 1024 * 1024 } });
    const pool = new HttpPool(s.url, { maxJsonBytes: 4096 });
    await expect(pool.json('GET', '/v1/models')).rejects.toMatchObject({ kind: 'protocol', message: 'GET /v1/models: the response is larger than 4.0 KiB, the most this client reads from /v1/models' });
    pool.close();
    const r = await sweep({ endpoint: s.url, cells: '8:4', concurrency: '1' });
    expect(r.code).toBe(3);
    expect(r.report.status).toBe('load_failed');
    expect(r.rows[0]!.reason).toBe(`endpoint ${s.url}: GET /v1/models: the response is larger than 16.0 MiB, the most this client reads from /v1/models`);
  });

  it('/v1/models listing entries that are not objects ({"data":[null]}): the load fails saying no model is listed, no crash', async () => {
    const s = await start({ models: { status: 200, body: { data: [null, 3] } } });
    const r = await sweep({ endpoint: s.url, cells: '8:4', concurrency: '1' });
    expect(r.code).toBe(3);
    expect(r.rows[0]!.reason).toBe(`endpoint ${s.url}: GET /v1/models lists no model (give --model)`);
    // A body that is not JSON (an HTML page from a proxy) is said to be that, not an empty list.
    const html = await start({ models: { status: 200, body: '<html>not json</html>' } });
    expect((await sweep({ endpoint: html.url, cells: '8:4', concurrency: '1' })).rows[0]!.reason)
      .toBe(`endpoint ${html.url}: GET /v1/models answered with a body that is not JSON (give --model)`);
    // With --model the run goes on.
    const ok = await sweep({ endpoint: s.url, model: 'wire-model', cells: '8:4', concurrency: '1', warmup: '0' });
    expect(ok.code).toBe(0);
  });

  it('credentials in the --endpoint URL: a usage error naming --endpoint and --api-key-env, before anything is sent, printed or written', async () => {
    const s = await start({});
    const host = s.url.slice('http://'.length);
    for (const url of [`http://alice:s3cr3t@${host}`, `http://tok3nvalue@${host}/v1`]) {
      let message = '';
      try {
        resolveSweepConfig({ endpoint: url, cells: '8:2', concurrency: '1' }, {});
      } catch (err) {
        expect(err).toBeInstanceOf(UsageError);
        message = (err as Error).message;
      }
      expect(message).toBe(`--endpoint: the URL carries credentials (user:password@ or token@), which this tool never sends, prints or stores; give the URL without them (${s.url}) and the key with --api-key-env VAR (sent as Authorization: Bearer, never printed or stored)`);
      for (const secret of ['alice', 's3cr3t', 'tok3nvalue']) expect(message).not.toContain(secret);
    }
    expect(s.requests).toEqual([]);
    // Through the CLI: exit 2, one line, no report files.
    const prefix = path.join(tmp, 'creds');
    const child = spawn(process.execPath, [path.join(ROOT, 'bin', 'bench.js'), '--endpoint', `http://alice:s3cr3t@${host}`, '--cells', '8:2', '--concurrency', '1', '--output', prefix],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { out += d.toString(); });
    const code = await new Promise<number | null>((res) => child.on('close', res));
    expect(code).toBe(2);
    expect(out).toMatch(/^bench: --endpoint: the URL carries credentials/m);
    expect(out).not.toContain('s3cr3t');
    expect(out).not.toContain('alice');
    expect(existsSync(`${prefix}.json`)).toBe(false);
    expect(existsSync(`${prefix}.html`)).toBe(false);
    expect(s.requests).toEqual([]);
  });

  it('a /tokenize that answers 5xx: the load fails naming the server\'s /tokenize and its status, and --tokenizer DIR as the way round, exit 3', async () => {
    const s = await start({ tokenize: () => ({ status: 503, body: { error: { message: 'tokenizer overloaded' } } }) });
    const r = await sweep({ endpoint: s.url, cells: '8:2', concurrency: '1,2' });
    expect(r.code).toBe(3);
    expect(r.report.status).toBe('load_failed');
    expect(r.rows.map((x) => x.status)).toEqual(['error', 'error']);
    expect(r.rows[0]!.reason).toBe(`endpoint ${s.url}: the server's /tokenize failed (POST /tokenize answered HTTP 503: tokenizer overloaded); ` +
      "--tokenizer DIR (the directory of the model's tokenizer.json) sizes prompts without it");
  });

  it('a /detokenize that answers 5xx (its /tokenize working): the load fails naming /detokenize, not /tokenize', async () => {
    const s = await start({ detokenize: () => ({ status: 503, body: { error: { message: 'busy' } } }) });
    const r = await sweep({ endpoint: s.url, cells: '8:2', concurrency: '1' });
    expect(r.code).toBe(3);
    expect(r.rows[0]!.reason).toBe(`endpoint ${s.url}: the server's /detokenize failed (POST /detokenize answered HTTP 503: busy); ` +
      "--tokenizer DIR (the directory of the model's tokenizer.json) sizes prompts without it");
  });

  it('a /tokenize that never answers: the load fails at the limit, naming it, without trying the other shape (no second wait)', async () => {
    const s = await start({ tokenize: () => ({ hang: true }) });
    // --timeout-s also bounds the connection checks before /tokenize: 3 s leaves the fake's other answers room on a loaded machine.
    const r = await sweep({ endpoint: s.url, cells: '8:2', concurrency: '1', timeoutS: '3' });
    expect(r.code).toBe(3);
    expect(r.rows[0]!.reason).toBe(`endpoint ${s.url}: the server's /tokenize failed (POST /tokenize: no complete response within 3 s (--timeout-s)); ` +
      "--tokenizer DIR (the directory of the model's tokenizer.json) sizes prompts without it");
    expect(s.requests.filter((q) => q.path === '/tokenize')).toHaveLength(1);
  });

  it('a /tokenize that refuses both shapes (422): still the usage error asking for --tokenizer, exit 2', async () => {
    const s = await start({ tokenize: () => ({ status: 422, body: { detail: 'field required' } }) });
    const cfg = resolveSweepConfig({ endpoint: s.url, cells: '8:2', concurrency: '1' }, {});
    const io: SweepIO = { stdout: new PassThrough(), stderr: new PassThrough(), stderrIsTTY: false, env: {}, argv: [], handleSignals: false };
    await expect(runSweep(cfg, backend, io)).rejects.toThrow(/^--tokenizer: required: the server at .* has no usable \/tokenize \(POST \/tokenize answered HTTP 422/);
  });

  it('usage counts of the wrong type (completion_tokens "8", 7.5, missing): the note names the field and its value, not "without usage"', async () => {
    const cases: [(p: number, n: number) => unknown, string][] = [
      [(p, n) => ({ prompt_tokens: p, completion_tokens: String(n), total_tokens: p + n }), 'completion_tokens "8" (a string)'],
      [(p) => ({ prompt_tokens: p, completion_tokens: 7.5 }), 'completion_tokens 7.5 (a number)'],
      [(p) => ({ prompt_tokens: p }), 'no completion_tokens'],
    ];
    for (const [usage, problem] of cases) {
      const s = await start({ usage });
      const r = await sweep({ endpoint: s.url, cells: '8:8', concurrency: '1', warmup: '0' });
      expect(r.code).toBe(0);
      const row = r.rows[0]!;
      expect(row.status).toBe('ok');
      expect(row.notes).toContain(`1 of 1 timed requests came with a usage whose counts are not token counts (${problem}): their output tokens are estimates, counted by tokenizing each chunk`);
      expect(row.notes).not.toMatch(/without usage|ignored stream_options/);
      const rep = r.report.rows[0];
      expect(rep.endpoint).toMatchObject({ requests_without_usage: 0, requests_with_unreadable_usage: 1, usage_problems: [problem] });
      expect(rep.endpoint.completion_tokens_server.n).toBe(0); // never read as a count
      expect(rep.generated_tokens).toBe(8); // counted by the tokenizer, one word per chunk
    }
  });
});
