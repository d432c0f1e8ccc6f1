// What a sweep runs: the cells, the concurrency ladder, the passes, the engine's serving options and
// the outputs, resolved from the command line by src/cli/sweep-options.ts.
import type { DeviceChoice } from '../engine/options.js';
import type { KvLayout } from '../engine/types.js';

export interface Cell {
  isl: number;
  osl: number;
}

export type PromptMode = 'unique' | 'repeat';
export type OutputFormat = 'csv' | 'json' | 'md';

export interface SweepConfig {
  /** Checkpoint directory; null = the embedded synthetic model. */
  modelPath: string | null;
  device: DeviceChoice;
  threads: number;
  cells: Cell[];
  /** Ascending, without duplicates. */
  concurrency: number[];
  sharedPrefix: number;
  prompts: PromptMode;
  warmup: number;
  iters: number;
  kvcache: KvLayout;
  blockSize: number;
  prefillChunk: number;
  stepTokenBudget: number;
  maxSeq: number;
  memoryStages: string | null;
  output: string | null;
  format: OutputFormat;
  profile: boolean;
  profilePipeline: boolean;
  seed: number;
  /** -1 quiet, 0 default, 1 info JSON logs, 2 debug JSON logs. */
  verbosity: number;
  latencyOnly: boolean;
  skipTraining: boolean;
}
