// Tokenizer of a checkpoint directory: tokenizer.json (HF format) via @huggingface/tokenizers, chat
// template via @huggingface/jinja (from chat_template.jinja when present, else tokenizer_config.json).

import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
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

function readJsonFile(file: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CheckpointError(`${file}: cannot read ${what} (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new CheckpointError(`${file}: ${what} is not valid JSON (${(err as Error).message})`);
  }
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

function tokenContent(t: unknown): string | undefined {
  if (typeof t === 'string') return t;
  if (typeof t === 'object' && t !== null && typeof (t as { content?: unknown }).content === 'string') return (t as { content: string }).content;
  return undefined;
}

/**
 * Loads the tokenizer of a checkpoint directory (async for API stability; the work is synchronous).
 * Missing or malformed tokenizer.json -> CheckpointError naming the file.
 */
export async function loadTokenizer(dir: string): Promise<LoadedTokenizer> {
  const absDir = path.resolve(dir);
  const tokFile = path.join(absDir, 'tokenizer.json');
  if (!existsSync(tokFile)) throw new CheckpointError(`${tokFile}: tokenizer.json not found`);
  const tokJson = readJsonFile(tokFile, 'tokenizer.json');
  const model = tokJson.model as { type?: unknown; vocab?: unknown } | undefined;
  if (typeof model !== 'object' || model === null || typeof model.vocab !== 'object' || model.vocab === null) {
    throw new CheckpointError(`${tokFile}: tokenizer.json has no model.vocab`);
  }
  if (!Array.isArray(tokJson.added_tokens)) tokJson.added_tokens = [];
  for (const k of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder']) if (!(k in tokJson)) tokJson[k] = null;

  const tcFile = path.join(absDir, 'tokenizer_config.json');
  const tokConfig = existsSync(tcFile) ? readJsonFile(tcFile, 'tokenizer_config.json') : {};

  let hf: HfTokenizer;
  try {
    hf = new HfTokenizer(tokJson, tokConfig);
  } catch (err) {
    throw new CheckpointError(`${tokFile}: cannot build the tokenizer (${(err as Error).message})`);
  }

  // Chat template: chat_template.jinja (current HF layout) wins over tokenizer_config.json.
  let templateSource: string | undefined;
  const jinjaFile = path.join(absDir, 'chat_template.jinja');
  if (existsSync(jinjaFile)) templateSource = readFileSync(jinjaFile, 'utf8');
  else {
    const ct = tokConfig.chat_template;
    if (typeof ct === 'string') templateSource = ct;
    else if (Array.isArray(ct)) {
      const named = ct as Array<{ name?: unknown; template?: unknown }>;
      const pick = named.find((t) => t.name === 'default') ?? named[0];
      if (pick && typeof pick.template === 'string') templateSource = pick.template;
    }
  }
  let template: Template | undefined;
  if (templateSource !== undefined) {
    try {
      template = new Template(templateSource);
    } catch (err) {
      throw new CheckpointError(`${existsSync(jinjaFile) ? jinjaFile : tcFile}: chat template does not parse (${(err as Error).message})`);
    }
  }

  const tokenToId = (t: string): number | undefined => hf.token_to_id(t);
  const eos = new Set<number>();
  const addEos = (v: unknown) => {
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) eos.add(v);
    else if (Array.isArray(v)) v.forEach(addEos);
  };
  const genFile = path.join(absDir, 'generation_config.json');
  if (existsSync(genFile)) {
    try {
      addEos((JSON.parse(readFileSync(genFile, 'utf8')) as { eos_token_id?: unknown }).eos_token_id);
    } catch { /* a broken generation_config.json only loses its eos hint */ }
  }
  const eosName = tokenContent(tokConfig.eos_token);
  if (eosName !== undefined) {
    const id = tokenToId(eosName);
    if (id !== undefined) eos.add(id);
  }
  const cfgFile = path.join(absDir, 'config.json');
  if (existsSync(cfgFile)) {
    try {
      const cfg = JSON.parse(readFileSync(cfgFile, 'utf8')) as { eos_token_id?: unknown; text_config?: { eos_token_id?: unknown } };
      addEos(cfg.text_config?.eos_token_id ?? cfg.eos_token_id);
    } catch { /* config.json problems are reported by the checkpoint loader */ }
  }

  let vocabSize = 0;
  for (const id of Object.values(model.vocab as Record<string, number>)) if (id + 1 > vocabSize) vocabSize = id + 1;
  for (const t of tokJson.added_tokens as Array<{ id?: number }>) if (typeof t.id === 'number' && t.id + 1 > vocabSize) vocabSize = t.id + 1;

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

  return {
    encode(text: string): number[] {
      if (text.length === 0) return [];
      return hf.encode(text, { add_special_tokens: false }).ids;
    },
    decode(ids: readonly number[], opts = {}): string {
      if (ids.length === 0) return '';
      return hf.decode(ids.slice(), { skip_special_tokens: !!opts.skipSpecialTokens, clean_up_tokenization_spaces: false });
    },
    applyChatTemplate(messages: readonly ChatMessage[], opts: ChatTemplateOptions): string {
      if (!template) throw new CheckpointError(`${absDir}: no chat template (neither chat_template.jinja nor tokenizer_config.json chat_template)`);
      const vars: Record<string, unknown> = {
        ...specials,
        ...(opts.extra ?? {}),
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: opts.addGenerationPrompt,
      };
      if (opts.enableThinking !== undefined) vars.enable_thinking = opts.enableThinking;
      if (opts.tools !== undefined) vars.tools = opts.tools;
      return template.render(vars);
    },
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
