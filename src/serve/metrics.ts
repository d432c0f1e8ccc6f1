// GET /metrics (Prometheus text, prom-client): the figures the sweep reports, from the same native
// counters and timestamps. Gauges are read from the engine's stats() at scrape time; per-request
// figures (TTFT, inter-token gaps, end-to-end) come from each finished request's native token times,
// computed by the sweep's own functions (src/bench/metrics.ts).
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { e2eMs, ttftOf } from '../bench/metrics.js';
import type { EngineStats, RequestResult } from '../engine/types.js';

const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];
const E2E_BUCKETS = [0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960];

export interface MetricsSource {
  stats(): EngineStats;
  /** Requests submitted to the engine and not finished. */
  inFlight(): number;
}

export class ServeMetrics {
  readonly registry = new Registry();
  private readonly promptTokens: Counter;
  private readonly generationTokens: Counter;
  private readonly requests: Counter<'finished_reason'>;
  private readonly ttft: Histogram;
  private readonly itl: Histogram;
  private readonly e2e: Histogram;

  constructor(source: MetricsSource, modelName: string) {
    const r = this.registry;
    r.setDefaultLabels({ model_name: modelName });
    // running = sequences holding a recurrent-state slot (prefill or decode); waiting = the rest of
    // what was submitted (parked inside the engine until a slot and KV blocks free up).
    const running = () => {
      const s = source.stats();
      return Math.min(source.inFlight(), s.stateSlotsTotal - s.stateSlotsFree);
    };
    new Gauge({
      name: 'lumen:num_requests_running', help: 'Requests running in the engine (holding a sequence slot).', registers: [r],
      collect() { this.set(running()); },
    });
    new Gauge({
      name: 'lumen:num_requests_waiting', help: 'Requests submitted and waiting for a sequence slot or KV blocks.', registers: [r],
      collect() { this.set(Math.max(0, source.inFlight() - running())); },
    });
    new Gauge({
      name: 'lumen:kv_cache_blocks_used', help: 'KV blocks in use (sequences and the prefix cache).', registers: [r],
      collect() { this.set(source.stats().kvBlocksUsed); },
    });
    new Gauge({
      name: 'lumen:kv_cache_blocks_total', help: 'KV blocks in the pool.', registers: [r],
      collect() { this.set(source.stats().kvBlocksTotal); },
    });
    new Gauge({
      name: 'lumen:kv_cache_usage_perc', help: 'Fraction of the KV block pool in use (1 = full).', registers: [r],
      collect() {
        const s = source.stats();
        this.set(s.kvBlocksTotal > 0 ? s.kvBlocksUsed / s.kvBlocksTotal : 0);
      },
    });
    new Counter({
      name: 'lumen:prefix_cache_hit_tokens_total', help: 'Prompt tokens served from the prefix cache (native counter).', registers: [r],
      collect() {
        this.reset();
        this.inc(source.stats().prefixHitTokens);
      },
    });
    new Counter({
      name: 'lumen:num_preemptions_total', help: 'Sequences preempted (KV pool full) and recomputed later.', registers: [r],
      collect() {
        this.reset();
        this.inc(source.stats().preemptions);
      },
    });
    // The engine's own counters, so a benchmark client (`bench --endpoint`) can fill the sweep's engine
    // columns from two scrapes around a row: increases of the counters, and the high-water mark.
    const engineCounter = (name: string, help: string, read: (s: EngineStats) => number) => new Counter({
      name, help, registers: [r],
      collect() {
        this.reset();
        this.inc(read(source.stats()));
      },
    });
    engineCounter('lumen:prefix_admitted_tokens_total', 'Prompt tokens admitted into the prefix cache (native counter).', (s) => s.prefixAdmittedTokens);
    engineCounter('lumen:retires_total', 'Sequences retired by the engine (native counter).', (s) => s.retires);
    engineCounter('lumen:num_allocs_total', 'KV-block and recurrent-state allocations (native counter).', (s) => s.numAllocs);
    engineCounter('lumen:num_park_waits_total', 'Times a request waited for a sequence slot or KV blocks (native counter).', (s) => s.parkWaits);
    new Gauge({
      name: 'lumen:peak_active_bytes', help: 'High-water mark of workspace + the KV blocks and states running requests hold (not what only the prefix cache holds) since the engine loaded.', registers: [r],
      collect() { this.set(source.stats().peakActiveBytes); },
    });
    new Gauge({
      name: 'lumen:active_bytes', help: 'Workspace + the KV blocks and states running requests hold now.', registers: [r],
      collect() { this.set(source.stats().activeBytes); },
    });
    this.promptTokens = new Counter({ name: 'lumen:prompt_tokens_total', help: 'Prompt tokens of finished requests.', registers: [r] });
    this.generationTokens = new Counter({ name: 'lumen:generation_tokens_total', help: 'Tokens generated by finished requests.', registers: [r] });
    this.requests = new Counter({
      name: 'lumen:request_success_total', help: 'Finished requests by finish reason.', labelNames: ['finished_reason'], registers: [r],
    });
    this.ttft = new Histogram({
      name: 'lumen:time_to_first_token_seconds', help: 'Enqueue to first token (native clock).', buckets: TTFT_BUCKETS, registers: [r],
    });
    this.itl = new Histogram({
      name: 'lumen:inter_token_latency_seconds', help: 'Gap between consecutive tokens of a request (native clock).', buckets: ITL_BUCKETS, registers: [r],
    });
    this.e2e = new Histogram({
      name: 'lumen:e2e_request_latency_seconds', help: 'Enqueue to last token (native clock).', buckets: E2E_BUCKETS, registers: [r],
    });
  }

  /**
   * A finished request. `outputTokens`: the tokens it returned (a stop string ends it before the
   * engine's last token); `reason`: the API's finish reason.
   */
  record(result: RequestResult, outputTokens: number, reason: string): void {
    this.promptTokens.inc(result.promptTokens);
    this.generationTokens.inc(outputTokens);
    this.requests.inc({ finished_reason: reason });
    const times = result.tokenMs.length > outputTokens ? { ...result, tokenMs: result.tokenMs.slice(0, outputTokens) } : result;
    const t = ttftOf(times);
    if (t !== null) this.ttft.observe(t / 1000);
    for (let k = 1; k < times.tokenMs.length; k++) this.itl.observe((times.tokenMs[k]! - times.tokenMs[k - 1]!) / 1000);
    const e = e2eMs(times);
    if (e !== null) this.e2e.observe(e / 1000);
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
