// stderr for people: header, load bar, one progress bar per row, summary table. On a TTY with colours (unless
// NO_COLOR); otherwise plain lines without a single escape code. With -v/-vv the same events become pino JSON
// lines instead, so stderr stays machine-readable.
import { Chalk, type ChalkInstance } from 'chalk';
import cliProgress from 'cli-progress';
import { performance } from 'node:perf_hooks';
import type { EngineInfo, EngineOptions, KvCacheDtype } from '../engine/types.js';
import { describeSynthetic } from '../model/synthetic-model.js';
import type { SyntheticWeights } from '../model/types.js';
import type { Logger } from './logger.js';
import { latencyRow, type ReportRow } from './report.js';
import type { RowOutcome } from './runner.js';
import { textTable } from './table.js';
import { bytesText } from '../util/bytes-text.js';

export interface HeaderInfo {
  toolVersion: string;
  cpuModel: string;
  /** The machine's logical cores. */
  logicalCores: number;
  /** The CPUs this process may run on (its affinity mask: what --threads 0 means); defaults to logicalCores. */
  usableCpus?: number;
  /** The engine's CPU worker threads (--threads, 0 resolved); null when no engine computes on this CPU (--endpoint, CUDA). */
  engineThreads: number | null;
}

/** The header's CPU line: the machine's cores (and, when fewer, those this process may use). */
export function cpuLine(h: HeaderInfo): string {
  const usable = h.usableCpus ?? h.logicalCores;
  const cores = `${h.logicalCores} logical core${h.logicalCores === 1 ? '' : 's'}`;
  return `${h.cpuModel} (${usable < h.logicalCores ? `${cores}, ${usable} usable by this process` : cores})`;
}

/** More engine threads than CPUs to run them: the threads share cores, which skews every figure. */
export function oversubscriptionWarning(h: HeaderInfo): string | null {
  const usable = h.usableCpus ?? h.logicalCores;
  if (h.engineThreads === null || h.engineThreads <= usable) return null;
  return `--threads ${h.engineThreads} is more than the ${usable} CPU${usable === 1 ? '' : 's'} this process can use: ` +
    'the engine\'s threads share cores (oversubscribed), which skews every figure';
}

export interface LoadedInfo {
  seconds: number;
  backend: string;
  isa: string;
  weightBytes: number;
  threads: number;
  gpu: { name: string; memoryMb: number } | null;
  engineLine: string;
  /** The KV pool as the engine sized it (header line and log fields). */
  kvPool?: KvPoolFacts;
  /** The sweep's plan (the sweep); absent for `serve`, which prints its URL instead. */
  sweepLine?: string;
}

/** The header's engine line: the options the engine was loaded with and what it reports (sweep and serve). */
export function engineLine(opts: EngineOptions, info: EngineInfo): string {
  return `${opts.kvcache} KV, block ${info.blockSize}, ${info.kvBlocksTotal} blocks, prefill chunk ${opts.prefillChunk}, ` +
    `step budget ${opts.stepTokenBudget}, max-seq ${opts.maxSeq}, ${opts.maxSeqs} seqs, prefix cache ${opts.prefixCache ? 'on' : 'off'}, ` +
    `${info.isa}, ${info.threads} threads, ${info.dtype}`;
}

/** The KV pool as the engine sized it at load (the JSON report's `engine.kv_pool`, the -v logs). */
export interface KvPoolFacts {
  blocks: number;
  block_bytes: number;
  /** The KV cache's element type (f32 | f16), which block_bytes and bytes count in. */
  dtype: KvCacheDtype;
  bytes: number;
  /** What sized it: max_seq x max_seqs, kv_memory_bytes, fraction of free device memory, fraction of available host memory. */
  source: string;
  /** Fraction-sized pools: the fraction, the free memory it was taken of, the budget left for the pool after the states. */
  fraction: number | null;
  free_bytes: number | null;
  budget_bytes: number | null;
}

export function kvPoolFacts(info: EngineInfo): KvPoolFacts {
  return {
    blocks: info.kvBlocksTotal,
    block_bytes: info.kvBlockBytes,
    dtype: info.kvCacheDtype,
    bytes: info.kvPoolBytes ?? info.kvBlocksTotal * info.kvBlockBytes,
    source: info.kvPool ?? 'max_seq x max_seqs',
    fraction: info.kvMemoryFraction ?? null,
    free_bytes: info.kvFreeBytes ?? null,
    budget_bytes: info.kvBudgetBytes ?? null,
  };
}

/** The header's KV pool line: blocks, bytes, where the size came from, and the element type. */
export function kvPoolLine(k: KvPoolFacts): string {
  let why: string;
  if (k.source === 'kv_memory_bytes') why = '--kv-memory';
  else if (k.fraction !== null && k.free_bytes !== null) {
    const of = k.source === 'fraction of available host memory' ? 'available host memory (MemAvailable)' : 'free device memory';
    why = `${k.fraction} of ${bytesText(k.free_bytes)} ${of} after the weights, with the recurrent states`;
  } else why = 'max-seq x max-seqs tokens';
  return `${k.blocks} blocks x ${bytesText(k.block_bytes)} = ${bytesText(k.bytes)} (${why}); KV cache ${k.dtype}`;
}

/** The header of an endpoint sweep: the server, its model and what it says of itself. */
export interface EndpointHeader {
  url: string;
  api: string;
  model: string;
  server: string;
  tokenizer: string;
  /** Prompt tokens the server adds to each prompt's text (chat template, BOS); null unknown. */
  overheadTokens: number | null;
  metrics: string;
}

/** `1h02m`, `4m05s`, `12s`. */
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h > 0) return `${h}h${String(m).padStart(2, '0')}m`;
  if (m > 0) return `${m}m${String(sec).padStart(2, '0')}s`;
  return `${sec}s`;
}

/**
 * The sweep's overall progress line (a TTY): rows done of the total, time since the first row began,
 * and an ETA from the rows so far (their mean time x the rows left, less the current row's time).
 */
export function overallProgress(done: number, total: number, elapsedMs: number, finishedRowsMs: number, currentRowMs: number): string {
  const eta = done > 0 ? Math.max(0, (finishedRowsMs / done) * (total - done) - currentRowMs) : null;
  return `row ${Math.min(done + 1, total)}/${total}, ${done} done, ${formatDuration(elapsedMs)} elapsed, ETA ${eta === null ? '-' : formatDuration(eta)}`;
}

export interface SweepRenderer {
  header(h: HeaderInfo): void;
  /** The checkpoint directory, once known (the embedded model may be generated first); `synthetic` for `synthetic:<preset>`. */
  modelPath(dir: string, embedded: boolean, synthetic?: SyntheticWeights): void;
  /** How the weights are stored (src/model/weight-format.ts), once the checkpoint is read. */
  weights(line: string): void;
  loadStage(stage: string, fields: Record<string, unknown>): void;
  loadProgress(done: number, total: number): void;
  loaded(l: LoadedInfo): void;
  note(msg: string): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug(event: string, fields: Record<string, unknown>): void;
  /** The endpoint's header lines (instead of the model's). */
  endpoint(h: EndpointHeader, sweepLine: string): void;
  sweepStart(totalRows: number): void;
  rowStart(label: string, fields: Record<string, unknown>, clock: () => number): void;
  rowPhase(phase: 'warm-up' | 'timed', totalTokens: number): void;
  /** Tokens generated by one engine step. */
  stepTokens(n: number): void;
  rowEnd(label: string, out: RowOutcome): void;
  profile(kind: 'ops' | 'pipeline', text: string, data: unknown): void;
  summary(rows: readonly ReportRow[], interrupted: boolean): void;
  close(): void;
}

/** Colour only on a TTY and only when NO_COLOR is unset or empty (https://no-color.org). */
export function colorEnabled(isTTY: boolean, env: NodeJS.ProcessEnv = process.env): boolean {
  return isTTY && !(env.NO_COLOR !== undefined && env.NO_COLOR !== '');
}

export const fmt = {
  ms(v: number | null, digits = 1): string {
    return v === null ? '-' : v.toFixed(digits);
  },
  rate(v: number | null): string {
    if (v === null) return '-';
    return v >= 100 ? v.toFixed(0) : v.toFixed(1);
  },
};

/** Rate over the last `windowMs` of (time, count) samples. */
export class LiveRate {
  private samples: Array<[number, number]> = [];
  constructor(private readonly windowMs = 2000) {}
  sample(t: number, count: number): number | null {
    this.samples.push([t, count]);
    while (this.samples.length > 2 && t - this.samples[1]![0] >= this.windowMs) this.samples.shift();
    const [t0, c0] = this.samples[0]!;
    return t > t0 ? ((count - c0) * 1000) / (t - t0) : null;
  }
  reset(): void {
    this.samples = [];
  }
}

export class HumanRenderer implements SweepRenderer {
  private readonly c: ChalkInstance;
  private loadBar: cliProgress.SingleBar | null = null;
  private rowBar: cliProgress.SingleBar | null = null;
  private ticker: NodeJS.Timeout | null = null;
  private tokens = 0;
  private phase = '';
  private clock: () => number = () => 0;
  private readonly rate = new LiveRate();
  private held: string[] = [];
  private rowsTotal = 0;
  private rowsDone = 0;
  private sweepT0 = 0;
  private rowT0 = 0;
  private finishedRowsMs = 0;

  constructor(
    private readonly out: NodeJS.WriteStream | NodeJS.WritableStream,
    private readonly tty: boolean,
    color: boolean,
    private readonly quiet: boolean,
  ) {
    this.c = new Chalk({ level: color ? 1 : 0 });
  }

  private line(s = ''): void {
    if (!this.quiet) this.out.write(`${s}\n`);
  }

  private kv(key: string, value: string): void {
    this.line(`  ${this.c.dim(key.padEnd(22))} ${this.c.bold(value)}`);
  }

  private section(title: string): void {
    this.line();
    this.line(`  ${this.c.cyan.bold('▌')} ${this.c.cyan.bold(title)}`);
  }

  header(h: HeaderInfo): void {
    this.line();
    this.line(`  ${this.c.cyan.bold('lumen-bench')} ${this.c.dim(`v${h.toolVersion}`)}`);
    this.kv('CPU', cpuLine(h));
    if (h.engineThreads !== null) this.kv('Engine threads', String(h.engineThreads));
    const over = oversubscriptionWarning(h);
    if (over !== null) this.warn(over);
  }

  modelPath(dir: string, embedded: boolean, synthetic?: SyntheticWeights): void {
    this.kv('Model path', synthetic ? describeSynthetic(synthetic) : embedded ? `${dir} (embedded synthetic tiny model)` : dir);
  }

  weights(line: string): void {
    this.kv('Weights', line);
  }

  loadStage(_stage: string, _fields: Record<string, unknown>): void {}

  loadProgress(done: number, total: number): void {
    if (!this.tty || this.quiet) return;
    if (!this.loadBar) {
      this.loadBar = new cliProgress.SingleBar({
        stream: this.out as NodeJS.WritableStream,
        format: `  loading layers ${this.c.cyan('{bar}')} {value}/{total}  ({duration}s)`,
        barCompleteChar: '#',
        barIncompleteChar: '-',
        barsize: 40,
        hideCursor: true,
        clearOnComplete: true,
        fps: 10,
      });
      this.loadBar.start(total, done);
    } else {
      this.loadBar.setTotal(total);
      this.loadBar.update(done);
    }
  }

  loaded(l: LoadedInfo): void {
    if (this.loadBar) {
      this.loadBar.stop();
      this.loadBar = null;
    }
    this.flushHeld();
    if (l.gpu) this.kv('GPU', `${l.gpu.name} (${l.gpu.memoryMb} MiB)`);
    this.kv('Model loaded', `${l.seconds.toFixed(2)}s (backend: ${l.backend}, ${bytesText(l.weightBytes)}${l.backend === 'cuda' ? ' VRAM' : ''})`);
    this.kv('Engine', l.engineLine);
    if (l.kvPool) this.kv('KV pool', kvPoolLine(l.kvPool));
    if (l.sweepLine !== undefined) this.kv('Sweep', l.sweepLine);
  }

  /** A field of the header (`serve`: the URL it listens on). */
  field(key: string, value: string): void {
    this.kv(key, value);
  }

  note(msg: string): void {
    this.line(`  ${this.c.dim(msg)}`);
  }

  warn(msg: string): void {
    this.message(`  ${this.c.yellow('warning:')} ${msg}\n`);
  }

  error(msg: string): void {
    this.message(`  ${this.c.red('error:')} ${msg}\n`);
  }

  /** A live bar owns its line (and restores the cursor to it when stopped): hold messages until it is gone. */
  private message(text: string): void {
    if (this.loadBar) {
      // Only a failed load speaks while the load bar is up: end the bar first.
      this.loadBar.stop();
      this.loadBar = null;
    }
    if (this.rowBar) this.held.push(text);
    else this.out.write(text);
  }

  private flushHeld(): void {
    for (const t of this.held.splice(0)) this.out.write(t);
  }

  debug(): void {}

  endpoint(h: EndpointHeader, sweepLine: string): void {
    this.kv('Endpoint', `${h.url} (${h.api === 'chat' ? '/v1/chat/completions' : '/v1/completions'})`);
    this.kv('Server', h.server);
    this.kv('Model', h.model);
    this.kv('Tokenizer', `${h.tokenizer}${h.overheadTokens !== null ? `; the server adds ${h.overheadTokens} prompt tokens` : ''}`);
    this.kv('Server metrics', h.metrics);
    this.kv('Sweep', sweepLine);
  }

  sweepStart(totalRows: number): void {
    this.rowsTotal = totalRows;
    this.rowsDone = 0;
    this.finishedRowsMs = 0;
    this.sweepT0 = performance.now();
    this.section('Sweep');
  }

  private overall(): string {
    const now = performance.now();
    return overallProgress(this.rowsDone, this.rowsTotal, now - this.sweepT0, this.finishedRowsMs, now - this.rowT0);
  }

  rowStart(label: string, _fields: Record<string, unknown>, clock: () => number): void {
    this.tokens = 0;
    this.clock = clock;
    this.rowT0 = performance.now();
    this.rate.reset();
    this.line(`  ${this.c.cyan('→')} ${label}`);
    if (!this.tty || this.quiet) return;
    this.rowBar = new cliProgress.SingleBar({
      stream: this.out as NodeJS.WritableStream,
      format: `  ${this.c.dim(label)} [${this.c.cyan('{bar}')}] {value}/{total} tok ${this.c.dim('{phase} @ {rate} tok/s')} ${this.c.dim('| {overall}')}`,
      barCompleteChar: '=',
      barIncompleteChar: '-',
      barsize: 24,
      hideCursor: true,
      clearOnComplete: true,
      fps: 10,
    });
    this.rowBar.start(1, 0, { phase: '', rate: '-', overall: this.overall() });
    this.ticker = setInterval(() => this.tick(), 100);
    this.ticker.unref();
  }

  rowPhase(phase: 'warm-up' | 'timed', totalTokens: number): void {
    this.phase = phase;
    this.rowBar?.setTotal(totalTokens);
    if (!this.tty && !this.quiet) this.line(`    ${phase} ...`);
  }

  stepTokens(n: number): void {
    this.tokens += n;
  }

  private tick(): void {
    if (!this.rowBar) return;
    const r = this.rate.sample(this.clock(), this.tokens);
    this.rowBar.update(this.tokens, { phase: this.phase, rate: fmt.rate(r), overall: this.overall() });
  }

  rowEnd(label: string, out: RowOutcome): void {
    this.rowsDone++;
    this.finishedRowsMs += performance.now() - this.rowT0;
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = null;
    if (this.rowBar) {
      this.rowBar.stop();
      this.rowBar = null;
    }
    const r = out.row;
    if (out.interrupted) {
      this.line(`    ${this.c.yellow('✗')} ${label} interrupted (row not reported)`);
    } else if (r.status === 'ok') {
      const speed = r.concurrency > 1 && r.speedup_vs_c1 !== null ? `, ${r.speedup_vs_c1.toFixed(2)}x vs c=1` : '';
      const load = out.load;
      const achieved = load && load.achieved_concurrency !== null && (load.request_rate !== null || out.detail)
        ? `, achieved concurrency ${load.achieved_concurrency.toFixed(2)} of ${load.requested_concurrency}` : '';
      const good = load?.goodput && load.goodput.share !== null ? `, goodput ${(load.goodput.share * 100).toFixed(0)}% of requests` : '';
      this.line(`    ${this.c.green.bold('✓')} ${this.c.bold(fmt.rate(r.decode_tok_s))} tok/s decode${speed}, ` +
        `TTFT ${fmt.ms(r.ttft_ms)} ms, ITL p50 ${fmt.ms(r.itl_p50_ms, 2)} ms, p99 ${fmt.ms(r.itl_p99_ms, 2)} ms${achieved}${good}`);
    } else {
      this.out.write(`    ${this.c.red.bold('✗')} ${label}: ${r.reason}\n`);
    }
    this.flushHeld();
  }

  profile(_kind: 'ops' | 'pipeline', text: string): void {
    // Asked for explicitly, so printed even with -q; flush left so the report opens with its title line.
    this.message(text);
  }

  summary(rows: readonly ReportRow[], interrupted: boolean): void {
    if (this.quiet) return;
    this.section(interrupted ? 'Benchmark results (interrupted: finished rows only)' : 'Benchmark results');
    if (rows.length === 0) {
      this.line(this.c.dim(interrupted ? 'no row finished before the interruption' : 'no rows'));
      this.line();
      return;
    }
    // Prefill tok/s is the CSV's prefill_tok_s (isl over TTFT); Prefill ms the prefill steps' compute
    // alone (the Latency section gives its own rate), so TTFT - Prefill ms is the wait for a first step.
    const head = ['Cell', 'Conc', 'Status', 'Prefill ms', 'TTFT ms', 'Prefill tok/s', 'ITL mean', 'ITL p50', 'ITL p99', 'Decode tok/s', 'Speedup', 'Eff'];
    const body = rows.map((r) => {
      const lat = r.latency;
      return [
        `${r.isl}:${r.osl}`, String(r.concurrency), r.status,
        fmt.ms(lat?.prefill_time_ms ?? null), fmt.ms(r.ttft_ms), fmt.rate(r.prefill_tok_s), fmt.ms(lat?.mean_inter_token_ms ?? null, 2), fmt.ms(r.itl_p50_ms, 2), fmt.ms(r.itl_p99_ms, 2),
        fmt.rate(r.decode_tok_s), r.speedup_vs_c1 === null ? '-' : r.speedup_vs_c1.toFixed(2),
        r.batching_efficiency === null ? '-' : r.batching_efficiency.toFixed(2),
      ];
    });
    const [headLine, ...lines] = textTable(head, body, 3);
    this.line(this.c.dim(headLine!));
    lines.forEach((l, i) => this.line(body[i]![2] === 'ok' ? l : this.c.red(l)));
    for (const r of rows) if (r.status === 'error') this.line(`  ${this.c.red(`${r.isl}:${r.osl} c=${r.concurrency}`)}: ${r.reason}`);

    const single = latencyRow(rows);
    if (single?.latency) {
      const l = single.latency;
      this.section(`Latency (single request, ${l.isl}:${l.osl})`);
      this.kv('Prompt tokens', String(l.prompt_tokens));
      this.kv('Prefill', `${fmt.ms(l.prefill_time_ms)} ms (${fmt.rate(l.prefill_tokens_per_sec)} tok/s)`);
      this.kv('Time to first token', `${fmt.ms(l.time_to_first_token_ms)} ms`);
      const meanRate = l.mean_inter_token_ms ? 1000 / l.mean_inter_token_ms : null;
      this.kv('Mean inter-token', `${fmt.ms(l.mean_inter_token_ms, 2)} ms (${fmt.rate(meanRate)} tok/s)`);
      this.kv('P50 inter-token', `${fmt.ms(l.p50_inter_token_ms, 2)} ms`);
      this.kv('P99 inter-token', `${fmt.ms(l.p99_inter_token_ms, 2)} ms`);
      this.kv('Tokens generated', String(l.num_tokens_generated));
      this.kv('Spec method', l.spec_method);
    }
    this.line();
  }

  close(): void {
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = null;
    this.rowBar?.stop();
    this.loadBar?.stop();
    this.rowBar = null;
    this.loadBar = null;
    this.flushHeld();
  }
}

/** -v/-vv: every event a pino JSON line; no human text, no escape codes. */
export class LogRenderer implements SweepRenderer {
  private tokens = 0;
  private lastLoadLog = -1;

  constructor(private readonly log: Logger) {}

  header(h: HeaderInfo): void {
    this.log.info({
      event: 'start', version: h.toolVersion, cpu: h.cpuModel, logical_cores: h.logicalCores, usable_cpus: h.usableCpus ?? h.logicalCores,
      engine_threads: h.engineThreads,
    }, 'start');
    const over = oversubscriptionWarning(h);
    if (over !== null) this.warn(over, { engine_threads: h.engineThreads, usable_cpus: h.usableCpus ?? h.logicalCores });
  }

  weights(line: string): void {
    this.log.info({ event: 'weights', weight_format: line }, 'weights');
  }

  modelPath(dir: string, embedded: boolean, synthetic?: SyntheticWeights): void {
    this.log.info({ event: 'model_path', model_path: dir, embedded_model: embedded, ...(synthetic ? { synthetic: { ...synthetic } } : {}) },
      synthetic ? `model path: ${describeSynthetic(synthetic)}` : embedded ? 'no --model-path: using the embedded synthetic tiny model' : 'model path');
  }

  loadStage(stage: string, fields: Record<string, unknown>): void {
    this.log.info({ event: 'load_stage', stage, ...fields }, `load: ${stage}`);
  }

  loadProgress(done: number, total: number): void {
    if (done === this.lastLoadLog) return;
    this.lastLoadLog = done;
    this.log.debug({ event: 'load_progress', layers_done: done, layers_total: total }, 'loading layers');
  }

  loaded(l: LoadedInfo): void {
    this.log.info({ event: 'model_loaded', load_secs: l.seconds, backend: l.backend, isa: l.isa, weight_bytes: l.weightBytes, threads: l.threads, gpu: l.gpu, kv_pool: l.kvPool ?? null },
      'model loaded');
  }

  note(msg: string): void {
    this.log.info({ event: 'note' }, msg);
  }

  warn(msg: string, fields: Record<string, unknown> = {}): void {
    this.log.warn({ event: 'warning', ...fields }, msg);
  }

  error(msg: string, fields: Record<string, unknown> = {}): void {
    this.log.error({ event: 'error', ...fields }, msg);
  }

  debug(event: string, fields: Record<string, unknown>): void {
    this.log.debug({ event, ...fields }, event);
  }

  endpoint(h: EndpointHeader, sweepLine: string): void {
    this.log.info({ event: 'endpoint', ...h, sweep: sweepLine }, 'endpoint');
  }

  sweepStart(): void {}

  rowStart(label: string, fields: Record<string, unknown>): void {
    this.tokens = 0;
    this.log.info({ event: 'cell_start', cell: label, ...fields }, `cell start ${label}`);
  }

  rowPhase(phase: 'warm-up' | 'timed', totalTokens: number): void {
    this.log.debug({ event: 'phase', phase, tokens_in_row: totalTokens, tokens_so_far: this.tokens }, phase);
  }

  stepTokens(n: number): void {
    this.tokens += n;
  }

  rowEnd(label: string, out: RowOutcome): void {
    const r = out.row;
    const fields = {
      event: 'cell_end', cell: label, isl: r.isl, osl: r.osl, concurrency: r.concurrency, status: out.interrupted ? 'interrupted' : r.status,
      reason: r.reason || undefined, first_call_ms: r.first_call_ms, ttft_ms: r.ttft_ms, prefill_tok_s: r.prefill_tok_s,
      itl_p50_ms: r.itl_p50_ms, itl_p99_ms: r.itl_p99_ms, decode_tok_s: r.decode_tok_s, speedup_vs_c1: r.speedup_vs_c1,
      peak_active_bytes: r.peak_active_bytes, num_allocs: r.num_allocs,
      graph_hits: out.counters?.graphHits ?? null, graph_misses: out.counters?.graphMisses ?? null, graph_capture_ms: out.counters?.graphCaptureMs ?? null,
      device_peak_bytes: out.counters?.devicePeakBytes ?? null, device_allocs: out.counters?.deviceAllocs ?? null,
      timed_wall_ms: out.timedWallMs, tokens_seen: this.tokens,
      achieved_concurrency: out.load?.achieved_concurrency ?? null, goodput: out.load?.goodput ?? null,
    };
    if (r.status === 'ok') this.log.info(fields, `cell end ${label}`);
    else this.log.warn(fields, `cell ${out.interrupted ? 'interrupted' : 'failed'} ${label}: ${r.reason}`);
  }

  profile(kind: 'ops' | 'pipeline', text: string, data: unknown): void {
    this.log.info({ event: kind === 'ops' ? 'profile' : 'profile_pipeline', report: text, data }, kind === 'ops' ? 'Profiling Report Summary:' : 'Pipeline Profile Summary:');
  }

  summary(rows: readonly ReportRow[], interrupted: boolean): void {
    this.log.info({ event: 'summary', interrupted, rows: rows.length, ok: rows.filter((r) => r.status === 'ok').length }, 'sweep finished');
  }

  close(): void {}
}
