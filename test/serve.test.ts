// `bench serve` end to end: the real server on a random port over the embedded model, driven by the
// official SDKs (openai@6, @anthropic-ai/sdk, maxRetries 0) and by raw HTTP where the wire format
// itself is the subject. Nothing here waits on timing: situations are forced (manual engine steps,
// streams held open by large max_tokens) and conditions polled, bounded by the test timeout.
import { spawnSync } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { GenerationResult } from '../src/serve/generation.js';
import type { RunningServer } from '../src/serve/server.js';
import type { TokenizePool } from '../src/serve/tokenize-pool.js';
import { REPO_ROOT } from '../src/util/version.js';
import { promptIds } from './helpers/engine-fixture.js';
import { API_KEY, parsePrometheus, promValue, readSse, ScriptedEngine, startTestServer, until } from './helpers/serve-fixture.js';
import { cleanupAllFixtures, synthFixture, type Fixture } from './helpers/synth-fixture.js';
import { UsageError } from '../src/util/usage-error.js';

type Json = Record<string, any>;

const BENCH = path.join(REPO_ROOT, 'bin', 'bench.js');

/** Extra (vLLM) body fields through the SDK's typed params. */
function withExtras<T>(p: T & Json): T {
  return p;
}

function openai(s: RunningServer, apiKey = API_KEY): OpenAI {
  return new OpenAI({ baseURL: `${s.url}/v1`, apiKey, maxRetries: 0 });
}

function anthropic(s: RunningServer, apiKey = API_KEY): Anthropic {
  return new Anthropic({ baseURL: s.url, apiKey, maxRetries: 0 });
}

async function post(s: RunningServer, route: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${s.url}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}`, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/**
 * One request over raw HTTP with `target` sent as the request line's target exactly as given
 * (percent-escapes and absolute-form targets are not normalised, as fetch would).
 */
function rawRequest(s: RunningServer, method: string, target: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; text: string; body: Json }> {
  const u = new URL(s.url);
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: u.hostname, port: Number(u.port), method, path: target,
      headers: { ...(data !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(data)) } : {}), ...headers },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => {
        let parsed: Json = {};
        try {
          parsed = JSON.parse(text) as Json;
        } catch { /* not JSON (e.g. /metrics): the text alone */ }
        resolve({ status: res.statusCode ?? 0, text, body: parsed });
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}

/** Greedy tokens of a token-id prompt through /v1/completions (non-streamed). */
async function soloTokens(client: OpenAI, prompt: number[], maxTokens: number): Promise<number[]> {
  const r = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsNonStreaming>({
    model: 'embedded-tiny-v2', prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, return_token_ids: true,
  }));
  return (r.choices[0] as Json).token_ids as number[];
}

/** The engine's blocks and slots with nothing in flight: every used block is a prefix-cache block, every slot free. */
function atBaseline(s: RunningServer): boolean {
  const st = s.engine.stats();
  return s.ctx.inFlight === 0 && s.ctx.engine!.inFlight() === 0 && st.stateSlotsFree === st.stateSlotsTotal && st.kvBlocksUsed === st.prefixCachedBlocks;
}

describe('bench serve over the embedded model', () => {
  let s: RunningServer;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startTestServer();
    client = openai(s);
  });
  afterAll(async () => {
    await s?.close();
  });

  it('GET /health and /v1/models', async () => {
    const h = await fetch(`${s.url}/health`);
    expect(h.status).toBe(200);
    expect(await h.json()).toEqual({ status: 'ok' });
    const models = await client.models.list();
    expect(models.data).toHaveLength(1);
    const m = models.data[0] as Json;
    expect(m.id).toBe('embedded-tiny-v2');
    expect(m.object).toBe('model');
    expect(typeof m.created).toBe('number');
    expect(m.owned_by).toBe('lumen-bench');
    expect(m.root).toMatch(/embedded-tiny-v2$/);
    expect(m.max_model_len).toBe(1024);
  });

  it('chat: non-streamed and streamed give the same text; a role-only first chunk (with prompt_token_ids), then the tokens; usage chunk; [DONE]', async () => {
    // ignore_eos: the random model's greedy output differs between CPU kernels (AVX2 / AVX-512), so no test relies on it not ending.
    const req = withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', messages: [{ role: 'user' as const, content: 'Tell me about the sea.' }], max_tokens: 12, temperature: 0, ignore_eos: true,
    });
    const whole = await client.chat.completions.create(req);
    const c = whole.choices[0]!;
    expect(whole.object).toBe('chat.completion');
    expect(c.finish_reason).toBe('length');
    expect(whole.usage!.completion_tokens).toBe(12);
    expect(whole.usage!.total_tokens).toBe(whole.usage!.prompt_tokens + 12);
    expect(typeof c.message.content).toBe('string');
    // SDK stream.
    let text = '';
    const ids = new Set<string>();
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null = null;
    const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    for await (const ch of stream) {
      ids.add(ch.id);
      if (ch.usage) usage = ch.usage;
      for (const ci of ch.choices) {
        text += ci.delta.content ?? '';
        if (ci.finish_reason) finish = ci.finish_reason;
      }
    }
    expect(text).toBe(c.message.content);
    expect(ids.size).toBe(1);
    expect(finish).toBe('length');
    expect(usage).toMatchObject({ completion_tokens: 12, prompt_tokens: whole.usage!.prompt_tokens });
    // Raw wire: data lines, the role alone in chunk 1 (as OpenAI's: empty content, no logprobs; vLLM's
    // prompt_token_ids on it), token chunks (one per engine step; see the manual-step test for the exact
    // count), the finish chunk without content, the usage chunk with choices [], [DONE].
    const res = await post(s, '/v1/chat/completions', { ...req, stream: true, stream_options: { include_usage: true }, return_token_ids: true, logprobs: true });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await readSse(res);
    expect(events.every((e) => e.event === null)).toBe(true);
    expect(events[events.length - 1]!.data).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data) as Json);
    const roleChunk = chunks[0]!;
    expect(roleChunk.choices[0]).toEqual({ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null });
    const idsWhole = await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({ ...req, max_tokens: 1, return_token_ids: true }));
    expect(roleChunk.prompt_token_ids).toEqual((idsWhole as Json).prompt_token_ids);
    expect(roleChunk.prompt_token_ids).toHaveLength(whole.usage!.prompt_tokens);
    const tokenChunks = chunks.slice(1, -2);
    expect(tokenChunks.every((ch) => ch.choices[0].token_ids.length >= 1 && ch.choices[0].logprobs.content.length === ch.choices[0].token_ids.length)).toBe(true);
    expect(tokenChunks.flatMap((ch) => ch.choices[0].token_ids as number[])).toHaveLength(12);
    expect(tokenChunks.every((ch) => ch.choices[0].delta.role === undefined && ch.prompt_token_ids === undefined)).toBe(true);
    expect(tokenChunks.every((ch) => ch.usage === null && ch.choices[0].finish_reason === null)).toBe(true);
    const fin = chunks[chunks.length - 2]!;
    expect(fin.choices[0]).toMatchObject({ delta: {}, finish_reason: 'length' });
    expect(chunks[chunks.length - 1]).toMatchObject({ choices: [], usage: { completion_tokens: 12 } });
    expect(tokenChunks.map((ch) => ch.choices[0].delta.content ?? '').join('')).toBe(c.message.content);
  });

  it('the OpenAI SDK\'s stream helper accumulates the same logprobs as the non-streamed answer (each token once)', async () => {
    const p = withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2,
    });
    const whole = await client.chat.completions.create(p);
    const final = await client.chat.completions.stream({ ...p, stream: true }).finalChatCompletion();
    expect(whole.choices[0]!.logprobs!.content).toHaveLength(5);
    expect(final.choices[0]!.logprobs!.content).toEqual(whole.choices[0]!.logprobs!.content);
    expect(final.choices[0]!.message.content).toBe(whole.choices[0]!.message.content);
  });

  it('completions: greedy tokens over HTTP are `bench prompt`\'s tokens for the same prompt ids, streamed or not', async () => {
    const prompt = promptIds(21, 4);
    const cli = spawnSync(process.execPath, [BENCH, 'prompt', '--prompt-ids', prompt.join(','), '--max-new-tokens', '10', '--ignore-eos', '--device', 'cpu', '--threads', '2'], {
      encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' },
    });
    expect(cli.status, cli.stderr).toBe(0);
    const want = cli.stdout.trim().split(/\s+/).map(Number);
    expect(want).toHaveLength(10);
    expect(await soloTokens(client, prompt, 10)).toEqual(want);
    const stream = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsStreaming>({
      model: 'embedded-tiny-v2', prompt, max_tokens: 10, temperature: 0, ignore_eos: true, return_token_ids: true, stream: true,
    }));
    const got: number[] = [];
    let text = '';
    for await (const ch of stream) {
      got.push(...(((ch.choices[0] as Json | undefined)?.token_ids as number[] | undefined) ?? []));
      text += ch.choices[0]?.text ?? '';
    }
    expect(got).toEqual(want);
    const whole = await client.completions.create({ model: 'embedded-tiny-v2', prompt, max_tokens: 10, temperature: 0, ...({ ignore_eos: true } as Json) });
    expect(text).toBe(whole.choices[0]!.text);
    expect(whole.object).toBe('text_completion');
    expect(whole.usage).toMatchObject({ prompt_tokens: 21, completion_tokens: 10, total_tokens: 31 });
    // echo: the prompt's text first; a text prompt works the same way.
    const echo = await client.completions.create({ model: 'embedded-tiny-v2', prompt: 'the water', max_tokens: 3, temperature: 0, echo: true });
    expect(echo.choices[0]!.text.startsWith('the water')).toBe(true);
  });

  it('max_tokens -> length with completion_tokens == max_tokens; logprobs from the engine', async () => {
    for (const n of [1, 5]) {
      const r = await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({
        messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: n, model: 'embedded-tiny-v2', ignore_eos: true,
      }));
      expect(r.choices[0]!.finish_reason).toBe('length');
      expect(r.usage!.completion_tokens).toBe(n);
    }
    const lp = await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({
      messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3, model: 'embedded-tiny-v2', ignore_eos: true,
    }));
    const content = lp.choices[0]!.logprobs!.content!;
    expect(content).toHaveLength(4);
    for (const t of content) {
      expect(t.top_logprobs).toHaveLength(3);
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs[0]!.logprob).toBeCloseTo(t.logprob, 6); // greedy picks the most likely token
      expect(t.top_logprobs[0]!.logprob).toBeGreaterThanOrEqual(t.top_logprobs[2]!.logprob);
      expect(Array.isArray(t.bytes)).toBe(true);
    }
    expect(content.map((t) => t.token).join('')).toBe(lp.choices[0]!.message.content);
    const comp = await client.completions.create({ model: 'embedded-tiny-v2', prompt: promptIds(8, 1), max_tokens: 3, temperature: 0, logprobs: 2, ...({ ignore_eos: true } as Json) });
    const l = comp.choices[0]!.logprobs!;
    expect(l.tokens).toHaveLength(3);
    expect(l.token_logprobs).toHaveLength(3);
    expect(l.top_logprobs!.every((o) => Object.keys(o).length >= 1)).toBe(true);
    expect(l.text_offset![0]).toBe(0);
  });

  it('stop strings (across token boundaries, not in the output), stop_token_ids and min_tokens, streamed and not', async () => {
    const prompt = promptIds(15, 8);
    const base = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', prompt, max_tokens: 16, temperature: 0, ignore_eos: true, return_token_ids: true,
    }));
    const full = base.choices[0]!.text;
    const tokens = (base.choices[0] as Json).token_ids as number[];
    // A stop string spanning the 4th and 5th tokens' text.
    const pieces = tokens.map((t) => s.ctx.model.text.text([t]));
    const start = pieces.slice(0, 3).join('').length;
    const end = pieces.slice(0, 5).join('').length;
    const stop = full.slice(start + Math.floor((end - start) / 2) - 1, start + Math.floor((end - start) / 2) + 1);
    expect(stop.length).toBe(2);
    const at = full.indexOf(stop);
    const req = { model: 'embedded-tiny-v2', prompt, max_tokens: 16, temperature: 0, stop: [stop, 'never-happens'], ignore_eos: true, return_token_ids: true };
    const r = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsNonStreaming>(req));
    const rc = r.choices[0] as Json;
    expect(rc.text).toBe(full.slice(0, at));
    expect(rc.finish_reason).toBe('stop');
    expect(rc.stop_reason).toBe(stop);
    // The output ends at the token that completed the stop string.
    let need = 0;
    while (pieces.slice(0, need).join('').length < at + stop.length) need++;
    expect(r.usage!.completion_tokens).toBe(need);
    expect(rc.token_ids).toEqual(tokens.slice(0, need));
    let streamed = '';
    let finish: string | null = null;
    for await (const ch of await client.completions.create(withExtras<OpenAI.CompletionCreateParamsStreaming>({ ...req, stream: true }))) {
      streamed += ch.choices[0]?.text ?? '';
      finish = ch.choices[0]?.finish_reason ?? finish;
    }
    expect(streamed).toBe(rc.text);
    expect(finish).toBe('stop');
    // stop_token_ids: the 4th token stops the output (counted, its text not shown).
    const st = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', prompt, max_tokens: 16, temperature: 0, stop_token_ids: [tokens[3]], return_token_ids: true,
    }));
    const sc = st.choices[0] as Json;
    const firstAt = tokens.indexOf(tokens[3]!);
    expect(sc.finish_reason).toBe('stop');
    expect(sc.stop_reason).toBe(tokens[3]);
    expect(sc.token_ids).toEqual(tokens.slice(0, firstAt + 1));
    expect(sc.text).toBe(s.ctx.model.text.text(tokens.slice(0, firstAt)));
    // min_tokens: with the first greedy token as a stop token and min_tokens = max_tokens, it never appears.
    const held = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', prompt, max_tokens: 4, min_tokens: 4, temperature: 0, stop_token_ids: [tokens[0]], return_token_ids: true,
    }));
    const hc = held.choices[0] as Json;
    expect(hc.finish_reason).toBe('length');
    expect(hc.token_ids).toHaveLength(4);
    expect(hc.token_ids).not.toContain(tokens[0]);
    // min_tokens holds off stop strings too, as vLLM's: the first occurrence whose last character
    // comes in a token after the first min_tokens stops the output (here min_tokens is the token that
    // completed the first one: at exactly that token it is still held off).
    const tokensTo = (endChar: number) => { let n = 0; while (pieces.slice(0, n).join('').length < endChar) n++; return n; };
    const minTokens = need;
    let later = -1;
    for (let j = full.indexOf(stop); j >= 0; j = full.indexOf(stop, j + 1)) if (tokensTo(j + stop.length) > minTokens) { later = j; break; }
    const mt = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsNonStreaming>({ ...req, min_tokens: minTokens }));
    const mc = mt.choices[0] as Json;
    expect(mt.usage!.completion_tokens).toBeGreaterThanOrEqual(minTokens);
    expect(mc.text).toBe(later >= 0 ? full.slice(0, later) : full);
    expect(mc.finish_reason).toBe(later >= 0 ? 'stop' : 'length');
    expect(mc.token_ids).toEqual(later >= 0 ? tokens.slice(0, tokensTo(later + stop.length)) : tokens);
  });

  it('ignore_eos ignores only the end-of-sequence ids: stop_token_ids still stop the output', async () => {
    const prompt = promptIds(15, 9);
    const tokens = await soloTokens(client, prompt, 8);
    const stopId = tokens[2]!;
    const firstAt = tokens.indexOf(stopId);
    for (const ignoreEos of [false, true]) {
      const r = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsNonStreaming>({
        model: 'embedded-tiny-v2', prompt, max_tokens: 8, temperature: 0, ignore_eos: ignoreEos, stop_token_ids: [stopId], return_token_ids: true,
      }));
      const c = r.choices[0] as Json;
      expect(c.finish_reason, `ignore_eos ${ignoreEos}`).toBe('stop');
      expect(c.stop_reason).toBe(stopId);
      expect(c.token_ids).toEqual(tokens.slice(0, firstAt + 1));
    }
    // Chat, as the SDK sends it.
    const chat = await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8, temperature: 0, ignore_eos: true, return_token_ids: true,
    }));
    const ids = (chat.choices[0] as Json).token_ids as number[];
    const stopped = await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8, temperature: 0, ignore_eos: true,
      stop_token_ids: [ids[2]], return_token_ids: true,
    }));
    expect(stopped.choices[0]!.finish_reason).toBe('stop');
    expect((stopped.choices[0] as Json).token_ids).toEqual(ids.slice(0, ids.indexOf(ids[2]!) + 1));
  });

  it('Anthropic messages, non-streamed and streamed, with the event order of the API', async () => {
    const a = anthropic(s);
    const req = { model: 'embedded-tiny-v2', max_tokens: 6, temperature: 0, system: 'Be brief.', messages: [{ role: 'user' as const, content: 'Hello!' }] };
    const m = await a.messages.create(req);
    expect(m.type).toBe('message');
    expect(m.role).toBe('assistant');
    expect(m.stop_reason).toBe('max_tokens');
    expect(m.usage.output_tokens).toBe(6);
    expect(m.content).toHaveLength(1);
    expect(m.content[0]!.type).toBe('text');
    const types: string[] = [];
    let text = '';
    let outputTokens = -1;
    for await (const ev of await a.messages.create({ ...req, stream: true })) {
      types.push(ev.type);
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
      if (ev.type === 'message_delta') {
        expect(ev.delta.stop_reason).toBe('max_tokens');
        outputTokens = ev.usage.output_tokens;
      }
    }
    expect(text).toBe((m.content[0] as Anthropic.TextBlock).text);
    expect(outputTokens).toBe(6);
    const deltas = types.filter((t) => t === 'content_block_delta').length;
    expect(deltas).toBeGreaterThanOrEqual(1);
    expect(types).toEqual(['message_start', 'content_block_start', ...Array(deltas).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop']);
    // stop_sequences -> stop_sequence; count_tokens = the rendered prompt's length.
    const stop = text.slice(2, 4);
    const sm = await a.messages.create({ ...req, stop_sequences: [stop] });
    expect(sm.stop_reason).toBe('stop_sequence');
    expect(sm.stop_sequence).toBe(stop);
    expect((sm.content[0] as Anthropic.TextBlock).text).toBe(text.slice(0, text.indexOf(stop)));
    const count = await a.messages.countTokens({ model: 'embedded-tiny-v2', system: 'Be brief.', messages: [{ role: 'user', content: 'Hello!' }] });
    expect(count.input_tokens).toBe(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0));
    // An empty final assistant message (the start of the reply) is allowed, as in Anthropic's API;
    // the OpenAI routes' vLLM fields are not this API's, so, as any field not listed, ignored (they
    // had reached the sampler unchecked: a seed 'abc' was a 500).
    for (const body of [
      { ...req, max_tokens: 1, messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: '' }] },
      { ...req, max_tokens: 1, seed: 'abc', stop_token_ids: 'x', min_tokens: -1, ignore_eos: 'yes' },
    ]) {
      const res = await post(s, '/v1/messages', body, { 'anthropic-version': '2023-06-01' });
      expect(res.status, JSON.stringify(body)).toBe(200);
    }
    // top_k at or beyond the vocabulary samples from all of it (vLLM's reading), not a 400 in the engine's words.
    const huge = await post(s, '/v1/chat/completions', { model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'x' }], max_tokens: 1, top_k: 1099511627776 });
    expect(huge.status).toBe(200);
  });

  it('Anthropic usage counts a prefix-cache hit as Anthropic does: input_tokens + cache_read_input_tokens = the prompt', async () => {
    const a = anthropic(s);
    // Long enough to reach a prefix-cache snapshot; the second request reads it.
    const content = Array.from({ length: 120 }, (_, i) => `word${i}`).join(' ');
    const req = { model: 'embedded-tiny-v2', max_tokens: 2, temperature: 0, messages: [{ role: 'user' as const, content }] };
    const count = (await a.messages.countTokens({ model: req.model, messages: req.messages })).input_tokens;
    await a.messages.create(req);
    const m = await a.messages.create(req);
    expect(m.usage.cache_read_input_tokens).toBeGreaterThan(0);
    expect(m.usage.input_tokens + m.usage.cache_read_input_tokens!).toBe(count);
    // Streamed: the SDK's final message takes message_delta's usage.
    const st = a.messages.stream(req);
    const f = await st.finalMessage();
    expect(f.usage.cache_read_input_tokens).toBe(m.usage.cache_read_input_tokens);
    expect(f.usage.input_tokens).toBe(m.usage.input_tokens);
  });

  it('8 concurrent streamed requests each get exactly their solo greedy tokens', async () => {
    const prompts = Array.from({ length: 8 }, (_, i) => promptIds(9 + 7 * i, 100 + i));
    const solo: number[][] = [];
    for (const p of prompts) solo.push(await soloTokens(client, p, 20));
    const streams = await Promise.all(prompts.map((p) => client.completions.create(withExtras<OpenAI.CompletionCreateParamsStreaming>({
      model: 'embedded-tiny-v2', prompt: p, max_tokens: 20, temperature: 0, ignore_eos: true, return_token_ids: true, stream: true,
    }))));
    const got = await Promise.all(streams.map(async (st) => {
      const ids: number[] = [];
      for await (const ch of st) ids.push(...(((ch.choices[0] as Json | undefined)?.token_ids as number[] | undefined) ?? []));
      return ids;
    }));
    expect(got).toEqual(solo);
  });

  it('/metrics parses as Prometheus text and its counters move by the right amounts', async () => {
    const scrape = async () => {
      const r = await fetch(`${s.url}/metrics`);
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
      return parsePrometheus(await r.text());
    };
    await until(() => atBaseline(s));
    const before = await scrape();
    for (const name of ['lumen:num_requests_running', 'lumen:num_requests_waiting', 'lumen:kv_cache_blocks_used', 'lumen:kv_cache_blocks_total']) {
      expect(before.types.get(name)).toBe('gauge');
    }
    expect(before.types.get('lumen:time_to_first_token_seconds')).toBe('histogram');
    expect(promValue(before, 'lumen:kv_cache_blocks_total')).toBe(s.engine.info.kvBlocksTotal);
    expect(promValue(before, 'lumen:num_requests_running')).toBe(0);
    const prompt = promptIds(33, 77);
    await soloTokens(client, prompt, 7);
    const after = await scrape();
    const d = (name: string, labels: Record<string, string> = {}) => promValue(after, name, labels) - promValue(before, name, labels);
    expect(d('lumen:prompt_tokens_total')).toBe(33);
    expect(d('lumen:generation_tokens_total')).toBe(7);
    expect(d('lumen:request_success_total', { finished_reason: 'length' })).toBe(1);
    expect(d('lumen:time_to_first_token_seconds_count')).toBe(1);
    expect(d('lumen:inter_token_latency_seconds_count')).toBe(6);
    expect(d('lumen:e2e_request_latency_seconds_count')).toBe(1);
    expect(d('lumen:time_to_first_token_seconds_sum')).toBeGreaterThan(0);
    // The same prompt again is served from the prefix cache (two full 16-token blocks).
    await soloTokens(client, prompt, 2);
    const third = await scrape();
    expect(promValue(third, 'lumen:prefix_cache_hit_tokens_total') - promValue(after, 'lumen:prefix_cache_hit_tokens_total')).toBe(s.engine.stats().prefixHitTokens - promValue(after, 'lumen:prefix_cache_hit_tokens_total'));
    expect(promValue(third, 'lumen:prefix_cache_hit_tokens_total')).toBeGreaterThan(promValue(after, 'lumen:prefix_cache_hit_tokens_total'));
  });

  it('/tokenize and /detokenize (vLLM shapes)', async () => {
    const t = await (await post(s, '/tokenize', { prompt: 'the water of the sea' })).json() as Json;
    expect(t.count).toBe(t.tokens.length);
    expect(t.max_model_len).toBe(1024);
    const d = await (await post(s, '/detokenize', { tokens: t.tokens })).json() as Json;
    expect(d.prompt).toBe('the water of the sea');
    const chat = await (await post(s, '/tokenize', { messages: [{ role: 'user', content: 'hi' }] })).json() as Json;
    const m = await anthropic(s).messages.countTokens({ model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.count).toBe(m.input_tokens);
  });

  it('the API key covers the route the router matched: percent-encoded and absolute-form targets need it too, and get their route\'s error shape', async () => {
    const chat = { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 };
    const msg = { model: 'embedded-tiny-v2', max_tokens: 1, messages: [{ role: 'user', content: 'Hi' }] };
    const cases: Array<[string, string, unknown, 'openai' | 'anthropic']> = [
      ['POST', '/%761/chat/completions', chat, 'openai'],
      ['POST', '/v1/chat/%63ompletions', chat, 'openai'],
      ['POST', '/%761/completions', { prompt: 'Hi', max_tokens: 1 }, 'openai'],
      ['POST', '/%761/messages', msg, 'anthropic'],
      ['POST', '/v1/%6dessages', msg, 'anthropic'],
      ['POST', '/%761/messages/count_tokens', msg, 'anthropic'],
      ['POST', '/%74okenize', { prompt: 'hello' }, 'openai'],
      ['POST', '/%64etokenize', { tokens: [1, 2] }, 'openai'],
      ['GET', '/%761/models', undefined, 'openai'],
      ['POST', 'http://x/v1/chat/completions', chat, 'openai'],
      ['POST', 'http://x/v1/messages', msg, 'anthropic'],
      ['GET', 'http://x/v1/models', undefined, 'openai'],
      ['POST', '/v1/nothing', {}, 'openai'], // an unknown route needs the key too
    ];
    for (const [method, target, body, flavor] of cases) {
      const r = await rawRequest(s, method, target, body);
      expect(r.status, `${method} ${target}`).toBe(401);
      if (flavor === 'anthropic') expect(r.body, target).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
      else expect(r.body.error, target).toMatchObject({ type: 'invalid_request_error', code: 'invalid_api_key' });
      // With the key the same targets reach their routes.
      const ok = await rawRequest(s, method, target, body, { authorization: `Bearer ${API_KEY}` });
      expect(ok.status, `${method} ${target} with the key`).toBe(target.endsWith('/nothing') ? 404 : 200);
    }
    // An error on an encoded Anthropic path has Anthropic's shape (the matched route decides, not the raw text).
    const nf = await rawRequest(s, 'POST', '/v1/%6dessages', { ...msg, model: 'nope' }, { 'x-api-key': API_KEY });
    expect(nf.status).toBe(404);
    expect(nf.body).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    // The documented open routes stay open, however they are spelled.
    for (const target of ['/health', '/%68ealth', '/version', 'http://x/metrics']) {
      expect((await rawRequest(s, 'GET', target, undefined)).status, target).toBe(200);
    }
  });

  it('a prompt text too long for --max-seq is refused by the generation routes; /tokenize and count_tokens count any length', async () => {
    const m = s.ctx.model;
    const words = (bytes: number) => {
      let t = '';
      for (let i = 0; t.length < bytes; i++) t += ['alpha', 'beta', 'gamma', 'delta'][i % 4] + ' ';
      return t;
    };
    const generating = (text: string): Array<[string, unknown]> => [
      ['/v1/chat/completions', { messages: [{ role: 'user', content: text }], max_tokens: 1 }],
      ['/v1/completions', { prompt: text, max_tokens: 1 }],
      ['/v1/messages', { model: 'embedded-tiny-v2', max_tokens: 1, messages: [{ role: 'user', content: text }] }],
    ];
    // Past the byte bound (more bytes than max_seq tokens of the longest token hold, times the
    // normaliser slack), and under it but far over max_seq (refused on a prefix's count): prompt-bound.ts, unit-tested in tokenize-pool.test.ts.
    const huge = words(m.maxSeq * m.longestTokenBytes * 4 + 1000);
    const long = words(m.maxSeq * 30);
    expect(huge.length).toBeLessThan(1 << 20); // under the body limit: this is the server's check, not fastify's
    expect(Buffer.byteLength(long)).toBeLessThan(m.maxSeq * m.longestTokenBytes * 4);
    for (const text of [huge, long]) {
      for (const [route, body] of generating(text)) {
        const r = await post(s, route, body);
        expect(r.status, route).toBe(400);
        expect(JSON.stringify(await r.json()), route).toMatch(/--max-seq\) is 1024 tokens/);
      }
      // Counting is what these routes are for: any length the body limit lets in (as vLLM's /tokenize), off the JS thread.
      const n = m.tokenizer.encode(text).length;
      expect(n).toBeGreaterThan(m.maxSeq);
      const t = await post(s, '/tokenize', { prompt: text });
      expect(t.status).toBe(200);
      expect(await t.json()).toMatchObject({ count: n, max_model_len: 1024 });
      const chat = await post(s, '/tokenize', { messages: [{ role: 'user', content: text }] });
      const chatCount = ((await chat.json()) as Json).count as number;
      expect(chatCount).toBeGreaterThan(n);
      const c = await post(s, '/v1/messages/count_tokens', { model: 'embedded-tiny-v2', messages: [{ role: 'user', content: text }] });
      expect(await c.json()).toEqual({ input_tokens: chatCount });
    }
    // A prompt that fits is tokenized whole, as before.
    const ok = await client.completions.create({ model: 'embedded-tiny-v2', prompt: words(1200), max_tokens: 1 });
    expect(ok.usage!.prompt_tokens).toBe(m.tokenizer.encode(words(1200)).length);
  });

  it('a forced tool choice on a random-weight model: its malformed call stays text, never a 500', async () => {
    const r = await client.chat.completions.create({
      model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'Weather in Oslo?' }], max_tokens: 8, temperature: 0,
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    expect(['length', 'stop']).toContain(r.choices[0]!.finish_reason);
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(typeof r.choices[0]!.message.content).toBe('string');
  });
});

describe('bench serve: aborts and bad input, with the engine stepped by hand', () => {
  let s: RunningServer;
  let client: OpenAI;
  const step = () => s.engine.allowSteps!(1);
  beforeAll(async () => {
    s = await startTestServer({ internals: { manualSteps: true }, maxSeq: 1024 });
    client = openai(s);
  });
  afterAll(async () => {
    s.engine.allowSteps!(1_000_000);
    await s?.close();
  });

  it('streams one chunk per engine step, the first only once prefill has produced a token', async () => {
    // First on this engine: no step permit has been granted yet, so each step() below is exactly one step.
    expect(atBaseline(s)).toBe(true);
    // A prompt shorter than one KV block: its whole prefill is the first step, which also samples the first token.
    const res = await post(s, '/v1/completions', {
      prompt: promptIds(10, 61), max_tokens: 6, temperature: 0, stream: true, return_token_ids: true, ignore_eos: true,
    });
    const chunks: Json[] = [];
    const all = readSse(res, (e) => { if (e.data !== '[DONE]') chunks.push(JSON.parse(e.data) as Json); });
    // Headers are out, but no chunk before the first step has run.
    await new Promise((r) => setImmediate(r));
    expect(chunks).toHaveLength(0);
    const tokenChunks = () => chunks.filter((c) => c.choices[0].finish_reason === null);
    for (let k = 1; k <= 6; k++) {
      step(); // exactly one engine step ...
      await until(() => tokenChunks().length >= k); // ... gives exactly one chunk with exactly one token
      expect(tokenChunks()).toHaveLength(k);
      expect(tokenChunks()[k - 1]!.choices[0].token_ids).toHaveLength(1);
    }
    await all;
    expect(chunks).toHaveLength(7); // + the finish chunk
    expect(chunks[6]!.choices[0].finish_reason).toBe('length');
  });

  it('a client aborted mid-stream cancels its request: blocks and slots back at baseline', async () => {
    await until(() => atBaseline(s), step);
    const ac = new AbortController();
    const stream = await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsStreaming>({
      model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'Write a long story about the sea and the mountain.' }],
      max_tokens: 900, ignore_eos: true, temperature: 0, stream: true,
    }), { signal: ac.signal });
    const it = stream[Symbol.asyncIterator]();
    const first = it.next();
    let got = false;
    void first.then(() => { got = true; });
    await until(() => got, step);
    expect(((await first).value as OpenAI.ChatCompletionChunk).choices[0]!.delta.role).toBe('assistant');
    const st = s.engine.stats();
    expect(st.stateSlotsFree).toBe(st.stateSlotsTotal - 1); // running, far from its 900 tokens
    ac.abort();
    // The SDK ends the stream (or throws its abort error): either way the client is gone. Steps granted
    // while waiting for the first chunk may have sent more chunks that arrived in the same network read
    // as the first; the SDK has decoded them and still hands them out after the abort. No step runs from
    // here until the stream ends, so they are bounded by the steps granted so far (one token each).
    let ended = false;
    for (let k = 0; k <= 900 && !ended; k++) ended = (await it.next().catch(() => ({ done: true }))).done === true;
    expect(ended).toBe(true);
    await until(() => atBaseline(s), step);
    expect(s.engine.stats().stateSlotsFree).toBe(s.engine.stats().stateSlotsTotal);
  });

  it('a non-streamed request whose client goes away is cancelled too, and still gets its request log line', async () => {
    await until(() => atBaseline(s), step);
    const logged = vi.spyOn(s.ctx, 'logRequest');
    const info = vi.spyOn(s.ctx.log, 'info');
    const before = parsePrometheus(await (await fetch(`${s.url}/metrics`)).text());
    const ac = new AbortController();
    const call = client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>({
      model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'Tell me everything.' }], max_tokens: 900, ignore_eos: true,
    }), { signal: ac.signal }).catch((e: unknown) => e);
    await until(() => s.ctx.inFlight === 1); // the request is in the engine (no step has run yet)
    step();
    ac.abort();
    expect(await call).toBeInstanceOf(Error);
    await until(() => atBaseline(s), step);
    // One line (-v), as for a streamed request the client abandons: status 499 (the client closed the request).
    await until(() => logged.mock.calls.length > 0);
    const lines = logged.mock.calls.map((c) => c[0]);
    const written = info.mock.calls.map((c) => c[0] as Json).filter((j) => j.event === 'request');
    logged.mockRestore();
    info.mockRestore();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ route: '/v1/chat/completions', status: 499 });
    expect(lines[0]!.result?.finish).toBe('cancelled');
    // The line and /metrics say what the API says of a request the server cut: abort.
    expect(written).toHaveLength(1);
    expect(written[0]).toMatchObject({ status: 499, finish_reason: 'abort' });
    const after = parsePrometheus(await (await fetch(`${s.url}/metrics`)).text());
    const reason = (r: string) => promValue(after, 'lumen:request_success_total', { finished_reason: r }) - promValue(before, 'lumen:request_success_total', { finished_reason: r });
    expect(reason('abort')).toBe(1);
    expect(after.samples.some((x) => x.labels.finished_reason === 'cancelled' || x.labels.finished_reason === 'error')).toBe(false);
  });

  it('requests beyond --max-seqs wait inside the engine and /metrics counts them as waiting', async () => {
    await until(() => atBaseline(s), step);
    const slots = s.engine.stats().stateSlotsTotal; // 8
    const firsts = new Set<number>();
    const ends: Promise<void>[] = [];
    for (let i = 0; i <= slots; i++) {
      const st = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsStreaming>({
        model: 'embedded-tiny-v2', prompt: promptIds(12 + i, 300 + i), max_tokens: 40, temperature: 0, ignore_eos: true, stream: true,
      }));
      ends.push((async () => {
        for await (const _ of st) firsts.add(i);
      })());
    }
    await until(() => firsts.size >= slots, step);
    const text = await (await fetch(`${s.url}/metrics`)).text();
    const m = parsePrometheus(text);
    expect(promValue(m, 'lumen:num_requests_running')).toBe(slots);
    expect(promValue(m, 'lumen:num_requests_waiting')).toBe(1);
    expect(firsts.has(slots)).toBe(false); // the last one has not started
    let all = false;
    void Promise.all(ends).then(() => { all = true; });
    await until(() => all, step);
    await until(() => atBaseline(s), step);
    const after = parsePrometheus(await (await fetch(`${s.url}/metrics`)).text());
    expect(promValue(after, 'lumen:num_requests_running')).toBe(0);
    expect(promValue(after, 'lumen:num_requests_waiting')).toBe(0);
  });

  it('every bad input gets its status and error shape while a concurrent request finishes with its tokens unchanged', async () => {
    const prompt = promptIds(40, 55);
    // Solo tokens of the concurrent request (stepped through).
    let solo: number[] | null = null;
    void soloTokens(client, prompt, 24).then((t) => { solo = t; });
    await until(() => solo !== null, step);
    // Start it again and hold it mid-generation.
    const stream = await client.completions.create(withExtras<OpenAI.CompletionCreateParamsStreaming>({
      model: 'embedded-tiny-v2', prompt, max_tokens: 24, temperature: 0, ignore_eos: true, return_token_ids: true, stream: true,
    }));
    const ids: number[] = [];
    let finished = false;
    void (async () => {
      for await (const ch of stream) ids.push(...(((ch.choices[0] as Json | undefined)?.token_ids as number[] | undefined) ?? []));
      finished = true;
    })();
    await until(() => ids.length > 0, step);

    const openaiShape = (b: Json) => {
      expect(Object.keys(b)).toEqual(['error']);
      expect(typeof b.error.message).toBe('string');
      expect(typeof b.error.type).toBe('string');
      expect('param' in b.error && 'code' in b.error).toBe(true);
    };
    const anthropicShape = (b: Json, type: string) => {
      expect(b.type).toBe('error');
      expect(b.error.type).toBe(type);
      expect(typeof b.error.message).toBe('string');
    };
    const chat = (extra: Json) => ({ model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'hi' }], ...extra });
    const cases: Array<[string, string, unknown, number, RegExp, Record<string, string>?]> = [
      ['malformed JSON', '/v1/chat/completions', '{"messages": [', 400, /json/i],
      ['wrong type', '/v1/chat/completions', chat({ max_tokens: '5' }), 400, /max_tokens/],
      ['wrong type in a message', '/v1/chat/completions', chat({ messages: [{ role: 'user', content: 5 }] }), 400, /content/],
      ['unknown role', '/v1/chat/completions', chat({ messages: [{ role: 'wizard', content: 'x' }] }), 400, /role/],
      ['max_tokens 0', '/v1/chat/completions', chat({ max_tokens: 0 }), 400, /at least 1/],
      ['max_tokens beyond max_seq', '/v1/chat/completions', chat({ max_tokens: 5000 }), 400, /5000.*1024/],
      ['prompt longer than max_seq', '/v1/completions', { prompt: promptIds(1100, 3), max_tokens: 4 }, 400, /1100 tokens.*1024/],
      ['prompt + max_tokens beyond max_seq', '/v1/completions', { prompt: promptIds(1000, 3), max_tokens: 100 }, 400, /1024.*1100.*1000.*100/],
      ['n > 1', '/v1/chat/completions', chat({ n: 2 }), 400, /n > 1.*not supported/],
      ['response_format json', '/v1/chat/completions', chat({ response_format: { type: 'json_object' } }), 400, /response_format.*not supported/],
      ['penalties', '/v1/completions', { prompt: 'x', presence_penalty: 1 }, 400, /presence_penalty.*not supported/],
      ['token outside the vocabulary', '/v1/completions', { prompt: [1, 999999] }, 400, /outside the vocabulary/],
      ['body over the size limit', '/v1/completions', JSON.stringify({ prompt: 'x'.repeat(1_200_000) }), 413, /too large/],
      ['unknown model', '/v1/chat/completions', chat({ model: 'gpt-17' }), 404, /gpt-17/],
      ['missing API key', '/v1/chat/completions', chat({}), 401, /API key/, { authorization: '' }],
      ['wrong API key', '/v1/models', chat({}), 401, /incorrect API key/, { authorization: 'Bearer nope' }],
      ['unknown route', '/v1/nothing', {}, 404, /no route/],
      ['JSON sent as text/plain', '/v1/chat/completions', chat({}), 415, /must be JSON sent with content-type: application\/json.*text\/plain/, { 'content-type': 'text/plain' }],
      ['a form body', '/v1/completions', 'prompt=x', 415, /content-type: application\/json.*x-www-form-urlencoded/, { 'content-type': 'application/x-www-form-urlencoded' }],
      ['a JSON body that is not an object', '/v1/completions', '[1, 2]', 400, /body must be a JSON object/],
    ];
    for (const [what, route, body, status, msg, headers] of cases) {
      const method = route === '/v1/models' ? 'GET' : 'POST';
      const res = await fetch(`${s.url}${route}`, {
        method, headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}`, ...(headers ?? {}) },
        ...(method === 'POST' ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
      });
      expect(res.status, what).toBe(status);
      const b = await res.json() as Json;
      openaiShape(b);
      expect(b.error.message, what).toMatch(msg);
      // OpenAI's codes: model_not_found only for an unknown model (an unknown URL has none).
      if (status === 404) expect(b.error.code, what).toBe(what === 'unknown model' ? 'model_not_found' : null);
    }
    // The SDK sees the same errors as its own exception types.
    await expect(client.chat.completions.create(chat({ n: 3 }) as OpenAI.ChatCompletionCreateParamsNonStreaming)).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(openai(s, 'nope').models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    await expect(client.chat.completions.create(chat({ model: 'x' }) as OpenAI.ChatCompletionCreateParamsNonStreaming)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    // Anthropic routes answer in Anthropic's shape.
    const aCases: Array<[unknown, number, string, Record<string, string>?]> = [
      [{ model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'x' }] }, 400, 'invalid_request_error'],
      [{ model: 'embedded-tiny-v2', max_tokens: 0, messages: [{ role: 'user', content: 'x' }] }, 400, 'invalid_request_error'],
      [{ model: 'embedded-tiny-v2', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, 400, 'invalid_request_error'],
      [{ model: 'claude-9', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }, 404, 'not_found_error'],
      ['{"model": ', 400, 'invalid_request_error'],
      [{ model: 'embedded-tiny-v2', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }, 401, 'authentication_error', { authorization: '', 'x-api-key': 'nope' }],
      [{ model: 'embedded-tiny-v2', max_tokens: 4, messages: [{ role: 'user', content: 'x' }], tool_choice: { type: 'any' } }, 400, 'invalid_request_error'],
      [{ model: 'embedded-tiny-v2', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }, 415, 'invalid_request_error', { 'content-type': 'text/plain' }],
    ];
    // An empty message (but a final assistant one, the reply's start: accepted in the Anthropic
    // messages test) or an empty text block: 400 in Anthropic's words.
    const aMsg = (messages: unknown, extra: Json = {}) => ({ model: 'embedded-tiny-v2', max_tokens: 1, messages, ...extra });
    const emptyCases: Array<[unknown, RegExp]> = [
      [aMsg([{ role: 'user', content: '' }]), /^messages\.0: all messages must have non-empty content except for the optional final assistant message$/],
      [aMsg([{ role: 'user', content: [] }]), /^messages\.0: all messages must have non-empty content/],
      [aMsg([{ role: 'user', content: 'x' }, { role: 'assistant', content: '' }, { role: 'user', content: 'y' }]), /^messages\.1: all messages must have non-empty content/],
      [aMsg([{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: '' }] }]), /^messages\.0\.content\.1\.text: text content blocks must be non-empty$/],
    ];
    for (const [body, msg] of emptyCases) {
      const res = await post(s, '/v1/messages', body, { 'anthropic-version': '2023-06-01' });
      expect(res.status, JSON.stringify(body)).toBe(400);
      const b = await res.json() as Json;
      anthropicShape(b, 'invalid_request_error');
      expect(b.error.message, JSON.stringify(body)).toMatch(msg);
    }
    for (const [body, status, type, headers] of aCases) {
      const res = await post(s, '/v1/messages', body, { 'anthropic-version': '2023-06-01', ...(headers ?? {}) });
      expect(res.status, JSON.stringify(body)).toBe(status);
      const b = await res.json() as Json;
      anthropicShape(b, type);
      // Anthropic's terms in Anthropic's errors.
      if ((body as Json).tool_choice) expect(b.error.message).toBe("tool_choice 'any' needs tools");
    }
    await expect(anthropic(s, 'nope').messages.create({ model: 'embedded-tiny-v2', max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }))
      .rejects.toBeInstanceOf(Anthropic.AuthenticationError);

    // The concurrent request was mid-generation through all of that, and finishes with its solo tokens.
    expect(finished).toBe(false);
    await until(() => finished, step);
    expect(ids).toEqual(solo);
  });
});

describe('bench serve: while the model loads', () => {
  it('GET /health answers 503 (and the APIs 503 in their shapes) until the engine is loaded, then 200', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => { release = r; });
    let url = '';
    const listening = new Promise<void>((r) => {
      void startTestServer({
        apiKey: null,
        onListening: (u) => { url = u; r(); },
        loadEngine: async () => { await gate; return new ScriptedEngine(); },
      }).then((srv) => { server = srv; });
    });
    let server: RunningServer | undefined;
    await listening;
    const h = await fetch(`${url}/health`);
    expect(h.status).toBe(503);
    expect(await h.json()).toEqual({ status: 'loading' });
    const c = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"prompt": "x"}' });
    expect(c.status).toBe(503);
    expect(((await c.json()) as Json).error.message).toMatch(/loading/);
    const m = await fetch(`${url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}' });
    expect(m.status).toBe(503);
    // Anthropic's shape with api_error: 503 is not a status of Anthropic's (its overloaded_error goes with 529); the SDK retries it as any 5xx.
    expect(((await m.json()) as Json).error.type).toBe('api_error');
    // Every API route, the readiness probes' /v1/models and the tokenizer routes included.
    const routes: Array<[string, string, unknown, 'openai' | 'anthropic']> = [
      ['GET', '/v1/models', undefined, 'openai'],
      ['POST', '/tokenize', { prompt: 'x' }, 'openai'],
      ['POST', '/detokenize', { tokens: [1] }, 'openai'],
      ['POST', '/v1/messages/count_tokens', { model: 'm', messages: [{ role: 'user', content: 'x' }] }, 'anthropic'],
      ['POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }] }, 'openai'],
    ];
    for (const [method, route, body, flavor] of routes) {
      const r = await fetch(`${url}${route}`, { method, headers: { 'content-type': 'application/json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
      expect(r.status, route).toBe(503);
      const b = await r.json() as Json;
      if (flavor === 'anthropic') expect(b, route).toMatchObject({ type: 'error', error: { message: 'the model is still loading' } });
      else expect(b, route).toMatchObject({ error: { type: 'server_error', message: 'the model is still loading' } });
    }
    // /version needs no model.
    expect((await fetch(`${url}/version`)).status).toBe(200);
    release();
    await until(() => server !== undefined);
    const ok = await fetch(`${url}/health`);
    expect(ok.status).toBe(200);
    await server!.close();
  });
});

describe('bench serve: a long prompt is tokenized off the JS thread', () => {
  // Texts of HOLD characters or more wait in the tokenizer worker until the gate opens (tokenize-worker.ts):
  // "a long prompt is being tokenized" for as long as a test needs, with no timing.
  const gate = new Int32Array(new SharedArrayBuffer(4));
  const HOLD = 40_000;
  const release = () => { Atomics.store(gate, 0, 1); Atomics.notify(gate, 0); };
  let s: RunningServer;
  let eng: ScriptedEngine;
  const finished: GenerationResult[] = [];
  const pool = () => s.ctx.model.encoder as TokenizePool;
  const words = (chars: number) => {
    let t = '';
    for (let i = 0; t.length < chars; i++) t += ['alpha', 'beta', 'gamma', 'delta'][i % 4] + ' ';
    return t;
  };
  beforeAll(async () => {
    eng = new ScriptedEngine();
    s = await startTestServer({ apiKey: null, maxSeq: 32768, loadEngine: async () => eng, tokenizeHold: { minChars: HOLD, gate } });
    s.ctx.onFinished = (r) => finished.push(r);
  });
  afterAll(async () => {
    release();
    await s?.close();
  });

  it('another stream runs to its end while a long prompt is being tokenized; then the long one runs with the right count', async () => {
    Atomics.store(gate, 0, 0);
    expect(pool().workers).toBe(2);
    const text = words(HOLD + 100);
    let settled = false;
    const held = post(s, '/v1/completions', { prompt: text, max_tokens: 2 }).then(async (r) => {
      settled = true;
      return { status: r.status, body: await r.json() as Json };
    });
    await until(() => pool().inFlight === 1);
    eng.scripts.push([...s.ctx.model.tokenizer.encode('Hello there'), 248046]);
    const res = await post(s, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 8, stream: true });
    const events = await readSse(res);
    expect(events[events.length - 1]!.data).toBe('[DONE]');
    const content = events.slice(0, -1).map((e) => ((JSON.parse(e.data) as Json).choices[0]?.delta?.content as string | undefined) ?? '').join('');
    expect(content).toBe('Hello there');
    expect(settled).toBe(false);
    expect(pool().inFlight).toBe(1);
    release();
    const r = await held;
    expect(r.status).toBe(200);
    expect(r.body.usage.prompt_tokens).toBe(s.ctx.model.tokenizer.encode(text).length);
  });

  it('a request whose prompt is still being tokenized when the server stops gets the 503 of a stopping server', async () => {
    Atomics.store(gate, 0, 0);
    const own = await startTestServer({ apiKey: null, maxSeq: 32768, loadEngine: async () => new ScriptedEngine(), tokenizeHold: { minChars: HOLD, gate } });
    const held = post(own, '/v1/completions', { prompt: words(HOLD + 100), max_tokens: 2 }).then(async (r) => ({ status: r.status, body: await r.json() as Json }));
    await until(() => (own.ctx.model.encoder as TokenizePool).inFlight === 1);
    await own.close();
    const r = await held;
    expect(r.status).toBe(503);
    expect(r.body.error.message).toBe('the server is shutting down');
  });

  it('a client that leaves while its prompt is being tokenized: its request is cancelled as it reaches the engine', async () => {
    Atomics.store(gate, 0, 0);
    finished.length = 0;
    const sockets: Array<import('node:net').Socket> = [];
    const onConnection = (sock: import('node:net').Socket) => sockets.push(sock);
    s.app.server.on('connection', onConnection);
    const body = JSON.stringify({ prompt: words(HOLD + 100), max_tokens: 64 });
    const u = new URL(s.url);
    const req = httpRequest({ host: u.hostname, port: u.port, path: '/v1/completions', method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } });
    req.on('error', () => {});
    req.end(body);
    await until(() => pool().inFlight === 1 && sockets.length === 1);
    s.app.server.off('connection', onConnection);
    let closed = false;
    sockets[0]!.on('close', () => { closed = true; });
    req.destroy();
    await until(() => closed);
    eng.scripts.push(Array.from({ length: 64 }, (_, i) => 1000 + i)); // 64 steps of output if it ran
    release();
    await until(() => finished.length === 1);
    expect(finished[0]!.finish).toBe('cancelled');
    expect(finished[0]!.tokens.length).toBe(0);
  });
});

describe('bench serve: tool calls, thinking and UTF-8 over a scripted engine', () => {
  let s: RunningServer;
  let eng: ScriptedEngine;
  let client: OpenAI;
  const tools: OpenAI.ChatCompletionTool[] = [{
    type: 'function',
    function: { name: 'get_weather', description: 'Current weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  }];
  const script = (text: string) => [...s.ctx.model.tokenizer.encode(text), 248046];
  beforeAll(async () => {
    eng = new ScriptedEngine();
    s = await startTestServer({ loadEngine: async () => eng });
    client = openai(s);
  });
  afterAll(async () => {
    await s?.close();
  });

  it('an engine error mid-stream ends each API\'s stream with its own error shape, naming the engine\'s reason', async () => {
    const reason = 'scripted engine failure';
    const ids = s.ctx.model.tokenizer.encode('Hello there'); // no end-of-sequence: the failure comes first
    const events = async (route: string, body: Json) => {
      eng.scripts.push(ids);
      eng.failNext = reason;
      const res = await post(s, route, { model: 'embedded-tiny-v2', max_tokens: 32, ...body, stream: true });
      expect(res.status).toBe(200);
      return readSse(res);
    };
    const chat = await events('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }] });
    const cmpl = await events('/v1/completions', { prompt: 'x' });
    for (const evs of [chat, cmpl]) {
      expect(evs[evs.length - 1]!.data).toBe('[DONE]');
      const err = JSON.parse(evs[evs.length - 2]!.data) as Json;
      expect(err.error).toMatchObject({ type: 'server_error' });
      expect(err.error.message).toContain(reason);
    }
    const msgs = await events('/v1/messages', { messages: [{ role: 'user', content: 'x' }] });
    const last = msgs[msgs.length - 1]!;
    expect(last.event).toBe('error');
    expect(JSON.parse(last.data)).toMatchObject({ type: 'error', error: { type: 'api_error' } });
    expect((JSON.parse(last.data) as Json).error.message).toContain(reason);
  });

  it('ignore_eos runs through the end-of-sequence token, and a stop_token_id still ends the output there', async () => {
    const [a, b, c, d] = s.ctx.model.tokenizer.encode('one two three four');
    const eos = s.ctx.model.eosTokenIds[0]!;
    const run = async (extra: Json) => {
      eng.scripts.push([a!, b!, eos, c!, d!]);
      const r = await post(s, '/v1/completions', { prompt: 'x', max_tokens: 5, return_token_ids: true, ...extra });
      return ((await r.json()) as Json).choices[0] as Json;
    };
    expect(await run({})).toMatchObject({ finish_reason: 'stop', stop_reason: null, token_ids: [a, b, eos] });
    expect(await run({ ignore_eos: true })).toMatchObject({ finish_reason: 'length', token_ids: [a, b, eos, c, d] });
    expect(await run({ ignore_eos: true, stop_token_ids: [c] })).toMatchObject({ finish_reason: 'stop', stop_reason: c, token_ids: [a, b, eos, c] });
  });

  const CALL = 'I will look it up.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>';

  it('OpenAI: the model\'s <tool_call> comes back as tool_calls with finish_reason tool_calls, streamed as tool-call deltas', async () => {
    const req = { model: 'embedded-tiny-v2', messages: [{ role: 'user' as const, content: 'What is the weather in Oslo?' }], tools };
    eng.scripts.push(script(CALL));
    const r = await client.chat.completions.create(req);
    const c = r.choices[0]!;
    expect(c.finish_reason).toBe('tool_calls');
    expect(c.message.content).toBe('I will look it up.\n\n');
    expect(c.message.tool_calls).toHaveLength(1);
    const call = c.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.type).toBe('function');
    expect(call.id).toMatch(/^chatcmpl-tool-[0-9a-f]{16}$/);
    expect(call.function).toEqual({ name: 'get_weather', arguments: '{"city": "Oslo"}' });
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Oslo' });
    // Streamed: the SDK's own accumulation gives the same message.
    eng.scripts.push(script(CALL));
    const stream = client.chat.completions.stream({ ...req, stream: true });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
    expect((final.choices[0]!.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function).toEqual({ name: 'get_weather', arguments: '{"city": "Oslo"}' });
    expect(final.choices[0]!.message.content).toBe('I will look it up.\n\n');
    // The history with the call and its result is accepted and rendered by the template.
    eng.scripts.push(script('It is 3 degrees in Oslo.'));
    const next = await client.chat.completions.create({
      ...req,
      messages: [...req.messages, c.message as OpenAI.ChatCompletionAssistantMessageParam, { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 3}' }],
    });
    expect(next.choices[0]!.message.content).toBe('It is 3 degrees in Oslo.');
    expect(next.choices[0]!.finish_reason).toBe('stop');
  });

  it('max_tokens after </function> but before </tool_call>: a complete call (tool_calls / tool_use); cut inside the function: text (length / max_tokens)', async () => {
    const complete = s.ctx.model.tokenizer.encode('<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>');
    const cut = s.ctx.model.tokenizer.encode('<tool_call>\n<function=get_weather>\n<parameter=city>\nOs');
    const req = { model: 'embedded-tiny-v2', messages: [{ role: 'user' as const, content: 'What is the weather in Oslo?' }], tools };
    eng.scripts.push(complete);
    const r = await client.chat.completions.create({ ...req, max_tokens: complete.length });
    expect(r.usage!.completion_tokens).toBe(complete.length);
    expect(r.choices[0]!.finish_reason).toBe('tool_calls');
    expect((r.choices[0]!.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function).toEqual({ name: 'get_weather', arguments: '{"city": "Oslo"}' });
    eng.scripts.push(complete);
    const streamed = await client.chat.completions.stream({ ...req, max_tokens: complete.length, stream: true }).finalChatCompletion();
    expect(streamed.choices[0]!.finish_reason).toBe('tool_calls');
    expect(streamed.choices[0]!.message.tool_calls).toHaveLength(1);
    eng.scripts.push(cut);
    const t = await client.chat.completions.create({ ...req, max_tokens: cut.length });
    expect(t.choices[0]!.finish_reason).toBe('length');
    expect(t.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(t.choices[0]!.message.content).toBe('<tool_call>\n<function=get_weather>\n<parameter=city>\nOs');
    const a = anthropic(s);
    const areq = {
      model: 'embedded-tiny-v2', messages: [{ role: 'user' as const, content: 'Weather in Oslo?' }],
      tools: [{ name: 'get_weather', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } } }],
    };
    eng.scripts.push(complete);
    const m = await a.messages.create({ ...areq, max_tokens: complete.length });
    expect(m.stop_reason).toBe('tool_use');
    expect(m.content).toMatchObject([{ type: 'tool_use', name: 'get_weather', input: { city: 'Oslo' } }]);
    eng.scripts.push(cut);
    const mc = await a.messages.create({ ...areq, max_tokens: cut.length });
    expect(mc.stop_reason).toBe('max_tokens');
    expect(mc.content.map((b) => b.type)).toEqual(['text']);
  });

  it('Anthropic: tool_use blocks (stop_reason tool_use), streamed as input_json_delta', async () => {
    const a = anthropic(s);
    const req = {
      model: 'embedded-tiny-v2', max_tokens: 200, messages: [{ role: 'user' as const, content: 'Weather in Oslo?' }],
      tools: [{ name: 'get_weather', description: 'Current weather of a city', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } } }],
    };
    eng.scripts.push(script(CALL));
    const m = await a.messages.create(req);
    expect(m.stop_reason).toBe('tool_use');
    expect(m.content.map((b) => b.type)).toEqual(['text', 'tool_use']);
    const use = m.content[1] as Anthropic.ToolUseBlock;
    expect(use.name).toBe('get_weather');
    expect(use.input).toEqual({ city: 'Oslo' });
    expect(use.id).toMatch(/^toolu_/);
    eng.scripts.push(script(CALL));
    const final = await a.messages.stream(req).finalMessage();
    expect(final.stop_reason).toBe('tool_use');
    expect((final.content[1] as Anthropic.ToolUseBlock).input).toEqual({ city: 'Oslo' });
    // tool_result in the history.
    eng.scripts.push(script('Cold.'));
    const next = await a.messages.create({
      ...req,
      messages: [...req.messages, { role: 'assistant', content: m.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp_c": 3}' }] }],
    });
    expect(next.content).toEqual([{ type: 'text', text: 'Cold.' }]);
    expect(next.stop_reason).toBe('end_turn');
  });

  it('thinking: <think> text is reasoning_content (OpenAI) / a thinking block (Anthropic), apart from the answer', async () => {
    const out = 'The user greets me.\n</think>\n\nHello!';
    const req = { model: 'embedded-tiny-v2', messages: [{ role: 'user' as const, content: 'Hi' }], chat_template_kwargs: { enable_thinking: true } };
    eng.scripts.push(script(out));
    const r = await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsNonStreaming>(req));
    const msg = r.choices[0]!.message as Json;
    expect(msg.reasoning_content).toBe('The user greets me.\n');
    expect(msg.content).toBe('Hello!');
    eng.scripts.push(script(out));
    let reasoning = '';
    let content = '';
    for await (const ch of await client.chat.completions.create(withExtras<OpenAI.ChatCompletionCreateParamsStreaming>({ ...req, stream: true }))) {
      const d = (ch.choices[0]?.delta ?? {}) as Json;
      reasoning += d.reasoning_content ?? '';
      content += d.content ?? '';
    }
    expect({ reasoning, content }).toEqual({ reasoning: 'The user greets me.\n', content: 'Hello!' });
    eng.scripts.push(script(out));
    const m = await anthropic(s).messages.create({ model: 'embedded-tiny-v2', max_tokens: 100, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'Hi' }] });
    expect(m.content.map((b) => b.type)).toEqual(['thinking', 'text']);
    expect((m.content[0] as Anthropic.ThinkingBlock).thinking).toBe('The user greets me.\n');
    expect((m.content[1] as Anthropic.TextBlock).text).toBe('Hello!');
  });

  it('completions logprobs: text_offset counts the characters before each token, a character split over tokens once', async () => {
    const byteId = (b: number) => {
      for (let id = 0; id < 256; id++) {
        const x = s.ctx.model.text.bytesOf(id);
        if (x.length === 1 && x[0] === b) return id;
      }
      throw new Error('no byte token');
    };
    // 'a', 'é' in two byte tokens, '😀' in four, then 'b' and 'cd' as whole tokens, then a lead byte
    // that the next token ('x') turns into U+FFFD: 'x' is after it.
    const whole = s.ctx.model.tokenizer.encode('b cd');
    const text = 'aé😀b cd\uFFFDx';
    const ids = [byteId(0x61), byteId(0xc3), byteId(0xa9), byteId(0xf0), byteId(0x9f), byteId(0x98), byteId(0x80), ...whole, byteId(0xc3), byteId(0x78)];
    expect(s.ctx.model.text.text(ids)).toBe(text);
    const chars = [...text]; // code points: Python's len, vLLM's unit
    const want = [0, 1, 1, 2, 2, 2, 2];
    let at = 3;
    for (const t of whole) {
      want.push(at);
      at += [...s.ctx.model.text.text([t])].length;
    }
    want.push(at, at + 1);
    const body = { prompt: 'x', max_tokens: ids.length, logprobs: 1 };
    eng.scripts.push(ids);
    const r = await (await post(s, '/v1/completions', body)).json() as Json;
    const c = r.choices[0] as Json;
    expect(c.text).toBe(text);
    expect(c.logprobs.text_offset).toEqual(want);
    expect(c.logprobs.text_offset.every((o: number) => o <= chars.length)).toBe(true);
    // A whole-character token's text is at its offset.
    c.logprobs.tokens.forEach((t: string, i: number) => {
      if (!t.includes('\uFFFD')) expect(chars.slice(want[i], want[i]! + [...t].length).join('')).toBe(t);
    });
    // Streamed: the same offsets, chunk by chunk.
    eng.scripts.push(ids);
    const events = await readSse(await post(s, '/v1/completions', { ...body, stream: true }));
    const offsets = events.slice(0, -1).flatMap((e) => ((JSON.parse(e.data) as Json).choices[0].logprobs?.text_offset as number[] | undefined) ?? []);
    expect(offsets).toEqual(want);
  });

  it('multi-byte characters split over tokens: every chunk is whole characters, streamed text = non-streamed', async () => {
    const text = 'Grüße 日本 😀!';
    // One byte-level token per byte: every character but the ASCII ones spans several tokens.
    const bytes = [...new TextEncoder().encode(text)];
    const byteId = (b: number) => {
      for (let id = 0; id < 256; id++) {
        const x = s.ctx.model.text.bytesOf(id);
        if (x.length === 1 && x[0] === b) return id;
      }
      throw new Error('no byte token');
    };
    const ids = [...bytes.map(byteId), 248046];
    eng.scripts.push(ids);
    const whole = await client.chat.completions.create({ model: 'embedded-tiny-v2', messages: [{ role: 'user', content: 'x' }] });
    expect(whole.choices[0]!.message.content).toBe(text);
    eng.scripts.push(ids);
    const res = await post(s, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], stream: true });
    const chunks = (await readSse(res)).slice(0, -1).map((e) => JSON.parse(e.data) as Json);
    const pieces = chunks.map((c) => (c.choices[0]?.delta?.content as string | undefined) ?? '');
    expect(pieces.join('')).toBe(text);
    for (const p of pieces) {
      expect(p.includes('\uFFFD')).toBe(false);
      expect(/[\uD800-\uDBFF]$/.test(p)).toBe(false);
    }
    // One chunk per step: as many token chunks as tokens (the held bytes give empty-content chunks).
    expect(chunks.filter((c) => c.choices[0]?.finish_reason === null)).toHaveLength(ids.length + 1); // + the role chunk
  });
});

describe('the positions the model was built for (max_position_embeddings 64)', () => {
  let fx: Fixture;
  beforeAll(async () => { fx = await synthFixture({ overrides: { maxPositionEmbeddings: 64 } }); }, 60_000);
  afterAll(() => cleanupAllFixtures());

  it('--max-seq past them: a usage error naming the flag and the maximum, before the engine loads (it served past them)', async () => {
    let loaded = false;
    const start = startTestServer({ modelDir: fx.dir, apiKey: null, maxSeq: 128, loadEngine: async () => { loaded = true; return new ScriptedEngine(); } });
    await expect(start).rejects.toThrow(UsageError);
    await expect(start).rejects.toThrow(
      `--max-seq 128 is more than the model's maximum of 64 positions (max_position_embeddings in ${path.join(fx.dir, 'config.json')}); give --max-seq 64 or less`);
    expect(loaded).toBe(false);
  });

  it('--max-seq not given: the model\'s maximum, in /v1/models; a request past it is a 400 naming the field', async () => {
    let maxSeq = 0;
    const s = await startTestServer({ modelDir: fx.dir, apiKey: null, maxSeq: null, loadEngine: async (opts) => { maxSeq = opts.maxSeq; return new ScriptedEngine(); } });
    try {
      expect(maxSeq).toBe(64);
      const models = (await (await fetch(`${s.url}/v1/models`)).json()) as Json;
      expect(models.data[0].max_model_len).toBe(64);
      const over = await fetch(`${s.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: promptIds(40, 3), max_tokens: 30 }),
      });
      expect(over.status).toBe(400);
      const b = (await over.json()) as Json;
      expect(b.error.param).toBe('max_tokens');
      expect(b.error.message).toMatch(/maximum context length \(--max-seq\) is 64 tokens, but the request needs 70 \(40 in the prompt, 30 for the output\)/);
      const fits = await fetch(`${s.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: promptIds(40, 3), max_tokens: 24 }),
      });
      expect(fits.status).toBe(200);
    } finally {
      await s.close();
    }
  });
});
