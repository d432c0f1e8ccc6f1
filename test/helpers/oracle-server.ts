// A small OpenAI-compatible server for `bench diagnose` tests that knows every right answer: the
// behaviour table's expected answers, the retrieval key (the only number in its prompt), each
// isolation prompt's code word. A "token" is a whitespace-separated word, usage counts them, and
// there is no /tokenize (so the retrieval check must size its prompt by usage.prompt_tokens).
// `fault` makes it misbehave in one chosen way.
import http from 'node:http';
import { BEHAVIOR_CHECKS } from '../../src/diagnose/checks.js';
import { listenLocal } from './local-http.js';

type Json = Record<string, any>;

export interface OracleServer {
  url: string;
  /** Requests received, by path. */
  hits: Map<string, number>;
  close(): Promise<void>;
}

export interface OracleOptions {
  /**
   * 'chat-500': every chat completion fails with HTTP 500. 'leak': the isolation answers carry the
   * previous request's code word. 'strict': vLLM's extra fields (chat_template_kwargs,
   * return_token_ids) are refused with a 400, as OpenAI's own API refuses unknown fields.
   */
  fault?: 'chat-500' | 'leak' | 'strict';
  maxModelLen?: number;
  /**
   * /tokenize and /detokenize in llama.cpp's server's shape: `{content}` -> `{tokens}` (one token per
   * code point), `{tokens}` -> `{content}`; vLLM's `{prompt}` gets an empty token list, as llama.cpp answers it.
   */
  llamaTokenize?: boolean;
}

const words = (s: string) => s.split(/\s+/).filter((w) => w.length > 0);

function answerFor(prompt: string, lastWord: { word: string | null }, fault: OracleOptions['fault']): { content: string | null; toolCalls: Json[] } {
  const check = BEHAVIOR_CHECKS.find((c) => c.prompt === prompt);
  if (check?.id === 'behavior-tool') {
    return { content: null, toolCalls: [{ id: 'call-oracle', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] };
  }
  if (check) {
    const right: Record<string, string> = {
      'behavior-json': '{"name": "Ada", "age": 37}', 'behavior-sort': '[-2, 0, 5, 8]', 'behavior-python': 'def is_even(n):\n    return n % 2 == 0',
    };
    return { content: right[check.id] ?? check.expected, toolCalls: [] };
  }
  const code = /Your code word is ([A-Z]+-[A-Z]+)\./.exec(prompt);
  if (code) {
    const own = code[1]!;
    const leaked = fault === 'leak' && lastWord.word !== null && lastWord.word !== own ? ` ${lastWord.word}` : '';
    lastWord.word = own;
    return { content: `${own}${leaked}`, toolCalls: [] };
  }
  const key = /\b\d{5}\b/.exec(prompt);
  if (key && prompt.includes('vault code')) return { content: key[0], toolCalls: [] };
  if (prompt.startsWith('Write the lowercase English alphabet')) return { content: 'a b c d e f g h i j k l m n o p q r s t u v w x y z', toolCalls: [] };
  return { content: 'The sea is calm tonight and the harbour lights shine on the water while the boats rest along the quay and the gulls sleep.', toolCalls: [] };
}

export async function startOracleServer(o: OracleOptions = {}): Promise<OracleServer> {
  const hits = new Map<string, number>();
  const lastWord = { word: null as string | null };
  const maxModelLen = o.maxModelLen ?? 32768;
  const srv = http.createServer((req, res) => {
    const url = (req.url ?? '').split('?')[0]!;
    hits.set(url, (hits.get(url) ?? 0) + 1);
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const error = (status: number, message: string) => send(status, { error: { message, type: 'invalid_request_error', param: null, code: null } });
    if (req.method === 'GET' && url === '/v1/models') {
      return send(200, { object: 'list', data: [{ id: 'oracle-1', object: 'model', created: 0, owned_by: 'test', max_model_len: maxModelLen }] });
    }
    if (o.llamaTokenize && req.method === 'POST' && (url === '/tokenize' || url === '/detokenize')) {
      let raw = '';
      req.on('data', (d: Buffer) => { raw += d.toString(); });
      req.on('end', () => {
        const body = JSON.parse(raw) as Json;
        if (url === '/tokenize') return send(200, { tokens: typeof body.content === 'string' ? [...body.content].map((c) => c.codePointAt(0)) : [] });
        return send(200, { content: String.fromCodePoint(...(body.tokens as number[])) });
      });
      return;
    }
    if (req.method !== 'POST' || url !== '/v1/chat/completions') return error(404, `no route ${req.method} ${url}`);
    let raw = '';
    req.on('data', (d: Buffer) => { raw += d.toString(); });
    req.on('end', () => {
      if (o.fault === 'chat-500') return error(500, 'the oracle is broken');
      let body: Json;
      try { body = JSON.parse(raw) as Json; } catch { return error(400, 'body is not valid JSON'); }
      if (!Array.isArray(body.messages)) return error(400, 'messages must be a list');
      for (const k of ['chat_template_kwargs', 'return_token_ids']) {
        if (o.fault === 'strict' && k in body) return error(400, `Unrecognized request argument supplied: ${k}`);
      }
      const prompt = String((body.messages as Json[]).at(-1)?.content ?? '');
      const promptTokens = words(prompt).length + 3 + (body.tools ? 40 : 0);
      const maxTokens = Number(body.max_tokens ?? 16);
      if (promptTokens + maxTokens > maxModelLen) return error(400, `prompt (${promptTokens}) + max_tokens (${maxTokens}) exceed ${maxModelLen}`);
      const a = answerFor(prompt, lastWord, o.fault);
      let toks = a.content === null ? [] : a.content.split(/(?<=\s)(?=\S)/); // words with their trailing space
      let finish = a.toolCalls.length ? 'tool_calls' : 'stop';
      if (toks.length > maxTokens) { toks = toks.slice(0, maxTokens); finish = 'length'; }
      let text = a.content === null ? null : toks.join('');
      const stops = Array.isArray(body.stop) ? body.stop as string[] : typeof body.stop === 'string' ? [body.stop] : [];
      for (const stop of stops) {
        const at = text?.indexOf(stop) ?? -1;
        if (text !== null && at >= 0) { text = text.slice(0, at); toks = words(text).map((w) => `${w} `); finish = 'stop'; }
      }
      const usage = { prompt_tokens: promptTokens, completion_tokens: a.toolCalls.length ? 8 : toks.length, total_tokens: promptTokens + (a.toolCalls.length ? 8 : toks.length) };
      if (body.stream !== true) {
        return send(200, {
          id: 'chatcmpl-oracle', object: 'chat.completion', created: 0, model: 'oracle-1',
          choices: [{ index: 0, message: { role: 'assistant', content: text, tool_calls: a.toolCalls }, finish_reason: finish }], usage,
        });
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (choices: Json[], u: Json | null = null) => res.write(`data: ${JSON.stringify({ id: 'chatcmpl-oracle', object: 'chat.completion.chunk', created: 0, model: 'oracle-1', choices, usage: u })}\n\n`);
      chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]);
      const pieces = text === null ? [] : text.split(/(?<=\s)(?=\S)/);
      let i = 0;
      const next = () => {
        if (res.destroyed) return;
        if (i < pieces.length) {
          chunk([{ index: 0, delta: { content: pieces[i++] }, finish_reason: null }]);
          setTimeout(next, 1);
          return;
        }
        chunk([{ index: 0, delta: {}, finish_reason: finish }]);
        if (body.stream_options?.include_usage === true) chunk([], usage);
        res.end('data: [DONE]\n\n');
      };
      setTimeout(next, 1);
    });
  });
  return { ...(await listenLocal(srv)), hits };
}
