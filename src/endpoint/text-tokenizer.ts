// The tokenizer an endpoint benchmark sizes its prompts with and counts streamed chunks with: a local
// tokenizer directory (--tokenizer DIR), or the server's own /tokenize and /detokenize (vLLM's and
// our serve's shape: {prompt} -> {tokens}; llama.cpp's: {content} -> {tokens}). Either counts the
// text's own tokens, never special ones: a BOS the server adds to every prompt is measured once, as
// part of the prompt overhead (connect.ts), and a streamed chunk's text has none.
import { loadTokenizer } from '../model/tokenizer.js';
import { promptVocab } from '../bench/prompts.js';
import type { HttpPool, RequestLimits } from './http-pool.js';
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
 * The server's tokenizer when it has working /tokenize and /detokenize endpoints (tried in vLLM's
 * shape, then llama.cpp's); otherwise null with why (for the usage error asking for --tokenizer).
 */
export async function serverTokenizer(pool: HttpPool, model: string, limits: RequestLimits): Promise<{ tok: TextTokenizer | null; why: string }> {
  const probe = 'Hello world';
  let shape: Shape | null = null;
  let why = '';
  const tryShape = async (s: Shape): Promise<boolean> => {
    const body = tokenizeBody(s, model, probe);
    try {
      const r = await pool.json('POST', '/tokenize', body, limits);
      const tokens = (r.json as { tokens?: unknown } | null)?.tokens;
      if (r.status === 200 && isIdList(tokens) && tokens.length > 0) return true;
      why ||= `POST /tokenize answered HTTP ${r.status}${r.status !== 200 ? `: ${errorText(r.text, r.json)}` : ''}`;
    } catch (err) {
      why ||= `POST /tokenize failed (${err instanceof Error ? err.message : String(err)})`;
    }
    return false;
  };
  if (await tryShape('vllm')) shape = 'vllm';
  else if (await tryShape('llamacpp')) shape = 'llamacpp';
  if (shape === null) return { tok: null, why };

  const fail = (what: string, status: number, text: string) =>
    new Error(`${what}: HTTP ${status}${text ? ` ${text.slice(0, 200)}` : ''}`);
  const s = shape;
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
      const r = await pool.json('POST', '/detokenize', s === 'vllm' ? { model, tokens: ids } : { tokens: ids }, limits);
      const j = r.json as { prompt?: unknown; content?: unknown } | null;
      const text = s === 'vllm' ? j?.prompt : j?.content;
      if (r.status !== 200 || typeof text !== 'string') throw fail('POST /detokenize', r.status, r.text);
      return text;
    },
  };
  // /detokenize must work too (prompts are built from ids).
  try {
    await tok.decode([1, 2, 3]);
  } catch (err) {
    return { tok: null, why: err instanceof Error ? err.message : String(err) };
  }
  return { tok, why: '' };
}
