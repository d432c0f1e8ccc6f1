// The sweep's CSV: 21 columns, one row per cell x concurrency.
import { stringify } from 'csv-stringify/sync';
import type { EngineStats } from '../engine/types.js';

/**
 * The 21 columns, in order: the one definition every reader uses (the CSV and markdown writers, the
 * row type, the error row, the counter columns). `source` says where a value comes from: the cell
 * itself, the timed requests' native timestamps, another column, an engine counter over the timed
 * passes (EngineStats field), or the row's outcome. docs/bench.md defines each figure in full.
 */
export const CSV_COLUMNS = [
  { name: 'isl', kind: 'key', source: 'cell', meaning: 'prompt tokens per request' },
  { name: 'osl', kind: 'key', source: 'cell', meaning: 'tokens generated per request' },
  { name: 'concurrency', kind: 'key', source: 'cell', meaning: 'sessions in flight' },
  { name: 'first_call_ms', kind: 'figure', source: 'timing', meaning: "the row's first call, enqueue to last token" },
  { name: 'ttft_ms', kind: 'figure', source: 'timing', meaning: 'mean enqueue to first token of the timed requests' },
  { name: 'prefill_tok_s', kind: 'figure', source: 'derived', meaning: 'isl x 1000 / ttft_ms' },
  { name: 'itl_p50_ms', kind: 'figure', source: 'timing', meaning: 'p50 of the decode-only inter-token gaps' },
  { name: 'itl_p99_ms', kind: 'figure', source: 'timing', meaning: 'p99 of the decode-only inter-token gaps' },
  { name: 'prefill_chunk_ms_p50', kind: 'figure', source: 'timing', meaning: 'p50 wall of the prefill steps' },
  { name: 'prefill_chunk_ms_max', kind: 'figure', source: 'timing', meaning: 'longest prefill step' },
  { name: 'decode_tok_s', kind: 'figure', source: 'timing', meaning: 'aggregate decode rate over the decode window' },
  { name: 'speedup_vs_c1', kind: 'figure', source: 'derived', meaning: "decode_tok_s over the cell's c=1 row" },
  { name: 'batching_efficiency', kind: 'figure', source: 'derived', meaning: 'speedup_vs_c1 / concurrency' },
  { name: 'admitted_tok', kind: 'figure', source: { counter: 'prefixAdmittedTokens' }, meaning: 'prompt tokens admitted into the prefix cache' },
  { name: 'retires', kind: 'figure', source: { counter: 'retires' }, meaning: 'sequences retired' },
  { name: 'peak_active_bytes', kind: 'figure', source: { counter: 'peakActiveBytes' }, meaning: 'high-water mark of workspace + the KV blocks and states the running requests hold (CPU); on CUDA the device allocator\'s high-water mark since load' },
  { name: 'num_allocs', kind: 'figure', source: { counter: 'numAllocs' }, meaning: 'KV-block and state allocations (CPU); on CUDA the device allocator\'s cudaMalloc calls' },
  { name: 'num_inflight_park_waits', kind: 'figure', source: { counter: 'parkWaits' }, meaning: 'times a request waited for a slot or KV blocks' },
  { name: 'status', kind: 'status', source: 'outcome', meaning: 'ok, or error when the row could not be measured' },
  { name: 'reason', kind: 'text', source: 'outcome', meaning: 'why an error row failed' },
  { name: 'notes', kind: 'text', source: 'outcome', meaning: 'how the row was measured' },
] as const satisfies readonly ColumnSpec[];

export type RowStatus = 'ok' | 'error';

interface ColumnSpec {
  name: string;
  /** key: always present; figure: a number, or null when it could not be measured; status / text: words. */
  kind: 'key' | 'figure' | 'status' | 'text';
  source: 'cell' | 'timing' | 'derived' | 'outcome' | { counter: keyof EngineStats };
  meaning: string;
}

type Column = (typeof CSV_COLUMNS)[number];
export type CsvColumn = Column['name'];
type ValueOf<K extends ColumnSpec['kind']> =
  K extends 'key' ? number : K extends 'figure' ? number | null : K extends 'status' ? RowStatus : string;

/** One CSV row, typed from the table. A null figure prints as an empty field: it was not measured, never a made-up zero. */
export type SweepRow = { [C in Column as C['name']]: ValueOf<C['kind']> };

type CounterColumn = Extract<Column, { source: { counter: keyof EngineStats } }>;
export type CounterColumns = { [C in CounterColumn as C['name']]: number };

const COUNTER_COLUMNS = CSV_COLUMNS.filter((c): c is CounterColumn => typeof c.source === 'object');
const FIGURE_COLUMNS = CSV_COLUMNS.filter((c) => c.kind === 'figure').map((c) => c.name);
const COLUMN_NAMES: readonly CsvColumn[] = CSV_COLUMNS.map((c) => c.name);

/** The counter columns of a row: each column's engine counter over the timed passes. */
export function counterColumns(s: EngineStats): CounterColumns {
  const out: Record<string, number> = {};
  for (const c of COUNTER_COLUMNS) out[c.name] = Number(s[c.source.counter] ?? 0);
  return out as CounterColumns;
}

/** Numbers print in JavaScript's shortest round-trip form, so a parser reads back the exact double. */
export function formatField(v: number | string | null): string {
  if (v === null) return '';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return '';
    return String(v);
  }
  return v;
}

/**
 * csv-stringify quotes a field holding the delimiter, a quote or the record delimiter ('\n'), but not a
 * lone '\r': unquoted, a parser that takes '\r' as a line end (csv-parse's default, spreadsheets) splits
 * the row there. Every field with a '\r' is quoted too.
 */
export const CSV_OPTIONS = { record_delimiter: '\n', quoted_match: /\r/ } as const;

export function csvHeaderLine(): string {
  return stringify([COLUMN_NAMES as string[]], CSV_OPTIONS);
}

export function csvRowLine(row: SweepRow): string {
  return stringify([COLUMN_NAMES.map((c) => formatField(row[c]))], CSV_OPTIONS);
}

/** A field in a Markdown table cell: '|' escaped, line breaks ('\r\n', '\n', a lone '\r') as one space each. */
export const markdownCell = (s: string): string => s.replace(/\|/g, '\\|').replace(/\r\n|\n|\r/g, ' ');

/** A row for a cell that never produced figures: every figure empty. */
export function errorRow(isl: number, osl: number, concurrency: number, reason: string, notes = ''): SweepRow {
  const figures = Object.fromEntries(FIGURE_COLUMNS.map((c) => [c, null]));
  return { ...figures, isl, osl, concurrency, status: 'error', reason, notes } as SweepRow;
}

/** Markdown table of the rows (--format md). */
export function markdownTable(rows: readonly SweepRow[]): string {
  const lines = [
    `| ${COLUMN_NAMES.join(' | ')} |`,
    `| ${COLUMN_NAMES.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${COLUMN_NAMES.map((c) => markdownCell(formatField(r[c]))).join(' | ')} |`),
  ];
  return lines.join('\n') + '\n';
}
