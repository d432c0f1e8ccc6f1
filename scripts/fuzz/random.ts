// Seeded choices for the fuzzer: case i of a run draws everything from its own stream of the
// run's seed, so any single case can be regenerated alone (--only i).
import { Rng } from '../../src/util/rng.js';

export class CaseRng {
  private readonly rng: Rng;

  constructor(seed: number, caseIndex: number) {
    this.rng = new Rng(seed, caseIndex);
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    if (n <= 0) return 0;
    // Two draws give 53 bits, enough for offsets into any file.
    const hi = this.rng.nextU32() >>> 11;
    const lo = this.rng.nextU32();
    return Math.floor(((hi * 4294967296 + lo) / 2 ** 53) * n);
  }

  /** Uniform integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.rng.nextFloat() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('fuzz: pick from an empty list');
    return items[this.int(items.length)]!;
  }

  /** An item chosen with probability proportional to its weight. */
  weighted<T>(items: ReadonlyArray<readonly [T, number]>): T {
    const total = items.reduce((s, [, w]) => s + w, 0);
    let r = this.rng.nextFloat() * total;
    for (const [item, w] of items) {
      r -= w;
      if (r < 0) return item;
    }
    return items[items.length - 1]![0];
  }

  byte(): number {
    return this.rng.nextU32() & 0xff;
  }
}
