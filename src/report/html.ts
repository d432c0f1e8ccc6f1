// PREFIX.html: one self-contained page (no script, no network, no external font or style) from a saved
// report: the header, the charts as inline SVG (charts.ts), and every row of the sweep in a table.
import { CSV_COLUMNS, formatField } from '../bench/csv.js';
import type { ReportRow } from '../bench/report.js';
import { CHARTS, chartPoints, chartSpec, renderChart } from './charts.js';
import { cellOf } from './figures.js';
import { targetKind, type SavedReport } from './report-file.js';

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

function text(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return JSON.stringify(v);
}

/** The sweep's load section in words: "closed loop", or the open loop's settings. */
const loadText = (l: unknown): string => (typeof l === 'object' && l !== null ? Object.entries(l).map(([k, v]) => (k === 'kind' ? text(v) : `${k} ${text(v)}`)).join(', ') : text(l));

const gib = (b: unknown): string => (typeof b === 'number' ? `${(b / 2 ** 30).toFixed(1)} GiB` : '');

/** A definition list of label / value pairs, empty values left out. */
function facts(title: string, pairs: Array<[string, unknown]>): string {
  const items = pairs.filter(([, v]) => text(v) !== '').map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(text(v))}</dd>`);
  return `<section class="facts"><h2>${esc(title)}</h2><dl>${items.join('')}</dl></section>`;
}

function header(r: SavedReport): string {
  const m = r.machine ?? {};
  const e = r.engine ?? {};
  const md = r.model ?? {};
  const ep = r.endpoint ?? {};
  const t = r.tool ?? {};
  const kind = targetKind(r);
  const gpus = Array.isArray(m.gpus) ? (m.gpus as Array<Record<string, unknown>>).map((g) => g.name).join(', ') : '';
  const parts = [
    facts('Machine', [['CPU', m.cpu_model], ['cores', `${text(m.physical_cores)} physical, ${text(m.logical_cores)} logical`], ['memory', gib(m.memory_bytes)],
      ['GPUs', gpus], ['OS', m.os], ['arch', m.arch], ['Node', m.node]]),
  ];
  if (kind === 'endpoint') {
    parts.push(facts('Endpoint', [['URL', ep.url], ['API', ep.api], ['model', ep.model], ['server', ep.server], ['tokenizer', ep.tokenizer], ['metrics', ep.metrics]]));
  } else {
    parts.push(facts('Engine', [['backend', e.backend], ['ISA', e.isa], ['threads', e.threads], ['weights', e.dtype], ['KV cache', e.kvcache],
      ['KV cache dtype', e.kv_cache_dtype], ['block size', e.block_size], ['KV blocks', e.kv_blocks_total], ['max seq', e.max_seq], ['max seqs', e.max_seqs], ['prefill chunk', e.prefill_chunk],
      ['step token budget', e.step_token_budget], ['prefix cache', e.prefix_cache], ['CUDA graphs', e.cuda_graphs], ['GPU', e.gpu_name]]));
    const wf = (md.weight_format ?? {}) as Record<string, unknown>;
    const synthetic = wf.synthetic === true
      ? `random weights of preset ${text(wf.preset)}, ${text(wf.dtype)}, seed ${text(wf.seed)}, generated in memory (no checkpoint)` : '';
    parts.push(facts('Model', [['path', md.path], ['embedded', md.embedded], ['synthetic', synthetic], ['architecture', md.architecture], ['parameters', md.param_count], ['weight format', md.dtype],
      ['bytes on disk', md.bytes_on_disk], ['config sha256', md.config_sha256]]));
  }
  const sw = r.sweep ?? {};
  parts.push(facts('Provenance', [['tool', `${text(t.name)} ${text(t.version)}`], ['git commit', t.git_commit], ['uncommitted changes', t.git_dirty],
    ['command', r.command_line?.shell], ['started', r.started_at], ['finished', r.finished_at], ['status', r.status],
    ['warm-up / timed passes', `${text(sw.warmup)} / ${text(sw.iters)}`], ['prompts', sw.prompts], ['seed', sw.seed], ['load', loadText(sw.load)]]));
  const what = kind === 'endpoint' ? `endpoint ${text(ep.url)} (${text(ep.model)})` : `${text(md.embedded) === 'true' ? 'embedded model' : text(md.path)} (${text(md.dtype)}) on ${text(e.backend)}/${text(e.isa)}`;
  return `<header><h1>lumen-bench sweep: ${esc(what)}</h1><p class="kind">measured: ${kind === 'endpoint' ? 'an OpenAI-compatible endpoint over HTTP' : 'the in-process engine'}</p></header>`
    + `<div class="header">${parts.join('')}</div>`;
}

/**
 * A figure as the table shows it: 5 significant digits, but never fewer than the digits before the
 * point (123456.78 shows as 123457, not as toPrecision's 123460, a zero that was never measured).
 */
export function shownFigure(v: number): string {
  if (Number.isInteger(v)) return formatField(v);
  const a = Math.abs(v);
  if (a >= 1e5 && a < 1e21) return formatField(Math.round(v));
  return formatField(Number(v.toPrecision(5)));
}

function table(rows: readonly ReportRow[]): string {
  const head = CSV_COLUMNS.map((c) => `<th title="${esc(c.meaning)}">${esc(c.name)}</th>`).join('');
  const body = rows.map((row) => {
    const cells = CSV_COLUMNS.map((c) => {
      const v = (row as unknown as Record<string, number | string | null>)[c.name] ?? null;
      // Figures shown to 5 significant digits (or to the unit when larger); the exact value (as in the CSV) is the cell's title.
      if (typeof v === 'number' && !Number.isInteger(v)) return `<td class="${c.kind}" title="${formatField(v)}">${esc(shownFigure(v))}</td>`;
      return `<td class="${c.kind}">${esc(formatField(v))}</td>`;
    }).join('');
    return `<tr class="${row.status === 'ok' ? 'ok' : 'error'}" data-row="${esc(`${cellOf(row)} c=${row.concurrency}`)}">${cells}</tr>`;
  }).join('\n');
  return `<section><h2>Every row</h2><p>Error rows stay in place, with the reason; the charts plot only ok rows.</p>`
    + `<div class="scroll"><table id="rows"><thead><tr>${head}</tr></thead><tbody>\n${body}\n</tbody></table></div></section>`;
}

function chartFigure(id: string, title: string, caption: string, svg: string | null): string {
  const inner = svg ?? '<p class="empty">no ok row has these figures</p>';
  return `<figure class="chart${id.includes(':') ? '' : ' wide'}" data-chart="${esc(id)}"><figcaption><b>${esc(title)}</b> ${esc(caption)}</figcaption>${inner}</figure>`;
}

const STYLE = `body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 6px}.kind{color:#555;margin:0}
.header{display:flex;flex-wrap:wrap;gap:8px 32px}.facts dl{display:grid;grid-template-columns:max-content auto;gap:1px 12px;margin:0}
.facts dt{color:#666}.facts dd{margin:0;word-break:break-all;max-width:520px}
.cell{display:flex;flex-wrap:wrap;gap:12px}.chart{margin:0;border:1px solid #ddd;padding:6px;width:330px}
.chart.wide{width:560px}.chart figcaption{font-size:12px;color:#444;margin-bottom:4px}.empty{color:#999}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #ddd;padding:2px 6px;text-align:right;white-space:nowrap}
td.text{text-align:left;white-space:normal;min-width:320px;max-width:640px}tr.error{background:#fde8e8}tr.error td.text{color:#9b1c1c}`;

/** The whole page. */
export async function renderHtml(report: SavedReport): Promise<string> {
  const rows = report.rows;
  const cells = [...new Set(rows.map(cellOf))];
  const sections: string[] = [];
  for (const cell of cells) {
    const figs: string[] = [];
    for (const chart of CHARTS.filter((c) => c.scope === 'cell')) {
      const points = chartPoints(chart, rows, cell);
      figs.push(chartFigure(`${chart.id}:${cell}`, chart.title, chart.caption, points.length ? await renderChart(chartSpec(chart, points)) : null));
    }
    sections.push(`<section data-cell="${esc(cell)}"><h2>Cell ${esc(cell)} (isl:osl)</h2><div class="cell">${figs.join('')}</div></section>`);
  }
  const across: string[] = [];
  for (const chart of CHARTS.filter((c) => c.scope === 'all')) {
    const points = chartPoints(chart, rows, null);
    across.push(chartFigure(chart.id, chart.title, chart.caption, points.length ? await renderChart(chartSpec(chart, points)) : null));
  }
  const notes = report.notes.length ? `<section><h2>Notes</h2><ul>${report.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul></section>` : '';
  const empty = rows.length === 0 ? `<p class="empty">The sweep has no rows (status: ${esc(report.status)}).</p>` : '';
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>lumen-bench sweep ${esc(report.started_at ?? '')}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<style>${STYLE}</style></head>
<body>
${header(report)}
${empty}
${sections.join('\n')}
<section><h2>All cells</h2><div class="cell">${across.join('')}</div></section>
${table(rows)}
${notes}
<footer><p>Every figure above is read from the sweep's JSON report (docs/report.md says how to read each chart).</p></footer>
</body></html>
`;
}
