// Checkpoint loader: config.json + safetensors (single file or sharded with an index) ->
// validated Checkpoint with canonical tensor names and absolute file offsets.
//
// loadCheckpoint is SYNCHRONOUS: it reads config.json and the safetensors headers only (a few MB
// at most), never tensor data.

import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { isJsonObject, parseJsonBytes, preview } from '../util/json.js';
import { displayName } from '../util/text.js';
import { parseConfigDetailed } from './config.js';
import { LM_HEAD_ROLE, layerRoles, modelRole, mtpRoles, type TensorRole } from './tensor-roles.js';
import { numel, readSafetensorsHeader, shapeStr, type SafetensorsEntry } from './safetensors.js';
import { checkVectorsFinite } from './vector-check.js';
import { CheckpointError, type Checkpoint, type DType, type TensorRef, type TextConfig } from './types.js';

export const PREFIX_NESTED = 'model.language_model.';
export const PREFIX_FLAT = 'model.';
const VISION_PREFIX = 'model.visual.';
const MTP_PREFIX = 'mtp.';
const LM_HEAD = LM_HEAD_ROLE.hf;

export interface ExpectedTensor {
  /** Canonical name (prefix stripped; `lm_head.weight` and `mtp.*` as is). */
  name: string;
  shape: number[];
  /** text: counted in paramCount; mtp: only with mtp; lm_head: only when untied. */
  group: 'text' | 'mtp' | 'lm_head';
  /** Its row of the tensor-role table, and its layer (-1 outside the decoder layers). */
  role: TensorRole;
  layer: number;
}

/**
 * Every tensor a checkpoint with this config holds, from the tensor-role table, in a natural order
 * (embedding, layers, final norm, lm_head when `lmHead`, then mtp.* when `mtp`). Shapes are
 * PyTorch order.
 */
export function expectedTensors(c: TextConfig, opts: { mtp?: boolean; lmHead?: boolean } = {}): ExpectedTensor[] {
  const at = (role: TensorRole, name: string, group: ExpectedTensor['group'], layer = -1): ExpectedTensor =>
    ({ name, shape: role.shape(c), group, role, layer });
  const out: ExpectedTensor[] = [at(modelRole('embed'), modelRole('embed').hf, 'text')];
  for (let i = 0; i < c.numLayers; i++) {
    for (const r of layerRoles(c.layerTypes[i]!)) out.push(at(r, `layers.${i}.${r.hf}`, 'text', i));
  }
  out.push(at(modelRole('final_norm'), modelRole('final_norm').hf, 'text'));
  if (opts.lmHead ?? !c.tieWordEmbeddings) out.push(at(LM_HEAD_ROLE, LM_HEAD, 'lm_head'));
  if (opts.mtp) {
    for (const r of mtpRoles()) out.push(at(r, r.hf, 'mtp'));
    for (let i = 0; i < c.mtpNumHiddenLayers; i++) {
      for (const r of layerRoles('full_attention')) out.push(at(r, `mtp.layers.${i}.${r.hf}`, 'mtp', i));
    }
  }
  return out;
}

/** Parameter counts implied by a config: text model (untied head included when untied) and MTP. */
export function countParams(c: TextConfig): { text: number; mtp: number } {
  let text = 0;
  let mtp = 0;
  for (const t of expectedTensors(c, { mtp: true })) {
    if (t.group === 'mtp') mtp += numel(t.shape);
    else text += numel(t.shape);
  }
  return { text, mtp };
}

/** The checkpoint's config and safetensors index, in its directory. */
const CONFIG_FILE = 'config.json';
const INDEX_FILE = 'model.safetensors.index.json';

/** The files loadCheckpoint read for `ckpt`: config.json, the index when there is one, the shards. */
export function checkpointFilesOf(ckpt: Pick<Checkpoint, 'dir' | 'shards'>): string[] {
  const index = path.join(ckpt.dir, INDEX_FILE);
  return [path.join(ckpt.dir, CONFIG_FILE), ...(existsSync(index) ? [index] : []), ...ckpt.shards];
}

/**
 * Whether loadCheckpoint reads a file of this name in a checkpoint directory once it exists: config.json,
 * the index, and *.safetensors (model.safetensors, the shards, or every one when there is neither).
 */
export function isCheckpointFileName(name: string): boolean {
  return name === CONFIG_FILE || name === INDEX_FILE || name.endsWith('.safetensors');
}

export interface LoadOptions {
  /** Include mtp.* tensors (validated when present). Default false. */
  mtp?: boolean;
}

/** config.json's dtype names (`dtype`, or `torch_dtype` before transformers 5) as the safetensors dtypes. */
const HF_DTYPES: Readonly<Record<string, DType>> = { bfloat16: 'BF16', float16: 'F16', float32: 'F32' };

/** The dtype config.json states (its text_config's, else the top level's), or null. */
function statedDtype(json: unknown): { key: string; value: string } | null {
  const top = isJsonObject(json) ? json : {};
  const text = isJsonObject(top.text_config) ? top.text_config : {};
  for (const o of [text, top]) {
    for (const key of ['dtype', 'torch_dtype']) if (typeof o[key] === 'string') return { key, value: o[key] as string };
  }
  return null;
}

/** A Checkpoint plus human-readable notes about anything the loader tolerated or ignored. */
export interface LoadedCheckpoint extends Checkpoint {
  notes: string[];
}

interface Located {
  entry: SafetensorsEntry;
  file: string;
}

function readBytes(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new CheckpointError(`${file}: cannot read ${what} (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

function readJson(file: string, what: string): unknown {
  const parsed = parseJsonBytes(readBytes(file, what));
  if (!parsed.ok) throw new CheckpointError(`${file}: ${what} is ${parsed.reason}`);
  return parsed.value;
}

/** Longest file name Linux allows (NAME_MAX, in bytes). */
const MAX_FILE_NAME_BYTES = 255;

/** A weight_map value must be a plain file name inside the checkpoint directory. */
function isPlainFileName(s: string): boolean {
  return s.length > 0 && s !== '.' && s !== '..' && !/[/\\\u0000-\u001f]/.test(s) && Buffer.byteLength(s) <= MAX_FILE_NAME_BYTES;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/**
 * Loads and validates a Qwen3.5 checkpoint directory (synchronous, headers only).
 * - config.json: nested `text_config` or flat.
 * - weights: model.safetensors.index.json (every shard it names must exist) or model.safetensors
 *   (or, failing both, every *.safetensors in the directory).
 * - prefix `model.language_model.` or `model.`; `model.visual.*` skipped; `mtp.*` only with {mtp:true}.
 * Every problem is a CheckpointError whose one-line message names the file or tensor at fault.
 */
export function loadCheckpoint(dir: string, opts: LoadOptions = {}): LoadedCheckpoint {
  const absDir = path.resolve(dir);
  const notes: string[] = [];
  let st;
  try {
    st = statSync(absDir);
  } catch {
    throw new CheckpointError(`${absDir}: checkpoint directory does not exist`);
  }
  if (!st.isDirectory()) throw new CheckpointError(`${absDir}: not a directory (expected a checkpoint directory)`);

  // --- config.json
  const configPath = path.join(absDir, CONFIG_FILE);
  if (!existsSync(configPath)) throw new CheckpointError(`${configPath}: not found (a Hugging Face checkpoint directory holds its config.json; a llama.cpp model is a .gguf file)`);
  const configBytes = readBytes(configPath, 'config.json');
  const configJson = parseJsonBytes(configBytes);
  if (!configJson.ok) throw new CheckpointError(`${configPath}: ${configJson.reason}`);
  const parsed = parseConfigDetailed(configJson.value, configPath);
  const config: TextConfig = { ...parsed.config, layerTypes: parsed.config.layerTypes.slice(), mropeSection: parsed.config.mropeSection.slice() };
  const configHash = createHash('sha256').update(configBytes).digest('hex');

  // --- shards
  const indexPath = path.join(absDir, INDEX_FILE);
  const singlePath = path.join(absDir, 'model.safetensors');
  let shards: string[];
  let weightMap: Map<string, string> | null = null;
  if (existsSync(indexPath)) {
    const idx = readJson(indexPath, 'safetensors index');
    const wm = (idx as { weight_map?: unknown } | null)?.weight_map;
    if (typeof wm !== 'object' || wm === null || Array.isArray(wm)) {
      throw new CheckpointError(`${indexPath}: missing or invalid "weight_map"`);
    }
    weightMap = new Map();
    const seen = new Set<string>();
    shards = [];
    for (const [name, shard] of Object.entries(wm as Record<string, unknown>)) {
      if (name.length === 0) throw new CheckpointError(`${indexPath}: weight_map has an entry with an empty tensor name`);
      if (typeof shard !== 'string' || !isPlainFileName(shard)) {
        throw new CheckpointError(`${indexPath}: weight_map entry for ${displayName(name)} is not a file name in the checkpoint directory: ${preview(shard)}`);
      }
      const abs = path.join(absDir, shard);
      weightMap.set(name, abs);
      if (!seen.has(abs)) {
        seen.add(abs);
        shards.push(abs);
      }
    }
    if (shards.length === 0) throw new CheckpointError(`${indexPath}: weight_map is empty`);
    for (const s of shards) {
      if (!existsSync(s)) throw new CheckpointError(`${s}: shard named in ${path.basename(indexPath)} does not exist`);
      if (!statSync(s).isFile()) throw new CheckpointError(`${s}: shard named in ${path.basename(indexPath)} is not a regular file`);
    }
    shards.sort();
  } else if (existsSync(singlePath)) {
    shards = [singlePath];
  } else {
    shards = readdirSync(absDir).filter((f) => f.endsWith('.safetensors')).sort().map((f) => path.join(absDir, f));
    if (shards.length === 0) {
      throw new CheckpointError(`${absDir}: no model.safetensors, model.safetensors.index.json or *.safetensors file`);
    }
    notes.push(`no index or model.safetensors; using ${shards.length} *.safetensors file(s)`);
  }

  // --- headers
  const all = new Map<string, Located>();
  let bytesOnDisk = 0;
  for (const file of shards) {
    const h = readSafetensorsHeader(file);
    bytesOnDisk += h.fileSize;
    for (const [name, entry] of h.tensors) {
      const prev = all.get(name);
      if (prev) throw new CheckpointError(`tensor ${name} appears in both ${prev.file} and ${file}`);
      all.set(name, { entry, file });
    }
  }
  if (weightMap) {
    for (const [name, file] of weightMap) {
      const loc = all.get(name);
      if (!loc) throw new CheckpointError(`${file}: tensor ${name} is listed in model.safetensors.index.json but not in this shard's header`);
      if (loc.file !== file) throw new CheckpointError(`tensor ${name}: index says ${file}, but it is in ${loc.file}`);
    }
  }

  // --- prefix and canonical names
  const names = [...all.keys()];
  let prefix: string;
  if (names.some((n) => n.startsWith(PREFIX_NESTED))) prefix = PREFIX_NESTED;
  else if (names.some((n) => n.startsWith(PREFIX_FLAT) && !n.startsWith(VISION_PREFIX))) prefix = PREFIX_FLAT;
  else {
    throw new CheckpointError(
      `${shards.length === 1 ? shards[0] : absDir}: no text-model tensors (names starting with ${PREFIX_NESTED} or ${PREFIX_FLAT})`,
    );
  }
  const canonical = new Map<string, Located & { fullName: string }>();
  let visionSkipped = 0;
  let mtpSkipped = 0;
  const unrecognised: string[] = [];
  for (const [name, loc] of all) {
    if (name.startsWith(VISION_PREFIX)) { visionSkipped++; continue; }
    if (name.startsWith(MTP_PREFIX)) {
      if (opts.mtp) canonical.set(name, { ...loc, fullName: name });
      else mtpSkipped++;
      continue;
    }
    if (name === LM_HEAD) { canonical.set(name, { ...loc, fullName: name }); continue; }
    if (name.startsWith(prefix) && !(prefix === PREFIX_FLAT && name.startsWith(PREFIX_NESTED))) {
      canonical.set(name.slice(prefix.length), { ...loc, fullName: name });
      continue;
    }
    unrecognised.push(name);
  }
  if (visionSkipped) notes.push(`skipped ${visionSkipped} vision tensor(s) (${VISION_PREFIX}*)`);
  if (mtpSkipped) notes.push(`skipped ${mtpSkipped} MTP tensor(s) (mtp.*, the multi-token-prediction head; bench convert --mtp writes them)`);
  if (unrecognised.length) notes.push(`ignored ${unrecognised.length} unrecognised tensor(s), e.g. ${unrecognised[0]}`);

  // --- tied / untied head
  const hasLmHead = canonical.has(LM_HEAD);
  const tie = parsed.tie;
  const stated = tie.textConfig ?? tie.topLevel;
  let tied: boolean;
  if (stated === true) {
    tied = true;
    if (hasLmHead) notes.push('config says tie_word_embeddings=true; ignoring lm_head.weight present in the checkpoint');
  } else if (stated === false) {
    if (hasLmHead) tied = false;
    else if (tie.topLevel === true) {
      tied = true;
      notes.push('text_config says untied but the top level says tied and lm_head.weight is absent: using tied embeddings');
    } else {
      throw new CheckpointError(
        `tensor ${LM_HEAD} is missing (expected shape ${shapeStr([config.vocabSize, config.hiddenSize])}): ${configPath} says tie_word_embeddings=false`,
      );
    }
  } else {
    tied = !hasLmHead;
    notes.push(`config.json does not state tie_word_embeddings; ${tied ? 'no lm_head.weight, using tied embeddings' : 'lm_head.weight present, untied'}`);
  }
  config.tieWordEmbeddings = tied;
  if (tied) canonical.delete(LM_HEAD);

  // --- validate against the expected tensor list
  const whereMissing = weightMap ? indexPath : shards.length === 1 ? shards[0]! : absDir;
  const hasAnyMtp = [...canonical.keys()].some((n) => n.startsWith(MTP_PREFIX));
  const wantMtp = !!opts.mtp && hasAnyMtp && config.mtpNumHiddenLayers > 0;
  if (opts.mtp && !hasAnyMtp) notes.push('MTP requested but the checkpoint has no mtp.* tensors');
  const expected = expectedTensors(config, { mtp: wantMtp, lmHead: !tied });
  const tensors = new Map<string, TensorRef>();
  let paramCount = 0;
  const dtypeParams: Record<DType, number> = { BF16: 0, F16: 0, F32: 0 };
  for (const exp of expected) {
    const loc = canonical.get(exp.name);
    const fullName = exp.group === 'text' ? prefix + exp.name : exp.name;
    if (!loc) {
      throw new CheckpointError(`tensor ${fullName} is missing (expected shape ${shapeStr(exp.shape)}) in ${whereMissing}`);
    }
    let ok = sameShape(loc.entry.shape, exp.shape);
    // A squeezed depthwise conv ([conv_dim, K] instead of [conv_dim, 1, K]) has identical bytes.
    if (!ok && exp.role.kind === 'conv' && sameShape(loc.entry.shape, [exp.shape[0]!, exp.shape[2]!])) ok = true;
    if (!ok) {
      throw new CheckpointError(
        `${loc.file}: tensor ${loc.fullName} has shape ${shapeStr(loc.entry.shape)}, expected ${shapeStr(exp.shape)}`,
      );
    }
    tensors.set(exp.name, {
      name: exp.name, ...(loc.fullName !== exp.name ? { storedName: loc.fullName } : {}), file: loc.file, offset: loc.entry.offset, nbytes: loc.entry.nbytes, dtype: loc.entry.dtype, shape: loc.entry.shape.slice(),
      role: exp.role.role, layer: exp.layer, ...(exp.role.fold ? { fold: exp.role.fold } : {}),
    });
    if (exp.group !== 'mtp') {
      const n = numel(loc.entry.shape);
      paramCount += n;
      dtypeParams[loc.entry.dtype] += n;
    }
  }

  // --- leftovers: stray layers beyond the config are an error, other extras a note
  const extras: string[] = [];
  for (const [name, loc] of canonical) {
    if (tensors.has(name)) continue;
    const m = /^layers\.(\d+)\./.exec(name);
    if (m && Number(m[1]) >= config.numLayers) {
      throw new CheckpointError(
        `${loc.file}: tensor ${loc.fullName} belongs to layer ${m[1]}, but ${configPath} has num_hidden_layers=${config.numLayers}`,
      );
    }
    if (name.startsWith(MTP_PREFIX) && !wantMtp) continue;
    extras.push(loc.fullName);
  }
  if (extras.length) notes.push(`ignored ${extras.length} unexpected tensor(s), e.g. ${extras[0]}`);

  let dtype: DType = 'BF16';
  for (const d of ['F32', 'F16', 'BF16'] as DType[]) if (dtypeParams[d] > dtypeParams[dtype]) dtype = d;
  checkVectorsFinite(tensors.values());
  // `bench synth`'s provenance: random weights, whose figures time the shape but whose text means nothing.
  const synth = isJsonObject(configJson.value) ? configJson.value.lumen_synth : undefined;
  if (isJsonObject(synth)) {
    const said = ['preset', 'seed', 'dtype'].filter((k) => typeof synth[k] === 'string' || typeof synth[k] === 'number').map((k) => `${k} ${String(synth[k])}`);
    notes.push(`random weights written by bench synth${said.length ? ` (${said.join(', ')})` : ''}: the figures time the shape; the text means nothing`);
  }
  const statedType = statedDtype(configJson.value);
  if (statedType && HF_DTYPES[statedType.value] !== undefined && HF_DTYPES[statedType.value] !== dtype) {
    notes.push(`config.json says ${statedType.key} ${statedType.value}, but the weights are stored ${dtype} (most parameters): they run as stored`);
  }

  return {
    dir: absDir,
    config,
    configHash,
    prefix,
    tensors,
    shards,
    bytesOnDisk,
    paramCount,
    dtype,
    hasMtp: wantMtp,
    notes,
  };
}
