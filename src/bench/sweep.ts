// The sweep: load the model once, run every cell x concurrency row one at a time, stream each finished row to
// stdout and to the --output files, and end with a summary. Returns the exit code.
import { performance } from 'node:perf_hooks';
import { UsageError } from '../util/usage-error.js';
import type { Device, EngineHandle, EngineOptions } from '../engine/types.js';
import { CheckpointError, type Checkpoint } from '../model/types.js';
import { gitInfo } from '../util/git.js';
import { cpuSample, machineInfo, nvidiaGpus, otherCpuShare } from '../util/machine.js';
import { REPO_ROOT, TOOL_VERSION } from '../util/version.js';
import { csvHeaderLine, csvRowLine, errorRow, markdownTable, type SweepRow } from './csv.js';
import { createLogger } from './logger.js';
import { ttftOf } from './metrics.js';
import { appendMemoryStage, memoryStageRows, type MemoryStage } from './memory-stages.js';
import type { SweepConfig } from './sweep-config.js';
import { SyncAppender, requestLine, writeFileAtomic } from './output.js';
import { formatOpsReport, formatPipelineReport } from './profile.js';
import { promptVocab } from './prompts.js';
import { latencyBlock, modelSection, Report, type ReportRow } from './report.js';
import { colorEnabled, engineLine, HumanRenderer, LogRenderer, type SweepRenderer } from './render.js';
import { engineOptionsFrom } from '../engine/options.js';
import { errMessage, runRow, type RowOutcome } from './runner.js';

/** What the sweep needs from the model and engine modules (injected so tests can drive a simulated engine). */
export interface SweepBackend {
  ensureEmbeddedModel(): Promise<string>;
  loadCheckpoint(dir: string): Checkpoint | Promise<Checkpoint>;
  loadEngine(
    ckpt: Checkpoint,
    opts: EngineOptions,
    hooks?: { onLoadProgress?: (layersDone: number, layersTotal: number) => void },
  ): Promise<EngineHandle>;
  /** --device to the engine's device: auto picks cuda when the build has a usable GPU backend; a UsageError
   * when cuda is asked of a build without one. Called before anything is loaded. */
  resolveDevice(choice: SweepConfig['device']): Device;
}

export interface SweepIO {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  stderrIsTTY: boolean;
  env: NodeJS.ProcessEnv;
  argv: string[];
  /** Install SIGINT/SIGTERM handlers (the CLI does; unit tests drive `abort` instead). */
  handleSignals: boolean;
  abort?: AbortController;
}

export const EXIT_OK = 0;
export const EXIT_USAGE = 2;
export const EXIT_ROWS_FAILED = 3;
export const EXIT_INTERRUPTED = 130;
export const EXIT_TERMINATED = 143;
/** A row whose run saw other processes take at least this share of the CPU says so in its notes. */
export const CONTENTION_NOTE_SHARE = 0.1;

export function engineOptions(cfg: SweepConfig, device: Device): EngineOptions {
  // The sweep sizes the state slots from its largest concurrency (`serve` takes --max-seqs).
  return engineOptionsFrom(cfg, device, Math.max(...cfg.concurrency), cfg.profile || cfg.profilePipeline);
}

function toReportRow(out: RowOutcome): ReportRow {
  const f = out.figures;
  return {
    ...out.row,
    distributions: f ? f.distributions : null,
    latency: f && out.row.status === 'ok' ? latencyBlock(out.row, f) : null,
    timed_requests: out.timed.length,
    generated_tokens: f ? f.generatedTokens : null,
    decode_tokens: f ? f.decodeTokens : null,
    decode_window_ms: f ? f.decodeWindowMs : null,
    timed_wall_ms: out.timedWallMs,
    itl_excluded_gaps: f ? f.mixedGaps : null,
    cached_prompt_tokens: f ? f.cachedPromptTokens : null,
    counters: out.counters,
    profile: out.profile,
    cpu_other_share: null,
  };
}

function rowFromError(isl: number, osl: number, c: number, reason: string): ReportRow {
  return toReportRow({ row: errorRow(isl, osl, c, reason), figures: null, counters: null, timed: [], profile: null, timedWallMs: null, interrupted: false });
}

/** The row stream: stdout (csv format) and the --output files, each row flushed as it completes. */
class RowSinks {
  private csvFile: SyncAppender | null = null;
  private jsonlFile: SyncAppender | null = null;
  private stdoutBroken = false;

  constructor(
    private readonly cfg: SweepConfig,
    private readonly io: SweepIO,
    private readonly report: Report,
    onStdoutGone: () => void,
  ) {
    io.stdout.on('error', (err: NodeJS.ErrnoException) => {
      // A closed pipe (bench | head) ends the sweep quietly; the files, if any, still get every finished row.
      this.stdoutBroken = true;
      if (err.code !== 'EPIPE') io.stderr.write(`bench: stdout: ${err.message}\n`);
      onStdoutGone();
    });
  }

  private stdout(text: string): void {
    if (!this.stdoutBroken) this.io.stdout.write(text);
  }

  begin(): void {
    const header = csvHeaderLine();
    if (this.cfg.format === 'csv') this.stdout(header);
    if (this.cfg.output !== null) {
      this.csvFile = new SyncAppender(`${this.cfg.output}.csv`);
      this.csvFile.append(header);
      this.jsonlFile = new SyncAppender(`${this.cfg.output}.jsonl`);
      this.writeJson();
    }
  }

  /** Request lines and the report first, the CSV row last: a row in PREFIX.csv is a row in PREFIX.json. */
  row(row: SweepRow, out: RowOutcome | null): void {
    if (out && this.jsonlFile && out.timed.length) {
      this.jsonlFile.append(out.timed.map((t) => requestLine(row.isl, row.osl, row.concurrency, t)).join(''));
    }
    this.writeJson();
    const line = csvRowLine(row);
    this.csvFile?.append(line);
    if (this.cfg.format === 'csv') this.stdout(line);
  }

  writeJson(): void {
    if (this.cfg.output !== null) writeFileAtomic(`${this.cfg.output}.json`, JSON.stringify(this.report, null, 2) + '\n');
  }

  finish(rows: readonly SweepRow[]): void {
    this.writeJson();
    if (this.cfg.format === 'json') this.stdout(JSON.stringify(this.report, null, 2) + '\n');
    else if (this.cfg.format === 'md') this.stdout(markdownTable(rows));
    this.csvFile?.close();
    this.jsonlFile?.close();
  }
}

export async function runSweep(cfg: SweepConfig, backend: SweepBackend, io: SweepIO): Promise<number> {
  const startedAt = new Date().toISOString(); // a calendar stamp for the report; no figure is timed with Date
  const log = createLogger(cfg.verbosity);
  const tty = io.stderrIsTTY;
  const renderer: SweepRenderer = cfg.verbosity >= 1
    ? new LogRenderer(log)
    : new HumanRenderer(io.stderr, tty, colorEnabled(tty, io.env), cfg.verbosity < 0);

  // Usage checks that need the engine's word come before anything is loaded.
  const device = backend.resolveDevice(cfg.device);

  const machine = machineInfo();
  const gpus = device === 'cuda' ? nvidiaGpus() : [];
  const report = new Report({
    toolVersion: TOOL_VERSION,
    git: gitInfo(REPO_ROOT),
    argv: io.argv,
    machine,
    gpus,
    config: cfg,
    startedAt,
  });

  const abort = io.abort ?? new AbortController();
  let loading = true;
  let stopCode = EXIT_INTERRUPTED; // SIGINT (and an abort from a test or a closed stdout); SIGTERM: 143
  const onSignal = (sig: NodeJS.Signals) => {
    if (loading || abort.signal.aborted) {
      // Nothing finished yet (or a second signal): leave now.
      renderer.close();
      process.exit(sig === 'SIGTERM' ? EXIT_TERMINATED : EXIT_INTERRUPTED);
    }
    renderer.warn(`${sig}: stopping after the rows already finished; the row in progress is dropped`);
    if (sig === 'SIGTERM') stopCode = EXIT_TERMINATED;
    abort.abort();
  };
  if (io.handleSignals) {
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }

  let engine: EngineHandle | null = null;
  const sinks = new RowSinks(cfg, io, report, () => abort.abort());
  const rows: SweepRow[] = [];
  try {
    renderer.header({ toolVersion: TOOL_VERSION, cpuModel: machine.cpuModel, threads: cfg.threads || machine.logicalCores });
    const embedded = cfg.modelPath === null;
    const modelDir = cfg.modelPath ?? (await backend.ensureEmbeddedModel());
    renderer.modelPath(modelDir, embedded);

    const tc0 = performance.now();
    let ckpt: Checkpoint;
    try {
      ckpt = await backend.loadCheckpoint(modelDir);
    } catch (err) {
      if (err instanceof CheckpointError && !embedded) throw new UsageError(`--model-path: ${err.message}`);
      throw err;
    }
    const checkpointMs = performance.now() - tc0;
    report.model = modelSection(ckpt, embedded);
    renderer.loadStage('checkpoint', {
      path: ckpt.dir, shards: ckpt.shards.length, bytes_on_disk: ckpt.bytesOnDisk, param_count: ckpt.paramCount,
      dtype: ckpt.dtype, layers: ckpt.config.numLayers, ms: checkpointMs,
    });

    const opts = engineOptions(cfg, device);
    renderer.loadStage('engine_load_start', { device, options: opts });
    const te0 = performance.now();
    let loadError: string | null = null;
    try {
      engine = await backend.loadEngine(ckpt, opts, { onLoadProgress: (d, t) => renderer.loadProgress(d, t) });
    } catch (err) {
      loadError = errMessage(err);
    }
    const loadMs = performance.now() - te0;
    loading = false;

    if (engine === null) {
      renderer.error(`model failed to load: ${loadError}`);
      report.status = 'load_failed';
      sinks.begin();
      for (const cell of cfg.cells) {
        for (const c of cfg.concurrency) {
          const r = rowFromError(cell.isl, cell.osl, c, `model failed to load: ${loadError}`);
          rows.push(r);
          report.rows.push(r);
          sinks.row(r, null);
        }
      }
      return finish(EXIT_ROWS_FAILED);
    }

    const info = engine.info;
    report.engine = { ...info, options: opts };
    report.modelLoad = { checkpoint_ms: checkpointMs, engine_ms: loadMs, weight_bytes: info.weightBytes };
    renderer.loadStage('engine', { backend: info.backend, isa: info.isa, threads: info.threads, weight_bytes: info.weightBytes, dtype: info.dtype, kv_blocks_total: info.kvBlocksTotal, ms: loadMs });
    const gpu = info.backend === 'cuda'
      ? {
        name: info.gpuName ?? gpus[0]?.name ?? 'unnamed GPU',
        memoryMb: info.gpuMemoryBytes !== undefined ? Math.round(info.gpuMemoryBytes / (1024 * 1024)) : (gpus[0]?.memoryMb ?? 0),
      }
      : null;
    renderer.loaded({
      seconds: (checkpointMs + loadMs) / 1000,
      backend: info.backend,
      isa: info.isa,
      weightBytes: info.weightBytes,
      threads: info.threads,
      gpu,
      engineLine: engineLine(opts, info),
      sweepLine: `${cfg.cells.map((c) => `${c.isl}:${c.osl}`).join(', ')} x concurrency ${cfg.concurrency.join(',')}; ` +
        `${cfg.warmup} warm-up + ${cfg.iters} timed pass${cfg.iters === 1 ? '' : 'es'}; ${cfg.prompts} prompts` +
        `${cfg.sharedPrefix ? `, shared prefix ${cfg.sharedPrefix}` : ''}; seed ${cfg.seed}`,
    });
    if (cfg.latencyOnly) renderer.note('--latency-only: concurrency 1 only');
    if (cfg.skipTraining) {
      const msg = 'Training benchmark: none in lumen-bench (--skip-training accepted; there is nothing to skip)';
      renderer.note(msg);
      report.notes.push(msg);
    }

    const eng = engine;
    const stage = (s: MemoryStage) => {
      if (cfg.memoryStages === null) return;
      const stageRows = memoryStageRows(s, eng, ckpt, TOOL_VERSION);
      appendMemoryStage(cfg.memoryStages, stageRows);
      renderer.debug('memory_stage', { stage: s, rows: stageRows });
    };
    stage('weights_bound');

    sinks.begin();
    renderer.sweepStart();
    const vocab = promptVocab(ckpt.config.vocabSize);
    let sweepFirstToken = false;
    let sweepFirstRequest = false;
    let interrupted = false;

    outer: for (const cell of cfg.cells) {
      let c1DecodeTokS: number | null = null;
      for (const c of cfg.concurrency) {
        if (abort.signal.aborted) { interrupted = true; break outer; }
        const label = `${cell.isl}:${cell.osl} c=${c}`;
        renderer.rowStart(label, { isl: cell.isl, osl: cell.osl, concurrency: c }, () => eng.nowMs());
        const cpuBefore = cpuSample();
        const out = await runRow(eng, {
          cell, concurrency: c, warmup: cfg.warmup, iters: cfg.iters, maxSeq: cfg.maxSeq, seed: cfg.seed,
          prompts: cfg.prompts, sharedPrefix: cfg.sharedPrefix, vocab, profile: opts.profile === true, c1DecodeTokS,
        }, abort.signal, {
          phase: (p, total) => renderer.rowPhase(p, total),
          tokens: (n) => renderer.stepTokens(n),
          firstToken: () => {
            if (!sweepFirstToken) { sweepFirstToken = true; stage('warmup_forward'); }
          },
          firstRequestDone: () => {
            if (!sweepFirstRequest) { sweepFirstRequest = true; stage('first_generation'); }
          },
          requestDone: (t, timed) => renderer.debug('request', {
            cell: label, timed, pass: t.pass, session: t.session, id: t.result.id,
            tokens: t.result.tokens.length, ttft_ms: ttftOf(t.result),
          }),
        });
        const otherCpu = otherCpuShare(cpuBefore, cpuSample());
        if (otherCpu !== null && otherCpu >= CONTENTION_NOTE_SHARE && !out.interrupted) {
          const note = `other processes used ${(otherCpu * 100).toFixed(0)}% of the machine's CPU during this row (figures may be noisy)`;
          out.row.notes = out.row.notes ? `${out.row.notes}; ${note}` : note;
          renderer.warn(`${label}: ${note}`, { cell: label, cpu_other_share: otherCpu });
        }
        renderer.rowEnd(label, out);
        if (out.interrupted) { interrupted = true; break outer; }
        if (c === 1) c1DecodeTokS = out.row.status === 'ok' ? out.row.decode_tok_s : null;
        rows.push(out.row);
        report.rows.push({ ...toReportRow(out), cpu_other_share: otherCpu });
        sinks.row(out.row, out);
        if (out.profile) {
          const scope = `${label}, timed passes`;
          if (cfg.profile) renderer.profile('ops', formatOpsReport(scope, out.profile.ops), out.profile.ops);
          if (cfg.profilePipeline) renderer.profile('pipeline', formatPipelineReport(scope, out.profile.pipeline), out.profile.pipeline);
        } else if (opts.profile && out.row.status === 'ok') {
          renderer.warn(`${label}: the engine returned no profile although profiling was requested`);
        }
      }
    }

    report.status = interrupted ? 'interrupted' : 'complete';
    if (interrupted) return finish(stopCode);
    return finish(rows.every((r) => r.status === 'ok') ? EXIT_OK : EXIT_ROWS_FAILED);
  } finally {
    renderer.close();
    if (io.handleSignals) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
    if (engine !== null) await engine.close();
  }

  function finish(code: number): number {
    report.exitCode = code;
    report.finishedAt = new Date().toISOString();
    sinks.finish(rows);
    renderer.summary(report.rows, report.status === 'interrupted');
    return code;
  }
}
