// Fast seeded pseudo-random numbers for synthetic weights.
//
// Generator: xoshiro128** (32-bit state words, Math.imul only), seeded through splitmix32 so
// nearby seeds give unrelated streams. Deterministic across platforms: only 32-bit integer
// arithmetic, no Math.random.
//
// Bulk sampling of large tensors uses 65536-entry quantile tables: one 32-bit output gives two
// 16-bit indices, each mapped through a table of the target distribution's quantiles
// (e.g. the standard normal's, scaled). That is a 2^16-level quantisation of the distribution,
// which is far finer than bf16 and keeps generation at a few ns per value.

/** splitmix32 step: returns [next state, output]. */
function splitmix32(state: number): [number, number] {
  const s = (state + 0x9e3779b9) | 0;
  let z = s;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  z ^= z >>> 16;
  return [s, z >>> 0];
}

/** FNV-1a over the UTF-16 code units of a string, 32-bit. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  /** `seed` is any integer (uses its low 32 bits plus the high part); `stream` selects an independent sub-stream. */
  constructor(seed: number, stream: string | number = 0) {
    const hi = Math.floor(seed / 0x100000000) >>> 0;
    let st = (seed >>> 0) ^ Math.imul(hi, 0x27d4eb2f);
    const streamHash = typeof stream === 'string' ? hashString(stream) : stream >>> 0;
    st = (st ^ Math.imul(streamHash, 0x165667b1)) | 0;
    let out: number;
    [st, out] = splitmix32(st); this.a = out;
    [st, out] = splitmix32(st); this.b = out;
    [st, out] = splitmix32(st); this.c = out;
    [st, out] = splitmix32(st); this.d = out;
    if ((this.a | this.b | this.c | this.d) === 0) this.a = 1;
  }

  /** Next 32-bit unsigned integer. */
  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9);
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result >>> 0;
  }

  /** Uniform in [0, 1) with 32 bits of resolution. */
  nextFloat(): number {
    return this.nextU32() / 4294967296;
  }

  /** Uniform in (0, 1): never 0, safe for log(). */
  nextOpenFloat(): number {
    return (this.nextU32() + 0.5) / 4294967296;
  }

  /** Standard normal via Box-Muller (for small draws; bulk sampling uses quantile tables). */
  nextNormal(): number {
    const u = this.nextOpenFloat();
    const v = this.nextFloat();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  /** Fills `out` with 32-bit outputs (the hot loop of bulk sampling; state kept in locals). */
  fillU32(out: Uint32Array): void {
    let a = this.a, b = this.b, c = this.c, d = this.d;
    const n = out.length;
    for (let i = 0; i < n; i++) {
      const m = Math.imul(b, 5);
      out[i] = Math.imul((m << 7) | (m >>> 25), 9);
      const t = b << 9;
      c ^= a;
      d ^= b;
      b ^= c;
      a ^= d;
      c ^= t;
      d = (d << 11) | (d >>> 21);
    }
    this.a = a; this.b = b; this.c = c; this.d = d;
  }

  /**
   * Fills `out` with `table[index]` for random 16-bit indices (two per 32-bit output); `table`
   * holds 65536 bf16 bit patterns. Monomorphic twin of fillF32FromTable (kept separate so each
   * hot loop sees one array type).
   */
  fillU16FromTable(out: Uint16Array, table: Uint16Array): void {
    let a = this.a, b = this.b, c = this.c, d = this.d;
    const n = out.length;
    for (let i = 0; i < n; i += 2) {
      const m = Math.imul(b, 5);
      const r = Math.imul((m << 7) | (m >>> 25), 9);
      const t = b << 9;
      c ^= a; d ^= b; b ^= c; a ^= d; c ^= t;
      d = (d << 11) | (d >>> 21);
      out[i] = table[r & 0xffff]!;
      if (i + 1 < n) out[i + 1] = table[r >>> 16]!;
    }
    this.a = a; this.b = b; this.c = c; this.d = d;
  }

  /** As fillU16FromTable for an f32 table of 65536 values. */
  fillF32FromTable(out: Float32Array, table: Float32Array): void {
    let a = this.a, b = this.b, c = this.c, d = this.d;
    const n = out.length;
    for (let i = 0; i < n; i += 2) {
      const m = Math.imul(b, 5);
      const r = Math.imul((m << 7) | (m >>> 25), 9);
      const t = b << 9;
      c ^= a; d ^= b; b ^= c; a ^= d; c ^= t;
      d = (d << 11) | (d >>> 21);
      out[i] = table[r & 0xffff]!;
      if (i + 1 < n) out[i + 1] = table[r >>> 16]!;
    }
    this.a = a; this.b = b; this.c = c; this.d = d;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** Inverse of the standard normal CDF (piecewise rational approximation, relative error ~1e-9). */
export function normalQuantile(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`normalQuantile: p=${p} is outside (0, 1)`);
  // Coefficients of the classic piecewise rational approximation (central region and tails).
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const plow = 0.02425;
  let x: number;
  if (p < plow) {
    const q = Math.sqrt(-2 * Math.log(p));
    x = (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) /
      ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  } else if (p <= 1 - plow) {
    const q = p - 0.5;
    const r = q * q;
    x = (((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q /
      (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
  } else {
    const q = Math.sqrt(-2 * Math.log(1 - p));
    x = -(((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) /
      ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  }
  return x;
}

let normalTable: Float64Array | null = null;

/** The 65536 standard-normal quantiles at (i + 0.5) / 65536 (symmetric, mean exactly 0). */
export function standardNormalTable(): Float64Array {
  if (normalTable) return normalTable;
  const t = new Float64Array(65536);
  for (let i = 0; i < 32768; i++) {
    const v = normalQuantile((i + 0.5) / 65536);
    t[i] = v;
    t[65535 - i] = -v;
  }
  normalTable = t;
  return t;
}

/** The 65536 uniform quantiles of U(lo, hi) at (i + 0.5) / 65536. */
export function uniformTable(lo: number, hi: number): Float64Array {
  const t = new Float64Array(65536);
  for (let i = 0; i < 65536; i++) t[i] = lo + ((i + 0.5) / 65536) * (hi - lo);
  return t;
}
