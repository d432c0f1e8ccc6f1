// Fuzz cases: case i of seed S picks a target file kind and a mutation family from its own PRNG
// stream and produces the mutated file (the other files of the checkpoint stay the base's).
import type { BaseDir, BaseSet } from './base.js';
import type { Change } from './change.js';
import { configChange } from './mutate-config.js';
import { ggufMutation } from './mutate-gguf.js';
import { indexChange } from './mutate-index.js';
import { safetensorsChange } from './mutate-safetensors.js';
import { tokenizerChange, tokenizerConfigChange } from './mutate-tokenizer.js';
import { CaseRng } from './random.js';

export const TARGETS = ['safetensors', 'config', 'index', 'tokenizer', 'tokenizer_config', 'gguf'] as const;
export type Target = (typeof TARGETS)[number];

const TARGET_WEIGHTS: ReadonlyArray<readonly [Target, number]> = [
  ['safetensors', 3], ['config', 2], ['index', 1.5], ['tokenizer', 2], ['tokenizer_config', 1.5], ['gguf', 3],
];

export interface CaseSpec {
  index: number;
  target: Target;
  /** Mutation family (a short id) and the full one-line description. */
  family: string;
  mutation: string;
  /** Checkpoint targets: the base directory and the files that differ from it (null: removed). */
  base?: BaseDir;
  changes?: Map<string, Buffer | null>;
  /** GGUF target: the mutated file. */
  gguf?: Buffer;
}

/** The case for index `index` of a run with seed `seed`. */
export function makeCase(base: BaseSet, seed: number, index: number): CaseSpec {
  const rng = new CaseRng(seed, index);
  const target = rng.weighted(TARGET_WEIGHTS);
  if (target === 'gguf') {
    const m = ggufMutation(base, rng);
    return { index, target, family: m.family, mutation: m.desc, gguf: m.bytes };
  }
  const dirBase = target === 'index' || (target === 'safetensors' && rng.chance(0.1)) ? base.sharded : base.single;
  let c: Change;
  switch (target) {
    case 'safetensors': c = safetensorsChange(dirBase, base, rng); break;
    case 'config': c = configChange(dirBase, rng); break;
    case 'index': c = indexChange(dirBase, base, rng); break;
    case 'tokenizer': c = tokenizerChange(dirBase, rng); break;
    case 'tokenizer_config': c = tokenizerConfigChange(dirBase, rng); break;
  }
  return {
    index, target, family: c.family, mutation: `${c.file}: ${c.desc}`, base: dirBase,
    changes: new Map([[c.file, c.bytes]]),
  };
}
