// The RowProbe of an endpoint row (src/bench/row-probe.ts): before the row, every prompt's ids become
// text of exactly isl tokens (less the server's own overhead: the chat template, a BOS) and c
// connections are opened; around the timed passes, /metrics is scraped for the engine columns; after,
// the wire records of the timed requests become the row's notes (prompt-length mismatches, missing
// usage, estimated chunk counts, early stops: never hidden) and its JSON detail.
import type { TimedRequest } from '../bench/metrics.js';
import type { ProbeReading, RowProbe } from '../bench/row-probe.js';
import { summarize } from '../bench/stats.js';
import { hashString } from '../util/rng.js';
import { promptKey, type EndpointEngine, type WireRecord } from './endpoint-engine.js';
import { fitPrompt } from './prompt-text.js';
import { counterColumnsFromMetrics, metricsFamily, scrapeMetrics, type MetricsSamples } from './server-metrics.js';

export interface ProbeSettings {
  isl: number;
  osl: number;
  seed: number;
  /** Prompt tokens the server adds to the text's own (chat template, BOS), measured at connect. */
  overheadTokens: number;
}

/** Prompts fitted at once (the server's /tokenize is an HTTP call per round). */
const FIT_PARALLEL = 8;

export const PREFILL_CHUNK_NOTE =
  "prefill_chunk_ms_p50, prefill_chunk_ms_max empty: prefill step walls are inside the server's engine; neither the stream nor /metrics gives them";

function range(xs: readonly number[]): string {
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  return lo === hi ? String(lo) : `${lo}..${hi}`;
}

export function endpointProbe(engine: EndpointEngine, st: ProbeSettings): RowProbe {
  let before: MetricsSamples | null = null;
  let beforeWhy = '';
  const timeoutMs = engine.settings.timeoutMs;
  return {
    failureSubject: 'server',

    async prepare(prompts, signal, concurrency) {
      engine.prepared.clear();
      engine.clearRecords();
      const target = st.isl - st.overheadTokens;
      if (target < 1) {
        throw new Error(`isl=${st.isl} leaves no room for text: the server adds ${st.overheadTokens} tokens of its own to every prompt (chat template, BOS)`);
      }
      const unique = new Map<string, Int32Array>();
      for (const p of prompts) unique.set(promptKey(p), p);
      const todo = [...unique.entries()];
      const worker = async () => {
        for (let next = todo.shift(); next !== undefined; next = todo.shift()) {
          if (signal.aborted) throw new Error('interrupted');
          const [key, ids] = next;
          const fitted = await fitPrompt(engine.tokenizer, ids.subarray(0, target), target, st.seed, String(hashString(key)));
          engine.prepared.set(key, { ...fitted, expectedPromptTokens: fitted.tokens + st.overheadTokens });
        }
      };
      await Promise.all(Array.from({ length: FIT_PARALLEL }, worker));
      await engine.pool.warm(concurrency);
      const inexact = [...engine.prepared.values()].filter((p) => !p.exact);
      return inexact.length
        ? [`${inexact.length} of ${engine.prepared.size} prompt texts could not be fitted to exactly ${target} tokens by the tokenizer (${range(inexact.map((p) => p.tokens))})`]
        : [];
    },

    async begin() {
      engine.clearRecords();
      ({ samples: before, why: beforeWhy } = await scrapeMetrics(engine.pool, timeoutMs));
    },

    async end(timed: readonly TimedRequest[]): Promise<ProbeReading> {
      const { samples: after, why } = await scrapeMetrics(engine.pool, timeoutMs);
      await engine.countChunks(timed.map((t) => t.result.id)); // after the scrape: its /tokenize calls are not the row's traffic
      const counters = counterColumnsFromMetrics(before, after, beforeWhy || why);
      const recs = timed.map((t) => engine.records.get(t.result.id)).filter((r): r is WireRecord => r !== undefined);
      const notes: string[] = [];
      if (counters.note) notes.push(counters.note);
      notes.push(PREFILL_CHUNK_NOTE);

      const noUsage = recs.filter((r) => !r.usageSent);
      if (noUsage.length) {
        notes.push(`${noUsage.length} of ${recs.length} timed requests came without usage (the server ignored stream_options.include_usage): ` +
          'their output tokens are estimates, counted by tokenizing each chunk, and their prompt length is unchecked');
      }
      // A usage whose counts are of the wrong type is not a missing one: name the field and what it held.
      const badUsage = recs.filter((r) => r.usageSent && r.usageProblems.length > 0);
      const usageProblems = [...new Set(badUsage.flatMap((r) => r.usageProblems))];
      if (badUsage.length) {
        const shown = usageProblems.slice(0, 3).join('; ') + (usageProblems.length > 3 ? `; and ${usageProblems.length - 3} more` : '');
        const what = [
          badUsage.some((r) => r.completionTokensServer === null) ? 'their output tokens are estimates, counted by tokenizing each chunk' : null,
          badUsage.some((r) => r.promptTokensServer === null) ? 'their prompt length is unchecked' : null,
        ].filter((x) => x !== null);
        notes.push(`${badUsage.length} of ${recs.length} timed requests came with a usage whose counts are not token counts (${shown})` +
          (what.length ? `: ${what.join(', and ')}` : ''));
      }
      const checked = recs.filter((r) => r.promptTokensServer !== null);
      const mismatched = checked.filter((r) => r.promptTokensServer !== st.isl);
      if (mismatched.length) {
        notes.push(`prompt length: the server counted ${range(mismatched.map((r) => r.promptTokensServer!))} prompt tokens, not isl=${st.isl}, ` +
          `for ${mismatched.length} of ${checked.length} timed requests`);
      }
      const estimated = recs.filter((r) => r.chunkCounts === 'tokenizer' && r.completionTokensServer !== null);
      if (estimated.length) {
        notes.push(`tokens per chunk estimated by the tokenizer for ${estimated.length} of ${recs.length} timed requests (no continuous_usage_stats); totals from usage`);
      }
      // The tokenizer's per-chunk counts against the server's total: a difference was spread over the chunks.
      const counted = estimated.filter((r) => r.tokenizerChunkSum !== null);
      const countDiffs = counted.map((r) => r.tokenizerChunkSum! - r.completionTokensServer!);
      const disagreed = counted.filter((_r, i) => countDiffs[i] !== 0);
      if (disagreed.length) {
        const diffs = countDiffs.filter((d) => d !== 0);
        const signed = (d: number) => (d > 0 ? `+${d}` : String(d));
        const lo = Math.min(...diffs);
        const hi = Math.max(...diffs);
        const share = Math.max(...disagreed.map((r) => Math.abs(r.tokenizerChunkSum! - r.completionTokensServer!) / Math.max(1, r.completionTokensServer!)));
        notes.push(`tokens per chunk: the tokenizer's per-chunk counts disagreed with the server's usage total for ${disagreed.length} of ${counted.length} ` +
          `requests counted by the tokenizer (tokenizer minus server: ${lo === hi ? signed(lo) : `${signed(lo)}..${signed(hi)}`} tokens, ` +
          `up to ${Math.round(share * 100)}% of the total); the difference was spread over each request's chunks in proportion`);
      }
      const early = recs.filter((r) => r.finishReasonServer === 'stop');
      if (early.length) {
        notes.push(`${early.length} of ${recs.length} timed requests ended early with finish_reason stop (the server did not honour ignore_eos/min_tokens)`);
      }

      const perChunk = recs.flatMap((r) => r.tokensPerChunk);
      const histogram: Record<string, number> = {};
      for (const k of perChunk) histogram[k] = (histogram[k] ?? 0) + 1;
      const finish: Record<string, number> = {};
      for (const r of recs) finish[r.finishReasonServer ?? 'none'] = (finish[r.finishReasonServer ?? 'none'] ?? 0) + 1;
      const num = (xs: (number | null)[]) => xs.filter((x): x is number => x !== null);
      const detail = {
        ttft_definition: 'sent -> first chunk with non-empty content (the row\'s ttft_ms); ttft_first_choices_ms: sent -> first chunk with a non-empty choices list (vLLM)',
        ttft_first_text_ms: summarize(num(recs.map((r) => r.ttftFirstTextMs))),
        ttft_first_choices_ms: summarize(num(recs.map((r) => r.ttftFirstChoicesMs))),
        tokens_per_chunk: summarize(perChunk),
        tokens_per_chunk_histogram: histogram,
        tokens_per_chunk_from: [...new Set(recs.map((r) => r.chunkCounts))],
        // Tokenizer's per-chunk sum minus the server's usage total, per request counted by the tokenizer.
        tokenizer_count_minus_usage: summarize(countDiffs),
        submit_to_sent_ms: summarize(recs.map((r) => r.submitToSentMs)),
        prompt_tokens: {
          isl: st.isl,
          server_overhead_tokens: st.overheadTokens,
          expected: summarize(recs.map((r) => r.promptTokensExpected)),
          server: summarize(num(recs.map((r) => r.promptTokensServer))),
          mismatched: mismatched.length,
          unchecked: recs.length - checked.length,
        },
        completion_tokens_server: summarize(num(recs.map((r) => r.completionTokensServer))),
        requests_without_usage: noUsage.length,
        requests_with_unreadable_usage: badUsage.length,
        usage_problems: usageProblems,
        finish_reasons: finish,
        metrics: { family: metricsFamily(after), columns: counters.detail, ...(before === null || after === null ? { why: beforeWhy || why } : {}) },
      };
      return { columns: counters.columns, stats: null, notes, detail };
    },
  };
}
