// What the engine supports, as the native addon states it: the kernels' shape limits
// (native/checkpoint/config.h; the config parser refuses a checkpoint beyond these with the config
// key's name, before a load) and the most a request for every position's logits may hold
// (native/engine/sequence.h; `bench prompt --logits-out` refuses more before a load).
import { loadAddon } from './native.js';

export interface EngineLimits {
  maxConvKernel: number;
  maxLinearHeadDim: number;
  maxLogitsAllBytes: number;
}

let cached: EngineLimits | undefined;

export function engineLimits(): EngineLimits {
  cached ??= loadAddon().cpuInfo().engineLimits;
  return cached;
}
