// What counts as a correct outcome of a fuzz case. A load that succeeds must hand over data that
// is in range (checked here independently of the loaders); a load that fails must fail with one
// clear error: a project error class, one line, naming the file, with no stack or raw library text.
import { statSync } from 'node:fs';
import path from 'node:path';
import { UsageError } from '../../src/util/usage-error.js';
import { GgufError, type GgufFile } from '../../src/model/gguf-reader.js';
import { CheckpointError, type Checkpoint } from '../../src/model/types.js';

/** A successful load whose result breaks an invariant. */
export class Violation extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'Violation';
  }
}

/** Text that must never reach a user: V8 / library internals, stack frames. */
const UNCLEAR: ReadonlyArray<readonly [RegExp, string]> = [
  [/^\s*at .*\(.*:\d+:\d+\)/m, 'a stack frame'],
  [/\bat (?:file:\/\/|node:)\S+:\d+:\d+/, 'a stack frame'],
  [/Unexpected token '.*', |JSON at position|is not valid JSON$|Unexpected end of JSON input/, 'a raw JSON.parse message'],
  // (@huggingface/jinja's own "Cannot call something that is not a function" is a template error, not a TypeError.)
  [/Cannot read propert|Cannot set propert|(?<!something that) is not a function|is not iterable|is not a constructor|Cannot convert/, 'a TypeError text'],
  [/Maximum call stack size exceeded/, 'a stack overflow'],
  [/Invalid array length|Invalid string length|out of range index/i, 'a RangeError text'],
];

export const MAX_MESSAGE = 2100;

export type Verdict = { clear: true; errorClass: string; message: string } | { clear: false; errorClass: string; message: string; why: string };

/** Judges an error thrown by a load of the case at `casePath` (a directory or a file). */
export function judgeError(err: unknown, casePath: string): Verdict {
  const errorClass = err instanceof Error ? err.constructor.name : typeof err;
  const message = err instanceof Error ? err.message : String(err);
  const no = (why: string): Verdict => ({ clear: false, errorClass, message, why });
  if (!(err instanceof CheckpointError || err instanceof UsageError || err instanceof GgufError)) {
    return no(`threw ${errorClass}, not a project error class`);
  }
  if (/[\r\n]/.test(message)) return no('the message spans several lines');
  if (message.length > MAX_MESSAGE) return no(`the message is ${message.length} characters long`);
  if (!message.includes(casePath)) return no('the message does not name the file');
  for (const [re, what] of UNCLEAR) if (re.test(message)) return no(`the message contains ${what}`);
  return { clear: true, errorClass, message };
}

const DTYPE_BYTES: Record<string, number> = { BF16: 2, F16: 2, F32: 4 };
const INT32_MAX = 2 ** 31 - 1;

function isPosInt(v: unknown, max = INT32_MAX): boolean {
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0 && v <= max;
}

/** Invariants of a loaded checkpoint in directory `dir`. */
export function checkCheckpoint(ck: Checkpoint, dir: string): void {
  const c = ck.config;
  const bad = (what: string): never => { throw new Violation(`loaded, but ${what}`); };
  const ints: Array<[string, number]> = [
    ['hiddenSize', c.hiddenSize], ['numLayers', c.numLayers], ['intermediateSize', c.intermediateSize], ['numHeads', c.numHeads],
    ['numKvHeads', c.numKvHeads], ['headDim', c.headDim], ['linearNumKeyHeads', c.linearNumKeyHeads], ['linearNumValueHeads', c.linearNumValueHeads],
    ['linearKeyHeadDim', c.linearKeyHeadDim], ['linearValueHeadDim', c.linearValueHeadDim], ['linearConvKernelDim', c.linearConvKernelDim],
    ['vocabSize', c.vocabSize], ['maxPositionEmbeddings', c.maxPositionEmbeddings],
  ];
  for (const [k, v] of ints) if (!isPosInt(v)) bad(`config.${k} = ${v} is not a positive 32-bit integer`);
  for (const [k, v] of [['rmsNormEps', c.rmsNormEps], ['ropeTheta', c.ropeTheta], ['partialRotaryFactor', c.partialRotaryFactor]] as const) {
    if (typeof v !== 'number' || !Number.isFinite(v) || !(Math.fround(v) > 0) || Math.fround(v) === Infinity) bad(`config.${k} = ${v} is not a finite positive float32`);
  }
  if (c.rmsNormEps >= 1) bad(`rmsNormEps = ${c.rmsNormEps}`);
  if (c.partialRotaryFactor > 1) bad(`partialRotaryFactor = ${c.partialRotaryFactor}`);
  const rot = c.headDim * c.partialRotaryFactor;
  if (!Number.isInteger(rot) || rot % 2 !== 0) bad(`the rotary dimension ${rot} is not an even integer`);
  if (c.linearConvKernelDim > 8 || c.linearKeyHeadDim > 512 || c.linearValueHeadDim > 512) bad('linear-attention sizes are beyond the engine limits');
  if (!Array.isArray(c.layerTypes) || c.layerTypes.length !== c.numLayers) bad(`layerTypes has ${c.layerTypes?.length} entries for ${c.numLayers} layers`);
  if (!c.layerTypes.every((t) => t === 'linear_attention' || t === 'full_attention')) bad('layerTypes holds an unknown layer type');
  if (c.numHeads % c.numKvHeads !== 0 || c.linearNumValueHeads % c.linearNumKeyHeads !== 0) bad('head counts do not divide');
  if (!Number.isSafeInteger(c.eosTokenId) || c.eosTokenId < 0 || c.eosTokenId >= c.vocabSize) bad(`eosTokenId ${c.eosTokenId} is outside the vocabulary`);
  if (!c.mropeSection.every((x) => Number.isSafeInteger(x) && x >= 0 && x <= INT32_MAX)) bad('mropeSection holds a bad entry');
  if (!Number.isSafeInteger(c.mtpNumHiddenLayers) || c.mtpNumHiddenLayers < 0) bad(`mtpNumHiddenLayers = ${c.mtpNumHiddenLayers}`);

  const root = path.resolve(dir) + path.sep;
  const sizes = new Map<string, number>();
  for (const s of ck.shards) {
    if (!path.resolve(s).startsWith(root)) bad(`shard ${s} is outside the checkpoint directory`);
    const st = statSync(s);
    if (!st.isFile()) bad(`shard ${s} is not a regular file`);
    sizes.set(s, st.size);
  }
  for (const [name, t] of ck.tensors) {
    const size = sizes.get(t.file);
    if (size === undefined) bad(`tensor ${name} lives in ${t.file}, which is not one of the shards`);
    const unit = DTYPE_BYTES[t.dtype];
    if (unit === undefined) bad(`tensor ${name} has dtype ${t.dtype}`);
    if (!t.shape.every((d) => Number.isSafeInteger(d) && d > 0)) bad(`tensor ${name} has shape [${t.shape.join(', ')}]`);
    const n = t.shape.reduce((a, b) => a * b, 1);
    if (t.nbytes !== n * unit!) bad(`tensor ${name} has nbytes ${t.nbytes}, but its shape and dtype need ${n * unit!}`);
    if (!Number.isSafeInteger(t.offset) || t.offset < 0 || t.offset + t.nbytes > size!) {
      bad(`tensor ${name} data [${t.offset}, ${t.offset + t.nbytes}) is not inside ${t.file} (${size} bytes)`);
    }
  }
  const want = (name: string, shape: number[]) => {
    const t = ck.tensors.get(name);
    if (!t) bad(`tensor ${name} is missing from the loaded checkpoint`);
    if (t!.shape.length !== shape.length || !t!.shape.every((d, i) => d === shape[i])) bad(`tensor ${name} has shape [${t!.shape.join(', ')}], the config implies [${shape.join(', ')}]`);
  };
  const H = c.hiddenSize;
  want('embed_tokens.weight', [c.vocabSize, H]);
  want('norm.weight', [H]);
  if (!c.tieWordEmbeddings) want('lm_head.weight', [c.vocabSize, H]);
  const convDim = 2 * c.linearNumKeyHeads * c.linearKeyHeadDim + c.linearNumValueHeads * c.linearValueHeadDim;
  for (let i = 0; i < c.numLayers; i++) {
    want(`layers.${i}.input_layernorm.weight`, [H]);
    want(`layers.${i}.mlp.down_proj.weight`, [H, c.intermediateSize]);
    if (c.layerTypes[i] === 'full_attention') want(`layers.${i}.self_attn.q_proj.weight`, [2 * c.numHeads * c.headDim, H]);
    else want(`layers.${i}.linear_attn.in_proj_qkv.weight`, [convDim, H]);
  }
}

/** ggml type -> [elements per block, bytes per block] (from the ggml type table). */
const GGML_BLOCKS: Record<number, [number, number]> = {
  0: [1, 4], 1: [1, 2], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24], 8: [32, 34], 9: [32, 36],
  10: [256, 84], 11: [256, 110], 12: [256, 144], 13: [256, 176], 14: [256, 210], 15: [256, 292],
  24: [1, 1], 25: [1, 2], 26: [1, 4], 27: [1, 8], 28: [1, 8], 30: [1, 2],
};

function valueMatches(type: number, v: unknown): boolean {
  if (type === 8) return typeof v === 'string';
  if (type === 7) return typeof v === 'boolean';
  if (type === 10 || type === 11) return typeof v === 'bigint' || Number.isSafeInteger(v);
  if (type >= 0 && type <= 6) return typeof v === 'number' && (type === 6 || Number.isInteger(v));
  if (type === 12) return typeof v === 'number';
  return false;
}

/** Invariants of a parsed GGUF file of `size` bytes. */
export function checkGguf(g: GgufFile, size: number): void {
  const bad = (what: string): never => { throw new Violation(`loaded, but ${what}`); };
  if (g.version !== 3) bad(`version ${g.version}`);
  if (g.buf.length !== size) bad(`the buffer has ${g.buf.length} bytes, the file ${size}`);
  const a = g.alignment;
  if (!Number.isInteger(a) || a <= 0 || (a & (a - 1)) !== 0) bad(`alignment ${a}`);
  if (g.dataStart % a !== 0 || g.dataStart > size) bad(`data start ${g.dataStart}`);
  for (const [key, e] of g.kv) {
    if (e.type === 9) {
      if (!Array.isArray(e.value) || e.itemType === undefined || !e.value.every((x) => valueMatches(e.itemType!, x))) bad(`array ${key} holds values of the wrong type`);
    } else if (!valueMatches(e.type, e.value)) bad(`key ${key} holds a value of the wrong type`);
  }
  if (g.tensorOrder.length !== g.tensors.size) bad('tensor order and tensor map disagree');
  const spans: Array<[number, number, string]> = [];
  for (const [name, t] of g.tensors) {
    const blk = GGML_BLOCKS[t.type];
    if (!blk) bad(`tensor ${name} has type ${t.type}`);
    if (t.ne.length < 1 || t.ne.length > 4 || !t.ne.every((d) => Number.isSafeInteger(d) && d > 0)) bad(`tensor ${name} has dims [${t.ne.join(', ')}]`);
    const n = t.ne.reduce((x, y) => x * y, 1);
    if (t.ne[0]! % blk![0] !== 0) bad(`tensor ${name} row ${t.ne[0]} is not whole blocks`);
    const nbytes = (n / blk![0]) * blk![1];
    if (t.nbytes !== nbytes) bad(`tensor ${name} has nbytes ${t.nbytes}, its dims and type need ${nbytes}`);
    if (t.offset % a !== 0) bad(`tensor ${name} offset ${t.offset} is not aligned`);
    const start = g.dataStart + t.offset;
    if (start + nbytes > size) bad(`tensor ${name} data [${start}, ${start + nbytes}) is not inside the file (${size} bytes)`);
    spans.push([t.offset, t.offset + nbytes, name]);
  }
  spans.sort((x, y) => x[0] - y[0]);
  for (let i = 1; i < spans.length; i++) if (spans[i]![0] < spans[i - 1]![1]) bad(`tensors ${spans[i - 1]![2]} and ${spans[i]![2]} overlap`);
}
