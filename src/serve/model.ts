// What the routes know about the served model: its names, tokenizer, end-of-sequence ids, the
// engine's length limit and the checkpoint's sampling defaults (generation_config.json, as vLLM uses them).
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { LoadedTokenizer } from '../model/tokenizer.js';
import { TokenText } from './detokenizer.js';
import { ApiError } from './errors.js';
import { inlineEncoder, type PromptEncoder } from './tokenize-pool.js';

// Qwen3.5's chat end-of-turn and end-of-text ids (architecture doc §5), as `bench prompt` stops on them.
const QWEN_STOP_IDS = [248046, 248044];

export interface SamplingDefaults {
  temperature: number;
  topP: number;
  topK: number;
}

export interface ServeModel {
  /** The name clients use (--served-model-name; default the checkpoint directory's name). */
  name: string;
  /** The checkpoint directory (`root` in /v1/models). */
  root: string;
  tokenizer: LoadedTokenizer;
  /** Where prompt texts are tokenized (worker threads for long ones: tokenize-pool.ts). */
  encoder: PromptEncoder;
  text: TokenText;
  /** Ids that end generation unless ignore_eos. */
  eosTokenIds: number[];
  /** Longest sequence (prompt + output) the engine takes. */
  maxSeq: number;
  /** UTF-8 bytes of the longest token text (vocabulary or added token): a text of B bytes is at least B / this many tokens. */
  longestTokenBytes: number;
  /**
   * Whether a text's tokens up to a space between two ASCII letters are the first tokens of the whole
   * text (so a prefix's count is a lower bound): ByteLevel tokenizers (regex pre-tokenizers split
   * there) with no added token whose text holds a space.
   */
  prefixCountable: boolean;
  vocabSize: number;
  defaults: SamplingDefaults;
  /** Unix seconds the server started (`created`). */
  created: number;
}

/** generation_config.json's temperature / top_p / top_k when present; otherwise temperature 1, no top-p/top-k. */
export function samplingDefaults(dir: string): SamplingDefaults {
  const f = path.join(dir, 'generation_config.json');
  if (!existsSync(f)) return samplingDefaultsOf(undefined);
  try {
    return samplingDefaultsOf(JSON.parse(readFileSync(f, 'utf8')));
  } catch { /* a broken generation_config.json only loses its defaults */ }
  return samplingDefaultsOf(undefined);
}

/** A generation config object's temperature / top_p / top_k (anything else: temperature 1, no top-p/top-k). */
export function samplingDefaultsOf(config: unknown): SamplingDefaults {
  const d: SamplingDefaults = { temperature: 1, topP: 1, topK: 0 };
  if (typeof config !== 'object' || config === null) return d;
  const g = config as { temperature?: unknown; top_p?: unknown; top_k?: unknown; do_sample?: unknown };
  if (g.do_sample === false) return { temperature: 0, topP: 1, topK: 0 };
  if (typeof g.temperature === 'number' && g.temperature >= 0) d.temperature = g.temperature;
  if (typeof g.top_p === 'number' && g.top_p > 0 && g.top_p <= 1) d.topP = g.top_p;
  if (typeof g.top_k === 'number' && Number.isInteger(g.top_k) && g.top_k >= 0) d.topK = g.top_k;
  return d;
}

/** What the prompt-length guard needs to know of the tokenizer (one pass over the vocabulary, at start). */
export function tokenLengthFacts(tok: LoadedTokenizer): { longestTokenBytes: number; prefixCountable: boolean } {
  let longest = 1;
  for (let id = 0; id < tok.vocabSize; id++) {
    const t = tok.idToToken(id);
    // A token string's UTF-8 length bounds the bytes it stands for (a byte-level symbol is one byte, '▁' one space).
    if (t !== undefined) longest = Math.max(longest, Buffer.byteLength(t, 'utf8'));
  }
  const spaced = [...tok.addedTokenIds].some((id) => (tok.idToToken(id) ?? '').includes(' '));
  return { longestTokenBytes: longest, prefixCountable: tok.byteLevelDecoder && !spaced };
}

export function makeServeModel(opts: {
  name: string; root: string; tokenizer: LoadedTokenizer; configEos: number; maxSeq: number; vocabSize: number;
  /** The model's generation config when it is not a generation_config.json under `root` (synthetic weights). */
  generationConfig?: Record<string, unknown>;
  /** Where prompt texts are tokenized; default: all on the JS thread. */
  encoder?: PromptEncoder;
}): ServeModel {
  return {
    name: opts.name,
    root: opts.root,
    tokenizer: opts.tokenizer,
    encoder: opts.encoder ?? inlineEncoder(opts.tokenizer),
    text: new TokenText(opts.tokenizer),
    eosTokenIds: [...new Set([...QWEN_STOP_IDS, opts.configEos, ...opts.tokenizer.eosTokenIds])],
    maxSeq: opts.maxSeq,
    ...tokenLengthFacts(opts.tokenizer),
    vocabSize: opts.vocabSize,
    defaults: opts.generationConfig !== undefined ? samplingDefaultsOf(opts.generationConfig) : samplingDefaults(opts.root),
    created: Math.floor(Date.now() / 1000),
  };
}

/** The `model` field: absent/empty = the served model; its name or its root; anything else is a 404. */
export function checkModel(m: ServeModel, requested: unknown): void {
  if (requested === undefined || requested === null || requested === '') return;
  if (requested === m.name || requested === m.root) return;
  throw new ApiError(404, `The model \`${String(requested)}\` does not exist (this server serves \`${m.name}\`).`, 'model_not_found', 'model');
}
