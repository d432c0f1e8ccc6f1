// The JSON report (--format json on stdout, PREFIX.json on disk): everything needed to trust or redo a run.
import type { EngineInfo, EngineOptions, EngineStats, ProfileReport } from '../engine/types.js';
import type { ModelCheckpoint } from '../model/types.js';
import { weightFormatJson, weightsFormatName, weightsPath, type WeightFormatJson } from '../model/weight-format.js';
import type { GitInfo } from '../util/git.js';
import type { GpuInfo, MachineInfo } from '../util/machine.js';
import type { SweepRow } from './csv.js';
import type { LoadFigures } from './load-figures.js';
import type { RowFigures } from './metrics.js';
import type { RowSamples } from './row-samples.js';
import type { SweepConfig } from './sweep-config.js';
import { kvPoolFacts } from './render.js';

export const REPORT_SCHEMA_VERSION = 1;

/** The peer tool's latency block, for one row. */
export interface LatencyBlock {
  isl: number;
  osl: number;
  concurrency: number;
  prompt_tokens: number;
  /** Mean over timed requests of the sum of the prefill step walls each took part in. */
  prefill_time_ms: number | null;
  prefill_tokens_per_sec: number | null;
  time_to_first_token_ms: number | null;
  mean_inter_token_ms: number | null;
  p50_inter_token_ms: number | null;
  p99_inter_token_ms: number | null;
  /** Tokens generated per timed request (mean; osl when every request ran to length). */
  num_tokens_generated: number;
  decode_tokens_per_sec: number | null;
  spec_method: 'off';
}

export interface ReportRow extends SweepRow {
  distributions: RowFigures['distributions'] | null;
  /** Per timed request: its pass and its own TTFT, decode rate and ITL p50/p99 (the noise floor of `bench compare`). */
  samples: RowSamples | null;
  latency: LatencyBlock | null;
  timed_requests: number;
  generated_tokens: number | null;
  decode_tokens: number | null;
  decode_window_ms: number | null;
  timed_wall_ms: number | null;
  itl_excluded_gaps: number | null;
  cached_prompt_tokens: number | null;
  /** Every engine counter over the timed passes. */
  counters: EngineStats | null;
  profile: ProfileReport | null;
  /** Share of the machine's CPU other processes used while the row ran (Linux /proc/stat; null elsewhere). */
  cpu_other_share: number | null;
  /** TPOT, client-side queue time, achieved vs requested concurrency, goodput (ok rows). */
  load: LoadFigures | null;
  /** An endpoint row: the wire figures (TTFT by vLLM's mark, tokens per chunk, prompt-length checks, /metrics). */
  endpoint: Record<string, unknown> | null;
}

export interface ModelSection {
  /** The checkpoint directory or GGUF file; `synthetic:<preset>` for synthetic weights. */
  path: string;
  embedded: boolean;
  /** Random weights the engine generated in memory (`--model-path synthetic:<preset>`): weight_format says which. */
  synthetic: boolean;
  architecture: string;
  param_count: number;
  dtype: string;
  bytes_on_disk: number;
  shards: number;
  config_sha256: string;
  num_layers: number;
  hidden_size: number;
  vocab_size: number;
  /** The positions the model was built for (max_position_embeddings; a GGUF's qwen35.context_length): --max-seq's bound. */
  max_position_embeddings: number;
  /** How the weights are stored: GGUF quantization, bits per weight, tensors per type, content hash. */
  weight_format: WeightFormatJson;
}

/**
 * The row whose single-request latency the summary and the report's `latency` show: the first ok
 * concurrency-1 row that decodes (osl > 1: inter-token gaps to show), else the first ok concurrency-1 row.
 */
export function latencyRow<R extends { status: string; concurrency: number; osl: number; latency: unknown }>(rows: readonly R[]): R | undefined {
  const c1 = rows.filter((r) => r.status === 'ok' && r.concurrency === 1 && r.latency !== null && r.latency !== undefined);
  return c1.find((r) => r.osl > 1) ?? c1[0];
}

export function latencyBlock(row: SweepRow, fig: RowFigures): LatencyBlock {
  const prefillMs = fig.distributions.prefill_ms.mean;
  const n = fig.distributions.ttft_ms.n;
  return {
    isl: row.isl,
    osl: row.osl,
    concurrency: row.concurrency,
    prompt_tokens: row.isl,
    prefill_time_ms: prefillMs,
    prefill_tokens_per_sec: prefillMs !== null && prefillMs > 0 ? (row.isl * 1000) / prefillMs : null,
    time_to_first_token_ms: row.ttft_ms,
    mean_inter_token_ms: fig.distributions.itl_ms.mean,
    p50_inter_token_ms: fig.distributions.itl_ms.p50,
    p99_inter_token_ms: fig.distributions.itl_ms.p99,
    num_tokens_generated: n > 0 ? fig.generatedTokens / n : 0,
    decode_tokens_per_sec: row.decode_tok_s,
    spec_method: 'off',
  };
}

export function modelSection(ckpt: ModelCheckpoint, embedded: boolean): ModelSection {
  return {
    path: weightsPath(ckpt),
    embedded,
    synthetic: ckpt.syntheticWeights !== undefined,
    architecture: 'qwen3_5',
    param_count: ckpt.paramCount,
    dtype: weightsFormatName(ckpt),
    bytes_on_disk: ckpt.bytesOnDisk,
    shards: ckpt.shards.length,
    config_sha256: ckpt.configHash,
    num_layers: ckpt.config.numLayers,
    hidden_size: ckpt.config.hiddenSize,
    vocab_size: ckpt.config.vocabSize,
    max_position_embeddings: ckpt.config.maxPositionEmbeddings,
    weight_format: weightFormatJson(ckpt),
  };
}

export interface ReportContext {
  toolVersion: string;
  git: GitInfo | null;
  argv: string[];
  machine: MachineInfo;
  gpus: GpuInfo[];
  config: SweepConfig;
  startedAt: string;
}

export type ReportStatus = 'running' | 'complete' | 'interrupted' | 'load_failed';

/** Holds what is known so far; toJSON() renders the current state (rewritten after every row). */
export class Report {
  model: ModelSection | null = null;
  engine: (EngineInfo & { options: EngineOptions }) | null = null;
  /** Checkpoint parse then engine load (weights bound), on the process's monotonic clock. */
  modelLoad: { checkpoint_ms: number; engine_ms: number; weight_bytes: number } | null = null;
  rows: ReportRow[] = [];
  status: ReportStatus = 'running';
  finishedAt: string | null = null;
  exitCode: number | null = null;
  notes: string[] = [];
  /** --endpoint: the server, its model and what it says of itself (src/endpoint/connect.ts). */
  endpoint: Record<string, unknown> | null = null;

  constructor(private readonly ctx: ReportContext) {}

  toJSON(): Record<string, unknown> {
    const { ctx } = this;
    const cfg = ctx.config;
    const c1 = latencyRow(this.rows);
    const gpu = this.engine?.backend === 'cuda' ? ctx.gpus : [];
    return {
      schema_version: REPORT_SCHEMA_VERSION,
      tool: { name: 'lumen-bench', version: ctx.toolVersion, git_commit: ctx.git?.commit ?? null, git_dirty: ctx.git?.dirty ?? null },
      command_line: { argv: ctx.argv, shell: ctx.argv.map(shellQuote).join(' '), cwd: process.cwd() },
      status: this.status,
      exit_code: this.exitCode,
      started_at: ctx.startedAt,
      finished_at: this.finishedAt,
      machine: {
        cpu_model: ctx.machine.cpuModel,
        logical_cores: ctx.machine.logicalCores,
        physical_cores: ctx.machine.physicalCores,
        memory_bytes: ctx.machine.memoryBytes,
        os: ctx.machine.os,
        arch: ctx.machine.arch,
        node: ctx.machine.node,
        gpus: gpu.map((g) => ({ name: g.name, driver: g.driver, memory_mb: g.memoryMb, source: g.source })),
      },
      engine: this.engine && {
        backend: this.engine.backend,
        isa: this.engine.isa,
        threads: this.engine.threads,
        dtype: this.engine.dtype,
        kvcache: this.engine.options.kvcache,
        // What the engine says it built, not what was asked (an addon without the choice keeps f32).
        kv_cache_dtype: this.engine.kvCacheDtype,
        block_size: this.engine.blockSize,
        kv_blocks_total: this.engine.kvBlocksTotal,
        kv_pool: kvPoolFacts(this.engine),
        kv_memory: this.engine.options.kvMemoryBytes !== undefined
          ? { bytes: this.engine.options.kvMemoryBytes }
          : this.engine.options.kvMemoryFraction !== undefined ? { fraction: this.engine.options.kvMemoryFraction } : null,
        host_weights_released: this.engine.hostWeightsReleased ?? false,
        rss_before_release_bytes: this.engine.rssBeforeReleaseBytes ?? null,
        rss_after_release_bytes: this.engine.rssAfterReleaseBytes ?? null,
        max_seq: this.engine.options.maxSeq,
        max_seqs: this.engine.options.maxSeqs,
        prefill_chunk: this.engine.options.prefillChunk,
        step_token_budget: this.engine.options.stepTokenBudget,
        prefix_cache: this.engine.options.prefixCache,
        cuda_graphs: this.engine.backend === 'cuda' && this.engine.options.cudaGraphs === true,
        gpu_name: this.engine.gpuName ?? null,
        gpu_memory_bytes: this.engine.gpuMemoryBytes ?? null,
      },
      model: this.model,
      endpoint: this.endpoint,
      model_load: this.modelLoad && {
        load_time_ms: this.modelLoad.checkpoint_ms + this.modelLoad.engine_ms,
        load_time_secs: (this.modelLoad.checkpoint_ms + this.modelLoad.engine_ms) / 1000,
        checkpoint_parse_ms: this.modelLoad.checkpoint_ms,
        engine_load_ms: this.modelLoad.engine_ms,
        weight_bytes: this.modelLoad.weight_bytes,
      },
      sweep: {
        cells: cfg.cells.map((c) => `${c.isl}:${c.osl}`),
        concurrency: cfg.concurrency,
        warmup: cfg.warmup,
        iters: cfg.iters,
        prompts: cfg.prompts,
        shared_prefix: cfg.sharedPrefix,
        seed: cfg.seed,
        sampling: 'greedy, end-of-sequence ignored, max_tokens = osl',
        load: cfg.load.requestRate === null
          ? { kind: 'closed loop' }
          : {
            kind: 'open loop', request_rate: Number.isFinite(cfg.load.requestRate) ? cfg.load.requestRate : 'inf', burstiness: cfg.load.burstiness,
            num_requests: cfg.load.numRequests, arrivals: 'gamma gaps, shape = burstiness, mean 1/rate; seeded per cell (the same arrival times at every concurrency)', cap: 'concurrency',
          },
        goodput: cfg.load.goodput,
        percentile_method: 'nearest-rank',
      },
      rows: this.rows,
      latency: c1?.latency ?? null,
      training: null,
      training_note: 'lumen-bench has no training benchmark; --skip-training is accepted and changes nothing',
      notes: this.notes,
    };
  }
}

export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

