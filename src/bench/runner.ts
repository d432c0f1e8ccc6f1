// One sweep row: a cell (isl:osl) at one concurrency, run as a closed loop of sessions on a loaded engine.
import type { EngineHandle, EngineStats, ProfileReport, RequestHandle, RequestResult, TokenEvent } from '../engine/types.js';
import { errorRow, type SweepRow } from './csv.js';
import {
  batchingEfficiency,
  computeRowFigures,
  counterColumns,
  speedupVsC1,
  type RowFigures,
  type TimedRequest,
} from './metrics.js';
import type { Cell, PromptMode } from './options.js';
import { makePrompt, type PromptPlan } from './prompts.js';

export interface RowSettings {
  cell: Cell;
  concurrency: number;
  warmup: number;
  iters: number;
  maxSeq: number;
  seed: number;
  prompts: PromptMode;
  sharedPrefix: number;
  /** Exclusive bound of prompt token ids. */
  vocab: number;
  profile: boolean;
  /** decode_tok_s of the same cell at concurrency 1, when that row ran ok. */
  c1DecodeTokS: number | null;
}

/** What the runner tells whoever draws progress. */
export interface RowObserver {
  /** Phase change: 'warm-up' or 'timed', with the token total of the whole row. */
  phase?(phase: 'warm-up' | 'timed', tokensInRow: number): void;
  /** Every generated token (keep it cheap: it runs for warm-up and timed requests alike). */
  token?(): void;
  /** The first token / the completion of the cell's first request. */
  firstToken?(): void;
  firstRequestDone?(r: RequestResult): void;
  requestDone?(r: TimedRequest, timed: boolean): void;
}

export interface RowOutcome {
  row: SweepRow;
  /** Figures behind an ok row (null for an error row). */
  figures: RowFigures | null;
  /** Engine counters over the timed passes. */
  counters: EngineStats | null;
  timed: TimedRequest[];
  profile: ProfileReport | null;
  /** Native wall of the timed phase (first submit -> last completion), ms. */
  timedWallMs: number | null;
  /** True when an abort (SIGINT) cut the row short: the row is not to be reported. */
  interrupted: boolean;
}

interface PhaseResult {
  results: TimedRequest[];
  failure: string | null;
  cancelled: boolean;
}

/**
 * Closed loop: `concurrency` sessions, each submitting its requests back to back (the next one when the
 * previous completes), `passes` requests per session. The first failure cancels everything in flight.
 */
async function runPhase(
  engine: EngineHandle,
  concurrency: number,
  firstPass: number,
  passes: number,
  promptFor: (pass: number, session: number) => Int32Array,
  osl: number,
  onToken: (ev: TokenEvent) => void,
  signal: AbortSignal,
  onDone: (t: TimedRequest) => void,
): Promise<PhaseResult> {
  const results: TimedRequest[] = [];
  const inflight = new Set<RequestHandle>();
  let failure: string | null = null;
  let cancelled = false;
  const cancelAll = () => { for (const h of inflight) h.cancel(); };
  const onAbort = () => { cancelled = true; cancelAll(); };
  signal.addEventListener('abort', onAbort);

  const session = async (s: number) => {
    for (let p = firstPass; p < firstPass + passes; p++) {
      if (failure !== null || cancelled || signal.aborted) return;
      let handle: RequestHandle;
      try {
        handle = engine.submit(
          { prompt: promptFor(p, s), maxTokens: osl, ignoreEos: true, temperature: 0 },
          onToken,
        );
      } catch (err) {
        failure ??= `engine refused the request: ${errMessage(err)}`;
        cancelAll();
        return;
      }
      inflight.add(handle);
      let r: RequestResult;
      try {
        r = await handle.done;
      } catch (err) {
        failure ??= `engine error: ${errMessage(err)}`;
        cancelAll();
        return;
      } finally {
        inflight.delete(handle);
      }
      const t: TimedRequest = { pass: p, session: s, result: r };
      results.push(t);
      if (r.finishReason === 'error') {
        failure ??= `engine error: ${r.error ?? 'request failed without a message'}`;
        cancelAll();
        return;
      }
      if (r.finishReason === 'cancelled') {
        // Ours (an abort, or cancelAll after another failure) or the engine's own: the latter loses a request.
        if (!signal.aborted && failure === null) {
          failure = `the engine cancelled a request it was not asked to cancel${r.error ? ` (${r.error})` : ''}`;
          cancelAll();
        }
        return;
      }
      onDone(t);
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, (_, s) => session(s)));
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  return { results, failure, cancelled: cancelled || signal.aborted };
}

export function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Notes on how the row was measured, `; `-joined into the notes column. */
export function promptNote(mode: PromptMode): string {
  return mode === 'repeat'
    ? 'prompts=repeat (one prompt set reused by warm-up and every iteration; prefill_tok_s reads prefix-cache admits)'
    : 'prompts=unique (a fresh random prompt per session per iteration; prefill_tok_s prices prompt ingest)';
}

export async function runRow(
  engine: EngineHandle,
  st: RowSettings,
  signal: AbortSignal,
  obs: RowObserver = {},
): Promise<RowOutcome> {
  const { cell, concurrency: c } = st;
  const { isl, osl } = cell;
  const notes: string[] = [promptNote(st.prompts)];
  const shared = Math.min(st.sharedPrefix, isl);
  if (st.sharedPrefix > 0) {
    notes.push(shared < st.sharedPrefix
      ? `shared-prefix=${shared} (clamped from ${st.sharedPrefix} to isl)`
      : `shared-prefix=${shared}`);
  }
  const fail = (reason: string, extra: Partial<RowOutcome> = {}): RowOutcome => ({
    row: errorRow(isl, osl, c, reason, notes.join('; ')),
    figures: null, counters: null, timed: [], profile: null, timedWallMs: null, interrupted: false,
    ...extra,
  });

  if (isl + osl > st.maxSeq) {
    return fail(`isl+osl = ${isl + osl} tokens exceeds --max-seq ${st.maxSeq} (the longest sequence the engine accepts)`);
  }

  const plan: PromptPlan = {
    seed: st.seed, isl, osl, concurrency: c, mode: st.prompts, sharedPrefix: shared, vocab: st.vocab,
  };
  const promptFor = (pass: number, session: number) => makePrompt(plan, pass, session);

  let firstCall: RequestResult | null = null;
  let firstTokenSeen = false;
  const onToken = (_ev: TokenEvent) => {
    if (!firstTokenSeen) {
      firstTokenSeen = true;
      obs.firstToken?.();
    }
    obs.token?.();
  };
  const tokensInRow = (st.warmup + st.iters) * c * osl;
  const onDone = (timed: boolean) => (t: TimedRequest) => {
    if (firstCall === null && t.pass === 0 && t.session === 0) {
      firstCall = t.result;
      obs.firstRequestDone?.(t.result);
    }
    obs.requestDone?.(t, timed);
  };

  try {
    if (st.warmup > 0) {
      obs.phase?.('warm-up', tokensInRow);
      const w = await runPhase(engine, c, 0, st.warmup, promptFor, osl, onToken, signal, onDone(false));
      if (w.cancelled) return { ...fail('interrupted'), interrupted: true };
      if (w.failure !== null) return fail(`${w.failure} (during warm-up)`);
    }

    // Counters and the profile cover the timed passes only.
    engine.resetCounters();
    if (st.profile) engine.takeProfile();
    obs.phase?.('timed', tokensInRow);
    const t0 = engine.nowMs();
    const timedPhase = await runPhase(engine, c, st.warmup, st.iters, promptFor, osl, onToken, signal, onDone(true));
    const t1 = engine.nowMs();
    const counters = engine.stats();
    const profile = st.profile ? engine.takeProfile() : null;
    if (timedPhase.cancelled) return { ...fail('interrupted'), interrupted: true };
    if (timedPhase.failure !== null) return fail(timedPhase.failure, { counters, timed: timedPhase.results, profile });

    const timed = timedPhase.results.slice().sort((a, b) => a.pass - b.pass || a.session - b.session);
    const fig = computeRowFigures(isl, osl, timed, firstCall);
    if (st.warmup === 0) notes.push('warmup=0 (timed figures include the cold first call)');
    if (fig.wrongLength > 0) {
      notes.push(`${fig.wrongLength} of ${timed.length} timed requests did not generate exactly osl=${osl} tokens ` +
        `(generated ${fig.minGenerated}..${fig.maxGenerated})`);
    }
    if (fig.itlP50Ms === null && osl > 1) notes.push('no decode-only inter-token gap (every gap overlapped another prefill)');
    if (osl === 1) notes.push('osl=1: no decode phase, so no itl or decode_tok_s');

    const speedup = speedupVsC1(fig.decodeTokS, c === 1 ? fig.decodeTokS : st.c1DecodeTokS);
    if (c !== 1 && st.c1DecodeTokS === null && fig.decodeTokS !== null) {
      notes.push('no ok c=1 row for this cell, so no speedup_vs_c1');
    }
    const cc = counterColumns(counters);
    const row: SweepRow = {
      isl, osl, concurrency: c,
      first_call_ms: fig.firstCallMs,
      ttft_ms: fig.ttftMs,
      prefill_tok_s: fig.prefillTokS,
      itl_p50_ms: fig.itlP50Ms,
      itl_p99_ms: fig.itlP99Ms,
      prefill_chunk_ms_p50: fig.prefillChunkP50Ms,
      prefill_chunk_ms_max: fig.prefillChunkMaxMs,
      decode_tok_s: fig.decodeTokS,
      speedup_vs_c1: speedup,
      batching_efficiency: batchingEfficiency(speedup, c),
      ...cc,
      status: 'ok',
      reason: '',
      notes: notes.join('; '),
    };
    return { row, figures: fig, counters, timed, profile, timedWallMs: t1 - t0, interrupted: false };
  } catch (err) {
    if (signal.aborted) return { ...fail('interrupted'), interrupted: true };
    return fail(`engine error: ${errMessage(err)}`);
  }
}
