// The bounds-checked GGUF reader on damaged files: each problem is one GgufError naming the file
// and the key or tensor, never a RangeError from reading past the buffer.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GgmlType, GgufValueType, GgufWriter } from '../src/convert/gguf-writer.js';
import { GgufError, parseGguf } from '../src/model/gguf-reader.js';

let dir: string;
let good: Buffer;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'lumen-gguf-r-'));
  const w = new GgufWriter();
  w.addString('general.architecture', 'test');
  w.addArray('t.ints', GgufValueType.INT32, [1, 2, 3]);
  w.addBool('t.flag', true);
  w.addTensor('a', [8], GgmlType.F32);
  w.addTensor('b', [4], GgmlType.F32);
  const file = path.join(dir, 'good.gguf');
  w.open(file);
  w.writeTensor('a', new Uint8Array(32));
  w.writeTensor('b', new Uint8Array(16));
  w.close();
  good = readFileSync(file);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Offset of the first occurrence of `s` in the good file. */
const at = (s: string) => good.indexOf(Buffer.from(s));

function gguf(bytes: Buffer): string {
  const file = path.join(dir, 'bad.gguf');
  writeFileSync(file, bytes);
  try {
    parseGguf(file);
  } catch (err) {
    expect(err).toBeInstanceOf(GgufError);
    const msg = (err as Error).message;
    expect(msg.startsWith(`${file}: `), msg).toBe(true);
    expect(msg).not.toContain('\n');
    return msg.slice(file.length + 2);
  }
  throw new Error('expected a GgufError');
}

describe('GGUF reader', () => {
  it('reads the good file', () => {
    const g = parseGguf(path.join(dir, 'good.gguf'));
    expect(g.tensorOrder).toEqual(['a', 'b']);
    expect(g.tensors.get('b')).toMatchObject({ ne: [4], type: GgmlType.F32, offset: 32, nbytes: 16 });
    expect(g.kv.get('t.ints')).toMatchObject({ type: GgufValueType.ARRAY, itemType: GgufValueType.INT32, value: [1, 2, 3] });
  });

  it('names the field at fault', () => {
    const b = () => Buffer.from(good);
    expect(gguf(Buffer.from('GGUX'))).toMatch(/not a GGUF file/);
    expect(gguf(Buffer.alloc(0))).toMatch(/an empty file \(0 bytes\), not a GGUF file$/);
    expect(gguf(good.subarray(0, 30))).toMatch(/^the tensor count is 2 \(at offset 8\), but at most 0 tensor infos fit/);
    expect(gguf(good.subarray(0, at('t.flag') + 3))).toMatch(/^length of the key of metadata entry #3 is 6 \(at offset \d+\), but at most 3 bytes fit/);
    expect(gguf(good.subarray(0, at('t.flag') + 8))).toMatch(/^truncated: the value type of t\.flag needs 4 bytes at offset \d+, but the file ends at \d+/);
    let x = b();
    x.writeBigUInt64LE(2n ** 64n - 1n, at('general.architecture') - 8);
    expect(gguf(x)).toMatch(/^length of the key of metadata entry #\d+ is 18446744073709551615 \(at offset \d+\), but at most \d+ bytes fit/);
    x = b();
    x.writeBigUInt64LE(2n ** 63n, at('t.ints') + 't.ints'.length + 8);
    expect(gguf(x)).toMatch(/^the length of array t\.ints is 9223372036854775808/);
    x = b();
    x[at('t.flag') + 't.flag'.length + 4] = 2;
    expect(gguf(x)).toMatch(/^the value of t\.flag is a bool with byte value 2/);
    x = b();
    x.write('t.ints', at('t.flag') - 0, 'latin1'); // same length: a duplicate key
    expect(gguf(x)).toMatch(/^metadata key t\.ints appears twice/);
    x = b();
    const bInfo = good.lastIndexOf(Buffer.from([1, 0, 0, 0, 0, 0, 0, 0, 0x62])); // name length 1, "b"
    x.writeBigUInt64LE(33n, bInfo + 9 + 4 + 8 + 4);
    expect(gguf(x)).toMatch(/^tensor b has data offset 33, not a multiple of the alignment 32/);
    x = b();
    x.writeBigUInt64LE(0n, bInfo + 9 + 4 + 8 + 4); // b on top of a
    expect(gguf(x)).toMatch(/^tensor b data at offset 0 overlaps tensor a|^tensor a data at offset 0 overlaps tensor b/);
    x = b();
    x.writeUInt32LE(99, bInfo + 9 + 4 + 8);
    expect(gguf(x)).toMatch(/^tensor b has unknown ggml type 99/);
    // The last tensor (16 bytes) is padded to 32: cutting into the padding is harmless, cutting into the data is not.
    writeFileSync(path.join(dir, 'short-pad.gguf'), good.subarray(0, good.length - 16));
    expect(parseGguf(path.join(dir, 'short-pad.gguf')).tensors.size).toBe(2);
    expect(gguf(good.subarray(0, good.length - 17))).toMatch(/^tensor b data \[\d+, \d+\) lies past the end of the file/);
  });

  it('knows IQ4_NL (ggml type 20: 32 values in 18 bytes) and IQ4_XS (23: 256 values in 136 bytes)', () => {
    const w = new GgufWriter();
    w.addString('general.architecture', 'test');
    w.addTensor('nl', [64, 3], GgmlType.IQ4_NL);
    w.addTensor('xs', [512, 2], GgmlType.IQ4_XS);
    const file = path.join(dir, 'iq4.gguf');
    w.open(file);
    w.writeTensor('nl', new Uint8Array(2 * 3 * 18));
    w.writeTensor('xs', new Uint8Array(2 * 2 * 136));
    w.close();
    const g = parseGguf(file);
    expect(g.tensors.get('nl')).toMatchObject({ type: 20, nbytes: 108 });
    expect(g.tensors.get('xs')).toMatchObject({ type: 23, nbytes: 544 });
    // Rows that are not whole blocks, and data past the end, are errors naming the tensor.
    const bytes = readFileSync(file);
    const xsInfo = bytes.indexOf(Buffer.from([2, 0, 0, 0, 0, 0, 0, 0, 0x78, 0x73])); // name length 2, "xs"
    let x = Buffer.from(bytes);
    x.writeBigUInt64LE(320n, xsInfo + 10 + 4); // ne[0] = 320: not a multiple of 256
    expect(gguf(x)).toMatch(/^tensor xs has row length 320, not a multiple of the IQ4_XS block \(256\)/);
    x = Buffer.from(bytes);
    x.writeBigUInt64LE(48n, bytes.indexOf(Buffer.from([2, 0, 0, 0, 0, 0, 0, 0, 0x6e, 0x6c])) + 10 + 4); // nl: 48 values
    expect(gguf(x)).toMatch(/^tensor nl has row length 48, not a multiple of the IQ4_NL block \(32\)/);
    expect(gguf(bytes.subarray(0, bytes.length - 100))).toMatch(/^tensor xs data \[\d+, \d+\) lies past the end of the file/);
  });
});
