// The value parsers of every command's flags, one per kind of value: each turns the text a user
// typed into a value or a UsageError naming the flag, with the same words in every command.
// `*Arg` are the same parsers in the shape commander's argParser takes.
import { UsageError } from '../util/usage-error.js';

/** A non-negative decimal integer in [min, max]. A negative whole number is below the minimum (not "not a whole number"). */
export function parseCount(flag: string, value: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const v = value.trim();
  if (/^-\d+$/.test(v)) throw new UsageError(`${flag}: ${value} is below the minimum of ${min}`);
  if (!/^\d+$/.test(v)) throw new UsageError(`${flag}: '${value}' is not a whole number`);
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n > max) throw new UsageError(`${flag}: ${value} is too large (at most ${max})`);
  if (n < min) throw new UsageError(`${flag}: ${value} is below the minimum of ${min}`);
  return n;
}

/** A finite decimal number in [min, max]. An unbounded side is not printed: the message names the bound that was crossed. */
export function parseNumber(flag: string, value: string, min = -Infinity, max = Infinity): number {
  const n = Number(value);
  // Decimal only, as parseCount: Number() would also read 0x10, 0b11 and 0o7.
  const decimal = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$|^[+-]?Infinity$/i.test(value.trim());
  if (!decimal || Number.isNaN(n)) throw new UsageError(`${flag}: '${value}' is not a number`);
  // A number beyond a double (1e400) reads as infinite: too large, or too small, rather than not a number.
  if (!Number.isFinite(n)) {
    const bound = n > 0 ? max : min;
    throw new UsageError(`${flag}: ${value.trim()} is ${n > 0 ? 'too large' : 'too small'} ` +
      `(${Number.isFinite(bound) ? `${n > 0 ? 'at most' : 'at least'} ${bound}` : `beyond the ${n > 0 ? 'largest' : 'most negative'} number, ${n > 0 ? '' : '-'}1.8e308`})`);
  }
  if (n < min || n > max) {
    if (max === Infinity) throw new UsageError(`${flag}: ${value} is below the minimum of ${min}`);
    if (min === -Infinity) throw new UsageError(`${flag}: ${value} is above the maximum of ${max}`);
    throw new UsageError(`${flag}: ${value} is out of range [${min}, ${max}]`);
  }
  return n;
}

/** `inf` / `infinity` (any case): the spellings of an unbounded value where a flag takes one. */
export function isInfinityWord(value: string): boolean {
  return /^(inf|infinity)$/i.test(value.trim());
}

/** Token ids separated by commas or spaces. */
export function parseIdList(flag: string, value: string): number[] {
  const v = value.trim();
  if (v === '') throw new UsageError(`${flag}: empty list`);
  // Ids separated by commas or spaces; an empty entry (1,,2 or a comma at either end) is a typo, not
  // a shorter prompt.
  const parts = v.split(/\s*,\s*|\s+/);
  if (parts.includes('')) throw new UsageError(`${flag}: '${value}' has an empty entry (a comma with no id beside it)`);
  return parts.map((p) => {
    if (!/^\d+$/.test(p) || !Number.isSafeInteger(Number(p))) throw new UsageError(`${flag}: '${p}' is not a token id`);
    return Number(p);
  });
}

/**
 * `http://host:port[/path]`; a trailing `/v1` is dropped (the client adds the API paths). A URL with
 * credentials (`user:password@`, `token@`) is refused before anything is sent, printed or written,
 * with a message that names neither (the URL is printed in headers and kept in reports and their
 * command lines, files that get shared); the key goes in the variable --api-key-env names.
 */
export function parseEndpointUrl(flag: string, value: string): string {
  const v = value.trim();
  let u: URL | null = null;
  try {
    u = new URL(v);
  } catch { /* below */ }
  const web = u !== null && (u.protocol === 'http:' || u.protocol === 'https:');
  // The URL parser's view decides (it forgives one slash, strips tabs); and a value with an '@' that is
  // not an http(s) URL at all is refused the same way, as it may hold one the parser could not place.
  if ((u !== null && (u.username !== '' || u.password !== '')) || (!web && v.includes('@'))) {
    let shown = '';
    if (u !== null && web) {
      u.username = '';
      u.password = '';
      try {
        shown = ` (${parseEndpointUrl(flag, u.href)})`;
      } catch { /* nothing of it shown */ }
    }
    throw new UsageError(`${flag}: the URL carries credentials (user:password@ or token@), which this tool never sends, prints or stores; ` +
      `give the URL without them${shown} and the key with --api-key-env VAR (sent as Authorization: Bearer, never printed or stored)`);
  }
  if (u === null) throw new UsageError(`${flag}: '${value}' is not a URL (e.g. http://127.0.0.1:8000)`);
  if (!web) throw new UsageError(`${flag}: '${value}' is not an http:// or https:// URL`);
  if (u.search || u.hash) throw new UsageError(`${flag}: '${value}' has a query or fragment; give the server's base URL`);
  u.pathname = u.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
  return u.href.replace(/\/+$/, '');
}

export function oneOf<T extends string>(flag: string, value: string, allowed: readonly T[]): T {
  if ((allowed as readonly string[]).includes(value)) return value as T;
  throw new UsageError(`${flag}: '${value}' is not one of ${allowed.join(', ')}`);
}

export const countArg = (flag: string, min: number, max?: number) => (v: string): number => parseCount(flag, v, min, max);
export const numberArg = (flag: string, min?: number, max?: number) => (v: string): number => parseNumber(flag, v, min, max);
export const idListArg = (flag: string) => (v: string): number[] => parseIdList(flag, v);
export const endpointUrlArg = (flag: string) => (v: string): string => parseEndpointUrl(flag, v);
export const choiceArg = <T extends string>(flag: string, allowed: readonly T[]) => (v: string): T => oneOf(flag, v, allowed);
