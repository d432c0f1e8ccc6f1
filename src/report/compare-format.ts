// `bench compare` output: a Markdown summary for a pull request (the default), one CSV line per row and
// figure, or the comparison as JSON.
import { stringify } from 'csv-stringify/sync';
import { CSV_OPTIONS, markdownCell } from '../bench/csv.js';
import { COMPARED_FIGURES } from './figures.js';
import { CONTENTION_SHARE, type Comparison, type FigureChange, type RowComparison } from './compare.js';

export const COMPARE_FORMATS = ['md', 'csv', 'json'] as const;
export type CompareFormat = (typeof COMPARE_FORMATS)[number];

const pct = (x: number): string => `${x < 10 ? x.toFixed(1) : Math.round(x)}%`;
const ratioText = (r: number): string => `${r.toFixed(r >= 10 ? 1 : 2)}×`;
const mdEsc = markdownCell;

/** The headline, as the first line of the verdict. */
export function verdictLine(c: Comparison): string {
  if (c.not_a_pass.length > 0) {
    // A row failed in NEW counts as a regression, but it is not one "beyond noise": say which is which.
    const failedRows = c.rows.filter((r) => r.row === 'failed in NEW').length;
    const figures = c.regressions - failedRows;
    const also = (figures > 0 ? `; ${figures} regression${figures === 1 ? '' : 's'} beyond noise` : '') +
      (failedRows > 0 && !c.not_a_pass.some((w) => w.startsWith('every row both runs share failed in NEW'))
        ? `; ${failedRows} row${failedRows === 1 ? '' : 's'} failed in NEW` : '');
    return `**Not a pass**: ${c.not_a_pass.join('; ')}${also} (exit 5).`;
  }
  if (c.regressions > 0) return `**${c.regressions} regression${c.regressions === 1 ? '' : 's'}** beyond both the noise floor and the ${c.threshold_pct}% threshold (exit 5).`;
  if (c.improvements > 0) return `**No regression beyond noise** (threshold ${c.threshold_pct}%); ${c.improvements} improvement${c.improvements === 1 ? '' : 's'} beyond noise.`;
  if (c.no_floor.figures > 0) return `**No regression flagged** (threshold ${c.threshold_pct}%; some figures have no noise floor, below).`;
  return `**No change beyond noise** (threshold ${c.threshold_pct}%).`;
}

/** A test's level as a percentage, two significant digits (0.21%). */
const formatLevel = (x: number): string => `${Number((x * 100).toPrecision(2))}%`;

function cellText(f: FigureChange): string {
  if (f.verdict === 'lost in NEW') return '**▼ lost in NEW**';
  if (f.ratio === null) return '—';
  const floor = f.floor_pct !== null ? ` ±${pct(f.floor_pct)}` : ' ±?';
  const base = `${ratioText(f.ratio)}${floor}`;
  if (f.verdict === 'regression') return `**${base} ▼ regression**`;
  if (f.verdict === 'improvement') return `**${base} ▲ better**`;
  if (f.verdict === 'regression under contention') return `**${base} ▼ worse, under contention**`;
  if (f.verdict === 'improvement under contention') return `${base} ▲ better, under contention`;
  if (f.verdict === 'floor unknown') return `${base} (beyond threshold, floor unknown)`;
  if (f.verdict === 'not judged') return `${ratioText(f.ratio)} not judged (${mdEsc(f.not_judged!.replace(/^(BASE|NEW): /, '').split(';')[0]!)})`;
  return base;
}

function rowLine(r: RowComparison): string {
  if (r.row !== 'compared') {
    const note = r.row === 'failed in NEW' ? '**▼ failed in NEW**' : r.row;
    return `| ${r.key} | ${note}: ${mdEsc(r.reason ?? '')} |${' |'.repeat(COMPARED_FIGURES.length - 1)}`;
  }
  return `| ${r.key} | ${r.figures.map(cellText).join(' | ')} |`;
}

export function formatMarkdown(c: Comparison): string {
  const out: string[] = [`### bench compare: \`${c.base}\` → \`${c.next}\``, ''];
  if (c.provenance.length) {
    out.push('**Provenance differences** (these explain most changes):', '', '| field | BASE | NEW |', '| --- | --- | --- |');
    for (const p of c.provenance) out.push(`| ${p.field} | ${mdEsc(p.base)} | ${mdEsc(p.next)} |`);
  } else {
    out.push('**Provenance**: no difference (machine, ISA, engine configuration, weight format, commit, sweep settings).');
  }
  if (c.measured.length) {
    const what = c.measured.map((m) => `${m.field} ${mdEsc(m.base)} → ${mdEsc(m.next)}`).join(', ');
    out.push('', `Measured at load, not a setting: ${what} (the KV pool's size; sized by a --kv-memory fraction, it follows the memory free at load).`);
  }
  out.push('', verdictLine(c));
  if (c.no_floor.figures > 0) {
    const moved = c.unknown_floor > 0 ? ` ${c.unknown_floor} of them moved beyond the threshold and are not flagged.` : '';
    out.push('', `The noise floor is unknown for ${c.no_floor.figures} figure${c.no_floor.figures === 1 ? '' : 's'} (±?; ${c.no_floor.reason}).${moved} Run both sweeps with \`--iters 3\` or more.`);
  }
  if (c.contended_rows.length > 0) {
    out.push('', `Measured under CPU contention (other processes used ${Math.round(CONTENTION_SHARE * 100)}% or more of the machine's CPU while the row ran, in BASE or NEW; the figures may be noisy): ${c.contended_rows.join(', ')}. A move beyond noise in such a row is not counted as a regression, but it makes the comparison not a pass: rerun on a quiet machine.`);
  }
  if (c.not_judged.figures > 0) {
    out.push('', `${c.not_judged.figures} tail figure${c.not_judged.figures === 1 ? ' is' : 's are'} not judged (${c.not_judged.reason}): a p99 of fewer samples is one of their few largest values, and no floor of it can be trusted (docs/report.md).`);
  }
  out.push('', `| row | ${COMPARED_FIGURES.map((f) => f.label).join(' | ')} |`, `| --- |${' --- |'.repeat(COMPARED_FIGURES.length)}`);
  for (const r of c.rows) out.push(rowLine(r));
  if (c.only_in_base.length) out.push('', `Only in BASE (not compared): ${c.only_in_base.join(', ')}.`);
  if (c.only_in_next.length) out.push('', `Only in NEW (not compared): ${c.only_in_next.join(', ')}.`);
  if (c.duplicated.length) out.push('', `More than one row for one key (not compared): ${c.duplicated.join('; ')}.`);
  out.push('', `NEW/BASE ratio ± noise floor: the two runs' pass-to-pass spread of each figure, wide enough that two runs of one build flag a regression in at most ${Math.round(c.alpha * 100)}% of comparisons (${c.tests} figure${c.tests === 1 ? '' : 's'} tested, each at ${formatLevel(c.alpha / Math.max(1, c.tests))}); flagged only beyond both the floor and ${c.threshold_pct}%.`);
  return out.join('\n') + '\n';
}

export const COMPARE_CSV_COLUMNS = ['isl', 'osl', 'concurrency', 'target', 'row', 'figure', 'base', 'new', 'ratio', 'floor_pct', 'verdict', 'note'] as const;

export function formatCsv(c: Comparison): string {
  const lines: Array<Array<string | number>> = [[...COMPARE_CSV_COLUMNS]];
  const num = (v: number | null) => (v === null ? '' : v);
  for (const r of c.rows) {
    const key = [r.isl, r.osl, r.concurrency, r.target, r.row];
    if (r.figures.length === 0) lines.push([...key, '', '', '', '', '', '', r.reason ?? '']);
    for (const f of r.figures) lines.push([...key, f.figure, num(f.base), num(f.next), num(f.ratio), num(f.floor_pct), f.verdict, f.floor_unknown ?? '']);
  }
  return stringify(lines.map((l) => l.map(String)), CSV_OPTIONS);
}

export function formatComparison(c: Comparison, format: CompareFormat): string {
  if (format === 'csv') return formatCsv(c);
  if (format === 'json') return JSON.stringify(c, null, 2) + '\n';
  return formatMarkdown(c);
}
