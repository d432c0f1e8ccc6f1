// What the engine's kernels support, as the native addon states it (native/checkpoint/config.h):
// the config parser refuses a checkpoint beyond these with the config key's name, before a load.
import { loadAddon } from './native.js';

export interface EngineLimits {
  maxConvKernel: number;
  maxLinearHeadDim: number;
}

let cached: EngineLimits | undefined;

export function engineLimits(): EngineLimits {
  cached ??= loadAddon().cpuInfo().engineLimits;
  return cached;
}
