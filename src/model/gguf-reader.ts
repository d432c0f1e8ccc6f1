// A bounds-checked GGUF v3 reader (written from the format description, independent of the
// writer in src/convert): every count, length, offset, type and the alignment is checked against
// the file size before it is used, and every problem is a one-line GgufError naming the file and
// the key or tensor at fault.
//
// Layout: "GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv* | tensor_info* | pad to alignment |
// data. kv = string key, u32 value type, value. tensor_info = string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml type, u64 offset (relative to the data start, a multiple of the alignment).
// Strings are u64 byte length + UTF-8 bytes; arrays are u32 item type + u64 count + items.

import { closeSync, fstatSync, openSync, readFileSync, readSync, statSync } from 'node:fs';
import { displayName, oneLine } from '../util/text.js';

/** A malformed GGUF file; the message names the file and the key or tensor at fault. */
export class GgufError extends Error {
  constructor(message: string) {
    super(oneLine(message));
    this.name = 'GgufError';
  }
}

/** The header runs past the bytes read so far (parseGgufHeader then reads more). */
class GgufTruncated extends GgufError {}

export const GGUF_READER_VERSION = 3;
const DEFAULT_ALIGNMENT = 32;
/** ggml tensors have at most 4 dimensions. */
const MAX_DIMS = 4;

/** GGUF metadata value types (u8 .. f64; 9 is array). */
const VALUE_TYPE_NAMES = ['u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'f32', 'bool', 'string', 'array', 'u64', 'i64', 'f64'];
const TYPE_ARRAY = 9;
const TYPE_UINT32 = 4;
/** Fixed byte size of each scalar value type (strings: the smallest, an empty one). */
const VALUE_SIZE = [1, 1, 2, 2, 4, 4, 4, 1, 8, 0, 8, 8, 8];

/** ggml tensor types this reader knows: elements per block and bytes per block. */
const GGML_TYPES: ReadonlyMap<number, { name: string; block: number; bytes: number }> = new Map([
  [0, { name: 'F32', block: 1, bytes: 4 }],
  [1, { name: 'F16', block: 1, bytes: 2 }],
  [2, { name: 'Q4_0', block: 32, bytes: 18 }],
  [3, { name: 'Q4_1', block: 32, bytes: 20 }],
  [6, { name: 'Q5_0', block: 32, bytes: 22 }],
  [7, { name: 'Q5_1', block: 32, bytes: 24 }],
  [8, { name: 'Q8_0', block: 32, bytes: 34 }],
  [9, { name: 'Q8_1', block: 32, bytes: 36 }],
  [10, { name: 'Q2_K', block: 256, bytes: 84 }],
  [11, { name: 'Q3_K', block: 256, bytes: 110 }],
  [12, { name: 'Q4_K', block: 256, bytes: 144 }],
  [13, { name: 'Q5_K', block: 256, bytes: 176 }],
  [14, { name: 'Q6_K', block: 256, bytes: 210 }],
  [15, { name: 'Q8_K', block: 256, bytes: 292 }],
  [20, { name: 'IQ4_NL', block: 32, bytes: 18 }],
  [23, { name: 'IQ4_XS', block: 256, bytes: 136 }],
  [24, { name: 'I8', block: 1, bytes: 1 }],
  [25, { name: 'I16', block: 1, bytes: 2 }],
  [26, { name: 'I32', block: 1, bytes: 4 }],
  [27, { name: 'I64', block: 1, bytes: 8 }],
  [28, { name: 'F64', block: 1, bytes: 8 }],
  [30, { name: 'BF16', block: 1, bytes: 2 }],
]);

/** A ggml tensor type's name and block geometry, or undefined when this reader does not know it. */
export function ggmlTypeInfo(type: number): { name: string; block: number; bytes: number } | undefined {
  return GGML_TYPES.get(type);
}

export interface GgufKv {
  type: number;
  /** number (u64/i64 beyond 2^53: bigint), boolean, string, or an array of those. */
  value: unknown;
  /** Item type of an array value. */
  itemType?: number;
}

export interface GgufTensor {
  name: string;
  /** ggml order: ne[0] is the contiguous dimension. */
  ne: number[];
  type: number;
  /** Offset relative to the data start. */
  offset: number;
  nbytes: number;
}

export interface GgufFile {
  file: string;
  version: number;
  kv: Map<string, GgufKv>;
  tensors: Map<string, GgufTensor>;
  tensorOrder: string[];
  alignment: number;
  /** Absolute offset of the data section. */
  dataStart: number;
  /** The bytes parsed: the whole file (parseGguf, parseGgufBuffer) or its header (parseGgufHeader). */
  buf: Buffer;
  /** Size of the file in bytes. */
  fileSize: number;
}

/** Bytes of a tensor of type `type` with dimensions `ne`, or a reason it has none. */
export function ggmlTensorBytes(type: number, ne: readonly number[]): number | string {
  const t = GGML_TYPES.get(type);
  if (!t) return `has unknown ggml type ${type}`;
  let n = 1;
  for (const d of ne) n *= d;
  if (!Number.isSafeInteger(n)) return `has ${ne.join(' x ')} elements, too many to address`;
  if ((ne[0] ?? 0) % t.block !== 0) return `has row length ${ne[0]}, not a multiple of the ${t.name} block (${t.block})`;
  const bytes = (n / t.block) * t.bytes;
  if (!Number.isSafeInteger(bytes)) return `needs ${bytes} bytes, too many to address`;
  return bytes;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Sequential little-endian reads, each checked against the end of the buffer. */
class Cursor {
  pos = 0;
  /** `fileSize`: the whole file's size, when `buf` holds only its first bytes (counts are bounded by it). */
  constructor(readonly buf: Buffer, readonly file: string, readonly fileSize = buf.length) {}

  private need(n: number, what: string): void {
    if (n > this.buf.length - this.pos) {
      throw new GgufTruncated(`${this.file}: truncated: ${what} needs ${n} bytes at offset ${this.pos}, but the file ends at ${this.buf.length}`);
    }
  }
  u8(what: string): number { this.need(1, what); return this.buf.readUInt8(this.pos++); }
  u32(what: string): number { this.need(4, what); const v = this.buf.readUInt32LE(this.pos); this.pos += 4; return v; }
  u64(what: string): bigint { this.need(8, what); const v = this.buf.readBigUInt64LE(this.pos); this.pos += 8; return v; }
  remaining(): number { return this.fileSize - this.pos; }

  /** A u64 that must be at most `max` (so it is safe to use as a number). */
  count(what: string, max: number, unit: string): number {
    const at = this.pos;
    const v = this.u64(what);
    if (v > BigInt(max)) {
      throw new GgufError(`${this.file}: ${what} is ${v} (at offset ${at}), but at most ${max} ${unit} fit in the rest of the file`);
    }
    return Number(v);
  }

  str(what: string): string {
    const n = this.count(`length of ${what}`, this.remaining() - 8, 'bytes');
    this.need(n, what);
    const bytes = this.buf.subarray(this.pos, this.pos + n);
    let s: string;
    try {
      s = utf8.decode(bytes);
    } catch {
      throw new GgufError(`${this.file}: ${what} at offset ${this.pos} is not valid UTF-8`);
    }
    this.pos += n;
    return s;
  }

  scalar(type: number, what: string): unknown {
    const b = this.buf;
    const fixed = (n: number) => { this.need(n, what); const at = this.pos; this.pos += n; return at; };
    switch (type) {
      case 0: return b.readUInt8(fixed(1));
      case 1: return b.readInt8(fixed(1));
      case 2: return b.readUInt16LE(fixed(2));
      case 3: return b.readInt16LE(fixed(2));
      case 4: return b.readUInt32LE(fixed(4));
      case 5: return b.readInt32LE(fixed(4));
      case 6: return b.readFloatLE(fixed(4));
      case 7: {
        const at = fixed(1);
        const v = b.readUInt8(at);
        if (v > 1) throw new GgufError(`${this.file}: ${what} is a bool with byte value ${v} at offset ${at} (0 or 1)`);
        return v === 1;
      }
      case 8: return this.str(what);
      case 10: { const v = b.readBigUInt64LE(fixed(8)); return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v; }
      case 11: {
        const v = b.readBigInt64LE(fixed(8));
        return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
      }
      case 12: return b.readDoubleLE(fixed(8));
      default: throw new GgufError(`${this.file}: ${what} has unknown value type ${type}`);
    }
  }
}

function typeName(t: number): string {
  return VALUE_TYPE_NAMES[t] ?? `type ${t}`;
}

/** Reads and validates a whole GGUF file. */
export function parseGguf(file: string): GgufFile {
  let buf: Buffer;
  try {
    if (!statSync(file).isFile()) throw new GgufError(`${file}: not a regular file (expected a GGUF file)`);
    buf = readFileSync(file);
  } catch (err) {
    if (err instanceof GgufError) throw err;
    throw new GgufError(`${file}: cannot read GGUF file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  return parseGgufBuffer(buf, file);
}

/**
 * Reads and validates the header of a GGUF file (metadata and tensor infos, checked against the
 * file's size) without reading the tensor data: the first MiBs, more while the header needs them.
 */
export function parseGgufHeader(file: string): GgufFile {
  let fd: number | undefined;
  try {
    if (!statSync(file).isFile()) throw new GgufError(`${file}: not a regular file (expected a GGUF file)`);
    fd = openSync(file, 'r');
    const size = fstatSync(fd).size;
    for (let n = Math.min(size, HEADER_READ_BYTES); ; n = Math.min(size, n * 4)) {
      const buf = Buffer.alloc(n);
      let got = 0;
      while (got < n) {
        const r = readSync(fd, buf, got, n - got, got);
        if (r === 0) break;
        got += r;
      }
      try {
        return parseGgufBuffer(buf.subarray(0, got), file, size);
      } catch (err) {
        if (!(err instanceof GgufTruncated) || got >= size) throw err;
      }
    }
  } catch (err) {
    if (err instanceof GgufError) throw err;
    throw new GgufError(`${file}: cannot read GGUF file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** First read of parseGgufHeader (a Qwen3.5 vocabulary's metadata is about 10 MB). */
const HEADER_READ_BYTES = 16 << 20;

/**
 * Validates a GGUF file held in memory; `file` names it in errors. `fileSize` (default: the
 * buffer's length) is the size of the whole file when `buf` holds only its first bytes.
 */
export function parseGgufBuffer(buf: Buffer, file: string, fileSize = buf.length): GgufFile {
  try {
    return parseBuffer(buf, file, fileSize);
  } catch (err) {
    // Truncated for real (the whole file was read): a plain GgufError, as every other problem.
    if (err instanceof GgufTruncated && buf.length >= fileSize) throw new GgufError(err.message);
    throw err;
  }
}

function parseBuffer(buf: Buffer, file: string, fileSize: number): GgufFile {
  const c = new Cursor(buf, file, fileSize);
  if (fileSize === 0) throw new GgufError(`${file}: an empty file (0 bytes), not a GGUF file`);
  if (buf.length < 4 || buf.toString('latin1', 0, 4) !== 'GGUF') {
    throw new GgufError(`${file}: not a GGUF file (the first 4 bytes are not "GGUF")`);
  }
  c.pos = 4;
  const version = c.u32('the version');
  if (version !== GGUF_READER_VERSION) throw new GgufError(`${file}: GGUF version ${version} is not supported (this reader reads version ${GGUF_READER_VERSION})`);
  // Smallest tensor info: empty name (8), n_dims (4), one dim (8), type (4), offset (8).
  const nTensors = c.count('the tensor count', Math.floor(Math.max(0, c.remaining() - 8) / 32), 'tensor infos');
  // Smallest kv: empty key (8), type (4), one byte of value.
  const nKv = c.count('the metadata count', Math.floor(c.remaining() / 13), 'key/value pairs');

  const kv = new Map<string, GgufKv>();
  for (let i = 0; i < nKv; i++) {
    const keyAt = c.pos;
    const key = c.str(`the key of metadata entry #${i}`);
    const k = displayName(key);
    if (key.length === 0) throw new GgufError(`${file}: metadata entry #${i} at offset ${keyAt} has an empty key`);
    if (kv.has(key)) throw new GgufError(`${file}: metadata key ${k} appears twice (again at offset ${keyAt})`);
    const type = c.u32(`the value type of ${k}`);
    if (type === TYPE_ARRAY) {
      const itemType = c.u32(`the item type of ${k}`);
      if (itemType === TYPE_ARRAY) throw new GgufError(`${file}: metadata key ${k} is an array of arrays (not supported)`);
      if (itemType >= VALUE_SIZE.length) throw new GgufError(`${file}: metadata key ${k} has unknown array item type ${itemType}`);
      const n = c.count(`the length of array ${k}`, Math.floor(c.remaining() / VALUE_SIZE[itemType]!), `${typeName(itemType)} items`);
      const arr: unknown[] = new Array<unknown>(n);
      for (let j = 0; j < n; j++) arr[j] = c.scalar(itemType, `${k}[${j}]`);
      kv.set(key, { type, itemType, value: arr });
    } else {
      if (type >= VALUE_SIZE.length) throw new GgufError(`${file}: metadata key ${k} has unknown value type ${type}`);
      kv.set(key, { type, value: c.scalar(type, `the value of ${k}`) });
    }
  }

  let alignment = DEFAULT_ALIGNMENT;
  const al = kv.get('general.alignment');
  if (al) {
    const v = al.value;
    if (al.type !== TYPE_UINT32 || typeof v !== 'number' || v === 0 || (v & (v - 1)) !== 0) {
      throw new GgufError(`${file}: general.alignment must be a u32 power of two (got ${typeName(al.type)} ${String(v)})`);
    }
    alignment = v;
  }

  const tensors = new Map<string, GgufTensor>();
  const tensorOrder: string[] = [];
  for (let i = 0; i < nTensors; i++) {
    const nameAt = c.pos;
    const name = c.str(`the name of tensor info #${i}`);
    const t = displayName(name);
    if (name.length === 0) throw new GgufError(`${file}: tensor info #${i} at offset ${nameAt} has an empty name`);
    if (tensors.has(name)) throw new GgufError(`${file}: tensor ${t} appears twice (again at offset ${nameAt})`);
    const nd = c.u32(`the dimension count of tensor ${t}`);
    if (nd < 1 || nd > MAX_DIMS) throw new GgufError(`${file}: tensor ${t} has ${nd} dimensions (1 to ${MAX_DIMS})`);
    const ne: number[] = [];
    for (let j = 0; j < nd; j++) {
      const at = c.pos;
      const d = c.u64(`dimension ${j} of tensor ${t}`);
      if (d < 1n || d > BigInt(Number.MAX_SAFE_INTEGER)) throw new GgufError(`${file}: tensor ${t} has dimension ${j} = ${d} (at offset ${at})`);
      ne.push(Number(d));
    }
    const type = c.u32(`the type of tensor ${t}`);
    const nbytes = ggmlTensorBytes(type, ne);
    if (typeof nbytes === 'string') throw new GgufError(`${file}: tensor ${t} ${nbytes}`);
    const offAt = c.pos;
    const off = c.u64(`the data offset of tensor ${t}`);
    if (off > BigInt(fileSize)) throw new GgufError(`${file}: tensor ${t} has data offset ${off} (at offset ${offAt}), past the end of the file (${fileSize} bytes)`);
    const offset = Number(off);
    if (offset % alignment !== 0) throw new GgufError(`${file}: tensor ${t} has data offset ${offset}, not a multiple of the alignment ${alignment}`);
    tensors.set(name, { name, ne, type, offset, nbytes });
    tensorOrder.push(name);
  }

  const dataStart = Math.ceil(c.pos / alignment) * alignment;
  if (nTensors > 0 && dataStart > fileSize) {
    throw new GgufError(`${file}: truncated: the data section would start at ${dataStart}, past the end of the file (${fileSize} bytes)`);
  }
  const byOffset = [...tensors.values()].sort((a, b) => a.offset - b.offset);
  let prev: GgufTensor | undefined;
  for (const t of byOffset) {
    const end = dataStart + t.offset + t.nbytes;
    if (end > fileSize) {
      throw new GgufError(`${file}: tensor ${displayName(t.name)} data [${dataStart + t.offset}, ${end}) lies past the end of the file (${fileSize} bytes): truncated or corrupt`);
    }
    if (prev && t.offset < prev.offset + prev.nbytes) {
      throw new GgufError(`${file}: tensor ${displayName(t.name)} data at offset ${t.offset} overlaps tensor ${displayName(prev.name)} (${prev.offset}..${prev.offset + prev.nbytes})`);
    }
    prev = t;
  }
  return { file, version, kv, tensors, tensorOrder, alignment, dataStart, buf, fileSize };
}
