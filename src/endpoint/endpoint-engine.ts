// The sweep's RequestEngine over an OpenAI-compatible server: submit() sends one streamed request
// (the prompt's text prepared beforehand, src/endpoint/endpoint-probe.ts), and its RequestResult
// carries the client's monotonic times: enqueueMs = the request sent, tokenMs from the chunks (a
// chunk of k tokens split into k gaps), tokens counted from usage. So the sweep's cells, ladder,
// warm-up, passes, prompts and figures are the same code as in-process. What the wire adds (TTFT by
// vLLM's mark, tokens per chunk, the server's prompt count, queue time) is kept per request for the probe.
import { performance } from 'node:perf_hooks';
import type { RequestEngine, RequestHandle, RequestOptions, RequestResult } from '../engine/types.js';
import { countsFromRunningUsage, reconcileCounts, tokenTimeline } from './chunk-timeline.js';
import { benchRequestBody, streamCompletion, type StreamedCompletion, type WireApi } from './completion-stream.js';
import type { HttpPool } from './http-pool.js';
import type { FittedPrompt } from './prompt-text.js';
import type { TextTokenizer } from './text-tokenizer.js';

export interface EndpointSettings {
  api: WireApi;
  model: string;
  timeoutMs: number;
}

/** What the wire said of one request, beyond the RequestResult. */
export interface WireRecord {
  /** submit() -> sent (connection wait, text lookup): client-side queue time of a closed loop. */
  submitToSentMs: number;
  /** Sent -> first chunk with non-empty `choices` (vLLM's TTFT), and -> first chunk with text (the row's TTFT). */
  ttftFirstChoicesMs: number | null;
  ttftFirstTextMs: number | null;
  tokensPerChunk: number[];
  /** Where tokens per chunk came from. */
  chunkCounts: 'continuous_usage_stats' | 'tokenizer' | 'one per chunk (usage total = chunks)' | 'none';
  /**
   * Counted by the tokenizer with a usage total: the tokenizer's per-chunk counts summed, before they
   * were reconciled with the total (the difference spread over the chunks); null otherwise.
   */
  tokenizerChunkSum: number | null;
  /** The server's usage counts (null: it sent no usage, or the count could not be read). */
  promptTokensServer: number | null;
  completionTokensServer: number | null;
  /** The server sent a usage object at all. */
  usageSent: boolean;
  /** What in the usage could not be read (`completion_tokens "64" (a string)`), or null. */
  usageProblems: string[];
  /** Tokens the prompt's text encodes to by the benchmark's tokenizer (chat: content + template overhead). */
  promptTokensExpected: number;
  promptExact: boolean;
  finishReasonServer: string | null;
}

/** Token ids of a prompt -> its key in the prepared table. */
export function promptKey(ids: ArrayLike<number>): string {
  return Array.prototype.join.call(ids, ',');
}

export interface PreparedPrompt extends FittedPrompt {
  /** Tokens the server should count (chat: the text's tokens + the template's overhead). */
  expectedPromptTokens: number;
}


/** Token times (and a token count: the ids are not on the wire, text is, so they are -1) from per-chunk counts. */
function applyCounts(result: RequestResult, record: WireRecord, chunks: StreamedCompletion['chunks'], counts: readonly number[]): void {
  const tl = tokenTimeline(chunks, counts);
  record.tokensPerChunk = tl.tokensPerChunk;
  result.tokenMs = tl.tokenMs;
  result.tokens = new Array<number>(tl.tokenMs.length).fill(-1);
}

/** No counters or load facts here: the server's counters come from its /metrics (the row probe). */
export class EndpointEngine implements RequestEngine {
  /** Not the server's: an endpoint's own description is in the report's `endpoint` section. */
  /** Prompt text by prompt key, filled before each row. */
  readonly prepared = new Map<string, PreparedPrompt>();
  readonly records = new Map<number, WireRecord>();
  /**
   * Requests whose tokens per chunk the tokenizer must count (the server sent no continuous usage and
   * its total differs from the chunk count). Counting is an HTTP call per chunk when the tokenizer is
   * the server's /tokenize, so it waits for countChunks() after the row's last request instead of
   * delaying a closed-loop session's next request; meanwhile the result carries provisional counts
   * (one per text chunk, reconciled with the usage total), so its token count is already final.
   */
  private readonly uncounted = new Map<number, { result: RequestResult; chunks: StreamedCompletion['chunks']; total: number | null; record: WireRecord }>();
  private readonly listeners = new Set<(n: number) => void>();
  private nextId = 1;

  constructor(
    readonly pool: HttpPool,
    readonly tokenizer: TextTokenizer,
    readonly settings: EndpointSettings,
  ) {}

  submit(req: RequestOptions): RequestHandle {
    const id = this.nextId++;
    const submitMs = performance.now();
    const prompt = this.prepared.get(promptKey(req.prompt));
    if (prompt === undefined) throw new Error('internal: a prompt reached the endpoint without its text prepared');
    const abort = new AbortController();
    const body = benchRequestBody(this.settings.api, this.settings.model, prompt.text, req.maxTokens);
    let seen = 0;
    const done = (async (): Promise<RequestResult> => {
      const s = await streamCompletion(this.pool, this.settings.api, body, this.settings.timeoutMs, abort.signal, (c) => {
        // Progress: tokens so far (continuous usage) or one per chunk.
        const n = c.runningCompletion !== null ? Math.max(0, c.runningCompletion - seen) : (c.text !== '' ? 1 : 0);
        seen += n;
        if (n > 0) for (const l of this.listeners) l(n);
      });
      return this.toResult(id, submitMs, prompt, s);
    })();
    return { id, done, cancel: () => abort.abort() };
  }

  private toResult(id: number, submitMs: number, prompt: PreparedPrompt, s: StreamedCompletion): RequestResult {
    const base = {
      id, promptTokens: s.usage?.prompt_tokens ?? prompt.expectedPromptTokens, enqueueMs: s.sentMs, prefillChunkMs: [] as number[],
      cachedPromptTokens: s.usage?.cached_tokens ?? 0,
    };
    const record: WireRecord = {
      submitToSentMs: s.sentMs - submitMs,
      ttftFirstChoicesMs: s.firstChoicesMs !== null ? s.firstChoicesMs - s.sentMs : null,
      ttftFirstTextMs: s.firstTextMs !== null ? s.firstTextMs - s.sentMs : null,
      tokensPerChunk: [], chunkCounts: 'none', tokenizerChunkSum: null,
      promptTokensServer: s.usage?.prompt_tokens ?? null,
      completionTokensServer: s.usage?.completion_tokens ?? null,
      usageSent: s.usage !== null, usageProblems: s.usage?.problems ?? [],
      promptTokensExpected: prompt.expectedPromptTokens, promptExact: prompt.exact,
      finishReasonServer: s.finishReason,
    };
    this.records.set(id, record);
    if (s.cancelled) return { ...base, tokens: [], tokenMs: [], finishReason: 'cancelled' };
    if (s.error !== null) return { ...base, tokens: [], tokenMs: [], finishReason: 'error', error: s.error };

    let counts = countsFromRunningUsage(s.chunks);
    const total = s.usage?.completion_tokens ?? null;
    let deferred = false;
    if (counts !== null) record.chunkCounts = 'continuous_usage_stats';
    else {
      const ones = s.chunks.map((c): number => (c.text !== '' ? 1 : 0));
      if (total !== null && total === ones.reduce((a, b) => a + b, 0)) {
        counts = ones;
        record.chunkCounts = 'one per chunk (usage total = chunks)';
      } else {
        counts = total !== null ? reconcileCounts(ones, total) : ones;
        record.chunkCounts = 'tokenizer';
        deferred = true;
      }
    }
    const result: RequestResult = { ...base, tokens: [], tokenMs: [], finishReason: 'length' };
    applyCounts(result, record, s.chunks, counts);
    if (deferred) this.uncounted.set(id, { result, chunks: s.chunks, total, record });
    if (s.finishReason !== null && s.finishReason !== 'length' && s.finishReason !== 'stop') {
      result.finishReason = 'error';
      result.error = `the server ended the stream with finish_reason '${s.finishReason}'`;
    } else {
      result.finishReason = s.finishReason === 'stop' ? 'stop' : 'length';
    }
    return result;
  }

  /**
   * Counts the tokens of each chunk of these requests with the tokenizer, where the wire did not say
   * them, and rewrites their token times (and, without a usage total, their token counts); then
   * forgets every request still waiting (warm-up requests are never counted).
   */
  async countChunks(ids: readonly number[], parallel = 8): Promise<void> {
    const todo = ids.map((id) => this.uncounted.get(id)).filter((u) => u !== undefined);
    this.uncounted.clear();
    const worker = async () => {
      for (let u = todo.shift(); u !== undefined; u = todo.shift()) {
        let counts: number[] = [];
        for (const c of u.chunks) counts.push(c.text === '' ? 0 : (await this.tokenizer.encode(c.text)).length);
        if (u.total !== null) {
          u.record.tokenizerChunkSum = counts.reduce((a, b) => a + b, 0);
          counts = reconcileCounts(counts, u.total);
        }
        applyCounts(u.result, u.record, u.chunks, counts);
      }
    };
    await Promise.all(Array.from({ length: parallel }, worker));
  }

  /** Forgets the wire records and uncounted requests (before a row's requests). */
  clearRecords(): void {
    this.records.clear();
    this.uncounted.clear();
  }

  onStep(listener: (tokens: number) => void): () => void {
    this.listeners.add(listener);
    return () => { this.listeners.delete(listener); };
  }

  nowMs(): number {
    return performance.now();
  }

  takeProfile(): null {
    return null;
  }

  async close(): Promise<void> {
    this.pool.close();
  }
}
