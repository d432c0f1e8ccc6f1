// Where every field of a (valid) GGUF file sits: the fuzzer aims its structural mutations at
// these offsets. Walks the base file written by `bench convert`; trusts it.

export interface GgufKvLayout {
  key: string;
  start: number;
  /** Offset of the key's u64 length. */
  keyLenAt: number;
  keyBytes: [number, number];
  typeAt: number;
  type: number;
  /** Offset of the value (for a string: its u64 length; for an array: its item type). */
  valueAt: number;
  /** Arrays: offset of the u64 count, the item type, the count, and where the first items start. */
  countAt?: number;
  itemType?: number;
  count?: number;
  /** Strings (and string arrays: the first item): offset of the u64 length. */
  strLenAt?: number;
  end: number;
}

export interface GgufTensorLayout {
  name: string;
  start: number;
  nameLenAt: number;
  nameBytes: [number, number];
  nDimsAt: number;
  dimsAt: number[];
  typeAt: number;
  offsetAt: number;
  /** Data offset relative to the data start, and absolute data range. */
  offset: number;
  data: [number, number];
  end: number;
}

export interface GgufLayout {
  size: number;
  versionAt: number;
  nTensorsAt: number;
  nKvAt: number;
  kv: GgufKvLayout[];
  tensors: GgufTensorLayout[];
  /** End of the last tensor info, and the aligned data start. */
  headerEnd: number;
  dataStart: number;
  alignment: number;
}

const SCALAR_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const TYPE_BYTES: Record<number, { block: number; bytes: number }> = { 0: { block: 1, bytes: 4 }, 1: { block: 1, bytes: 2 }, 8: { block: 32, bytes: 34 }, 30: { block: 1, bytes: 2 } };

export function ggufLayout(buf: Buffer): GgufLayout {
  let p = 8;
  const u32 = () => { const v = buf.readUInt32LE(p); p += 4; return v; };
  const u64 = () => { const v = Number(buf.readBigUInt64LE(p)); p += 8; return v; };
  const str = () => { const n = u64(); const s = buf.toString('utf8', p, p + n); p += n; return s; };
  const nTensors = u64();
  const nKv = u64();
  const kv: GgufKvLayout[] = [];
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const start = p;
    const keyLenAt = p;
    const key = str();
    const keyBytes: [number, number] = [keyLenAt + 8, p];
    const typeAt = p;
    const type = u32();
    const valueAt = p;
    const e: GgufKvLayout = { key, start, keyLenAt, keyBytes, typeAt, type, valueAt, end: 0 };
    if (type === 9) {
      e.itemType = u32();
      e.countAt = p;
      e.count = u64();
      if (e.itemType === 8) {
        e.strLenAt = p;
        for (let j = 0; j < e.count; j++) str();
      } else p += e.count * SCALAR_SIZE[e.itemType]!;
    } else if (type === 8) {
      e.strLenAt = p;
      str();
    } else {
      if (key === 'general.alignment') alignment = buf.readUInt32LE(p);
      p += SCALAR_SIZE[type]!;
    }
    e.end = p;
    kv.push(e);
  }
  const infos: Array<{ info: Omit<GgufTensorLayout, 'data'>; nbytes: number }> = [];
  for (let i = 0; i < nTensors; i++) {
    const start = p;
    const nameLenAt = p;
    const name = str();
    const nameBytes: [number, number] = [nameLenAt + 8, p];
    const nDimsAt = p;
    const nd = u32();
    const dimsAt: number[] = [];
    let numel = 1;
    for (let j = 0; j < nd; j++) { dimsAt.push(p); numel *= u64(); }
    const typeAt = p;
    const type = u32();
    const offsetAt = p;
    const offset = u64();
    const t = TYPE_BYTES[type];
    if (!t) throw new Error(`fuzz: base GGUF has tensor type ${type}, which the layout walker does not size`);
    infos.push({ info: { name, start, nameLenAt, nameBytes, nDimsAt, dimsAt, typeAt, offsetAt, offset, end: p }, nbytes: (numel / t.block) * t.bytes });
  }
  const headerEnd = p;
  const dataStart = Math.ceil(p / alignment) * alignment;
  const tensors: GgufTensorLayout[] = infos.map(({ info, nbytes }) => ({
    ...info, data: [dataStart + info.offset, dataStart + info.offset + nbytes],
  }));
  return { size: buf.length, versionAt: 4, nTensorsAt: 8, nKvAt: 16, kv, tensors, headerEnd, dataStart, alignment };
}
