// Loads the compiled addon (build/Release/lumen_engine.node, built by `npm ci`).
import { createRequire } from 'node:module';
import path from 'node:path';
import { existsSync } from 'node:fs';
import { REPO_ROOT } from '../util/version.js';

export interface NativeEvent {
  type: 'token' | 'step' | 'done' | 'load' | 'loaded' | 'loadError';
  id?: number;
  token?: number;
  index?: number;
  tMs?: number;
  /** 'step': tokens generated in the step. */
  count?: number;
  /** Token events of a request with logprobs: the sampled token's logprob and the top alternatives. */
  logprob?: number;
  topIds?: number[];
  topLogprobs?: number[];
  finish?: string;
  error?: string;
  /** 'loadError': 'kv_memory' when the KV cache the options ask for cannot be had. */
  code?: string;
  /** 'done' with finish 'error': 'non_finite_logits' when the logits to pick from were not all finite. */
  errorCode?: string;
  tokens?: number[];
  tokenMs?: number[];
  enqueueMs?: number;
  doneMs?: number;
  promptTokens?: number;
  cachedPromptTokens?: number;
  prefillChunkMs?: number[];
  prefillChunksToFirst?: number;
  preemptedAfter?: number[];
  readmitMs?: number[];
  logits?: Float32Array;
  logitRows?: number;
  done?: number;
  total?: number;
}

export interface NativeEngine {
  /** `defer`: stage without waking the worker until flush() (see Engine::submit). */
  submit(req: object, defer?: boolean): number;
  flush(): void;
  allowSteps(n: number): void;
  cancel(id: number): void;
  stats(): Record<string, number>;
  resetCounters(): void;
  info(): Record<string, string | number | boolean>;
  nowMs(): number;
  takeProfile(): { name: string; group: string; calls: number; totalUs: number }[];
  /** Stops the worker and returns the events it had posted that JS has not taken yet. */
  close(): NativeEvent[];
}

export interface NativeAddon {
  cpuInfo(): {
    avx2: boolean; avx512: boolean; avx512bf16: boolean; isa: string; cudaBuilt: boolean;
    /** AMX tiles on this CPU; amxUsed: granted to this process and not switched off (LUMEN_AMX=0). */
    amx: boolean; amxUsed: boolean;
    /** CPUs this process may use (its affinity mask): what --threads 0 means. */
    usableCpus: number;
    engineLimits: { maxConvKernel: number; maxLinearHeadDim: number; maxLogitsAllBytes: number };
  };
  Engine: new (spec: object, options: object, onEvents: (events: NativeEvent[]) => void) => NativeEngine;
}

const cached = new Map<string, NativeAddon>();
/** The native interface version this code expects (kAbiVersion in native/addon/addon.cpp). */
export const ADDON_ABI = 8;

/** The native addon's file: `file`, else $LUMEN_ADDON (e.g. an AddressSanitizer build), else build/Release. */
export function addonPath(file?: string): string {
  return path.resolve(file ?? process.env.LUMEN_ADDON ?? path.join(REPO_ROOT, 'build', 'Release', 'lumen_engine.node'));
}

/** The native addon at addonPath(file). */
export function loadAddon(file?: string): NativeAddon {
  const f = addonPath(file);
  const hit = cached.get(f);
  if (hit) return hit;
  if (!existsSync(f)) {
    throw new Error(`native engine not built: ${f} is missing (run \`npm ci\` or \`npm run build:native\`)`);
  }
  const require = createRequire(import.meta.url);
  const addon = require(f) as NativeAddon;
  const abi = (addon as unknown as { abiVersion?: number }).abiVersion;
  if (abi !== ADDON_ABI) {
    throw new Error(`native engine ${f} is out of date (interface ${abi ?? 1}, this CLI needs ${ADDON_ABI}): rebuild it with \`npm run build:native\``);
  }
  cached.set(f, addon);
  return addon;
}

/** CPUs this process may use, as the engine resolves `--threads 0` (native/core/cpu_features.h). */
export function usableCpus(): number {
  return loadAddon().cpuInfo().usableCpus;
}
