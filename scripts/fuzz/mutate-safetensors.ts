// Mutations of a safetensors file: byte damage aimed at its structure (the length prefix, the JSON
// header, each tensor's data boundaries) and header edits (dtypes, shapes, data_offsets,
// duplicate, missing and renamed tensors, metadata, padding), re-encoded around the same data.
import { flipBits, overwriteBytes, setU64, truncate } from './bytes.js';
import { safetensorsLayout, type BaseDir, type BaseSet, type SafetensorsLayout } from './base.js';
import { buf, fromMutated, type Change } from './change.js';
import { BAD_VALUES, mutateJsonDoc, mutateJsonText, pathStr, renderDuplicate, renderWith, renderWithout, type JsonPath } from './json-mutations.js';
import type { CaseRng } from './random.js';

type Pad = 'spaces' | 'nul' | 'none';

/** A safetensors file from header JSON text and a data section. */
function encodeSafetensors(headerText: string | Buffer, data: Buffer, pad: Pad = 'spaces'): Buffer {
  let h = typeof headerText === 'string' ? buf(headerText) : headerText;
  const padded = Math.ceil(h.length / 8) * 8;
  if (pad !== 'none' && padded !== h.length) h = Buffer.concat([h, Buffer.alloc(padded - h.length, pad === 'nul' ? 0 : 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  return Buffer.concat([len, h, data]);
}

const BAD_DTYPES: ReadonlyArray<readonly [string, string]> = [
  ['"F8_E4M3"', '"F8_E4M3"'], ['"I64"', '"I64"'], ['"F64"', '"F64"'], ['"U8"', '"U8"'], ['"bf16"', '"bf16"'],
  ['""', '""'], ['5', '5'], ['null', 'null'], ['["BF16"]', '["BF16"]'], ['"BF16"', '"BF16"'], ['"F16"', '"F16"'], ['"F32"', '"F32"'],
];

function tensorNames(layout: SafetensorsLayout): string[] {
  return layout.tensors.map((t) => t.name);
}

export function safetensorsChange(dir: BaseDir, base: BaseSet, rng: CaseRng): Change {
  const shardNames = [...dir.files.keys()].filter((f) => f.endsWith('.safetensors'));
  const file = rng.pick(shardNames);
  const bytes = dir.files.get(file)!;
  const L = file === 'model.safetensors' && dir === base.single ? base.safetensors : safetensorsLayout(bytes);
  const header = L.header;
  const names = tensorNames(L);
  const reencode = (family: string, headerText: string | Buffer, desc: string, pad: Pad = 'spaces'): Change =>
    ({ family, desc, file, bytes: encodeSafetensors(headerText, L.data, pad) });
  const family = rng.weighted([
    ['bitflip', 2], ['overwrite', 1], ['multi', 1], ['truncate-length', 1], ['truncate-header', 1], ['truncate-tensor', 2],
    ['truncate-random', 1], ['header-length', 2], ['dtype', 2], ['shape', 2], ['offsets', 3], ['duplicate-tensor', 1],
    ['missing-tensor', 1], ['rename-tensor', 1], ['metadata', 1], ['header-json', 2], ['header-text', 1], ['padding', 1], ['remove-file', 0.3],
  ] as const);
  switch (family) {
    case 'bitflip': {
      const region = rng.pick(['anywhere', 'header', 'data'] as const);
      const [lo, hi] = region === 'header' ? [0, L.dataStart] : region === 'data' ? [L.dataStart, bytes.length] : [0, bytes.length];
      const m = flipBits(bytes, rng, lo, hi);
      return { family, desc: `${m.desc} (${region})`, file, bytes: m.bytes };
    }
    case 'overwrite': return fromMutated(family, file, overwriteBytes(bytes, rng, 0, rng.chance(0.7) ? L.dataStart : bytes.length));
    case 'multi': {
      let cur = bytes;
      const parts: string[] = [];
      const n = rng.range(2, 4);
      for (let k = 0; k < n; k++) {
        const m = rng.chance(0.5) ? flipBits(cur, rng, 0, L.dataStart) : overwriteBytes(cur, rng, 0, L.dataStart);
        cur = m.bytes;
        parts.push(m.desc);
      }
      return { family, desc: parts.join('; '), file, bytes: cur };
    }
    case 'truncate-length': return fromMutated(family, file, truncate(bytes, rng.range(0, 7), 'inside the 8-byte header length'));
    case 'truncate-header': return fromMutated(family, file, truncate(bytes, rng.range(8, L.dataStart - 1), 'inside the JSON header'));
    case 'truncate-tensor': {
      const t = rng.pick(L.tensors);
      const atEnd = rng.chance(0.5);
      const delta = rng.pick([0, 0, -1, 1]);
      return fromMutated(family, file, truncate(bytes, (atEnd ? t.end : t.start) + delta, `${delta === 0 ? 'at' : delta < 0 ? 'one byte before' : 'one byte after'} the ${atEnd ? 'end' : 'start'} of ${t.name}'s data`));
    }
    case 'truncate-random': return fromMutated(family, file, truncate(bytes, rng.int(bytes.length), 'random point'));
    case 'header-length': {
      const n = BigInt(L.headerLen);
      const v = rng.pick([2n ** 63n, 2n ** 64n - 1n, 2n ** 32n, 0n, 1n, 2n, 7n, n - 1n, n + 1n, n + 8n, BigInt(bytes.length - 8), BigInt(bytes.length), 100n * 1024n * 1024n - 1n]);
      return fromMutated(family, file, setU64(bytes, 0, v, 'the header length'));
    }
    case 'dtype': {
      const name = rng.pick(names);
      const [what, raw] = rng.pick(BAD_DTYPES);
      return reencode(family, renderWith(header, [name, 'dtype'], raw, 0), `set the dtype of ${name} to ${what}`);
    }
    case 'shape': {
      const name = rng.pick(names);
      const shape = (header[name] as { shape: number[] }).shape;
      const choice = rng.pick(['transpose', 'flatten', 'prepend-1', 'drop-last', 'grow', 'dim-bad', 'shape-bad', 'nine-dims'] as const);
      let raw: string;
      let what: string;
      switch (choice) {
        case 'transpose': raw = JSON.stringify([...shape].reverse()); what = 'its reverse'; break;
        case 'flatten': raw = JSON.stringify([shape.reduce((a, b) => a * b, 1)]); what = 'one flat dimension'; break;
        case 'prepend-1': raw = JSON.stringify([1, ...shape]); what = 'a leading 1 added'; break;
        case 'drop-last': raw = JSON.stringify(shape.slice(0, -1)); what = 'the last dimension dropped'; break;
        case 'grow': { const s = [...shape]; s[0] = s[0]! + 1; raw = JSON.stringify(s); what = 'the first dimension + 1'; break; }
        case 'nine-dims': raw = JSON.stringify([1, 1, 1, 1, 1, 1, 1, 1, ...shape]); what = `${shape.length + 8} dimensions`; break;
        case 'dim-bad': {
          const k = rng.int(shape.length);
          const [w, r] = rng.pick(BAD_VALUES);
          return reencode(family, renderWith(header, [name, 'shape', k], r, 0), `set dimension ${k} of ${name}'s shape to ${w}`);
        }
        case 'shape-bad': {
          const [w, r] = rng.pick(BAD_VALUES);
          return reencode(family, renderWith(header, [name, 'shape'], r, 0), `set the shape of ${name} to ${w}`);
        }
      }
      return reencode(family, renderWith(header, [name, 'shape'], raw, 0), `set the shape of ${name} to ${raw} (${what})`);
    }
    case 'offsets': {
      const i = rng.int(L.tensors.length);
      const t = L.tensors[i]!;
      const [b, e] = [t.start - L.dataStart, t.end - L.dataStart];
      const size = e - b;
      const dataSize = L.data.length;
      const prev = L.tensors[(i + L.tensors.length - 1) % L.tensors.length]!;
      const options: Array<[string, string]> = [
        ['shifted by 1 byte (misaligned)', `[${b + 1}, ${e + 1}]`],
        ['shifted by 2 bytes', `[${b + 2}, ${e + 2}]`],
        ['shifted by 4 bytes', `[${b + 4}, ${e + 4}]`],
        ['reversed', `[${e}, ${b}]`],
        ['negative begin', `[-2, ${e}]`],
        ['negative both', `[${-size}, 0]`],
        ['past the end of the file', `[${dataSize - size + 2}, ${dataSize + 2}]`],
        ['far past the end', `[${b + 2 ** 40}, ${e + 2 ** 40}]`],
        ['end 2^64', `[0, 18446744073709551616]`],
        ['end 2^53', `[${b}, 9007199254740992]`],
        ['zero length', `[${b}, ${b}]`],
        ['overlapping the previous tensor', `[${prev.start - L.dataStart}, ${prev.start - L.dataStart + size}]`],
        ['at the very end of the data', `[${dataSize - size}, ${dataSize}]`],
        ['three numbers', `[${b}, ${e}, 0]`],
        ['one number', `[${b}]`],
        ['strings', `["${b}", "${e}"]`],
        ['fractional', `[${b + 0.5}, ${e + 0.5}]`],
        ['an object', `{"begin": ${b}, "end": ${e}}`],
      ];
      const [what, raw] = rng.pick(options);
      return reencode(family, renderWith(header, [t.name, 'data_offsets'], raw, 0), `set data_offsets of ${t.name} to ${raw} (${what})`);
    }
    case 'duplicate-tensor': {
      const name = rng.pick(names);
      const other = rng.pick(names);
      const same = rng.chance(0.5);
      return reencode(family, renderDuplicate(header, [name], 0, same ? undefined : JSON.stringify(header[other])),
        `write tensor ${name} twice in the header (${same ? 'same entry' : `second copy with ${other}'s entry`})`);
    }
    case 'missing-tensor': {
      const name = rng.pick(names);
      return reencode(family, renderWithout(header, [name], 0), `remove tensor ${name} from the header`);
    }
    case 'rename-tensor': {
      const name = rng.pick(names);
      const renames: Array<[string, string]> = [
        ['without its prefix', name.replace(/^model\.language_model\.|^model\./, '')],
        ['to a layer beyond the config', name.replace(/layers\.\d+\./, 'layers.99.')],
        ['with a newline', `${name}\n`],
        ['with control characters', `${name}\u0000\u001b[31m`],
        ['to a 100000-character name', 'x'.repeat(100_000)],
        ['to an empty name', ''],
        ['into the vision tower', `model.visual.${name}`],
        ['to an MTP name', `mtp.${name}`],
        ['with a lone surrogate', `${name}\ud800`],
      ];
      const [what, next] = rng.pick(renames);
      const entries = Object.entries(header).map(([k, v]) => [k === name ? next : k, v] as const);
      const renamed = '{' + entries.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(',') + '}';
      return reencode(family, renamed, `rename tensor ${name} ${what}`);
    }
    case 'metadata': {
      const [what, raw] = rng.pick(BAD_VALUES);
      const at: JsonPath = rng.chance(0.5) ? ['__metadata__'] : ['__metadata__', 'format'];
      return reencode(family, renderWith(header, at, raw, 0), `set ${pathStr(at)} to ${what}`);
    }
    case 'header-json': {
      const m = mutateJsonDoc(header, rng, 0);
      return reencode(family, m.text, `header: ${m.desc}`);
    }
    case 'header-text': {
      const m = mutateJsonText(buf(JSON.stringify(header)), rng);
      return reencode(family, m.bytes, `header: ${m.desc}`);
    }
    case 'padding': {
      const pad = rng.pick(['nul', 'none'] as const);
      const extra = pad === 'none' ? rng.pick(['', ' ', '  ', '   ']) : '';
      return reencode(family, JSON.stringify(header) + extra, pad === 'nul' ? 'pad the header with NUL bytes' : `header of ${JSON.stringify(header).length + extra.length} bytes, unpadded (data start unaligned)`, pad);
    }
    case 'remove-file': return { family, desc: 'remove the file', file, bytes: null };
  }
}
