// `bench diagnose`, start to end: find the model and what the server says of itself (/v1/models),
// probe which extra request fields it takes, then run the checks in order (behaviour, protocol,
// long-context retrieval, decode timing, greedy repeats, request isolation, batch invariance) and
// assemble the report. A server that never answers at all is an EndpointError for the caller (exit 4).
import { performance } from 'node:perf_hooks';
import { isJsonObject } from '../util/json.js';
import { TOOL_VERSION } from '../util/version.js';
import { runBehavior } from './behavior.js';
import { BEHAVIOR_CHECKS } from './checks.js';
import { TIMING_SCOPE, timedDecode, type DecodeRun } from './decode.js';
import { DiagnoseClient, EndpointError, ReplyTooLarge, type Json } from './http-client.js';
import { runBatchInvariance, runIsolation, runRepeats } from './isolation.js';
import { PROTOCOL_CHECK_IDS, runProtocol } from './protocol.js';
import { RETRIEVAL_ID, runRetrieval } from './retrieval.js';
import { assembleReport, type DiagnoseReport, type ReportParts } from './report.js';
import { CheckNotRun, errorMessage, Session, unexpectedError, type CheckResult } from './session.js';

export interface DiagnoseOptions {
  endpoint: string;
  /** Default: the first id of /v1/models. */
  model?: string;
  apiKey?: string;
  seed: number;
  timeoutMs: number;
  /** Output tokens of each decode run. */
  decodeTokens: number;
  /** Timed decode runs after the initial one. */
  decodeRuns: number;
  /** Sequential greedy repeats (k). */
  repeats: number;
  /** Concurrent requests of the isolation check (N), and distractors of the batch-invariance probe. */
  concurrency: number;
  /** Output tokens of the repeat, isolation and batch-invariance requests. */
  compareTokens: number;
  /** Filler sentences of the shared prefix in the isolation check. */
  sharedPrefixSentences: number;
  /** One line per phase as it starts (stderr). */
  onPhase?: (name: string) => void;
  /** Caps on one reply's and one stream's bytes (http-client.ts's defaults otherwise). */
  maxReplyBytes?: number;
  maxStreamBytes?: number;
}

export const DIAGNOSE_DEFAULTS = {
  seed: 0,
  timeoutS: 300,
  decodeTokens: 128,
  decodeRuns: 3,
  repeats: 3,
  concurrency: 8,
  compareTokens: 32,
  sharedPrefixSentences: 48,
};

function failedDecode(error: string): DecodeRun & { error: string } {
  return {
    text: '', usage: null, ttft_ms: null, decode_tokens_per_second: null, decode_seconds: null, decode_chunks: 0, decode_reads: null,
    decode_rate_note: 'the run failed', timing_scope: TIMING_SCOPE, finish_reason: null, chunks: 0, error,
  };
}

async function decodeRun(s: Session, tokens: number): Promise<DecodeRun & { error?: string }> {
  try {
    return await timedDecode(s, tokens);
  } catch (err) {
    return failedDecode(err instanceof CheckNotRun || err instanceof EndpointError ? err.message : unexpectedError(err));
  }
}

/**
 * The shared prefix's filler sentences: as asked, but within about a quarter of a small
 * max_model_len (a filler sentence is 15-25 tokens in common tokenizers, up to 40 in byte-level
 * ones with small vocabularies), so the isolation prompts fit any server.
 */
export function sharedPrefixFor(sentences: number, maxModelLen: number | null): number {
  if (maxModelLen === null) return sentences;
  return Math.max(1, Math.min(sentences, Math.floor(maxModelLen / 4 / 40)));
}

function notRun(id: string, why: string): CheckResult {
  return { id, pass: false, seconds: 0, response: null, error: why };
}

/** The model (given, or the first of /v1/models), its max_model_len, and the /v1/models body. */
async function discover(client: DiagnoseClient, model: string | undefined, keyGiven: boolean): Promise<{ model: string | null; maxModelLen: number | null; models: unknown; reason?: string }> {
  let r;
  try {
    r = await client.get('/v1/models'); // no answer at all: EndpointError, the caller's exit 4
  } catch (err) {
    if (!(err instanceof ReplyTooLarge)) throw err;
    return { model: null, maxModelLen: null, models: null, reason: err.message }; // an answer, but one not read: the setup failed
  }
  // Entries that are not objects (`{"data": [null]}`) are skipped, not read.
  const listed = r.status === 200 && Array.isArray((r.body as Json | null)?.data) ? (r.body as Json).data as unknown[] : [];
  const data = listed.filter(isJsonObject);
  const chosen = model ?? (typeof data[0]?.id === 'string' ? data[0].id : undefined);
  const entry = data.find((m) => m.id === chosen || m.root === chosen);
  const maxModelLen = typeof entry?.max_model_len === 'number' ? entry.max_model_len : null;
  if (chosen === undefined) {
    return {
      model: null, maxModelLen, models: r.body ?? r.text,
      reason: r.status === 200
        ? `GET /v1/models ${r.body === null ? 'answered with a body that is not JSON' : !Array.isArray((r.body as Json).data) ? 'answered without a data list' : 'lists no model'}; give --model NAME`
        : r.status === 404 ? `GET /v1/models: HTTP 404: ${errorMessage(r.body, r.text)}; is --endpoint the server's base URL (such as http://host:8000)?`
          : r.status === 401 || r.status === 403 ? `GET /v1/models: HTTP ${r.status}: ${errorMessage(r.body, r.text)}; the server refused ${keyGiven ? 'the key given with --api-key-env' : 'a request without a key: give one with --api-key-env VAR'}`
            : `GET /v1/models: HTTP ${r.status}: ${errorMessage(r.body, r.text)}; give --model NAME`,
    };
  }
  return { model: chosen, maxModelLen, models: r.body ?? r.text };
}

export async function runDiagnose(o: DiagnoseOptions): Promise<DiagnoseReport> {
  const started = new Date();
  const t0 = performance.now();
  const client = new DiagnoseClient({
    baseUrl: o.endpoint, ...(o.apiKey !== undefined ? { apiKey: o.apiKey } : {}), timeoutMs: o.timeoutMs,
    ...(o.maxReplyBytes !== undefined ? { maxReplyBytes: o.maxReplyBytes } : {}), ...(o.maxStreamBytes !== undefined ? { maxStreamBytes: o.maxStreamBytes } : {}),
  });
  const phase = (name: string) => o.onPhase?.(name);
  const found = await discover(client, o.model, o.apiKey !== undefined);
  const session = new Session(client, found.model ?? o.model ?? '');
  phase(`${client.baseUrl}: model ${session.model || '(none)'}, max_model_len ${found.maxModelLen ?? 'not given'}, seed ${o.seed}`);
  const reasons: string[] = [];
  const server: Json = { models: found.models, max_model_len: found.maxModelLen };
  let setupFailed: string | null = found.reason ?? null;
  if (setupFailed === null) {
    try {
      const probe = await session.probeExtras();
      server.request_extras = { chat_template_kwargs: probe.extras.chatTemplateKwargs, return_token_ids: probe.extras.returnTokenIds, note: probe.note };
    } catch (err) {
      setupFailed = err instanceof CheckNotRun || err instanceof EndpointError ? err.message : unexpectedError(err);
    }
  }

  let parts: Omit<ReportParts, 'baseUrl' | 'model' | 'seed' | 'toolVersion' | 'startedAt' | 'finishedAt' | 'seconds' | 'server'>;
  if (setupFailed !== null) {
    reasons.push(setupFailed);
    const why = 'not run: the setup failed'; // the setup's own error is the report's first incomplete reason
    // Every check is in the report, each saying it did not run (docs/diagnose.md, "What ran means").
    parts = {
      behavior: BEHAVIOR_CHECKS.map((c) => notRun(c.id, why)), protocol: PROTOCOL_CHECK_IDS.map((id) => notRun(id, why)),
      longContext: [notRun(RETRIEVAL_ID, why)], initialDecode: failedDecode(why),
      decodeRuns: Array.from({ length: o.decodeRuns }, () => failedDecode(why)),
      repeats: notRun('greedy-repeats', why), isolation: notRun('request-isolation', why), batchInvariance: notRun('batch-invariance', why), reasons,
    };
  } else {
    phase('behavior');
    const behavior = await runBehavior(session);
    phase('protocol');
    const protocol = await runProtocol(session);
    phase('long context');
    const longContext = [await runRetrieval(session, o.seed, found.maxModelLen)];
    phase('decode');
    const initialDecode = await decodeRun(session, o.decodeTokens);
    const decodeRuns: (DecodeRun & { error?: string })[] = [];
    for (let i = 0; i < o.decodeRuns; i++) decodeRuns.push(await decodeRun(session, o.decodeTokens));
    phase('greedy repeats');
    const repeats = await runRepeats(session, o.repeats, o.compareTokens);
    phase('request isolation');
    const isolation = await runIsolation(session, {
      seed: o.seed, requests: o.concurrency, maxTokens: o.compareTokens, prefixSentences: sharedPrefixFor(o.sharedPrefixSentences, found.maxModelLen),
    });
    phase('batch invariance');
    const batchInvariance = await runBatchInvariance(session, o.seed, Math.max(1, o.concurrency - 1), o.compareTokens);
    parts = { behavior, protocol, longContext, initialDecode, decodeRuns, repeats, isolation, batchInvariance, reasons };
  }
  if (!client.answered) throw new EndpointError(`${client.baseUrl} never answered`, 'unreachable');
  return assembleReport({
    ...parts,
    baseUrl: client.baseUrl, model: session.model, seed: o.seed, toolVersion: TOOL_VERSION,
    startedAt: started.toISOString(), finishedAt: new Date().toISOString(), seconds: (performance.now() - t0) / 1000, server,
  });
}
