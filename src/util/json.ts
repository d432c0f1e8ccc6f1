// JSON documents from a user's files: strict UTF-8, single-line parse errors with a line and
// column (never a snippet of the input), bounded previews of values, and a duplicate-key scan.

import { isUtf8 } from 'node:buffer';
import { oneLine } from './text.js';

export type JsonResult = { ok: true; value: unknown } | { ok: false; reason: string };

/** A JSON object: not null, not an array. */
export function isJsonObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Byte offset of the first byte that is not part of a well-formed UTF-8 sequence, or -1. */
export function firstInvalidUtf8(buf: Uint8Array): number {
  let i = 0;
  const n = buf.length;
  while (i < n) {
    const b = buf[i]!;
    if (b < 0x80) { i++; continue; }
    let len: number;
    let min: number;
    if (b >= 0xc2 && b <= 0xdf) { len = 2; min = 0x80; }
    else if (b >= 0xe0 && b <= 0xef) { len = 3; min = 0x800; }
    else if (b >= 0xf0 && b <= 0xf4) { len = 4; min = 0x10000; }
    else return i;
    if (i + len > n) return i;
    let cp = b & (0xff >> (len + 1));
    for (let k = 1; k < len; k++) {
      const c = buf[i + k]!;
      if ((c & 0xc0) !== 0x80) return i;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return -1;
}

/** Line and column (1-based) of a UTF-16 index into `text`. */
function lineColumn(text: string, index: number): string {
  let line = 1;
  let lineStart = 0;
  const end = Math.min(index, text.length);
  for (let i = 0; i < end; i++) {
    if (text.charCodeAt(i) === 10) { line++; lineStart = i + 1; }
  }
  return `line ${line}, column ${end - lineStart + 1}`;
}

/** V8's JSON.parse message reworded without the input snippet it may quote. */
function reasonOf(err: unknown, text: string): string {
  const msg = err instanceof Error ? err.message : String(err);
  const at = /^(.*?) at position (\d+)/s.exec(msg);
  if (at) {
    const what = at[1]!.replace(/ in JSON$/, '').replace(/ after JSON$/, ' after the JSON value');
    return `${what.charAt(0).toLowerCase()}${what.slice(1)} at ${lineColumn(text, Number(at[2]))}`;
  }
  const tok = /^Unexpected token '(.*?)', /s.exec(msg);
  if (tok) {
    // A character one cannot see (a control or format character, a zero-width space) by its code point.
    const ch = tok[1]!;
    if ([...ch].length === 1 && /^[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\u00a0\u2000-\u200a\u3000]$/u.test(ch)) {
      return `unexpected character U+${ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}${ch === '\ufeff' ? ' (a byte-order mark)' : ''}`;
    }
    return `unexpected character ${JSON.stringify(ch)}`;
  }
  if (/^Unexpected end of JSON input/.test(msg)) return 'unexpected end of input (truncated?)';
  if (/^".*" is not valid JSON$/s.test(msg)) return 'the text is not a JSON value';
  return oneLine(msg, 120);
}

/** Parses JSON text; a failure comes back as a one-line reason. */
export function parseJsonText(text: string): JsonResult {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (err) {
    return { ok: false, reason: `not valid JSON: ${reasonOf(err, text)}` };
  }
}

/** Decodes strict UTF-8 and parses JSON; a failure comes back as a one-line reason. */
export function parseJsonBytes(buf: Uint8Array): JsonResult {
  if (!isUtf8(buf)) return { ok: false, reason: `not valid UTF-8 (byte ${firstInvalidUtf8(buf)})` };
  // A leading byte-order mark (an editor's, saving "UTF-8 with BOM") is ignored, as RFC 8259 allows a parser to.
  const bom = buf.length >= 3 && buf[0] === 0xef && buf[1] === 0xbb && buf[2] === 0xbf ? 3 : 0;
  return parseJsonText(Buffer.from(buf.buffer, buf.byteOffset + bom, buf.byteLength - bom).toString('utf8'));
}

/**
 * A short, bounded rendering of a JSON value for an error message: nesting below `depth` levels
 * and long arrays or strings are elided, so a deeply nested or huge value cannot blow the stack
 * or the message.
 */
export function preview(v: unknown, max = 80, depth = 3): string {
  const out = render(v, depth, max);
  return out.length <= max ? out : `${out.slice(0, max)}...`;
}

function render(v: unknown, depth: number, budget: number): string {
  if (v === null || typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (typeof v === 'string') return oneLine(JSON.stringify(v.length > budget ? `${v.slice(0, budget)}...` : v), budget + 8);
  if (typeof v === 'undefined') return 'nothing';
  if (Array.isArray(v)) {
    if (depth <= 0) return v.length ? '[...]' : '[]';
    const parts: string[] = [];
    let used = 2;
    for (let i = 0; i < v.length; i++) {
      if (used > budget) { parts.push(`... ${v.length - i} more`); break; }
      const s = render(v[i], depth - 1, budget - used);
      parts.push(s);
      used += s.length + 2;
    }
    return `[${parts.join(', ')}]`;
  }
  if (typeof v === 'object') {
    const keys = Object.keys(v as object);
    if (depth <= 0) return keys.length ? '{...}' : '{}';
    const parts: string[] = [];
    let used = 2;
    for (let i = 0; i < keys.length; i++) {
      if (used > budget) { parts.push(`... ${keys.length - i} more`); break; }
      const k = keys[i]!;
      const s = `${oneLine(JSON.stringify(k), 40)}: ${render((v as Record<string, unknown>)[k], depth - 1, budget - used)}`;
      parts.push(s);
      used += s.length + 2;
    }
    return `{${parts.join(', ')}}`;
  }
  return typeof v;
}

/**
 * The first key that occurs twice in the top-level object of a JSON text (which JSON.parse
 * accepts, keeping the last), or undefined. `text` must already be valid JSON.
 */
export function duplicateTopLevelKey(text: string): string | undefined {
  const seen = new Set<string>();
  let depth = 0;
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) { // '"'
      let j = i + 1;
      while (j < text.length) {
        const d = text.charCodeAt(j);
        if (d === 0x5c) j += 2; // backslash escape
        else if (d === 0x22) break;
        else j++;
      }
      if (depth === 1 && expectKey) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (seen.has(key)) return key;
        seen.add(key);
        expectKey = false;
      }
      i = j;
    } else if (c === 0x7b || c === 0x5b) { // '{' '['
      depth++;
      if (depth === 1) expectKey = c === 0x7b;
    } else if (c === 0x7d || c === 0x5d) { // '}' ']'
      depth--;
    } else if (c === 0x2c && depth === 1) { // ','
      expectKey = true;
    }
  }
  return undefined;
}
