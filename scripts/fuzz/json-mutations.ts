// Mutations of JSON documents: a value anywhere (or at a chosen key) replaced by a hostile one,
// keys deleted or duplicated, and text-level damage (truncation at structural characters,
// malformed UTF-8 inside strings, a byte-order mark, the whole document replaced).
import { BAD_UTF8, insertBytes, truncate, type Mutated } from './bytes.js';
import type { CaseRng } from './random.js';

export type JsonPath = ReadonlyArray<string | number>;

const PLACEHOLDER = '\u0000FUZZ\u0000';
const PLACEHOLDER_LITERAL = JSON.stringify(PLACEHOLDER);
const DUP_KEY = '\u0000DUP\u0000';
const DUP_LITERAL = JSON.stringify(DUP_KEY);

const NESTING = 100_000;

/** Hostile replacement values, as raw JSON text (some are not JSON at all: NaN, Infinity). */
export const BAD_VALUES: ReadonlyArray<readonly [string, string]> = [
  ['NaN', 'NaN'],
  ['Infinity', 'Infinity'],
  ['-Infinity', '-Infinity'],
  ['-1', '-1'],
  ['0', '0'],
  ['-0', '-0'],
  ['0.5', '0.5'],
  ['1.5', '1.5'],
  ['1e308', '1e308'],
  ['1e400 (parses as Infinity)', '1e400'],
  ['-1e400', '-1e400'],
  ['2^31', '2147483648'],
  ['2^32', '4294967296'],
  ['2^53 + 1', '9007199254740993'],
  ['2^64', '18446744073709551616'],
  ['-2^63', '-9223372036854775808'],
  ['1e-320 (subnormal)', '1e-320'],
  ['a string', '"fuzz"'],
  ['an empty string', '""'],
  ['true', 'true'],
  ['false', 'false'],
  ['null', 'null'],
  ['an empty array', '[]'],
  ['an array of numbers', '[1, 2]'],
  ['an empty object', '{}'],
  ['an object', '{"a": 1}'],
  [`${NESTING} nested arrays`, '['.repeat(NESTING) + ']'.repeat(NESTING)],
  [`${NESTING} nested objects`, '{"a":'.repeat(NESTING) + '1' + '}'.repeat(NESTING)],
  ['a 1 MiB string', JSON.stringify('x'.repeat(1 << 20))],
  ['a string with control characters', '"a\\nb\\u0000c\\u001b[31m"'],
  ['a string with a lone surrogate', '"\\ud800"'],
];

/** Every path in a document (root excluded), depth first, at most `limit`. */
export function allPaths(doc: unknown, limit = 50_000): JsonPath[] {
  const out: JsonPath[] = [];
  const walk = (v: unknown, p: Array<string | number>) => {
    if (out.length >= limit) return;
    if (Array.isArray(v)) {
      v.forEach((x, i) => { out.push([...p, i]); walk(x, [...p, i]); });
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) { out.push([...p, k]); walk(x, [...p, k]); }
    }
  };
  walk(doc, []);
  return out;
}

export function pathStr(p: JsonPath): string {
  if (p.length === 0) return '(the whole document)';
  return p.map((k, i) => (typeof k === 'number' ? `[${k}]` : /^[A-Za-z_][\w.-]*$/.test(k) ? `${i ? '.' : ''}${k}` : `[${JSON.stringify(k)}]`)).join('');
}

export function getAt(doc: unknown, p: JsonPath): unknown {
  let v = doc;
  for (const k of p) {
    if (typeof v !== 'object' || v === null) return undefined;
    v = (v as Record<string | number, unknown>)[k];
  }
  return v;
}

function parentOf(doc: unknown, p: JsonPath): Record<string | number, unknown> {
  const parent = getAt(doc, p.slice(0, -1));
  if (typeof parent !== 'object' || parent === null) throw new Error(`fuzz: no container at ${pathStr(p)}`);
  return parent as Record<string | number, unknown>;
}

function stringify(doc: unknown, indent: number): string {
  return indent > 0 ? JSON.stringify(doc, null, indent) : JSON.stringify(doc);
}

/** The document with the value at `p` replaced by raw JSON text. */
export function renderWith(doc: unknown, p: JsonPath, raw: string, indent: number): string {
  if (p.length === 0) return raw;
  const copy = structuredClone(doc);
  parentOf(copy, p)[p[p.length - 1]!] = PLACEHOLDER;
  return stringify(copy, indent).replace(PLACEHOLDER_LITERAL, () => raw);
}

/** The document without the member or element at `p`. */
export function renderWithout(doc: unknown, p: JsonPath, indent: number): string {
  const copy = structuredClone(doc);
  const parent = parentOf(copy, p);
  const k = p[p.length - 1]!;
  if (Array.isArray(parent)) parent.splice(k as number, 1);
  else delete parent[k];
  return stringify(copy, indent);
}

/** The document with the object member at `p` written twice (the copy right after it). */
export function renderDuplicate(doc: unknown, p: JsonPath, indent: number, value?: string): string {
  const copy = structuredClone(doc);
  const parent = parentOf(copy, p);
  const key = p[p.length - 1]!;
  if (Array.isArray(parent) || typeof key !== 'string') throw new Error('fuzz: duplicate needs an object member');
  const rebuilt: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(parent)) {
    rebuilt[k] = v;
    if (k === key) rebuilt[DUP_KEY] = value === undefined ? v : PLACEHOLDER;
  }
  for (const k of Object.keys(parent)) delete parent[k];
  Object.assign(parent, rebuilt);
  let text = stringify(copy, indent).replace(DUP_LITERAL, () => JSON.stringify(key));
  if (value !== undefined) text = text.replace(PLACEHOLDER_LITERAL, () => value);
  return text;
}

/** Replaces the value at a path (chosen from `paths`) with a hostile value. */
export function badValueAt(doc: unknown, paths: readonly JsonPath[], rng: CaseRng, indent: number): { text: string; desc: string } {
  const p = rng.pick(paths);
  const [what, raw] = rng.pick(BAD_VALUES);
  return { text: renderWith(doc, p, raw, indent), desc: `set ${pathStr(p)} to ${what}` };
}

/** One structural edit at a random path: a hostile value, a deletion, or a duplicated key. */
export function mutateJsonDoc(doc: unknown, rng: CaseRng, indent: number, paths: readonly JsonPath[] = allPaths(doc)): { text: string; desc: string } {
  const kind = rng.weighted([['value', 6], ['delete', 2], ['duplicate', 1], ['root', 1]] as const);
  if (kind === 'root' || paths.length === 0) {
    const [what, raw] = rng.pick(BAD_VALUES);
    return { text: raw, desc: `replace the whole document with ${what}` };
  }
  if (kind === 'value') return badValueAt(doc, paths, rng, indent);
  const p = rng.pick(paths);
  if (kind === 'duplicate' && typeof p[p.length - 1] === 'string') {
    const same = rng.chance(0.5);
    const [what, raw] = rng.pick(BAD_VALUES);
    return {
      text: renderDuplicate(doc, p, indent, same ? undefined : raw),
      desc: `duplicate key ${pathStr(p)} (${same ? 'same value' : `second copy ${what}`})`,
    };
  }
  return { text: renderWithout(doc, p, indent), desc: `delete ${pathStr(p)}` };
}

/** Text-level damage to a JSON file. */
export function mutateJsonText(base: Buffer, rng: CaseRng): Mutated {
  const kind = rng.weighted([['truncate', 3], ['truncate-structural', 3], ['bad-utf8', 2], ['bom', 1], ['replace', 1], ['trailing', 1]] as const);
  switch (kind) {
    case 'truncate':
      return truncate(base, rng.int(base.length), 'random point');
    case 'truncate-structural': {
      const cuts: number[] = [];
      for (let i = 0; i < base.length; i++) {
        const c = base[i]!;
        if (c === 0x7b || c === 0x5b || c === 0x2c || c === 0x3a || c === 0x22) cuts.push(i);
      }
      const at = cuts.length ? rng.pick(cuts) + rng.int(2) : 0;
      return truncate(base, at, `at a structural character (${base[Math.max(0, at - 1)] !== undefined ? JSON.stringify(String.fromCharCode(base[Math.max(0, at - 1)]!)) : 'start'})`);
    }
    case 'bad-utf8': {
      const quotes: number[] = [];
      for (let i = 0; i < base.length; i++) if (base[i] === 0x22) quotes.push(i + 1);
      const [what, seq] = rng.pick(BAD_UTF8);
      return insertBytes(base, quotes.length ? rng.pick(quotes) : 0, Uint8Array.from(seq), `${what} inside a string`);
    }
    case 'bom':
      return insertBytes(base, 0, Uint8Array.from([0xef, 0xbb, 0xbf]), 'a UTF-8 byte-order mark');
    case 'trailing':
      return insertBytes(base, base.length, Buffer.from(rng.pick([' x', '}', ']', ',{}', '\u0000'])), 'trailing garbage');
    case 'replace': {
      const choice = rng.pick(['empty', 'whitespace', 'binary', 'nul'] as const);
      const bytes = choice === 'empty' ? Buffer.alloc(0)
        : choice === 'whitespace' ? Buffer.from(' \n\t ')
          : choice === 'nul' ? Buffer.alloc(64)
            : Buffer.from(Array.from({ length: 64 }, () => rng.byte()));
      return { bytes, desc: `replace the file with ${choice === 'binary' ? '64 random bytes' : choice === 'nul' ? '64 NUL bytes' : `${choice} content`}` };
    }
  }
}
