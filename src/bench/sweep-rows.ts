// The sweep's rows: every cell at every concurrency, one row at a time (row k+1 starts after every
// request of row k has finished), each streamed to the sinks as it completes. Returns whether the
// sweep was interrupted.
import { prefixCacheWith } from '../engine/options.js';
import type { EngineHandle, RequestEngine } from '../engine/types.js';
import type { ModelCheckpoint } from '../model/types.js';
import { CONTENTION_SHARE, cpuSample, cpuWindowStart, otherCpuShare, startCpuSample, type CpuSample } from '../util/machine.js';
import { TOOL_VERSION } from '../util/version.js';
import type { SweepRow } from './csv.js';
import { appendMemoryStage, memoryStageRows, type MemoryStage } from './memory-stages.js';
import { ttftOf } from './metrics.js';
import { formatOpsReport, formatPipelineReport } from './profile.js';
import type { Report } from './report.js';
import type { SweepRenderer } from './render.js';
import { RowSinks, toReportRow } from './row-sinks.js';
import type { RowProbe } from './row-probe.js';
import { runRow, type RowOutcome } from './runner.js';
import type { SweepConfig } from './sweep-config.js';

/** What the rows run on: the loaded engine and checkpoint (in-process) or a server (neither); a probe per row. */
export interface RowsTarget {
  /** In-process: the engine (its memory counters) and the checkpoint, for --memory-stages. */
  local: { engine: EngineHandle; ckpt: ModelCheckpoint } | null;
  /** Exclusive bound of prompt token ids. */
  vocab: number;
  maxSeq: number;
  /** What sets maxSeq (default `--max-seq`). */
  maxSeqSource?: string;
  /** The probe of one row: the engine's own counters, or the server's /metrics and wire notes. */
  probe: (cell: { isl: number; osl: number }) => RowProbe;
  /** Tokens every prompt starts with whatever its draw (an endpoint's chat template and BOS). */
  commonPrefixTokens?: number;
}

export async function runRows(
  cfg: SweepConfig, engine: RequestEngine, target: RowsTarget, profile: boolean, signal: AbortSignal,
  renderer: SweepRenderer, report: Report, sinks: RowSinks, rows: SweepRow[],
): Promise<boolean> {
  const local = target.local;
  // A stage that cannot be written (the disk filled, its directory went away and cannot be made) is
  // a warning, once, not the end of the sweep: the stages are a side record (the warm-up's runs in an
  // engine step listener, where a throw would be an uncaught exception that loses every row).
  let stagesFailed = false;
  const stage = (s: MemoryStage) => {
    if (cfg.memoryStages === null || local === null || stagesFailed) return;
    const stageRows = memoryStageRows(s, local.engine, local.ckpt, TOOL_VERSION);
    const failure = appendMemoryStage(cfg.memoryStages, stageRows);
    if (failure !== null) {
      stagesFailed = true;
      renderer.warn(`--memory-stages: ${failure}; no further stages are recorded`, { stage: s });
      return;
    }
    renderer.debug('memory_stage', { stage: s, rows: stageRows });
  };
  stage('weights_bound');

  sinks.begin();
  renderer.sweepStart(cfg.cells.length * cfg.concurrency.length);
  const vocab = target.vocab;
  const load = cfg.load;
  const open = load.requestRate !== null ? { rate: load.requestRate, burstiness: load.burstiness, numRequests: load.numRequests } : null;
  let sweepFirstToken = false;
  let sweepFirstRequest = false;
  // The rows' start samples (and the command's), for rows too short to measure the CPU share alone.
  const cpuMarks: CpuSample[] = [];
  const commandStart = startCpuSample();
  if (commandStart) cpuMarks.push(commandStart);

  for (const cell of cfg.cells) {
    let c1DecodeTokS: number | null = null;
    for (const c of cfg.concurrency) {
      if (signal.aborted) return true;
      const label = `${cell.isl}:${cell.osl} c=${c}`;
      renderer.rowStart(label, { isl: cell.isl, osl: cell.osl, concurrency: c }, () => engine.nowMs());
      const cpuBefore = cpuSample();
      const out: RowOutcome = await runRow(engine, {
        cell, concurrency: c, warmup: cfg.warmup, iters: cfg.iters, maxSeq: target.maxSeq, seed: cfg.seed,
        prompts: cfg.prompts, sharedPrefix: cfg.sharedPrefix, vocab, profile, c1DecodeTokS,
        ...(target.maxSeqSource ? { maxSeqSource: target.maxSeqSource } : {}), open, goodput: load.goodput,
        commonPrefixTokens: target.commonPrefixTokens ?? 0, noPrefixCache: local !== null && !prefixCacheWith(cfg.kvcache),
      }, signal, {
        phase: (p, total) => renderer.rowPhase(p, total),
        tokens: (n) => renderer.stepTokens(n),
        firstToken: () => {
          if (!sweepFirstToken) { sweepFirstToken = true; stage('warmup_forward'); }
        },
        firstRequestDone: () => {
          if (!sweepFirstRequest) { sweepFirstRequest = true; stage('first_generation'); }
        },
        requestDone: (t, timed) => renderer.debug('request', {
          cell: label, timed, pass: t.pass, session: t.session, id: t.result.id,
          tokens: t.result.tokens.length, ttft_ms: ttftOf(t.result),
        }),
      }, target.probe(cell));
      const cpuAfter = cpuSample();
      const otherCpu = otherCpuShare(cpuWindowStart(cpuBefore, cpuMarks, cpuAfter), cpuAfter);
      if (cpuBefore) cpuMarks.push(cpuBefore);
      // Only a row that ran was run alongside anything (a cell refused before running has no such note).
      if (otherCpu !== null && otherCpu >= CONTENTION_SHARE && !out.interrupted && out.ran !== false) {
        const who = cfg.endpoint !== null ? 'other processes (a server on this machine among them)' : 'other processes';
        const note = `${who} used ${(otherCpu * 100).toFixed(0)}% of the machine's CPU during this row (figures may be noisy)`;
        out.row.notes = out.row.notes ? `${out.row.notes}; ${note}` : note;
        renderer.warn(`${label}: ${note}`, { cell: label, cpu_other_share: otherCpu });
      }
      if (out.cacheHitsNote && !out.interrupted) renderer.warn(`${label}: ${out.cacheHitsNote}`, { cell: label });
      if (out.preemptionNote && !out.interrupted) renderer.warn(`${label}: ${out.preemptionNote}`, { cell: label });
      renderer.rowEnd(label, out);
      if (out.interrupted) return true;
      if (c === 1) c1DecodeTokS = out.row.status === 'ok' ? out.row.decode_tok_s : null;
      rows.push(out.row);
      report.rows.push({ ...toReportRow(out), cpu_other_share: out.ran === false ? null : otherCpu });
      sinks.row(out.row, out);
      if (out.profile) {
        const scope = `${label}, timed passes`;
        if (cfg.profile) renderer.profile('ops', formatOpsReport(scope, out.profile.ops), out.profile.ops);
        if (cfg.profilePipeline) renderer.profile('pipeline', formatPipelineReport(scope, out.profile.pipeline), out.profile.pipeline);
      } else if (profile && out.row.status === 'ok') {
        renderer.warn(`${label}: the engine returned no profile although profiling was requested`);
      }
    }
  }
  return false;
}
