// The arithmetic bench:peer sets its measurements against: the bytes a decode step reads and the
// FLOPs a prompt token costs, from the tensors of the model as stored (bf16 safetensors or a GGUF of
// any type), and issue 19's targets for the quantized files, judged from the medians.
import { TENSOR_ROLES } from '../src/model/tensor-roles.js';
import type { ModelCheckpoint, TextConfig } from '../src/model/types.js';

const MATRIX_ROLES: ReadonlySet<string> = new Set(TENSOR_ROLES.filter((r) => r.kind === 'matrix').map((r) => r.role));

/** One line for the output and the docs: what a decode step is counted as reading. */
export const DECODE_BYTES_RULE =
  'every weight matrix once at its stored size (layers + head; a tied embedding once, as the head; ' +
  'the embedding lookup is one row and not counted; norms, biases and conv taps, < 0.1 %, are left out) ' +
  '+ the DeltaNet recurrent state read and written (f32)';

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

/** Bytes of the Gated DeltaNet state (per layer: the S matrices and the conv windows) read and written once per step. */
export function recurrentStateBytes(c: TextConfig): number {
  const linear = c.layerTypes.filter((t) => t === 'linear_attention').length;
  const perLayer = c.linearNumValueHeads * c.linearKeyHeadDim * c.linearValueHeadDim +
    3 * (2 * c.linearNumKeyHeads * c.linearKeyHeadDim + c.linearNumValueHeads * c.linearValueHeadDim);
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
  /** Median over rounds of decode c=1 / its roofline. */
  decodeRoofFraction: number;
  /** Our aggregate c=8 over our c=1. */
  c8OverC1: number;
}

export interface TargetResult {
  name: string;
  value: number;
  /** How the value prints: a ratio (×) or a percentage. */
  unit: 'x' | '%';
  threshold: number;
  met: boolean;
  note?: string;
}

/** Issue 19's speed targets for a quantized file, against this run's medians. */
export function judgeTargets(t: TargetInputs): TargetResult[] {
  const at = (name: string, value: number, unit: 'x' | '%', threshold: number, note?: string): TargetResult =>
    ({ name, value, unit, threshold, met: Number.isFinite(value) && value >= threshold, ...(note ? { note } : {}) });
  return [
    at('decode c=1 >= 1.3x llama.cpp', t.decodeRatio, 'x', 1.3),
    at('decode c=1 >= 80 % of the roofline', t.decodeRoofFraction, '%', 0.8),
    at('prefill of 512 tokens >= 2x llama.cpp', t.prefillRatio, 'x', 2,
      t.isl === 512 ? undefined : `measured at ${t.isl} tokens, not 512: not the issue's figure`),
    at('aggregate c=8 >= 5x own c=1', t.c8OverC1, 'x', 5),
  ];
}

/** `met` / `not met (1.12x < 1.3x)`, one line per target. */
export function formatTarget(r: TargetResult): string {
  const v = (x: number) => (r.unit === '%' ? `${(100 * x).toFixed(0)} %` : `${x.toFixed(2)}x`);
  const verdict = r.met ? `met (${v(r.value)})` : `NOT met (${v(r.value)}, needs ${v(r.threshold)})`;
  return `${r.name}: ${verdict}${r.note ? `; ${r.note}` : ''}`;
}
