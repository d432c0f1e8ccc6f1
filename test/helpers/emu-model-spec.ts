// A model's config and tensor manifest, as the loader built them, in the plain-text spec that the
// CUDA emulation check reads (`native/testing/cuda_emu/run.sh gguf SPEC...`, read_spec in
// emu_check.cc), so the emulated CUDA backend loads the very tensors the engine would.
import { writeFileSync } from 'node:fs';
import type { ModelCheckpoint } from '../../src/model/types.js';

/** Writes `out`; `expect`: whether the CUDA backend must load the model or refuse it. */
export function writeEmuModelSpec(model: ModelCheckpoint, label: string, expect: 'ok' | 'refused', out: string): void {
  const c = model.config;
  const config: Record<string, string | number | boolean> = {
    hiddenSize: c.hiddenSize, numLayers: c.numLayers, intermediateSize: c.intermediateSize, numHeads: c.numHeads,
    numKvHeads: c.numKvHeads, headDim: c.headDim, linearNumKeyHeads: c.linearNumKeyHeads,
    linearNumValueHeads: c.linearNumValueHeads, linearKeyHeadDim: c.linearKeyHeadDim,
    linearValueHeadDim: c.linearValueHeadDim, linearConvKernelDim: c.linearConvKernelDim, vocabSize: c.vocabSize,
    rmsNormEps: c.rmsNormEps, ropeTheta: c.ropeTheta, partialRotaryFactor: c.partialRotaryFactor,
    tieWordEmbeddings: c.tieWordEmbeddings, linearValueHeadsTiled: c.linearValueHeadsTiled ?? false,
    layerTypes: c.layerTypes.join(','),
  };
  const lines = [`model ${label.replace(/\s+/g, '_')} ${expect}`];
  lines.push(`config ${Object.entries(config).map(([k, v]) => `${k}=${v}`).join(' ')}`);
  for (const t of model.tensors.values()) {
    if (t.name.startsWith('mtp.')) continue;  // as the engine loader leaves them out
    if (/\s/.test(t.file) || /\s/.test(t.name)) throw new Error(`emu spec: whitespace in ${t.file} / ${t.name}`);
    lines.push(`tensor ${t.name} ${t.role} ${t.layer} ${t.fold ?? 'none'} ${t.file} ${t.offset} ${t.nbytes} ${t.dtype} ${t.shape.join(',')}`);
  }
  writeFileSync(out, `${lines.join('\n')}\n`);
}
