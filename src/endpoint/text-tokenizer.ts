// The tokenizer an endpoint benchmark sizes its prompts with and counts streamed chunks with: a local
// tokenizer directory (--tokenizer DIR), or the server's own /tokenize and /detokenize (vLLM's and
// our serve's shape: {prompt} -> {tokens}; llama.cpp's: {content} -> {tokens}). Either counts the
// text's own tokens, never special ones: a BOS the server adds to every prompt is measured once, as
// part of the prompt overhead (connect.ts), and a streamed chunk's text has none.
import { loadTokenizer } from '../model/tokenizer.js';
import { promptVocab } from '../bench/prompts.js';
import { HttpFailure, type HttpPool, type RequestLimits } from './http-pool.js';
import { errorText } from './completion-stream.js';

export interface TextTokenizer {
  /** What it is, for the header and the report: `--tokenizer DIR` or the server's /tokenize. */
  readonly source: string;
  /** Exclusive bound of the token ids prompts are drawn from. */
  readonly vocab: number;
  encode(text: string): Promise<number[]>;
  decode(ids: readonly number[]): Promise<string>;
}

/**
 * Prompt ids drawn from a server's tokenizer whose vocabulary size it does not say: every tokenizer a
 * served LLM has holds at least 32000 ids (Llama 2's is the smallest in common use).
 */
export const REMOTE_PROMPT_VOCAB = 32000;

export async function localTokenizer(dir: string): Promise<TextTokenizer> {
  const tok = await loadTokenizer(dir);
  return {
    source: `--tokenizer ${dir}`,
    vocab: promptVocab(tok.vocabSize),
    encode: async (text) => tok.encode(text),
    decode: async (ids) => tok.decode(ids, { skipSpecialTokens: true }),
  };
}

type Shape = 'vllm' | 'llamacpp';

/**
 * A /tokenize request body for `text`, without special tokens: vLLM's `add_special_tokens` defaults to
 * true for a prompt (a Llama-family model's BOS on every count: one token too many on every chunk);
 * llama.cpp's `add_special` defaults to false, sent anyway.
 */
export function tokenizeBody(shape: Shape, model: string, text: string): Record<string, unknown> {
  return shape === 'vllm' ? { model, prompt: text, add_special_tokens: false } : { content: text, add_special: false };
}

const isIdList = (v: unknown): v is number[] => Array.isArray(v) && v.every((x) => Number.isInteger(x));

/**
 * Why the server's tokenizer cannot be used: `absent` (no usable /tokenize or /detokenize here: a 404,
 * a request shape it refuses, an answer without ids; --tokenizer DIR is needed) or `failed` (the server
 * has them but they failed: a 5xx or another error status, no answer in time, a broken response).
 */
export type TokenizerUnavailable = 'absent' | 'failed';

/** Statuses that say the endpoint or this request shape is not offered, rather than that it failed. */
const NOT_OFFERED = new Set([400, 404, 405, 422, 501]);

interface Attempt {
  ok: boolean;
  /** Null when ok. */
  kind: TokenizerUnavailable | null;
  why: string;
  /** No answer at all (timeout, network): trying another shape would wait as long again. */
  noAnswer: boolean;
}

async function attempt(pool: HttpPool, path: string, body: unknown, limits: RequestLimits, usable: (json: unknown) => boolean): Promise<Attempt> {
  try {
    const r = await pool.json('POST', path, body, limits);
    if (r.status === 200 && usable(r.json)) return { ok: true, kind: null, why: '', noAnswer: false };
    if (r.status === 200) return { ok: false, kind: 'absent', why: `POST ${path} answered HTTP 200 without what it should hold: ${r.text.slice(0, 120)}`, noAnswer: false };
    return { ok: false, kind: NOT_OFFERED.has(r.status) ? 'absent' : 'failed', why: `POST ${path} answered HTTP ${r.status}: ${errorText(r.text, r.json)}`, noAnswer: false };
  } catch (err) {
    const kind = err instanceof HttpFailure ? err.kind : 'network';
    return { ok: false, kind: 'failed', why: err instanceof Error ? err.message : String(err), noAnswer: kind === 'timeout' || kind === 'network' };
  }
}

/**
 * The server's tokenizer when it has working /tokenize and /detokenize endpoints (tried in vLLM's
 * shape, then llama.cpp's); otherwise null with why and whether they are absent (a usage error asking
 * for --tokenizer) or failed (the server's failure, which --tokenizer DIR avoids).
 */
export async function serverTokenizer(
  pool: HttpPool, model: string, limits: RequestLimits,
): Promise<
  | { tok: TextTokenizer; why: ''; unavailable: null; route: null }
  | { tok: null; why: string; unavailable: TokenizerUnavailable; route: '/tokenize' | '/detokenize' }
> {
  const probe = 'Hello world';
  let shape: Shape | null = null;
  const misses: Attempt[] = [];
  const hasIds = (json: unknown) => {
    const tokens = (json as { tokens?: unknown } | null)?.tokens;
    return isIdList(tokens) && tokens.length > 0;
  };
  for (const s of ['vllm', 'llamacpp'] as const) {
    const a = await attempt(pool, '/tokenize', tokenizeBody(s, model, probe), limits, hasIds);
    if (a.ok) { shape = s; break; }
    misses.push(a);
    if (a.noAnswer) break;
  }
  if (shape === null) {
    // A failure outranks a refusal: a server whose /tokenize answers 500 to one shape and 422 to the other is broken, not without one.
    const worst = misses.find((m) => m.kind === 'failed') ?? misses[0]!;
    return { tok: null, why: worst.why, unavailable: worst.kind!, route: '/tokenize' };
  }

  const fail = (what: string, status: number, text: string) =>
    new Error(`${what}: HTTP ${status}${text ? ` ${text.slice(0, 200)}` : ''}`);
  const s = shape;
  const detokenizeBody = (ids: readonly number[]) => (s === 'vllm' ? { model, tokens: ids } : { tokens: ids });
  const detokenized = (json: unknown): unknown => {
    const j = json as { prompt?: unknown; content?: unknown } | null;
    return s === 'vllm' ? j?.prompt : j?.content;
  };
  const tok: TextTokenizer = {
    source: `the server's /tokenize (${s === 'vllm' ? 'vLLM shape' : 'llama.cpp shape'})`,
    vocab: REMOTE_PROMPT_VOCAB,
    async encode(text) {
      const r = await pool.json('POST', '/tokenize', tokenizeBody(s, model, text), limits);
      const tokens = (r.json as { tokens?: unknown } | null)?.tokens;
      if (r.status !== 200 || !isIdList(tokens)) throw fail('POST /tokenize', r.status, r.text);
      return tokens;
    },
    async decode(ids) {
      const r = await pool.json('POST', '/detokenize', detokenizeBody(ids), limits);
      const text = detokenized(r.json);
      if (r.status !== 200 || typeof text !== 'string') throw fail('POST /detokenize', r.status, r.text);
      return text;
    },
  };
  // /detokenize must work too (prompts are built from ids).
  const d = await attempt(pool, '/detokenize', detokenizeBody([1, 2, 3]), limits, (json) => typeof detokenized(json) === 'string');
  if (!d.ok) return { tok: null, why: d.why, unavailable: d.kind!, route: '/detokenize' };
  return { tok, why: '', unavailable: null, route: null };
}
