// GGUF v3 file writer: header (key/value metadata + tensor infos) built in memory, tensor data
// streamed to disk in order, each tensor aligned to `general.alignment` bytes.
//
// Layout: magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv* | tensor_info* | pad |
// data (each tensor at its info's offset relative to the data start, offsets aligned).
import { closeSync, openSync, writeSync } from 'node:fs';
import { ggmlTensorBytes } from '../model/gguf-reader.js';

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;

/** GGUF metadata value types. */
export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** The ggml tensor types this writer produces. */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
}

export type GgufScalarType = Exclude<GgufValueType, GgufValueType.ARRAY>;

export type GgufValue =
  | { type: GgufScalarType; value: number | bigint | boolean | string }
  | { type: GgufValueType.ARRAY; itemType: GgufScalarType; value: ReadonlyArray<number | bigint | boolean | string> };

export interface GgufTensorInfo {
  name: string;
  /** ggml order: ne[0] is the contiguous (row) dimension. */
  ne: number[];
  type: GgmlType;
  /** Byte offset relative to the start of the data section. */
  offset: number;
  nbytes: number;
}

/** Bytes taken by a tensor of `ne` elements in type `type` (block sizes: the reader's ggml type table). */
export function ggmlNbytes(type: GgmlType, ne: readonly number[]): number {
  const bytes = ggmlTensorBytes(type, ne);
  if (typeof bytes === 'string') throw new Error(`${GgmlType[type] ?? type} tensor [${ne.join(', ')}] ${bytes}`);
  return bytes;
}

export function ggmlTypeName(type: GgmlType): string {
  return GgmlType[type] ?? `type${type}`;
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

/** Growable little-endian byte buffer for the header. */
class ByteSink {
  private buf = Buffer.alloc(1 << 16);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.length + n) cap *= 2;
    const next = Buffer.alloc(cap);
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
  u8(v: number) { this.reserve(1); this.buf.writeUInt8(v, this.length); this.length += 1; }
  i8(v: number) { this.reserve(1); this.buf.writeInt8(v, this.length); this.length += 1; }
  u16(v: number) { this.reserve(2); this.buf.writeUInt16LE(v, this.length); this.length += 2; }
  i16(v: number) { this.reserve(2); this.buf.writeInt16LE(v, this.length); this.length += 2; }
  u32(v: number) { this.reserve(4); this.buf.writeUInt32LE(v, this.length); this.length += 4; }
  i32(v: number) { this.reserve(4); this.buf.writeInt32LE(v, this.length); this.length += 4; }
  f32(v: number) { this.reserve(4); this.buf.writeFloatLE(v, this.length); this.length += 4; }
  f64(v: number) { this.reserve(8); this.buf.writeDoubleLE(v, this.length); this.length += 8; }
  u64(v: number | bigint) { this.reserve(8); this.buf.writeBigUInt64LE(BigInt(v), this.length); this.length += 8; }
  i64(v: number | bigint) { this.reserve(8); this.buf.writeBigInt64LE(BigInt(v), this.length); this.length += 8; }
  str(s: string) {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(bytes.length);
    this.reserve(bytes.length);
    bytes.copy(this.buf, this.length);
    this.length += bytes.length;
  }
  zeros(n: number) { this.reserve(n); this.buf.fill(0, this.length, this.length + n); this.length += n; }
  bytes(): Buffer { return this.buf.subarray(0, this.length); }
}

function writeScalar(sink: ByteSink, type: GgufScalarType, v: number | bigint | boolean | string, key: string): void {
  const num = () => {
    if (typeof v !== 'number') throw new Error(`GGUF key ${key}: expected a number, got ${typeof v}`);
    return v;
  };
  switch (type) {
    case GgufValueType.UINT8: sink.u8(num()); break;
    case GgufValueType.INT8: sink.i8(num()); break;
    case GgufValueType.UINT16: sink.u16(num()); break;
    case GgufValueType.INT16: sink.i16(num()); break;
    case GgufValueType.UINT32: sink.u32(num()); break;
    case GgufValueType.INT32: sink.i32(num()); break;
    case GgufValueType.FLOAT32: sink.f32(num()); break;
    case GgufValueType.FLOAT64: sink.f64(num()); break;
    case GgufValueType.UINT64: sink.u64(typeof v === 'bigint' ? v : num()); break;
    case GgufValueType.INT64: sink.i64(typeof v === 'bigint' ? v : num()); break;
    case GgufValueType.BOOL:
      if (typeof v !== 'boolean') throw new Error(`GGUF key ${key}: expected a boolean`);
      sink.u8(v ? 1 : 0);
      break;
    case GgufValueType.STRING:
      if (typeof v !== 'string') throw new Error(`GGUF key ${key}: expected a string`);
      sink.str(v);
      break;
  }
}

/**
 * Builds a GGUF file: add metadata and tensor infos, then `open()` writes the header and
 * `writeTensor()` streams each tensor's bytes (in the order the tensors were added).
 */
export class GgufWriter {
  readonly alignment: number;
  private readonly kv = new Map<string, GgufValue>();
  private readonly tensors: GgufTensorInfo[] = [];
  private readonly byName = new Map<string, GgufTensorInfo>();
  private dataSize = 0;

  private fd: number | null = null;
  private dataStart = 0;
  private cursor = 0; // bytes of the data section written so far
  private nextTensor = 0;
  private tensorWritten = 0;

  constructor(alignment = GGUF_DEFAULT_ALIGNMENT) {
    if (!Number.isInteger(alignment) || alignment <= 0 || alignment % 8 !== 0) throw new Error(`bad GGUF alignment ${alignment}`);
    this.alignment = alignment;
    this.addU32('general.alignment', alignment);
  }

  add(key: string, value: GgufValue): void {
    if (this.fd !== null) throw new Error('GGUF header already written');
    this.kv.set(key, value);
  }
  addString(key: string, v: string) { this.add(key, { type: GgufValueType.STRING, value: v }); }
  addU32(key: string, v: number) { this.add(key, { type: GgufValueType.UINT32, value: v }); }
  addI32(key: string, v: number) { this.add(key, { type: GgufValueType.INT32, value: v }); }
  addF32(key: string, v: number) { this.add(key, { type: GgufValueType.FLOAT32, value: v }); }
  addBool(key: string, v: boolean) { this.add(key, { type: GgufValueType.BOOL, value: v }); }
  addArray(key: string, itemType: GgufScalarType, v: ReadonlyArray<number | bigint | boolean | string>) {
    this.add(key, { type: GgufValueType.ARRAY, itemType, value: v });
  }

  get metadata(): ReadonlyMap<string, GgufValue> { return this.kv; }
  get tensorInfos(): readonly GgufTensorInfo[] { return this.tensors; }

  /** Declare a tensor; its data must later be written with writeTensor in declaration order. */
  addTensor(name: string, ne: number[], type: GgmlType): GgufTensorInfo {
    if (this.fd !== null) throw new Error('GGUF header already written');
    if (this.byName.has(name)) throw new Error(`duplicate GGUF tensor ${name}`);
    if (ne.length < 1 || ne.length > 4 || ne.some((d) => !Number.isInteger(d) || d <= 0)) {
      throw new Error(`GGUF tensor ${name}: bad shape [${ne.join(', ')}]`);
    }
    const nbytes = ggmlNbytes(type, ne);
    const info: GgufTensorInfo = { name, ne: [...ne], type, offset: this.dataSize, nbytes };
    this.dataSize = alignUp(this.dataSize + nbytes, this.alignment);
    this.tensors.push(info);
    this.byName.set(name, info);
    return info;
  }

  /** Serialize the header (everything before the data section, padding included). */
  headerBytes(): Buffer {
    const s = new ByteSink();
    s.u32(GGUF_MAGIC);
    s.u32(GGUF_VERSION);
    s.u64(this.tensors.length);
    s.u64(this.kv.size);
    for (const [key, v] of this.kv) {
      s.str(key);
      s.u32(v.type);
      if (v.type === GgufValueType.ARRAY) {
        s.u32(v.itemType);
        s.u64(v.value.length);
        for (const item of v.value) writeScalar(s, v.itemType, item, key);
      } else {
        writeScalar(s, v.type, v.value, key);
      }
    }
    for (const t of this.tensors) {
      s.str(t.name);
      s.u32(t.ne.length);
      for (const d of t.ne) s.u64(d);
      s.u32(t.type);
      s.u64(t.offset);
    }
    s.zeros(alignUp(s.length, this.alignment) - s.length);
    return s.bytes();
  }

  /** Total file size once every tensor is written. */
  fileSize(): number {
    return this.headerBytes().length + this.dataSize;
  }

  /** Create the file and write the header. */
  open(path: string): void {
    if (this.fd !== null) throw new Error('GGUF file already open');
    const header = this.headerBytes();
    this.fd = openSync(path, 'w');
    writeAll(this.fd, header);
    this.dataStart = header.length;
    this.cursor = 0;
  }

  /**
   * Append bytes of the current tensor. Call repeatedly until the tensor's nbytes are written;
   * the writer pads to the alignment and moves to the next tensor automatically.
   */
  writeTensor(name: string, chunk: Uint8Array): void {
    if (this.fd === null) throw new Error('GGUF file not open');
    const t = this.tensors[this.nextTensor];
    if (!t) throw new Error(`GGUF: no tensor left to write (got ${name})`);
    if (t.name !== name) throw new Error(`GGUF: expected data for ${t.name}, got ${name}`);
    if (this.tensorWritten + chunk.length > t.nbytes) throw new Error(`GGUF tensor ${name}: more than ${t.nbytes} bytes written`);
    if (this.tensorWritten === 0 && this.cursor !== t.offset) {
      writeAll(this.fd, Buffer.alloc(t.offset - this.cursor));
      this.cursor = t.offset;
    }
    writeAll(this.fd, chunk);
    this.cursor += chunk.length;
    this.tensorWritten += chunk.length;
    if (this.tensorWritten === t.nbytes) {
      this.nextTensor++;
      this.tensorWritten = 0;
    }
  }

  /** Pad the last tensor and close; throws if a tensor was left unwritten. */
  close(): void {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    try {
      if (this.nextTensor !== this.tensors.length) {
        throw new Error(`GGUF: ${this.tensors.length - this.nextTensor} tensor(s) not written (next: ${this.tensors[this.nextTensor]!.name})`);
      }
      if (this.cursor < this.dataSize) writeAll(fd, Buffer.alloc(this.dataSize - this.cursor));
    } finally {
      closeSync(fd);
    }
  }

  /** Close without checks (error paths). */
  abort(): void {
    if (this.fd === null) return;
    try { closeSync(this.fd); } finally { this.fd = null; }
  }

  get dataOffset(): number { return this.dataStart; }
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let off = 0;
  while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
}
