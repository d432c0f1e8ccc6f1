// A GGUF file's tokenizer (tokenizer.ggml.* and tokenizer.chat_template, as llama.cpp's converter
// writes them for Qwen3.5: a byte-level BPE `gpt2` model with the `qwen35` pre-tokenizer) as the
// parts of an HF tokenizer (tokenizer.ts builds it): the vocabulary and merges, the control and
// user-defined tokens as added tokens, the split pattern of the pre-tokenizer.

import type { GgufFile } from './gguf-reader.js';
import { qwen35TokenizerJson } from './synth-tokenizer.js';
import type { TokenizerParts } from './tokenizer.js';
import { CheckpointError } from './types.js';

/** llama.cpp token types (tokenizer.ggml.token_type). */
const TOKEN_NORMAL = 1;
const TOKEN_CONTROL = 3;
const TOKEN_USER_DEFINED = 4;
const TOKEN_UNUSED = 5;
const TOKEN_BYTE = 6;

/** Pre-tokenizer names (tokenizer.ggml.pre) whose split pattern is Qwen3.5's. */
const QWEN_PRE = new Set(['qwen35', 'qwen2']);

function stringArray(g: GgufFile, key: string): string[] {
  const v = g.kv.get(key)?.value;
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw new CheckpointError(`${g.file}: metadata key ${key} is missing or not an array of strings`);
  return v as string[];
}

export function ggufTokenizerParts(g: GgufFile): TokenizerParts {
  const model = g.kv.get('tokenizer.ggml.model')?.value;
  if (model !== 'gpt2') throw new CheckpointError(`${g.file}: tokenizer.ggml.model is ${JSON.stringify(model)}; only byte-level BPE ("gpt2") is supported`);
  const pre = g.kv.get('tokenizer.ggml.pre')?.value;
  if (typeof pre !== 'string' || !QWEN_PRE.has(pre)) {
    throw new CheckpointError(`${g.file}: tokenizer.ggml.pre is ${JSON.stringify(pre)}; supported: ${[...QWEN_PRE].join(', ')}`);
  }
  const tokens = stringArray(g, 'tokenizer.ggml.tokens');
  const merges = stringArray(g, 'tokenizer.ggml.merges');
  const typesV = g.kv.get('tokenizer.ggml.token_type')?.value;
  const types = Array.isArray(typesV) && typesV.length === tokens.length ? (typesV as number[]) : null;
  if (!types) throw new CheckpointError(`${g.file}: tokenizer.ggml.token_type is missing or not one type per token (${tokens.length})`);

  const vocab: Record<string, number> = {};
  const added: Array<Record<string, unknown>> = [];
  for (let id = 0; id < tokens.length; id++) {
    const t = types[id];
    if (t === TOKEN_NORMAL || t === TOKEN_BYTE) vocab[tokens[id]!] = id;
    else if (t === TOKEN_CONTROL || t === TOKEN_USER_DEFINED) {
      added.push({ id, content: tokens[id], single_word: false, lstrip: false, rstrip: false, normalized: false, special: t === TOKEN_CONTROL });
    } else if (t !== TOKEN_UNUSED) {
      throw new CheckpointError(`${g.file}: tokenizer.ggml.token_type[${id}] is ${String(t)} (token ${JSON.stringify(tokens[id])}), not a known llama.cpp token type`);
    }
  }
  const tokJson = qwen35TokenizerJson(vocab, merges, added);
  const idKey = (key: string): number | undefined => {
    const v = g.kv.get(key)?.value;
    return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v < tokens.length ? v : undefined;
  };
  const eos = idKey('tokenizer.ggml.eos_token_id');
  const pad = idKey('tokenizer.ggml.padding_token_id');
  const tokConfig: Record<string, unknown> = {
    eos_token: eos !== undefined ? tokens[eos] : null,
    pad_token: pad !== undefined ? tokens[pad] : null,
    bos_token: null,
  };
  const tmpl = g.kv.get('tokenizer.chat_template')?.value;
  return {
    tokJson,
    tokFile: `${g.file} (tokenizer.ggml.*)`,
    tokConfig,
    ...(typeof tmpl === 'string' ? { templateSource: tmpl } : {}),
    templateFile: `${g.file} (tokenizer.chat_template)`,
    eosHints: eos !== undefined ? [eos] : [],
    where: g.file,
  };
}
