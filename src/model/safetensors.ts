// safetensors: a bounds-checked header reader and a streaming writer.
//
// File layout: u64 little-endian N, then N bytes of JSON header, then the data section.
// Header: { "__metadata__": {str: str}?, "<name>": {dtype, shape, data_offsets: [begin, end]} },
// offsets relative to the start of the data section.

import { closeSync, fstatSync, openSync, readSync, writeSync } from 'node:fs';
import { duplicateTopLevelKey, parseJsonBytes, preview } from '../util/json.js';
import { displayName } from '../util/text.js';
import { CheckpointError, type DType } from './types.js';

/** Largest header we accept (a real 9B shard header is well under 1 MB). */
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;
/** Most dimensions a tensor may have (Qwen3.5 tensors have at most 3). */
export const MAX_DIMS = 8;

export const DTYPE_SIZE: Record<DType, number> = { BF16: 2, F16: 2, F32: 4 };

export function isDType(s: unknown): s is DType {
  return s === 'BF16' || s === 'F16' || s === 'F32';
}

/** One tensor of a safetensors file, with absolute file offsets. */
export interface SafetensorsEntry {
  name: string;
  dtype: DType;
  shape: number[];
  /** Absolute byte offset of the data in the file. */
  offset: number;
  nbytes: number;
}

export interface SafetensorsHeader {
  file: string;
  fileSize: number;
  /** Absolute offset of the data section (8 + header length). */
  dataStart: number;
  metadata: Record<string, string> | null;
  /** In header order. */
  tensors: Map<string, SafetensorsEntry>;
}

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export function shapeStr(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

/**
 * Reads and validates the header of a safetensors file (synchronous; reads only the header).
 * Every problem is a CheckpointError naming the file and, where relevant, the tensor.
 */
export function readSafetensorsHeader(file: string): SafetensorsHeader {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    throw new CheckpointError(`${file}: cannot open safetensors file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new CheckpointError(`${file}: not a regular file (expected a safetensors file)`);
    const fileSize = st.size;
    if (fileSize < 8) {
      throw new CheckpointError(`${file}: truncated safetensors file (${fileSize} bytes; the length prefix alone needs 8)`);
    }
    const lenBuf = Buffer.alloc(8);
    readExact(fd, lenBuf, 0, file);
    const headerLen = lenBuf.readBigUInt64LE(0);
    if (headerLen >= BigInt(MAX_HEADER_BYTES)) {
      throw new CheckpointError(`${file}: safetensors header length ${headerLen} is not plausible (limit ${MAX_HEADER_BYTES} bytes); not a safetensors file?`);
    }
    const n = Number(headerLen);
    if (n < 2) throw new CheckpointError(`${file}: safetensors header length ${n} is too small for a JSON object`);
    if (8 + n > fileSize) {
      throw new CheckpointError(`${file}: truncated safetensors file: header claims ${n} bytes but the file has only ${fileSize - 8} after the length prefix`);
    }
    const hbuf = Buffer.alloc(n);
    readExact(fd, hbuf, 8, file);
    const parsed = parseJsonBytes(hbuf);
    if (!parsed.ok) throw new CheckpointError(`${file}: safetensors header is ${parsed.reason}`);
    const dup = duplicateTopLevelKey(hbuf.toString('utf8'));
    if (dup !== undefined) throw new CheckpointError(`${file}: tensor ${displayName(dup)} appears twice in the safetensors header`);
    return validateHeader(parsed.value, file, fileSize, 8 + n);
  } finally {
    closeSync(fd);
  }
}

function readExact(fd: number, buf: Buffer, position: number, file: string): void {
  let done = 0;
  while (done < buf.length) {
    const got = readSync(fd, buf, done, buf.length - done, position + done);
    if (got === 0) throw new CheckpointError(`${file}: truncated: unexpected end of file at byte ${position + done}`);
    done += got;
  }
}

function validateHeader(header: unknown, file: string, fileSize: number, dataStart: number): SafetensorsHeader {
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    throw new CheckpointError(`${file}: safetensors header must be a JSON object`);
  }
  const dataSize = fileSize - dataStart;
  let metadata: Record<string, string> | null = null;
  const tensors = new Map<string, SafetensorsEntry>();
  for (const [key, raw] of Object.entries(header as Record<string, unknown>)) {
    if (key === '__metadata__') {
      if (raw !== null && (typeof raw !== 'object' || Array.isArray(raw))) {
        throw new CheckpointError(`${file}: __metadata__ must be an object`);
      }
      for (const [k, v] of Object.entries(raw ?? {})) {
        if (typeof v !== 'string') throw new CheckpointError(`${file}: __metadata__.${displayName(k)} must be a string (got ${preview(v)})`);
      }
      metadata = raw as Record<string, string> | null;
      continue;
    }
    const name = displayName(key);
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      throw new CheckpointError(`${file}: header entry for tensor ${name} is not an object`);
    }
    const e = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    for (const k of ['dtype', 'shape', 'data_offsets'] as const) {
      if (e[k] === undefined) throw new CheckpointError(`${file}: header entry for tensor ${name} has no ${k}`);
    }
    if (!isDType(e.dtype)) {
      throw new CheckpointError(`unknown dtype ${preview(e.dtype)} for tensor ${name} in ${file} (supported: BF16, F16, F32)`);
    }
    if (!Array.isArray(e.shape) || e.shape.length > MAX_DIMS || !e.shape.every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0)) {
      throw new CheckpointError(`${file}: tensor ${name} has an invalid shape ${preview(e.shape)}`);
    }
    const shape = e.shape as number[];
    const off = e.data_offsets;
    if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0)) {
      throw new CheckpointError(`${file}: tensor ${name} has invalid data_offsets ${preview(off)}`);
    }
    const [begin, end] = off as [number, number];
    if (end < begin) {
      throw new CheckpointError(`${file}: tensor ${name} has data_offsets [${begin}, ${end}] with end before begin`);
    }
    const need = numel(shape) * DTYPE_SIZE[e.dtype];
    if (end - begin !== need) {
      throw new CheckpointError(
        `${file}: tensor ${name} spans ${end - begin} bytes but shape ${shapeStr(shape)} x ${e.dtype} needs ${need}`,
      );
    }
    if (end > dataSize) {
      throw new CheckpointError(
        `${file}: tensor ${name} data [${begin}, ${end}) lies past the end of the data section (${dataSize} bytes): file truncated or header corrupt`,
      );
    }
    tensors.set(key, { name: key, dtype: e.dtype, shape: shape.slice(), offset: dataStart + begin, nbytes: need });
  }
  return { file, fileSize, dataStart, metadata, tensors };
}

// ---------------------------------------------------------------------------------------------
// bf16 helpers

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** f32 -> bf16 bits, round to nearest even (NaN stays a quiet NaN). */
export function f32ToBf16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) return ((bits >>> 16) | 0x0040) & 0xffff;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16ToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0]!;
}

/** Converts an f32 array to bf16 bits (round to nearest even). */
export function f32ArrayToBf16(src: Float32Array, dst: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) {
    const b = bits[i]!;
    if ((b & 0x7f800000) === 0x7f800000 && (b & 0x007fffff) !== 0) dst[i] = ((b >>> 16) | 0x0040) & 0xffff;
    else dst[i] = ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
  }
  return dst;
}

function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** Reads one tensor's raw bytes. */
export function readTensorBytes(ref: { file: string; offset: number; nbytes: number }): Buffer {
  const fd = openSync(ref.file, 'r');
  try {
    const buf = Buffer.alloc(ref.nbytes);
    readExact(fd, buf, ref.offset, ref.file);
    return buf;
  } finally {
    closeSync(fd);
  }
}

/** Reads one tensor and converts it to f32 (small tensors; tests and tools). */
export function readTensorF32(ref: { file: string; offset: number; nbytes: number; dtype: DType }): Float32Array {
  const buf = readTensorBytes(ref);
  const n = ref.nbytes / DTYPE_SIZE[ref.dtype];
  const out = new Float32Array(n);
  if (ref.dtype === 'F32') {
    for (let i = 0; i < n; i++) out[i] = buf.readFloatLE(4 * i);
  } else if (ref.dtype === 'BF16') {
    const o32 = new Uint32Array(out.buffer);
    for (let i = 0; i < n; i++) o32[i] = buf.readUInt16LE(2 * i) << 16;
  } else {
    for (let i = 0; i < n; i++) out[i] = f16ToF32(buf.readUInt16LE(2 * i));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writer

export interface TensorSpec {
  name: string;
  dtype: DType;
  shape: number[];
}

/** Header bytes (length prefix + JSON padded with spaces to an 8-byte boundary) and data offsets. */
export function encodeHeader(
  specs: readonly TensorSpec[],
  metadata: Record<string, string> | null = { format: 'pt' },
): { bytes: Buffer; dataBytes: number; offsets: Array<[number, number]> } {
  const obj: Record<string, unknown> = {};
  if (metadata) obj.__metadata__ = metadata;
  let pos = 0;
  const offsets: Array<[number, number]> = [];
  const seen = new Set<string>();
  for (const s of specs) {
    if (seen.has(s.name)) throw new Error(`safetensors writer: duplicate tensor name ${s.name}`);
    seen.add(s.name);
    const nbytes = numel(s.shape) * DTYPE_SIZE[s.dtype];
    obj[s.name] = { dtype: s.dtype, shape: s.shape, data_offsets: [pos, pos + nbytes] };
    offsets.push([pos, pos + nbytes]);
    pos += nbytes;
  }
  let json = Buffer.from(JSON.stringify(obj), 'utf8');
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded !== json.length) json = Buffer.concat([json, Buffer.alloc(padded - json.length, 0x20)]);
  const bytes = Buffer.alloc(8 + json.length);
  bytes.writeBigUInt64LE(BigInt(json.length), 0);
  json.copy(bytes, 8);
  return { bytes, dataBytes: pos, offsets };
}

/**
 * Streaming safetensors writer: the header is written on open; tensor data is then appended
 * with write() in spec order, in chunks of any size (a chunk may span tensors). close() checks
 * that exactly the declared number of bytes arrived. Synchronous I/O; callers reuse chunk buffers
 * freely because each write completes before returning.
 */
export class SafetensorsWriter {
  readonly file: string;
  readonly totalBytes: number;
  private fd: number;
  private written = 0;
  private readonly dataStart: number;
  private readonly ends: number[];
  private readonly names: string[];

  constructor(file: string, specs: readonly TensorSpec[], metadata: Record<string, string> | null = { format: 'pt' }) {
    const { bytes, dataBytes, offsets } = encodeHeader(specs, metadata);
    this.file = file;
    this.fd = openSync(file, 'w');
    this.dataStart = bytes.length;
    this.totalBytes = bytes.length + dataBytes;
    this.ends = offsets.map((o) => o[1]);
    this.names = specs.map((s) => s.name);
    writeAll(this.fd, bytes);
  }

  /** Name of the tensor the next byte belongs to (for diagnostics). */
  get currentTensor(): string | undefined {
    const i = this.ends.findIndex((e) => e > this.written);
    return i < 0 ? undefined : this.names[i];
  }

  write(chunk: Uint8Array): void {
    const dataBytes = this.totalBytes - this.dataStart;
    if (this.written + chunk.length > dataBytes) {
      throw new Error(`safetensors writer: ${this.file}: more data than declared (${this.written + chunk.length} > ${dataBytes})`);
    }
    writeAll(this.fd, chunk);
    this.written += chunk.length;
  }

  /** Writes a typed array's bytes. */
  writeArray(a: Uint16Array | Float32Array | Uint8Array): void {
    this.write(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  }

  close(): void {
    const dataBytes = this.totalBytes - this.dataStart;
    const fd = this.fd;
    this.fd = -1;
    if (fd >= 0) closeSync(fd);
    if (this.written !== dataBytes) {
      throw new Error(`safetensors writer: ${this.file}: wrote ${this.written} data bytes, declared ${dataBytes} (short at tensor ${this.currentTensor})`);
    }
  }

  /** Closes the file without the completeness check (error paths). */
  abort(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }
}

function writeAll(fd: number, data: Uint8Array): void {
  let off = 0;
  while (off < data.length) off += writeSync(fd, data, off, data.length - off);
}

/** Writes a whole safetensors file from in-memory tensors (small files: tests, fixtures). */
export function writeSafetensors(
  file: string,
  tensors: ReadonlyArray<TensorSpec & { data: Uint8Array | Uint16Array | Float32Array }>,
  metadata: Record<string, string> | null = { format: 'pt' },
): number {
  const w = new SafetensorsWriter(file, tensors, metadata);
  try {
    for (const t of tensors) {
      const need = numel(t.shape) * DTYPE_SIZE[t.dtype];
      if (t.data.byteLength !== need) throw new Error(`safetensors writer: tensor ${t.name} has ${t.data.byteLength} bytes, shape needs ${need}`);
      w.writeArray(t.data);
    }
    w.close();
  } catch (err) {
    w.abort();
    throw err;
  }
  return w.totalBytes;
}
