// Mutations of a GGUF file written by `bench convert`, aimed at the fields ggufLayout located:
// truncation at every KV / tensor-info boundary and in the data, huge string and array lengths and
// counts, unknown value / item / tensor types, dimension counts and dimensions, unaligned,
// overlapping and out-of-file offsets, the alignment, version and magic, bools, duplicate keys and
// tensor names, malformed UTF-8.
import { flipBits, overwriteBytes, setU32, setU64, setU8, truncate, type Mutated } from './bytes.js';
import type { BaseSet } from './base.js';
import type { CaseRng } from './random.js';

export function ggufMutation(base: BaseSet, rng: CaseRng): { family: string; desc: string; bytes: Buffer } {
  const g = base.gguf;
  const L = base.ggufLayout;
  const family = rng.weighted([
    ['bitflip', 2], ['bitflip-header', 2], ['overwrite', 1], ['truncate-boundary', 3], ['truncate-data', 1], ['string-length', 2],
    ['array-count', 2], ['counts', 1], ['value-type', 1], ['item-type', 1], ['n-dims', 1], ['dim', 1], ['tensor-type', 1],
    ['tensor-offset', 2], ['alignment', 1], ['version', 0.5], ['bool', 0.5], ['duplicate-key', 1], ['duplicate-tensor', 1], ['bad-utf8', 1],
  ] as const);
  const r = (m: Mutated) => ({ family, desc: m.desc, bytes: m.bytes });
  const kvAt = () => rng.pick(L.kv);
  const tensorAt = () => rng.pick(L.tensors);
  switch (family) {
    case 'bitflip': return r(flipBits(g, rng));
    case 'bitflip-header': return r(flipBits(g, rng, 0, L.headerEnd));
    case 'overwrite': return r(overwriteBytes(g, rng, 0, L.headerEnd));
    case 'truncate-boundary': {
      const cuts: Array<[number, string]> = [[4, 'after the magic'], [8, 'after the version'], [16, 'after the tensor count'], [24, 'after the kv count'], [L.headerEnd, 'at the end of the tensor infos'], [L.dataStart, 'at the data start']];
      for (const kv of L.kv) {
        cuts.push([kv.start, `at the start of key ${kv.key}`], [kv.typeAt, `before the type of ${kv.key}`], [kv.valueAt, `before the value of ${kv.key}`], [kv.end, `at the end of ${kv.key}`]);
        if (kv.countAt !== undefined) cuts.push([kv.countAt + 4, `inside the array count of ${kv.key}`], [Math.floor((kv.valueAt + kv.end) / 2), `inside the array ${kv.key}`]);
      }
      for (const t of L.tensors) {
        cuts.push([t.start, `at tensor info ${t.name}`], [t.nDimsAt, `before the dims of ${t.name}`], [t.typeAt, `before the type of ${t.name}`], [t.offsetAt + 3, `inside the offset of ${t.name}`], [t.end, `after tensor info ${t.name}`], [t.data[0], `at the data of ${t.name}`], [t.data[1] - 1, `one byte short of the end of ${t.name}'s data`]);
      }
      const [at, where] = rng.pick(cuts);
      return r(truncate(g, at, where));
    }
    case 'truncate-data': return r(truncate(g, L.dataStart + rng.int(g.length - L.dataStart), 'inside the data section'));
    case 'string-length': {
      const strs: Array<[number, number, string]> = [
        ...L.kv.map((k) => [k.keyLenAt, k.keyBytes[1] - k.keyBytes[0], `the key length of ${k.key}`] as [number, number, string]),
        ...L.kv.filter((k) => k.strLenAt !== undefined).map((k) => [k.strLenAt!, Number(g.readBigUInt64LE(k.strLenAt!)), `the ${k.type === 9 ? 'first string of' : 'string length of'} ${k.key}`] as [number, number, string]),
        ...L.tensors.map((t) => [t.nameLenAt, t.nameBytes[1] - t.nameBytes[0], `the name length of tensor ${t.name}`] as [number, number, string]),
      ];
      const [at, len, what] = rng.pick(strs);
      const v = rng.pick([2n ** 64n - 1n, 2n ** 63n, 2n ** 64n - BigInt(len), BigInt(g.length - at), BigInt(len + 1), BigInt(Math.max(0, len - 1)), 0n, 2n ** 32n]);
      return r(setU64(g, at, v, what));
    }
    case 'array-count': {
      const arrays = L.kv.filter((k) => k.countAt !== undefined);
      const k = rng.pick(arrays);
      const v = rng.pick([2n ** 64n - 1n, 2n ** 64n - 2n, 2n ** 63n, 2n ** 62n, BigInt(k.count! + 1), BigInt(k.count! * 2), 0n, BigInt(Math.max(0, k.count! - 1))]);
      return r(setU64(g, k.countAt!, v, `the element count of array ${k.key}`));
    }
    case 'counts': {
      const which = rng.pick([['the tensor count', L.nTensorsAt, L.tensors.length], ['the kv count', L.nKvAt, L.kv.length]] as const);
      const v = rng.pick([2n ** 64n - 1n, 2n ** 63n, BigInt(which[2] + 1), BigInt(which[2] - 1), 0n, 2n ** 32n + BigInt(which[2])]);
      return r(setU64(g, which[1], v, which[0]));
    }
    case 'value-type': {
      const k = kvAt();
      return r(setU32(g, k.typeAt, rng.pick([13, 255, 9, 8, 0, 10, 0xffffffff]), `the value type of ${k.key}`));
    }
    case 'item-type': {
      const k = rng.pick(L.kv.filter((x) => x.countAt !== undefined));
      return r(setU32(g, k.valueAt, rng.pick([9, 13, 8, 0, 12, 0xffffffff]), `the item type of array ${k.key}`));
    }
    case 'n-dims': {
      const t = tensorAt();
      return r(setU32(g, t.nDimsAt, rng.pick([0, 5, 0xffffffff, t.dimsAt.length + 1, Math.max(0, t.dimsAt.length - 1)]), `the dimension count of ${t.name}`));
    }
    case 'dim': {
      const t = tensorAt();
      const j = rng.int(t.dimsAt.length);
      const d = g.readBigUInt64LE(t.dimsAt[j]!);
      return r(setU64(g, t.dimsAt[j]!, rng.pick([0n, 2n ** 63n, 2n ** 64n - 1n, 2n ** 53n + 1n, 2n ** 32n, d * 2n, d + 1n, d + 32n]), `dimension ${j} of ${t.name}`));
    }
    case 'tensor-type': {
      const t = tensorAt();
      return r(setU32(g, t.typeAt, rng.pick([99, 4, 5, 0xffffffff, 0, 1, 8, 30, 12, 2]), `the ggml type of ${t.name}`));
    }
    case 'tensor-offset': {
      const i = rng.int(L.tensors.length);
      const t = L.tensors[i]!;
      const prev = L.tensors[Math.max(0, i - 1)]!;
      const v = rng.pick([BigInt(t.offset + 1), BigInt(t.offset + L.alignment), BigInt(t.offset - L.alignment), 2n ** 40n, 2n ** 64n - 1n, BigInt(prev.offset), 0n, BigInt(g.length), BigInt(g.length - L.dataStart)]);
      return r(setU64(g, t.offsetAt, v, `the data offset of ${t.name}`));
    }
    case 'alignment': {
      const k = L.kv.find((x) => x.key === 'general.alignment')!;
      return r(setU32(g, k.valueAt, rng.pick([0, 3, 1, 16, 64, 2 ** 31, 0xffffffff, 48]), 'general.alignment'));
    }
    case 'version': return r(rng.chance(0.7) ? setU32(g, L.versionAt, rng.pick([0, 1, 2, 4, 0xffffffff]), 'the version') : setU8(g, rng.int(4), rng.byte(), 'a magic byte'));
    case 'bool': {
      const bools = L.kv.filter((k) => k.type === 7);
      const k = rng.pick(bools);
      return r(setU8(g, k.valueAt, rng.pick([2, 255, 0x80]), `the bool ${k.key}`));
    }
    case 'duplicate-key': {
      const pairs = L.kv.flatMap((a, i) => L.kv.slice(i + 1).filter((b) => b.keyBytes[1] - b.keyBytes[0] === a.keyBytes[1] - a.keyBytes[0]).map((b) => [a, b] as const));
      if (pairs.length === 0) return r(flipBits(g, rng, 0, L.headerEnd));
      const [a, b] = rng.pick(pairs);
      const out = Buffer.from(g);
      g.copy(out, b.keyBytes[0], a.keyBytes[0], a.keyBytes[1]);
      return { family, desc: `rename key ${b.key} to ${a.key} (a duplicate key)`, bytes: out };
    }
    case 'duplicate-tensor': {
      const byLen = new Map<number, typeof L.tensors>();
      for (const t of L.tensors) {
        const n = t.nameBytes[1] - t.nameBytes[0];
        byLen.set(n, [...(byLen.get(n) ?? []), t]);
      }
      const groups = [...byLen.values()].filter((ts) => ts.length > 1);
      const group = rng.pick(groups);
      const a = rng.pick(group);
      const b = rng.pick(group.filter((t) => t !== a));
      const out = Buffer.from(g);
      g.copy(out, b.nameBytes[0], a.nameBytes[0], a.nameBytes[1]);
      return { family, desc: `rename tensor ${b.name} to ${a.name} (a duplicate name)`, bytes: out };
    }
    case 'bad-utf8': {
      const spots: Array<[number, string]> = [
        ...L.kv.map((k) => [k.keyBytes[0] + rng.int(k.keyBytes[1] - k.keyBytes[0]), `in key ${k.key}`] as [number, string]),
        ...L.tensors.map((t) => [t.nameBytes[0] + rng.int(t.nameBytes[1] - t.nameBytes[0]), `in the name of ${t.name}`] as [number, string]),
      ];
      const [at, where] = rng.pick(spots);
      return r(setU8(g, at, rng.pick([0xff, 0x80, 0xc0, 0xfe]), `a byte ${where} (not UTF-8)`));
    }
  }
}
