// The arithmetic bench:peer sets its measurements against: the bytes a decode step reads and the
// FLOPs a prompt token costs, from the tensors of the model as stored (bf16 safetensors or a GGUF of
// any type), and issue 19's targets for the quantized files, judged from the run's figures (scripts/peer-rounds.ts).
import { TENSOR_ROLES } from '../src/model/tensor-roles.js';
import type { ModelCheckpoint, TextConfig } from '../src/model/types.js';
import { MIN_JUDGED_ROUNDS, type FractionSet } from './peer-rounds.js';

const MATRIX_ROLES: ReadonlySet<string> = new Set(TENSOR_ROLES.filter((r) => r.kind === 'matrix').map((r) => r.role));

/**
 * One line for the output and the docs: what a decode step is counted as reading. What it leaves
 * out (the vectors and conv taps, and the KV cache read) is small, and leaving it out makes the
 * roofline a little higher and so the fractions a little lower than the truth: how small is in
 * docs/performance.md, "The two limits (rooflines)".
 */
export const DECODE_BYTES_RULE =
  'every weight matrix once at its stored size (layers + head; a tied embedding once, as the head; ' +
  'the embedding lookup is one row and not counted) + the DeltaNet recurrent state read and written (f32); ' +
  'left out, so the fractions are slightly conservative: the vectors (norms, the DeltaNet gates\' dt_bias and A), ' +
  'the conv taps (F32 in a GGUF) and the KV cache read';

/** One line: what a prompt token is counted as costing. */
export const PREFILL_FLOPS_RULE =
  '2 FLOPs per weight of the layers\' matrices (not the embedding or the head: only the last prompt token ' +
  'reaches the head; attention and the DeltaNet core, ~5 % at 512 tokens, are left out)';

export interface StepBytes {
  /** Stored bytes of the matrices a step reads (layers + head). */
  matrixBytes: number;
  /** The recurrent state read and written, f32. */
  stateBytes: number;
  total: number;
}

/**
 * Bytes of the Gated DeltaNet state read and written once per step, f32: per linear-attention layer
 * the S matrices (value heads x key dim x value dim) and the conv window, the last
 * linearConvKernelDim - 1 inputs of every conv channel (q, k and v), as the engine keeps them
 * (native/engine/engine.cpp, `conv_rows`).
 */
export function recurrentStateBytes(c: TextConfig): number {
  const linear = c.layerTypes.filter((t) => t === 'linear_attention').length;
  const convChannels = 2 * c.linearNumKeyHeads * c.linearKeyHeadDim + c.linearNumValueHeads * c.linearValueHeadDim;
  const perLayer = c.linearNumValueHeads * c.linearKeyHeadDim * c.linearValueHeadDim + (c.linearConvKernelDim - 1) * convChannels;
  return linear * perLayer * 4 * 2;
}

const isText = (name: string) => !name.startsWith('mtp.');

/** What one decode step (one token of one sequence) reads, by DECODE_BYTES_RULE. */
export function decodeStepBytes(m: ModelCheckpoint): StepBytes {
  const tensors = [...m.tensors.values()].filter((t) => isText(t.name));
  const untied = tensors.some((t) => t.role === 'lm_head');
  let matrixBytes = 0;
  for (const t of tensors) {
    if (!MATRIX_ROLES.has(t.role)) continue;
    if (t.role === 'embed' && untied) continue;
    matrixBytes += t.nbytes;
  }
  const stateBytes = recurrentStateBytes(m.config);
  return { matrixBytes, stateBytes, total: matrixBytes + stateBytes };
}

/** FLOPs of one prompt token, by PREFILL_FLOPS_RULE. */
export function prefillFlopsPerToken(m: ModelCheckpoint): number {
  let weights = 0;
  for (const t of m.tensors.values()) {
    if (!isText(t.name) || !MATRIX_ROLES.has(t.role) || t.role === 'embed' || t.role === 'lm_head') continue;
    weights += t.shape.reduce((a, b) => a * b, 1);
  }
  return 2 * weights;
}

export interface TargetInputs {
  /** Prompt length of the prefill figure (the target is stated for 512). */
  isl: number;
  prefillRatio: number;
  decodeRatio: number;
  /** Decode c=1 against its roofline: the median over the rounds that are measurements (scripts/peer-rounds.ts). */
  decodeRoof: FractionSet;
  /** The median over the rounds of our aggregate c=8 over our c=1 of the same round. */
  c8OverC1: number;
}

export interface TargetResult {
  name: string;
  value: number;
  /** How the value prints: a ratio (×) or a percentage. */
  unit: 'x' | '%';
  threshold: number;
  /** null: not judged (too few rounds whose figure is a measurement). */
  met: boolean | null;
  note?: string;
}

/** Issue 19's speed targets for a quantized file, against this run's figures. */
export function judgeTargets(t: TargetInputs): TargetResult[] {
  const at = (name: string, value: number, unit: 'x' | '%', threshold: number, note?: string): TargetResult =>
    ({ name, value, unit, threshold, met: Number.isFinite(value) && value >= threshold, ...(note ? { note } : {}) });
  const roof = t.decodeRoof;
  const total = roof.rounds.length;
  const leftOut = roof.leftOut.length > 0
    ? `round${roof.leftOut.length > 1 ? 's' : ''} ${roof.leftOut.join(', ')} of ${total} left out (above 100 % of the roofline its probes gave: not a measurement)`
    : undefined;
  const roofTarget: TargetResult = roof.judged
    ? at('decode c=1 >= 80 % of the roofline', roof.median, '%', 0.8, leftOut)
    : {
      name: 'decode c=1 >= 80 % of the roofline', value: NaN, unit: '%', threshold: 0.8, met: null,
      note: `${roof.valid} of ${total} round${total === 1 ? '' : 's'} a measurement, fewer than ${MIN_JUDGED_ROUNDS}${leftOut ? `; ${leftOut}` : ''}`,
    };
  return [
    at('decode c=1 >= 1.3x llama.cpp', t.decodeRatio, 'x', 1.3),
    roofTarget,
    at('prefill of 512 tokens >= 2x llama.cpp', t.prefillRatio, 'x', 2,
      t.isl === 512 ? undefined : `measured at ${t.isl} tokens, not 512: not the issue's figure`),
    at('aggregate c=8 >= 5x own c=1', t.c8OverC1, 'x', 5),
  ];
}

/**
 * A target's value in the unit it is stated in, with as many decimals as it takes for a value below
 * the threshold not to print as the threshold (0.7996 is 79.96 %, not 80 %; 4.996 is 4.996x, not
 * 5.00x). A value at or above it never needs more: rounding keeps the order, and the thresholds
 * print exactly at the base precision. A percentage is the fraction's own decimal digits with the
 * point moved, so no multiplication by 100 rounds a value just under the line up to it.
 */
export function formatTargetValue(value: number, threshold: number, unit: 'x' | '%'): string {
  const base = unit === '%' ? 0 : 2;
  const digitsOf = (x: number, digits: number) => (unit === '%' ? percentDigits(x, digits) : x.toFixed(digits));
  let digits = base;
  if (Number.isFinite(value) && value < threshold) {
    const line = Number(digitsOf(threshold, base));
    while (digits < 20 && Number(digitsOf(value, digits)) >= line) digits++;
  }
  return unit === '%' ? `${digitsOf(value, digits)} %` : `${digitsOf(value, digits)}x`;
}

/** 100 x `x` with `digits` decimals, from x's own decimal expansion: 0.7996 at 2 digits is "79.96". */
function percentDigits(x: number, digits: number): string {
  if (!Number.isFinite(x)) return String(x);
  const fixed = Math.abs(x).toFixed(digits + 2);
  const [int, frac] = fixed.split('.') as [string, string];
  const whole = String(Number(int + frac.slice(0, 2)));
  const rest = frac.slice(2);
  return `${x < 0 && Number(fixed) !== 0 ? '-' : ''}${whole}${rest ? `.${rest}` : ''}`;
}

/** `met (1.35x)` / `NOT met (79.96 %, needs 80 %)` / `not judged`, one line per target. */
export function formatTarget(r: TargetResult): string {
  const v = (x: number) => formatTargetValue(x, r.threshold, r.unit);
  const verdict = r.met === null ? 'not judged' : r.met ? `met (${v(r.value)})` : `NOT met (${v(r.value)}, needs ${v(r.threshold)})`;
  return `${r.name}: ${verdict}${r.note ? `; ${r.note}` : ''}`;
}
