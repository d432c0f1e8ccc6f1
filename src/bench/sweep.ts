// The sweep: load the model once (sweep-load.ts), run every cell x concurrency row one at a time
// (sweep-rows.ts), stream each finished row to stdout and to the --output files (row-sinks.ts), stop
// cleanly on a signal (sweep-signals.ts), and end with a summary. Returns the exit code.
import type { Device, EngineHandle, EngineOptions, RequestEngine } from '../engine/types.js';
import { engineOptionsFrom } from '../engine/options.js';
import type { ModelCheckpoint } from '../model/types.js';
import { gitInfo } from '../util/git.js';
import { machineInfo, nvidiaGpus } from '../util/machine.js';
import { REPO_ROOT, TOOL_VERSION } from '../util/version.js';
import type { SweepRow } from './csv.js';
import { createLogger } from './logger.js';
import { Report } from './report.js';
import { colorEnabled, HumanRenderer, LogRenderer, oversubscriptionWarning, type SweepRenderer } from './render.js';
import { RowSinks, rowFromError } from './row-sinks.js';
import type { SweepConfig } from './sweep-config.js';
import { loadModel, sweepLine } from './sweep-load.js';
import { engineCounterProbe } from './row-probe.js';
import { runRows, type RowsTarget } from './sweep-rows.js';
import { promptVocab } from './prompts.js';
import type { RowProbe } from './row-probe.js';
import type { EndpointHeader } from './render.js';
import { watchStopSignals } from './sweep-signals.js';

/** What the sweep needs from the model and engine modules (injected so tests can drive a simulated engine). */
export interface SweepBackend {
  ensureEmbeddedModel(): Promise<string>;
  /** The model `--model-path` (and `--quant`) name: a checkpoint directory or a GGUF file. */
  loadCheckpoint(dir: string, quant?: string): ModelCheckpoint | Promise<ModelCheckpoint>;
  loadEngine(
    ckpt: ModelCheckpoint,
    opts: EngineOptions,
    hooks?: { onLoadProgress?: (layersDone: number, layersTotal: number) => void },
  ): Promise<EngineHandle>;
  /** --device to the engine's device: auto picks cuda when the build has a usable GPU backend; a UsageError
   * when cuda is asked of a build without one. Called before anything is loaded. */
  resolveDevice(choice: SweepConfig['device']): Device;
  /** The CPUs `--threads 0` means, as the engine resolves it (its affinity mask). */
  usableCpus(): number;
  /** --endpoint: reach the server (src/endpoint/connect.ts); a UsageError when it needs a flag it was not given. */
  connectEndpoint?(cfg: SweepConfig, env: NodeJS.ProcessEnv): Promise<EndpointConnection>;
}

/** A server the sweep drives instead of an engine it loads. */
export interface EndpointConnection {
  /** Null when the server could not be used (loadError says why). */
  engine: RequestEngine | null;
  loadError: string | null;
  notes: string[];
  /** What the server says of itself: the header, and the report's `endpoint` provenance. */
  header: EndpointHeader | null;
  provenance: Record<string, unknown> | null;
  /** Exclusive bound of prompt token ids (the tokenizer's). */
  vocab: number;
  /** The server's max_model_len, when it says. */
  maxSeq: number | null;
  /** The probe of one row: prompt texts, /metrics around the timed passes, the wire notes. */
  probe(cell: { isl: number; osl: number }): RowProbe;
}

export interface SweepIO {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  stderrIsTTY: boolean;
  env: NodeJS.ProcessEnv;
  argv: string[];
  /** Install SIGINT/SIGTERM handlers (the CLI does; unit tests drive `abort` instead). */
  handleSignals: boolean;
  /**
   * After the rows and the engine's close, still under the sweep's signal handlers: the CLI renders
   * PREFIX.html here. Takes the sweep's exit code and returns the command's.
   */
  afterSweep?: (code: number, error: (msg: string) => void) => Promise<number>;
  /** How a signal after the rows ends the process (process.exit; a test records it instead). */
  exit?: (code: number) => never;
  abort?: AbortController;
}

export const EXIT_OK = 0;
export const EXIT_USAGE = 2;
export const EXIT_ROWS_FAILED = 3;
/** An --output file could not be written (a full disk): the sweep stopped after that row. */
export const EXIT_FAILED = 1;
export { EXIT_INTERRUPTED, EXIT_TERMINATED } from './sweep-signals.js';

export function engineOptions(cfg: SweepConfig, device: Device): EngineOptions {
  // The sweep sizes the state slots from its largest concurrency (`serve` takes --max-seqs).
  return engineOptionsFrom(cfg, device, Math.max(...cfg.concurrency), cfg.profile || cfg.profilePipeline);
}

export async function runSweep(cfg: SweepConfig, backend: SweepBackend, io: SweepIO): Promise<number> {
  const startedAt = new Date().toISOString(); // a calendar stamp for the report; no figure is timed with Date
  const log = createLogger(cfg.verbosity);
  const tty = io.stderrIsTTY;
  const renderer: SweepRenderer = cfg.verbosity >= 1
    ? new LogRenderer(log)
    : new HumanRenderer(io.stderr, tty, colorEnabled(tty, io.env), cfg.verbosity < 0);

  // Usage checks that need the engine's word come before anything is loaded (no engine loads for --endpoint).
  const device: Device = cfg.endpoint ? 'cpu' : backend.resolveDevice(cfg.device);
  const opts = cfg.endpoint ? null : engineOptions(cfg, device); // --kv-memory checked against the device here

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
  const signals = watchStopSignals(renderer, abort, io.handleSignals);
  let engine: RequestEngine | null = null;
  // An --output file that cannot be written stops the sweep after the row it failed on (which still
  // reaches stdout): exit 1, the file and the reason named.
  const sinks = new RowSinks(cfg, io, report, () => abort.abort(), () => abort.abort());
  const rows: SweepRow[] = [];
  // A signal once the rows are done (the engine closing, the page rendering): the report records the
  // exit status the shell will see, and the process leaves at once.
  const leave = (sig: NodeJS.Signals, code: number): never => {
    report.exitCode = code;
    sinks.writeJson();
    const page = cfg.output !== null && io.afterSweep !== undefined && sinks.failure === null;
    renderer.warn(`${sig}: stopped${page ? ` before ${cfg.output}.html was written (the other files are complete; \`bench report ${cfg.output}.json\` writes it)` : ''}`);
    renderer.close();
    return (io.exit ?? process.exit)(code);
  };
  let code: number;
  let finished = false;
  try {
    code = await sweep();
    // No page from a report the sweep could not finish writing (its error line says so).
    if (io.afterSweep && sinks.failure === null) code = await io.afterSweep(code, (msg) => renderer.error(msg));
  } finally {
    renderer.close();
    signals.dispose();
  }
  return code;

  async function sweep(): Promise<number> {
    try {
      const usable = backend.usableCpus();
      const header = {
        toolVersion: TOOL_VERSION, cpuModel: machine.cpuModel, logicalCores: machine.logicalCores, usableCpus: usable,
        // No engine here (an endpoint), or one that computes on the GPU: its CPU threads are not the figures'.
        engineThreads: cfg.endpoint || device === 'cuda' ? null : cfg.threads || usable,
      };
      renderer.header(header);
      const over = oversubscriptionWarning(header);
      if (over !== null) report.notes.push(over);
      for (const w of cfg.warnings ?? []) { renderer.warn(w); report.notes.push(w); }
      let target: RowsTarget;
      let loadError: string | null = null;
      if (cfg.endpoint) {
        if (!backend.connectEndpoint) throw new Error('internal: this sweep backend cannot reach an endpoint');
        const conn = await backend.connectEndpoint(cfg, io.env);
        engine = conn.engine;
        loadError = conn.loadError;
        report.endpoint = conn.provenance;
        if (conn.header) renderer.endpoint(conn.header, sweepLine(cfg));
        for (const n of conn.notes) { renderer.note(n); report.notes.push(n); }
        target = {
          local: null, vocab: conn.vocab, maxSeq: conn.maxSeq ?? Number.MAX_SAFE_INTEGER, maxSeqSource: "the server's max_model_len",
          probe: (cell) => conn.probe(cell), commonPrefixTokens: conn.header?.overheadTokens ?? 0,
        };
      } else {
        const loaded = await loadModel(cfg, backend, device, opts!, gpus, renderer, report);
        const local = loaded.engine;
        engine = local;
        loadError = loaded.loadError;
        target = {
          local: local && { engine: local, ckpt: loaded.ckpt }, vocab: promptVocab(loaded.ckpt.config.vocabSize), maxSeq: loaded.opts.maxSeq,
          probe: () => engineCounterProbe(local!), // rows run only once the engine loaded
        };
      }
      signals.loaded();
      // An endpoint's load error names the endpoint itself (`endpoint URL unreachable: ...`).
      const failure = cfg.endpoint ? String(loadError) : `model failed to load: ${loadError}`;
      if (engine === null) {
        renderer.error(failure);
        report.status = 'load_failed';
        sinks.begin();
        for (const cell of cfg.cells) {
          for (const c of cfg.concurrency) {
            const r = rowFromError(cell.isl, cell.osl, c, failure);
            rows.push(r);
            report.rows.push(r);
            sinks.row(r, null);
          }
        }
        return finish(EXIT_ROWS_FAILED);
      }
      if (cfg.latencyOnly) renderer.note('--latency-only: concurrency 1 only');
      if (cfg.skipTraining) {
        const msg = 'Training benchmark: none in lumen-bench (--skip-training accepted; there is nothing to skip)';
        renderer.note(msg);
        report.notes.push(msg);
      }

      const interrupted = await runRows(cfg, engine, target, cfg.profile || cfg.profilePipeline, abort.signal, renderer, report, sinks, rows);
      report.status = interrupted ? 'interrupted' : 'complete';
      if (interrupted) return finish(signals.stopCode());
      return finish(rows.every((r) => r.status === 'ok') ? EXIT_OK : EXIT_ROWS_FAILED);
    } finally {
      // Only after the rows ended normally: a signal after an internal error is no clean stop.
      if (finished) signals.afterRows(leave);
      if (engine !== null) await engine.close();
    }
  }

  /** The rows' ending; an --output file that failed, before or at the report's last write, makes it EXIT_FAILED. */
  function finish(sweepCode: number): number {
    finished = true;
    const codeNow = () => (sinks.failure !== null ? EXIT_FAILED : sweepCode);
    report.exitCode = codeNow();
    report.finishedAt = new Date().toISOString();
    sinks.finish(rows);
    const code = codeNow(); // the last write failing (the disk filled after the last row) fails the command too
    renderer.summary(report.rows, report.status === 'interrupted');
    if (sinks.failure !== null) {
      const left = rows.length < cfg.cells.length * cfg.concurrency.length ? `; the sweep stopped after ${rows.length} row(s)` : '';
      renderer.error(`--output ${cfg.output}: ${sinks.failure}${left} (stdout has every finished row; the files hold those written before the failure)`);
    }
    return code;
  }
}
