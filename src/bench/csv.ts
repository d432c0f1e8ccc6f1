// The sweep's CSV: 21 columns, one row per cell x concurrency.
import { stringify } from 'csv-stringify/sync';

export const CSV_COLUMNS = [
  'isl',
  'osl',
  'concurrency',
  'first_call_ms',
  'ttft_ms',
  'prefill_tok_s',
  'itl_p50_ms',
  'itl_p99_ms',
  'prefill_chunk_ms_p50',
  'prefill_chunk_ms_max',
  'decode_tok_s',
  'speedup_vs_c1',
  'batching_efficiency',
  'admitted_tok',
  'retires',
  'peak_active_bytes',
  'num_allocs',
  'num_inflight_park_waits',
  'status',
  'reason',
  'notes',
] as const;

export type CsvColumn = (typeof CSV_COLUMNS)[number];

export type RowStatus = 'ok' | 'error';

/** One CSV row. A null figure prints as an empty field: it was not measured, never a made-up zero. */
export interface SweepRow {
  isl: number;
  osl: number;
  concurrency: number;
  first_call_ms: number | null;
  ttft_ms: number | null;
  prefill_tok_s: number | null;
  itl_p50_ms: number | null;
  itl_p99_ms: number | null;
  prefill_chunk_ms_p50: number | null;
  prefill_chunk_ms_max: number | null;
  decode_tok_s: number | null;
  speedup_vs_c1: number | null;
  batching_efficiency: number | null;
  admitted_tok: number | null;
  retires: number | null;
  peak_active_bytes: number | null;
  num_allocs: number | null;
  num_inflight_park_waits: number | null;
  status: RowStatus;
  reason: string;
  notes: string;
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

export function csvHeaderLine(): string {
  return stringify([CSV_COLUMNS as unknown as string[]], { record_delimiter: '\n' });
}

export function csvRowLine(row: SweepRow): string {
  return stringify([CSV_COLUMNS.map((c) => formatField(row[c]))], { record_delimiter: '\n' });
}

/** A row for a cell that never produced figures. */
export function errorRow(isl: number, osl: number, concurrency: number, reason: string, notes = ''): SweepRow {
  return {
    isl, osl, concurrency,
    first_call_ms: null, ttft_ms: null, prefill_tok_s: null, itl_p50_ms: null, itl_p99_ms: null,
    prefill_chunk_ms_p50: null, prefill_chunk_ms_max: null, decode_tok_s: null, speedup_vs_c1: null,
    batching_efficiency: null, admitted_tok: null, retires: null, peak_active_bytes: null, num_allocs: null,
    num_inflight_park_waits: null,
    status: 'error', reason, notes,
  };
}

/** Markdown table of the rows (--format md). */
export function markdownTable(rows: readonly SweepRow[]): string {
  const esc = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  const lines = [
    `| ${CSV_COLUMNS.join(' | ')} |`,
    `| ${CSV_COLUMNS.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${CSV_COLUMNS.map((c) => esc(formatField(r[c]))).join(' | ')} |`),
  ];
  return lines.join('\n') + '\n';
}
