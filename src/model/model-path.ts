// What `--model-path` (and `--quant`) name: a safetensors checkpoint directory, a GGUF file (or
// the first part of a split one), a directory of GGUF files to choose among by quantization, or
// `synthetic:<preset>` (random weights of a preset's shape generated in memory; synthetic-model.ts).
// One function for every command (sweep, prompt, serve), so the flags mean the same everywhere;
// and the tokenizer that goes with the model (tokenizer.json beside a GGUF when there is one,
// checked against the GGUF's own vocabulary; otherwise the GGUF's tokenizer.ggml.* metadata).

import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { DEFAULT_MAX_POSITIONS } from './config.js';
import { checkpointFilesOf, isCheckpointFileName, loadCheckpoint, type LoadOptions } from './checkpoint.js';
import {
  dirHasGguf, GGUF_CONTEXT_LENGTH_KEY, ggufHeaderOf, isGgufPath, loadGgufCheckpoint, selectGguf, type LoadedModel,
} from './gguf-checkpoint.js';
import { ggufTokenizerParts } from './gguf-tokenizer.js';
import { syntheticModel, syntheticTokenizerParts, syntheticWeightsOf } from './synthetic-model.js';
import { buildTokenizer, isTokenizerFileName, readTokenizerParts, tokenizerFilesOf, type LoadedTokenizer, type TokenizerParts } from './tokenizer.js';
import { CheckpointError, type ModelCheckpoint } from './types.js';
import { isSameFile, sameFileAmong } from '../util/same-file.js';

export interface ModelPathOptions extends LoadOptions {
  /** `--quant`: the GGUF quantization to choose by file name (e.g. `Q4_K_M`, any case). */
  quant?: string;
  /** Hash the GGUF file(s) for the reports (default true). */
  hash?: boolean;
}

/** Whether `modelPath` is (or, with `quant`, selects) a GGUF model rather than a safetensors directory. */
export function isGgufModelPath(modelPath: string, quant?: string): boolean {
  const abs = path.resolve(modelPath);
  if (isGgufPath(abs) && existsSync(abs) && statSync(abs).isFile()) return true;
  if (!existsSync(abs) || !statSync(abs).isDirectory()) return false;
  if (quant !== undefined) return true;
  return !existsSync(path.join(abs, 'config.json')) && dirHasGguf(abs);
}

/** Loads the model `--model-path` / `--quant` name (headers only). Problems: CheckpointError. */
export function loadModel(modelPath: string, opts: ModelPathOptions = {}): LoadedModel {
  const synthetic = syntheticWeightsOf(modelPath);
  if (synthetic !== null) {
    if (opts.quant !== undefined) throw new CheckpointError(`${modelPath}: --quant does not apply to synthetic weights`);
    if (opts.mtp) throw new CheckpointError(`${modelPath}: synthetic weights have no MTP head`);
    return syntheticModel(synthetic);
  }
  if (isGgufModelPath(modelPath, opts.quant)) {
    if (opts.mtp) throw new CheckpointError(`${path.resolve(modelPath)}: MTP from a GGUF file is not supported`);
    return loadGgufCheckpoint(selectGguf(modelPath, opts.quant), { hash: opts.hash });
  }
  return loadCheckpoint(modelPath, opts);
}

/** The most positions (prompt + output) a model was built for, and where that is written. */
export interface ModelPositions {
  max: number;
  /** For messages: `max_position_embeddings in DIR/config.json`, `qwen35.context_length in FILE.gguf`, a preset's. */
  source: string;
}

/**
 * The positions the model was built for, as its loader read them (TextConfig.maxPositionEmbeddings:
 * config.json's max_position_embeddings, a GGUF's qwen35.context_length, a preset's): a sequence
 * needs one per token, prompt and output together, and the commands refuse more (engine/options.ts).
 */
export function modelMaxPositions(model: ModelCheckpoint): ModelPositions {
  const max = model.config.maxPositionEmbeddings;
  if (model.syntheticWeights) return { max, source: `max_position_embeddings of the ${model.syntheticWeights.preset} preset` };
  // A file that does not state it gets DEFAULT_MAX_POSITIONS from the loaders, which mark it; the source says so.
  const gguf = model.format?.container === 'gguf';
  const file = gguf ? model.shards[0] ?? model.dir : path.join(model.dir, 'config.json');
  const key = gguf ? GGUF_CONTEXT_LENGTH_KEY : 'max_position_embeddings';
  return { max, source: model.config.maxPositionsDefaulted !== true ? `${key} in ${file}` : `the default ${DEFAULT_MAX_POSITIONS}: ${file} does not state ${key}` };
}

/** A short fixed text whose ids the two tokenizers of a GGUF model must agree on. */
export const TOKENIZER_CHECK_TEXT = 'Hello world, 123!\n\tOver the river: caf\u00e9 \u6771\u4eac <|im_start|>user\nhi<|im_end|>';

/**
 * The tokenizer of a loaded model: the checkpoint directory's files; for synthetic weights, the
 * tokenizer `bench synth` writes for the preset, built in memory; for a GGUF model, a
 * tokenizer.json beside the file when present (and it must give the GGUF vocabulary's ids on a
 * test text), else the GGUF's own tokenizer.ggml.* metadata and tokenizer.chat_template.
 */
export async function loadModelTokenizer(model: ModelCheckpoint, opts: TokenizerLoadOptions = {}): Promise<LoadedTokenizer> {
  return (await loadModelTokenizerParts(model, opts)).tokenizer;
}

export interface TokenizerLoadOptions {
  /**
   * false: the chat template is neither parsed nor checked (a caller that only encodes text, such as
   * `bench prompt` without --chat: a template this engine cannot parse, or a broken one, is no reason to
   * refuse it, as Hugging Face's tokenizers fail only when the template is applied).
   */
  chatTemplate?: boolean;
}

/**
 * loadModelTokenizer's tokenizer and the parts it was built from (a worker thread builds the same
 * tokenizer from a copy of them: src/serve/tokenize-pool.ts).
 */
export async function loadModelTokenizerParts(model: ModelCheckpoint, opts: TokenizerLoadOptions = {}): Promise<{ tokenizer: LoadedTokenizer; parts: TokenizerParts }> {
  const built = (parts: TokenizerParts) => ({
    tokenizer: buildTokenizer(opts.chatTemplate === false ? { ...parts, templateSource: undefined } : parts), parts,
  });
  if (model.syntheticWeights) return built(syntheticTokenizerParts(model));
  if (model.format?.container !== 'gguf') return built(readTokenizerParts(model.dir));
  const header = ggufHeaderOf(model);
  const own = built(ggufTokenizerParts(header));
  if (!existsSync(path.join(model.dir, 'tokenizer.json'))) return own;
  // The files beside it give the vocabulary; the chat template too when they hold one
  // (tokenizer_config.json's chat_template, chat_template.jinja), else the GGUF's own is kept: a
  // tokenizer.json alone said nothing of the template, and --chat failed. The GGUF's end-of-sequence
  // id stays among the ids that end generation, whatever the files beside it say.
  const besideParts = readTokenizerParts(model.dir);
  const ownParts = own.parts;
  const beside = built({
    ...besideParts,
    ...(besideParts.templateSource === undefined && ownParts.templateSource !== undefined
      ? { templateSource: ownParts.templateSource, templateFile: ownParts.templateFile } : {}),
    eosHints: [...besideParts.eosHints, ...ownParts.eosHints],
  });
  const a = beside.tokenizer.encode(TOKENIZER_CHECK_TEXT);
  const b = own.tokenizer.encode(TOKENIZER_CHECK_TEXT);
  if (a.length !== b.length || a.some((id, i) => id !== b[i])) {
    throw new CheckpointError(
      `${path.join(model.dir, 'tokenizer.json')}: gives token ids [${a.join(',')}] for a test text, but ${header.file}'s vocabulary gives [${b.join(',')}]`,
    );
  }
  return beside;
}

/**
 * Every file a model is read from, as far as it exists: its weights (a checkpoint's config.json, index
 * and shards; a GGUF's parts) and the tokenizer files beside them (a GGUF's loader reads a
 * tokenizer.json there too). An output that is one of them would destroy the model.
 */
export function modelInputFiles(ckpt: Pick<ModelCheckpoint, 'dir' | 'shards' | 'format'>): string[] {
  const weights = ckpt.format?.container === 'gguf' ? ckpt.shards : checkpointFilesOf(ckpt);
  return [...new Set([...weights, ...Object.values(tokenizerFilesOf(ckpt.dir))])].filter((f) => existsSync(f));
}

/**
 * Whether `file`, which need not exist, lies in the model's directory (by path or through a link)
 * under a name its loaders read there once it exists: the tokenizer files, and for a safetensors
 * checkpoint config.json, the index and any *.safetensors; for a GGUF any *.gguf (a directory's files
 * are chosen among by name). An output written there would be read back as part of the model;
 * modelInputFiles sees only the files that exist.
 */
export function isModelInputName(model: Pick<ModelCheckpoint, 'dir' | 'format'>, file: string): boolean {
  const abs = path.resolve(file);
  if (!isSameFile(path.dirname(abs), model.dir)) return false;
  const name = path.basename(abs);
  const weights = model.format?.container === 'gguf' ? isGgufPath(name) : isCheckpointFileName(name);
  return weights || isTokenizerFileName(name);
}

/**
 * Why an output `file` (which need not exist) would destroy or join the model it was made from, or
 * null: one of the files the model is read from (by path, link or hard link: modelInputFiles), or a
 * name its loader would read in its directory once written (isModelInputName). The words a command
 * puts after its flag: `--out F: <why>`.
 */
export function outputClashWithModel(model: Pick<ModelCheckpoint, 'dir' | 'shards' | 'format'>, file: string): string | null {
  const same = sameFileAmong(file, modelInputFiles(model));
  if (same !== null) return `the same file as ${same}, which the model is read from; choose another path`;
  if (isModelInputName(model, file)) {
    return `${path.basename(file)} in the model's directory ${model.dir} is a name its loader reads as part of the model; choose another name or directory`;
  }
  return null;
}
