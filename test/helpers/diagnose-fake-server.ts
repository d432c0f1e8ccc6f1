// A scriptable OpenAI-compatible server for `bench diagnose` tests: by default a well-behaved,
// deterministic one (greedy answers are a function of the prompt alone; "tokens" are words; usage is
// exact; streams are SSE with a role chunk, one chunk per token, a finish chunk, the usage chunk when
// asked and `data: [DONE]`; /tokenize and /detokenize one token per code point). A test's `override`
// sees every request, and may answer it with exactly the bytes it wants instead (a status and body,
// or a raw SSE body written at once): nothing in a test depends on timing or scheduling. Each request
// says how many times the same route and prompt were seen before (`seen`), so a test can answer a
// prompt differently the second time (the isolation check runs each prompt alone first, then under
// load) without looking at what else is in flight.
import http from 'node:http';
import { listenLocal } from './local-http.js';

type Json = Record<string, any>;

export interface FakeRequest {
  method: string;
  /** The URL path (no query). */
  path: string;
  /** The parsed JSON body (null when there was none or it was not JSON). */
  body: Json | null;
  raw: string;
  /** The prompt of a chat or completion request: the messages' contents joined ('' otherwise). */
  prompt: string;
  /** How many earlier requests had this path and prompt. */
  seen: number;
}

/** What the server sends: a JSON or text body with a status, or an SSE body of these events (`[DONE]` is not added). */
export type FakeReply =
  | { status?: number; json: unknown; headers?: Record<string, string> }
  | { status?: number; text: string; headers?: Record<string, string> }
  | { status?: number; sse: (Json | string | null)[]; headers?: Record<string, string> }
  /** A body of `bytes` bytes of 'a' (Content-Length sent when `declare` is set), for size caps. */
  | { status?: number; big: number; declare?: boolean };

export interface FakeOptions {
  /** Return a reply to answer the request yourself; undefined gives the default reply (which `dflt` builds). */
  override?: (req: FakeRequest, dflt: () => FakeReply) => FakeReply | undefined;
  model?: string;
  maxModelLen?: number;
}

export interface FakeServer {
  url: string;
  requests: FakeRequest[];
  close(): Promise<void>;
}

const VOCAB = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india', 'juliet', 'kilo', 'lima', 'mike',
  'november', 'oscar', 'papa', 'quebec', 'romeo', 'sierra', 'tango', 'uniform', 'victor', 'whiskey', 'xray', 'yankee', 'zulu'];

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619) >>> 0; }
  return h;
}

/** The default greedy answer to a prompt: `n` words ("tokens"), each with a leading space, a function of the prompt. */
export function fakeTokens(prompt: string, n: number): string[] {
  const h = hash(prompt);
  return Array.from({ length: n }, (_, i) => ` ${VOCAB[(h + i * 7) % VOCAB.length]}`);
}

export const promptOf = (body: Json | null): string => {
  if (!body) return '';
  if (Array.isArray(body.messages)) return (body.messages as Json[]).map((m) => (typeof m?.content === 'string' ? m.content : '')).join('');
  return typeof body.prompt === 'string' ? body.prompt : '';
};

/** A chat chunk with `delta` (and finish_reason). */
export const chunk = (delta: Json, finish: string | null = null, extra: Json = {}): Json =>
  ({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model: 'fake-1', choices: [{ index: 0, delta, finish_reason: finish }], ...extra });

/** The default reply to a chat completion request: greedy, max_tokens, stop, stream, include_usage. */
export function defaultChat(req: FakeRequest, model: string): FakeReply {
  const body = req.body;
  if (body === null) return { status: 400, json: { error: { message: 'body is not valid JSON', type: 'invalid_request_error' } } };
  if (!Array.isArray(body.messages)) return { status: 400, json: { error: { message: 'messages must be a list', type: 'invalid_request_error' } } };
  const n = Number(body.max_tokens ?? 16);
  const promptTokens = Array.from(req.prompt).length + 5;
  let toks = fakeTokens(req.prompt, n);
  let finish = 'length';
  const stops: string[] = Array.isArray(body.stop) ? body.stop : typeof body.stop === 'string' ? [body.stop] : [];
  for (const stop of stops) {
    const full = toks.join('');
    const at = full.indexOf(stop);
    if (at >= 0) {
      // Tokens wholly before the stop string, then the rest of the text up to it as one last piece.
      const kept: string[] = [];
      let len = 0;
      for (const t of toks) { if (len + t.length > at) break; kept.push(t); len += t.length; }
      if (at > len) kept.push(full.slice(len, at));
      toks = kept;
      finish = 'stop';
    }
  }
  const text = toks.join('');
  const usage = { prompt_tokens: promptTokens, completion_tokens: toks.length, total_tokens: promptTokens + toks.length };
  if (body.stream !== true) {
    return {
      json: {
        id: 'chatcmpl-fake', object: 'chat.completion', created: 0, model,
        choices: [{ index: 0, message: { role: 'assistant', content: text, tool_calls: [] }, finish_reason: finish }], usage,
      },
    };
  }
  const events: (Json | string)[] = [chunk({ role: 'assistant', content: '' })];
  for (const t of toks) events.push(chunk({ content: t }));
  events.push(chunk({}, finish));
  if (body.stream_options?.include_usage === true) events.push({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model, choices: [], usage });
  events.push('[DONE]');
  return { sse: events };
}

function defaultReply(req: FakeRequest, o: FakeOptions): FakeReply {
  const model = o.model ?? 'fake-1';
  if (req.method === 'GET' && req.path === '/v1/models') {
    return { json: { object: 'list', data: [{ id: model, object: 'model', owned_by: 'test', max_model_len: o.maxModelLen ?? 4096 }] } };
  }
  if (req.method === 'POST' && req.path === '/tokenize') {
    const b = req.body ?? {};
    const t = Array.isArray(b.messages) ? promptOf(b) : String(b.prompt ?? '');
    const tokens = Array.from(t).map((c) => c.codePointAt(0)!);
    return { json: { tokens, count: tokens.length + (Array.isArray(b.messages) ? 5 : 0), max_model_len: o.maxModelLen ?? 4096 } };
  }
  if (req.method === 'POST' && req.path === '/detokenize') {
    return { json: { prompt: String.fromCodePoint(...((req.body?.tokens ?? []) as number[])) } };
  }
  if (req.method === 'POST' && req.path === '/v1/chat/completions') return defaultChat(req, model);
  return { status: 404, json: { error: { message: `no route ${req.method} ${req.path}` } } };
}

export async function startDiagnoseFake(o: FakeOptions = {}): Promise<FakeServer> {
  const requests: FakeRequest[] = [];
  const counts = new Map<string, number>();
  const srv = http.createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => { raw += d; });
    req.on('end', () => {
      const path = (req.url ?? '').split('?')[0]!;
      let body: Json | null = null;
      try { body = raw ? JSON.parse(raw) as Json : null; } catch { body = null; }
      if (body !== null && (typeof body !== 'object' || Array.isArray(body))) body = null;
      const prompt = promptOf(body);
      const key = `${path}\u0000${prompt}`;
      const seen = counts.get(key) ?? 0;
      counts.set(key, seen + 1);
      const fr: FakeRequest = { method: req.method ?? 'GET', path, body, raw, prompt, seen };
      requests.push(fr);
      const reply = o.override?.(fr, () => defaultReply(fr, o)) ?? defaultReply(fr, o);
      const status = reply.status ?? 200;
      if ('big' in reply) {
        res.writeHead(status, { 'content-type': 'application/json', ...(reply.declare ? { 'content-length': String(reply.big) } : {}) });
        const block = Buffer.alloc(64 * 1024, 0x61);
        let left = reply.big;
        const pump = () => {
          while (left > 0 && !res.destroyed) {
            const n = Math.min(left, block.length);
            left -= n;
            if (!res.write(n === block.length ? block : block.subarray(0, n))) { res.once('drain', pump); return; }
          }
          if (!res.destroyed) res.end();
        };
        res.on('error', () => {});
        pump();
        return;
      }
      if ('sse' in reply) {
        res.writeHead(status, { 'content-type': 'text/event-stream', ...(reply.headers ?? {}) });
        res.end(reply.sse.map((e) => `data: ${typeof e === 'string' ? e : JSON.stringify(e)}\n\n`).join(''));
        return;
      }
      if ('json' in reply) {
        res.writeHead(status, { 'content-type': 'application/json', ...(reply.headers ?? {}) });
        res.end(JSON.stringify(reply.json));
        return;
      }
      res.writeHead(status, { 'content-type': 'text/plain', ...(reply.headers ?? {}) });
      res.end(reply.text);
    });
  });
  return { ...(await listenLocal(srv)), requests };
}
