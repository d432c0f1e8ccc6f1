// Where finished rows go: stdout (csv format) and the --output files (PREFIX.csv, PREFIX.jsonl,
// PREFIX.json), each row flushed as it completes so a killed sweep keeps every row it finished.
import { readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { csvHeaderLine, csvRowLine, errorRow, markdownTable, type SweepRow } from './csv.js';
import { SyncAppender, requestLine, writeFileAtomic } from './output.js';
import { ensureOutputDir } from '../util/output-dir.js';
import { latencyBlock, type Report, type ReportRow } from './report.js';
import { firstTimedPass, rowSamples } from './row-samples.js';
import type { RowOutcome } from './runner.js';
import type { SweepConfig } from './sweep-config.js';

/** The streams the sinks write to. */
export interface SinkIO {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

export function toReportRow(out: RowOutcome): ReportRow {
  const f = out.figures;
  return {
    ...out.row,
    distributions: f ? f.distributions : null,
    samples: f ? rowSamples(out.timed, f.requestGaps) : null,
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
    load: out.load ?? null,
    endpoint: out.detail ?? null,
  };
}

export function rowFromError(isl: number, osl: number, c: number, reason: string): ReportRow {
  return toReportRow({ row: errorRow(isl, osl, c, reason), figures: null, counters: null, timed: [], profile: null, timedWallMs: null, interrupted: false });
}

/** A process that is still running (a signal 0 reaches it, or exists but is not ours to signal). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * What an earlier run with this prefix left that this run would not overwrite before it ends: its
 * PREFIX.html (rendered only at the end, so a killed or twice-interrupted run would leave the old page,
 * describing another run, beside the new JSON) and the PREFIX.*.tmp-PID siblings of an atomic write it
 * was killed in the middle of (those of a process still running are its own business and are kept).
 */
export function removeStaleOutputs(prefix: string): void {
  rmSync(`${prefix}.html`, { force: true }); // a directory there is refused with the usage checks (sweep-options.ts)
  const dir = path.dirname(prefix);
  const base = path.basename(prefix);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(`${base}.`)) continue;
    const m = /^\.(?:json|html|csv|jsonl)\.tmp-(\d+)$/.exec(name.slice(base.length));
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid || !alive(pid)) rmSync(path.join(dir, name), { force: true });
  }
}

/** The row stream: stdout (csv format) and the --output files, each row flushed as it completes. */
export class RowSinks {
  private csvFile: SyncAppender | null = null;
  private jsonlFile: SyncAppender | null = null;
  private stdoutBroken = false;

  constructor(
    private readonly cfg: SweepConfig,
    private readonly io: SinkIO,
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
      // The prefix's missing directories are made only now, once the model has loaded (or failed to:
      // its error rows are written), so a refused run (a bad --model-path) leaves nothing behind;
      // sweep-options.ts checked before the load that they can be made.
      ensureOutputDir('--output', path.dirname(path.resolve(this.cfg.output)));
      removeStaleOutputs(this.cfg.output);
      this.csvFile = new SyncAppender(`${this.cfg.output}.csv`);
      this.csvFile.append(header);
      this.jsonlFile = new SyncAppender(`${this.cfg.output}.jsonl`);
      this.writeJson();
    }
  }

  /** Request lines and the report first, the CSV row last: a row in PREFIX.csv is a row in PREFIX.json. */
  row(row: SweepRow, out: RowOutcome | null): void {
    if (out && this.jsonlFile && out.timed.length) {
      const first = firstTimedPass(out.timed);
      this.jsonlFile.append(out.timed.map((t) => requestLine(row.isl, row.osl, row.concurrency, t, first)).join(''));
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

