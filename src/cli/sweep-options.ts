// Sweep flags: raw commander values -> a validated SweepConfig. Every bad value is a UsageError naming its flag,
// raised before any model is touched.
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import type { GoodputBounds } from '../bench/load-figures.js';
import type { Cell, EndpointConfig, LoadConfig, OutputFormat, PromptMode, SweepConfig } from '../bench/sweep-config.js';
import { checkNamesFile, checkOutputDir, checkOutputFile, checkWritableFile, type CheckedDirs } from '../util/output-dir.js';
import { formatDuration } from '../bench/render.js';
import { UsageError } from '../util/usage-error.js';
import { ENGINE_DEFAULTS, ENGINE_FLAG_MAX, resolveEngineFlags, resolveModelPathFlags, type RawEngineFlags } from './engine-flags.js';
import { isInfinityWord, oneOf, parseCount, parseEndpointUrl, parseNumber } from './flag-values.js';

export const DEFAULT_CELLS: readonly Cell[] = [
  { isl: 128, osl: 128 },
  { isl: 2048, osl: 128 },
  { isl: 128, osl: 1024 },
];
export const DEFAULT_CONCURRENCY: readonly number[] = [1, 4, 8];
/** Cell used when only one of --isl/--osl (or the peer's --prompt-tokens/--max-output-tokens) is given. */
export const DEFAULT_ISL = 128;
export const DEFAULT_OSL = 128;

export const DEFAULTS = {
  ...ENGINE_DEFAULTS,
  warmup: 2,
  iters: 1,
  format: 'csv' as OutputFormat,
  seed: 0,
  sharedPrefix: 0,
  // --endpoint
  api: 'chat' as EndpointConfig['api'],
  timeoutS: 600,
  // open-loop load
  burstiness: 1,
};

/** Raw option values as commander hands them over (strings, booleans, the -v count); the engine's as every command's. */
export interface RawSweepOptions extends Omit<RawEngineFlags, 'maxSeqs'> {
  modelPath?: string;
  cells?: string;
  isl?: string;
  osl?: string;
  promptTokens?: string;
  maxOutputTokens?: string;
  concurrency?: string;
  sharedPrefix?: string;
  uniquePrompts?: boolean;
  repeatPrompts?: boolean;
  warmup?: string;
  iters?: string;
  memoryStages?: string;
  output?: string;
  format?: string;
  profile?: boolean;
  profilePipeline?: boolean;
  seed?: string;
  verbose?: number;
  quiet?: boolean;
  latencyOnly?: boolean;
  skipTraining?: boolean;
  endpoint?: string;
  api?: string;
  model?: string;
  apiKeyEnv?: string;
  tokenizer?: string;
  timeoutS?: string;
  requestRate?: string;
  burstiness?: string;
  numRequests?: string;
  goodput?: string;
}

/** Flags of the in-process engine: with --endpoint the server has its own, so giving one is a usage error. */
const IN_PROCESS_FLAGS: readonly [keyof RawSweepOptions, string][] = [
  ['modelPath', '--model-path'], ['quant', '--quant'], ['device', '--device'], ['threads', '--threads'], ['kvcache', '--kvcache'], ['paged', '--paged'],
  ['blockSize', '--block-size'], ['prefillChunk', '--prefill-chunk'], ['stepTokenBudget', '--step-token-budget'], ['maxSeq', '--max-seq'], ['cudaGraphs', '--cuda-graphs'], ['kvMemory', '--kv-memory'],
  ['kvCacheDtype', '--kv-cache-dtype'], ['memoryStages', '--memory-stages'], ['profile', '--profile'], ['profilePipeline', '--profile-pipeline'],
];

/** Flags that only mean something with --endpoint. */
const ENDPOINT_ONLY_FLAGS: readonly [keyof RawSweepOptions, string][] = [
  ['api', '--api'], ['model', '--model'], ['apiKeyEnv', '--api-key-env'], ['tokenizer', '--tokenizer'], ['timeoutS', '--timeout-s'],
];

/** `ttft:MS,tpot:MS,e2el:MS` (any of the three, each once). */
export function parseGoodput(flag: string, value: string): GoodputBounds {
  const keys = { ttft: 'ttftMs', tpot: 'tpotMs', e2el: 'e2elMs' } as const;
  const out: GoodputBounds = {};
  const parts = value.split(',').map((p) => p.trim());
  if (parts.some((p) => p === '')) throw new UsageError(`${flag}: '${value}' is not a list of bounds (e.g. ttft:500,tpot:50,e2el:10000)`);
  for (const p of parts) {
    const m = /^([a-z0-9]+):(.+)$/.exec(p);
    if (!m) throw new UsageError(`${flag}: '${p}' is not a bound (name:milliseconds, e.g. ttft:500)`);
    const key = keys[m[1] as keyof typeof keys];
    if (key === undefined) throw new UsageError(`${flag}: '${m[1]}' is not one of ttft, tpot, e2el`);
    if (out[key] !== undefined) throw new UsageError(`${flag}: ${m[1]} is given twice`);
    out[key] = parseNumber(`${flag} (${m[1]})`, m[2]!, 0);
  }
  return out;
}

function resolveEndpoint(raw: RawSweepOptions, env: NodeJS.ProcessEnv): EndpointConfig | null {
  if (raw.endpoint === undefined) {
    const stray = ENDPOINT_ONLY_FLAGS.find(([k]) => raw[k] !== undefined);
    if (stray) throw new UsageError(`${stray[1]} applies to --endpoint only`);
    return null;
  }
  const local = IN_PROCESS_FLAGS.find(([k]) => raw[k] !== undefined && raw[k] !== false);
  if (local) throw new UsageError(`${local[1]} sets up the in-process engine; with --endpoint the server has its own settings`);
  const url = parseEndpointUrl('--endpoint', raw.endpoint);
  const api = oneOf('--api', raw.api ?? DEFAULTS.api, ['chat', 'completions'] as const);
  if (raw.model !== undefined && raw.model.trim() === '') throw new UsageError('--model: empty model name');
  let apiKeyEnv: string | null = null;
  if (raw.apiKeyEnv !== undefined) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(raw.apiKeyEnv)) throw new UsageError(`--api-key-env: '${raw.apiKeyEnv}' is not an environment variable name`);
    if (!env[raw.apiKeyEnv]) throw new UsageError(`--api-key-env: the environment variable ${raw.apiKeyEnv} is not set or empty`);
    apiKeyEnv = raw.apiKeyEnv;
  }
  let tokenizer: string | null = null;
  if (raw.tokenizer !== undefined) {
    const dir = path.resolve(raw.tokenizer);
    if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new UsageError(`--tokenizer: ${raw.tokenizer} is not a directory`);
    if (!existsSync(path.join(dir, 'tokenizer.json'))) throw new UsageError(`--tokenizer: ${raw.tokenizer} has no tokenizer.json`);
    tokenizer = dir;
  }
  const timeoutS = raw.timeoutS === undefined ? DEFAULTS.timeoutS : parseNumber('--timeout-s', raw.timeoutS, 0.001, 86400);
  return { url, api, model: raw.model ?? null, apiKeyEnv, tokenizer, timeoutS };
}

function resolveLoad(raw: RawSweepOptions): LoadConfig {
  let requestRate: number | null = null;
  if (raw.requestRate !== undefined) {
    requestRate = isInfinityWord(raw.requestRate) ? Infinity : parseNumber('--request-rate', raw.requestRate, 1e-6);
  } else {
    if (raw.burstiness !== undefined) throw new UsageError('--burstiness shapes the arrivals of --request-rate; give --request-rate too');
    if (raw.numRequests !== undefined) throw new UsageError('--num-requests counts the arrivals of --request-rate; give --request-rate too');
  }
  const burstiness = raw.burstiness === undefined ? DEFAULTS.burstiness : parseNumber('--burstiness', raw.burstiness, 1e-3, 1000);
  if (requestRate === Infinity && raw.burstiness !== undefined) {
    throw new UsageError('--burstiness shapes the gaps between arrivals; with --request-rate inf every request arrives at once, so it would change nothing');
  }
  const numRequests = raw.numRequests === undefined ? null : parseCount('--num-requests', raw.numRequests, 1, 1_000_000);
  if (numRequests !== null && raw.iters !== undefined) {
    throw new UsageError('--iters and --num-requests both set an open-loop row\'s timed requests (concurrency x --iters, or --num-requests); give one');
  }
  const goodput = raw.goodput === undefined ? null : parseGoodput('--goodput', raw.goodput);
  return { requestRate, burstiness, numRequests, goodput };
}

/** `128:128,2048:128` -> cells. Each side a whole number >= 1. */
export function parseCells(flag: string, value: string): Cell[] {
  const parts = value.split(',').map((s) => s.trim());
  if (parts.length === 0 || parts.some((p) => p === '')) {
    throw new UsageError(`${flag}: '${value}' is not a comma-separated list of isl:osl pairs (e.g. 128:128,2048:128)`);
  }
  return parts.map((p) => {
    const m = /^([^:]+):([^:]+)$/.exec(p);
    if (!m) throw new UsageError(`${flag}: '${p}' is not an isl:osl pair (e.g. 128:128)`);
    const isl = parseCount(`${flag} (isl of '${p}')`, m[1]!, 1, ENGINE_FLAG_MAX.tokens);
    const osl = parseCount(`${flag} (osl of '${p}')`, m[2]!, 1, ENGINE_FLAG_MAX.tokens);
    return { isl, osl };
  });
}

/**
 * `8,1,4,4` -> the ladder [1,4,8] (each >= 1, sorted ascending, each once) and, when the list repeated
 * a count, the warning that names what was dropped (repeatsWarning).
 */
export function parseConcurrency(flag: string, value: string): { ladder: number[]; warning: string | null } {
  const parts = value.split(',').map((s) => s.trim());
  if (parts.some((p) => p === '')) {
    throw new UsageError(`${flag}: '${value}' is not a comma-separated list of session counts (e.g. 1,4,8)`);
  }
  const given = parts.map((p) => parseCount(flag, p, 1, ENGINE_FLAG_MAX.maxSeqs));
  return { ladder: [...new Set(given)].sort((a, b) => a - b), warning: repeatsWarning(flag, given, String, 'concurrency') };
}

/**
 * A list flag's repeats, dropped: each cell, or each concurrency, runs once (a repeated row would be a
 * second row with the same key, which `bench compare` cannot pair). The warning names what was dropped;
 * null when nothing was.
 */
export function repeatsWarning<T>(flag: string, items: readonly T[], key: (t: T) => string, what: string): string | null {
  const seen = new Set<string>();
  const repeated = new Set<string>();
  for (const it of items) {
    const k = key(it);
    if (seen.has(k)) repeated.add(k);
    seen.add(k);
  }
  if (repeated.size === 0) return null;
  return `${flag}: ${[...repeated].join(', ')} given more than once; each ${what} runs once (the repeats are dropped)`;
}

/** The first of each key, in order. */
function uniqueBy<T>(items: readonly T[], key: (t: T) => string): T[] {
  const seen = new Set<string>();
  return items.filter((t) => !seen.has(key(t)) && seen.add(key(t)) !== undefined);
}

const cellKey = (c: Cell): string => `${c.isl}:${c.osl}`;

export function resolveSweepConfig(raw: RawSweepOptions, env: NodeJS.ProcessEnv = process.env): SweepConfig {
  const endpoint = resolveEndpoint(raw, env);
  // Model directory: checked here so a typo costs nothing.
  const { modelPath, quant } = resolveModelPathFlags(raw);

  // The engine flags (shared with `serve`): checked first, in the order they always were.
  const engine = resolveEngineFlags(raw);
  const device = engine.device;

  // Cells: --cells, or one cell from --isl/--osl (aliases: the peer's --prompt-tokens/--max-output-tokens).
  if (raw.isl !== undefined && raw.promptTokens !== undefined) {
    throw new UsageError('--isl and --prompt-tokens both set the prompt length; give one');
  }
  if (raw.osl !== undefined && raw.maxOutputTokens !== undefined) {
    throw new UsageError('--osl and --max-output-tokens both set the output length; give one');
  }
  const islFlag = raw.isl !== undefined ? '--isl' : '--prompt-tokens';
  const oslFlag = raw.osl !== undefined ? '--osl' : '--max-output-tokens';
  const islRaw = raw.isl ?? raw.promptTokens;
  const oslRaw = raw.osl ?? raw.maxOutputTokens;
  const warnings: string[] = [];
  let cells: Cell[];
  let cellsFlag: string | undefined;
  if (raw.cells !== undefined) {
    cellsFlag = '--cells';
    if (islRaw !== undefined || oslRaw !== undefined) {
      throw new UsageError(`--cells and ${islRaw !== undefined ? islFlag : oslFlag} both choose the cells; give one`);
    }
    const given = parseCells('--cells', raw.cells);
    const w = repeatsWarning('--cells', given, cellKey, 'cell');
    if (w !== null) warnings.push(w);
    cells = uniqueBy(given, cellKey);
  } else if (islRaw !== undefined || oslRaw !== undefined) {
    cellsFlag = [islRaw !== undefined ? islFlag : null, oslRaw !== undefined ? oslFlag : null].filter((f) => f !== null).join('/');
    cells = [{
      isl: islRaw !== undefined ? parseCount(islFlag, islRaw, 1, ENGINE_FLAG_MAX.tokens) : DEFAULT_ISL,
      osl: oslRaw !== undefined ? parseCount(oslFlag, oslRaw, 1, ENGINE_FLAG_MAX.tokens) : DEFAULT_OSL,
    }];
  } else {
    cells = DEFAULT_CELLS.map((c) => ({ ...c }));
  }

  let concurrency: number[];
  if (raw.latencyOnly) {
    if (raw.concurrency !== undefined && raw.concurrency.trim() !== '1') {
      throw new UsageError('--latency-only runs concurrency 1 only; it cannot be combined with --concurrency');
    }
    concurrency = [1];
  } else {
    if (raw.concurrency !== undefined) {
      const { ladder, warning } = parseConcurrency('--concurrency', raw.concurrency);
      if (warning !== null) warnings.push(warning);
      concurrency = ladder;
    } else {
      concurrency = [...DEFAULT_CONCURRENCY];
    }
  }

  // The in-process engine runs max(--concurrency) sequences, each taking a token of every decode step.
  const maxConc = Math.max(...concurrency);
  if (endpoint === null && engine.stepTokenBudget < maxConc) {
    throw new UsageError(`--step-token-budget ${engine.stepTokenBudget} must be at least the largest --concurrency, ${maxConc} (one decode token per sequence)`);
  }

  if (raw.uniquePrompts && raw.repeatPrompts) {
    throw new UsageError('--unique-prompts and --repeat-prompts contradict each other; give one');
  }
  const prompts: PromptMode = raw.repeatPrompts ? 'repeat' : 'unique';

  const kvcache = engine.kvcache;

  const format = oneOf('--format', raw.format ?? DEFAULTS.format, ['csv', 'json', 'md'] as const);

  const verbose = raw.verbose ?? 0;
  if (raw.quiet && verbose > 0) throw new UsageError('-q and -v contradict each other; give one');
  const verbosity = raw.quiet ? -1 : Math.min(verbose, 2);

  const num = (flag: string, v: string | undefined, dflt: number, min: number, max?: number) =>
    v === undefined ? dflt : parseCount(flag, v, min, max);

  const cfg: SweepConfig = {
    endpoint,
    load: resolveLoad(raw),
    modelPath,
    ...(quant !== undefined ? { quant } : {}),
    device,
    threads: engine.threads,
    cells,
    ...(cellsFlag !== undefined ? { cellsFlag } : {}),
    concurrency,
    sharedPrefix: num('--shared-prefix', raw.sharedPrefix, DEFAULTS.sharedPrefix, 0, ENGINE_FLAG_MAX.tokens),
    prompts,
    warmup: num('--warmup', raw.warmup, DEFAULTS.warmup, 0, 1000),
    iters: num('--iters', raw.iters, DEFAULTS.iters, 1, 1000),
    kvcache,
    blockSize: engine.blockSize,
    prefillChunk: engine.prefillChunk,
    stepTokenBudget: engine.stepTokenBudget,
    maxSeq: engine.maxSeq,
    maxSeqGiven: engine.maxSeqGiven ?? false,
    cudaGraphs: engine.cudaGraphs,
    kvMemory: engine.kvMemory,
    kvCacheDtype: engine.kvCacheDtype,
    memoryStages: raw.memoryStages !== undefined ? path.resolve(raw.memoryStages) : null,
    output: raw.output !== undefined ? raw.output : null,
    format,
    profile: !!raw.profile,
    profilePipeline: !!raw.profilePipeline,
    seed: num('--seed', raw.seed, DEFAULTS.seed, 0, 0xffffffff),
    verbosity,
    latencyOnly: !!raw.latencyOnly,
    skipTraining: !!raw.skipTraining,
    warnings,
  };

  const span = openLoopSpanWarning(cfg);
  if (span !== null) warnings.push(span);

  // Each directory an output goes to is tried once (a file created and removed), whichever flags share it.
  const checked: CheckedDirs = new Set();
  if (raw.memoryStages !== undefined) checkNamesFile('--memory-stages', raw.memoryStages);
  if (cfg.memoryStages !== null) checkOutputFile('--memory-stages', cfg.memoryStages, { checked }); // its directories made at the first stage
  if (cfg.output !== null) {
    if (cfg.output === '' || cfg.output.endsWith('/')) throw new UsageError(`--output: '${cfg.output}' is not a file prefix`);
    // Checked here (a file in the way names its path; the directory, or its nearest existing parent,
    // must take new files); the prefix's missing directories are made when the first files are written
    // (RowSinks.begin, after the model loaded), so a refused run leaves nothing behind.
    const dir = path.dirname(path.resolve(cfg.output));
    checkOutputDir('--output', dir, checked);
    if (existsSync(dir)) for (const ext of OUTPUT_EXTENSIONS) {
      // .json is renamed over, .html removed first; .csv and .jsonl are opened in place.
      checkWritableFile('--output', `${path.resolve(cfg.output)}${ext}`, { replaced: ext === '.json' || ext === '.html', checked });
    }
  }
  return cfg;
}

/** The files `--output PREFIX` writes. */
const OUTPUT_EXTENSIONS = ['.csv', '.json', '.jsonl', '.html'] as const;

/** An open-loop schedule longer than this is said at the start (the sweep waits for every arrival). */
const LONG_SCHEDULE_MS = 3_600_000;

/**
 * A warning when --request-rate's arrivals alone would take more than an hour over the whole sweep
 * (each row's timed requests over the rate, summed over the rows): a rate of 1e-6/s is honoured,
 * request by request, and the progress line shows nothing moving in between.
 */
function openLoopSpanWarning(cfg: SweepConfig): string | null {
  const rate = cfg.load.requestRate;
  if (rate === null || !Number.isFinite(rate)) return null;
  const perRow = (c: number) => cfg.load.numRequests ?? c * cfg.iters;
  const requests = cfg.cells.length * cfg.concurrency.reduce((sum, c) => sum + perRow(c), 0);
  const ms = (requests / rate) * 1000;
  if (ms <= LONG_SCHEDULE_MS) return null;
  const days = ms / 86_400_000;
  return `--request-rate ${rate}: the ${requests} timed requests arrive over about ${days >= 2 ? `${Math.round(days)} days` : formatDuration(ms)} ` +
    '(requests / rate, summed over the rows), and the sweep waits for each arrival';
}
