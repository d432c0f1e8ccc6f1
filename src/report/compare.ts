// `bench compare BASE.json NEW.json`: rows matched by cell, concurrency and target (engine or endpoint);
// per compared figure the ratio NEW/BASE against the threshold and the two runs' noise floor; the
// provenance fields that differ. Formatting is compare-format.ts.
import type { ReportRow } from '../bench/report.js';
import { COMPARED_FIGURES, cellOf, figureValue, tailTooThin, type FigureName } from './figures.js';
import { GATE, gateFloor, rowSpreads, type FloorUnknown, type Spread } from './noise.js';
import { targetKind, type SavedReport } from './report-file.js';
import { isJsonObject } from '../util/json.js';
import { CONTENTION_SHARE } from '../util/machine.js';

/** A change smaller than this (percent of BASE) is never flagged, whatever the noise: `--threshold`'s default. */
export const DEFAULT_THRESHOLD_PCT = 5;

export type FigureVerdict =
  | 'regression' | 'improvement'
  /** Beyond noise and the threshold in a row either run measured under CPU contention: not evidence of the change. */
  | 'regression under contention' | 'improvement under contention'
  | 'within noise' | 'below threshold' | 'floor unknown' | 'not judged' | 'lost in NEW' | 'not measured';


export interface FigureChange {
  figure: FigureName;
  label: string;
  better: 'higher' | 'lower';
  base: number | null;
  next: number | null;
  ratio: number | null;
  /** The noise floor on a log scale: |ln ratio| beyond it is beyond the two runs' noise at the gate's level; null when unknown. */
  floor: number | null;
  /** The noise band [e^-floor, e^floor]: ratios within the two runs' noise; null when unknown. */
  band: [number, number] | null;
  /** Why the floor is unknown (one timed pass, no samples). */
  floor_unknown: string | null;
  /** Why a tail figure is not judged: too few samples for its percentile (`20 requests; a p99 is judged from 500`). */
  not_judged: string | null;
  verdict: FigureVerdict;
}

export type RowVerdict = 'compared' | 'failed in NEW' | 'fixed in NEW' | 'failed in both';

export interface RowComparison {
  key: string;
  isl: number;
  osl: number;
  concurrency: number;
  target: 'engine' | 'endpoint';
  row: RowVerdict;
  /** The error row's reason when a side failed. */
  reason: string | null;
  /** Other processes' share of the CPU while the row ran, in each report (null: not recorded). */
  cpu_other_share: { base: number | null; next: number | null };
  /** Either share at or above CONTENTION_SHARE (src/util/machine.ts, the sweep's "figures may be noisy"): a move beyond noise here fails the gate as not a pass, not as a regression. */
  contended: boolean;
  figures: FigureChange[];
}

export interface ProvenanceDiff {
  field: string;
  base: string;
  next: string;
}

export interface Comparison {
  base: string;
  next: string;
  threshold_pct: number;
  /** Settings that differ (machine, engine, model, endpoint, tool, sweep). */
  provenance: ProvenanceDiff[];
  /** Sizes measured at load that differ (engine.kv_blocks_total): not settings, shown apart. */
  measured: ProvenanceDiff[];
  rows: RowComparison[];
  only_in_base: string[];
  only_in_next: string[];
  /** Keys with more than one row in a report (`8:4 c=1 engine: 2 rows in BASE`): which of them to pair is
   * not known, so such a key is not compared (and not listed as only in one report). */
  duplicated: string[];
  /** Figures flagged as regressions plus rows that failed in NEW only. */
  regressions: number;
  improvements: number;
  /** Figures beyond the threshold whose floor is unknown (not flagged). */
  unknown_floor: number;
  /** Compared figures without a noise floor, beyond the threshold or not, and the first reason given. */
  no_floor: { figures: number; reason: string | null };
  /** Rows measured under CPU contention in either report, with the shares (`32:32 c=1 engine (BASE 51%, NEW 48%)`). */
  contended_rows: string[];
  /** Figures beyond noise and the threshold in the worse direction in those rows (not counted in regressions). */
  contended_regressions: number;
  /** Figures measured in BASE and missing or invalid in NEW (`16:8 c=1 engine: ITL p99`): the comparison is not a pass. */
  lost: string[];
  /** Tail figures not judged for too few samples, and the first reason given. */
  not_judged: { figures: number; reason: string | null };
  /** The figures tested against their floor (both runs' floors known): the m of the gate's alpha / m. */
  tests: number;
  /** The gate's chance, for the comparison as a whole, to flag a regression between two runs of one build. */
  alpha: number;
  /** Why the comparison cannot pass whatever its figures say: NEW's run did not complete, a figure of
   * BASE is missing in NEW, a report holds two rows with one key (those rows were not compared), or
   * nothing was compared (no row of BASE is in NEW, or every shared row failed). Each fails the gate
   * (exit 5) like a regression. */
  not_a_pass: string[];
  /** 0 no regression, 5 at least one regression or a reason in not_a_pass. */
  exit_code: 0 | 5;
}

export const EXIT_REGRESSION = 5;

const show = (v: unknown): string => (v === undefined || v === null ? '—' : typeof v === 'string' ? v : JSON.stringify(v));

/** The provenance fields compared, by section; `*` compares every field of the section but the measured ones. */
const PROVENANCE: ReadonlyArray<readonly [keyof SavedReport, readonly string[]]> = [
  ['machine', ['cpu_model', 'logical_cores', 'physical_cores', 'memory_bytes', 'os', 'arch', 'node', 'gpus']],
  ['engine', ['*']],
  ['model', ['dtype', 'param_count', 'config_sha256', 'path', 'embedded', 'weight_format']],
  ['endpoint', ['url', 'api', 'model', 'server', 'tokenizer']],
  ['tool', ['version', 'git_commit', 'git_dirty']],
  ['sweep', ['warmup', 'iters', 'prompts', 'shared_prefix', 'seed', 'load']],
];

/**
 * Fields of a `*` section that are measured when the engine loads, not set: the KV pool's size when a
 * fraction of the free memory sized it (the blocks, the bytes, the free memory and the budget it was
 * taken from) and the process's RSS around the weights' release. They differ between two runs of the
 * same settings, so they are not settings changes; the pool's size is shown apart (MEASURED_SHOWN),
 * the rest not at all. The settings that size the pool (kv_memory, kv_pool.source, kv_pool.fraction,
 * block size, KV dtype) are compared.
 */
const MEASURED = new Set([
  'engine.kv_blocks_total', 'engine.kv_pool.blocks', 'engine.kv_pool.bytes', 'engine.kv_pool.free_bytes', 'engine.kv_pool.budget_bytes',
  'engine.rss_before_release_bytes', 'engine.rss_after_release_bytes',
]);
const MEASURED_SHOWN = ['engine.kv_blocks_total'];

function at(section: Record<string, unknown> | null, dotted: string): unknown {
  let v: unknown = section;
  for (const k of dotted.split('.')) v = isJsonObject(v) ? v[k] : undefined;
  return v;
}

/** The fields of a `*` section: every key, an object holding a measured field split into its own fields. */
function starFields(section: string, sa: Record<string, unknown> | null, sb: Record<string, unknown> | null): string[] {
  const out: string[] = [];
  for (const k of new Set([...Object.keys(sa ?? {}), ...Object.keys(sb ?? {})])) {
    const holdsMeasured = [...MEASURED].some((m) => m.startsWith(`${section}.${k}.`));
    const va = sa?.[k];
    const vb = sb?.[k];
    if (holdsMeasured && (isJsonObject(va) || isJsonObject(vb))) {
      for (const sub of new Set([...Object.keys(isJsonObject(va) ? va : {}), ...Object.keys(isJsonObject(vb) ? vb : {})])) out.push(`${k}.${sub}`);
    } else out.push(k);
  }
  return out.filter((f) => !MEASURED.has(`${section}.${f}`));
}

const differs = (va: unknown, vb: unknown): boolean => JSON.stringify(va ?? null) !== JSON.stringify(vb ?? null);

/** The settings that differ: machine, engine, model, endpoint, tool, sweep (measured sizes left out). */
export function provenanceDiffs(a: SavedReport, b: SavedReport): ProvenanceDiff[] {
  const out: ProvenanceDiff[] = [];
  if (targetKind(a) !== targetKind(b)) out.push({ field: 'target', base: targetKind(a), next: targetKind(b) });
  for (const [section, fields] of PROVENANCE) {
    const sa = (a[section] ?? null) as Record<string, unknown> | null;
    const sb = (b[section] ?? null) as Record<string, unknown> | null;
    if (sa === null && sb === null) continue;
    const keys = fields[0] === '*' ? starFields(section, sa, sb) : fields;
    for (const k of keys) {
      const va = at(sa, k);
      const vb = at(sb, k);
      if (differs(va, vb)) out.push({ field: `${section}.${k}`, base: show(va), next: show(vb) });
    }
  }
  return out;
}

/** Sizes measured at load that differ (the KV pool's blocks): context for a change, not a setting. */
export function measuredDiffs(a: SavedReport, b: SavedReport): ProvenanceDiff[] {
  const out: ProvenanceDiff[] = [];
  for (const field of MEASURED_SHOWN) {
    const [section, ...rest] = field.split('.');
    const va = at((a[section as keyof SavedReport] ?? null) as Record<string, unknown> | null, rest.join('.'));
    const vb = at((b[section as keyof SavedReport] ?? null) as Record<string, unknown> | null, rest.join('.'));
    if (differs(va, vb)) out.push({ field, base: show(va), next: show(vb) });
  }
  return out;
}

const rowKey = (r: ReportRow, target: string): string => `${cellOf(r)} c=${r.concurrency} ${target}`;

/** A figure measured in both rows, its floors still to be set once every row's figures are known. */
interface Pending {
  change: FigureChange;
  contended: boolean;
  a: Spread;
  b: Spread;
  worse: boolean;
  beyondThreshold: boolean;
}

const ROW_RULES = COMPARED_FIGURES.map((f) => [f.name, f.floor] as const);

function spreadsOf(row: ReportRow): Map<FigureName, Spread | FloorUnknown> {
  return rowSpreads({ osl: row.osl, samples: row.samples as never }, ROW_RULES);
}

function compareFigures(a: ReportRow, b: ReportRow, thresholdPct: number, contended: boolean, pending: Pending[]): FigureChange[] {
  const t = thresholdPct / 100;
  const sa = spreadsOf(a);
  const sb = spreadsOf(b);
  return COMPARED_FIGURES.map((f) => {
    const base = figureValue(a, f.name);
    const next = figureValue(b, f.name);
    const change: FigureChange = { figure: f.name, label: f.label, better: f.better, base, next, ratio: null, floor: null, band: null, floor_unknown: null, not_judged: null, verdict: 'not measured' };
    const measured = (v: number | null): v is number => v !== null && v > 0;
    // Measured in BASE, missing (null) or not a positive number in NEW: the figure was lost, which is
    // no evidence that it did not regress. Missing in BASE: nothing to compare with.
    if (measured(base) && !measured(next)) { change.verdict = 'lost in NEW'; return change; }
    if (!measured(base) || !measured(next)) return change;
    const ratio = next / base;
    change.ratio = ratio;
    const beyondThreshold = Math.abs(ratio - 1) > t;
    const thin = tailTooThin(a, f.name) ?? tailTooThin(b, f.name);
    if (thin !== null) {
      change.not_judged = `${tailTooThin(a, f.name) !== null ? 'BASE' : 'NEW'}: ${thin}`;
      change.verdict = 'not judged';
      return change;
    }
    const fa = sa.get(f.name)!;
    const fb = sb.get(f.name)!;
    if ('unknown' in fa || 'unknown' in fb) {
      change.floor_unknown = 'unknown' in fa ? `BASE: ${fa.unknown}` : `NEW: ${(fb as FloorUnknown).unknown}`;
      change.verdict = beyondThreshold ? 'floor unknown' : 'below threshold';
      return change;
    }
    pending.push({ change, contended, a: fa, b: fb, worse: f.better === 'higher' ? ratio < 1 : ratio > 1, beyondThreshold });
    return change;
  });
}

/** Every tested figure's floor at level alpha / m, m the number of them, and its verdict. */
function judge(pending: readonly Pending[]): void {
  for (const p of pending) {
    const floor = gateFloor(p.a, p.b, pending.length, GATE.alpha);
    p.change.floor = floor;
    p.change.band = [Math.exp(-floor), Math.exp(floor)];
    if (!p.beyondThreshold) p.change.verdict = 'below threshold';
    else if (Math.abs(Math.log(p.change.ratio!)) <= floor) p.change.verdict = 'within noise';
    else if (p.contended) p.change.verdict = p.worse ? 'regression under contention' : 'improvement under contention';
    else p.change.verdict = p.worse ? 'regression' : 'improvement';
  }
}

const shareOf = (r: ReportRow): number | null => (typeof r.cpu_other_share === 'number' && Number.isFinite(r.cpu_other_share) ? r.cpu_other_share : null);
const pctText = (x: number | null): string => (x === null ? '—' : `${Math.round(x * 100)}%`);

export function compareReports(a: SavedReport, b: SavedReport, thresholdPct: number = DEFAULT_THRESHOLD_PCT): Comparison {
  const ta = targetKind(a);
  const tb = targetKind(b);
  // A key with two rows in one report (a sweep given a cell twice, before repeats were dropped) cannot be
  // paired: the first with the last compared two different runs of the cell.
  const countKeys = (rs: readonly ReportRow[], t: string) => {
    const n = new Map<string, number>();
    for (const r of rs) n.set(rowKey(r, t), (n.get(rowKey(r, t)) ?? 0) + 1);
    return n;
  };
  const nBase = countKeys(a.rows, ta);
  const nNext = countKeys(b.rows, tb);
  const duplicated: string[] = [];
  for (const [key, n] of nBase) if (n > 1) duplicated.push(`${key}: ${n} rows in BASE`);
  for (const [key, n] of nNext) if (n > 1) duplicated.push(`${key}: ${n} rows in NEW`);
  const dup = (key: string) => (nBase.get(key) ?? 0) > 1 || (nNext.get(key) ?? 0) > 1;
  const nextRows = new Map(b.rows.map((r) => [rowKey(r, tb), r]));
  const baseKeys = new Set(a.rows.map((r) => rowKey(r, ta)));
  const rows: RowComparison[] = [];
  const pending: Pending[] = [];
  const onlyBase: string[] = [];
  for (const ra of a.rows) {
    const key = rowKey(ra, ta);
    if (dup(key)) continue;
    const rb = nextRows.get(key);
    if (!rb) { onlyBase.push(key); continue; }
    const share = { base: shareOf(ra), next: shareOf(rb) };
    const contended = [share.base, share.next].some((x) => x !== null && x >= CONTENTION_SHARE);
    const base = { key, isl: ra.isl, osl: ra.osl, concurrency: ra.concurrency, target: ta, cpu_other_share: share, contended };
    if (ra.status === 'ok' && rb.status === 'ok') rows.push({ ...base, row: 'compared', reason: null, figures: compareFigures(ra, rb, thresholdPct, contended, pending) });
    else if (ra.status === 'ok') rows.push({ ...base, row: 'failed in NEW', reason: rb.reason, figures: [] });
    else if (rb.status === 'ok') rows.push({ ...base, row: 'fixed in NEW', reason: ra.reason, figures: [] });
    else rows.push({ ...base, row: 'failed in both', reason: rb.reason, figures: [] });
  }
  judge(pending);
  const onlyNext = b.rows.map((r) => rowKey(r, tb)).filter((k) => !baseKeys.has(k) && !dup(k));
  const figs = rows.flatMap((r) => r.figures);
  const failedInNew = rows.filter((r) => r.row === 'failed in NEW').length;
  const failedInBoth = rows.filter((r) => r.row === 'failed in both').length;
  const regressions = figs.filter((f) => f.verdict === 'regression').length + failedInNew;
  const notAPass: string[] = [];
  if (b.status !== 'complete') notAPass.push(`NEW's run is ${b.status}, not complete`);
  const contendedRows = rows.filter((r) => r.contended);
  const contendedMoves = contendedRows.flatMap((r) => r.figures.filter((f) => f.verdict === 'regression under contention').map((f) => `${r.key}: ${f.label}`));
  if (contendedMoves.length > 0) {
    notAPass.push(`${contendedMoves.length} figure${contendedMoves.length === 1 ? '' : 's'} moved beyond noise in the worse direction in rows measured under CPU contention (${contendedMoves.join('; ')}): other processes' load, not the change, may explain ${contendedMoves.length === 1 ? 'it' : 'them'}; rerun both on a quiet machine`);
  }
  const lost = rows.flatMap((r) => r.figures.filter((f) => f.verdict === 'lost in NEW').map((f) => `${r.key}: ${f.label}`));
  if (lost.length > 0) {
    notAPass.push(`${lost.length} figure${lost.length === 1 ? '' : 's'} measured in BASE ${lost.length === 1 ? 'is' : 'are'} missing in NEW or not a measurement there (${lost.join('; ')}): a lost figure cannot be judged`);
  }
  if (duplicated.length > 0) {
    notAPass.push(`a report holds more than one row for one cell and concurrency (${duplicated.join('; ')}): which to pair is unknown, so those rows were not compared`);
  }
  if (!rows.some((r) => r.row === 'compared' || r.row === 'fixed in NEW')) {
    if (rows.length === 0) {
      if (duplicated.length === 0) notAPass.push('no row of BASE is in NEW: nothing was compared');
    } else if (failedInNew === 0) notAPass.push('every row both runs share failed in both: nothing was compared');
    else if (failedInBoth === 0) notAPass.push(`every row both runs share failed in NEW (ok in BASE): nothing was compared`);
    else notAPass.push(`every row both runs share failed in NEW (${failedInNew} ok in BASE, ${failedInBoth} failed in both): nothing was compared`);
  }
  return {
    base: a.file,
    next: b.file,
    threshold_pct: thresholdPct,
    provenance: provenanceDiffs(a, b),
    measured: measuredDiffs(a, b),
    rows,
    only_in_base: onlyBase,
    only_in_next: onlyNext,
    duplicated,
    regressions,
    improvements: figs.filter((f) => f.verdict === 'improvement').length + rows.filter((r) => r.row === 'fixed in NEW').length,
    unknown_floor: figs.filter((f) => f.verdict === 'floor unknown').length,
    no_floor: { figures: figs.filter((f) => f.floor_unknown !== null).length, reason: figs.find((f) => f.floor_unknown !== null)?.floor_unknown ?? null },
    contended_rows: contendedRows.map((r) => `${r.key} (BASE ${pctText(r.cpu_other_share.base)}, NEW ${pctText(r.cpu_other_share.next)})`),
    contended_regressions: contendedMoves.length,
    lost,
    not_judged: { figures: figs.filter((f) => f.not_judged !== null).length, reason: figs.find((f) => f.not_judged !== null)?.not_judged ?? null },
    tests: pending.length,
    alpha: GATE.alpha,
    not_a_pass: notAPass,
    exit_code: regressions > 0 || notAPass.length > 0 ? EXIT_REGRESSION : 0,
  };
}
