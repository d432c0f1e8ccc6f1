// Reading a saved PREFIX.json back (`bench report`, `bench compare`): the fields the HTML page and the
// comparison use, checked, with a one-line error naming the file and the field when one is wrong.
import { readFileSync } from 'node:fs';
import { CSV_COLUMNS } from '../bench/csv.js';
import type { ReportRow } from '../bench/report.js';
import { REPORT_SCHEMA_VERSION } from '../bench/report.js';
import { binValueMs } from '../bench/row-samples.js';
import { isJsonObject, parseJsonBytes } from '../util/json.js';
import { UsageError } from '../util/usage-error.js';

type Section = Record<string, unknown> | null;

/** A saved report as the readers see it: the top-level sections as written by src/bench/report.ts. */
export interface SavedReport {
  file: string;
  schema_version: number;
  tool: Section;
  command_line: Section;
  status: string;
  started_at: string | null;
  finished_at: string | null;
  machine: Section;
  engine: Section;
  model: Section;
  endpoint: Section;
  model_load: Section;
  sweep: Section;
  rows: ReportRow[];
  notes: string[];
}


const show = (v: unknown): string => {
  if (v === undefined) return 'missing';
  // JSON has no infinity: a number past a double's range (1e999) parses as one, which JSON.stringify writes as null.
  if (typeof v === 'number' && !Number.isFinite(v)) return `${v} (a number beyond a double's range)`;
  return JSON.stringify(v)?.slice(0, 40) ?? String(v);
};
const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** The per-request sample columns of rows[].samples besides `pass` (src/bench/row-samples.ts). */
const SAMPLE_COLUMNS = ['ttft_ms', 'decode_tok_s', 'itl_p50_ms', 'itl_p99_ms'] as const;
/**
 * The sizes a figure of a report can have: a token rate, a time in ms, a byte count or a count. Outside
 * them a NEW/BASE ratio can overflow to Infinity or to 0 (JSON writes Infinity as null): such a report was
 * not written by a sweep.
 */
const FIGURE_RANGE = { min: 1e-9, max: 1e15 } as const;
/** The fields of a Distribution (src/bench/stats.ts). */
const DISTRIBUTION_FIELDS = ['n', 'mean', 'p50', 'p90', 'p99', 'min', 'max'] as const;

/**
 * rows[].samples.itl_bins_per_octave and itl_gap_bins (src/bench/row-samples.ts): both or neither (a
 * report written before them has neither); one histogram per timed pass, each [bin, count] a whole bin
 * whose value 2^(bin / bins_per_octave) ms is a measurement (FIGURE_RANGE), and a count >= 1.
 */
function checkGapBins(so: Record<string, unknown>, pass: number[], at: string, bad: (field: string, why: string) => never): void {
  const per = so.itl_bins_per_octave;
  const bins = so.itl_gap_bins;
  if (per === undefined && bins === undefined) return;
  if (typeof per !== 'number' || !Number.isInteger(per) || per < 1 || per > 65536) bad(`${at}.itl_bins_per_octave`, `is ${show(per)}, expected a whole number 1..65536 beside itl_gap_bins`);
  if (!Array.isArray(bins)) return bad(`${at}.itl_gap_bins`, `is ${show(bins)}, expected an array beside itl_bins_per_octave`);
  const passes = pass.reduce((m, p) => Math.max(m, p + 1), 0);
  if (bins.length !== passes) bad(`${at}.itl_gap_bins`, `has ${bins.length} entries, samples.pass has ${passes} timed passes`);
  bins.forEach((h: unknown, p) => {
    if (!Array.isArray(h)) bad(`${at}.itl_gap_bins[${p}]`, `is ${show(h)}, expected an array of [bin, count] pairs`);
    (h as unknown[]).forEach((pair, j) => {
      const where = `${at}.itl_gap_bins[${p}][${j}]`;
      if (!Array.isArray(pair) || pair.length !== 2) return bad(where, `is ${show(pair)}, expected a [bin, count] pair`);
      const [b, c] = pair as unknown[];
      const ms = typeof b === 'number' && Number.isInteger(b) ? binValueMs(b, per as number) : Number.NaN;
      if (!(ms >= FIGURE_RANGE.min && ms <= FIGURE_RANGE.max)) {
        bad(where, `has the bin ${show(b)}, expected a whole number whose gap, 2^(bin / ${per as number}) ms, is a measurement (${FIGURE_RANGE.min.toExponential()} to ${FIGURE_RANGE.max.toExponential()})`);
      }
      if (typeof c !== 'number' || !Number.isInteger(c) || c < 1) bad(where, `has the count ${show(c)}, expected a whole number >= 1`);
      return undefined;
    });
  });
}

/**
 * Checks a parsed report; `file` names it in the errors. Every field a reader uses is checked for its
 * type, so a report edited by hand or by another tool is a one-line error naming the field, never a
 * crash deeper in (`s.replace is not a function`) nor a figure silently read as "not measured" (a
 * figure written as the string "250.5"). A field a reader does not use is not checked.
 */
export function checkReport(value: unknown, file: string): SavedReport {
  const bad = (field: string, why: string): never => { throw new UsageError(`${file}: ${field} ${why} (is it a PREFIX.json written by bench --output?)`); };
  if (!isJsonObject(value)) return bad('the top level', 'is not a JSON object');
  if (value.schema_version !== REPORT_SCHEMA_VERSION) bad('schema_version', `is ${JSON.stringify(value.schema_version)}, expected ${REPORT_SCHEMA_VERSION}`);
  const section = (k: string): Section => {
    const v = value[k];
    if (v === null || v === undefined) return null;
    return isJsonObject(v) ? v : bad(k, 'is not an object');
  };
  /** null and absent read as "not there"; anything else must be a string. */
  const optString = (v: unknown, field: string): void => {
    if (v !== null && v !== undefined && typeof v !== 'string') bad(field, `is ${show(v)}, expected a string`);
  };
  const optNumber = (v: unknown, field: string): void => {
    if (v !== null && v !== undefined && !isNum(v)) bad(field, `is ${show(v)}, expected a number or null`);
  };
  /**
   * A figure: a number or null, and one that a measurement can be: not negative (every figure of a
   * sweep is a time, a rate, a count or a ratio of them), and of a size whose ratio to another stays
   * finite and non-zero.
   */
  const optFigure = (v: unknown, field: string): void => {
    optNumber(v, field);
    if (isNum(v) && v < 0) bad(field, `is ${v}, a negative figure (no measurement of a sweep is below 0)`);
    if (isNum(v) && v !== 0 && !(Math.abs(v) >= FIGURE_RANGE.min && Math.abs(v) <= FIGURE_RANGE.max)) {
      bad(field, `is ${v}, outside what a measurement can be (${FIGURE_RANGE.min.toExponential()} to ${FIGURE_RANGE.max.toExponential()} in size, or 0)`);
    }
  };
  if (!Array.isArray(value.rows)) bad('rows', 'is not an array');
  const rows = value.rows as unknown[];
  rows.forEach((r, i) => {
    const at = `rows[${i}]`;
    if (!isJsonObject(r)) return bad(at, 'is not an object');
    for (const k of ['isl', 'osl', 'concurrency'] as const) {
      if (typeof r[k] !== 'number' || !Number.isInteger(r[k])) bad(`${at}.${k}`, 'is not an integer');
      if ((r[k] as number) < 1) bad(`${at}.${k}`, `is ${r[k] as number}, expected a whole number >= 1`);
    }
    if (r.status !== 'ok' && r.status !== 'error') bad(`${at}.status`, `is ${JSON.stringify(r.status)}, expected "ok" or "error"`);
    for (const c of CSV_COLUMNS) {
      if (c.kind === 'figure') optFigure(r[c.name], `${at}.${c.name}`);
      else if (c.kind === 'text') optString(r[c.name], `${at}.${c.name}`);
    }
    optNumber(r.cpu_other_share, `${at}.cpu_other_share`);
    if (isNum(r.cpu_other_share) && !(r.cpu_other_share >= 0 && r.cpu_other_share <= 1)) {
      bad(`${at}.cpu_other_share`, `is ${r.cpu_other_share}, expected a share of the machine's CPU, 0 to 1`);
    }
    const d = r.distributions;
    if (d !== null && d !== undefined) {
      if (!isJsonObject(d)) bad(`${at}.distributions`, `is ${show(d)}, expected an object or null`);
      for (const [name, dist] of Object.entries(d as Record<string, unknown>)) {
        if (dist === null) continue;
        if (!isJsonObject(dist)) bad(`${at}.distributions.${name}`, `is ${show(dist)}, expected an object or null`);
        for (const f of DISTRIBUTION_FIELDS) optFigure((dist as Record<string, unknown>)[f], `${at}.distributions.${name}.${f}`);
      }
    }
    const s = r.samples;
    if (s !== null && s !== undefined) {
      if (!isJsonObject(s)) bad(`${at}.samples`, `is ${show(s)}, expected an object or null`);
      const so = s as Record<string, unknown>;
      if (!Array.isArray(so.pass)) bad(`${at}.samples.pass`, `is ${show(so.pass)}, expected an array`);
      const pass = so.pass as unknown[];
      pass.forEach((p, j) => {
        if (typeof p !== 'number' || !Number.isInteger(p) || p < 0) bad(`${at}.samples.pass[${j}]`, `is ${show(p)}, expected a whole number >= 0`);
      });
      for (const k of SAMPLE_COLUMNS) {
        const col = so[k];
        if (!Array.isArray(col)) bad(`${at}.samples.${k}`, `is ${show(col)}, expected an array`);
        const arr = col as unknown[];
        if (arr.length !== pass.length) bad(`${at}.samples.${k}`, `has ${arr.length} entries, samples.pass ${pass.length}`);
        arr.forEach((v, j) => optFigure(v, `${at}.samples.${k}[${j}]`));
      }
      checkGapBins(so, pass as number[], `${at}.samples`, bad);
    }
    return undefined;
  });
  if (value.notes !== undefined && value.notes !== null) {
    if (!Array.isArray(value.notes)) bad('notes', `is ${show(value.notes)}, expected an array of strings`);
    (value.notes as unknown[]).forEach((n, i) => { if (typeof n !== 'string') bad(`notes[${i}]`, `is ${show(n)}, expected a string`); });
  }
  for (const k of ['status', 'started_at', 'finished_at'] as const) optString(value[k], k);
  const machine = section('machine');
  if (machine && machine.gpus !== undefined && machine.gpus !== null) {
    if (!Array.isArray(machine.gpus)) bad('machine.gpus', `is ${show(machine.gpus)}, expected an array`);
    (machine.gpus as unknown[]).forEach((g, i) => { if (!isJsonObject(g)) bad(`machine.gpus[${i}]`, `is ${show(g)}, expected an object`); });
  }
  const commandLine = section('command_line');
  if (commandLine) optString(commandLine.shell, 'command_line.shell');
  const str = (k: string): string | null => (typeof value[k] === 'string' ? (value[k] as string) : null);
  return {
    file,
    schema_version: REPORT_SCHEMA_VERSION,
    tool: section('tool'),
    command_line: commandLine,
    status: str('status') ?? 'unknown',
    started_at: str('started_at'),
    finished_at: str('finished_at'),
    machine,
    engine: section('engine'),
    model: section('model'),
    endpoint: section('endpoint'),
    model_load: section('model_load'),
    sweep: section('sweep'),
    rows: rows as ReportRow[],
    notes: Array.isArray(value.notes) ? (value.notes as string[]) : [],
  };
}

/** Reads and checks a PREFIX.json. */
export function readReport(file: string): SavedReport {
  let buf: Buffer;
  try {
    buf = readFileSync(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UsageError(`${file}: ${code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'is a directory' : (err as Error).message}`);
  }
  const parsed = parseJsonBytes(buf);
  if (!parsed.ok) throw new UsageError(`${file}: ${parsed.reason}`);
  return checkReport(parsed.value, file);
}

/** "engine" or "endpoint": what the sweep measured. */
export function targetKind(r: SavedReport): 'engine' | 'endpoint' {
  return r.endpoint !== null ? 'endpoint' : 'engine';
}
