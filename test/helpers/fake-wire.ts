// A small OpenAI-compatible server for the endpoint tests whose every answer a test can replace with
// exactly the bytes it wants: a malformed SSE event, a usage field of the wrong type, a /tokenize that
// adds a BOS (as vLLM's does unless told `add_special_tokens: false`), a 5xx or a response that never
// comes, an oversized JSON body. The defaults are a well-behaved server with a word tokenizer (`wN` is
// token N, any other word token 7; /detokenize gives `wN` back). Nothing depends on timing.
import http from 'node:http';
import { listenLocal } from './local-http.js';

export const WIRE_MODEL = 'wire-model';
/** The BOS id the fake's tokenizer adds, where it adds one. */
export const BOS = 1;

type Json = Record<string, unknown>;

/** An answer: a status and body, no answer ever (`hang`), or `bytes` of a JSON string that never ends. */
export type Reply = { status: number; body: string | Json | unknown[] | null } | { hang: true } | { status: number; bytes: number };

export interface WireOptions {
  /** GET /v1/models (default: one model, WIRE_MODEL). */
  models?: Reply;
  /**
   * Where the fake's /tokenize adds a BOS: 'vllm' unless the body says `add_special_tokens: false` (vLLM's
   * default for a prompt), 'always' (a server that ignores the flag), 'never' (default). The server's own
   * prompt counts (usage.prompt_tokens) include one BOS unless 'never'.
   */
  bos?: 'vllm' | 'always' | 'never';
  /** /tokenize's request shape: vLLM's `{prompt}` (default) or llama.cpp's `{content}` (a `{prompt}` body gets `tokens: []`, as llama.cpp answers it). */
  shape?: 'vllm' | 'llamacpp';
  /** Replaces POST /tokenize's answer. */
  tokenize?: (body: Json) => Reply;
  /** Replaces POST /detokenize's answer. */
  detokenize?: (body: Json) => Reply;
  /** Tokens per content chunk of the default stream (default 1; no continuous usage, so the client counts them). */
  perChunk?: number;
  /** The default stream's usage chunk, given the prompt's and the output's token counts (undefined: none sent). */
  usage?: (promptTokens: number, n: number) => unknown;
  /**
   * The `data:` payloads of a streamed completion, given its body (default: wordStream(max_tokens)).
   * A payload is sent as one event; the stream ends after the last.
   */
  stream?: (body: Json) => string[];
  /** Answer stream: true with the non-streamed JSON body (a server that does not stream). */
  ignoreStream?: boolean;
}

export interface WireServer {
  url: string;
  /** Every request received: method, path and parsed body (null for none). */
  requests: { method: string; path: string; body: Json | null }[];
  close(): Promise<void>;
}

const words = (t: string) => t.split(/\s+/).filter((w) => w !== '');
const idOf = (w: string) => (/^w\d+$/.test(w) ? Number(w.slice(1)) : 7);

/**
 * A stream of `n` tokens, `per` to a chunk (chat's delta shape, or completions' text), then a finish
 * chunk, a usage chunk (`usage(n)`; omitted when it returns undefined) and [DONE].
 */
export function wordStream(n: number, o: { per?: number; chat?: boolean; usage?: (n: number) => unknown } = {}): string[] {
  const per = o.per ?? 1;
  const chat = o.chat ?? true;
  const choice = (text: string, finish: string | null) => (chat
    ? { index: 0, delta: text ? { content: text } : {}, finish_reason: finish }
    : { index: 0, text, finish_reason: finish });
  const out: string[] = [];
  for (let i = 0; i < n; i += per) {
    const k = Math.min(per, n - i);
    out.push(JSON.stringify({ choices: [choice(Array.from({ length: k }, (_x, j) => `w${100 + i + j} `).join(''), null)] }));
  }
  out.push(JSON.stringify({ choices: [choice('', 'length')] }));
  const u = (o.usage ?? ((m: number) => ({ prompt_tokens: 0, completion_tokens: m, total_tokens: m })))(n);
  if (u !== undefined) out.push(JSON.stringify({ choices: [], usage: u }));
  out.push('[DONE]');
  return out;
}

export async function startWireServer(o: WireOptions = {}): Promise<WireServer> {
  const bos = o.bos ?? 'never';
  const state: WireServer = { url: '', requests: [], close: async () => {} };
  const send = async (res: http.ServerResponse, r: Reply) => {
    if ('hang' in r) { res.flushHeaders(); return; } // headers only: a response that never completes
    if ('bytes' in r) {
      res.writeHead(r.status, { 'content-type': 'application/json' });
      res.write('{"x":"');
      const block = Buffer.alloc(1 << 20, 0x61);
      for (let sent = 0; sent < r.bytes && !res.destroyed; sent += block.length) {
        if (!res.write(block)) {
          await new Promise<void>((ok) => {
            const done = () => { res.off('drain', done); res.off('close', done); ok(); };
            res.on('drain', done);
            res.on('close', done);
          });
        }
      }
      if (!res.destroyed) res.end('"}');
      return;
    }
    const text = typeof r.body === 'string' ? r.body : JSON.stringify(r.body);
    res.writeHead(r.status, { 'content-type': typeof r.body === 'string' ? 'text/plain' : 'application/json' });
    res.end(text);
  };
  const server = http.createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => { raw += d; });
    req.on('end', () => {
      const body = raw ? JSON.parse(raw) as Json : null;
      const path = req.url ?? '';
      state.requests.push({ method: req.method ?? '', path, body });
      const b = body ?? {};
      if (path === '/v1/models') return void send(res, o.models ?? { status: 200, body: { object: 'list', data: [{ id: WIRE_MODEL, owned_by: 'wire', max_model_len: 4096 }] } });
      if (path === '/tokenize') {
        if (o.tokenize) return void send(res, o.tokenize(b));
        const shape = o.shape ?? 'vllm';
        const text = shape === 'vllm' ? b.prompt : b.content;
        if (typeof text !== 'string') return void send(res, { status: 200, body: { tokens: [] } });
        const addBos = bos === 'always' || (bos === 'vllm' && b.add_special_tokens !== false);
        const tokens = [...(addBos ? [BOS] : []), ...words(text).map(idOf)];
        return void send(res, { status: 200, body: { tokens, count: tokens.length } });
      }
      if (path === '/detokenize') {
        if (o.detokenize) return void send(res, o.detokenize(b));
        const text = (b.tokens as number[]).filter((t) => t !== BOS || bos === 'never').map((t) => `w${t}`).join(' ');
        return void send(res, { status: 200, body: (o.shape ?? 'vllm') === 'vllm' ? { prompt: text } : { content: text } });
      }
      const chat = path === '/v1/chat/completions';
      if (!chat && path !== '/v1/completions') return void send(res, { status: 404, body: { error: { message: `no route ${path}` } } });
      const text = chat ? String((b.messages as { content: string }[])[0]!.content) : String(b.prompt);
      const promptTokens = words(text).length + (bos === 'never' ? 0 : 1);
      if (b.stream !== true || o.ignoreStream) {
        return void send(res, { status: 200, body: { choices: [{ index: 0, text: 'w5', message: { role: 'assistant', content: 'w5' }, finish_reason: 'length' }],
          usage: { prompt_tokens: promptTokens, completion_tokens: 1, total_tokens: promptTokens + 1 } } });
      }
      const n = Number(b.max_tokens);
      const usage = o.usage ? (m: number) => o.usage!(promptTokens, m) : (m: number) => ({ prompt_tokens: promptTokens, completion_tokens: m, total_tokens: promptTokens + m });
      const events = o.stream ? o.stream(b) : wordStream(n, { chat, per: o.perChunk, usage });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const e of events) res.write(`data: ${e}\n\n`);
      res.end();
    });
  });
  Object.assign(state, await listenLocal(server));
  return state;
}
