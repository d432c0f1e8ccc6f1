// Byte-level mutations of a file's contents. Each returns a new buffer (the base is never
// modified) and a one-line description of what it did.
import type { CaseRng } from './random.js';

export interface Mutated {
  bytes: Buffer;
  desc: string;
}

/** Bytes that tend to break parsers when dropped in at random. */
const INTERESTING = [0x00, 0xff, 0x7f, 0x80, 0x22, 0x5c, 0x7b, 0x7d, 0x5b, 0x5d, 0x2c, 0x3a, 0x0a, 0x20, 0x2d, 0x30, 0x39, 0xc0, 0xed];

/** Flips 1..8 random bits inside [lo, hi). */
export function flipBits(base: Buffer, rng: CaseRng, lo = 0, hi = base.length): Mutated {
  const out = Buffer.from(base);
  const n = rng.range(1, 8);
  const at: string[] = [];
  for (let k = 0; k < n && hi > lo; k++) {
    const pos = lo + rng.int(hi - lo);
    const bit = rng.int(8);
    out[pos] = out[pos]! ^ (1 << bit);
    at.push(`${pos}.${bit}`);
  }
  return { bytes: out, desc: `flip ${at.length} bit(s) at ${at.join(',')}` };
}

/** Overwrites 1..16 bytes at a random position in [lo, hi) with random or "interesting" bytes. */
export function overwriteBytes(base: Buffer, rng: CaseRng, lo = 0, hi = base.length): Mutated {
  const out = Buffer.from(base);
  if (hi <= lo) return { bytes: out, desc: 'overwrite nothing (empty range)' };
  const pos = lo + rng.int(hi - lo);
  const n = Math.min(rng.range(1, 16), out.length - pos);
  const interesting = rng.chance(0.5);
  for (let k = 0; k < n; k++) out[pos + k] = interesting ? rng.pick(INTERESTING) : rng.byte();
  return { bytes: out, desc: `overwrite ${n} byte(s) at ${pos} with ${interesting ? 'parser-significant' : 'random'} bytes` };
}

/** Keeps only the first `n` bytes. */
export function truncate(base: Buffer, n: number, where: string): Mutated {
  const len = Math.max(0, Math.min(n, base.length));
  return { bytes: Buffer.from(base.subarray(0, len)), desc: `truncate to ${len} bytes (${where})` };
}

/** Inserts bytes at `pos`. */
export function insertBytes(base: Buffer, pos: number, bytes: Uint8Array, what: string): Mutated {
  return { bytes: Buffer.concat([base.subarray(0, pos), bytes, base.subarray(pos)]), desc: `insert ${what} at ${pos}` };
}

/** Deletes 1..16 bytes at a random position. */
export function deleteBytes(base: Buffer, rng: CaseRng): Mutated {
  const pos = rng.int(base.length);
  const n = Math.min(rng.range(1, 16), base.length - pos);
  return { bytes: Buffer.concat([base.subarray(0, pos), base.subarray(pos + n)]), desc: `delete ${n} byte(s) at ${pos}` };
}

export function setU64(base: Buffer, pos: number, v: bigint, what: string): Mutated {
  const out = Buffer.from(base);
  out.writeBigUInt64LE(BigInt.asUintN(64, v), pos);
  return { bytes: out, desc: `set ${what} (u64 at ${pos}) to ${BigInt.asUintN(64, v)}` };
}

export function setU32(base: Buffer, pos: number, v: number, what: string): Mutated {
  const out = Buffer.from(base);
  out.writeUInt32LE(v >>> 0, pos);
  return { bytes: out, desc: `set ${what} (u32 at ${pos}) to ${v >>> 0}` };
}

export function setU8(base: Buffer, pos: number, v: number, what: string): Mutated {
  const out = Buffer.from(base);
  out[pos] = v & 0xff;
  return { bytes: out, desc: `set ${what} (byte at ${pos}) to ${v & 0xff}` };
}

/** Malformed UTF-8 sequences: a lone continuation byte, an overlong '/', a surrogate, a cut 3-byte sequence, 0xff. */
export const BAD_UTF8: ReadonlyArray<readonly [string, number[]]> = [
  ['a lone continuation byte', [0x80]],
  ['an overlong encoding', [0xc0, 0xaf]],
  ['an encoded surrogate', [0xed, 0xa0, 0x80]],
  ['a cut 3-byte sequence', [0xe2, 0x82]],
  ['byte 0xff', [0xff]],
];
