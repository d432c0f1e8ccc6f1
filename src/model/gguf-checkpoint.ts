// A llama.cpp GGUF file (arch `qwen35`, one file or split `*-0000i-of-0000N.gguf`) as a model
// manifest: the same tensor list the safetensors loader builds (src/model/checkpoint.ts), from
// the headers read by the bounds-checked reader (gguf-reader.ts), with the hyper-parameters from
// the `qwen35.*` metadata. llama.cpp's conventions (src/model/tensor-roles.ts): the folds are
// already applied in the file (norms +1 except ssm_norm, ssm_a = -exp(A_log)), so the manifest
// asks for none; the value heads are in llama.cpp's tiled order, which the engine adopts
// (config.linearValueHeadsTiled) instead of permuting quantized blocks.
//
// Synchronous and header-only, as loadCheckpoint: the tensor data is memory-mapped by the engine.

import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import path from 'node:path';
import { displayName } from '../util/text.js';
import { expectedTensors } from './checkpoint.js';
import { checkVectorsFinite } from './vector-check.js';
import { parseConfigDetailed } from './config.js';
import { ggmlTypeInfo, GgufError, parseGgufHeader, type GgufFile, type GgufTensor } from './gguf-reader.js';
import { layerRoles, LM_HEAD_ROLE, modelRole } from './tensor-roles.js';
import {
  CheckpointError, isWeightDType, QUANT_TYPES, type ModelCheckpoint, type WeightDType, type WeightFormat, type WeightRef,
} from './types.js';

const ARCH = 'qwen35';
/** The metadata key of the positions the model was built for (config.json's max_position_embeddings). */
export const GGUF_CONTEXT_LENGTH_KEY = `${ARCH}.context_length`;
const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/**
 * llama.cpp's file types (`llama_ftype` in include/llama.h of the bundled release; 4 to 6 and 33 to 35
 * are retired): general.file_type's names, which llama-quantize and the usual GGUF file naming use.
 */
const FILE_TYPE_NAMES: ReadonlyMap<number, string> = new Map([
  [0, 'F32'], [1, 'F16'], [2, 'Q4_0'], [3, 'Q4_1'], [7, 'Q8_0'], [8, 'Q5_0'], [9, 'Q5_1'], [10, 'Q2_K'],
  [11, 'Q3_K_S'], [12, 'Q3_K_M'], [13, 'Q3_K_L'], [14, 'Q4_K_S'], [15, 'Q4_K_M'], [16, 'Q5_K_S'], [17, 'Q5_K_M'],
  [18, 'Q6_K'], [19, 'IQ2_XXS'], [20, 'IQ2_XS'], [21, 'Q2_K_S'], [22, 'IQ3_XS'], [23, 'IQ3_XXS'], [24, 'IQ1_S'],
  [25, 'IQ4_NL'], [26, 'IQ3_S'], [27, 'IQ3_M'], [28, 'IQ2_S'], [29, 'IQ2_M'], [30, 'IQ4_XS'], [31, 'IQ1_M'],
  [32, 'BF16'], [36, 'TQ1_0'], [37, 'TQ2_0'], [38, 'MXFP4_MOE'], [39, 'NVFP4'], [40, 'Q1_0'], [41, 'Q2_0'],
]);

/**
 * The names `--quant` takes (upper case): the file types above, llama-quantize's aliases Q3_K, Q4_K
 * and Q5_K, and Q6_K_M, `bench convert`'s name for llama-quantize's Q6_K mix. A name that is none of
 * these (`8B`, `K_M`) is refused rather than matched against file names, where it could only match
 * something else (`…-0.8B.gguf`).
 */
export const GGUF_QUANT_NAMES: readonly string[] = [...new Set([...FILE_TYPE_NAMES.values(), 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K_M'])];

/**
 * A name shaped as llama.cpp's quantization names are (upper case): publishers name their own mixes
 * the same way (`Q4_K_XL`, `Q8_K_XL`, `Q4_K_L` beside llama-quantize's `Q4_K_M`), so these are taken
 * too; a model size (`8B`, `0.8B`) or a fragment (`K_M`, `0`) is not.
 */
const QUANT_SHAPE_RE = /^(?:I?Q\d_(?:\d|K)(?:_[A-Z]{1,3})?|IQ\d_[A-Z]{1,3}|TQ\d_0|MXFP4(?:_MOE)?|NVFP4|B?F16|F32)$/;

/** Whether `--quant` names a quantization (GGUF_QUANT_NAMES, or a name of their shape; any case). */
export function isGgufQuantName(quant: string): boolean {
  const q = quant.toUpperCase();
  return GGUF_QUANT_NAMES.includes(q) || QUANT_SHAPE_RE.test(q);
}

/**
 * llama-quantize's K mixes (Q4_K_S/M, Q5_K_S/M) and their base type: the mixes give some matrices
 * more bits (the output or tied embedding Q6_K, attn_v / ffn_down on some layers Q5_K or Q6_K),
 * unless the file was written with --pure, which keeps general.file_type but gives every matrix the
 * base type, or its fallback where a row is not a multiple of 256 (Q5_0, Q5_1; F16 below 32).
 */
const K_MIX_BASE: ReadonlyMap<number, { base: string; fallback: string }> = new Map([
  [14, { base: 'Q4_K', fallback: 'Q5_0' }], [15, { base: 'Q4_K', fallback: 'Q5_0' }],
  [16, { base: 'Q5_K', fallback: 'Q5_1' }], [17, { base: 'Q5_K', fallback: 'Q5_1' }],
]);

/**
 * The weights' format name: general.file_type's (`Q4_K_M`), except that a K-mix file type whose
 * matrices all hold its base type (or that type's fallbacks), the output matrix included, is named
 * for what it holds (`Q4_K (pure)`, with a note): a pure Q4_K file and a Q4_K_M one of the same model
 * differ in speed and quality. Without a file type: the dominant element type.
 */
function formatName(ftype: number | undefined, dtype: WeightDType, typeCounts: Record<string, number>, headDtype: WeightDType, notes: string[]): string {
  const declared = ftype !== undefined ? FILE_TYPE_NAMES.get(ftype) : undefined;
  if (declared === undefined) return dtype;
  const mix = K_MIX_BASE.get(ftype!);
  if (mix === undefined) return declared;
  const allowed = new Set([mix.base, mix.fallback, 'F16', 'F32', 'BF16']);
  // The output matrix quantized (F16 where its rows are not a multiple of 32, as in the mix: told apart
  // there by the other matrices), and no matrix of another type.
  const pure = (headDtype === mix.base || headDtype === mix.fallback || headDtype === 'F16') && Object.keys(typeCounts).every((t) => allowed.has(t));
  if (!pure) return declared;
  const name = `${mix.base} (pure)`;
  notes.push(`general.file_type says ${declared}, but every matrix is ${mix.base} (or its fallback ${mix.fallback}), none of the mix's more-bits types: a pure ${mix.base} file (as llama-quantize --pure writes it), reported as ${name}`);
  return name;
}

export interface LoadedModel extends ModelCheckpoint {
  notes: string[];
}

/** True for a path naming a GGUF file (by its extension). */
export function isGgufPath(p: string): boolean {
  return /\.gguf$/i.test(p);
}

/** A GGUF file's name without the split suffix and the extension (`m-Q8_0-00001-of-00002.gguf` -> `m-Q8_0`). */
function ggufStem(file: string): string {
  const base = path.basename(file);
  const m = SPLIT_RE.exec(base);
  return m ? m[1]! : base.replace(/\.gguf$/i, '');
}

/**
 * The quantization a GGUF file's name carries (upper case), or null: the longest end of the name
 * (without its split suffix and extension) that starts after a `-`, `.` or `_` (or at the start) and
 * is a quantization name (isGgufQuantName): `m-Q4_K_M.gguf`, `m.q8_0.gguf`,
 * `m_IQ4_XS-00001-of-00002.gguf`, `BF16.gguf`, `Qwen3.5-4B-UD-Q4_K_XL.gguf`; any case.
 */
export function quantOfGgufName(file: string): string | null {
  const stem = ggufStem(file).toUpperCase();
  for (let at = 0; at < stem.length; at++) {
    if (at > 0 && !'-._'.includes(stem[at - 1]!)) continue;
    if (isGgufQuantName(stem.slice(at))) return stem.slice(at);
  }
  return null;
}

/** Whether a GGUF file's name carries the quantization `quant` (quantOfGgufName; any case). */
function nameHasQuant(file: string, quant: string): boolean {
  return quantOfGgufName(file) === quant.toUpperCase();
}

/**
 * llama.cpp's name for a multimodal projector shipped beside a model's GGUFs (`mmproj-F16.gguf`,
 * `mmproj-Qwen3.5-4B-BF16.gguf`): a vision encoder, not a model this engine runs.
 */
const PROJECTOR_RE = /^mmproj/i;

/**
 * The model files of a GGUF directory, one entry per model (a single file, or the first file of a
 * split set: its other parts are found from it), and the entries left out: `unreadable` (a link that
 * cannot be followed, no permission: `name (CODE)`), `ignored` (a vision projector, a split part
 * whose first part is missing). selectGguf names both only when nothing else matches.
 */
function ggufModelsIn(dir: string): { models: string[]; unreadable: string[]; ignored: string[] } {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw new CheckpointError(`${dir}: cannot list the directory (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  const models: string[] = [];
  const unreadable: string[] = [];
  const ignored: string[] = [];
  for (const f of names.filter((n) => isGgufPath(n)).sort()) {
    let isFile: boolean;
    try {
      isFile = statSync(path.join(dir, f)).isFile();
    } catch (err) {
      unreadable.push(`${f} (${(err as NodeJS.ErrnoException).code ?? 'unreadable'})`);
      continue;
    }
    if (!isFile) continue;
    if (PROJECTOR_RE.test(f)) {
      ignored.push(`${f} (a vision projector)`);
      continue;
    }
    const m = SPLIT_RE.exec(f);
    if (!m || Number(m[2]) === 1) models.push(path.join(dir, f));
    else if (!existsSync(path.join(dir, `${m[1]}-00001-of-${m[3]}.gguf`))) ignored.push(`${f} (part ${Number(m[2])} of ${Number(m[3])}, whose first part is missing)`);
  }
  return { models, unreadable, ignored };
}

/** Whether a directory holds GGUF model files, or `*.gguf` entries that cannot be read (selectGguf names them). */
export function dirHasGguf(dir: string): boolean {
  const { models, unreadable, ignored } = ggufModelsIn(dir);
  return models.length + unreadable.length + ignored.length > 0;
}

/**
 * The GGUF file `--model-path` / `--quant` name: a file as is; in a directory, the one file (or
 * split set) whose name carries `quant`, or the only one when no quant is given. None or several:
 * a CheckpointError listing what the directory holds.
 */
export function selectGguf(modelPath: string, quant?: string): string {
  const abs = path.resolve(modelPath);
  let st;
  try {
    st = statSync(abs);
  } catch {
    throw new CheckpointError(`${abs}: does not exist`);
  }
  const unknownQuant = quant !== undefined && !isGgufQuantName(quant)
    ? `--quant ${quant} is not a quantization name (${GGUF_QUANT_NAMES.join(', ')}, or one of their shape such as Q4_K_XL; any case)`
    : null;
  if (st.isFile()) {
    if (unknownQuant !== null) throw new CheckpointError(`${abs}: ${unknownQuant}`);
    if (quant !== undefined && !nameHasQuant(abs, quant)) {
      const carried = quantOfGgufName(abs);
      throw new CheckpointError(`${abs}: --quant ${quant} does not match this file's name (${carried === null ? 'it names no quantization' : `it names ${carried}`}; give the directory to choose among files)`);
    }
    return abs;
  }
  const { models, unreadable, ignored } = ggufModelsIn(abs);
  const listed = models.length ? models.map((f) => path.basename(f)).join(', ') : `no ${unreadable.length ? 'readable ' : ignored.length ? 'model ' : ''}.gguf files`;
  // Entries that cannot be read or are no model are named only when nothing else matches (they may be what was meant).
  const withLeftOut = listed + (unreadable.length ? `; unreadable: ${unreadable.join(', ')}` : '') + (ignored.length ? `; left out: ${ignored.join(', ')}` : '');
  if (quant === undefined) {
    if (models.length === 1) return models[0]!;
    if (models.length === 0) throw new CheckpointError(`${abs}: ${withLeftOut}`);
    // --quant picks a file whose quantization no other file's name carries; two of one quantization only a path tells apart.
    const quants = models.map((f) => quantOfGgufName(f));
    const byQuant = quants.some((q) => q !== null && quants.indexOf(q) === quants.lastIndexOf(q));
    throw new CheckpointError(`${abs}: several GGUF files (${listed}); ${byQuant ? 'choose one with --quant, or give' : 'give'} the file's path as --model-path`);
  }
  if (unknownQuant !== null) throw new CheckpointError(`${abs}: ${unknownQuant}; the directory holds: ${withLeftOut}`);
  const hits = models.filter((f) => nameHasQuant(f, quant));
  if (hits.length === 0) throw new CheckpointError(`${abs}: no GGUF file named for --quant ${quant} (the directory holds: ${withLeftOut})`);
  if (hits.length > 1) throw new CheckpointError(`${abs}: more than one GGUF file named for --quant ${quant} (the directory holds: ${listed}); give the file's path as --model-path`);
  return hits[0]!;
}

/** The parts of a split GGUF set from its first file (every part must exist), or the file alone. */
function splitParts(first: string): string[] {
  const m = SPLIT_RE.exec(path.basename(first));
  if (!m) return [first];
  const n = Number(m[3]);
  if (Number(m[2]) !== 1) throw new CheckpointError(`${first}: part ${Number(m[2])} of a split GGUF; give the first part (-00001-of-${m[3]}.gguf)`);
  const parts: string[] = [];
  for (let i = 1; i <= n; i++) {
    const p = path.join(path.dirname(first), `${m[1]}-${String(i).padStart(5, '0')}-of-${m[3]}.gguf`);
    if (!existsSync(p)) throw new CheckpointError(`${p}: part ${i} of ${n} of the split GGUF is missing`);
    parts.push(p);
  }
  return parts;
}

/** A metadata value, checked for type: 'n' a number, 's' a string, 'a' an array. */
function meta(g: GgufFile, key: string, kind: 'n', optional?: false): number;
function meta(g: GgufFile, key: string, kind: 'n', optional: true): number | undefined;
function meta(g: GgufFile, key: string, kind: 's', optional: true): string | undefined;
function meta(g: GgufFile, key: string, kind: 'a', optional: true): unknown[] | undefined;
function meta(g: GgufFile, key: string, kind: 'n' | 's' | 'a', optional = false): unknown {
  const kv = g.kv.get(key);
  if (!kv) {
    if (optional) return undefined;
    throw new CheckpointError(`${g.file}: metadata key ${key} is missing`);
  }
  const v = kv.value;
  const ok = kind === 'n' ? typeof v === 'number' : kind === 's' ? typeof v === 'string' : Array.isArray(v);
  if (!ok) throw new CheckpointError(`${g.file}: metadata key ${key} has the wrong type (expected ${kind === 'n' ? 'a number' : kind === 's' ? 'a string' : 'an array'})`);
  return v;
}

/** The HF-style text config implied by the qwen35 metadata (checked by the config.json parser). */
function configJson(g: GgufFile, vocabSize: number, tied: boolean): Record<string, unknown> {
  const arch = meta(g, 'general.architecture', 's', true);
  if (arch !== ARCH) throw new CheckpointError(`${g.file}: general.architecture is ${arch === undefined ? 'missing' : JSON.stringify(arch)}; only ${ARCH} (Qwen3.5) is supported`);
  const k = (key: string) => meta(g, `${ARCH}.${key}`, 'n');
  const nextn = meta(g, `${ARCH}.nextn_predict_layers`, 'n', true) ?? 0;
  const numLayers = k('block_count') - nextn;
  const interval = k('full_attention_interval');
  const nv = k('ssm.time_step_rank');
  const inner = k('ssm.inner_size');
  if (nv < 1 || inner % nv !== 0) throw new CheckpointError(`${g.file}: ${ARCH}.ssm.inner_size (${inner}) is not a multiple of ${ARCH}.ssm.time_step_rank (${nv})`);
  const headDim = k('attention.key_length');
  const valueLen = meta(g, `${ARCH}.attention.value_length`, 'n', true);
  if (valueLen !== undefined && valueLen !== headDim) throw new CheckpointError(`${g.file}: ${ARCH}.attention.value_length (${valueLen}) differs from key_length (${headDim})`);
  const sections = (meta(g, `${ARCH}.rope.dimension_sections`, 'a', true) ?? [11, 11, 10, 0]) as unknown[];
  const ff = g.kv.get(`${ARCH}.feed_forward_length`)?.value;
  const headCountKv = g.kv.get(`${ARCH}.attention.head_count_kv`)?.value;
  const rot = k('rope.dimension_count');
  const eos = meta(g, 'tokenizer.ggml.eos_token_id', 'n', true) ?? 248046;
  return {
    hidden_size: k('embedding_length'),
    num_hidden_layers: numLayers,
    // Per-layer arrays (llama.cpp allows them) are not supported: one value for every layer.
    intermediate_size: Array.isArray(ff) ? ff[0] : ff,
    num_attention_heads: k('attention.head_count'),
    num_key_value_heads: Array.isArray(headCountKv) ? headCountKv[0] : headCountKv,
    head_dim: headDim,
    linear_num_key_heads: k('ssm.group_count'),
    linear_num_value_heads: nv,
    linear_key_head_dim: k('ssm.state_size'),
    linear_value_head_dim: inner / nv,
    linear_conv_kernel_dim: k('ssm.conv_kernel'),
    vocab_size: vocabSize,
    rms_norm_eps: k('attention.layer_norm_rms_epsilon'),
    rope_parameters: {
      rope_theta: k('rope.freq_base'),
      partial_rotary_factor: rot / headDim,
      mrope_section: sections.filter((s, i) => i < 3 || s !== 0),
    },
    layer_types: Array.from({ length: numLayers }, (_, i) => ((i + 1) % interval === 0 ? 'full_attention' : 'linear_attention')),
    tie_word_embeddings: tied,
    eos_token_id: eos,
    // Absent: the config parser's default, as for a config.json without the key.
    max_position_embeddings: meta(g, GGUF_CONTEXT_LENGTH_KEY, 'n', true),
    mtp_num_hidden_layers: nextn,
  };
}

/** sha256 over the bytes of the files, in order (hex). */
function hashFiles(files: readonly string[]): string {
  const h = createHash('sha256');
  const buf = Buffer.alloc(8 << 20);
  for (const f of files) {
    const fd = openSync(f, 'r');
    try {
      for (let pos = 0; ;) {
        const n = readSync(fd, buf, 0, buf.length, pos);
        if (n === 0) break;
        h.update(buf.subarray(0, n));
        pos += n;
      }
    } finally {
      closeSync(fd);
    }
  }
  return h.digest('hex');
}

/** Loads a GGUF model (header only): the manifest, the config and the weight format. */
export function loadGgufCheckpoint(file: string, opts: { hash?: boolean } = {}): LoadedModel {
  const parts = splitParts(path.resolve(file));
  const notes: string[] = [];
  const headers: GgufFile[] = [];
  try {
    for (const p of parts) headers.push(parseGgufHeader(p));
  } catch (err) {
    if (err instanceof GgufError) throw new CheckpointError(err.message);
    throw err;
  }
  const first = headers[0]!;
  const splitCount = meta(first, 'split.count', 'n', true);
  if (splitCount !== undefined && splitCount !== parts.length) {
    throw new CheckpointError(`${first.file}: split.count is ${splitCount}, but the file name says ${parts.length} part(s)`);
  }
  // Every tensor, whichever part holds it.
  const all = new Map<string, { t: GgufTensor; g: GgufFile }>();
  for (const g of headers) {
    for (const t of g.tensors.values()) {
      const prev = all.get(t.name);
      if (prev) throw new CheckpointError(`tensor ${displayName(t.name)} appears in both ${prev.g.file} and ${g.file}`);
      all.set(t.name, { t, g });
    }
  }
  const embed = all.get(modelRole('embed').gguf);
  if (!embed) throw new CheckpointError(`${first.file}: tensor ${modelRole('embed').gguf} is missing`);
  const vocabSize = embed.t.ne[1] ?? 0;
  const tied = !all.has(LM_HEAD_ROLE.gguf);
  const parsed = parseConfigDetailed(configJson(first, vocabSize, tied), `${first.file} (${ARCH} metadata)`);
  const config = { ...parsed.config, layerTypes: parsed.config.layerTypes.slice(), mropeSection: parsed.config.mropeSection.slice() };
  const tiled = config.linearNumValueHeads !== config.linearNumKeyHeads;
  if (tiled) config.linearValueHeadsTiled = true;

  // The GGUF name of each expected tensor, from the tensor-role table.
  const ggufName = new Map<string, string>();
  ggufName.set(modelRole('embed').hf, modelRole('embed').gguf);
  ggufName.set(modelRole('final_norm').hf, modelRole('final_norm').gguf);
  ggufName.set(LM_HEAD_ROLE.hf, LM_HEAD_ROLE.gguf);
  for (let i = 0; i < config.numLayers; i++) {
    for (const r of layerRoles(config.layerTypes[i]!)) ggufName.set(`layers.${i}.${r.hf}`, `blk.${i}.${r.gguf}`);
  }

  const tensors = new Map<string, WeightRef>();
  const typeCounts: Record<string, number> = {};
  let paramCount = 0;
  let weightBits = 0;
  const used = new Set<string>();
  const typeParams = new Map<WeightDType, number>();
  for (const exp of expectedTensors(config, { lmHead: !tied })) {
    const gname = ggufName.get(exp.name)!;
    const loc = all.get(gname);
    if (!loc) throw new CheckpointError(`tensor ${gname} is missing (expected for ${exp.name}) in ${parts.length === 1 ? first.file : path.dirname(first.file)}`);
    used.add(gname);
    const { t, g } = loc;
    const info = ggmlTypeInfo(t.type)!;
    const dtype = info.name;
    if (!isWeightDType(dtype)) {
      throw new CheckpointError(`${g.file}: tensor ${gname} has type ${dtype}, which the engine does not run (supported: F32, F16, BF16, ${QUANT_TYPES.join(', ')})`);
    }
    if (exp.role.kind !== 'matrix' && dtype !== 'F32' && dtype !== 'F16' && dtype !== 'BF16') {
      throw new CheckpointError(`${g.file}: tensor ${gname} (a ${exp.role.kind}) has type ${dtype}; vectors and conv taps must be F32, F16 or BF16`);
    }
    // ggml order -> PyTorch order; the conv is stored squeezed ({K, conv_dim}).
    const shape = t.ne.slice().reverse();
    const want = exp.role.kind === 'conv' ? [exp.shape[0]!, exp.shape[2]!] : exp.shape;
    if (shape.length !== want.length || shape.some((d, i) => d !== want[i])) {
      throw new CheckpointError(`${g.file}: tensor ${gname} has shape [${shape.join(', ')}] (PyTorch order), expected [${want.join(', ')}]`);
    }
    tensors.set(exp.name, {
      name: exp.name, storedName: gname, file: g.file, offset: g.dataStart + t.offset, nbytes: t.nbytes, dtype, shape, role: exp.role.role, layer: exp.layer,
    });
    const n = shape.reduce((a, b) => a * b, 1);
    paramCount += n;
    weightBits += t.nbytes * 8;
    typeCounts[dtype] = (typeCounts[dtype] ?? 0) + 1;
    typeParams.set(dtype, (typeParams.get(dtype) ?? 0) + n);
  }
  // Layers past the model's: the MTP layers the metadata declares (nextn_predict_layers of the
  // block_count) are skipped; a tensor beyond block_count is refused, as the safetensors loader
  // refuses layers beyond num_hidden_layers (running fewer layers than the file holds is silently
  // another model).
  const blockCount = config.numLayers + config.mtpNumHiddenLayers;
  const extras: string[] = [];
  let mtpSkipped = 0;
  for (const [n, { g }] of all) {
    if (used.has(n)) continue;
    const m = /^blk\.(\d+)\./.exec(n);
    const layer = m ? Number(m[1]) : -1;
    if (layer >= blockCount) {
      const nextn = config.mtpNumHiddenLayers ? ` (${config.numLayers} layers + ${config.mtpNumHiddenLayers} from ${ARCH}.nextn_predict_layers)` : '';
      throw new CheckpointError(`${g.file}: tensor ${displayName(n)} belongs to layer ${layer}, but ${ARCH}.block_count is ${blockCount}${nextn}`);
    }
    if (layer >= config.numLayers) mtpSkipped++;
    else extras.push(n);
  }
  if (mtpSkipped) notes.push(`skipped ${mtpSkipped} MTP tensor(s) (blk.${config.numLayers}.*)`);
  if (extras.length) notes.push(`ignored ${extras.length} unexpected tensor(s), e.g. ${extras[0]}`);

  let dtype: WeightDType = 'F32';
  for (const [d, n] of typeParams) if (n > (typeParams.get(dtype) ?? 0)) dtype = d;
  checkVectorsFinite(tensors.values());
  const ftype = meta(first, 'general.file_type', 'n', true);
  const format: WeightFormat = {
    container: 'gguf',
    name: formatName(ftype, dtype, typeCounts, (tensors.get(LM_HEAD_ROLE.hf) ?? tensors.get(modelRole('embed').hf)!).dtype, notes),
    bitsPerWeight: paramCount ? weightBits / paramCount : 0,
    tensorTypes: typeCounts,
    files: parts.map((p) => path.basename(p)),
    ...(opts.hash === false ? {} : { sha256: hashFiles(parts) }),
  };
  const configHash = createHash('sha256').update(JSON.stringify(configJson(first, vocabSize, tied))).digest('hex');
  return {
    dir: path.dirname(first.file),
    config,
    configHash,
    prefix: '',
    tensors,
    shards: parts,
    bytesOnDisk: headers.reduce((a, g) => a + g.fileSize, 0),
    paramCount,
    dtype,
    hasMtp: false,
    format,
    notes,
  };
}

/** The first GGUF header of a loaded GGUF model (for its tokenizer metadata). */
export function ggufHeaderOf(model: ModelCheckpoint): GgufFile {
  if (model.format?.container !== 'gguf') throw new CheckpointError(`${model.dir}: not a GGUF model`);
  try {
    return parseGgufHeader(model.shards[0]!);
  } catch (err) {
    if (err instanceof GgufError) throw new CheckpointError(err.message);
    throw err;
  }
}
