// A small OpenAI-compatible server for the endpoint tests, written to send exactly what a test wants:
// a word tokenizer (one token per space-separated word; /tokenize, /detokenize, usage all count words),
// a chat template that adds TEMPLATE_TOKENS, and streams whose chunking, usage, early stops, errors and
// /metrics are chosen per server. Deterministic: nothing in it depends on timing.
import http from 'node:http';
import { listenLocal } from './local-http.js';

export const TEMPLATE_TOKENS = 3;
export const FAKE_MODEL = 'fake-model';

export interface FakeBehaviour {
  /** Tokens per content chunk (default 1). */
  tokensPerChunk?: number;
  /** Send usage at all (stream_options.include_usage honoured); default true. */
  usage?: boolean;
  /** Send continuous_usage_stats when asked (default true). */
  continuousUsage?: boolean;
  /** End with finish_reason stop after this many tokens. */
  stopAfter?: number;
  /** Streamed requests whose prompt has at least this many tokens get an HTTP 500. */
  failFromTokens?: number;
  /** Streamed requests get their headers and then nothing, ever (a hung server). */
  hang?: boolean;
  /** A stream's response is never ended after its data: [DONE] (the connection kept open). */
  keepOpenAfterDone?: boolean;
  /** /tokenize and /detokenize offered (default true). */
  tokenize?: boolean;
  /** /metrics: none, or vLLM's finished-request counter (default none). */
  metrics?: 'none' | 'vllm';
  /**
   * A connection that carried a streamed response is dropped, unanswered, when the next request arrives
   * on it: llama.cpp's server closes the connection after a stream while announcing keep-alive, and a
   * client learns so only when it reuses the connection.
   */
  closeAfterStream?: boolean;
  /** Prompt tokens a streamed request counts beyond the words (not the probe: a mismatch the sweep must report), default 0. */
  extraPromptTokens?: number;
}

export interface FakeServer {
  url: string;
  /** Streamed requests received, and the most in flight at once. */
  streamed: number;
  maxInFlight: number;
  bodies: Record<string, unknown>[];
  /** Requests dropped unanswered on a connection the server had "closed" (closeAfterStream). */
  dropped: number;
  /** The order requests arrived in: 'tokenize' (POST /tokenize) and 'stream' (a streamed completion). */
  arrivals: ('tokenize' | 'stream')[];
  close(): Promise<void>;
}

const words = (t: string) => t.split(/\s+/).filter((w) => w !== '');

export async function startFakeOpenAI(b: FakeBehaviour = {}): Promise<FakeServer> {
  const per = b.tokensPerChunk ?? 1;
  let successes = 0;
  let inFlight = 0;
  const state: FakeServer = { url: '', streamed: 0, maxInFlight: 0, bodies: [], arrivals: [], dropped: 0, close: async () => {} };
  const streamedOn = new WeakSet<object>();
  const server = http.createServer((req, res) => {
    if (b.closeAfterStream && streamedOn.has(req.socket)) {
      state.dropped++;
      req.socket.destroy();
      return;
    }
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => { raw += d; });
    req.on('end', () => {
      const json = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      const body = raw ? JSON.parse(raw) as Record<string, unknown> : {};
      if (req.method === 'GET' && req.url === '/v1/models') return json(200, { object: 'list', data: [{ id: FAKE_MODEL, owned_by: 'fake', max_model_len: 4096 }] });
      if (req.method === 'GET' && req.url === '/metrics') {
        if (b.metrics !== 'vllm') return json(404, { error: 'not found' });
        res.writeHead(200, { 'content-type': 'text/plain' });
        return res.end(`# TYPE vllm:request_success_total counter\nvllm:request_success_total{finished_reason="length",model_name="${FAKE_MODEL}"} ${successes}\n` +
          `vllm:request_success_total{finished_reason="stop",model_name="${FAKE_MODEL}"} 0\nvllm:num_requests_running{model_name="${FAKE_MODEL}"} ${inFlight}\n`);
      }
      if (req.url === '/tokenize' || req.url === '/detokenize') {
        if (b.tokenize === false) return json(404, { error: 'not found' });
        if (req.url === '/tokenize') state.arrivals.push('tokenize');
        if (req.url === '/tokenize') return json(200, { tokens: words(String(body.prompt ?? '')).map((w) => Number(w.slice(1)) || 7), count: 0 });
        return json(200, { prompt: (body.tokens as number[]).map((t) => `w${t}`).join(' ') });
      }
      const chat = req.url === '/v1/chat/completions';
      if (req.method !== 'POST' || (!chat && req.url !== '/v1/completions')) return json(404, { error: { message: 'no such route' } });
      const text = chat ? String((body.messages as { content: string }[])[0]!.content) : String(body.prompt);
      const promptTokens = words(text).length + (chat ? TEMPLATE_TOKENS : 0) + (body.stream === true ? b.extraPromptTokens ?? 0 : 0);
      const maxTokens = Number(body.max_tokens);
      if (body.stream !== true) {
        return json(200, { choices: [{ index: 0, text: 'x', message: { role: 'assistant', content: 'x' }, finish_reason: 'length' }],
          usage: { prompt_tokens: promptTokens, completion_tokens: 1, total_tokens: promptTokens + 1 } });
      }
      state.streamed++;
      state.bodies.push(body);
      state.arrivals.push('stream');
      if (b.failFromTokens !== undefined && promptTokens >= b.failFromTokens) return json(500, { error: { message: 'simulated server failure' } });
      if (b.hang) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.flushHeaders();
        return;
      }
      const opts = (body.stream_options ?? {}) as { include_usage?: boolean; continuous_usage_stats?: boolean };
      const usage = b.usage !== false && opts.include_usage === true;
      const continuous = usage && b.continuousUsage !== false && opts.continuous_usage_stats === true;
      const n = Math.min(maxTokens, b.stopAfter ?? maxTokens);
      inFlight++;
      state.maxInFlight = Math.max(state.maxInFlight, inFlight);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const send = (o: unknown) => res.write(`data: ${JSON.stringify(o)}\n\n`);
      const choice = (t: string, finish: string | null) => chat
        ? { index: 0, delta: t ? { content: t } : {}, finish_reason: finish }
        : { index: 0, text: t, finish_reason: finish };
      const u = (k: number) => ({ prompt_tokens: promptTokens, completion_tokens: k, total_tokens: promptTokens + k });
      let sent = 0;
      const step = () => {
        if (sent < n) {
          const k = Math.min(per, n - sent);
          sent += k;
          send({ id: 'x', choices: [choice(Array.from({ length: k }, () => 'tok').join(' ') + ' ', null)], ...(continuous ? { usage: u(sent) } : {}) });
          setImmediate(step);
          return;
        }
        send({ id: 'x', choices: [choice('', n < maxTokens ? 'stop' : 'length')], ...(continuous ? { usage: u(sent) } : {}) });
        if (usage) send({ id: 'x', choices: [], usage: u(sent) });
        res.write('data: [DONE]\n\n');
        if (!b.keepOpenAfterDone) res.end();
        streamedOn.add(req.socket);
        inFlight--;
        successes++;
      };
      // The role-only first chunk some servers send before any token (TTFT must not stop at it).
      send({ id: 'x', choices: [chat ? { index: 0, delta: { role: 'assistant' }, finish_reason: null } : { index: 0, text: '', finish_reason: null }] });
      setImmediate(step);
    });
  });
  Object.assign(state, await listenLocal(server));
  return state;
}
