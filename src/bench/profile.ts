// Text renderings of the engine's profile (--profile, --profile-pipeline).
import type { PipelineStage, ProfileOp } from '../engine/types.js';
import { textTable } from './table.js';

export interface GroupTotal {
  group: string;
  calls: number;
  selfUs: number;
  share: number;
}

/** Op groups ranked by self time, largest first (ties by name). */
export function rankGroups(ops: readonly ProfileOp[]): GroupTotal[] {
  const by = new Map<string, { calls: number; selfUs: number }>();
  let total = 0;
  for (const op of ops) {
    const g = by.get(op.group) ?? { calls: 0, selfUs: 0 };
    g.calls += op.calls;
    g.selfUs += op.selfUs;
    by.set(op.group, g);
    total += op.selfUs;
  }
  return [...by.entries()]
    .map(([group, g]) => ({ group, calls: g.calls, selfUs: g.selfUs, share: total > 0 ? g.selfUs / total : 0 }))
    .sort((a, b) => b.selfUs - a.selfUs || a.group.localeCompare(b.group));
}

const ms = (us: number) => (us / 1000).toFixed(3);
const pct = (x: number) => `${(x * 100).toFixed(1)}%`;

/** Per-op report: summary, top_ops by group self time, then the per-op table with AvgSelf(us). */
export function formatOpsReport(scope: string, ops: readonly ProfileOp[], topN = 10): string {
  const totalSelf = ops.reduce((s, o) => s + o.selfUs, 0);
  const calls = ops.reduce((s, o) => s + o.calls, 0);
  const lines = [
    'Profiling Report Summary:',
    `  scope: ${scope}`,
    `  ops: ${ops.length}  calls: ${calls}  self total: ${ms(totalSelf)} ms`,
    'top_ops:',
  ];
  const groups = rankGroups(ops).slice(0, topN);
  if (groups.length === 0) lines.push('  (no op was timed)');
  groups.forEach((g, i) => {
    lines.push(`  ${String(i + 1).padStart(2)}. ${g.group.padEnd(24)} ${ms(g.selfUs).padStart(12)} ms  ${pct(g.share).padStart(6)}  (${g.calls} calls)`);
  });
  const sorted = [...ops].sort((a, b) => b.selfUs - a.selfUs || a.name.localeCompare(b.name));
  lines.push(...textTable(
    ['Op', 'Group', 'Calls', 'Total(ms)', 'Self(ms)', 'AvgSelf(us)', 'Self%'],
    sorted.map((o) => [
      o.name, o.group, String(o.calls), ms(o.totalUs), ms(o.selfUs),
      o.calls > 0 ? (o.selfUs / o.calls).toFixed(2) : '',
      pct(totalSelf > 0 ? o.selfUs / totalSelf : 0),
    ]),
    2,
  ));
  return lines.join('\n') + '\n';
}

/** Per-stage report of the engine loop (the stages the engine records: scheduling, forward, sampling). */
export function formatPipelineReport(scope: string, stages: readonly PipelineStage[]): string {
  const total = stages.reduce((s, st) => s + st.totalUs, 0);
  const lines = [
    'Pipeline Profile Summary:',
    `  scope: ${scope}`,
    `  stages: ${stages.length}  total: ${ms(total)} ms`,
  ];
  if (stages.length === 0) lines.push('  (no stage was timed)');
  else {
    lines.push(...textTable(
      ['Stage', 'Calls', 'Total(ms)', 'Avg(us)', 'Share'],
      stages.map((s) => [s.name, String(s.calls), ms(s.totalUs), s.calls > 0 ? (s.totalUs / s.calls).toFixed(2) : '', pct(total > 0 ? s.totalUs / total : 0)]),
      1,
    ));
  }
  return lines.join('\n') + '\n';
}
