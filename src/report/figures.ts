// The figures the HTML report plots and `bench compare` compares: one table, each figure read from a
// row of the saved JSON, with the per-request sample (rows[].samples) that gives its noise floor.
import type { ReportRow } from '../bench/report.js';
import { minTailSamples, type FloorRule } from './noise.js';

export interface FigureSpec {
  name: string;
  /** Axis and table label. */
  label: string;
  unit: string;
  /** Where the value is in a row of PREFIX.json (docs/report.md; the browser test reads it there). */
  path: string;
  better: 'higher' | 'lower' | null;
  /** How the figure's noise floor is measured from the row's samples (noise.ts); null: not compared. */
  floor: FloorRule | null;
  /**
   * A tail figure: judged only when its sample (the count at `count`, a path in the row) holds at least
   * minTailSamples(p) values; otherwise "not judged".
   */
  tail?: { p: number; count: string; of: string };
}

export const FIGURES = [
  { name: 'decode_tok_s', label: 'aggregate decode tok/s', unit: 'tok/s', path: 'decode_tok_s', better: 'higher', floor: { stat: 'aggregate-rate' } },
  { name: 'per_user_tok_s', label: 'per-user decode tok/s', unit: 'tok/s', path: 'distributions.request_decode_tok_s.mean', better: 'higher', floor: { stat: 'mean', sample: 'decode_tok_s' } },
  { name: 'ttft_mean_ms', label: 'TTFT mean', unit: 'ms', path: 'ttft_ms', better: 'lower', floor: { stat: 'mean', sample: 'ttft_ms' } },
  { name: 'ttft_p50_ms', label: 'TTFT p50', unit: 'ms', path: 'distributions.ttft_ms.p50', better: 'lower', floor: { stat: 'percentile', sample: 'ttft_ms', p: 50 } },
  { name: 'ttft_p99_ms', label: 'TTFT p99', unit: 'ms', path: 'distributions.ttft_ms.p99', better: 'lower', floor: { stat: 'percentile', sample: 'ttft_ms', p: 99 },
    tail: { p: 99, count: 'distributions.ttft_ms.n', of: 'requests' } },
  // The pooled percentiles of every decode gap, drawn from the passes' gap histograms; a report written
  // before those keeps the requests' own p50s and p99s (noise.ts).
  { name: 'itl_p50_ms', label: 'ITL p50', unit: 'ms', path: 'itl_p50_ms', better: 'lower', floor: { stat: 'pooled-gaps', p: 50, fallback: { stat: 'mean', sample: 'itl_p50_ms' } } },
  { name: 'itl_p99_ms', label: 'ITL p99', unit: 'ms', path: 'itl_p99_ms', better: 'lower', floor: { stat: 'pooled-gaps', p: 99, fallback: { stat: 'request-spread', sample: 'itl_p99_ms' } },
    tail: { p: 99, count: 'distributions.itl_ms.n', of: 'gaps' } },
  { name: 'batching_efficiency', label: 'batching efficiency', unit: '', path: 'batching_efficiency', better: null, floor: null },
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

/** The compared figures: those with a direction and a floor rule. */
export const COMPARED_FIGURES = FIGURES.filter((f): f is Extract<(typeof FIGURES)[number], { floor: FloorRule }> => f.floor !== null);

/** Why a tail figure is not judged in this row (too few samples for its percentile), or null. */
export function tailTooThin(row: ReportRow, name: FigureName): string | null {
  const f = figure(name);
  if (!f.tail) return null;
  const n = valueAt(row, f.tail.count);
  const need = minTailSamples(f.tail.p);
  if (n !== null && n >= need) return null;
  return `${n === null ? 'an unknown number of' : n} ${n === 1 ? f.tail.of.replace(/s$/, '') : f.tail.of}; a p${f.tail.p} is judged from ${need}`;
}

export const cellOf = (row: Pick<ReportRow, 'isl' | 'osl'>): string => `${row.isl}:${row.osl}`;
