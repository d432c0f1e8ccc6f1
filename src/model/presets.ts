// Model-size presets: the real Qwen3.5 text shapes (0.8B..9B) and a `tiny` test model.

import { deriveLayerTypes } from './config.js';
import type { TextConfig } from './types.js';

export const PRESET_NAMES = ['tiny', '0.8b', '2b', '4b', '9b'] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

export function isPresetName(s: string): s is PresetName {
  return (PRESET_NAMES as readonly string[]).includes(s);
}

/** Padded embedding rows of every Qwen3.5 size (tokenizer ids stop at 248076). */
export const QWEN35_VOCAB_SIZE = 248320;

function common(): Omit<TextConfig, 'hiddenSize' | 'numLayers' | 'intermediateSize' | 'numHeads' | 'numKvHeads' |
  'linearNumKeyHeads' | 'linearNumValueHeads' | 'layerTypes' | 'tieWordEmbeddings'> {
  return {
    headDim: 256,
    linearKeyHeadDim: 128,
    linearValueHeadDim: 128,
    linearConvKernelDim: 4,
    vocabSize: QWEN35_VOCAB_SIZE,
    rmsNormEps: 1e-6,
    ropeTheta: 1e7,
    partialRotaryFactor: 0.25,
    mropeSection: [11, 11, 10],
    eosTokenId: 248044,
    maxPositionEmbeddings: 262144,
    mtpNumHiddenLayers: 1,
  };
}

function make(p: {
  hidden: number; layers: number; inter: number; heads: number; kv: number; nk: number; nv: number; tied: boolean;
}): TextConfig {
  return {
    ...common(),
    hiddenSize: p.hidden,
    numLayers: p.layers,
    intermediateSize: p.inter,
    numHeads: p.heads,
    numKvHeads: p.kv,
    linearNumKeyHeads: p.nk,
    linearNumValueHeads: p.nv,
    layerTypes: deriveLayerTypes(p.layers),
    tieWordEmbeddings: p.tied,
  };
}

/** A fresh copy of a preset's text config. */
export function presetConfig(name: PresetName): TextConfig {
  switch (name) {
    case 'tiny': return make({ hidden: 128, layers: 4, inter: 512, heads: 2, kv: 1, nk: 2, nv: 2, tied: true });
    case '0.8b': return make({ hidden: 1024, layers: 24, inter: 3584, heads: 8, kv: 2, nk: 16, nv: 16, tied: true });
    case '2b': return make({ hidden: 2048, layers: 24, inter: 6144, heads: 8, kv: 2, nk: 16, nv: 16, tied: true });
    case '4b': return make({ hidden: 2560, layers: 32, inter: 9216, heads: 16, kv: 4, nk: 16, nv: 32, tied: true });
    case '9b': return make({ hidden: 4096, layers: 32, inter: 12288, heads: 16, kv: 4, nk: 16, nv: 32, tied: false });
  }
}

/** Whether the preset's chat template thinks by default (4B/9B do; tiny, 0.8B and 2B do not). */
export function presetThinksByDefault(name: PresetName): boolean {
  return name === '4b' || name === '9b';
}
