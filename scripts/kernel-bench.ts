// Kernel benchmark: does a weight type's matmul kernel or the memory set the pace on this machine?
// For each type and batch size, the CPU kernel the engine runs (the active ISA table; LUMEN_ISA
// forces one) streams a matrix far beyond the caches, split over the threads as the backend splits
// a product, in passes that alternate with a plain read of the same bytes (4 streams per thread,
// as the bandwidth probe reads). Reported: both rates (medians), the kernel's fraction of the read
// (median of the per-pair ratios: the neighbours' share of the bandwidth moves both alike), and
// the kernel's rate over a slice that stays in L2 on one thread (its compute limit per core).
// A fraction well below 1 with a cache rate above half the read says the access pattern is the
// limit; a cache rate near half the read (two cores) says the compute is.
// Type GDN measures the DeltaNet decode recurrence the same way: 128 x 128 f32 states (the MiB
// column), each read and written once a pass, --rows tokens per head, dealt as gdn_decode deals
// its heads; --k does not apply.
// `--addons A,B` loads several builds of the native addon into this process and interleaves them
// (`--rounds`, the order rotated every round as bench:batch's): per build the medians over the rounds, and for
// each build after the first the geometric mean of its per-round ratios to the first, which is how
// a kernel change is judged on a shared machine (separate runs swing by tens of per cent).
// Usage: npm run bench:kernels -- [--types Q4_K,Q6_K] [--rows 1,8] [--addons A,B --rounds 8] [--json FILE]
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import { countArg } from '../src/cli/flag-values.js';
import { loadAddon, usableCpus } from '../src/engine/native.js';
import { QUANT_TYPES } from '../src/model/types.js';
import { machineInfo } from '../src/util/machine.js';
import { parseOrExitCode, UsageError } from '../src/util/usage-error.js';
import { geoMeanRatio, median, roundOrder } from './bench-model.js';

/** What the addon's kernelBench returns (native/addon/kernel_bench.cpp). */
export interface KernelBenchResult {
  isa: string; type: string; rows: number; k: number; n: number;
  /** The layout read, as the engine stores the type on this ISA (bf16 panels on AVX-512 BF16, quantized panels, rows). */
  layout: string;
  /** Bytes the kernel reads (the packed panels for the types the engine repacks). */
  bytes: number; storedBytes: number; threads: number; pairs: number;
  kernelGBs: number; readGBs: number; kernelOverRead: number; kernelGBsBest: number; readGBsBest: number;
  /** One thread over a slice meant to stay in L2 (cacheBytes: ~256 KiB, one panel at least). */
  cacheGBs: number; cacheBytes: number;
  /** Outputs of the product, and how many a kernel pass wrote (all of them, or the split is wrong). */
  outputs: number; outputsWritten: number;
  /** Multiply-adds per byte read (rows x elements per stored byte). */
  macPerByte: number;
}
export interface KernelBenchAddon {
  kernelBench(o: { type: string; rows?: number; k?: number; mib?: number; threads?: number; pairs?: number }): KernelBenchResult;
}

const TYPES: readonly string[] = ['F32', 'BF16', ...QUANT_TYPES, 'GDN'];

function typeList(v: string): string[] {
  const out = v.split(',').map((s) => s.trim().toUpperCase()).filter((s) => s.length > 0);
  for (const t of out) if (!TYPES.includes(t)) throw new UsageError(`--types: unknown weight type '${t}' (one of ${TYPES.join(', ')})`);
  if (out.length === 0) throw new UsageError('--types: empty list');
  return out;
}
function addonList(v: string): string[] {
  const out = v.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (out.length === 0) throw new UsageError('--addons: empty list');
  for (const f of out) if (!existsSync(f)) throw new UsageError(`--addons: no such file '${f}'`);
  return out.map((f) => path.resolve(f));
}
function rowList(v: string): number[] {
  const out = v.split(',').map((s) => Number(s.trim()));
  for (const r of out) if (!Number.isInteger(r) || r < 1 || r > 16) throw new UsageError(`--rows: '${v}' is not a list of batch sizes from 1 to 16`);
  return out;
}

interface Options {
  types: string[]; rows: number[]; k: number; mib: number; threads: number; pairs: number; rounds: number; addons?: string[]; json?: string;
}

function parseOptions(argv: string[]): Options {
  const program = new Command('kernel-bench')
    .exitOverride()
    .option('--types <list>', `weight types, comma-separated (${TYPES.join(', ')}; GDN: the DeltaNet decode recurrence over its f32 states)`, typeList, typeList('Q4_K,Q6_K,Q8_0,BF16'))
    .option('--rows <list>', 'activation rows (batch sizes, 1..16), comma-separated', rowList, rowList('1,8'))
    .option('--k <n>', 'row length (a multiple of the type\'s block: 256 for the K-quants and IQ4_XS, 32 for the other quantized types)', countArg('--k', 16, 16384), 1024)
    .option('--mib <n>', 'matrix size in MiB, far beyond the caches (at least 32 panels of 16 rows per thread: the MiB column says what was read)', countArg('--mib', 1, 4096), 256)
    .option('--threads <n>', 'threads (default: the CPUs this process may use)', countArg('--threads', 1, 256))
    .option('--pairs <n>', 'kernel / read pass pairs per measurement', countArg('--pairs', 1, 1000), 12)
    .option('--addons <list>', 'comma-separated addon builds to compare, interleaved (default: the installed one)', addonList)
    .option('--rounds <n>', 'measurements per type, batch size and build (medians reported; with --addons the order rotates every round)', countArg('--rounds', 1, 1000), 1)
    .option('--json <file>', 'also write the results as JSON');
  program.parse(argv);
  const o = program.opts<Omit<Options, 'threads'> & { threads?: number }>();
  return { ...o, threads: o.threads ?? usableCpus() };
}

const log = (s: string) => process.stderr.write(`${s}\n`);

/** One type and batch size measured on every build, round after round. */
interface Cell { type: string; rows: number; runs: KernelBenchResult[][] }

function main(): void {
  const opt = parseOrExitCode(() => parseOptions(process.argv));
  if (opt === undefined) return;
  const paths = opt.addons ?? [undefined];
  const addons = paths.map((p) => loadAddon(p) as unknown as KernelBenchAddon);
  const names = paths.map((p) => p ?? 'installed');
  const cpu = machineInfo();
  const cells: Cell[] = [];
  for (const type of opt.types)
    for (const rows of opt.rows) {
      log(`${type}, ${rows} row${rows > 1 ? 's' : ''} ...`);
      const cell: Cell = { type, rows, runs: addons.map(() => []) };
      for (let r = 0; r < opt.rounds; r++) {
        // The order rotates every round (A B, then B A; A B C, ...), so drift favours no build.
        for (const i of roundOrder(addons.map((_, j) => j), r)) {
          let res: KernelBenchResult;
          try {
            res = addons[i]!.kernelBench({ type, rows, k: opt.k, mib: opt.mib, threads: opt.threads, pairs: opt.pairs });
          } catch (err) {
            // The addon's option errors name kernelBench; anything else (out of memory) is not a usage error.
            const msg = (err as Error).message;
            throw msg.startsWith('kernelBench: ') ? new UsageError(msg.slice('kernelBench: '.length)) : err;
          }
          if (res.outputsWritten !== res.outputs) throw new Error(`${type}, ${rows} rows (${names[i]}): the kernel wrote ${res.outputsWritten} of ${res.outputs} outputs`);
          cell.runs[i]!.push(res);
        }
      }
      cells.push(cell);
    }
  const isa = [...new Set(cells.flatMap((c) => c.runs.map((runs) => runs[0]?.isa ?? '?')))].join(' / ');
  const cacheKiB = Math.max(...cells.flatMap((c) => c.runs.flatMap((runs) => runs.map((r) => r.cacheBytes)))) / 1024;
  const many = addons.length > 1;
  const head = ['type', 'rows', ...(many ? ['addon'] : []), 'MiB', 'kernel GB/s', 'read GB/s', 'kernel/read', 'L2 GB/s (1 thread)', 'G mul-add/s', 'layout',
    ...(many ? ['kernel ×', 'L2 ×'] : [])];
  const out: string[] = [];
  for (const c of cells)
    c.runs.forEach((runs, i) => {
      const kern = runs.map((r) => r.kernelGBs), l2 = runs.map((r) => r.cacheGBs);
      const first = c.runs[0]!;
      out.push([c.type, String(c.rows), ...(many ? [names[i]!] : []), (runs[0]!.bytes / 2 ** 20).toFixed(0), median(kern).toFixed(1),
        median(runs.map((r) => r.readGBs)).toFixed(1), median(runs.map((r) => r.kernelOverRead)).toFixed(2), median(l2).toFixed(1),
        (median(kern) * runs[0]!.macPerByte).toFixed(1), runs[0]!.layout,
        ...(many ? (i === 0 ? ['1', '1'] : [geoMeanRatio(kern, first.map((r) => r.kernelGBs)).toFixed(3), geoMeanRatio(l2, first.map((r) => r.cacheGBs)).toFixed(3)]) : [])].join('\t'));
    });
  process.stdout.write(`CPU: ${cpu.cpuModel}; ISA path: ${isa}; ${opt.threads} threads; K = ${opt.k}; ` +
    `medians of ${opt.pairs} kernel / read pass pairs${opt.rounds > 1 ? `, then of ${opt.rounds} rounds` : ''}; L2: one thread over ${cacheKiB.toFixed(0)} KiB at most` +
    `${many ? `; ×: geometric mean of the per-round ratios to ${names[0]} (order rotated${opt.rounds % addons.length ? `; a multiple of ${addons.length} rounds balances it` : ''})` : ''}\n`);
  process.stdout.write(`${head.join('\t')}\n${out.join('\n')}\n`);
  if (cells.some((c) => c.type === 'GDN')) {
    process.stdout.write('GDN: its rates count each state byte once, though a pass reads and writes it; its kernel/read sets that read-and-write pass against a read-only pass of the same bytes\n');
  }
  if (opt.json) {
    const results = cells.flatMap((c) => c.runs.map((runs, i) => ({ addon: names[i], type: c.type, rows: c.rows, rounds: runs })));
    writeFileSync(opt.json, `${JSON.stringify({ cpu, isa, options: opt, results }, null, 2)}\n`);
  }
}

try {
  main();
} catch (err) {
  if (err instanceof UsageError) {
    process.stderr.write(`kernel-bench: ${err.message}\n`);
    process.exitCode = 2;
  } else {
    process.stderr.write(`kernel-bench: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exitCode = 1;
  }
}
