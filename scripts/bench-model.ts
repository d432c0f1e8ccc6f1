// The synthetic bf16 checkpoint the side-by-side benchmarks share, written once into .models/ and
// reused (its GGUFs: scripts/bench-quant-model.ts), and the round arithmetic they share.
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import { REPO_ROOT } from '../src/util/version.js';

export async function ensureBenchModel(preset: string, log: (s: string) => void): Promise<{ dir: string }> {
  const dir = path.join(REPO_ROOT, '.models', `peer-${preset}-bf16`);
  if (!existsSync(path.join(dir, 'config.json'))) {
    log(`writing synthetic ${preset} bf16 checkpoint to ${dir} ...`);
    mkdirSync(path.dirname(dir), { recursive: true });
    await writeSynthCheckpoint({ preset: preset as '0.8b', out: dir, dtype: 'bf16', seed: 1 });
  }
  return { dir };
}

/** Deterministic pseudo-random token ids below 240000 (inside every Qwen3.5 vocabulary). */
export function benchIds(n: number, seed: number): number[] {
  let s = (seed * 2654435761) >>> 0 || 1;
  return Array.from({ length: n }, () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s % 240000; });
}

export const median = (a: readonly number[]): number => {
  const s = [...a].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** Each round's b[i] / a[i], in round order: the figures a ratio judged by round takes the median of. */
export const pairedRatios = (b: readonly number[], a: readonly number[]): number[] => {
  if (b.length !== a.length) throw new Error(`pairedRatios: ${b.length} rounds against ${a.length}`);
  return b.map((x, i) => x / a[i]!);
};

/**
 * Each round's aggregate decode at every concurrency c >= 1 over the same round's at c=1 (bench:batch's
 * speedup; its median is the figure, and efficiency that over c), or null when c=1 was not measured.
 * `rates`: per concurrency, one figure a round, in round order (0: prefill, left out).
 */
export function speedupsOverC1(rates: ReadonlyMap<number, readonly number[]>): Map<number, number[]> | null {
  const one = rates.get(1);
  if (one === undefined) return null;
  return new Map([...rates].filter(([c]) => c >= 1).map(([c, r]) => [c, pairedRatios(r, one)]));
}

/** Geometric mean of the per-round ratios b[i] / a[i] (an A/B of two builds measured round by round). */
export const geoMeanRatio = (b: readonly number[], a: readonly number[]): number =>
  Math.exp(b.reduce((acc, x, i) => acc + Math.log(x / a[i]!), 0) / b.length);

/**
 * The builds of an interleaved A/B in round r's order: rotated by r (A B, then B A; A B C, B C A,
 * C A B), so each build takes each slot equally often over a multiple of their number of rounds
 * (reversing alone keeps a middle build in the middle slot: docs/performance.md, twenty-sixth
 * session).
 */
export const roundOrder = <T>(items: readonly T[], r: number): T[] => {
  const k = r % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
};
