// Checks of the tokenizer files (tokenizer.json, tokenizer_config.json) before they reach
// @huggingface/tokenizers, which trusts its input: wrong types there surface as TypeErrors deep
// inside the library, or as silent misbehaviour, instead of an error naming the file and key.

import { isJsonObject, preview } from '../util/json.js';
import { CheckpointError } from './types.js';

/** Largest token id accepted (the engine takes token ids as 32-bit signed integers). */
export const MAX_TOKEN_ID = 2 ** 31 - 1;

export function isTokenId(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_TOKEN_ID;
}

export function tokenContent(t: unknown): string | undefined {
  if (typeof t === 'string') return t;
  if (typeof t === 'object' && t !== null && typeof (t as { content?: unknown }).content === 'string') return (t as { content: string }).content;
  return undefined;
}

/**
 * Checks the parts of tokenizer.json that the tokenizer library trusts: a BPE model whose vocab
 * maps strings to token ids and whose merges name vocabulary tokens, well-formed added tokens, and
 * pipeline stages (null, or objects with a "type", settings of the right types and well-formed
 * patterns and step lists). Returns the largest token id + 1.
 */
export function validateTokenizerJson(tok: Record<string, unknown>, file: string): number {
  const model = tok.model;
  if (!isJsonObject(model) || !isJsonObject(model.vocab)) throw new CheckpointError(`${file}: tokenizer.json has no model.vocab`);
  if (model.type !== undefined && model.type !== 'BPE') {
    throw new CheckpointError(`${file}: model.type is ${preview(model.type)}; only BPE tokenizers (as Qwen3.5 ships) are supported`);
  }
  checkFields(model, 'model', file);
  let size = 0;
  const vocabTokens = Object.keys(model.vocab); // (faster than Object.entries on a 248k-entry vocabulary)
  for (let i = 0; i < vocabTokens.length; i++) {
    const id = model.vocab[vocabTokens[i]!];
    if (!isTokenId(id)) throw new CheckpointError(`${file}: model.vocab entry ${preview(vocabTokens[i])} has id ${preview(id)}; ids are integers 0..${MAX_TOKEN_ID}`);
    if (id + 1 > size) size = id + 1;
  }
  if (size === 0) throw new CheckpointError(`${file}: model.vocab is empty`);
  const vocab = model.vocab;
  const merges = model.merges;
  if (merges === undefined) throw new CheckpointError(`${file}: model.merges is missing`);
  if (!Array.isArray(merges)) throw new CheckpointError(`${file}: model.merges must be an array (got ${preview(merges)})`);
  // Both HF formats exist ("a b" strings, ["a", "b"] pairs); the file uses one, so judge each merge by the majority.
  const pairs = merges.filter((m) => Array.isArray(m)).length * 2 > merges.length;
  for (let i = 0; i < merges.length; i++) {
    const m: unknown = merges[i];
    let parts: [string, string] | undefined;
    if (pairs && Array.isArray(m) && m.length === 2 && typeof m[0] === 'string' && typeof m[1] === 'string') parts = [m[0], m[1]];
    else if (!pairs && typeof m === 'string') {
      const sp = m.indexOf(' ');
      if (sp > 0 && sp < m.length - 1 && m.indexOf(' ', sp + 1) < 0) parts = [m.slice(0, sp), m.slice(sp + 1)];
    }
    if (!parts) {
      throw new CheckpointError(`${file}: model.merges[${i}] is ${preview(m)}; expected ${pairs ? 'a pair of token strings' : 'two tokens separated by one space'}, like the other merges`);
    }
    for (const t of [parts[0], parts[1], parts[0] + parts[1]]) {
      if (!Object.hasOwn(vocab, t)) throw new CheckpointError(`${file}: model.merges[${i}] (${preview(m)}) uses token ${preview(t)}, which is not in model.vocab`);
    }
  }
  const added = tok.added_tokens ?? [];
  if (!Array.isArray(added)) throw new CheckpointError(`${file}: added_tokens must be an array (got ${preview(added)})`);
  added.forEach((t: unknown, i) => {
    if (!isJsonObject(t) || !isTokenId(t.id) || typeof t.content !== 'string' || t.content.length === 0) {
      throw new CheckpointError(`${file}: added_tokens[${i}] is ${preview(t)}; expected {"id": <token id>, "content": <non-empty string>, ...}`);
    }
    for (const k of ['special', 'normalized', 'lstrip', 'rstrip', 'single_word']) {
      if (t[k] !== undefined && typeof t[k] !== 'boolean') throw new CheckpointError(`${file}: added_tokens[${i}].${k} must be true or false (got ${preview(t[k])})`);
    }
    if (t.id + 1 > size) size = t.id + 1;
  });
  for (const k of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder']) {
    const stage = tok[k];
    if (stage !== undefined && stage !== null) validateStage(stage, k, file, 0);
  }
  return size;
}

/** Types of the scalar settings the tokenizer library reads from the model and the pipeline stages (null: its default). */
const FIELD_TYPES: Readonly<Record<string, 'boolean' | 'string' | 'integer'>> = {
  add_prefix_space: 'boolean', byte_fallback: 'boolean', clean_text: 'boolean', cleanup: 'boolean', fuse_unk: 'boolean',
  handle_chinese_chars: 'boolean', ignore_merges: 'boolean', individual_digits: 'boolean', invert: 'boolean', lowercase: 'boolean',
  strip_accents: 'boolean', strip_left: 'boolean', strip_right: 'boolean', trim_offsets: 'boolean', use_regex: 'boolean',
  behavior: 'string', content: 'string', continuing_subword_prefix: 'string', continuing_subword_suffix: 'string',
  end_of_word_suffix: 'string', prefix: 'string', prepend: 'string', prepend_scheme: 'string', replacement: 'string',
  suffix: 'string', unk_token: 'string', word_delimiter_token: 'string',
  length: 'integer', max_input_chars_per_word: 'integer', start: 'integer', stop: 'integer',
};

function checkFields(obj: Record<string, unknown>, where: string, file: string): void {
  for (const [k, want] of Object.entries(FIELD_TYPES)) {
    const v = obj[k];
    if (v === undefined || v === null) continue;
    const ok = want === 'integer' ? Number.isSafeInteger(v) && (v as number) >= 0 : typeof v === want;
    if (!ok) throw new CheckpointError(`${file}: ${where}.${k} must be ${want === 'integer' ? 'a non-negative integer' : `a ${want}`} (got ${preview(v)})`);
  }
}

/** Keys under which a Sequence stage lists its steps. */
const SEQUENCE_KEYS = ['normalizers', 'pretokenizers', 'processors', 'decoders'];
const MAX_STAGE_DEPTH = 8;

/** A pipeline stage: an object with a string "type"; the step lists of Sequence stages likewise. */
function validateStage(stage: unknown, where: string, file: string, depth: number): void {
  if (!isJsonObject(stage) || typeof stage.type !== 'string') {
    throw new CheckpointError(`${file}: ${where} must be ${depth === 0 ? 'null or ' : ''}an object with a "type" (got ${preview(stage)})`);
  }
  checkFields(stage, where, file);
  if (stage.pattern !== undefined) {
    const pat = stage.pattern;
    const ok = isJsonObject(pat) && (typeof pat.Regex === 'string') !== (typeof pat.String === 'string');
    if (!ok) throw new CheckpointError(`${file}: ${where}.pattern must be {"Regex": <string>} or {"String": <string>} (got ${preview(pat)})`);
  }
  for (const k of SEQUENCE_KEYS) {
    const steps = stage[k];
    if (steps === undefined) continue;
    if (!Array.isArray(steps)) throw new CheckpointError(`${file}: ${where}.${k} must be an array of stages (got ${preview(steps)})`);
    if (depth >= MAX_STAGE_DEPTH) throw new CheckpointError(`${file}: ${where}.${k} is nested more than ${MAX_STAGE_DEPTH} levels deep`);
    steps.forEach((s: unknown, i) => validateStage(s, `${where}.${k}[${i}]`, file, depth + 1));
  }
}

/** Checks the tokenizer_config.json keys the tokenizer and the chat template read. */
export function validateTokenizerConfig(cfg: Record<string, unknown>, file: string): void {
  for (const k of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
    const v = cfg[k];
    if (v !== undefined && v !== null && tokenContent(v) === undefined) {
      throw new CheckpointError(`${file}: ${k} must be a token string or {"content": <string>} (got ${preview(v)})`);
    }
  }
  const extra = cfg.additional_special_tokens;
  if (extra !== undefined && extra !== null && (!Array.isArray(extra) || !extra.every((t) => typeof t === 'string'))) {
    throw new CheckpointError(`${file}: additional_special_tokens must be an array of token strings (got ${preview(extra)})`);
  }
  for (const k of ['clean_up_tokenization_spaces', 'remove_space', 'do_lowercase_and_remove_accent']) {
    const v = cfg[k];
    if (v !== undefined && v !== null && typeof v !== 'boolean') throw new CheckpointError(`${file}: ${k} must be true or false (got ${preview(v)})`);
  }
  const ct = cfg.chat_template;
  if (ct !== undefined && ct !== null && typeof ct !== 'string') {
    const ok = Array.isArray(ct) && ct.length > 0 &&
      ct.every((t) => isJsonObject(t) && typeof t.template === 'string' && (t.name === undefined || typeof t.name === 'string'));
    if (!ok) throw new CheckpointError(`${file}: chat_template must be a string or a list of {"name", "template"} (got ${preview(ct)})`);
  }
}
