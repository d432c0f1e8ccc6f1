// Unit tests of the endpoint client's parts and the load figures: SSE parsing, the chunk timeline,
// /metrics columns, prompt fitting, gamma arrivals, goodput, the flags, the open loop on a simulated
// engine, and the overall progress line. Pure inputs, exact outputs.
import { PassThrough } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import { arrivalOffsetsMs, cellArrivalOffsetsMs } from '../src/bench/arrivals.js';
import { loadFigures, meetsGoodput, queueMs, tpotMs } from '../src/bench/load-figures.js';
import type { TimedRequest } from '../src/bench/metrics.js';
import { formatDuration, HumanRenderer, overallProgress } from '../src/bench/render.js';
import { runRow, type RowSettings } from '../src/bench/runner.js';
import { parseEndpointUrl } from '../src/cli/flag-values.js';
import { parseGoodput, resolveSweepConfig } from '../src/cli/sweep-options.js';
import { setupLimits } from '../src/endpoint/connect.js';
import { MAX_TIMER_MS, waitUntil } from '../src/util/wait-until.js';
import { countsFromRunningUsage, reconcileCounts, tokenTimeline, type WireChunk } from '../src/endpoint/chunk-timeline.js';
import { choiceText, errorText, usageOf } from '../src/endpoint/completion-stream.js';
import { fitPrompt } from '../src/endpoint/prompt-text.js';
import { counterColumnsFromMetrics, metricsFamily, parseMetrics } from '../src/endpoint/server-metrics.js';
import { SseParser } from '../src/endpoint/sse.js';
import { tokenizeBody, type TextTokenizer } from '../src/endpoint/text-tokenizer.js';
import type { RequestResult } from '../src/engine/types.js';
import { createFakeEngine } from './helpers/fake-engine.js';
import { usageMessage } from './helpers/usage-error.js';

describe('SSE parser', () => {
  it('splits events across arbitrary chunk boundaries, CRLF or LF, skipping comments', () => {
    const p = new SseParser();
    const text = ': keep-alive\n\ndata: {"a":1}\r\n\r\nevent: x\ndata: l1\ndata: l2\n\ndata: [DONE]\n\n';
    const events = [];
    for (let i = 0; i < text.length; i += 3) events.push(...p.push(text.slice(i, i + 3)));
    expect(events).toEqual([{ event: null, data: '{"a":1}' }, { event: 'x', data: 'l1\nl2' }, { event: null, data: '[DONE]' }]);
    expect(p.end()).toBeNull();
    p.push('data: tail');
    expect(p.end()).toEqual({ event: null, data: 'tail' });
  });

  it('reads the text of completions and chat choices, and the message of an error body', () => {
    expect(choiceText({ text: 'ab' })).toBe('ab');
    expect(choiceText({ delta: { role: 'assistant' } })).toBe('');
    expect(choiceText({ delta: { content: 'a', reasoning_content: 'r' } })).toBe('ar');
    expect(choiceText({ delta: { tool_calls: [{ function: { name: 'f', arguments: '{}' } }] } })).toBe('f{}');
    expect(errorText('{"error":{"message":"bad model"}}')).toBe('bad model');
    expect(errorText('{"message":"nope"}')).toBe('nope');
    expect(errorText('Internal Server Error')).toBe('Internal Server Error');
  });

  it('reads usage counts only when they are non-negative integers, naming what else came', () => {
    expect(usageOf({ prompt_tokens: 4, completion_tokens: 8, prompt_tokens_details: { cached_tokens: 2 } }))
      .toEqual({ prompt_tokens: 4, completion_tokens: 8, cached_tokens: 2, problems: [] });
    expect(usageOf({ prompt_tokens: -1, completion_tokens: '8', prompt_tokens_details: { cached_tokens: null } }))
      .toEqual({ prompt_tokens: null, completion_tokens: null, cached_tokens: null, problems: ['prompt_tokens -1 (a number)', 'completion_tokens "8" (a string)'] });
    expect(usageOf({ completion_tokens: [8] })!.problems).toEqual(['no prompt_tokens', 'completion_tokens [8] (an array)']);
    expect(usageOf(null)).toBeNull();
    expect(usageOf('x')).toBeNull();
  });
});

describe('chunk timeline', () => {
  const ch = (atMs: number, text: string, runningCompletion: number | null = null): WireChunk => ({ atMs, text, runningCompletion });

  it('splits a k-token chunk into k equal gaps; the first chunk\'s tokens all arrive at TTFT', () => {
    const chunks = [ch(5, ''), ch(10, 'a b'), ch(16, 'c d e'), ch(20, 'f'), ch(21, '')];
    const t = tokenTimeline(chunks, [0, 2, 3, 1, 0]);
    expect(t.tokenMs).toEqual([10, 10, 12, 14, 16, 20]);
    expect(t.tokensPerChunk).toEqual([2, 3, 1]);
  });

  it('gives tokens of chunks before the first text to the first text chunk', () => {
    const t = tokenTimeline([ch(3, ''), ch(8, 'x'), ch(12, 'y')], [1, 1, 1]);
    expect(t.tokenMs).toEqual([8, 8, 12]);
    expect(t.tokensPerChunk).toEqual([2, 1]);
  });

  it('reads counts from continuous usage (a role-only chunk without usage counts none), else none', () => {
    expect(countsFromRunningUsage([ch(1, ''), ch(2, 'a', 2), ch(3, 'b', 3), ch(4, '', 3)])).toEqual([0, 2, 1, 0]);
    expect(countsFromRunningUsage([ch(2, 'a', 1), ch(3, 'b')])).toBeNull();
    expect(countsFromRunningUsage([ch(2, 'a'), ch(3, 'b')])).toBeNull();
  });

  it('reconciles tokenizer counts with the usage total in proportion, never below zero', () => {
    expect(reconcileCounts([1, 2, 1], 6)).toEqual([2, 3, 1]);
    expect(reconcileCounts([1, 2, 1], 2)).toEqual([1, 1, 0]);
    expect(reconcileCounts([1, 1], 0)).toEqual([0, 0]);
    expect(reconcileCounts([1, 2, 1], 4)).toEqual([1, 2, 1]);
    // A BOS on every count (3 per chunk for 2 tokens): every chunk loses one, the tail is not zeroed.
    expect(reconcileCounts([3, 3, 3, 3], 8)).toEqual([2, 2, 2, 2]);
    expect(reconcileCounts(Array(32).fill(3), 64)).toEqual(Array(32).fill(2));
    // A shortfall keeps one token on every chunk that had one, the rest in proportion to the excess.
    expect(reconcileCounts([1, 1, 1, 5], 6)).toEqual([1, 1, 1, 3]);
    // Chunks without text stay empty; a surplus is spread too, not put on the last chunk.
    expect(reconcileCounts([0, 3, 3, 0], 4)).toEqual([0, 2, 2, 0]);
    expect(reconcileCounts([0, 1, 1, 1, 1, 0], 8)).toEqual([0, 2, 2, 2, 2, 0]);
    expect(reconcileCounts([0, 0], 5)).toEqual([0, 5]);
    for (const [c, t] of [[[5, 1, 1, 2, 7], 3], [[2, 2, 2], 100], [[4, 0, 1], 1]] as [number[], number][]) {
      const r = reconcileCounts(c, t);
      expect(r.reduce((a, b) => a + b, 0)).toBe(t);
      expect(r.every((k) => k >= 0 && Number.isInteger(k))).toBe(true);
    }
  });

  it('asks the server\'s /tokenize for the text\'s own tokens, never a BOS (vLLM\'s add_special_tokens defaults to true)', () => {
    expect(tokenizeBody('vllm', 'm', 'hi')).toEqual({ model: 'm', prompt: 'hi', add_special_tokens: false });
    expect(tokenizeBody('llamacpp', 'm', 'hi')).toEqual({ content: 'hi', add_special: false });
  });
});

describe('/metrics columns', () => {
  const lumen = (admitted: number, retires: number, peak: number) => parseMetrics(
    `# TYPE lumen:retires_total counter\nlumen:retires_total{model_name="m"} ${retires}\n` +
    `lumen:prefix_admitted_tokens_total{model_name="m"} ${admitted}\nlumen:num_allocs_total 10\nlumen:num_park_waits_total 2\n` +
    `lumen:peak_active_bytes ${peak}\nnot a sample line\n`);

  it('sums labelled samples and names the family', () => {
    const m = parseMetrics('vllm:request_success_total{finished_reason="length"} 3\nvllm:request_success_total{finished_reason="stop"} 2\n');
    expect(m.get('vllm:request_success_total')).toBe(5);
    expect(metricsFamily(m)).toBe('vllm');
    expect(metricsFamily(lumen(0, 0, 0))).toBe('lumen');
    expect(metricsFamily(parseMetrics('process_cpu_seconds_total 1\n'))).toBe('other');
    expect(metricsFamily(null)).toBe('none');
  });

  it('lumen: counter increases, and the peak only when it rose during the row', () => {
    const r = counterColumnsFromMetrics(lumen(100, 4, 1000), lumen(164, 8, 2000), '');
    expect(r.columns).toEqual({ admitted_tok: 64, retires: 4, peak_active_bytes: 2000, num_allocs: 0, num_inflight_park_waits: 0 });
    expect(r.note).toBeNull();
    const flat = counterColumnsFromMetrics(lumen(100, 4, 2000), lumen(164, 8, 2000), '');
    expect(flat.columns.peak_active_bytes).toBeNull();
    expect(flat.note).toMatch(/^peak_active_bytes empty: the server's high-water mark \(2000, since it started\) did not rise/);
  });

  it('vLLM: retires only, the rest empty with why; no /metrics: all empty with why', () => {
    const v = (n: number) => parseMetrics(`vllm:request_success_total{finished_reason="length"} ${n}\nvllm:num_preemptions_total 9\n`);
    const r = counterColumnsFromMetrics(v(2), v(7), '');
    expect(r.columns).toEqual({ admitted_tok: null, retires: 5, peak_active_bytes: null, num_allocs: null, num_inflight_park_waits: null });
    expect(r.note).toBe("admitted_tok, peak_active_bytes, num_allocs, num_inflight_park_waits empty: the server's /metrics (vllm:*) has no metric that measures them");
    const none = counterColumnsFromMetrics(null, null, 'GET /metrics answered HTTP 404');
    expect(Object.values(none.columns).every((x) => x === null)).toBe(true);
    expect(none.note).toMatch(/empty: GET \/metrics answered HTTP 404$/);
  });
});

describe('prompt fitting', () => {
  // A tokenizer whose decode does not round-trip: id 0 decodes to 'ab', which encodes to two tokens.
  const tok: TextTokenizer = {
    source: 'test', vocab: 50,
    encode: async (text) => text.split(' ').filter(Boolean).flatMap((w) => (w === 'ab' ? [1, 2] : [Number(w.slice(1))])),
    decode: async (ids) => ids.map((i) => (i === 0 ? 'ab' : `t${i}`)).join(' '),
  };

  it('reaches the exact count through texts that do not round-trip', async () => {
    const f = await fitPrompt(tok, Int32Array.from([0, 0, 3, 4]), 4, 1, 'k');
    expect(f.exact).toBe(true);
    expect(f.tokens).toBe(4);
    expect((await tok.encode(f.text)).length).toBe(4);
    const longer = await fitPrompt(tok, Int32Array.from([5]), 6, 1, 'k2');
    expect(longer).toMatchObject({ tokens: 6, exact: true });
  });
});

describe('open-loop arrivals and load figures', () => {
  it('draws seeded gamma gaps with mean 1/rate; an infinite rate sends everything at once', () => {
    const a = arrivalOffsetsMs(20001, 4, 1, 7, 's');
    expect(a).toEqual(arrivalOffsetsMs(20001, 4, 1, 7, 's'));
    expect(a[0]).toBe(0);
    for (let i = 1; i < a.length; i++) expect(a[i]!).toBeGreaterThanOrEqual(a[i - 1]!);
    expect(a[20000]! / 20000).toBeCloseTo(250, -1); // mean gap 1000/4 ms (a seeded sample: exact for this seed)
    const bursty = arrivalOffsetsMs(20001, 4, 0.25, 7, 's');
    expect(bursty[20000]! / 20000).toBeCloseTo(250, -1);
    expect(arrivalOffsetsMs(3, Infinity, 1, 0, 's')).toEqual([0, 0, 0]);
    expect(arrivalOffsetsMs(5, 4, 1, 8, 's')).not.toEqual(arrivalOffsetsMs(5, 4, 1, 7, 's'));
  });

  it("gives every row of a cell the same arrival times, whatever its concurrency (speedup_vs_c1 compares rows under one schedule)", async () => {
    // A row's arrivals as the runner scheduled them: request i (pass warmup + floor(i / c), session i mod c)
    // at t0 + offset i, with offset 0 = 0; read from the requests' scheduled times, not from when they ran.
    const arrivals = async (c: number, cell = { isl: 8, osl: 2 }, seed = 3): Promise<number[]> => {
      const e = createFakeEngine({ device: 'cpu', threads: 2, blockSize: 4, kvcache: 'paged', maxSeq: 256, maxSeqs: 4, prefillChunk: 8, stepTokenBudget: 64, prefixCache: true });
      const st: RowSettings = {
        cell, concurrency: c, warmup: 1, iters: 1, maxSeq: 256, seed, prompts: 'unique', sharedPrefix: 0, vocab: 1000,
        profile: false, c1DecodeTokS: null, open: { rate: 20_000, burstiness: 0.5, numRequests: 6 }, goodput: null,
      };
      const out = await runRow(e, st, new AbortController().signal);
      await e.close();
      expect(out.row.status).toBe('ok');
      const at: number[] = [];
      for (const t of out.timed) at[(t.pass - st.warmup) * c + t.session] = t.scheduledMs!;
      return at.map((x) => x - at[0]!);
    };
    const c1 = await arrivals(1);
    expect(c1).toHaveLength(6);
    expect(c1[5]).toBeGreaterThan(0);
    for (const c of [2, 4]) {
      const other = await arrivals(c);
      other.forEach((x, i) => expect(x, `c=${c}, request ${i}`).toBeCloseTo(c1[i]!, 9));
    }
    // The schedule is the cell's and the seed's: another cell, or another --seed, draws another one.
    expect((await arrivals(1, { isl: 8, osl: 3 }))[1]).not.toBeCloseTo(c1[1]!, 6);
    expect((await arrivals(1, undefined, 4))[1]).not.toBeCloseTo(c1[1]!, 6);
  });

  it('waits past the longest setTimeout (2^31 - 1 ms) in pieces, never firing early; a wake ends the wait at once', async () => {
    vi.useFakeTimers();
    try {
      const now = () => Date.now();
      const start = now();
      const at = start + 3 * MAX_TIMER_MS + 5; // 74 days: one setTimeout of that would fire after 1 ms
      let done = false;
      const w = waitUntil(at, now);
      void w.done.then(() => { done = true; });
      await vi.advanceTimersByTimeAsync(1);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(3 * MAX_TIMER_MS + 3);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(done).toBe(true);
      expect(now() - start).toBe(3 * MAX_TIMER_MS + 5);
      // A wait within the limit is one timer, and a time already past resolves at once.
      let short = false;
      void waitUntil(now() + 10, now).done.then(() => { short = true; });
      await vi.advanceTimersByTimeAsync(9);
      expect(short).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(short).toBe(true);
      let past = false;
      void waitUntil(now() - 1, now).done.then(() => { past = true; });
      await Promise.resolve();
      expect(past).toBe(true);
      // An abort wakes a far-off wait; no timer is left behind.
      const far = waitUntil(now() + 10 * MAX_TIMER_MS, now);
      let woken = false;
      void far.done.then(() => { woken = true; });
      far.wake();
      await Promise.resolve();
      expect(woken).toBe(true);
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('keeps an arrival weeks off at its time, at the lowest --request-rate (a longer setTimeout fired after 1 ms)', async () => {
    // Every timer of the row (the arrivals', the simulated engine's steps and wake-ups) and the runner's clock on one
    // fake clock: the row runs as its schedule says, without waiting it.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'Date'] });
    try {
      const e = createFakeEngine({ device: 'cpu', threads: 2, blockSize: 4, kvcache: 'paged', maxSeq: 256, maxSeqs: 4, prefillChunk: 8, stepTokenBudget: 64, prefixCache: true });
      e.nowMs = () => Date.now();
      let submitted = 0;
      const submit = e.submit.bind(e);
      e.submit = (r, cb) => { submitted++; return submit(r, cb); };
      const open = { rate: 1e-6, burstiness: 1, numRequests: 4 };
      const cell = { isl: 8, osl: 2 };
      const offsets = cellArrivalOffsetsMs(4, open, 0, cell);
      expect(offsets[1]).toBeGreaterThan(MAX_TIMER_MS); // this seed's second arrival is 52 days in
      const st: RowSettings = {
        cell, concurrency: 4, warmup: 0, iters: 1, maxSeq: 256, seed: 0, prompts: 'unique', sharedPrefix: 0, vocab: 1000,
        profile: false, c1DecodeTokS: null, open, goodput: null,
      };
      const row = runRow(e, st, new AbortController().signal);
      await vi.advanceTimersByTimeAsync(1000);
      expect(submitted).toBe(1); // the first arrival only
      await vi.advanceTimersByTimeAsync(offsets[3]! + 1000);
      const out = await row;
      expect(out.row.status).toBe('ok');
      expect(submitted).toBe(4);
      for (const t of out.timed) expect(t.submittedMs!).toBeGreaterThan(t.scheduledMs! - 1);
      await e.close();
    } finally {
      vi.useRealTimers();
    }
  });

  const req = (enqueueMs: number, tokenMs: number[], extra: Partial<TimedRequest> = {}): TimedRequest => ({
    pass: 0, session: 0, ...extra,
    result: { id: 1, tokens: tokenMs.map(() => 0), promptTokens: 1, enqueueMs, tokenMs, prefillChunkMs: [], cachedPromptTokens: 0, finishReason: 'length' } as RequestResult,
  });

  it('TPOT = (E2E - TTFT)/(n - 1), queue time apart, goodput against every bound, achieved concurrency', () => {
    const a = req(100, [110, 120, 130], { scheduledMs: 90 });
    const b = req(100, [150], { submittedMs: 99 });
    expect(tpotMs(a)).toBe(10);
    expect(tpotMs(b)).toBeNull();
    expect(queueMs(a)).toBe(10);
    expect(queueMs(b)).toBe(1);
    expect(meetsGoodput(a, { ttftMs: 10, tpotMs: 10, e2elMs: 30 })).toBe(true);
    expect(meetsGoodput(a, { tpotMs: 9.9 })).toBe(false);
    expect(meetsGoodput(b, { tpotMs: 1, e2elMs: 49 })).toBe(false);
    const f = loadFigures([a, b], 40, 2, { rate: Infinity, burstiness: 1 }, { ttftMs: 20 });
    expect(f.achieved_concurrency).toBe((30 + 50) / 40);
    expect(f.request_rate).toBe('inf');
    expect(f.goodput).toMatchObject({ met: 1, total: 2, share: 0.5 });
    expect(f.tpot_ms.n).toBe(1);
  });

  it('runs an open-loop timed phase in-process too: N requests, at most c in flight, arrivals in the JSON', async () => {
    const e = createFakeEngine({ device: 'cpu', threads: 2, blockSize: 4, kvcache: 'paged', maxSeq: 256, maxSeqs: 4, prefillChunk: 8, stepTokenBudget: 64, prefixCache: true });
    const st: RowSettings = {
      cell: { isl: 8, osl: 4 }, concurrency: 2, warmup: 1, iters: 1, maxSeq: 256, seed: 0, prompts: 'unique', sharedPrefix: 0, vocab: 1000,
      profile: false, c1DecodeTokS: null, open: { rate: 1000, burstiness: 1, numRequests: 5 }, goodput: { e2elMs: 1e9 },
    };
    let inFlight = 0;
    let maxInFlight = 0;
    const submit = e.submit.bind(e);
    e.submit = (r, cb) => {
      const h = submit(r, cb);
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      void h.done.then(() => { inFlight--; });
      return h;
    };
    const out = await runRow(e, st, new AbortController().signal);
    expect(out.row.status).toBe('ok');
    expect(out.timed).toHaveLength(5);
    expect(out.timed.every((t) => t.scheduledMs !== undefined)).toBe(true);
    expect(out.timed.map((t) => `${t.pass}:${t.session}`).sort()).toEqual(['1:0', '1:1', '2:0', '2:1', '3:0']);
    expect(maxInFlight).toBeLessThanOrEqual(2);
    expect(out.load).toMatchObject({ requests: 5, request_rate: 1000, burstiness: 1, goodput: { met: 5, total: 5 } });
    expect(out.row.notes).toMatch(/open loop: 5 timed requests at 1000 req\/s, burstiness 1, at most 2 in flight/);
    expect(out.row.retires).toBe(5);
    await e.close();
  });
});

describe('endpoint and load flags', () => {
  it('parses the URL, the API, the goodput bounds and the rate, with defaults', () => {
    expect(parseEndpointUrl('--endpoint', 'http://h:8000/v1/')).toBe('http://h:8000');
    expect(parseEndpointUrl('--endpoint', 'https://h/proxy/v1')).toBe('https://h/proxy');
    expect(parseGoodput('--goodput', 'ttft:500,e2el:1e4')).toEqual({ ttftMs: 500, e2elMs: 10000 });
    const c = resolveSweepConfig({ endpoint: 'http://127.0.0.1:1', requestRate: 'inf', numRequests: '9' }, {});
    expect(c.endpoint).toEqual({ url: 'http://127.0.0.1:1', api: 'chat', model: null, apiKeyEnv: null, tokenizer: null, timeoutS: 600 });
    expect(c.load).toEqual({ requestRate: Infinity, burstiness: 1, numRequests: 9, goodput: null });
    expect(resolveSweepConfig({}).load.requestRate).toBeNull();
    expect(resolveSweepConfig({}).endpoint).toBeNull();
  });

  it('refuses credentials in the URL however the parser would read them, never echoing them', () => {
    const cases = [
      'http://alice:s3cr3t@127.0.0.1:9', 'http:/alice:s3cr3t@127.0.0.1:9', 'http://al\tice:s3cr3t@127.0.0.1:9', 'http://s3cr3t@127.0.0.1:9/v1',
      'http://alice:s3/cr3t@127.0.0.1:9', 'alice:s3cr3t@127.0.0.1:9', 'ftp://alice:s3cr3t@127.0.0.1:9',
    ];
    for (const v of cases) {
      let message = '';
      try {
        parseEndpointUrl('--endpoint', v);
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message, v).toMatch(/^--endpoint: the URL carries credentials/);
      expect(message, v).not.toMatch(/alice|s3cr3t|cr3t/);
    }
    // The URL without them is shown where it is one.
    expect(() => parseEndpointUrl('--endpoint', 'http:/alice:s3cr3t@127.0.0.1:9/v1')).toThrow('give the URL without them (http://127.0.0.1:9) and');
    // An '@' in the path is no credential.
    expect(parseEndpointUrl('--endpoint', 'http://h:8000/a@b/v1')).toBe('http://h:8000/a@b');
  });

  it('rejects bad values with one line naming the flag', () => {
    const ep = 'http://127.0.0.1:1';
    expect(usageMessage(() => resolveSweepConfig({ endpoint: 'localhost:8000' }))).toMatch(/^--endpoint: 'localhost:8000' is not an http/);
    expect(usageMessage(() => resolveSweepConfig({ endpoint: 'not a url' }))).toMatch(/^--endpoint: 'not a url' is not a URL/);
    expect(usageMessage(() => resolveSweepConfig({ endpoint: ep, api: 'responses' }))).toMatch(/^--api: 'responses' is not one of chat, completions/);
    expect(usageMessage(() => resolveSweepConfig({ endpoint: ep, apiKeyEnv: 'NOPE_NOT_SET' }, {}))).toMatch(/^--api-key-env: the environment variable NOPE_NOT_SET is not set/);
    expect(usageMessage(() => resolveSweepConfig({ endpoint: ep, tokenizer: '/no/such/dir' }))).toMatch(/^--tokenizer: \/no\/such\/dir is not a directory/);
    expect(usageMessage(() => resolveSweepConfig({ endpoint: ep, timeoutS: '0' }))).toMatch(/^--timeout-s/);
    // The connection checks' limit names itself when it is not --timeout-s's.
    expect(setupLimits(5_000)).toEqual({ timeoutMs: 5_000, timeoutSource: '--timeout-s' });
    expect(setupLimits(600_000)).toEqual({ timeoutMs: 30_000, timeoutSource: 'the connection checks wait at most 30 s' });
    expect(usageMessage(() => resolveSweepConfig({ endpoint: ep, threads: '2' }))).toMatch(/^--threads sets up the in-process engine/);
    expect(usageMessage(() => resolveSweepConfig({ endpoint: ep, modelPath: '/x' }))).toMatch(/^--model-path sets up the in-process engine/);
    expect(usageMessage(() => resolveSweepConfig({ api: 'chat' }))).toBe('--api applies to --endpoint only');
    expect(usageMessage(() => resolveSweepConfig({ model: 'm' }))).toBe('--model applies to --endpoint only');
    expect(usageMessage(() => resolveSweepConfig({ requestRate: '0' }))).toMatch(/^--request-rate/);
    expect(usageMessage(() => resolveSweepConfig({ burstiness: '2' }))).toMatch(/^--burstiness shapes the arrivals of --request-rate/);
    expect(usageMessage(() => resolveSweepConfig({ numRequests: '2' }))).toMatch(/^--num-requests counts the arrivals/);
    expect(usageMessage(() => resolveSweepConfig({ goodput: 'ttft' }))).toMatch(/^--goodput: 'ttft' is not a bound/);
    expect(usageMessage(() => resolveSweepConfig({ goodput: 'itl:5' }))).toMatch(/^--goodput: 'itl' is not one of ttft, tpot, e2el/);
    expect(usageMessage(() => resolveSweepConfig({ goodput: 'ttft:5,ttft:6' }))).toMatch(/^--goodput: ttft is given twice/);
  });
});

describe('overall progress line', () => {
  it('counts rows, elapsed time and an ETA from the rows so far', () => {
    expect(formatDuration(65_000)).toBe('1m05s');
    expect(formatDuration(3_720_000)).toBe('1h02m');
    expect(formatDuration(9_400)).toBe('9s');
    expect(overallProgress(0, 4, 1000, 0, 1000)).toBe('row 1/4, 0 done, 1s elapsed, ETA -');
    // 2 rows took 60 s: 30 s each; 2 rows left, 10 s into the current one -> 50 s.
    expect(overallProgress(2, 4, 70_000, 60_000, 10_000)).toBe('row 3/4, 2 done, 1m10s elapsed, ETA 50s');
    expect(overallProgress(4, 4, 10_000, 10_000, 0)).toBe('row 4/4, 4 done, 10s elapsed, ETA 0s');
  });

  it('is drawn on a TTY with the row bar', () => {
    let text = '';
    const tty = Object.assign(new PassThrough(), { isTTY: true, columns: 200, cursorTo: () => true, clearLine: () => true, moveCursor: () => true });
    tty.on('data', (d: Buffer) => { text += d.toString(); });
    const r = new HumanRenderer(tty as unknown as NodeJS.WriteStream, true, false, false);
    r.sweepStart(6);
    r.rowStart('16:8 c=1', {}, () => 0);
    r.close();
    expect(text).toContain('row 1/6, 0 done');
    expect(text).toContain('ETA -');
  });
});
