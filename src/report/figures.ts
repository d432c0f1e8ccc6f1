// The figures the HTML report plots and `bench compare` compares: one table, each figure read from a
// row of the saved JSON, with the per-request sample (rows[].samples) that gives its noise floor.
import type { ReportRow } from '../bench/report.js';
import type { RowSamples } from '../bench/row-samples.js';

export interface FigureSpec {
  name: string;
  /** Axis and table label. */
  label: string;
  unit: string;
  /** Where the value is in a row of PREFIX.json (docs/report.md; the browser test reads it there). */
  path: string;
  better: 'higher' | 'lower' | null;
  /** The per-request sample whose median's spread is the figure's noise floor; null: not compared. */
  sample: Exclude<keyof RowSamples, 'pass'> | null;
  /** The sample's percentile that the figure is (default 50: the median); the floor bootstraps that percentile. */
  percentile?: number;
}

export const FIGURES = [
  { name: 'decode_tok_s', label: 'aggregate decode tok/s', unit: 'tok/s', path: 'decode_tok_s', better: 'higher', sample: 'decode_tok_s' },
  { name: 'per_user_tok_s', label: 'per-user decode tok/s', unit: 'tok/s', path: 'distributions.request_decode_tok_s.mean', better: 'higher', sample: 'decode_tok_s' },
  { name: 'ttft_mean_ms', label: 'TTFT mean', unit: 'ms', path: 'ttft_ms', better: 'lower', sample: 'ttft_ms' },
  { name: 'ttft_p50_ms', label: 'TTFT p50', unit: 'ms', path: 'distributions.ttft_ms.p50', better: 'lower', sample: 'ttft_ms', percentile: 50 },
  { name: 'ttft_p99_ms', label: 'TTFT p99', unit: 'ms', path: 'distributions.ttft_ms.p99', better: 'lower', sample: 'ttft_ms', percentile: 99 },
  { name: 'itl_p50_ms', label: 'ITL p50', unit: 'ms', path: 'itl_p50_ms', better: 'lower', sample: 'itl_p50_ms' },
  { name: 'itl_p99_ms', label: 'ITL p99', unit: 'ms', path: 'itl_p99_ms', better: 'lower', sample: 'itl_p99_ms' },
  { name: 'batching_efficiency', label: 'batching efficiency', unit: '', path: 'batching_efficiency', better: null, sample: null },
] as const satisfies readonly FigureSpec[];

export type FigureName = (typeof FIGURES)[number]['name'];

export function figure(name: FigureName): FigureSpec {
  return FIGURES.find((f) => f.name === name)!;
}

/** The value at a dotted path of a row; null when absent or not a finite number. */
export function valueAt(row: ReportRow, path: string): number | null {
  let v: unknown = row;
  for (const k of path.split('.')) {
    if (typeof v !== 'object' || v === null) return null;
    v = (v as Record<string, unknown>)[k];
  }
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** A figure of an ok row; null on an error row or when the figure was not measured. */
export function figureValue(row: ReportRow, name: FigureName): number | null {
  return row.status === 'ok' ? valueAt(row, figure(name).path) : null;
}

/** The compared figures: those with a direction and a sample. */
export const COMPARED_FIGURES = FIGURES.filter((f): f is Extract<(typeof FIGURES)[number], { sample: string }> => f.sample !== null);

export const cellOf = (row: Pick<ReportRow, 'isl' | 'osl'>): string => `${row.isl}:${row.osl}`;
