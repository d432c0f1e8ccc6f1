// The report of `bench diagnose`: the seed's fields first and in the seed's order
// (../shared/seeds/serving-diagnostics-report.json; a copy in test/fixtures/), then this tool's
// additions (protocol checks, the repeat / isolation / batch-invariance details, what the server
// said of itself); its status
// (complete when every check ran, whatever passed; incomplete with the reasons otherwise); and the
// summary table for stderr.
import type { DecodeRun } from './decode.js';
import { median } from './decode.js';
import type { CheckResult } from './session.js';
import type { Json } from './http-client.js';

export const SCOPE = 'Exercise serving behavior, the wire protocol, near-limit prefill, greedy decode, determinism and request isolation over HTTP.\n' +
  'Local diagnostics (lumen-bench `bench diagnose`), not an official task benchmark.\n';

export interface ReportParts {
  baseUrl: string;
  model: string;
  seed: number;
  toolVersion: string;
  startedAt: string;
  finishedAt: string;
  seconds: number;
  server: Json;
  behavior: CheckResult[];
  protocol: CheckResult[];
  longContext: CheckResult[];
  initialDecode: DecodeRun & { error?: string };
  decodeRuns: (DecodeRun & { error?: string })[];
  repeats: CheckResult;
  isolation: CheckResult;
  batchInvariance: CheckResult;
  /** Reasons found outside the checks (setup). */
  reasons?: string[];
}

export interface DiagnoseReport extends Json {
  status: 'complete' | 'incomplete';
}

/** Why the report is incomplete: every check or run that did not run, with its error. */
/** A judged check in the summary line: its verdict, or "not run" (the JSON's booleans say false then, as the seed's schema has them). */
function said(c: CheckResult, yes: string, no: string): string {
  if (c.error !== undefined) return 'not run';
  if (c.pass === null) return c.not_determinable !== undefined ? 'not determinable' : 'not run';
  return c.pass ? yes : no;
}

export function incompleteReasons(p: ReportParts): string[] {
  const out = [...(p.reasons ?? [])];
  const checks = [...p.behavior, ...p.protocol, ...p.longContext, p.repeats, p.isolation, p.batchInvariance];
  for (const c of checks) if (c.error !== undefined) out.push(`${c.id}: ${c.error}`);
  if (p.initialDecode.error !== undefined) out.push(`initial_decode: ${p.initialDecode.error}`);
  p.decodeRuns.forEach((d, i) => { if (d.error !== undefined) out.push(`decode_runs[${i}]: ${d.error}`); });
  return out;
}

const passes = (xs: readonly CheckResult[]) => xs.filter((c) => c.pass === true).length;

export function assembleReport(p: ReportParts): DiagnoseReport {
  const reasons = incompleteReasons(p);
  const rates = p.decodeRuns.map((d) => d.decode_tokens_per_second).filter((x): x is number => x !== null);
  return {
    status: reasons.length === 0 ? 'complete' : 'incomplete',
    scope: SCOPE,
    base_url: p.baseUrl,
    model: p.model,
    behavior: p.behavior,
    long_context: p.longContext,
    decode_runs: p.decodeRuns,
    initial_decode: p.initialDecode,
    behavior_passes: passes(p.behavior),
    long_context_passes: passes(p.longContext),
    median_decode_tokens_per_second: median(rates),
    identical_greedy_completions: p.repeats.pass === true,
    request_isolation_passed: p.isolation.pass === true,
    ...(reasons.length ? { incomplete_reasons: reasons } : {}),
    protocol: p.protocol,
    protocol_passes: passes(p.protocol),
    greedy_repeats: p.repeats,
    request_isolation: p.isolation,
    batch_invariance: p.batchInvariance,
    server: p.server,
    seed: p.seed,
    tool_version: p.toolVersion,
    started_at: p.startedAt,
    finished_at: p.finishedAt,
    seconds: p.seconds,
  };
}

function verdict(c: { pass: boolean | null; error?: string; informational?: unknown; not_determinable?: unknown }): string {
  if (c.error !== undefined) return 'NOT RUN';
  if (c.pass === null) return c.not_determinable !== undefined ? 'undetermined' : 'skipped';
  if (c.informational) return c.pass ? 'same' : 'differs';
  return c.pass ? 'pass' : 'FAIL';
}

function cut(s: string, n: number): string {
  const flat = s.replace(/\s+/g, ' ');
  return flat.length > n ? `${flat.slice(0, n - 1)}…` : flat;
}

const fmt = (x: number | null, d = 1) => x === null ? '-' : x.toFixed(d);

/** The summary table: one line per check and decode run, then the totals and the status. */
export function summaryTable(r: DiagnoseReport): string {
  const rows: [string, string, string, string][] = [];
  const add = (c: CheckResult) => rows.push([
    c.id, verdict(c as CheckResult & { informational?: unknown }), c.seconds.toFixed(2),
    cut(String(c.error ?? c.skipped ?? c.reason ?? ''), 90),
  ]);
  for (const c of r.behavior as CheckResult[]) add(c);
  for (const c of r.protocol as CheckResult[]) add(c);
  for (const c of r.long_context as CheckResult[]) add(c);
  const decodes: [string, DecodeRun & { error?: string }][] = [['initial_decode', r.initial_decode as DecodeRun], ...(r.decode_runs as DecodeRun[]).map((d, i) => [`decode_runs[${i}]`, d] as [string, DecodeRun])];
  for (const [name, d] of decodes) {
    rows.push([name, d.error !== undefined ? 'NOT RUN' : d.refused !== undefined ? 'REFUSED' : 'ran', fmt(d.decode_seconds === null ? null : d.decode_seconds + (d.ttft_ms ?? 0) / 1000, 2),
      d.error !== undefined ? cut(d.error, 90) : d.refused !== undefined ? cut(`the server refused the request: ${d.refused}`, 90) : `ttft ${fmt(d.ttft_ms)} ms, ${fmt(d.decode_tokens_per_second)} tok/s over ${String((d.usage as Json | null)?.completion_tokens ?? '?')} tokens (${d.finish_reason ?? 'no finish'})`]);
  }
  for (const c of [r.greedy_repeats, r.request_isolation, r.batch_invariance] as CheckResult[]) add(c);
  const w = [0, 1, 2].map((k) => Math.max(['check', 'result', 'seconds'][k]!.length, ...rows.map((x) => x[k]!.length)));
  const line = (x: readonly string[]) => `${x[0]!.padEnd(w[0]!)}  ${x[1]!.padEnd(w[1]!)}  ${x[2]!.padStart(w[2]!)}  ${x[3] ?? ''}`.trimEnd();
  const out = [line(['check', 'result', 'seconds', 'detail']), ...rows.map(line)];
  out.push('');
  out.push(`behavior ${String(r.behavior_passes)}/${(r.behavior as unknown[]).length}, protocol ${String(r.protocol_passes)}/${(r.protocol as CheckResult[]).filter((c) => c.pass !== null).length}, ` +
    `long context ${String(r.long_context_passes)}/${(r.long_context as unknown[]).length}, median decode ${fmt(r.median_decode_tokens_per_second as number | null)} tok/s, ` +
    `identical greedy repeats ${said(r.greedy_repeats as CheckResult, 'yes', 'no')}, ` +
    `request isolation ${said(r.request_isolation as CheckResult, 'passed', 'FAILED')}`);
  out.push(r.status === 'complete' ? 'status: complete (every check ran)' : `status: incomplete: ${(r.incomplete_reasons as string[]).join('; ')}`);
  return `${out.join('\n')}\n`;
}
