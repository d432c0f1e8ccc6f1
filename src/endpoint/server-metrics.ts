// The engine-internal columns of an endpoint row, from the server's GET /metrics (Prometheus text),
// sampled before and after the row's timed passes: our serve's `lumen:*` counters (the engine's own),
// or vLLM's `vllm:*` where one means the same thing. A column no metric measures stays empty, and the
// row's notes say why: never a made-up zero.
import type { CounterColumns } from '../bench/csv.js';
import type { NullableCounterColumns } from '../bench/row-probe.js';
import type { HttpPool } from './http-pool.js';

export type MetricsSamples = Map<string, number>;

/** Prometheus text -> sums by metric name (labels summed over: the row needs totals). Lenient: bad lines are skipped. */
export function parseMetrics(text: string): MetricsSamples {
  const out: MetricsSamples = new Map();
  const re = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/;
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = re.exec(line);
    if (!m) continue;
    const v = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
    if (Number.isNaN(v)) continue;
    out.set(m[1]!, (out.get(m[1]!) ?? 0) + v);
  }
  return out;
}

export type MetricsFamily = 'lumen' | 'vllm' | 'other' | 'none';


/** How a counter column is read from a metrics family: a counter's increase, or a gauge's high-water mark. */
interface ColumnSource {
  metric: string;
  kind: 'delta' | 'peak';
}

/**
 * What each engine column reads. lumen: the engine's counters as `bench serve` exports them. vLLM:
 * only finished requests (`vllm:request_success_total`, summed over finish reasons) mean what a column
 * means (retires: sequences that finished); its prefix-cache, KV-usage and preemption metrics measure
 * other things, so those columns stay empty for vLLM.
 */
export const METRIC_SOURCES: Record<'lumen' | 'vllm', Partial<Record<keyof CounterColumns, ColumnSource>>> = {
  lumen: {
    admitted_tok: { metric: 'lumen:prefix_admitted_tokens_total', kind: 'delta' },
    retires: { metric: 'lumen:retires_total', kind: 'delta' },
    peak_active_bytes: { metric: 'lumen:peak_active_bytes', kind: 'peak' },
    num_allocs: { metric: 'lumen:num_allocs_total', kind: 'delta' },
    num_inflight_park_waits: { metric: 'lumen:num_park_waits_total', kind: 'delta' },
  },
  vllm: {
    retires: { metric: 'vllm:request_success_total', kind: 'delta' },
  },
};

const COLUMNS: readonly (keyof CounterColumns)[] = ['admitted_tok', 'retires', 'peak_active_bytes', 'num_allocs', 'num_inflight_park_waits'];

export function metricsFamily(s: MetricsSamples | null): MetricsFamily {
  if (s === null) return 'none';
  const names = [...s.keys()];
  if (names.some((n) => n.startsWith('lumen:'))) return 'lumen';
  if (names.some((n) => n.startsWith('vllm:'))) return 'vllm';
  return 'other';
}

/** A scrape: the samples, or null with why (no /metrics, an error). */
export async function scrapeMetrics(pool: HttpPool, timeoutMs: number): Promise<{ samples: MetricsSamples | null; why: string }> {
  try {
    const r = await pool.json('GET', '/metrics', undefined, { timeoutMs });
    if (r.status !== 200) return { samples: null, why: `GET /metrics answered HTTP ${r.status}` };
    return { samples: parseMetrics(r.text), why: '' };
  } catch (err) {
    return { samples: null, why: `GET /metrics failed (${err instanceof Error ? err.message : String(err)})` };
  }
}

export interface CounterReading {
  columns: NullableCounterColumns;
  /** One note for the columns left empty, with why; null when every column was measured. */
  note: string | null;
  /** The metrics each column was read from, before and after, for the JSON report. */
  detail: Record<string, { metric: string; before: number | null; after: number | null }>;
}

/** The counter columns from two scrapes around the timed passes. */
export function counterColumnsFromMetrics(before: MetricsSamples | null, after: MetricsSamples | null, why: string): CounterReading {
  const columns = Object.fromEntries(COLUMNS.map((c) => [c, null])) as NullableCounterColumns;
  const detail: CounterReading['detail'] = {};
  const family = metricsFamily(after);
  if (before === null || after === null) {
    return { columns, note: `${COLUMNS.join(', ')} empty: ${why || 'the server has no /metrics'}`, detail };
  }
  const sources = family === 'lumen' || family === 'vllm' ? METRIC_SOURCES[family] : {};
  const missing: string[] = [];
  const peakFlat: string[] = [];
  for (const col of COLUMNS) {
    const src = sources[col];
    const a = src ? before.get(src.metric) : undefined;
    const b = src ? after.get(src.metric) : undefined;
    if (!src || a === undefined || b === undefined) { missing.push(col); continue; }
    detail[col] = { metric: src.metric, before: a, after: b };
    if (src.kind === 'delta') columns[col] = Math.max(0, b - a);
    else if (b > a) columns[col] = b; // the high-water mark rose during the row: its new value is the row's peak
    else peakFlat.push(col);
  }
  const parts: string[] = [];
  if (missing.length) {
    parts.push(`${missing.join(', ')} empty: ${family === 'other'
      ? "the server's /metrics has neither lumen:* nor vllm:* metrics"
      : `the server's /metrics (${family}:*) has no metric that measures ${missing.length === 1 ? 'it' : 'them'}`}`);
  }
  for (const col of peakFlat) {
    parts.push(`${col} empty: the server's high-water mark (${detail[col]!.after}, since it started) did not rise during this row, so the row's own peak is not known`);
  }
  return { columns, note: parts.length ? parts.join('; ') : null, detail };
}
