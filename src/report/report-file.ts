// Reading a saved PREFIX.json back (`bench report`, `bench compare`): the fields the HTML page and the
// comparison use, checked, with a one-line error naming the file and the field when one is wrong.
import { readFileSync } from 'node:fs';
import type { ReportRow } from '../bench/report.js';
import { REPORT_SCHEMA_VERSION } from '../bench/report.js';
import { parseJsonBytes } from '../util/json.js';
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

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Checks a parsed report; `file` names it in the errors. */
export function checkReport(value: unknown, file: string): SavedReport {
  const bad = (field: string, why: string): never => { throw new UsageError(`${file}: ${field} ${why} (is it a PREFIX.json written by bench --output?)`); };
  if (!isObj(value)) return bad('the top level', 'is not a JSON object');
  if (value.schema_version !== REPORT_SCHEMA_VERSION) bad('schema_version', `is ${JSON.stringify(value.schema_version)}, expected ${REPORT_SCHEMA_VERSION}`);
  const section = (k: string): Section => {
    const v = value[k];
    if (v === null || v === undefined) return null;
    return isObj(v) ? v : bad(k, 'is not an object');
  };
  if (!Array.isArray(value.rows)) bad('rows', 'is not an array');
  const rows = value.rows as unknown[];
  rows.forEach((r, i) => {
    if (!isObj(r)) return bad(`rows[${i}]`, 'is not an object');
    for (const k of ['isl', 'osl', 'concurrency'] as const) {
      if (typeof r[k] !== 'number' || !Number.isInteger(r[k])) bad(`rows[${i}].${k}`, 'is not an integer');
    }
    if (r.status !== 'ok' && r.status !== 'error') bad(`rows[${i}].status`, `is ${JSON.stringify(r.status)}, expected "ok" or "error"`);
    return undefined;
  });
  const str = (k: string): string | null => (typeof value[k] === 'string' ? (value[k] as string) : null);
  return {
    file,
    schema_version: REPORT_SCHEMA_VERSION,
    tool: section('tool'),
    command_line: section('command_line'),
    status: str('status') ?? 'unknown',
    started_at: str('started_at'),
    finished_at: str('finished_at'),
    machine: section('machine'),
    engine: section('engine'),
    model: section('model'),
    endpoint: section('endpoint'),
    model_load: section('model_load'),
    sweep: section('sweep'),
    rows: rows as ReportRow[],
    notes: Array.isArray(value.notes) ? value.notes.map(String) : [],
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
