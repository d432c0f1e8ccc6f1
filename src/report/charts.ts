// The report's charts: one table of vega-lite specs (what each chart plots), built from the rows of a
// saved report and rendered to SVG in Node by vega, so the page needs no script to show them.
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { ReportRow } from '../bench/report.js';
import { cellOf, figure, figureValue, type FigureName } from './figures.js';

/**
 * A chart: per cell (x = concurrency, one line per series) or across cells (the frontier: x and y are
 * figures, one point per row, colour = cell). Every plotted row is one point mark, whose aria-label
 * carries the row and the exact plotted values (read back by the browser test).
 */
export interface ChartSpec {
  id: string;
  title: string;
  /** How to read it (docs/report.md says more). */
  caption: string;
  scope: 'cell' | 'all';
  /** cell scope: the series plotted against concurrency; all scope: [x figure, y figure]. */
  figures: readonly FigureName[];
  yTitle: string;
  xTitle: string;
  /** Plot area in px (the frontier, every cell on one plot, is drawn larger). */
  size: { width: number; height: number };
}

const SMALL = { width: 260, height: 200 };

export const CHARTS: readonly ChartSpec[] = [
  {
    id: 'throughput', title: 'Decode throughput', scope: 'cell', figures: ['decode_tok_s', 'per_user_tok_s'],
    xTitle: 'concurrency', yTitle: 'tok/s', size: SMALL,
    caption: 'Aggregate: every session together; per user: one request\'s own rate (mean over requests). Aggregate should rise with concurrency while per-user falls slowly.',
  },
  {
    id: 'ttft', title: 'Time to first token', scope: 'cell', figures: ['ttft_p50_ms', 'ttft_p99_ms'],
    xTitle: 'concurrency', yTitle: 'ms', size: SMALL,
    caption: 'Enqueue to first token, queueing included. A p99 far above p50 means some requests waited behind others\' prefills.',
  },
  {
    id: 'itl', title: 'Inter-token latency', scope: 'cell', figures: ['itl_p50_ms', 'itl_p99_ms'],
    xTitle: 'concurrency', yTitle: 'ms', size: SMALL,
    caption: 'Decode-only gaps between tokens. p99 is the stall a user notices.',
  },
  {
    id: 'efficiency', title: 'Batching efficiency', scope: 'cell', figures: ['batching_efficiency'],
    xTitle: 'concurrency', yTitle: 'speedup / concurrency', size: SMALL,
    caption: 'decode tok/s over the c=1 row, divided by concurrency: 1 is perfect scaling.',
  },
  {
    id: 'frontier', title: 'Latency-throughput frontier', scope: 'all', figures: ['decode_tok_s', 'per_user_tok_s'],
    xTitle: 'aggregate decode tok/s', yTitle: 'per-user decode tok/s', size: { width: 480, height: 320 },
    caption: 'One point per concurrency, every cell: up and to the right is better; pick the concurrency where per-user tok/s still meets the target.',
  },
];

/** One plotted point. */
export interface ChartPoint {
  cell: string;
  concurrency: number;
  series: string;
  x: number;
  y: number;
  /** The mark's aria-label: the row and the exact values, in JavaScript's round-trip form. */
  desc: string;
}

export const label = (name: FigureName): string => figure(name).label;

/** The points a chart plots from the rows (ok rows whose figures were measured); cell: the cell of a per-cell chart. */
export function chartPoints(chart: ChartSpec, rows: readonly ReportRow[], cell: string | null): ChartPoint[] {
  const points: ChartPoint[] = [];
  for (const row of rows) {
    if (row.status !== 'ok') continue;
    const key = `${cellOf(row)} c=${row.concurrency}`;
    if (chart.scope === 'cell') {
      if (cellOf(row) !== cell) continue;
      for (const f of chart.figures) {
        const v = figureValue(row, f);
        if (v !== null) points.push({ cell: cellOf(row), concurrency: row.concurrency, series: label(f), x: row.concurrency, y: v, desc: `${key} ${f}=${v}` });
      }
    } else {
      const [fx, fy] = chart.figures as [FigureName, FigureName];
      const x = figureValue(row, fx);
      const y = figureValue(row, fy);
      if (x !== null && y !== null) points.push({ cell: cellOf(row), concurrency: row.concurrency, series: cellOf(row), x, y, desc: `${key} ${fx}=${x} ${fy}=${y}` });
    }
  }
  return points;
}

/** The vega-lite spec of a chart over its points. */
export function chartSpec(chart: ChartSpec, points: readonly ChartPoint[]): TopLevelSpec {
  const colour = { field: 'series', type: 'nominal', title: chart.scope === 'all' ? 'cell' : null, legend: { orient: 'bottom', direction: 'vertical', labelLimit: 240 } } as const;
  // Per cell the x values are the concurrencies: ticks at exactly those.
  const ticks = chart.scope === 'cell' ? { axis: { values: [...new Set(points.map((p) => p.x))].sort((a, b) => a - b), format: 'd' } } : {};
  const x = { field: 'x', type: 'quantitative', title: chart.xTitle, scale: { zero: chart.scope !== 'cell' }, ...ticks } as const;
  const y = { field: 'y', type: 'quantitative', title: chart.yTitle, scale: { zero: true } } as const;
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    width: chart.size.width,
    height: chart.size.height,
    background: 'white',
    data: { values: points.map((p) => ({ ...p })) },
    layer: [
      {
        mark: { type: 'line', aria: false },
        encoding: { x, y, color: colour, detail: { field: chart.scope === 'all' ? 'cell' : 'series' }, order: { field: chart.scope === 'all' ? 'concurrency' : 'x' } },
      },
      {
        name: 'rows',
        mark: { type: 'point', filled: true, size: 50 },
        encoding: { x, y, color: colour, description: { field: 'desc' } },
      },
    ],
  } as TopLevelSpec;
}

/**
 * A warning from vega-lite or vega is a chart that does not show what its spec says: an error here
 * (the page is not written) rather than a line on the sweep's stderr and a wrong picture.
 */
const strict = (): ReturnType<typeof vega.logger> => vega.logger(vega.Warn, undefined, (_method, level, args) => {
  throw new Error(`chart ${level.toLowerCase()}: ${args.map(String).join(' ')}`);
});

/** The chart as an SVG string (vega's SVG renderer, headless). */
export async function renderChart(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec, { logger: strict() }).spec), { renderer: 'none', logger: strict() });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
