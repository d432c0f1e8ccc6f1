// Hugging Face Qwen3.5 checkpoint -> GGUF (arch `qwen35`) in llama.cpp's conventions
// (docs/qwen35-architecture.md §4): metadata, byte-level BPE vocabulary, tensor names in ggml
// order and the converter's value transforms. Tensors are streamed in row chunks, so memory
// stays bounded whatever the model size.
import { closeSync, openSync, readSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { loadCheckpoint } from '../model/checkpoint.js';
import { outputClashWithModel } from '../model/model-path.js';
import { errnoText } from '../util/errno-text.js';
import { buildTokenizer, readTokenizerParts } from '../model/tokenizer.js';
import { tokenContent } from '../model/tokenizer-files.js';
import { preview } from '../util/json.js';
import type { Checkpoint, LayerType, TensorRef, TextConfig } from '../model/types.js';
import { LM_HEAD_ROLE, layerRoles, modelRole, mtpRoles, type TensorRole } from '../model/tensor-roles.js';
import { GgmlType, GgufValueType, GgufWriter, ggmlTypeName } from './gguf-writer.js';
import { decodeToF32 } from './quantize.js';
import { GGML_CODECS, encodeAs, firstNonFiniteBlock } from './ggml-codec.js';
import { EncodePool } from './quant-pool.js';
import { isQuantDtype, planQuantTypes, QUANT_DTYPES, QUANT_SCHEMES, type QuantDtype } from './quant-mix.js';

export type FloatDtype = 'f32' | 'bf16' | 'f16';
export type OutDtype = FloatDtype | QuantDtype;
export const OUT_DTYPES: readonly OutDtype[] = ['f32', 'bf16', 'f16', ...QUANT_DTYPES];

/** llama.cpp `llama_ftype` written to general.file_type (the quantized ones: QUANT_SCHEMES). */
const FLOAT_FILE_TYPE: Record<FloatDtype, number> = { f32: 0, f16: 1, bf16: 32 };
const fileTypeOf = (dtype: OutDtype) => (isQuantDtype(dtype) ? QUANT_SCHEMES[dtype].fileType : FLOAT_FILE_TYPE[dtype]);

/** llama.cpp token types. */
export const TokenType = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

/** Error in the conversion input (bad checkpoint, tokenizer, or option): one line, names the culprit. */
export class ConvertError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConvertError';
  }
}

/**
 * A read or write that failed part way (a full disk, a file-size limit, an I/O error): one line naming
 * the file and the errno's meaning. Not the input's fault nor the command line's: `bench convert`
 * exits 1, not 2. The temporary file is removed before it is thrown.
 */
export class ConvertIoError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConvertIoError';
  }
}

/** A problem with the output path (the CLI puts `--out FILE: ` before the message). */
export class ConvertOutputError extends ConvertError {
  constructor(message: string) {
    super(message);
    this.name = 'ConvertOutputError';
  }
}

export interface ConvertOptions {
  dtype: OutDtype;
  /** Also write the MTP block as layer `num_hidden_layers` (nextn tensors). */
  mtp?: boolean;
  /**
   * Worker threads for the block-quantized types (writeGgufParallel; default 1: in this thread): at
   * most this many, and never more than the pieces there are to quantize (quantizerWorkers).
   */
  threads?: number;
  /** Progress: bytes of tensor data written so far out of the total. */
  onProgress?: (done: number, total: number, tensor: string) => void;
}

export interface ConvertResult {
  outFile: string;
  dtype: OutDtype;
  tensorCount: number;
  fileBytes: number;
  /** GGUF tensor name -> ggml type name, for reporting. */
  tensorTypes: Map<string, string>;
  /** Threads that ran the block quantizers (1: this thread; 0: nothing to quantize, a float dtype). */
  quantizerThreads: number;
  seconds: number;
}

/** One output tensor: where its rows come from and how they are transformed. */
export interface TensorPlan {
  ggufName: string;
  src: TensorRef;
  /** ggml order. */
  ne: number[];
  type: GgmlType;
  /** The source viewed as [rows, rowLen] (1-D tensors: rowLen 1). */
  rows: number;
  rowLen: number;
  /** Output row i takes source row rowPerm[i]. */
  rowPerm?: Int32Array;
  /** Output column j takes source column colPerm[j] (within each row). */
  colPerm?: Int32Array;
  /** Elementwise transform applied in f32. */
  op?: 'plus_one' | 'neg_exp';
}

/**
 * Value-head order change from HF "grouped" (value head j reads key head j / r) to llama.cpp's
 * "tiled" (value head j reads key head j mod nk): tiled slot t·nk + k holds grouped head k·r + t.
 * Returns perm with perm[newHead] = oldHead; identity when nv = nk.
 */
export function valueHeadPermutation(numKeyHeads: number, numValueHeads: number): Int32Array {
  if (numValueHeads % numKeyHeads !== 0) {
    throw new ConvertError(`linear_num_value_heads (${numValueHeads}) is not a multiple of linear_num_key_heads (${numKeyHeads})`);
  }
  const r = numValueHeads / numKeyHeads;
  const perm = new Int32Array(numValueHeads);
  for (let t = 0; t < r; t++) for (let k = 0; k < numKeyHeads; k++) perm[t * numKeyHeads + k] = k * r + t;
  return perm;
}

/** Expand a head permutation to `width` rows (or columns) per head, after `base` untouched ones. */
function expandPerm(headPerm: Int32Array, width: number, base = 0): Int32Array {
  const out = new Int32Array(base + headPerm.length * width);
  for (let i = 0; i < base; i++) out[i] = i;
  for (let h = 0; h < headPerm.length; h++) {
    for (let d = 0; d < width; d++) out[base + h * width + d] = base + headPerm[h]! * width + d;
  }
  return out;
}

const isIdentity = (p: Int32Array) => p.every((v, i) => v === i);

/** full_attention_interval that reproduces the layer types (llama.cpp derives them from it). */
export function fullAttentionInterval(cfg: TextConfig): number {
  const L = cfg.layerTypes.length;
  for (let k = 1; k <= L + 1; k++) {
    if (cfg.layerTypes.every((t, i) => (t === 'full_attention') === ((i + 1) % k === 0))) return k;
  }
  throw new ConvertError(
    `layer_types [${cfg.layerTypes.join(',')}] is not "full attention every k-th layer"; llama.cpp's qwen35 arch cannot express it`,
  );
}

// ---------------------------------------------------------------------------------------------
// Tokenizer metadata

interface TokenizerJson {
  model: { vocab: Record<string, number>; merges: Array<string | [string, string]> };
  added_tokens?: Array<{ id: number; content: string; special?: boolean }>;
}

export interface GgufVocab {
  tokens: string[];
  tokenTypes: number[];
  merges: string[];
  eosId: number;
  padId: number;
  bosId: number;
  chatTemplate?: string;
}

/**
 * Build the GGUF vocabulary (padded to vocab_size) from the checkpoint's tokenizer files. They are
 * read, checked and built as the loader does (readTokenizerParts, buildTokenizer: what
 * `bench prompt --model-path DIR` refuses, convert refuses, naming the file and field), and the
 * chat template is the loader's choice (chat_template.jinja, else tokenizer_config.json's
 * chat_template, a string or a list of {name, template}).
 */
export function buildVocab(dir: string, cfg: TextConfig): GgufVocab {
  const parts = readTokenizerParts(dir);
  buildTokenizer(parts);
  const tokFile = parts.tokFile;
  const tj = parts.tokJson as unknown as TokenizerJson;
  const n = cfg.vocabSize;
  const tokens: (string | undefined)[] = new Array(n);
  const types = new Array<number>(n).fill(TokenType.UNUSED);
  const place = (id: number, text: string, type: number) => {
    if (id >= n) {
      throw new ConvertError(`${tokFile}: token id ${id} (${JSON.stringify(text)}) outside vocab_size ${n}`);
    }
    tokens[id] = text;
    types[id] = type;
  };
  for (const [text, id] of Object.entries(tj.model.vocab)) place(id, text, TokenType.NORMAL);
  const byContent = new Map<string, number>();
  for (const t of tj.added_tokens ?? []) {
    place(t.id, t.content, t.special ? TokenType.CONTROL : TokenType.USER_DEFINED);
    byContent.set(t.content, t.id);
  }
  for (let i = 0; i < n; i++) if (tokens[i] === undefined) tokens[i] = `[PAD${i}]`;
  // GGUF holds a merge as "a b": a pair whose token has a space in it cannot be written.
  const merges = tj.model.merges.map((m, i) => {
    if (!Array.isArray(m)) return m;
    if (m[0].includes(' ') || m[1].includes(' ')) {
      throw new ConvertError(`${tokFile}: model.merges[${i}] (${preview(m)}) has a token with a space, which a GGUF merge ("a b") cannot hold`);
    }
    return `${m[0]} ${m[1]}`;
  });

  const specialId = (key: string): number | undefined => {
    const content = tokenContent(parts.tokConfig[key]);
    return content !== undefined ? byContent.get(content) : undefined;
  };
  const eosId = specialId('eos_token') ?? cfg.eosTokenId;
  const padId = specialId('pad_token') ?? cfg.eosTokenId;
  const bosId = byContent.get('<|endoftext|>') ?? cfg.eosTokenId;
  return { tokens: tokens as string[], tokenTypes: types, merges, eosId, padId, bosId, chatTemplate: parts.templateSource };
}

// ---------------------------------------------------------------------------------------------
// Tensor plan

interface Dims {
  H: number; I: number; nh: number; nkv: number; hd: number;
  nk: number; nv: number; dk: number; dv: number; kc: number;
  keyDim: number; valueDim: number; convDim: number; V: number;
}

function dims(cfg: TextConfig): Dims {
  const keyDim = cfg.linearNumKeyHeads * cfg.linearKeyHeadDim;
  const valueDim = cfg.linearNumValueHeads * cfg.linearValueHeadDim;
  return {
    H: cfg.hiddenSize, I: cfg.intermediateSize, nh: cfg.numHeads, nkv: cfg.numKvHeads, hd: cfg.headDim,
    nk: cfg.linearNumKeyHeads, nv: cfg.linearNumValueHeads, dk: cfg.linearKeyHeadDim, dv: cfg.linearValueHeadDim,
    kc: cfg.linearConvKernelDim, keyDim, valueDim, convDim: 2 * keyDim + valueDim, V: cfg.vocabSize,
  };
}

/** Plan every output tensor (name, ggml shape, type, transforms) from the checkpoint. */
export function planTensors(ckpt: Checkpoint, dtype: OutDtype, withMtp = false): TensorPlan[] {
  const cfg = ckpt.config;
  const d = dims(cfg);
  const headPerm = valueHeadPermutation(d.nk, d.nv);
  const permute = !isIdentity(headPerm);
  const plans: TensorPlan[] = [];
  const used = new Set<string>();

  const get = (name: string, shape: number[]): TensorRef => {
    const t = ckpt.tensors.get(name);
    if (!t) throw new ConvertError(`${ckpt.dir}: tensor ${name} missing`);
    const ok = t.shape.length === shape.length && t.shape.every((v, i) => v === shape[i]);
    // conv1d may be stored [conv_dim, 1, K] or [conv_dim, K].
    const convOk = name.endsWith('conv1d.weight') && t.shape.length === 2 && t.shape[0] === shape[0] && t.shape[1] === shape[2];
    if (!ok && !convOk) {
      throw new ConvertError(`${t.file}: tensor ${name} has shape [${t.shape.join(', ')}], config expects [${shape.join(', ')}]`);
    }
    if (t.dtype !== 'F32' && t.dtype !== 'BF16' && t.dtype !== 'F16') {
      throw new ConvertError(`${t.file}: tensor ${name} has dtype ${t.dtype as string} (need F32, BF16 or F16)`);
    }
    used.add(name);
    return t;
  };
  // Quantized files: matrices start as F32 (what llama-quantize reads) and take their type from the
  // mix table once every tensor is known (planQuantTypes needs the whole list).
  const weightType = (): GgmlType => {
    switch (dtype) {
      case 'bf16': return GgmlType.BF16;
      case 'f16': return GgmlType.F16;
      default: return GgmlType.F32;
    }
  };
  // Each tensor from its row of the tensor-role table: GGUF name, layout, fold and value-head tiling.
  const tilingPerm = (role: TensorRole): Pick<TensorPlan, 'rowPerm' | 'colPerm'> => {
    if (!permute || !role.tiling) return {};
    switch (role.tiling) {
      case 'qkv_rows': return { rowPerm: expandPerm(headPerm, d.dv, 2 * d.keyDim) };
      case 'value_rows': return { rowPerm: expandPerm(headPerm, d.dv) };
      case 'head_rows': return { rowPerm: headPerm };
      case 'value_cols': return { colPerm: expandPerm(headPerm, d.dv) };
    }
  };
  const place = (role: TensorRole, srcName: string, ggufName: string) => {
    const shape = role.shape(cfg);
    const src = get(srcName, shape);
    const common = { ggufName, src, ...tilingPerm(role), ...(role.fold ? { op: role.fold } : {}) };
    if (role.kind === 'matrix') {
      // PyTorch [out, in] -> ggml {in, out}.
      const [out, inp] = shape as [number, number];
      plans.push({ ...common, ne: [inp, out], type: weightType(), rows: out, rowLen: inp });
    } else if (role.kind === 'conv') {
      // [conv_dim, 1, K] -> ggml {K, conv_dim}, always F32.
      const [rows, , k] = shape as [number, number, number];
      plans.push({ ...common, ne: [k, rows], type: GgmlType.F32, rows, rowLen: k });
    } else {
      // 1-D, always F32.
      plans.push({ ...common, ne: [shape[0]!], type: GgmlType.F32, rows: shape[0]!, rowLen: 1 });
    }
  };
  const layer = (i: number, srcPrefix: string, type: LayerType) => {
    for (const r of layerRoles(type)) place(r, `${srcPrefix}${r.hf}`, `blk.${i}.${r.gguf}`);
  };

  const hasHead = ckpt.tensors.has(LM_HEAD_ROLE.hf);
  if (!hasHead && !cfg.tieWordEmbeddings) {
    // llama.cpp would silently fall back to token_embd as the output head.
    throw new ConvertError(`${ckpt.dir}: tie_word_embeddings is false but lm_head.weight is missing`);
  }
  place(modelRole('embed'), modelRole('embed').hf, modelRole('embed').gguf);
  cfg.layerTypes.forEach((t, i) => layer(i, `layers.${i}.`, t));

  if (withMtp) {
    if (!ckpt.hasMtp) throw new ConvertError(`${ckpt.dir}: --mtp asked for, but the checkpoint has no mtp.* tensors`);
    if (cfg.mtpNumHiddenLayers !== 1) throw new ConvertError(`${ckpt.dir}: mtp_num_hidden_layers = ${cfg.mtpNumHiddenLayers}; only 1 is supported`);
    const L = cfg.numLayers;
    layer(L, 'mtp.layers.0.', 'full_attention');
    for (const r of mtpRoles()) place(r, r.hf, `blk.${L}.nextn.${r.gguf}`);
  }

  place(modelRole('final_norm'), modelRole('final_norm').hf, modelRole('final_norm').gguf);
  if (hasHead) place(LM_HEAD_ROLE, LM_HEAD_ROLE.hf, LM_HEAD_ROLE.gguf);

  const leftover = [...ckpt.tensors.keys()].filter((k) => !used.has(k) && (withMtp || !k.startsWith('mtp.')));
  if (leftover.length > 0) {
    throw new ConvertError(`${ckpt.dir}: unexpected tensor(s) with no GGUF mapping: ${leftover.slice(0, 5).join(', ')}${leftover.length > 5 ? ', ...' : ''}`);
  }
  if (isQuantDtype(dtype)) {
    const blockCount = cfg.numLayers + (withMtp ? cfg.mtpNumHiddenLayers : 0);
    const nGqa = Math.trunc(cfg.numHeads / cfg.numKvHeads);
    const types = planQuantTypes(dtype, plans.map((p) => ({ name: p.ggufName, ne: p.ne })), blockCount, nGqa);
    for (const p of plans) p.type = types.get(p.ggufName) ?? p.type;
  }
  return plans;
}

/** Add the qwen35 metadata and vocabulary to a writer. */
export function addMetadata(w: GgufWriter, ckpt: Checkpoint, vocab: GgufVocab, dtype: OutDtype, withMtp: boolean, name?: string): void {
  const cfg = ckpt.config;
  const d = dims(cfg);
  const arch = 'qwen35';
  const rotDims = Math.round(cfg.headDim * cfg.partialRotaryFactor);
  const sections = [...cfg.mropeSection];
  if (sections.length > 4) throw new ConvertError(`${ckpt.dir}/config.json: mrope_section has ${sections.length} entries (at most 4)`);
  while (sections.length < 4) sections.push(0);

  w.addString('general.architecture', arch);
  w.addString('general.type', 'model');
  w.addString('general.name', name ?? basename(resolve(ckpt.dir)));
  w.addU32('general.file_type', fileTypeOf(dtype));
  w.addU32('general.quantization_version', 2);

  w.addU32(`${arch}.block_count`, cfg.numLayers + (withMtp ? cfg.mtpNumHiddenLayers : 0));
  w.addU32(`${arch}.context_length`, cfg.maxPositionEmbeddings);
  w.addU32(`${arch}.embedding_length`, d.H);
  w.addU32(`${arch}.feed_forward_length`, d.I);
  w.addU32(`${arch}.attention.head_count`, d.nh);
  w.addU32(`${arch}.attention.head_count_kv`, d.nkv);
  w.addU32(`${arch}.attention.key_length`, d.hd);
  w.addU32(`${arch}.attention.value_length`, d.hd);
  w.addF32(`${arch}.attention.layer_norm_rms_epsilon`, cfg.rmsNormEps);
  w.addF32(`${arch}.rope.freq_base`, cfg.ropeTheta);
  w.addU32(`${arch}.rope.dimension_count`, rotDims);
  w.addArray(`${arch}.rope.dimension_sections`, GgufValueType.INT32, sections);
  w.addU32(`${arch}.ssm.conv_kernel`, d.kc);
  w.addU32(`${arch}.ssm.state_size`, d.dk);
  w.addU32(`${arch}.ssm.group_count`, d.nk);
  w.addU32(`${arch}.ssm.time_step_rank`, d.nv);
  w.addU32(`${arch}.ssm.inner_size`, d.valueDim);
  w.addU32(`${arch}.full_attention_interval`, fullAttentionInterval(cfg));
  if (withMtp) w.addU32(`${arch}.nextn_predict_layers`, cfg.mtpNumHiddenLayers);

  w.addString('tokenizer.ggml.model', 'gpt2');
  w.addString('tokenizer.ggml.pre', 'qwen35');
  w.addArray('tokenizer.ggml.tokens', GgufValueType.STRING, vocab.tokens);
  w.addArray('tokenizer.ggml.token_type', GgufValueType.INT32, vocab.tokenTypes);
  w.addArray('tokenizer.ggml.merges', GgufValueType.STRING, vocab.merges);
  w.addU32('tokenizer.ggml.eos_token_id', vocab.eosId);
  w.addU32('tokenizer.ggml.padding_token_id', vocab.padId);
  w.addU32('tokenizer.ggml.bos_token_id', vocab.bosId);
  w.addBool('tokenizer.ggml.add_bos_token', false);
  if (vocab.chatTemplate !== undefined) w.addString('tokenizer.chat_template', vocab.chatTemplate);
}

// ---------------------------------------------------------------------------------------------
// Streaming tensor data

const CHUNK_ELEMS = 4 << 20; // ~16 MiB of f32 per chunk

class SourceFiles {
  private fds = new Map<string, number>();
  fd(file: string): number {
    let fd = this.fds.get(file);
    if (fd === undefined) {
      try {
        fd = openSync(file, 'r');
      } catch (err) {
        throw new ConvertError(`${file}: ${err instanceof Error ? err.message : String(err)}`);
      }
      this.fds.set(file, fd);
    }
    return fd;
  }
  read(file: string, position: number, into: Uint8Array): void {
    const fd = this.fd(file);
    let done = 0;
    while (done < into.length) {
      const n = failingAs(`reading ${file}`, () => readSync(fd, into, done, into.length - done, position + done));
      if (n === 0) throw new ConvertError(`${file}: unexpected end of file at byte ${position + done}`);
      done += n;
    }
  }
  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}

const ELEM_BYTES = { F32: 4, BF16: 2, F16: 2 } as const;
const SAME_TYPE = { F32: GgmlType.F32, BF16: GgmlType.BF16, F16: GgmlType.F16 } as const;

/** One piece of a tensor's output (whole rows): final bytes, or f32 rows still to encode as the plan's type. */
type Piece = { bytes: Uint8Array } | { vals: Float32Array; r0: number };

/** The rows of one piece of a tensor split into pieces of about `chunkElems` values (at least one row). */
function rowsPerPiece(rowLen: number, chunkElems: number): number {
  return Math.max(1, Math.floor(chunkElems / rowLen));
}

/**
 * The plan's output piece by piece. `owned`: every piece gets buffers of its own (for pieces that
 * are queued); otherwise the buffers are reused and a piece is valid until the next one.
 */
function* tensorPieces(plan: TensorPlan, files: SourceFiles, chunkElems: number, owned: boolean): Generator<Piece> {
  const { src, rows, rowLen } = plan;
  const eb = ELEM_BYTES[src.dtype];
  if (src.nbytes !== rows * rowLen * eb) {
    throw new ConvertError(`${src.file}: tensor ${src.name} holds ${src.nbytes} bytes, expected ${rows * rowLen * eb}`);
  }
  const rowsPerChunk = rowsPerPiece(rowLen, chunkElems);
  const passthrough = !plan.op && !plan.colPerm && SAME_TYPE[src.dtype] === plan.type;
  const raw = new Uint8Array(Math.min(rows, rowsPerChunk) * rowLen * eb);
  const f32 = new Float32Array(passthrough ? 0 : Math.min(rows, rowsPerChunk) * rowLen);
  const rowTmp = plan.colPerm ? new Float32Array(rowLen) : null;
  for (let r0 = 0; r0 < rows; r0 += rowsPerChunk) {
    const n = Math.min(rowsPerChunk, rows - r0);
    // Read source rows, coalescing runs of consecutive source rows into one read.
    let i = 0;
    while (i < n) {
      const s0 = plan.rowPerm ? plan.rowPerm[r0 + i]! : r0 + i;
      let run = 1;
      while (i + run < n && (plan.rowPerm ? plan.rowPerm[r0 + i + run]! : r0 + i + run) === s0 + run) run++;
      const rowBytes = rowLen * eb;
      files.read(src.file, src.offset + s0 * rowBytes, raw.subarray(i * rowBytes, (i + run) * rowBytes));
      i += run;
    }
    const count = n * rowLen;
    if (passthrough) {
      // Same element type in and out, no transform: the (row-permuted) source bytes are the output.
      const bytes = raw.subarray(0, count * eb);
      yield { bytes: owned ? bytes.slice() : bytes };
      continue;
    }
    const vals = f32.subarray(0, count);
    decodeToF32(src.dtype, raw, vals, count);
    if (plan.op === 'plus_one') for (let k = 0; k < count; k++) vals[k] = vals[k]! + 1;
    else if (plan.op === 'neg_exp') for (let k = 0; k < count; k++) vals[k] = -Math.exp(vals[k]!);
    if (plan.colPerm && rowTmp) {
      for (let r = 0; r < n; r++) {
        const row = vals.subarray(r * rowLen, (r + 1) * rowLen);
        rowTmp.set(row);
        for (let c = 0; c < rowLen; c++) row[c] = rowTmp[plan.colPerm[c]!]!;
      }
    }
    yield { vals: owned ? vals.slice() : vals, r0 };
  }
}

/** Whether the plan's values are checked before and after encoding (see checkFinite, checkScales). */
const checked = (plan: TensorPlan) => plan.type !== GgmlType.F32 && plan.type !== GgmlType.BF16;

/** Encode rows in this thread, checked. */
function encodePiece(plan: TensorPlan, vals: Float32Array, r0: number): Uint8Array {
  if (checked(plan)) checkFinite(plan, vals, r0);
  const out = encodeAs(plan.type, vals);
  if (checked(plan)) checkScales(plan, out, r0);
  return out;
}

/**
 * F16 and the quantized types cannot hold non-finite weights or, in their f16 scales, values
 * beyond the f16 range: refuse them (llama-quantize fails its row validation on them too).
 */
function checkFinite(plan: TensorPlan, vals: Float32Array, r0: number): void {
  for (let k = 0; k < vals.length; k++) {
    if (!Number.isFinite(vals[k]!)) {
      throw new ConvertError(`${plan.src.file}: tensor ${plan.src.name} (${plan.ggufName}) has a non-finite value (${vals[k]}) in row ${r0 + Math.floor(k / plan.rowLen)}; cannot write it as ${ggmlTypeName(plan.type)}`);
    }
  }
}

function checkScales(plan: TensorPlan, out: Uint8Array, r0: number): void {
  const b = firstNonFiniteBlock(plan.type, out);
  if (b >= 0) {
    const row = r0 + Math.floor(b / (plan.rowLen / GGML_CODECS[plan.type].block));
    throw new ConvertError(`${plan.src.file}: tensor ${plan.src.name} (${plan.ggufName}) row ${row}: values beyond the f16 range of ${ggmlTypeName(plan.type)}'s scales`);
  }
}

/** One conversion in progress: the plans, the writer (header written to a temporary file) and the sources. */
interface WriteJob {
  plans: TensorPlan[];
  w: GgufWriter;
  files: SourceFiles;
  tmp: string;
  t0: number;
  /** Append the next bytes of `p` to the temporary file and count them. */
  put(p: TensorPlan, bytes: Uint8Array): void;
}

/**
 * The temporary file a conversion to `outFile` writes (beside it, renamed when complete). One
 * place for the name: `bench convert` removes it when a signal ends the process.
 */
export function partialFileOf(outFile: string): string {
  const abs = resolve(outFile);
  return join(dirname(abs), `.${basename(abs)}.${process.pid}.partial`);
}

/**
 * Refuse an output that is one of the inputs (the same device and inode): by path, also through a
 * linked directory, the rename at the end would replace the checkpoint's file with the GGUF; a link to
 * an input or a hard link of one would survive the rename, but naming one is surely a mistake. Refuse
 * too a file not there yet whose name the checkpoint's loader reads in its directory (a GGUF written
 * as DIR/tokenizer.json or DIR/chat_template.jinja would be read back as part of the model).
 */
function checkOutputIsNoInput(ckpt: Checkpoint, outFile: string): void {
  const why = outputClashWithModel(ckpt, outFile);
  if (why !== null) throw new ConvertOutputError(why);
}

/**
 * `step`, a read, write or rename of a conversion's files: a failed system call becomes a
 * ConvertIoError, `${what} failed: <the errno in words>` (`writing F failed: no space left on device (ENOSPC)`).
 */
function failingAs<T>(what: string, step: () => T): T {
  try {
    return step();
  } catch (err) {
    const why = errnoText(err);
    if (why === null) throw err;
    throw new ConvertIoError(`${what} failed: ${why}`);
  }
}

/** Remove a temporary file, whatever happens (a failure to remove it must not hide why it is removed). */
function removeQuietly(file: string): void {
  try {
    rmSync(file, { force: true });
  } catch { /* the caller reports what is left */ }
}

function startWrite(ckpt: Checkpoint, outFile: string, opts: ConvertOptions): WriteJob {
  const t0 = performance.now();
  checkOutputIsNoInput(ckpt, outFile);
  const withMtp = opts.mtp ?? false;
  const plans = planTensors(ckpt, opts.dtype, withMtp);
  const vocab = buildVocab(ckpt.dir, ckpt.config);
  const w = new GgufWriter();
  addMetadata(w, ckpt, vocab, opts.dtype, withMtp);
  for (const p of plans) w.addTensor(p.ggufName, p.ne, p.type);
  const total = w.tensorInfos.reduce((a, t) => a + t.nbytes, 0);
  const tmp = partialFileOf(outFile);
  try {
    w.open(tmp);
  } catch (err) {
    w.abort();
    removeQuietly(tmp); // (when the header write failed)
    const code = (err as NodeJS.ErrnoException).code;
    if (typeof code !== 'string') throw err; // not the file system's
    // Not created (a directory that takes no files, a name too long once decorated): the path's
    // fault. Created, but the header did not fit (a full disk, a file-size limit): a write failure.
    if ((err as NodeJS.ErrnoException).syscall === 'open') throw new ConvertOutputError(`cannot create the temporary file ${tmp} (${code})`);
    throw new ConvertIoError(`writing ${tmp} failed: ${errnoText(err)}`);
  }
  let done = 0;
  const put = (p: TensorPlan, bytes: Uint8Array) => {
    failingAs(`writing ${tmp}`, () => w.writeTensor(p.ggufName, bytes));
    done += bytes.length;
    opts.onProgress?.(done, total, p.ggufName);
  };
  return { plans, w, files: new SourceFiles(), tmp, t0, put };
}

/**
 * Complete the file and move it into place (nothing is awaited after the rename). `threads`: the
 * quantizer threads the write had (none ran when it had nothing to quantize).
 */
function finishWrite(job: WriteJob, outFile: string, opts: ConvertOptions, threads: number): ConvertResult {
  job.files.close();
  failingAs(`writing ${job.tmp}`, () => job.w.close());
  const fileBytes = failingAs(`writing ${job.tmp}`, () => statSync(job.tmp).size);
  failingAs(`renaming ${job.tmp} to ${outFile}`, () => renameSync(job.tmp, outFile));
  return {
    outFile,
    dtype: opts.dtype,
    tensorCount: job.plans.length,
    fileBytes,
    tensorTypes: new Map(job.plans.map((p) => [p.ggufName, ggmlTypeName(p.type)])),
    quantizerThreads: pooledPieces(job.plans) > 0 ? threads : 0,
    seconds: (performance.now() - job.t0) / 1000,
  };
}

/** Close everything and remove the temporary file; never throws (the error that led here is the one to report). */
function abortWrite(job: WriteJob): void {
  try {
    job.files.close();
  } catch { /* closing a read descriptor cannot lose anything */ }
  try {
    job.w.abort();
  } catch { /* the file is removed below all the same */ }
  removeQuietly(job.tmp);
}

/** Write every tensor in this thread, one piece per step (the caller may yield between steps). */
function* writeSteps(job: WriteJob): Generator<void> {
  for (const p of job.plans) {
    for (const piece of tensorPieces(p, job.files, CHUNK_ELEMS, false)) {
      job.put(p, 'bytes' in piece ? piece.bytes : encodePiece(p, piece.vals, piece.r0));
      yield;
    }
  }
}

/** Write a GGUF for an already loaded checkpoint, in this thread. The file appears atomically (temp + rename). */
export function writeGguf(ckpt: Checkpoint, outFile: string, opts: ConvertOptions): ConvertResult {
  const job = startWrite(ckpt, outFile, opts);
  try {
    for (const _ of writeSteps(job));
    return finishWrite(job, outFile, opts, 1);
  } catch (err) {
    abortWrite(job);
    throw err;
  }
}

/** Rows per piece handed to a quantizer worker (~4 MiB of f32): small enough to spread one tensor over the pool. */
const POOL_CHUNK_ELEMS = 1 << 20;

/** Whether the plan's pieces go to the quantizer workers (the block types; the float types are encoded here). */
const pooled = (p: TensorPlan) => GGML_CODECS[p.type].block > 1;

/** The pieces writeWithPool hands to the workers: more workers than these would have nothing to do. */
function pooledPieces(plans: readonly TensorPlan[]): number {
  let n = 0;
  for (const p of plans) if (pooled(p)) n += Math.ceil(p.rows / rowsPerPiece(p.rowLen, POOL_CHUNK_ELEMS));
  return n;
}

/**
 * The quantizer workers a conversion starts: `threads` (the caller's cap; the CLI's is the usable
 * CPUs), but no more than the pieces there are to quantize (none for a float dtype).
 */
export function quantizerWorkers(plans: readonly TensorPlan[], threads: number): number {
  return Math.max(1, Math.min(threads, pooledPieces(plans)));
}

/** Write every tensor, the block-quantized pieces encoded by the pool's workers. */
async function writeWithPool(job: WriteJob, pool: EncodePool): Promise<void> {
  const queue: Array<{ plan: TensorPlan; bytes: Promise<Uint8Array> }> = [];
  const drain = async (keep: number) => {
    while (queue.length > keep) {
      const q = queue.shift()!;
      job.put(q.plan, await q.bytes);
    }
  };
  for (const p of job.plans) {
    const toPool = pooled(p);
    for (const piece of tensorPieces(p, job.files, toPool ? POOL_CHUNK_ELEMS : CHUNK_ELEMS, true)) {
      let bytes: Promise<Uint8Array>;
      if ('bytes' in piece) bytes = Promise.resolve(piece.bytes);
      else if (!toPool) bytes = Promise.resolve(encodePiece(p, piece.vals, piece.r0));
      else {
        checkFinite(p, piece.vals, piece.r0);
        const r0 = piece.r0;
        bytes = pool.encode(p.type, piece.vals).then((out) => { checkScales(p, out, r0); return out; });
      }
      bytes.catch(() => {}); // observed when drained; a failure must not be an unhandled rejection meanwhile
      queue.push({ plan: p, bytes });
      await drain(2 * pool.size);
      // A turn of the event loop per piece, so a signal handler runs (pieces the workers do not
      // encode never wait on them).
      await new Promise((r) => setImmediate(r));
    }
  }
  await drain(0);
}

/**
 * writeGguf with the block-quantized pieces encoded by worker threads (quantizerWorkers: at most
 * `threads`, at most the pieces to quantize; the same bytes; in this thread when that is 1 or no
 * compiled worker exists). At most two pieces per worker are in flight, so memory stays bounded.
 * The event loop runs between pieces, in this thread too (so a signal handler can run). Every way
 * out, an error before the first tensor included, ends the workers: a live worker keeps the process
 * from exiting. They are ended before the rename, so nothing is awaited once the file is in place.
 */
export async function writeGgufParallel(ckpt: Checkpoint, outFile: string, opts: ConvertOptions): Promise<ConvertResult> {
  const job = startWrite(ckpt, outFile, opts);
  let pool: EncodePool | null = null;
  try {
    pool = EncodePool.create(quantizerWorkers(job.plans, opts.threads ?? 1));
    if (pool) await writeWithPool(job, pool);
    else for (const _ of writeSteps(job)) await new Promise((r) => setImmediate(r));
    const workers = pool?.size ?? 1;
    await pool?.close();
    pool = null;
    return finishWrite(job, outFile, opts, workers);
  } catch (err) {
    abortWrite(job);
    throw err;
  } finally {
    await pool?.close();
  }
}

/** Load the checkpoint at `modelPath` and convert it to `outFile`. */
export async function convertCheckpoint(modelPath: string, outFile: string, opts: ConvertOptions): Promise<ConvertResult> {
  const ckpt = await loadCheckpoint(modelPath, { mtp: opts.mtp ?? false });
  return writeGgufParallel(ckpt, outFile, opts);
}
