// Where finished rows go: stdout (csv format) and the --output files (PREFIX.csv, PREFIX.jsonl,
// PREFIX.json), each row flushed as it completes so a killed sweep keeps every row it finished.
import { readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { csvHeaderLine, csvRowLine, errorRow, markdownTable, type SweepRow } from './csv.js';
import { SyncAppender, requestLine, writeFileAtomic } from './output.js';
import { failureText } from '../util/errno-text.js';
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

/**
 * The row stream: stdout (csv format) and the --output files, each row flushed as it completes. A file
 * that cannot be written (the disk filled, the directory went away) ends the files, not the row: the
 * row still reaches stdout, `failure` says which file and why, and `onFilesFailed` stops the sweep
 * after it (every later row could only reach stdout).
 */
export class RowSinks {
  private csvFile: SyncAppender | null = null;
  private jsonlFile: SyncAppender | null = null;
  private stdoutBroken = false;
  /** The first write of an --output file that failed (`writing F failed: no space left on device (ENOSPC)`), or null. */
  failure: string | null = null;

  constructor(
    private readonly cfg: SweepConfig,
    private readonly io: SinkIO,
    private readonly report: Report,
    onStdoutGone: () => void,
    private readonly onFilesFailed: (failure: string) => void = () => {},
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

  /** One write of an --output file; after a failure, none. */
  private file(name: string, write: () => void): void {
    if (this.failure !== null) return;
    try {
      write();
    } catch (err) {
      this.failure = `writing ${name} failed: ${failureText(err)}`;
      this.onFilesFailed(this.failure);
    }
  }

  begin(): void {
    const header = csvHeaderLine();
    if (this.cfg.format === 'csv') this.stdout(header);
    const prefix = this.cfg.output;
    if (prefix !== null) {
      // The prefix's missing directories are made only now, once the model has loaded (or failed to:
      // its error rows are written), so a refused run (a bad --model-path) leaves nothing behind;
      // sweep-options.ts checked before the load that they can be made.
      ensureOutputDir('--output', path.dirname(path.resolve(prefix)));
      removeStaleOutputs(prefix);
      this.file(`${prefix}.csv`, () => {
        this.csvFile = new SyncAppender(`${prefix}.csv`);
        this.csvFile.append(header);
      });
      this.file(`${prefix}.jsonl`, () => { this.jsonlFile = new SyncAppender(`${prefix}.jsonl`); });
      this.writeJson();
    }
  }

  /** Request lines and the report first, the CSV row last: a row in PREFIX.csv is a row in PREFIX.json. */
  row(row: SweepRow, out: RowOutcome | null): void {
    const jsonl = this.jsonlFile;
    if (out && jsonl && out.timed.length) {
      const first = firstTimedPass(out.timed);
      this.file(jsonl.file, () => jsonl.append(out.timed.map((t) => requestLine(row.isl, row.osl, row.concurrency, t, first)).join('')));
    }
    this.writeJson();
    const line = csvRowLine(row);
    const csv = this.csvFile;
    if (csv) this.file(csv.file, () => csv.append(line));
    if (this.cfg.format === 'csv') this.stdout(line);
  }

  writeJson(): void {
    const prefix = this.cfg.output;
    if (prefix !== null) this.file(`${prefix}.json`, () => writeFileAtomic(`${prefix}.json`, JSON.stringify(this.report, null, 2) + '\n'));
  }

  finish(rows: readonly SweepRow[]): void {
    this.writeJson();
    if (this.cfg.format === 'json') this.stdout(JSON.stringify(this.report, null, 2) + '\n');
    else if (this.cfg.format === 'md') this.stdout(markdownTable(rows));
    for (const f of [this.csvFile, this.jsonlFile]) {
      try { f?.close(); } catch { /* a close that fails loses nothing more: every row was fsynced */ }
    }
  }
}
