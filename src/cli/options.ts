// Parsers for numeric and list flags: each rejects bad input with a UsageError naming the flag.
import { UsageError } from './usage.js';

export function parseIntFlag(flag: string, min = 0, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    if (!/^-?\d+$/.test(value.trim())) throw new UsageError(`${flag}: '${value}' is not an integer`);
    const n = Number(value);
    if (n < min || n > max) throw new UsageError(`${flag}: ${n} is out of range [${min}, ${max}]`);
    return n;
  };
}

export function parseFloatFlag(flag: string, min = -Infinity, max = Infinity) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`${flag}: '${value}' is not a number`);
    if (n < min || n > max) throw new UsageError(`${flag}: ${n} is out of range [${min}, ${max}]`);
    return n;
  };
}

export function parseIdList(flag: string) {
  return (value: string): number[] => {
    const parts = value.split(/[\s,]+/).filter((s) => s.length > 0);
    if (parts.length === 0) throw new UsageError(`${flag}: empty list`);
    return parts.map((p) => {
      if (!/^\d+$/.test(p)) throw new UsageError(`${flag}: '${p}' is not a token id`);
      return Number(p);
    });
  };
}

export function parseChoice<T extends string>(flag: string, choices: readonly T[]) {
  return (value: string): T => {
    if (!(choices as readonly string[]).includes(value)) {
      throw new UsageError(`${flag}: '${value}' is not one of ${choices.join(', ')}`);
    }
    return value as T;
  };
}
