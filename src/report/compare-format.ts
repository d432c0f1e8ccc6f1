// `bench compare` output: a Markdown summary for a pull request (the default), one CSV line per row and
// figure, or the comparison as JSON.
import { stringify } from 'csv-stringify/sync';
import { CSV_OPTIONS, markdownCell } from '../bench/csv.js';
import { COMPARED_FIGURES } from './figures.js';
import { CONTENTION_SHARE } from '../util/machine.js';
import { type Comparison, type FigureChange, type RowComparison } from './compare.js';

export const COMPARE_FORMATS = ['md', 'csv', 'json'] as const;
export type CompareFormat = (typeof COMPARE_FORMATS)[number];


/** `v` rounded to `d` decimals (the value toFixed prints). */
const rounded = (v: number, d: number): number => Number(v.toFixed(d));

/**
 * The decimals to print a ratio with: 2, or more when 2 would put it on the wrong side of a boundary
 * it is judged against, or on it (0.949 and 0.951 around a 5 % threshold both print 0.95 with 2): the
 * printed ratio then reads beyond the threshold (or the noise band's edge) exactly when it is.
 */
export function ratioDecimals(r: number, boundaries: readonly number[]): number {
  for (let d = 2; d < 8; d++) {
    const rr = rounded(r, d);
    if (boundaries.every((b) => r === b || (rr !== rounded(b, d) && Math.sign(rr - rounded(b, d)) === Math.sign(r - b)))) return d;
  }
  return 8;
}

/** A number of the ratio's scale: `d` decimals below 10, fewer above, two significant digits below 0.1. */
function scaled(v: number, d: number): string {
  if (v >= 100) return String(Math.round(v));
  if (v >= 10) return v.toFixed(1);
  if (v >= 0.1 || v === 0) return v.toFixed(d);
  return String(Number(v.toPrecision(2)));
}

/** The boundaries a figure's ratio is judged against: the threshold's, and the noise band's edges. */
function boundariesOf(f: FigureChange, thresholdPct: number): number[] {
  const out: number[] = [];
  if (thresholdPct > 0) out.push(1 - thresholdPct / 100, 1 + thresholdPct / 100);
  if (f.band) out.push(...f.band);
  return out;
}

/** The ratio as printed: `0.949×`, with the digits its verdict needs. */
export function ratioText(f: FigureChange, thresholdPct: number): string {
  const r = f.ratio!;
  return `${scaled(r, r >= 10 ? 1 : ratioDecimals(r, boundariesOf(f, thresholdPct)))}×`;
}

/**
 * The noise band as printed: `(0.93–1.08)`, the ratios two runs of one build give (at the gate's level).
 * Printed as a range, not as ±(e^floor − 1): a floor of ln 2 is 0.5–2, which "±100%" misstates below 1.
 */
export function bandText(f: FigureChange, thresholdPct: number): string {
  if (!f.band) return '(noise ?)';
  const [lo, hi] = f.band;
  if (lo === hi) return '(no noise)';
  // At least the ratio's decimals, and enough that neither edge prints as 1.
  let d = f.ratio !== null && f.ratio < 10 ? ratioDecimals(f.ratio, boundariesOf(f, thresholdPct)) : 2;
  while (d < 8 && (rounded(lo, d) === 1 || rounded(hi, d) === 1)) d++;
  return `(${scaled(lo, d)}–${scaled(hi, d)})`;
}

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
  if (c.regressions > 0) {
    // A row failed in NEW is counted as a regression but is not a figure beyond noise: say which is which.
    const failedRows = c.rows.filter((r) => r.row === 'failed in NEW').length;
    const figures = c.regressions - failedRows;
    const rows = `${failedRows} row${failedRows === 1 ? '' : 's'} failed in NEW`;
    if (figures === 0) return `**${rows}** (ok in BASE): a regression (exit 5); no figure regressed beyond noise.`;
    const flagged = `**${figures} regression${figures === 1 ? '' : 's'}** beyond both the noise floor and the ${c.threshold_pct}% threshold`;
    return failedRows > 0 ? `${flagged}, and **${rows}** (ok in BASE) (exit 5).` : `${flagged} (exit 5).`;
  }
  if (c.improvements > 0) return `**No regression beyond noise** (threshold ${c.threshold_pct}%); ${c.improvements} improvement${c.improvements === 1 ? '' : 's'} beyond noise.`;
  if (c.no_floor.figures > 0) return `**No regression flagged** (threshold ${c.threshold_pct}%; some figures have no noise floor, below).`;
  return `**No change beyond noise** (threshold ${c.threshold_pct}%).`;
}

/** A test's level as a percentage, two significant digits (0.21%). */
const formatLevel = (x: number): string => `${Number((x * 100).toPrecision(2))}%`;

function cellText(f: FigureChange, thresholdPct: number): string {
  if (f.verdict === 'lost in NEW') return '**▼ lost in NEW**';
  if (f.ratio === null) return '—';
  const base = `${ratioText(f, thresholdPct)} ${bandText(f, thresholdPct)}`;
  if (f.verdict === 'regression') return `**${base} ▼ regression**`;
  if (f.verdict === 'improvement') return `**${base} ▲ better**`;
  if (f.verdict === 'regression under contention') return `**${base} ▼ worse, under contention**`;
  if (f.verdict === 'improvement under contention') return `${base} ▲ better, under contention`;
  if (f.verdict === 'floor unknown') return `${base} (beyond threshold, floor unknown)`;
  if (f.verdict === 'not judged') return `${ratioText(f, thresholdPct)} not judged (${markdownCell(f.not_judged!.replace(/^(BASE|NEW): /, '').split(';')[0]!)})`;
  return base;
}

function rowLine(r: RowComparison, thresholdPct: number): string {
  if (r.row !== 'compared') {
    const note = r.row === 'failed in NEW' ? '**▼ failed in NEW**' : r.row;
    return `| ${r.key} | ${note}: ${markdownCell(r.reason ?? '')} |${' |'.repeat(COMPARED_FIGURES.length - 1)}`;
  }
  return `| ${r.key} | ${r.figures.map((f) => cellText(f, thresholdPct)).join(' | ')} |`;
}

export function formatMarkdown(c: Comparison): string {
  const out: string[] = [`### bench compare: \`${c.base}\` → \`${c.next}\``, ''];
  if (c.provenance.length) {
    out.push('**Provenance differences** (these explain most changes):', '', '| field | BASE | NEW |', '| --- | --- | --- |');
    for (const p of c.provenance) out.push(`| ${p.field} | ${markdownCell(p.base)} | ${markdownCell(p.next)} |`);
  } else {
    out.push('**Provenance**: no difference (machine, ISA, engine configuration, weight format, commit, sweep settings).');
  }
  if (c.measured.length) {
    const what = c.measured.map((m) => `${m.field} ${markdownCell(m.base)} → ${markdownCell(m.next)}`).join(', ');
    out.push('', `Measured at load, not a setting: ${what} (the KV pool's size, set when the engine loaded: from --kv-memory, a fraction of it following the memory free then, or without it from --max-seq and the concurrency).`);
  }
  out.push('', verdictLine(c));
  if (c.no_floor.figures > 0) {
    const moved = c.unknown_floor > 0 ? ` ${c.unknown_floor} of them moved beyond the threshold and are not flagged.` : '';
    out.push('', `The noise floor is unknown for ${c.no_floor.figures} figure${c.no_floor.figures === 1 ? '' : 's'} (noise ?; ${c.no_floor.reason}).${moved} Run both sweeps with \`--iters 3\` or more.`);
  }
  if (c.contended_rows.length > 0) {
    out.push('', `Measured under CPU contention (other processes used ${Math.round(CONTENTION_SHARE * 100)}% or more of the machine's CPU while the row ran, in BASE or NEW; the figures may be noisy): ${c.contended_rows.join(', ')}. A move beyond noise in such a row is not counted as a regression, but it makes the comparison not a pass: rerun on a quiet machine.`);
  }
  if (c.not_judged.figures > 0) {
    out.push('', `${c.not_judged.figures} tail figure${c.not_judged.figures === 1 ? ' is' : 's are'} not judged (${c.not_judged.reason}): a p99 of fewer samples is one of their few largest values, and no floor of it can be trusted (docs/report.md).`);
  }
  out.push('', `| row | ${COMPARED_FIGURES.map((f) => f.label).join(' | ')} |`, `| --- |${' --- |'.repeat(COMPARED_FIGURES.length)}`);
  for (const r of c.rows) out.push(rowLine(r, c.threshold_pct));
  if (c.only_in_base.length) out.push('', `Only in BASE (not compared): ${c.only_in_base.join(', ')}.`);
  if (c.only_in_next.length) out.push('', `Only in NEW (not compared): ${c.only_in_next.join(', ')}.`);
  if (c.duplicated.length) out.push('', `More than one row for one key (not compared): ${c.duplicated.join('; ')}.`);
  out.push('', `NEW/BASE ratio (noise band): the band is the ratios within the two runs' pass-to-pass spread of the figure, wide enough that two runs of one build flag a regression in at most ${Math.round(c.alpha * 100)}% of comparisons (${c.tests} figure${c.tests === 1 ? '' : 's'} tested, each at ${formatLevel(c.alpha / Math.max(1, c.tests))}); a ratio is flagged only outside both the band and ${c.threshold_pct}% of 1.`);
  return out.join('\n') + '\n';
}

export const COMPARE_CSV_COLUMNS = ['isl', 'osl', 'concurrency', 'target', 'row', 'figure', 'base', 'new', 'ratio', 'noise_lo', 'noise_hi', 'verdict', 'note'] as const;

const shareText = (x: number | null): string => (x === null ? 'not recorded' : `${Math.round(x * 100)}%`);

export function formatCsv(c: Comparison): string {
  const lines: Array<Array<string | number>> = [[...COMPARE_CSV_COLUMNS]];
  const num = (v: number | null) => (v === null ? '' : v);
  for (const r of c.rows) {
    const key = [r.isl, r.osl, r.concurrency, r.target, r.row];
    if (r.figures.length === 0) lines.push([...key, '', '', '', '', '', '', '', r.reason ?? '']);
    for (const f of r.figures) {
      const note = [f.floor_unknown, f.not_judged, r.contended ? `measured under CPU contention (BASE ${shareText(r.cpu_other_share.base)}, NEW ${shareText(r.cpu_other_share.next)})` : null].filter((x) => x !== null).join('; ');
      lines.push([...key, f.figure, num(f.base), num(f.next), num(f.ratio), num(f.band?.[0] ?? null), num(f.band?.[1] ?? null), f.verdict, note]);
    }
  }
  return stringify(lines.map((l) => l.map(String)), CSV_OPTIONS);
}

export function formatComparison(c: Comparison, format: CompareFormat): string {
  if (format === 'csv') return formatCsv(c);
  if (format === 'json') return JSON.stringify(c, null, 2) + '\n';
  return formatMarkdown(c);
}
