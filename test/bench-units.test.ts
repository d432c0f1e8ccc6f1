// Unit tests of the sweep's parts: flags, statistics, figures, CSV/JSON output, rendering, and the row runner and
// whole sweep driven by a simulated engine (the real engine is exercised by test/sweep.test.ts).
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, type PathLike } from 'node:fs';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { parse } from 'csv-parse/sync';
import { afterAll, describe, expect, it } from 'vitest';
import { CSV_COLUMNS, counterColumns, csvHeaderLine, csvRowLine, errorRow, formatField, markdownTable, type SweepRow } from '../src/bench/csv.js';
import { classifyGaps, computeRowFigures, speedupVsC1, batchingEfficiency, steadyDecodeRate, type TimedRequest } from '../src/bench/metrics.js';
import { Rng } from '../src/util/rng.js';
import { parseCells, parseConcurrency, resolveSweepConfig, type SweepConfig } from '../src/cli/sweep-options.js';
import { parseKvMemory, resolveEngineFlags } from '../src/cli/engine-flags.js';
import { parseIdList } from '../src/cli/flag-values.js';
import { registerPrompt } from '../src/cli/cmd-prompt.js';
import { registerServe } from '../src/cli/cmd-serve.js';
import { registerSweep } from '../src/cli/cmd-sweep.js';
import { CUDA_KV_MEMORY_FRACTION, engineOptionsFrom } from '../src/engine/options.js';
import { loadEngine } from '../src/engine/engine.js';
import { ADDON_ABI } from '../src/engine/native.js';
import { Command } from 'commander';
import { makePrompt, promptVocab, type PromptPlan } from '../src/bench/prompts.js';
import { formatOpsReport, formatPipelineReport, rankGroups } from '../src/bench/profile.js';
import { colorEnabled, HumanRenderer, LogRenderer } from '../src/bench/render.js';
import { bytesText } from '../src/util/bytes-text.js';
import type { Logger } from '../src/bench/logger.js';
import { runRow, type RowOutcome, type RowSettings } from '../src/bench/runner.js';
import { gapHistogram, rowSamples } from '../src/bench/row-samples.js';
import { toReportRow } from '../src/bench/row-sinks.js';
import { percentile, summarize, unionLength } from '../src/bench/stats.js';
import { engineOptions, runSweep, type SweepIO } from '../src/bench/sweep.js';
import type { EngineStats, RequestResult } from '../src/engine/types.js';
import { cpuWindowStart, otherCpuShare, parseNvidiaSmi, physicalCores } from '../src/util/machine.js';
import { createFakeEngine, fakeBackend, fakeCheckpoint, FAKE_DEVICE_ALLOCS, FAKE_DEVICE_PEAK, FAKE_FREE_BYTES } from './helpers/fake-engine.js';
import { usageMessage } from './helpers/usage-error.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-units-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('flags', () => {
  it('defaults to the three cells x 1,4,8 with 2 warm-up and 1 timed pass', () => {
    const c = resolveSweepConfig({});
    expect(c.cells).toEqual([{ isl: 128, osl: 128 }, { isl: 2048, osl: 128 }, { isl: 128, osl: 1024 }]);
    expect(c.concurrency).toEqual([1, 4, 8]);
    expect([c.warmup, c.iters, c.blockSize, c.prefillChunk, c.stepTokenBudget, c.maxSeq, c.threads])
      .toEqual([2, 1, 16, 512, 2048, 4096, 0]);
    expect(c.kvcache).toBe('paged');
    expect(c.device).toBe('auto');
    expect(c.prompts).toBe('unique');
    expect(c.modelPath).toBeNull();
  });

  it('parses cells and concurrency lists', () => {
    expect(parseCells('--cells', '512:256, 4096:64')).toEqual([{ isl: 512, osl: 256 }, { isl: 4096, osl: 64 }]);
    const { ladder, warning } = parseConcurrency('--concurrency', '8,1,4,4');
    expect(ladder).toEqual([1, 4, 8]);
    expect(warning).toMatch(/--concurrency/);
    expect(warning).toMatch(/\b4\b/);
    expect(parseConcurrency('--concurrency', '2,1').warning).toBeNull();
    // Token id lists (bench prompt --prompt-ids): commas or spaces; an empty entry is a typo, refused.
    expect(parseIdList('--prompt-ids', ' 1, 2 3,4 ')).toEqual([1, 2, 3, 4]);
    for (const bad of ['1,,2', '1,2,', ',1', '1, ,2']) {
      expect(usageMessage(() => parseIdList('--prompt-ids', bad)), bad).toBe(`--prompt-ids: '${bad}' has an empty entry (a comma with no id beside it)`);
    }
    expect(usageMessage(() => parseIdList('--prompt-ids', ' '))).toBe('--prompt-ids: empty list');
    expect(usageMessage(() => parseIdList('--prompt-ids', '1,x'))).toBe("--prompt-ids: 'x' is not a token id");
  });

  it('names the flag in every bad value', () => {
    expect(usageMessage(() => resolveSweepConfig({ cells: '128:abc' }))).toMatch(/^--cells.*abc/);
    expect(usageMessage(() => resolveSweepConfig({ cells: '128' }))).toMatch(/^--cells: '128' is not an isl:osl pair/);
    expect(usageMessage(() => resolveSweepConfig({ cells: '0:8' }))).toMatch(/^--cells/);
    expect(usageMessage(() => resolveSweepConfig({ concurrency: '0' }))).toMatch(/^--concurrency: 0 is below the minimum of 1/);
    expect(usageMessage(() => resolveSweepConfig({ concurrency: '1,,4' }))).toMatch(/^--concurrency/);
    expect(usageMessage(() => resolveSweepConfig({ warmup: '-1' }))).toMatch(/^--warmup/);
    expect(usageMessage(() => resolveSweepConfig({ iters: '0' }))).toMatch(/^--iters/);
    expect(usageMessage(() => resolveSweepConfig({ device: 'tpu' }))).toMatch(/^--device: 'tpu' is not one of cpu, cuda, auto/);
    expect(usageMessage(() => resolveSweepConfig({ kvcache: 'flat' }))).toMatch(/^--kvcache/);
    expect(usageMessage(() => resolveSweepConfig({ format: 'xml' }))).toMatch(/^--format/);
    expect(usageMessage(() => resolveSweepConfig({ modelPath: path.join(tmp, 'nope') }))).toMatch(/^--model-path: .*does not exist/);
    // A missing directory of the prefix is made (--output out/run on a fresh clone); a file in the way is named.
    expect(resolveSweepConfig({ output: path.join(tmp, 'no-dir', 'deeper', 'x') }).output).toBe(path.join(tmp, 'no-dir', 'deeper', 'x'));
    // Made by the sweep once every usage check has passed (a refused run leaves nothing behind), not here.
    expect(existsSync(path.join(tmp, 'no-dir'))).toBe(false);
    writeFileSync(path.join(tmp, 'a-file'), 'x');
    expect(usageMessage(() => resolveSweepConfig({ output: path.join(tmp, 'a-file', 'x') }))).toBe(`--output: ${path.join(tmp, 'a-file')} is a file, not a directory`);
    // A path the sweep would write that is a directory: named before anything loads (it was EISDIR after).
    expect(usageMessage(() => resolveSweepConfig({ memoryStages: tmp }))).toBe(`--memory-stages: ${tmp} is a directory, not a file`);
    expect(usageMessage(() => resolveSweepConfig({ memoryStages: `${tmp}/not-yet/` }))).toBe(`--memory-stages ${tmp}/not-yet/: names a directory, not a file; give the file's name too`);
    mkdirSync(path.join(tmp, 'run.jsonl'), { recursive: true });
    expect(usageMessage(() => resolveSweepConfig({ output: path.join(tmp, 'run') }))).toBe(`--output: ${path.join(tmp, 'run.jsonl')} is a directory, not a file`);
    expect(usageMessage(() => resolveSweepConfig({ threads: '1.5' }))).toMatch(/^--threads/);
  });

  it('tries each output directory once (a file created and removed), however many outputs go there; a refusing one is still one line naming its flag', () => {
    // Every creation of the write-check file, seen through the fs module's own export (what the checks call).
    const fs = createRequire(import.meta.url)('node:fs') as typeof import('node:fs');
    const realOpen = fs.openSync;
    const tried: string[] = [];
    fs.openSync = ((file: PathLike, ...rest: Parameters<typeof realOpen> extends [unknown, ...infer R] ? R : never) => {
      if (String(file).includes('.bench-write-check-')) tried.push(path.dirname(String(file)));
      return realOpen(file, ...rest);
    }) as typeof realOpen;
    syncBuiltinESMExports();
    try {
      const out = path.join(tmp, 'probe-once');
      mkdirSync(out, { recursive: true });
      const other = mkdtempSync(path.join(tmp, 'probe-other-'));
      // --output's directory and its four files (.csv, .json, .jsonl, .html), and --memory-stages beside them: one try.
      resolveSweepConfig({ output: path.join(out, 'run'), memoryStages: path.join(out, 'stages.jsonl') });
      expect(tried).toEqual([out]);
      tried.length = 0;
      resolveSweepConfig({ output: path.join(out, 'run'), memoryStages: path.join(other, 'stages.jsonl') });
      expect(tried).toEqual([other, out]);
      // A missing level of the prefix: its nearest existing directory is the one tried, once.
      tried.length = 0;
      resolveSweepConfig({ output: path.join(out, 'new', 'run') });
      expect(tried).toEqual([out]);
      expect(readdirSync(out)).toEqual([]); // nothing left behind
      // A directory that takes no files: the same one-line error, naming the flag that asked first.
      expect(usageMessage(() => resolveSweepConfig({ output: '/proc/bench-out' }))).toBe('--output: cannot create files in /proc (ENOENT)');
      expect(usageMessage(() => resolveSweepConfig({ output: '/proc/bench-out', memoryStages: '/proc/stages.jsonl' })))
        .toBe('--memory-stages: cannot create files in /proc (ENOENT)');
    } finally {
      fs.openSync = realOpen;
      syncBuiltinESMExports();
    }
  });

  it('bounds every numeric engine flag (the engine reads them as 32-bit integers: a larger value would wrap)', () => {
    // --max-seq 4294967312 = 2^32 + 16 ran as 16 while the header and JSON said 4294967312.
    for (const [key, flag] of [['maxSeq', '--max-seq'], ['prefillChunk', '--prefill-chunk'], ['stepTokenBudget', '--step-token-budget']] as const) {
      expect(usageMessage(() => resolveSweepConfig({ [key]: '4294967312' }))).toBe(`${flag}: 4294967312 is too large (at most ${2 ** 30})`);
      expect(resolveSweepConfig({ [key]: String(2 ** 30), concurrency: '1' })[key]).toBe(2 ** 30);
    }
    expect(usageMessage(() => resolveSweepConfig({ threads: '4097' }))).toBe('--threads: 4097 is too large (at most 4096)');
    expect(usageMessage(() => resolveSweepConfig({ blockSize: '65537' }))).toBe('--block-size: 65537 is too large (at most 65536)');
    expect(usageMessage(() => resolveEngineFlags({ maxSeqs: '4097' }, 8))).toBe('--max-seqs: 4097 is too large (at most 4096)');
    expect(usageMessage(() => resolveSweepConfig({ concurrency: '1,4097' }))).toBe('--concurrency: 4097 is too large (at most 4096)');
    expect(usageMessage(() => resolveSweepConfig({ kvMemory: '2048TiB' }))).toBe('--kv-memory: 2048TiB is too large (at most 1PiB)');
    expect(resolveSweepConfig({ kvMemory: '1024TiB' }).kvMemory).toEqual({ bytes: 2 ** 50 });
    // The sweep's token counts that reach the engine as a request's length.
    expect(usageMessage(() => resolveSweepConfig({ cells: '8:4294967312' }))).toMatch(/^--cells \(osl of '8:4294967312'\): 4294967312 is too large/);
    expect(usageMessage(() => resolveSweepConfig({ isl: '4294967312' }))).toMatch(/^--isl: 4294967312 is too large/);
    expect(usageMessage(() => resolveSweepConfig({ sharedPrefix: '4294967312' }))).toMatch(/^--shared-prefix: 4294967312 is too large/);
  });

  it('says a negative count is below the minimum, and takes inf or Infinity (any case) for an unbounded rate', () => {
    expect(usageMessage(() => resolveSweepConfig({ concurrency: '-1' }))).toBe('--concurrency: -1 is below the minimum of 1');
    expect(usageMessage(() => resolveSweepConfig({ iters: '-2' }))).toBe('--iters: -2 is below the minimum of 1');
    expect(usageMessage(() => resolveSweepConfig({ sharedPrefix: '-1' }))).toBe('--shared-prefix: -1 is below the minimum of 0');
    expect(usageMessage(() => resolveSweepConfig({ concurrency: '1.5' }))).toBe("--concurrency: '1.5' is not a whole number");
    for (const v of ['inf', 'INF', 'Infinity', 'infinity', ' Inf ']) expect(resolveSweepConfig({ requestRate: v }).load.requestRate, v).toBe(Infinity);
    expect(usageMessage(() => resolveSweepConfig({ requestRate: '1e-7' }))).toBe('--request-rate: 1e-7 is below the minimum of 0.000001');
    expect(usageMessage(() => resolveSweepConfig({ requestRate: 'fast' }))).toBe("--request-rate: 'fast' is not a number");
    // Decimal only, as the whole-number flags (Number() reads 0x10 as 16).
    for (const v of ['0x10', '0b11', '0o7', '1_000', '']) expect(usageMessage(() => resolveSweepConfig({ requestRate: v })), v).toBe(`--request-rate: '${v}' is not a number`);
    for (const [v, n] of [['2.5', 2.5], ['.5', 0.5], ['5.', 5], ['+3', 3], ['1e2', 100], [' 7 ', 7]] as const) expect(resolveSweepConfig({ requestRate: v }).load.requestRate, v).toBe(n);
    // A number beyond a double is too large or too small, not "not a number".
    expect(usageMessage(() => resolveSweepConfig({ requestRate: '1e400' }))).toBe('--request-rate: 1e400 is too large (beyond the largest number, 1.8e308)');
    expect(usageMessage(() => resolveSweepConfig({ requestRate: '2', burstiness: '-1e999' }))).toBe('--burstiness: -1e999 is too small (at least 0.001)');
    expect(usageMessage(() => resolveSweepConfig({ requestRate: '2', burstiness: '1e999' }))).toBe('--burstiness: 1e999 is too large (at most 1000)');
  });

  it('says at the start when the open-loop arrivals alone would take over an hour (the sweep waits for each)', () => {
    const slow = resolveSweepConfig({ requestRate: '1e-6', numRequests: '4', concurrency: '1,4', cells: '8:2' });
    expect(slow.warnings).toContain('--request-rate 0.000001: the 8 timed requests arrive over about 93 days (requests / rate, summed over the rows), and the sweep waits for each arrival');
    // Default counts: concurrency x --iters per row, 1 + 2 requests at 0.001/s: 50 minutes, no warning; 0.0005/s: 1h40m.
    expect(resolveSweepConfig({ requestRate: '0.001', concurrency: '1,2', cells: '8:2' }).warnings ?? []).toEqual([]);
    expect(resolveSweepConfig({ requestRate: '0.0005', concurrency: '1,2', cells: '8:2' }).warnings).toContain(
      '--request-rate 0.0005: the 3 timed requests arrive over about 1h40m (requests / rate, summed over the rows), and the sweep waits for each arrival');
    expect(resolveSweepConfig({ requestRate: 'inf', numRequests: '100000' }).warnings ?? []).toEqual([]);
  });

  it('refuses open-loop flags that would change nothing or contradict each other', () => {
    // --burstiness shapes gaps, and inf has none.
    expect(usageMessage(() => resolveSweepConfig({ requestRate: 'inf', burstiness: '2' }))).toMatch(/^--burstiness shapes the gaps between arrivals; with --request-rate inf/);
    expect(resolveSweepConfig({ requestRate: '4', burstiness: '2' }).load.burstiness).toBe(2);
    // --iters was ignored when --num-requests was given, while the JSON still reported it.
    expect(usageMessage(() => resolveSweepConfig({ requestRate: '2', numRequests: '4', iters: '2' }))).toMatch(/^--iters and --num-requests both set/);
    expect(resolveSweepConfig({ requestRate: '2', numRequests: '4' }).load.numRequests).toBe(4);
  });

  it('rejects contradictions', () => {
    expect(usageMessage(() => resolveSweepConfig({ cells: '16:8', isl: '32' }))).toMatch(/--cells and --isl/);
    expect(usageMessage(() => resolveSweepConfig({ uniquePrompts: true, repeatPrompts: true }))).toMatch(/contradict/);
    expect(usageMessage(() => resolveSweepConfig({ paged: true, kvcache: 'continuous' }))).toMatch(/--paged/);
    expect(usageMessage(() => resolveSweepConfig({ latencyOnly: true, concurrency: '4' }))).toMatch(/--latency-only/);
    expect(usageMessage(() => resolveSweepConfig({ concurrency: '1,8', stepTokenBudget: '4' })))
      .toBe('--step-token-budget 4 must be at least the largest --concurrency, 8 (one decode token per sequence)');
    expect(usageMessage(() => resolveSweepConfig({ quiet: true, verbose: 1 }))).toMatch(/-q and -v/);
  });

  it('--cuda-graphs on|off reaches the engine options on CUDA only', () => {
    expect(resolveSweepConfig({}).cudaGraphs).toBe(true);
    const off = resolveSweepConfig({ cudaGraphs: 'off' });
    expect(off.cudaGraphs).toBe(false);
    expect(engineOptions(off, 'cuda').cudaGraphs).toBe(false);
    expect(engineOptions(resolveSweepConfig({ cudaGraphs: 'on' }), 'cuda').cudaGraphs).toBe(true);
    expect(engineOptions(resolveSweepConfig({}), 'cpu').cudaGraphs).toBe(false); // the CPU has no graphs
    expect(usageMessage(() => resolveSweepConfig({ cudaGraphs: 'yes' }))).toMatch(/^--cuda-graphs: 'yes' is not one of on, off/);
    expect(usageMessage(() => resolveSweepConfig({ endpoint: 'http://127.0.0.1:1', cudaGraphs: 'off' }))).toMatch(/--cuda-graphs/);
  });

  it('--kv-memory takes bytes (with units) or a fraction, naming the flag in every bad value', () => {
    const kv = (v: string) => resolveSweepConfig({ kvMemory: v }).kvMemory;
    expect(resolveSweepConfig({}).kvMemory).toBeNull();
    expect(kv('4294967296')).toEqual({ bytes: 4294967296 });
    expect(kv('512MiB')).toEqual({ bytes: 512 * 2 ** 20 });
    expect(kv('8GiB')).toEqual({ bytes: 8 * 2 ** 30 });
    expect(kv('8gib')).toEqual({ bytes: 8 * 2 ** 30 });
    expect(kv('8GB')).toEqual({ bytes: 8e9 });
    expect(kv('64 KiB')).toEqual({ bytes: 65536 });
    expect(kv('1.5GiB')).toEqual({ bytes: 1.5 * 2 ** 30 });
    expect(kv('1000B')).toEqual({ bytes: 1000 });
    expect(kv('1')).toEqual({ bytes: 1 }); // a whole number is bytes
    expect(kv('0.9')).toEqual({ fraction: 0.9 });
    expect(kv('.5')).toEqual({ fraction: 0.5 });
    expect(kv('1.0')).toEqual({ fraction: 1 });
    expect(kv('90%')).toEqual({ fraction: 0.9 });
    expect(kv('100%')).toEqual({ fraction: 1 });
    expect(parseKvMemory('--kv-memory', ' 2TiB ')).toEqual({ bytes: 2 * 2 ** 40 });
    for (const bad of ['0', '0.0', '0%', '1.5', '150%', '-1', '-0.5', 'abc', '', '.', '8XB', '8 GiB per seq', '1.5.2', '1e9', '1e30GiB']) {
      expect(usageMessage(() => resolveSweepConfig({ kvMemory: bad })), bad).toMatch(/^--kv-memory: /);
    }
    expect(usageMessage(() => resolveSweepConfig({ kvMemory: '1.5' }))).toMatch(/fraction 1\.5 is not in \(0, 1\]/);
    expect(usageMessage(() => resolveSweepConfig({ kvMemory: '8XB' }))).toMatch(/'XB' is not a unit/);
    expect(usageMessage(() => resolveSweepConfig({ kvMemory: '0' }))).toMatch(/below the minimum of 1 byte/);
    // The same resolver for serve and prompt.
    expect(resolveEngineFlags({ kvMemory: '256MiB' }, 8).kvMemory).toEqual({ bytes: 256 * 2 ** 20 });
    expect(usageMessage(() => resolveEngineFlags({ kvMemory: '2' + '0'.repeat(20) }, 8))).toMatch(/^--kv-memory: .*too large/);
  });

  it('--kv-memory reaches the engine options; CUDA defaults to a fraction of free memory, the CPU to max-seq x max-seqs', () => {
    const opts = (over: Parameters<typeof resolveSweepConfig>[0], device: 'cpu' | 'cuda') => {
      const o = engineOptions(resolveSweepConfig(over), device);
      return { bytes: o.kvMemoryBytes, fraction: o.kvMemoryFraction };
    };
    expect(opts({}, 'cuda')).toEqual({ bytes: undefined, fraction: CUDA_KV_MEMORY_FRACTION });
    expect(CUDA_KV_MEMORY_FRACTION).toBe(0.9);
    expect(opts({}, 'cpu')).toEqual({ bytes: undefined, fraction: undefined });
    expect(opts({ kvMemory: '1GiB' }, 'cuda')).toEqual({ bytes: 2 ** 30, fraction: undefined });
    expect(opts({ kvMemory: '1GiB' }, 'cpu')).toEqual({ bytes: 2 ** 30, fraction: undefined });
    expect(opts({ kvMemory: '0.25' }, 'cpu')).toEqual({ bytes: undefined, fraction: 0.25 });
    expect(opts({ kvMemory: '50%' }, 'cuda')).toEqual({ bytes: undefined, fraction: 0.5 });
    // On the CPU a fraction of MemAvailable is at most 0.95 (1.0 took all the host had); on CUDA, of the
    // device memory left after the engine's own allocations, up to 1.
    expect(opts({ kvMemory: '0.95' }, 'cpu')).toEqual({ bytes: undefined, fraction: 0.95 });
    for (const v of ['1.0', '96%', '0.951']) {
      expect(usageMessage(() => opts({ kvMemory: v }, 'cpu')), v).toMatch(/^--kv-memory: a fraction of .* of the host's available memory would leave too little .*; on the CPU it is at most 0\.95 \(or give a size in bytes\)$/);
    }
    expect(opts({ kvMemory: '1.0' }, 'cuda')).toEqual({ bytes: undefined, fraction: 1 });
    // A continuous cache is max-seq x max-seqs: no default fraction, and the flag is refused.
    expect(opts({ kvcache: 'continuous' }, 'cuda')).toEqual({ bytes: undefined, fraction: undefined });
    expect(usageMessage(() => resolveSweepConfig({ kvcache: 'continuous', kvMemory: '1GiB' }))).toMatch(/^--kv-memory sizes the paged KV pool/);
    // With --endpoint the server sizes its own pool.
    expect(usageMessage(() => resolveSweepConfig({ endpoint: 'http://127.0.0.1:1', kvMemory: '0.5' }))).toMatch(/^--kv-memory sets up the in-process engine/);
  });

  it("the sweep's help lists every exit status it can end with", () => {
    const program = new Command();
    registerSweep(program, () => {});
    const help = program.commands[0]!.helpInformation().replace(/\s+/g, ' ');
    for (const code of ['0 all rows ok', '3 some rows failed', '2 usage error', '130 interrupted', '143 terminated (SIGTERM)', '1 anything else']) {
      expect(help).toContain(code);
    }
  });

  it('every command that loads the engine takes --kv-memory', () => {
    for (const register of [registerServe, registerPrompt, registerSweep]) {
      const program = new Command();
      register(program, () => {});
      const cmds = program.commands.length > 0 ? program.commands : [program];
      expect(cmds.some((c) => c.options.some((o) => o.long === '--kv-memory')), register.name).toBe(true);
    }
  });

  it('--kv-cache-dtype takes f32 (the default) or f16, naming the flag in every bad value', () => {
    expect(resolveSweepConfig({}).kvCacheDtype).toBe('f32');
    expect(resolveEngineFlags({}).kvCacheDtype).toBe('f32');
    expect(resolveEngineFlags({ kvCacheDtype: 'f32' }, 8).kvCacheDtype).toBe('f32');
    expect(resolveEngineFlags({ kvCacheDtype: 'f16' }, 8).kvCacheDtype).toBe('f16');
    expect(resolveSweepConfig({ kvCacheDtype: 'f16', device: 'cpu' }).kvCacheDtype).toBe('f16');
    expect(usageMessage(() => resolveEngineFlags({ kvCacheDtype: 'bf16' }))).toBe("--kv-cache-dtype: 'bf16' is not one of f32, f16");
    expect(usageMessage(() => resolveSweepConfig({ kvCacheDtype: 'F16x' }))).toBe("--kv-cache-dtype: 'F16x' is not one of f32, f16");
    for (const bad of ['F16', 'f8', 'fp16', 'half', '', ' f16']) {
      expect(usageMessage(() => resolveEngineFlags({ kvCacheDtype: bad }, 8)), bad).toMatch(/^--kv-cache-dtype: /);
    }
    // With --endpoint the server has its own cache.
    expect(usageMessage(() => resolveSweepConfig({ endpoint: 'http://127.0.0.1:1', kvCacheDtype: 'f16' }))).toMatch(/^--kv-cache-dtype sets up the in-process engine/);
  });

  it('--kv-cache-dtype f16 is taken with --device cuda as with cpu (both backends have an f16 cache)', () => {
    for (const device of ['cuda', 'auto', 'cpu']) {
      expect(resolveEngineFlags({ kvCacheDtype: 'f16', device }).kvCacheDtype, device).toBe('f16');
      expect(resolveEngineFlags({ kvCacheDtype: 'f16', device }, 8).kvCacheDtype, device).toBe('f16');
      expect(resolveSweepConfig({ kvCacheDtype: 'f16', device }).kvCacheDtype, device).toBe('f16');
    }
    expect(engineOptions(resolveSweepConfig({ kvCacheDtype: 'f16', device: 'cuda' }), 'cuda').kvCacheDtype).toBe('f16');
  });

  it('--kv-cache-dtype reaches the engine options (always given, f32 by default)', () => {
    expect(engineOptions(resolveSweepConfig({}), 'cpu').kvCacheDtype).toBe('f32');
    expect(engineOptions(resolveSweepConfig({}), 'cuda').kvCacheDtype).toBe('f32');
    expect(engineOptions(resolveSweepConfig({ kvCacheDtype: 'f16' }), 'cpu').kvCacheDtype).toBe('f16');
    // serve and prompt map their flags with the same function.
    expect(engineOptionsFrom(resolveEngineFlags({ kvCacheDtype: 'f16' }, 8), 'cpu', 8).kvCacheDtype).toBe('f16');
    expect(engineOptionsFrom(resolveEngineFlags({}, 8), 'cpu', 8).kvCacheDtype).toBe('f32');
    // The continuous KV cache has no prefix cache: the options (and so the header and reports) say so.
    expect(engineOptionsFrom(resolveEngineFlags({}, 8), 'cpu', 8).prefixCache).toBe(true);
    expect(engineOptionsFrom(resolveEngineFlags({ kvcache: 'continuous' }, 8), 'cpu', 8).prefixCache).toBe(false);
  });

  it('every command that loads the engine takes --kv-cache-dtype, its help stating the default', () => {
    for (const register of [registerServe, registerPrompt, registerSweep]) {
      const program = new Command();
      register(program, () => {});
      const cmds = program.commands.length > 0 ? program.commands : [program];
      const opt = cmds.flatMap((c) => c.options).find((o) => o.long === '--kv-cache-dtype');
      expect(opt, register.name).toBeDefined();
      expect(opt!.description).toMatch(/\(default f32\)$/);
    }
  });

  it('maps the peer flags onto one cell and the latency-only ladder', () => {
    const c = resolveSweepConfig({ promptTokens: '256', maxOutputTokens: '64', latencyOnly: true, skipTraining: true, paged: true });
    expect(c.cells).toEqual([{ isl: 256, osl: 64 }]);
    expect(c.concurrency).toEqual([1]);
    expect(c.skipTraining).toBe(true);
    expect(resolveSweepConfig({ isl: '300' }).cells).toEqual([{ isl: 300, osl: 128 }]);
    expect(resolveSweepConfig({ repeatPrompts: true }).prompts).toBe('repeat');
    expect(resolveSweepConfig({ verbose: 5 }).verbosity).toBe(2);
    expect(resolveSweepConfig({ quiet: true }).verbosity).toBe(-1);
  });

});

describe('statistics', () => {
  it('uses nearest-rank percentiles', () => {
    expect(percentile([4, 1, 3, 2], 50)).toBe(2);
    expect(percentile([4, 1, 3, 2], 99)).toBe(4);
    expect(percentile([4, 1, 3, 2], 0)).toBe(1);
    const hundred = Array.from({ length: 100 }, (_, i) => 100 - i);
    expect(percentile(hundred, 99)).toBe(99);
    expect(percentile(hundred, 90)).toBe(90);
    expect(percentile([], 50)).toBeNull();
    expect(percentile([10, 9, 100], 50)).toBe(10); // numeric, not string, order
  });

  it('summarizes a sample', () => {
    expect(summarize([3, 1, 2])).toEqual({ n: 3, mean: 2, p50: 2, p90: 3, p99: 3, min: 1, max: 3 });
    expect(summarize([])).toEqual({ n: 0, mean: null, p50: null, p90: null, p99: null, min: null, max: null });
  });

  it('measures the union of intervals', () => {
    expect(unionLength([[0, 10], [5, 15], [20, 25]])).toBe(20);
    expect(unionLength([[20, 25], [0, 10]])).toBe(15);
    expect(unionLength([[0, 10], [2, 3]])).toBe(10);
    expect(unionLength([])).toBe(0);
  });
});

function req(id: number, enqueue: number, tokenMs: number[], extra: Partial<RequestResult> = {}): RequestResult {
  return {
    id, tokens: tokenMs.map((_, i) => i), promptTokens: 16, enqueueMs: enqueue, tokenMs, prefillChunkMs: [tokenMs[0]! - enqueue],
    cachedPromptTokens: 0, finishReason: 'length', ...extra,
  };
}
const timed = (...rs: RequestResult[]): TimedRequest[] => rs.map((result, session) => ({ pass: 2, session, result }));

describe('row figures', () => {
  it('reads one request exactly', () => {
    const r = req(1, 100, [110, 112, 114, 118]);
    const first = req(0, 0, [50, 60, 70, 80]);
    const f = computeRowFigures(16, 4, timed(r), first);
    expect(f.firstCallMs).toBe(80);
    expect(f.ttftMs).toBe(10);
    expect(f.prefillTokS).toBe((16 * 1000) / 10);
    expect(f.distributions.itl_ms.n).toBe(3);
    expect(f.itlP50Ms).toBe(2);
    expect(f.itlP99Ms).toBe(4);
    expect(f.decodeTokens).toBe(3);
    expect(f.decodeWindowMs).toBe(8);
    expect(f.decodeTokS).toBe(3000 / 8);
    expect(f.prefillChunkP50Ms).toBe(10);
    expect(f.wrongLength).toBe(0);
  });

  it('a row of one token per request (osl = 1) decodes nothing: its decode window is not measured (null), not 0', () => {
    const f = computeRowFigures(16, 1, timed(req(1, 100, [110]), req(2, 100, [112])), null);
    expect(f.decodeTokens).toBe(0);
    expect(f.decodeWindowMs).toBeNull();
    expect(f.decodeTokS).toBeNull();
  });

  it('aggregates decode over the union of decode spans and keeps prefill-overlapped gaps out of itl', () => {
    // A decodes 10..30; B enqueues at 15 and gets its first token at 20, then decodes 20..40.
    const a = req(1, 0, [10, 15, 20, 25, 30]);
    const b = req(2, 15, [20, 22, 24, 26, 40]);
    const f = computeRowFigures(16, 5, timed(a, b), null);
    expect(f.decodeTokens).toBe(8);
    expect(f.decodeWindowMs).toBe(30); // [10,30] u [20,40]
    expect(f.decodeTokS).toBe(8000 / 30);
    // Only A's gap (15,20] overlaps B's prefill [15,20]; (10,15] ends as B is enqueued; B's gaps overlap nothing.
    expect(f.mixedGaps).toBe(1);
    expect(f.distributions.itl_mixed_ms.max).toBe(5);
    expect(f.distributions.itl_ms.n).toBe(7);
  });

  it('keeps a preempted request\'s own recompute gap (and the other requests\' gaps during it) out of itl', () => {
    // A decodes every 10 ms; B is preempted after 3 tokens (KV memory full), waits, recomputes its 3 + 16
    // tokens and goes on at 250: the gap (30, 250] is its own prefill wall, not a decode gap (itl_p99 read
    // 251 ms on such a row).
    // B is admitted again at 245 and recomputes until 250; before that it only waited.
    const a = req(1, 0, [10, 20, 30, 40, 50]);
    const b = req(2, 0, [10, 20, 30, 250, 260], { preemptedAfter: [3], readmitMs: [245] });
    const f = computeRowFigures(16, 5, timed(a, b), null);
    // B's (30, 250] holds its recompute; A's gaps, all while B only waited, are decode gaps.
    expect(f.recomputeGaps).toBe(1);
    expect(f.preemptions).toBe(1);
    expect(f.mixedGaps).toBe(1);
    expect(f.distributions.itl_mixed_ms.max).toBe(220);
    expect(f.distributions.itl_ms.max).toBe(10);
    expect(f.distributions.itl_ms.n).toBe(7);
    expect(f.itlP99Ms).toBe(10);
    // Re-admitted at 35: A's (30, 40] and (40, 50] ran beside B's recompute (a prefill step may be in
    // them), as A's gaps beside B's first prefill would; so they do without the re-admission time (an
    // older addon: B's whole gap counts as its prefill).
    expect(computeRowFigures(16, 5, timed(a, { ...b, readmitMs: [35] }), null).mixedGaps).toBe(3);
    expect(computeRowFigures(16, 5, timed(a, { ...b, readmitMs: undefined }), null).mixedGaps).toBe(3);
    // Preempted before its first token: the recompute is inside its TTFT, no gap of its own holds it.
    const early = computeRowFigures(16, 5, timed(req(1, 0, [10, 20, 30, 40, 50]), req(2, 0, [60, 70, 80, 90, 100], { preemptedAfter: [0] })), null);
    expect(early.recomputeGaps).toBe(0);
    expect(early.preemptions).toBe(1);
    // Without preemptedAfter (a server, an older addon): as before.
    expect(computeRowFigures(16, 5, timed(a, { ...b, preemptedAfter: undefined }), null).distributions.itl_ms.max).toBe(220);
  });

  it('classifies gaps exactly as the direct rule "another request prefilled during it" on random rows (seeded)', () => {
    // The direct rule, one scan of every other request's prefill spans per gap (what classifyGaps
    // computed before it counted overlaps by binary search).
    const direct = (rs: RequestResult[]) => rs.map((r, idx) => {
      const spansOf = (x: RequestResult) => {
        const t = x.tokenMs;
        const spans: Array<[number, number]> = [[x.enqueueMs, t.length ? t[0]! : Infinity]];
        (x.preemptedAfter ?? []).forEach((g, i) => spans.push([x.readmitMs?.[i] ?? (g >= 1 && g - 1 < t.length ? t[g - 1]! : x.enqueueMs), g < t.length ? t[g]! : Infinity]));
        return spans;
      };
      const own = new Set((r.preemptedAfter ?? []).filter((g) => g >= 1 && g < r.tokenMs.length));
      const out = { decode: [] as number[], mixed: [] as number[], recompute: 0 };
      for (let k = 1; k < r.tokenMs.length; k++) {
        const a = r.tokenMs[k - 1]!;
        const b = r.tokenMs[k]!;
        const mixed = own.has(k) || rs.some((q, j) => j !== idx && spansOf(q).some(([s, e]) => s < b && e > a));
        if (own.has(k)) out.recompute++;
        (mixed ? out.mixed : out.decode).push(b - a);
      }
      return out;
    });
    const rng = new Rng(7, 'classify-gaps');
    const int = (n: number) => Math.floor(rng.nextFloat() * n);
    for (let c = 0; c < 300; c++) {
      const rs: RequestResult[] = Array.from({ length: 1 + int(10) }, (_, i) => {
        const enq = int(100);
        let t = enq + int(30);
        // Integer times, so gaps share their ends with other requests' spans (the strict comparisons matter).
        const tokenMs = Array.from({ length: int(12) }, () => (t += 1 + int(8)));
        const pre = rng.nextFloat() < 0.4 ? [int(tokenMs.length + 1)] : undefined;
        // A re-admission after the token it precedes (s > e), now and then: not what the engine reports.
        const readmit = pre && rng.nextFloat() < 0.7 ? [pre[0]! < tokenMs.length && rng.nextFloat() < 0.9 ? tokenMs[pre[0]!]! - int(10) : 200] : undefined;
        return req(i, enq, tokenMs, { ...(pre ? { preemptedAfter: pre } : {}), ...(readmit ? { readmitMs: readmit } : {}) });
      });
      expect(classifyGaps(rs), `case ${c}`).toEqual(direct(rs));
    }
  });

  it("the JSON's per-request samples take the figures' gap split (one split a row), the same as a split of their own", () => {
    const rng = new Rng(11, 'samples-gaps');
    const int = (n: number) => Math.floor(rng.nextFloat() * n);
    for (let c = 0; c < 50; c++) {
      const rs: RequestResult[] = Array.from({ length: 1 + int(9) }, (_, i) => {
        const enq = int(100);
        let t = enq + int(30);
        const tokenMs = Array.from({ length: int(12) }, () => (t += 1 + int(8)));
        return req(i, enq, tokenMs, rng.nextFloat() < 0.3 && tokenMs.length > 2 ? { preemptedAfter: [1 + int(tokenMs.length - 1)] } : {});
      });
      // Three timed passes after two warm-up ones, in the runner's order (pass, then session).
      const tr: TimedRequest[] = rs.map((result, i) => ({ pass: 2 + Math.floor((i * 3) / rs.length), session: i, result }));
      const f = computeRowFigures(16, 8, tr, null);
      expect(f.requestGaps, `case ${c}`).toEqual(classifyGaps(rs));
      const out: RowOutcome = { row: errorRow(16, 8, 3, 'x'), figures: f, counters: null, timed: tr, profile: null, timedWallMs: null, interrupted: false };
      expect(toReportRow(out).samples, `case ${c}`).toEqual(rowSamples(tr, classifyGaps(rs)));
    }
    // The report row reads the split it is handed rather than splitting the gaps again.
    const a = req(1, 0, [10, 12, 20]);
    const tr = timed(a);
    const f = computeRowFigures(16, 3, tr, null);
    const handed: RowOutcome = {
      row: errorRow(16, 3, 1, 'x'), figures: { ...f, requestGaps: [{ decode: [7], mixed: [2, 8], recompute: 0 }] },
      counters: null, timed: tr, profile: null, timedWallMs: null, interrupted: false,
    };
    expect(toReportRow(handed).samples).toMatchObject({ itl_p50_ms: [7], itl_p99_ms: [7], itl_gap_bins: [gapHistogram([7])] });
  });

  it('a request\'s prefill time sums its prefill steps up to its first token, not a recompute after a later preemption', () => {
    // B's prompt took one 10 ms step before its first token; its recompute after the preemption one 5 ms step.
    const b = req(2, 0, [10, 20, 30, 250, 260], { prefillChunkMs: [10, 5], prefillChunksToFirst: 1, preemptedAfter: [3], readmitMs: [245] });
    const f = computeRowFigures(16, 5, timed(b), null);
    expect(f.distributions.prefill_ms.max).toBe(10);
    expect(f.distributions.prefill_ms.max).toBeLessThanOrEqual(f.distributions.ttft_ms.max!);
    // Every step is still a prefill chunk sample.
    expect(f.distributions.prefill_chunk_ms.n).toBe(2);
    expect(f.prefillChunkMaxMs).toBe(10);
    // Not known (a server, an older addon): every step counts, as before.
    expect(computeRowFigures(16, 5, timed({ ...b, prefillChunksToFirst: undefined }), null).distributions.prefill_ms.max).toBe(15);
  });

  it('steady-state decode rate counts only the window where every stream decodes', () => {
    // A: first token at 10, then every 10 ms to 100; B: first token at 40 (its prefill delayed it), to 130.
    const a = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];
    const b = [40, 50, 60, 70, 80, 90, 100, 110, 120, 130];
    // Window (40, 100]: A emits 50..100 (6), B emits 50..100 (6) -> 12 tokens in 60 ms.
    expect(steadyDecodeRate([a, b])).toBe(12000 / 60);
    expect(steadyDecodeRate([a])).toBe(9000 / 90);
    expect(steadyDecodeRate([a, [200, 210]])).toBeNull(); // never decoding together
    expect(steadyDecodeRate([a, [5]])).toBeNull();
  });

  it('flags requests that did not generate osl tokens', () => {
    const f = computeRowFigures(16, 8, timed(req(1, 0, [1, 2, 3])), null);
    expect(f.wrongLength).toBe(1);
    expect(f.minGenerated).toBe(3);
  });

  it('keeps the invariants exact', () => {
    expect(speedupVsC1(123.456, 123.456)).toBe(1);
    const s = speedupVsC1(400.1, 123.7)!;
    expect(batchingEfficiency(s, 4)).toBe(s / 4);
    expect(speedupVsC1(100, null)).toBeNull();
    expect(batchingEfficiency(null, 4)).toBeNull();
  });
});

describe('prompts', () => {
  const plan: PromptPlan = { seed: 7, isl: 64, osl: 8, concurrency: 4, mode: 'unique', sharedPrefix: 0, vocab: promptVocab(248320) };
  it('draws ordinary token ids only, reproducibly', () => {
    const p = makePrompt(plan, 0, 0);
    expect(p.length).toBe(64);
    expect(Math.max(...p)).toBeLessThan(248044);
    expect(Math.min(...p)).toBeGreaterThanOrEqual(0);
    expect(makePrompt(plan, 0, 0)).toEqual(p);
    expect(promptVocab(1000)).toBe(1000);
  });
  it('is fresh per session and pass in unique mode, fixed per session in repeat mode', () => {
    expect(makePrompt(plan, 0, 0)).not.toEqual(makePrompt(plan, 1, 0));
    expect(makePrompt(plan, 0, 0)).not.toEqual(makePrompt(plan, 0, 1));
    expect(makePrompt({ ...plan, concurrency: 8 }, 0, 0)).not.toEqual(makePrompt(plan, 0, 0));
    const rep = { ...plan, mode: 'repeat' as const };
    expect(makePrompt(rep, 0, 0)).toEqual(makePrompt(rep, 3, 0));
    expect(makePrompt(rep, 0, 0)).not.toEqual(makePrompt(rep, 0, 1));
  });
  it('shares the first N tokens across sessions and passes', () => {
    const sp = { ...plan, sharedPrefix: 32 };
    const a = makePrompt(sp, 0, 0);
    const b = makePrompt(sp, 5, 3);
    expect(a.subarray(0, 32)).toEqual(b.subarray(0, 32));
    expect(a.subarray(32)).not.toEqual(b.subarray(32));
  });
});

describe('csv', () => {
  it('has the 21 columns in order, each with its kind, source and meaning', () => {
    expect(CSV_COLUMNS.length).toBe(21);
    for (const c of CSV_COLUMNS) expect(c.meaning.length, c.name).toBeGreaterThan(0);
    expect(counterColumns({ prefixAdmittedTokens: 3, retires: 4, peakActiveBytes: 5, numAllocs: 6, parkWaits: 7 } as EngineStats))
      .toEqual({ admitted_tok: 3, retires: 4, peak_active_bytes: 5, num_allocs: 6, num_inflight_park_waits: 7 });
    expect(errorRow(1, 2, 3, 'x').decode_tok_s).toBeNull();
    expect(csvHeaderLine()).toBe('isl,osl,concurrency,first_call_ms,ttft_ms,prefill_tok_s,itl_p50_ms,itl_p99_ms,prefill_chunk_ms_p50,prefill_chunk_ms_max,decode_tok_s,speedup_vs_c1,batching_efficiency,admitted_tok,retires,peak_active_bytes,num_allocs,num_inflight_park_waits,status,reason,notes\n');
  });
  it('prints missing figures as empty fields and quotes text', () => {
    const line = csvRowLine(errorRow(16, 8, 4, 'out of KV memory, "blocks" exhausted', 'a; b'));
    const [rec] = parse(csvHeaderLine() + line, { columns: true }) as Array<Record<string, string>>;
    expect(rec!.ttft_ms).toBe('');
    expect(rec!.status).toBe('error');
    expect(rec!.reason).toBe('out of KV memory, "blocks" exhausted');
    expect(formatField(0.1 + 0.2)).toBe('0.30000000000000004');
    expect(formatField(Number.NaN)).toBe('');
    expect(markdownTable([errorRow(1, 2, 3, 'x|y')])).toContain('x\\|y');
  });
  it('quotes a field with a lone carriage return, so a parser that ends lines on \\r reads one row back', () => {
    const line = csvRowLine(errorRow(16, 8, 4, 'engine error: a\rb', 'x\r\ny'));
    expect(line).toContain('"engine error: a\rb"');
    // csv-parse ends a record on \r, \n or \r\n (as spreadsheets do): one row, the fields intact.
    const recs = parse(csvHeaderLine() + line, { columns: true }) as Array<Record<string, string>>;
    expect(recs).toHaveLength(1);
    expect(recs[0]!.reason).toBe('engine error: a\rb');
    expect(recs[0]!.notes).toBe('x\r\ny');
    // The Markdown table keeps one line per row: \r, \n and \r\n each become a space.
    const md = markdownTable([errorRow(1, 2, 3, 'a\rb\nc\r\nd')]);
    expect(md).not.toMatch(/\r/);
    expect(md.trim().split('\n')).toHaveLength(3);
    expect(md).toContain('a b c d');
  });
});

describe('profile report', () => {
  const ops = [
    { name: 'matmul_qkv', group: 'matmul', calls: 10, totalUs: 1000, selfUs: 900 },
    { name: 'matmul_out', group: 'matmul', calls: 10, totalUs: 500, selfUs: 500 },
    { name: 'attn', group: 'attention', calls: 5, totalUs: 800, selfUs: 600 },
  ];
  it('opens with the summary title, ranks groups, and has AvgSelf(us)', () => {
    const text = formatOpsReport('16:8 c=1', ops);
    expect(text.startsWith('Profiling Report Summary:\n')).toBe(true);
    expect(text).toContain('\ntop_ops:\n');
    expect(text).toContain('AvgSelf(us)');
    expect(text).toContain('90.00'); // 900 us / 10 calls
    expect(rankGroups(ops).map((g) => g.group)).toEqual(['matmul', 'attention']);
    expect(formatPipelineReport('x', [{ name: 'forward', calls: 2, totalUs: 100 }])).toMatch(/forward\s+2\s+0\.100\s+50\.00\s+100\.0%/);
  });
});

describe('machine', () => {
  it('parses nvidia-smi and /proc/cpuinfo', () => {
    expect(parseNvidiaSmi('NVIDIA H200, 550.54.15, 143771\n')).toEqual([{ name: 'NVIDIA H200', driver: '550.54.15', memoryMb: 143771, source: 'nvidia-smi' }]);
    expect(parseNvidiaSmi('')).toEqual([]);
    const cpuinfo = 'processor: 0\nphysical id\t: 0\ncore id\t\t: 0\n\nprocessor: 1\nphysical id\t: 0\ncore id\t\t: 0\n\nprocessor: 2\nphysical id\t: 0\ncore id\t\t: 1\n';
    expect(physicalCores(cpuinfo)).toBe(2);
  });

  it('measures the other processes\' CPU share over 200 ms at least: a short row with the rows before it', () => {
    const at = (wallMs: number, busyTicks: number, processUs = 0) => ({ busyTicks, totalTicks: wallMs / 10 * 2, cpus: 2, processUs, wallMs });
    // 2 CPUs over 400 ms: 80 ticks, 40 busy, of which this process 0.2 s of CPU = 20 ticks: others 25 %.
    expect(otherCpuShare(at(0, 0), at(400, 40, 200_000))).toBeCloseTo(0.25, 12);
    expect(otherCpuShare(at(0, 0), at(150, 10))).toBeNull();
    const marks = [at(0, 0), at(300, 10), at(700, 20)];
    // A 500 ms row is measured alone.
    expect(cpuWindowStart(at(800, 30), marks, at(1300, 50))).toEqual(at(800, 30));
    // A 50 ms row: from the latest earlier start at least 200 ms back (700 is 150 ms back, 300 is 450).
    expect(cpuWindowStart(at(800, 30), marks, at(850, 31))).toEqual(at(300, 10));
    expect(cpuWindowStart(at(100, 1), [at(0, 0)], at(150, 2))).toBeNull();
    expect(cpuWindowStart(null, marks, at(850, 31))).toBeNull();
  });
});

describe('rendering', () => {
  it('colours only a TTY without NO_COLOR', () => {
    expect(colorEnabled(true, {})).toBe(true);
    expect(colorEnabled(true, { NO_COLOR: '1' })).toBe(false);
    expect(colorEnabled(true, { NO_COLOR: '' })).toBe(true);
    expect(colorEnabled(false, {})).toBe(false);
  });
  it("shows the machine's cores and the engine's threads apart, and warns when the threads outnumber the CPUs", () => {
    const headerText = (h: Parameters<HumanRenderer['header']>[0]) => {
      let text = '';
      const sink = new PassThrough();
      sink.on('data', (d: Buffer) => { text += d.toString(); });
      const r = new HumanRenderer(sink, false, false, false);
      r.header(h);
      r.close();
      return text;
    };
    // --threads 4 on a 2-core machine printed "CPU  AMD EPYC (4 threads)".
    const over = headerText({ toolVersion: '0.1.0', cpuModel: 'Test CPU', logicalCores: 2, usableCpus: 2, engineThreads: 4 });
    expect(over).toMatch(/CPU +Test CPU \(2 logical cores\)\n/);
    expect(over).toMatch(/Engine threads +4\n/);
    expect(over).toContain('warning: --threads 4 is more than the 2 CPUs this process can use: the engine\'s threads share cores (oversubscribed), which skews every figure');
    const one = headerText({ toolVersion: '0.1.0', cpuModel: 'Test CPU', logicalCores: 8, usableCpus: 2, engineThreads: 1 });
    expect(one).toMatch(/CPU +Test CPU \(8 logical cores, 2 usable by this process\)\n/);
    expect(one).toMatch(/Engine threads +1\n/);
    expect(one).not.toContain('warning');
    expect(one).not.toContain('threads)');
    // An endpoint (or a GPU engine): no engine threads on this CPU to show or judge.
    const ep = headerText({ toolVersion: '0.1.0', cpuModel: 'Test CPU', logicalCores: 1, engineThreads: null });
    expect(ep).toMatch(/CPU +Test CPU \(1 logical core\)\n/);
    expect(ep).not.toContain('Engine threads');
  });

  it('the sweep keeps the oversubscription warning in the report notes', async () => {
    const prefix = path.join(tmp, 'oversubscribed');
    const { err, io: sio } = io();
    expect(await runSweep(sweepCfg({ output: prefix, threads: 3 }), fakeBackend(), sio)).toBe(0); // the fake backend has 2 usable CPUs
    expect(err.text()).toContain('warning: --threads 3 is more than the 2 CPUs this process can use');
    expect(JSON.parse(readFileSync(`${prefix}.json`, 'utf8')).notes).toEqual(expect.arrayContaining([expect.stringMatching(/^--threads 3 is more than the 2 CPUs/)]));
  });

  it('writes plain lines without escape codes off a TTY', () => {
    let text = '';
    const sink = new PassThrough();
    sink.on('data', (d: Buffer) => { text += d.toString(); });
    const r = new HumanRenderer(sink, false, false, false);
    r.header({ toolVersion: '0.1.0', cpuModel: 'Test CPU', logicalCores: 2, engineThreads: 2 });
    r.modelPath('/m', true);
    r.loadProgress(1, 4);
    r.sweepStart(1);
    r.rowStart('16:8 c=1', {}, () => 0);
    r.rowPhase('timed', 8);
    r.rowEnd('16:8 c=1', { row: errorRow(16, 8, 1, 'boom'), figures: null, counters: null, timed: [], profile: null, timedWallMs: null, interrupted: false });
    r.summary([], false);
    r.close();
    expect(text).toContain('lumen-bench');
    expect(text).toContain('embedded synthetic tiny model');
    expect(text).toContain('boom');
    expect(text).not.toMatch(/\x1b/);
    expect(text).toContain('no rows'); // a summary of no rows says so instead of an empty table
    expect(text).not.toContain('Prefill tok/s');
  });
});

function rowSettings(over: Partial<RowSettings> = {}): RowSettings {
  return {
    cell: { isl: 16, osl: 8 }, concurrency: 1, warmup: 1, iters: 1, maxSeq: 256, seed: 0, prompts: 'unique',
    sharedPrefix: 0, vocab: 1000, profile: false, c1DecodeTokS: null, ...over,
  };
}
const engineOpts = { device: 'cpu' as const, threads: 2, blockSize: 4, kvcache: 'paged' as const, maxSeq: 256, maxSeqs: 4, prefillChunk: 8, stepTokenBudget: 64, prefixCache: true };

describe('row runner on a simulated engine', () => {
  it('produces an ok row with exact invariants', async () => {
    const e = createFakeEngine(engineOpts);
    const ac = new AbortController();
    const r1 = await runRow(e, rowSettings(), ac.signal);
    expect(r1.row.status).toBe('ok');
    expect(r1.row.speedup_vs_c1).toBe(1);
    expect(r1.row.batching_efficiency).toBe(1);
    expect(r1.timed.length).toBe(1);
    expect(r1.row.retires).toBe(1);
    expect(r1.row.admitted_tok).toBe(16);
    const r4 = await runRow(e, rowSettings({ concurrency: 4, iters: 2, c1DecodeTokS: r1.row.decode_tok_s }), ac.signal);
    expect(r4.row.status).toBe('ok');
    expect(r4.timed.length).toBe(8);
    expect(r4.row.retires).toBe(8);
    expect(r4.row.speedup_vs_c1).toBe(r4.row.decode_tok_s! / r1.row.decode_tok_s!);
    expect(r4.row.batching_efficiency).toBe(r4.row.speedup_vs_c1! / 4);
    expect(r4.row.prefill_tok_s).toBe((16 * 1000) / r4.row.ttft_ms!);
    expect(r4.row.notes).toContain('prompts=cold (a fresh prompt every iteration; prefill_tok_s prices prompt ingest)');
    expect(r4.figures!.cachedPromptTokens).toBe(0);
    await e.close();
  });

  it('says how much of a shared prefix the prefix cache served, as measured; a prefix as long as the prompt makes the prompts identical, not cold', async () => {
    // The fake engine serves whole cached blocks of 4 tokens (no snapshot points), so what it served
    // is not what a snapshot rule would predict: the note reads the requests' counts.
    const e = createFakeEngine({ ...engineOpts, maxSeq: 1024 });
    const notes = async (isl: number, sharedPrefix: number) =>
      (await runRow(e, rowSettings({ cell: { isl, osl: 4 }, sharedPrefix, maxSeq: 1024 }), new AbortController().signal)).row.notes;
    const n1 = await notes(200, 122);
    expect(n1).toContain('prompts=cold');
    expect(n1).toContain('shared-prefix=122; the prefix cache served 120 of the 122 shared prompt tokens per timed request (it resumes from a recurrent-state snapshot: every 256 tokens and at the end of each earlier prompt)');
    expect(await notes(300, 128)).toMatch(/the prefix cache served 128 of the 128 shared prompt tokens per timed request: ttft_ms and prefill_tok_s count those tokens as ingested, so they are not cold-prefill figures(;|$)/);
    // The whole prompt shared: identical prompts, served warm, and no "hits although unique" warning.
    const n2 = await notes(250, 300);
    expect(n2).toMatch(/^prompts=identical \(--shared-prefix covers the whole prompt/);
    expect(n2).toContain('shared-prefix=250 (clamped from 300 to isl); the prefix cache served 248 of the 250 shared prompt tokens per timed request');
    expect(n2).not.toContain('prefix-cache hits');
    await e.close();
    const off = createFakeEngine({ ...engineOpts, prefixCache: false });
    expect((await runRow(off, rowSettings({ cell: { isl: 200, osl: 4 }, sharedPrefix: 128, noPrefixCache: true }), new AbortController().signal)).row.notes)
      .toMatch(/the prefix cache served 0 of the 128 shared prompt tokens per timed request \(the engine has no prefix cache here\)(;|$)/); // nothing served: no "ingested" remark
    expect((await runRow(off, rowSettings({ cell: { isl: 100, osl: 4 }, sharedPrefix: 128, noPrefixCache: true }), new AbortController().signal)).row.notes)
      .toMatch(/^prompts=identical \(--shared-prefix covers the whole prompt: every prompt is the same; the engine has no prefix cache here, so each is prefilled cold\)/);
    await off.close();
  });

  it('says a repeated prompt is prefilled cold where the engine has no prefix cache', async () => {
    const e = createFakeEngine(engineOpts);
    const r = await runRow(e, rowSettings({ prompts: 'repeat', noPrefixCache: true }), new AbortController().signal);
    expect(r.row.notes).toMatch(/^prompts=repeat \(.*the engine has no prefix cache here, so every pass prefills cold\)/);
    await e.close();
  });

  it('reads prefix-cache admits with repeated prompts and says so', async () => {
    const e = createFakeEngine(engineOpts);
    const r = await runRow(e, rowSettings({ prompts: 'repeat', concurrency: 2 }), new AbortController().signal);
    expect(r.row.notes).toMatch(/prompts=repeat/);
    expect(r.figures!.cachedPromptTokens).toBeGreaterThan(0);
    // What the cache served, per timed request, and that the prefill figures count it as ingested.
    const per = r.timed.map((t) => t.result.cachedPromptTokens);
    const mean = per.reduce((a, b) => a + b, 0) / per.length;
    expect(r.row.notes).toContain(`the prefix cache served ${Number.isInteger(mean) ? mean : mean.toFixed(1)} of the 16 prompt tokens per timed request`);
    expect(r.row.notes).toContain('ttft_ms and prefill_tok_s count those tokens as ingested');
    await e.close();
  });

  it('says so when unique prompts were served from the cache (a rerun with the same seed on the same engine)', async () => {
    const e = createFakeEngine(engineOpts);
    const first = await runRow(e, rowSettings({ concurrency: 2 }), new AbortController().signal);
    expect(first.figures!.cachedPromptTokens).toBe(0);
    expect(first.row.notes).not.toMatch(/prefix-cache hits/);
    const again = await runRow(e, rowSettings({ concurrency: 2 }), new AbortController().signal);
    expect(again.figures!.cachedPromptTokens).toBeGreaterThan(0);
    expect(again.row.notes).toMatch(new RegExp(`prefix-cache hits: ${again.figures!.cachedPromptTokens} of 32 prompt tokens came from the prefix cache although the prompts are unique`));
    // Tokens every prompt starts with (an endpoint's template) may come from the cache: no note for those.
    const allowed = await runRow(e, rowSettings({ concurrency: 2, commonPrefixTokens: 16 }), new AbortController().signal);
    expect(allowed.figures!.cachedPromptTokens).toBe(again.figures!.cachedPromptTokens);
    expect(allowed.figures!.cachedPromptTokens).toBeLessThanOrEqual(32);
    expect(allowed.row.notes).not.toMatch(/prefix-cache hits/);
    await e.close();
  });

  it('turns an impossible cell and an engine failure into error rows', async () => {
    const e = createFakeEngine(engineOpts, { failRequest: (q) => (q.prompt.length > 32 ? 'out of KV memory' : null) });
    const tooLong = await runRow(e, rowSettings({ cell: { isl: 250, osl: 8 }, sharedPrefix: 300 }), new AbortController().signal);
    expect(tooLong.row.status).toBe('error');
    expect(tooLong.row.reason).toMatch(/exceeds --max-seq 256/);
    // Refused before running: no note about how it was measured (prompts, shared prefix), and the sweep
    // adds none about what ran beside it (ran: false).
    expect(tooLong.row.notes).toBe('');
    expect(tooLong.ran).toBe(false);
    const oom = await runRow(e, rowSettings({ cell: { isl: 64, osl: 8 }, concurrency: 2 }), new AbortController().signal);
    expect(oom.row.status).toBe('error');
    expect(oom.row.reason).toBe('engine error: out of KV memory (during warm-up)');
    const ok = await runRow(e, rowSettings(), new AbortController().signal);
    expect(ok.row.status).toBe('ok');
    await e.close();
  });

  it('notes preemptions in the row and for stderr', async () => {
    const e = createFakeEngine(engineOpts, { preemptAfter: 3 });
    const r = await runRow(e, rowSettings({ concurrency: 2 }), new AbortController().signal);
    expect(r.row.status).toBe('ok');
    expect(r.preemptionNote).toBe('preempted 2 times (KV memory full: a sequence gave up its KV blocks and recomputed its tokens later); ' +
      'the 2 inter-token gaps holding a recompute are left out of itl, as a prefill is');
    expect(r.row.notes).toContain(r.preemptionNote);
    expect(r.ran).not.toBe(false);
    await e.close();
    const calm = createFakeEngine(engineOpts);
    const q = await runRow(calm, rowSettings({ concurrency: 2 }), new AbortController().signal);
    expect(q.preemptionNote).toBeNull();
    expect(q.row.notes).not.toContain('preempted');
    await calm.close();
  });

  it('says when a tpot goodput bound could not be judged (osl=1: no TPOT), counting those requests as meeting it as vLLM does', async () => {
    const e = createFakeEngine(engineOpts);
    const one = await runRow(e, rowSettings({ cell: { isl: 16, osl: 1 }, concurrency: 2, goodput: { tpotMs: 0.001 } }), new AbortController().signal);
    expect(one.load!.goodput).toMatchObject({ met: 2, total: 2, share: 1, tpot_unjudged: 2 });
    expect(one.row.notes).toContain('goodput: the tpot bound could not be judged for 2 of 2 requests (fewer than two tokens, so no TPOT); they count as meeting it, as vLLM counts them');
    // Judged rows, and bounds without tpot, say nothing.
    const judged = await runRow(e, rowSettings({ concurrency: 2, goodput: { tpotMs: 1e9 } }), new AbortController().signal);
    expect(judged.load!.goodput!.tpot_unjudged).toBe(0);
    expect(judged.row.notes).not.toContain('goodput');
    const ttftOnly = await runRow(e, rowSettings({ cell: { isl: 16, osl: 1 }, goodput: { ttftMs: 1e9 } }), new AbortController().signal);
    expect(ttftOnly.load!.goodput!.tpot_unjudged).toBe(0);
    expect(ttftOnly.row.notes).not.toContain('goodput');
    await e.close();
  });

  it('notes requests that stopped short of osl', async () => {
    const e = createFakeEngine(engineOpts, { shortBy: 2 });
    const r = await runRow(e, rowSettings(), new AbortController().signal);
    expect(r.row.notes).toMatch(/1 of 1 timed requests did not generate exactly osl=8 tokens \(generated 6\.\.6\)/);
    await e.close();
  });

  it('stops on abort and drops the unfinished row', async () => {
    const e = createFakeEngine(engineOpts, { baseMs: 5 });
    const ac = new AbortController();
    // Abort from the engine's own progress, at the 10th of 200 tokens: mid-row by construction.
    let seen = 0;
    e.onStep((n) => { seen += n; if (seen >= 10) ac.abort(); });
    const r = await runRow(e, rowSettings({ cell: { isl: 16, osl: 200 }, warmup: 0 }), ac.signal);
    expect(r.interrupted).toBe(true);
    expect(r.row.status).not.toBe('ok');
    await e.close();
  });
});

function capture(): { stream: PassThrough; text: () => string } {
  let text = '';
  const stream = new PassThrough();
  stream.on('data', (d: Buffer) => { text += d.toString(); });
  return { stream, text: () => text };
}

function sweepCfg(over: Partial<SweepConfig>): SweepConfig {
  return { ...resolveSweepConfig({ cells: '16:8', concurrency: '1,2', warmup: '1', blockSize: '4', maxSeq: '256' }), ...over };
}

function io(over: Partial<SweepIO> = {}) {
  const out = capture();
  const err = capture();
  return {
    out, err,
    io: { stdout: out.stream, stderr: err.stream, stderrIsTTY: false, env: {}, argv: ['node', 'bench'], handleSignals: false, ...over } as SweepIO,
  };
}

describe('sweep on a simulated engine', () => {
  it('the single-request latency comes from the first c=1 row that decodes (osl > 1), not a prefill-only row before it', async () => {
    const { err, io: sio } = io();
    const code = await runSweep(sweepCfg({ format: 'json', cells: [{ isl: 32, osl: 1 }, { isl: 16, osl: 8 }] }), fakeBackend(), sio);
    expect(code).toBe(0);
    expect(err.text()).toContain('Latency (single request, 16:8)');
    const j = io();
    expect(await runSweep(sweepCfg({ format: 'json', cells: [{ isl: 32, osl: 1 }] }), fakeBackend(), j.io)).toBe(0);
    expect(JSON.parse(j.out.text()).latency.osl).toBe(1); // no row decodes: the first c=1 row all the same
    const k = io();
    expect(await runSweep(sweepCfg({ format: 'json', cells: [{ isl: 32, osl: 1 }, { isl: 16, osl: 8 }] }), fakeBackend(), k.io)).toBe(0);
    expect(JSON.parse(k.out.text()).latency).toMatchObject({ isl: 16, osl: 8 });
  });

  it('streams CSV, writes the three files and exits 0', async () => {
    const prefix = path.join(tmp, 'run1');
    const { out, err, io: sio } = io();
    const code = await runSweep(sweepCfg({ output: prefix, cells: [{ isl: 16, osl: 8 }, { isl: 32, osl: 4 }] }), fakeBackend(), sio);
    expect(code).toBe(0);
    const rows = parse(out.text(), { columns: true }) as Array<Record<string, string>>;
    expect(rows.length).toBe(4);
    expect(rows.map((r) => `${r.isl}:${r.osl}:${r.concurrency}`)).toEqual(['16:8:1', '16:8:2', '32:4:1', '32:4:2']);
    expect(readFileSync(`${prefix}.csv`, 'utf8')).toBe(out.text());
    const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8'));
    expect(report.schema_version).toBe(1);
    expect(report.status).toBe('complete');
    expect(report.rows.length).toBe(4);
    expect(report.rows[0].distributions.ttft_ms.n).toBe(1);
    expect(report.latency.time_to_first_token_ms).toBe(Number(rows[0]!.ttft_ms));
    expect(report.engine.block_size).toBe(4);
    expect(report.model.config_sha256).toBe('f'.repeat(64));
    const jsonl = readFileSync(`${prefix}.jsonl`, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(jsonl.length).toBe(1 + 2 + 1 + 2);
    expect(jsonl[0].itl_ms.length).toBe(7);
    expect(err.text()).not.toMatch(/\x1b/);
    expect(err.text()).toContain('Benchmark results');
  });

  it('runs a repeated cell or concurrency once and says so once on stderr (a second row with the same key crossed rows in bench compare)', async () => {
    const cfg = resolveSweepConfig({ cells: '16:8,32:4,16:8,16:8', concurrency: '2,1,2' });
    expect(cfg.cells).toEqual([{ isl: 16, osl: 8 }, { isl: 32, osl: 4 }]);
    expect(cfg.concurrency).toEqual([1, 2]);
    expect(cfg.warnings).toEqual([
      '--cells: 16:8 given more than once; each cell runs once (the repeats are dropped)',
      '--concurrency: 2 given more than once; each concurrency runs once (the repeats are dropped)',
    ]);
    expect(resolveSweepConfig({ cells: '16:8,8:16', concurrency: '1,2' }).warnings).toEqual([]);
    const prefix = path.join(tmp, 'repeats');
    const { out, err, io: sio } = io();
    const code = await runSweep({ ...sweepCfg({ output: prefix }), cells: cfg.cells, concurrency: cfg.concurrency, warnings: cfg.warnings }, fakeBackend(), sio);
    expect(code).toBe(0);
    const rows = parse(out.text(), { columns: true }) as Array<Record<string, string>>;
    expect(rows.map((r) => `${r.isl}:${r.osl}:${r.concurrency}`)).toEqual(['16:8:1', '16:8:2', '32:4:1', '32:4:2']);
    expect(err.text().split('\n').filter((l) => l.includes('given more than once'))).toHaveLength(2);
    expect(JSON.parse(readFileSync(`${prefix}.json`, 'utf8')).notes).toEqual(expect.arrayContaining(cfg.warnings!));
  });

  it('keeps going past a failed cell and exits 3', async () => {
    const { out, io: sio } = io();
    const code = await runSweep(sweepCfg({ cells: [{ isl: 16, osl: 8 }, { isl: 300, osl: 8 }] }), fakeBackend(), sio);
    expect(code).toBe(3);
    const rows = parse(out.text(), { columns: true }) as Array<Record<string, string>>;
    expect(rows.map((r) => r.status)).toEqual(['ok', 'ok', 'error', 'error']);
    expect(rows[2]!.reason).toMatch(/exceeds --max-seq/);
  });

  it('refuses --device cuda without a GPU backend before loading anything', async () => {
    const { out, io: sio } = io();
    const backend = fakeBackend();
    await expect(runSweep(sweepCfg({ device: 'cuda' }), backend, sio)).rejects.toThrow(/^--device cuda/);
    expect(backend.engines.length).toBe(0);
    expect(out.text()).toBe('');
  });

  it('refuses a CPU --kv-memory fraction above 0.95 once --device auto resolved to the CPU, before loading anything', async () => {
    const { out, io: sio } = io();
    const backend = fakeBackend();
    await expect(runSweep(sweepCfg({ device: 'auto', kvMemory: { fraction: 1 } }), backend, sio)).rejects.toThrow(/^--kv-memory: a fraction of 1 /);
    expect(backend.engines.length).toBe(0);
    expect(out.text()).toBe('');
  });

  it('reports a load failure as error rows', async () => {
    const { out, io: sio } = io();
    const code = await runSweep(sweepCfg({}), fakeBackend({ loadError: 'not enough memory for the weights' }), sio);
    expect(code).toBe(3);
    const rows = parse(out.text(), { columns: true }) as Array<Record<string, string>>;
    expect(rows.length).toBe(2);
    expect(rows[0]!.reason).toBe('model failed to load: not enough memory for the weights');
  });

  it('prints JSON and markdown formats on stdout', async () => {
    const j = io();
    expect(await runSweep(sweepCfg({ format: 'json', skipTraining: true }), fakeBackend(), j.io)).toBe(0);
    const rep = JSON.parse(j.out.text());
    expect(rep.rows.length).toBe(2);
    expect(rep.training).toBeNull();
    expect(j.err.text()).toMatch(/Training benchmark: none/);
    const m = io();
    expect(await runSweep(sweepCfg({ format: 'md' }), fakeBackend(), m.io)).toBe(0);
    expect(m.out.text().split('\n')[0]).toMatch(/^\| isl \| osl \|/);
  });

  it('stops on abort after writing the finished rows and exits 130', async () => {
    const prefix = path.join(tmp, 'run-abort');
    const ac = new AbortController();
    const { out, io: sio } = io({ abort: ac });
    const backend = fakeBackend({ baseMs: 3 });
    // Abort as the second row reaches stdout (header + 2 lines): the 200-token row cannot finish
    // before the abort, whatever the machine's speed, since the simulated engine runs on timers.
    let lines = 0;
    out.stream.on('data', (d: Buffer) => {
      lines += d.toString().split('\n').length - 1;
      if (lines >= 3) ac.abort();
    });
    const p = runSweep(sweepCfg({ output: prefix, cells: [{ isl: 16, osl: 8 }, { isl: 16, osl: 200 }] }), backend, sio);
    expect(await p).toBe(130);
    expect(readFileSync(`${prefix}.csv`, 'utf8').trim().split('\n').length).toBe(3);
    const rows = parse(out.text(), { columns: true }) as Array<Record<string, string>>;
    expect(rows.length).toBe(2);
    expect(JSON.parse(readFileSync(`${prefix}.json`, 'utf8')).status).toBe('interrupted');
  });

  it('logs JSON lines only with -v, and writes memory stages', async () => {
    const stages = path.join(tmp, 'stages.jsonl');
    writeFileSync(stages, '');
    const { io: sio } = io();
    // pino writes to fd 2 in the CLI; here the renderer is exercised through the sweep with a quiet level.
    const code = await runSweep(sweepCfg({ memoryStages: stages, verbosity: -1, profile: true, profilePipeline: true }), fakeBackend(), sio);
    expect(code).toBe(0);
    const lines = readFileSync(stages, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.stage)).toEqual(['weights_bound', 'warmup_forward', 'first_generation']);
    expect(lines[0].checkpoint_bytes).toBe(4 * 1024 * 1024);
    expect(lines[0].device).toBe('cpu');
    expect(lines[0].host_weights_released).toBe(false);
    expect(lines[0].rss_at_upload_bytes).toBeNull();
    expect(lines[0].kv_pool_source).toBe('max_seq x max_seqs');
    expect(lines[0].kv_pool_bytes).toBe(64 * 2 * 64 * 1024); // max-seq 256 / block 4 = 64 blocks x 2 sequences
  });

  it('a memory stage that cannot be written is one warning, and the sweep goes on with its rows', async () => {
    // A file in the way of the stages' directory (as if it appeared after the start's checks).
    const blocker = path.join(tmp, 'stages-blocker');
    writeFileSync(blocker, 'x');
    const { io: sio, err } = io();
    const code = await runSweep(sweepCfg({ memoryStages: path.join(blocker, 'sub', 'stages.jsonl') }), fakeBackend(), sio);
    expect(code).toBe(0);
    const warnings = err.text().split('\n').filter((l) => l.includes('--memory-stages'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/--memory-stages: cannot write .*stages\.jsonl \(ENOTDIR\); no further stages are recorded/);
    expect(existsSync(path.join(blocker, 'sub'))).toBe(false);
  });

  it('reports the KV pool, the host-weights release and the device allocator on a CUDA engine', async () => {
    const prefix = path.join(tmp, 'cuda1');
    const stages = path.join(tmp, 'cuda-stages.jsonl');
    writeFileSync(stages, '');
    const { err, io: sio } = io();
    const code = await runSweep(sweepCfg({ device: 'cuda', output: prefix, memoryStages: stages }), fakeBackend({ cuda: true }), sio);
    expect(code).toBe(0);
    const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8'));
    const blocks = Math.floor((0.9 * FAKE_FREE_BYTES) / (64 * 1024));
    expect(report.engine.kv_pool).toEqual({
      blocks, block_bytes: 64 * 1024, dtype: 'f32', bytes: blocks * 64 * 1024, source: 'fraction of free device memory',
      fraction: 0.9, free_bytes: FAKE_FREE_BYTES, budget_bytes: Math.floor(0.9 * FAKE_FREE_BYTES),
    });
    expect(report.engine.kv_memory).toEqual({ fraction: 0.9 });
    expect(report.engine.host_weights_released).toBe(true);
    expect(report.engine.rss_before_release_bytes).toBe(200e6);
    expect(report.engine.rss_after_release_bytes).toBe(150e6);
    // CUDA rows: peak_active_bytes is the device allocator's high-water mark; the counters carry the graphs.
    const csv = parse(readFileSync(`${prefix}.csv`, 'utf8'), { columns: true }) as Array<Record<string, string>>;
    expect(csv.map((r) => Number(r.peak_active_bytes))).toEqual([FAKE_DEVICE_PEAK, FAKE_DEVICE_PEAK]);
    expect(csv.map((r) => Number(r.num_allocs))).toEqual([0, 0]);
    expect(report.rows[0].counters.devicePeakBytes).toBe(FAKE_DEVICE_PEAK);
    expect(report.rows[0].counters.deviceAllocs).toBe(FAKE_DEVICE_ALLOCS);
    expect(report.rows[0].counters.graphHits).toBeGreaterThan(0);
    expect(report.rows[0].counters.graphCaptureMs).toBe(2.5);
    expect(err.text()).toMatch(new RegExp(`KV pool\\s+${blocks} blocks x 64\\.0 KiB = ${(blocks / 16).toFixed(1)} MiB \\(0\\.9 of 256\\.0 MiB free device memory after the weights`));
    const lines = readFileSync(stages, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(lines[0].device).toBe('cuda:0');
    expect(lines[0].host_weights_released).toBe(true);
    expect([lines[0].rss_at_upload_bytes, lines[0].rss_after_release_bytes]).toEqual([200e6, 150e6]);
    expect(lines[0].kv_pool_source).toBe('fraction of free device memory');
    expect(lines[0].device_peak_bytes).toBe(FAKE_DEVICE_PEAK);
  });

  it('names --kv-memory bytes in the header, and logs the pool and the counters with -v', async () => {
    const { err, io: sio } = io();
    expect(await runSweep(sweepCfg({ kvMemory: { bytes: 100 * 64 * 1024 } }), fakeBackend(), sio)).toBe(0);
    expect(err.text()).toMatch(/KV pool\s+100 blocks x 64\.0 KiB = 6\.3 MiB \(--kv-memory\)/);
    expect([bytesText(1536), bytesText(3 * 2 ** 20), bytesText(1.5 * 2 ** 30)]).toEqual(['1.5 KiB', '3.0 MiB', '1.50 GiB']);
    const logged: Record<string, unknown>[] = [];
    const log = { info: (o: Record<string, unknown>) => logged.push(o), debug: () => {}, warn: (o: Record<string, unknown>) => logged.push(o), error: () => {} };
    const r = new LogRenderer(log as unknown as Logger);
    r.loaded({ seconds: 1, backend: 'cuda', isa: 'x', weightBytes: 1, threads: 0, gpu: null, engineLine: '', kvPool: { blocks: 3, block_bytes: 2, dtype: 'f32', bytes: 6, source: 'kv_memory_bytes', fraction: null, free_bytes: null, budget_bytes: null } });
    expect(logged[0]!.kv_pool).toMatchObject({ blocks: 3, bytes: 6, source: 'kv_memory_bytes' });
    const row = { ...errorRow(16, 8, 1, ''), status: 'ok', peak_active_bytes: 7, num_allocs: 0 } as SweepRow;
    r.rowEnd('16:8 c=1', { row, figures: null, counters: { graphHits: 5, graphMisses: 1, graphCaptureMs: 0.5, devicePeakBytes: 7, deviceAllocs: 9 } as EngineStats, timed: [], profile: null, timedWallMs: 1, interrupted: false });
    expect(logged[1]).toMatchObject({ event: 'cell_end', peak_active_bytes: 7, num_allocs: 0, graph_hits: 5, graph_misses: 1, graph_capture_ms: 0.5, device_peak_bytes: 7, device_allocs: 9 });
  });

  it('states the KV cache dtype the engine reports in the header, the JSON report, the -v pool and the memory stages; the CSV keeps its columns', async () => {
    const prefix = path.join(tmp, 'kv-f16');
    const stages = path.join(tmp, 'kv-f16-stages.jsonl');
    writeFileSync(stages, '');
    const { out, err, io: sio } = io();
    expect(await runSweep(sweepCfg({ kvCacheDtype: 'f16', output: prefix, memoryStages: stages }), fakeBackend(), sio)).toBe(0);
    // The fake engine, like the native one, has f16 blocks of half the bytes: 64 blocks x 2 sequences of 32 KiB.
    expect(err.text()).toMatch(/KV pool\s+128 blocks x 32\.0 KiB = 4\.0 MiB \(max-seq x max-seqs tokens\); KV cache f16\n/);
    const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8'));
    expect(report.engine.kv_cache_dtype).toBe('f16');
    expect(report.engine.kv_pool).toMatchObject({ blocks: 128, block_bytes: 32 * 1024, dtype: 'f16' });
    const lines = readFileSync(stages, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.kv_cache_dtype)).toEqual(['f16', 'f16', 'f16']);
    expect(readFileSync(`${prefix}.csv`, 'utf8').split('\n')[0] + '\n').toBe(csvHeaderLine());
    expect(out.text().split('\n')[0] + '\n').toBe(csvHeaderLine());
    // The default says f32, in the same places.
    const d = io();
    expect(await runSweep(sweepCfg({ format: 'json' }), fakeBackend(), d.io)).toBe(0);
    expect(d.err.text()).toMatch(/KV pool\s+.*; KV cache f32\n/);
    const rep = JSON.parse(d.out.text());
    expect([rep.engine.kv_cache_dtype, rep.engine.kv_pool.dtype]).toEqual(['f32', 'f32']);
    // -v: the pool's facts carry the dtype.
    const logged: Record<string, unknown>[] = [];
    const log = { info: (o: Record<string, unknown>) => logged.push(o), debug: () => {}, warn: () => {}, error: () => {} };
    new LogRenderer(log as unknown as Logger).loaded({
      seconds: 1, backend: 'cpu', isa: 'x', weightBytes: 1, threads: 1, gpu: null, engineLine: '',
      kvPool: { blocks: 3, block_bytes: 2, dtype: 'f16', bytes: 6, source: 'kv_memory_bytes', fraction: null, free_bytes: null, budget_bytes: null },
    });
    expect(logged[0]!.kv_pool).toMatchObject({ dtype: 'f16' });
  });

  it('--kv-cache-dtype f16 reaches the engine whichever device --device auto resolves to', async () => {
    for (const cuda of [true, false]) {
      const backend = fakeBackend({ cuda });
      const d = io();
      expect(await runSweep(sweepCfg({ kvCacheDtype: 'f16', device: 'auto', format: 'json', verbosity: -1 }), backend, d.io)).toBe(0);
      expect(backend.engines.length, `cuda ${cuda}`).toBeGreaterThan(0);
      const rep = JSON.parse(d.out.text());
      expect([rep.engine.kv_cache_dtype, rep.engine.kv_pool.dtype], `cuda ${cuda}`).toEqual(['f16', 'f16']);
    }
  });
});

describe('the KV cache dtype across the addon boundary', () => {
  // A stand-in for the native addon (the interface loadEngine talks to): it records the options it is
  // given and reports the kvCacheDtype it was given in its info.
  function fakeAddon(name: string): string {
    const file = path.join(tmp, `${name}.cjs`);
    writeFileSync(file, `
exports.abiVersion = ${ADDON_ABI};
exports.options = [];
exports.cpuInfo = () => ({ cudaBuilt: false });
exports.Engine = class {
  constructor(spec, options, onEvents) {
    exports.options.push(options);
    this.options = options;
    setImmediate(() => onEvents([{ type: 'loaded' }]));
  }
  info() {
    return { backend: 'cpu', isa: 'fake', threads: 1, weightBytes: 0, dtype: 'f32', kvBlocksTotal: 4, blockSize: 16, kvBlockBytes: 1024, stateBytes: 0,
      kvCacheDtype: this.options.kvCacheDtype };
  }
  close() {}
};
`);
    return file;
  }
  const opts = { device: 'cpu' as const, threads: 1, blockSize: 16, kvcache: 'paged' as const, maxSeq: 64, maxSeqs: 1, prefillChunk: 16, stepTokenBudget: 16, prefixCache: false };
  const source = { synthetic: fakeCheckpoint().config };

  it('passes kvCacheDtype to the engine (f32 when not given) and reads it back from the engine info', async () => {
    const addonPath = fakeAddon('addon-kv-dtype');
    const recorded = (createRequire(import.meta.url)(addonPath) as { options: Array<Record<string, unknown>> }).options;
    const f16 = await loadEngine(source, { ...opts, kvCacheDtype: 'f16' }, {}, { addonPath });
    expect(recorded.at(-1)!.kvCacheDtype).toBe('f16');
    expect(f16.info.kvCacheDtype).toBe('f16');
    await f16.close();
    const dflt = await loadEngine(source, opts, {}, { addonPath });
    expect(recorded.at(-1)!.kvCacheDtype).toBe('f32');
    expect(dflt.info.kvCacheDtype).toBe('f32');
    await dflt.close();
  });

});
