// The kernel benchmark (npm run bench:kernels): the addon's kernelBench runs every kind of kernel
// the engine has (repacked panels, row streams, row-major bf16 / f32) at decode and batch sizes on
// a small matrix, and reports what it measured on the bytes it says; bad options are one-line
// errors. Speeds are not asserted (they depend on the machine and its neighbours).
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../src/engine/native.js';
import type { KernelBenchAddon, KernelBenchResult } from '../scripts/kernel-bench.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const addon = loadAddon() as unknown as KernelBenchAddon & { cpuInfo(): { isa: string } };

// Stored bytes per row of K = 1024 values.
const ROW_BYTES: Record<string, number> = { Q4_K: 576, Q6_K: 840, Q8_0: 1088, BF16: 2048, F32: 4096, IQ4_XS: 544 };

describe('kernelBench', () => {
  for (const type of Object.keys(ROW_BYTES))
    // 8 rows: packed bf16 batches of 7..16 rows run as three streams a third apart.
    for (const rows of [1, 5, 8]) {
      it(`${type}, ${rows} row${rows > 1 ? 's' : ''}: measures the kernel and a read of the same bytes`, () => {
        const r = addon.kernelBench({ type, rows, k: 1024, mib: 1, threads: 2, pairs: 1 });
        expect(r.isa).toBe(addon.cpuInfo().isa);
        expect(r.type).toBe(type);
        expect(r.rows).toBe(rows);
        // The layout the engine keeps the type in on this ISA (cpu/weights.cpp).
        const layout = type === 'BF16' ? ({ 'avx512-bf16': 'bf16 panels (vdpbf16ps)', 'avx512-bf16+amx': 'bf16 panels (AMX tiles)' }[r.isa] ?? 'rows')
          : ['Q4_K', 'Q8_0'].includes(type) ? 'quantized panels' : ['F32'].includes(type) ? 'rows' : 'quantized rows';
        expect(r.layout).toBe(layout);
        // Whole 16-row panels, at least 32 per thread (4 streams of 8 panels each).
        expect(r.n % 16).toBe(0);
        expect(r.n).toBeGreaterThanOrEqual(32 * 2 * 16);
        expect(r.storedBytes).toBe(r.n * ROW_BYTES[type]!);
        // Repacked panels hold the same bytes as the rows they replace, or more (none fewer).
        expect(r.bytes).toBeGreaterThanOrEqual(r.storedBytes);
        expect(r.macPerByte).toBeCloseTo((rows * 1024 * r.n) / r.bytes, 10);
        expect(r.macPerByte).toBeCloseTo((rows * 1024) / ROW_BYTES[type]!, 10); // at K = 1024 no type pads
        for (const v of [r.kernelGBs, r.readGBs, r.kernelOverRead, r.kernelGBsBest, r.readGBsBest, r.cacheGBs]) {
          expect(Number.isFinite(v)).toBe(true);
          expect(v).toBeGreaterThan(0);
        }
        expect(r.cacheBytes).toBeGreaterThan(0);
        // Every output written by a kernel pass: the split covered the whole matrix.
        expect(r.outputs).toBe(rows * r.n);
        expect(r.outputsWritten).toBe(r.outputs);
      });
    }

  it('Q8_0 with an odd number of blocks a row: every figure over the bytes the kernel reads (the panels pad a pair)', () => {
    const r = addon.kernelBench({ type: 'Q8_0', rows: 8, k: 1056, mib: 1, threads: 2, pairs: 1 });
    expect(r.storedBytes).toBe(r.n * 33 * 34);
    expect(r.bytes).toBeGreaterThan(r.storedBytes);
    expect(r.macPerByte).toBeCloseTo((8 * 1056 * r.n) / r.bytes, 10);
    // The L2 pass covers whole panels as read: a multiple of a packed panel's bytes.
    const panelBytes = r.bytes / (r.n / 16);
    expect(r.cacheBytes % panelBytes).toBe(0);
  });

  // GDN: the DeltaNet decode recurrence over 128 x 128 f32 states, --rows tokens per head.
  for (const rows of [1, 3])
    it(`GDN, ${rows} token${rows > 1 ? 's' : ''} a head: every head's state read and written, every output written`, () => {
      const r = addon.kernelBench({ type: 'GDN', rows, mib: 1, threads: 2, pairs: 1 });
      expect(r.isa).toBe(addon.cpuInfo().isa);
      expect(r.type).toBe('GDN');
      expect(r.rows).toBe(rows);
      expect(r.k).toBe(128);
      // At least 64 heads a thread, 64 KiB of f32 state each.
      expect(r.n).toBeGreaterThanOrEqual(128);
      expect(r.bytes).toBe(r.n * 128 * 128 * 4);
      expect(r.macPerByte).toBeCloseTo((3 * rows) / 4, 10);
      for (const v of [r.kernelGBs, r.readGBs, r.kernelOverRead, r.cacheGBs]) {
        expect(Number.isFinite(v)).toBe(true);
        expect(v).toBeGreaterThan(0);
      }
      expect(r.outputs).toBe(r.n * rows * 128);
      expect(r.outputsWritten).toBe(r.outputs);
    });

  it('refuses bad options with one-line errors naming the option', () => {
    expect(() => addon.kernelBench({ type: 'F16' })).toThrow(/type must be F32, BF16, a block-quantized type.* or GDN, got 'F16'/);
    expect(() => addon.kernelBench({ type: 'GDN', rows: 0 })).toThrow(/rows must be an integer from 1 to 16/);
    expect(() => addon.kernelBench({ type: 'Q4_K', rows: 17 })).toThrow(/rows must be an integer from 1 to 16/);
    expect(() => addon.kernelBench({ type: 'Q4_K', k: 1000 })).toThrow(/k must be a multiple of 256 for Q4_K/);
    expect(() => addon.kernelBench({ type: 'Q8_0', k: 1000 })).toThrow(/k must be a multiple of 32 for Q8_0/);
    expect(() => addon.kernelBench({ type: 'F32', threads: 256, k: 16384 })).toThrow(/256 threads at k = 16384 need a matrix of \d+ MiB.*over the 4096 MiB limit/);
    expect(() => addon.kernelBench({ type: 'Q8_0', mib: 0 })).toThrow(/mib must be an integer from 1/);
    expect(() => (addon.kernelBench as unknown as () => unknown)()).toThrow(/expects an options object/);
  });

  it('npm run bench:kernels --addons: builds interleaved round by round, each after the first as a ratio to it', async () => {
    // A second copy of the built addon loads as a second module (what an A/B of two builds does).
    const dir = mkdtempSync(path.join(tmpdir(), 'kernel-bench-'));
    try {
      const a = path.join(ROOT, 'build', 'Release', 'lumen_engine.node'), b = path.join(dir, 'copy.node');
      copyFileSync(a, b);
      const json = path.join(dir, 'out.json');
      const script = path.join(ROOT, 'dist', 'scripts', 'kernel-bench.js');
      const { stdout } = await promisify(execFile)(process.execPath,
        [script, '--types', 'Q8_0', '--rows', '1', '--mib', '1', '--pairs', '1', '--rounds', '2', '--addons', `${a},${b}`, '--json', json], { cwd: ROOT });
      const lines = stdout.trim().split('\n');
      expect(lines[0]).toMatch(/then of 2 rounds.*geometric mean of the per-round ratios/);
      const head = lines[1]!.split('\t');
      expect(head).toEqual(expect.arrayContaining(['addon', 'kernel ×', 'L2 ×']));
      const rows = lines.slice(2).map((l) => l.split('\t'));
      expect(rows).toHaveLength(2);
      expect(rows.map((r) => r[head.indexOf('addon')])).toEqual([a, b]);
      expect(rows[0]![head.indexOf('kernel ×')]).toBe('1');
      for (const col of ['kernel ×', 'L2 ×']) expect(Number(rows[1]![head.indexOf(col)])).toBeGreaterThan(0);
      const j = JSON.parse(readFileSync(json, 'utf8')) as { results: { addon: string; rounds: KernelBenchResult[] }[] };
      expect(j.results.map((r) => r.addon)).toEqual([a, b]);
      for (const r of j.results) {
        expect(r.rounds).toHaveLength(2);
        for (const x of r.rounds) expect(x.outputsWritten).toBe(x.outputs);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('npm run bench:kernels: a bad flag exits 2 naming it', async () => {
    const script = path.join(ROOT, 'dist', 'scripts', 'kernel-bench.js');
    for (const [flag, value, msg] of [['--types', 'Q3_K', /--types: unknown weight type 'Q3_K'/], ['--rows', '0', /--rows: '0'/],
      ['--addons', '/nonexistent/lumen.node', /--addons: no such file '\/nonexistent\/lumen.node'/], ['--rounds', '0', /--rounds/]] as const) {
      const err = await promisify(execFile)(process.execPath, [script, flag, value], { cwd: ROOT }).then(() => null, (e: { code?: number; stderr?: string }) => e);
      expect(err?.code).toBe(2);
      expect(err?.stderr).toMatch(msg);
      expect(err?.stderr?.trim().split('\n')).toHaveLength(1);
    }
  });
});

// The machine probe (bench:peer's limits): the parts it is asked for, and only those. bench:peer
// probes the peak alone around each float-weight prefill, and the bandwidth alone around each decode.
describe('probeMachine', () => {
  const probe = (loadAddon() as unknown as { probeMachine(threads: number, parts?: unknown): Record<string, unknown> }).probeMachine;

  it("'peak' measures the multiply-add peak and no bandwidth", () => {
    const r = probe(1, 'peak');
    expect(r.threads).toBe(1);
    expect(r.peakGflops).toBeGreaterThan(0);
    expect(r.peakKind).toBe({ 'avx512-bf16': 'bf16 dot (vdpbf16ps)', 'avx512-bf16+amx': 'bf16 tiles (AMX tdpbf16ps)' }[addon.cpuInfo().isa] ?? 'f32 FMA');
    expect(r.readGBs).toBeUndefined();
  });

  it('refuses any other parts argument with an error naming it', () => {
    for (const bad of ['both', false, 1]) expect(() => probe(1, bad)).toThrow(/parts must be 'all', 'bandwidth' or 'peak'/);
  });
});
