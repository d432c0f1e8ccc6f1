// Tokenizer of a checkpoint directory: tokenizer.json (HF format) via @huggingface/tokenizers, chat
// template via @huggingface/jinja (from chat_template.jinja when present, else tokenizer_config.json).

import { isUtf8 } from 'node:buffer';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { firstInvalidUtf8, parseJsonBytes, preview } from '../util/json.js';
import { oneLine } from '../util/text.js';
import { isTokenId, tokenContent, validateTokenizerConfig, validateTokenizerJson } from './tokenizer-files.js';
import { CheckpointError } from './types.js';

export interface ChatMessage {
  role: string;
  content: string | Array<{ type: string; text?: string }> | null;
  /** Other message fields the template may read (assistant `tool_calls`, `reasoning_content`, tool `name`, ...). */
  [field: string]: unknown;
}

export interface ChatTemplateOptions {
  addGenerationPrompt: boolean;
  /** Passed to the template as `enable_thinking` when given; the template's default applies otherwise. */
  enableThinking?: boolean;
  /** Tool schemas (OpenAI layout), passed to the template as `tools` when given. */
  tools?: readonly unknown[];
  /** Further template variables (chat_template_kwargs); they cannot replace messages, tools or add_generation_prompt. */
  extra?: Record<string, unknown>;
}

export interface LoadedTokenizer {
  /** Token ids of `text`; special-token strings in the text (e.g. `<|im_start|>`) map to their ids. No BOS is added. */
  encode(text: string): number[];
  /** Text of `ids` (special tokens rendered as their strings unless skipSpecialTokens). */
  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string;
  /** Renders the chat template. Throws CheckpointError when the checkpoint ships no template. */
  applyChatTemplate(messages: readonly ChatMessage[], opts: ChatTemplateOptions): string;
  /** Ids that end generation: generation_config eos ids, tokenizer_config eos_token, config.json eos_token_id. Sorted, unique. */
  eosTokenIds: number[];
  /** Id of a token string (vocabulary or added token), or undefined. */
  tokenToId(token: string): number | undefined;
  /** Token string of an id, or undefined. */
  idToToken(id: number): string | undefined;
  /** Largest token id + 1 (BPE vocabulary plus added tokens). */
  vocabSize: number;
  /** Whether a chat template is available. */
  hasChatTemplate: boolean;
  /** Ids of the added tokens (their text is their content, not byte-level symbols). */
  addedTokenIds: ReadonlySet<number>;
  /** Ids of the added tokens marked special (skipped by decode with skipSpecialTokens). */
  specialTokenIds: ReadonlySet<number>;
  /** True when tokenizer.json's decoder is ByteLevel: a token's text is its vocabulary string mapped back to bytes. */
  byteLevelDecoder: boolean;
}

/** Sample text run through a freshly built tokenizer, so a broken pipeline fails at load, not mid-benchmark. */
const PROBE_TEXT = 'Hello world, 123!\n\tOver the river: caf\u00e9 \u6771\u4eac \ud83d\ude42';

function readJsonFile(file: string, what: string): Record<string, unknown> {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (err) {
    throw new CheckpointError(`${file}: cannot read ${what} (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  const parsed = parseJsonBytes(bytes);
  if (!parsed.ok) throw new CheckpointError(`${file}: ${what} is ${parsed.reason}`);
  const v = parsed.value;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new CheckpointError(`${file}: ${what} must be a JSON object`);
  return v as Record<string, unknown>;
}

/** A ByteLevel decoder, alone or as the only byte-changing step of a Sequence. */
function isByteLevel(decoder: unknown): boolean {
  if (typeof decoder !== 'object' || decoder === null) return false;
  const d = decoder as { type?: unknown; decoders?: unknown };
  if (d.type === 'ByteLevel') return true;
  return d.type === 'Sequence' && Array.isArray(d.decoders) && d.decoders.length === 1 && isByteLevel(d.decoders[0]);
}

/**
 * Loads the tokenizer of a checkpoint directory (async for API stability; the work is synchronous).
 * Missing or malformed tokenizer files -> CheckpointError naming the file (and the key at fault).
 */
export async function loadTokenizer(dir: string): Promise<LoadedTokenizer> {
  return buildTokenizer(readTokenizerParts(dir));
}

/** Whether a file name is one of tokenizerFilesOf's: a name the tokenizer's loader reads in a model directory. */
export function isTokenizerFileName(name: string): boolean {
  return Object.values(tokenizerFilesOf('.')).some((f) => path.basename(f) === name);
}

/** The files readTokenizerParts reads from a checkpoint directory (each one that exists), by role. */
export function tokenizerFilesOf(dir: string): { tokenizer: string; config: string; template: string; generation: string; model: string } {
  const absDir = path.resolve(dir);
  return {
    tokenizer: path.join(absDir, 'tokenizer.json'),
    config: path.join(absDir, 'tokenizer_config.json'),
    template: path.join(absDir, 'chat_template.jinja'),
    generation: path.join(absDir, 'generation_config.json'),
    model: path.join(absDir, 'config.json'),
  };
}

/** What loadTokenizer builds from: a checkpoint directory's tokenizer files, read and their config checked. */
export function readTokenizerParts(dir: string): TokenizerParts {
  const absDir = path.resolve(dir);
  const files = tokenizerFilesOf(absDir);
  const tokFile = files.tokenizer;
  if (!existsSync(tokFile)) throw new CheckpointError(`${tokFile}: tokenizer.json not found`);
  const tokJson = readJsonFile(tokFile, 'tokenizer.json');
  const tcFile = files.config;
  const tokConfig = existsSync(tcFile) ? readJsonFile(tcFile, 'tokenizer_config.json') : {};
  validateTokenizerConfig(tokConfig, tcFile);

  // Chat template: chat_template.jinja (current HF layout) wins over tokenizer_config.json.
  let templateSource: string | undefined;
  const jinjaFile = files.template;
  const templateFile = existsSync(jinjaFile) ? jinjaFile : tcFile;
  if (existsSync(jinjaFile)) {
    const bytes = readFileSync(jinjaFile);
    if (!isUtf8(bytes)) throw new CheckpointError(`${jinjaFile}: not valid UTF-8 (byte ${firstInvalidUtf8(bytes)})`);
    templateSource = bytes.toString('utf8');
  } else {
    const ct = tokConfig.chat_template;
    if (typeof ct === 'string') templateSource = ct;
    else if (Array.isArray(ct)) {
      const named = ct as Array<{ name?: string; template: string }>;
      templateSource = (named.find((t) => t.name === 'default') ?? named[0])!.template;
    }
  }
  const eosHints: unknown[] = [];
  const genFile = files.generation;
  if (existsSync(genFile)) {
    try {
      eosHints.push((JSON.parse(readFileSync(genFile, 'utf8')) as { eos_token_id?: unknown }).eos_token_id);
    } catch { /* a broken generation_config.json only loses its eos hint */ }
  }
  const cfgFile = files.model;
  if (existsSync(cfgFile)) {
    try {
      const cfg = JSON.parse(readFileSync(cfgFile, 'utf8')) as { eos_token_id?: unknown; text_config?: { eos_token_id?: unknown } };
      eosHints.push(cfg.text_config?.eos_token_id ?? cfg.eos_token_id);
    } catch { /* config.json problems are reported by the checkpoint loader */ }
  }
  return { tokJson, tokFile, tokConfig, templateSource, templateFile, eosHints, where: absDir };
}

/** What a tokenizer is built from: tokenizer.json's object and the rest, wherever they came from. */
export interface TokenizerParts {
  tokJson: Record<string, unknown>;
  /** Names the tokenizer's source in errors. */
  tokFile: string;
  tokConfig: Record<string, unknown>;
  templateSource?: string;
  /** Names the chat template's source in errors. */
  templateFile: string;
  /** Further end-of-generation ids (each a number or an array of numbers). */
  eosHints: unknown[];
  /** Names the model in the "no chat template" error. */
  where: string;
}

/** A tokenizer from its parts (tokenizer.json's object checked first). */
export function buildTokenizer(parts: TokenizerParts): LoadedTokenizer {
  const { tokJson, tokFile, tokConfig, templateSource, templateFile } = parts;
  const absDir = parts.where;
  const idBound = validateTokenizerJson(tokJson, tokFile);
  if (!Array.isArray(tokJson.added_tokens)) tokJson.added_tokens = [];
  for (const k of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder']) if (!(k in tokJson)) tokJson[k] = null;

  let hf: HfTokenizer;
  try {
    hf = new HfTokenizer(tokJson, tokConfig);
  } catch (err) {
    throw new CheckpointError(`${tokFile}: cannot build the tokenizer (${errorText(err)})`);
  }
  const encodeIds = (text: string): number[] => {
    let enc: { ids: unknown[]; tokens: string[] };
    try {
      enc = hf.encode(text, { add_special_tokens: false }) as { ids: unknown[]; tokens: string[] };
    } catch (err) {
      throw new CheckpointError(`${tokFile}: the tokenizer fails to encode text (${errorText(err)})`);
    }
    const bad = enc.ids.findIndex((id) => !isTokenId(id));
    if (bad >= 0) throw new CheckpointError(`${tokFile}: the tokenizer produced token ${preview(enc.tokens[bad])}, which has no id in the vocabulary`);
    return enc.ids as number[];
  };
  const decodeIds = (ids: readonly number[], skipSpecialTokens: boolean): string => {
    try {
      return hf.decode(ids.slice(), { skip_special_tokens: skipSpecialTokens, clean_up_tokenization_spaces: false });
    } catch (err) {
      throw new CheckpointError(`${tokFile}: the tokenizer fails to decode token ids (${errorText(err)})`);
    }
  };
  decodeIds(encodeIds(PROBE_TEXT), false);

  let template: Template | undefined;
  if (templateSource !== undefined) {
    try {
      template = new Template(templateSource);
    } catch (err) {
      throw new CheckpointError(`${templateFile}: chat template does not parse (${templateParseError(err)})`);
    }
  }

  const tokenToId = (t: string): number | undefined => hf.token_to_id(t);
  const eos = new Set<number>();
  const addEos = (v: unknown) => {
    for (const id of Array.isArray(v) ? v : [v]) if (isTokenId(id)) eos.add(id);
  };
  const eosName = tokenContent(tokConfig.eos_token);
  if (eosName !== undefined) {
    const id = tokenToId(eosName);
    if (id !== undefined) eos.add(id);
  }
  for (const h of parts.eosHints) addEos(h);

  const vocabSize = idBound;

  const specialTokenIds = new Set<number>();
  const addedTokenIds = new Set<number>();
  for (const t of tokJson.added_tokens as Array<{ id?: unknown; special?: unknown }>) {
    if (typeof t.id !== 'number') continue;
    addedTokenIds.add(t.id);
    if (t.special === true) specialTokenIds.add(t.id);
  }

  const specials: Record<string, unknown> = {};
  for (const k of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
    const c = tokenContent(tokConfig[k]);
    specials[k] = c ?? null;
  }
  const render = (messages: readonly ChatMessage[], opts: ChatTemplateOptions): string => {
    if (!template) throw new CheckpointError(`${absDir}: no chat template (neither chat_template.jinja nor tokenizer_config.json chat_template)`);
    const vars: Record<string, unknown> = {
      ...specials,
      ...(opts.extra ?? {}),
      messages: messages.map((m) => ({ ...m })),
      add_generation_prompt: opts.addGenerationPrompt,
    };
    if (opts.enableThinking !== undefined) vars.enable_thinking = opts.enableThinking;
    if (opts.tools !== undefined) vars.tools = opts.tools;
    let out: unknown;
    try {
      out = template.render(vars);
    } catch (err) {
      throw new CheckpointError(`${templateFile}: chat template fails to render (${errorText(err)})`);
    }
    if (typeof out !== 'string') throw new CheckpointError(`${templateFile}: chat template rendered ${preview(out)}, not text`);
    return out;
  };
  // A template that cannot render a one-line user turn is broken; say so at load.
  if (template && render([{ role: 'user', content: 'Hello' }], { addGenerationPrompt: true }).trim() === '') {
    throw new CheckpointError(`${templateFile}: chat template renders no text for a user message`);
  }

  return {
    encode(text: string): number[] {
      if (text.length === 0) return [];
      return encodeIds(text);
    },
    decode(ids: readonly number[], opts = {}): string {
      if (ids.length === 0) return '';
      return decodeIds(ids, !!opts.skipSpecialTokens);
    },
    applyChatTemplate: render,
    eosTokenIds: [...eos].sort((a, b) => a - b),
    tokenToId,
    idToToken: (id: number) => hf.id_to_token(id),
    vocabSize,
    hasChatTemplate: template !== undefined,
    addedTokenIds,
    specialTokenIds,
    byteLevelDecoder: isByteLevel(tokJson.decoder),
  };
}

/**
 * Checks that a tokenizer fits a model: every id it can produce is below the model's vocab_size
 * (config.json of the checkpoint directory `dir`).
 */
export function checkTokenizerFitsModel(tok: LoadedTokenizer, vocabSize: number, dir: string): void {
  if (tok.vocabSize > vocabSize) {
    throw new CheckpointError(
      `${path.join(path.resolve(dir), 'tokenizer.json')}: token ids reach ${tok.vocabSize - 1}, but config.json has vocab_size ${vocabSize}`,
    );
  }
}

/** The message of something thrown inside a library, as one line without a stack. */
function errorText(err: unknown): string {
  if (err instanceof RangeError && /call stack/.test(err.message)) return 'nested too deeply';
  return oneLine(err instanceof Error ? err.message : String(err), 200);
}

/**
 * Why a chat template does not parse. @huggingface/jinja reports a template that ends inside an
 * open block or tag ("{% if x %}" with no endif, a lone "{{") as a TypeError from reading past its
 * last token; say what that means instead.
 */
function templateParseError(err: unknown): string {
  if (err instanceof TypeError) return 'the template ends inside an unclosed block or tag';
  return errorText(err);
}
