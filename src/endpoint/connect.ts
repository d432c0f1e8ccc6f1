// The endpoint sweep's "model load": reach the server, pick the model (--model or the first id of
// /v1/models), read what the server says of itself, settle the tokenizer (--tokenizer DIR or the
// server's /tokenize; neither is a usage error; a /tokenize that fails is the server's failure),
// measure the tokens the server adds to every prompt (one probe request), and see which /metrics
// family it exports. An unreachable or broken server is a load failure (every row an error row,
// exit 3), as a model that fails to load is. Credentials in the URL are a usage error.
import type { SweepConfig } from '../bench/sweep-config.js';
import type { EndpointConnection } from '../bench/sweep.js';
import { endpointProbe } from './endpoint-probe.js';
import { CheckpointError } from '../model/types.js';
import { isJsonObject } from '../util/json.js';
import { UsageError } from '../util/usage-error.js';
import { API_PATHS, errorText, usageOf } from './completion-stream.js';
import { EndpointEngine } from './endpoint-engine.js';
import { HttpFailure, HttpPool } from './http-pool.js';
import { metricsFamily, scrapeMetrics, type MetricsFamily } from './server-metrics.js';
import { localTokenizer, serverTokenizer, type TextTokenizer } from './text-tokenizer.js';

/** What the server says of itself, for the header and the report's provenance. */
export interface ServerIdentity {
  url: string;
  api: 'chat' | 'completions';
  model: string;
  /** GET /v1/models, as served. */
  models: unknown;
  /** A one-line description: the server's name and version where it exposes them. */
  server: string;
  /** The raw answers of the version endpoints that answered (/version, /props, /get_server_info). */
  self: Record<string, unknown>;
  tokenizer: string;
  /** Prompt tokens the server adds to the text's (chat template, BOS), from the probe request's usage; null unknown. */
  overhead_tokens: number | null;
  metrics: MetricsFamily;
  max_model_len: number | null;
}


const SMALL_TIMEOUT_MS = 10_000;

function describeServer(self: Record<string, unknown>, owner: string | null): string {
  const v = self['/version'] as { version?: unknown; server?: unknown } | undefined;
  const props = self['/props'] as { build_info?: unknown; model_path?: unknown } | undefined;
  const sg = self['/get_server_info'] as { version?: unknown } | undefined;
  if (props && typeof props.build_info === 'string') return `llama.cpp server (${props.build_info})`;
  if (sg && typeof sg.version === 'string') return `SGLang ${sg.version}`;
  if (v && typeof v.version === 'string' && typeof v.server === 'string') return `${v.server} ${v.version}`;
  if (v && typeof v.version === 'string') return owner === 'vllm' ? `vLLM ${v.version}` : `version ${v.version}${owner ? ` (models owned by ${owner})` : ''}`;
  return owner ? `models owned by ${owner}; no version endpoint` : 'no version endpoint';
}

/** The checks at connection (/v1/models, /tokenize) wait at most this long, or --timeout-s when shorter. */
export const SETUP_TIMEOUT_MS = 30_000;

export function setupLimits(timeoutMs: number): { timeoutMs: number; timeoutSource: string } {
  return timeoutMs <= SETUP_TIMEOUT_MS
    ? { timeoutMs, timeoutSource: '--timeout-s' }
    : { timeoutMs: SETUP_TIMEOUT_MS, timeoutSource: `the connection checks wait at most ${SETUP_TIMEOUT_MS / 1000} s` };
}

export async function connectEndpoint(cfg: SweepConfig, env: NodeJS.ProcessEnv): Promise<EndpointConnection> {
  const ep = cfg.endpoint!;
  const timeoutMs = ep.timeoutS * 1000;
  const apiKey = ep.apiKeyEnv ? env[ep.apiKeyEnv] ?? null : null;
  const pool = new HttpPool(ep.url, { apiKey });
  const notes: string[] = [];
  const failed = (why: string): EndpointConnection => {
    pool.close();
    return {
      engine: null, loadError: why, notes, header: null, provenance: { url: ep.url, api: ep.api, model: ep.model, error: why },
      vocab: 1, maxSeq: null, probe: () => { throw new Error('internal: no endpoint'); },
    };
  };

  let models: unknown;
  try {
    const r = await pool.json('GET', '/v1/models', undefined, setupLimits(timeoutMs));
    if (r.status !== 200) return failed(`endpoint ${ep.url}: GET /v1/models answered HTTP ${r.status}: ${errorText(r.text, r.json)}`);
    models = r.json;
  } catch (err) {
    // A response refused (too large, malformed) came from a server that was reached.
    const reached = err instanceof HttpFailure && err.kind === 'protocol';
    return failed(`endpoint ${ep.url}${reached ? ':' : ' unreachable:'} ${err instanceof Error ? err.message : String(err)}`);
  }
  const data = (models as { data?: unknown } | null)?.data;
  // Entries that are not objects (`data: [null]`) name no model: skipped.
  const list = Array.isArray(data)
    ? (data.filter(isJsonObject) as { id?: unknown; owned_by?: unknown; max_model_len?: unknown }[])
    : [];
  const ids = list.map((m) => m.id).filter((x): x is string => typeof x === 'string');
  const model = ep.model ?? ids[0];
  if (model === undefined) {
    // What the server answered, so a broken /v1/models (an HTML page, a proxy's error) is not taken for an empty list.
    const what = models === null ? 'answered with a body that is not JSON' : !Array.isArray(data) ? 'answered without a data list' : 'lists no model';
    return failed(`endpoint ${ep.url}: GET /v1/models ${what} (give --model)`);
  }
  if (ep.model !== null && ids.length && !ids.includes(ep.model)) notes.push(`--model ${ep.model} is not among the served models (${ids.join(', ')})`);
  const entry = list.find((m) => m.id === model);
  const maxLen = typeof entry?.max_model_len === 'number' ? entry.max_model_len : null;

  const self: Record<string, unknown> = {};
  for (const p of ['/version', '/props', '/get_server_info']) {
    try {
      const r = await pool.json('GET', p, undefined, { timeoutMs: SMALL_TIMEOUT_MS });
      if (r.status === 200 && r.json !== null && typeof r.json === 'object') self[p] = r.json;
    } catch { /* not offered */ }
  }
  const server = describeServer(self, typeof entry?.owned_by === 'string' ? entry.owned_by : null);

  let tokenizer: TextTokenizer;
  if (ep.tokenizer !== null) {
    try {
      tokenizer = await localTokenizer(ep.tokenizer);
    } catch (err) {
      pool.close();
      if (err instanceof CheckpointError) throw new UsageError(`--tokenizer: ${err.message}`);
      throw err;
    }
  } else {
    const t = await serverTokenizer(pool, model, setupLimits(timeoutMs));
    if (t.tok === null && t.unavailable === 'failed') {
      // The server has a /tokenize and it failed (5xx, no answer in time): the server's failure, not a missing flag.
      return failed(`endpoint ${ep.url}: the server's ${t.route} failed (${t.why}); ` +
        "--tokenizer DIR (the directory of the model's tokenizer.json) sizes prompts without it");
    }
    if (t.tok === null) {
      pool.close();
      // A model the server does not list is the likelier cause (vLLM's /tokenize 404s on it).
      if (ep.model !== null && ids.length && !ids.includes(ep.model)) {
        throw new UsageError(`--model ${ep.model}: the server at ${ep.url} serves ${ids.join(', ')} (and its /tokenize refused this one: ${t.why})`);
      }
      throw new UsageError(`--tokenizer: required: the server at ${ep.url} has no usable ${t.route} (${t.why}); ` +
        "give --tokenizer DIR (the directory of the model's tokenizer.json)");
    }
    tokenizer = t.tok;
  }

  // The probe: a one-token request whose usage says how many tokens the server counts for a known text.
  const probeText = 'Hello';
  let overhead: number | null = null;
  try {
    const own = (await tokenizer.encode(probeText)).length;
    const body = ep.api === 'chat'
      ? { model, messages: [{ role: 'user', content: probeText }], max_tokens: 1, temperature: 0 }
      : { model, prompt: probeText, max_tokens: 1, temperature: 0 };
    const r = await pool.json('POST', API_PATHS[ep.api], body, { timeoutMs });
    if (r.status !== 200) return failed(`endpoint ${ep.url}: the probe request (POST ${API_PATHS[ep.api]}) answered HTTP ${r.status}: ${errorText(r.text, r.json)}`);
    const u = usageOf((r.json as { usage?: unknown } | null)?.usage);
    if (u?.prompt_tokens !== null && u?.prompt_tokens !== undefined) overhead = Math.max(0, u.prompt_tokens - own);
    else {
      const about = u === null ? [] : u.problems.filter((p) => p.includes('prompt_tokens'));
      const had = u === null ? 'had no usage' : `had a usage without a readable prompt_tokens${about.length ? ` (${about.join('; ')})` : ''}`;
      notes.push(`the probe response ${had}: the tokens the server adds to each prompt are unknown (taken as 0)`);
    }
  } catch (err) {
    return failed(`endpoint ${ep.url}: the probe request failed: ${err instanceof Error ? err.message : String(err)}`);
  }

  const m = await scrapeMetrics(pool, SMALL_TIMEOUT_MS);
  const metrics = metricsFamily(m.samples);
  const identity: ServerIdentity = {
    url: ep.url, api: ep.api, model, models, server, self, tokenizer: tokenizer.source, overhead_tokens: overhead, metrics, max_model_len: maxLen,
  };
  const engine = new EndpointEngine(pool, tokenizer, { api: ep.api, model, timeoutMs });
  return {
    engine, loadError: null, notes,
    header: {
      url: ep.url, api: ep.api, model, server, tokenizer: tokenizer.source,
      overheadTokens: overhead, metrics: metrics === 'none' ? `none (${m.why})` : metrics === 'other' ? 'no lumen:* or vllm:* metrics' : `${metrics}:*`,
    },
    provenance: { ...identity, api_key_env: ep.apiKeyEnv, timeout_s: ep.timeoutS },
    vocab: tokenizer.vocab, maxSeq: maxLen,
    probe: (cell) => endpointProbe(engine, { isl: cell.isl, osl: cell.osl, seed: cfg.seed, overheadTokens: overhead ?? 0 }),
  };
}
