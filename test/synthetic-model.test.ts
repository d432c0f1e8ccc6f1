// `--model-path synthetic:<preset>`: the flag's resolution, the model the loaders return (no files),
// the in-memory tokenizer (= what `bench synth` writes), the reports' words, and the engine it loads
// (tiny only: the larger presets are checked as configs, never generated here).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveModelPathFlags } from '../src/cli/engine-flags.js';
import { modelSection } from '../src/bench/report.js';
import { loadEngine } from '../src/engine/engine.js';
import { loadModel, loadModelTokenizer } from '../src/model/model-path.js';
import { PRESET_NAMES, presetConfig } from '../src/model/presets.js';
import { DEFAULT_SYNTH_SEED, synthGenerationConfig, writeSynthCheckpoint } from '../src/model/synth.js';
import { makeServeModel, samplingDefaults } from '../src/serve/model.js';
import { describeSynthetic, isSyntheticModelPath, syntheticWeightBytes } from '../src/model/synthetic-model.js';
import { loadTokenizer, type LoadedTokenizer } from '../src/model/tokenizer.js';
import { CheckpointError } from '../src/model/types.js';
import { weightFormatJson, weightFormatLine } from '../src/model/weight-format.js';
import { UsageError } from '../src/util/usage-error.js';
import { baseOptions } from './helpers/engine-fixture.js';

function usageError(f: () => unknown): UsageError {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return err as UsageError;
  }
  throw new Error('expected a UsageError');
}

describe('resolveModelPathFlags: synthetic:<preset>', () => {
  it.each(PRESET_NAMES.map((p) => [p]))('synthetic:%s resolves to itself (no file is looked for)', (p) => {
    expect(resolveModelPathFlags({ modelPath: `synthetic:${p}` })).toEqual({ modelPath: `synthetic:${p}` });
  });

  it('the preset is case-insensitive and comes back lower-cased', () => {
    expect(resolveModelPathFlags({ modelPath: 'Synthetic:0.8B' })).toEqual({ modelPath: 'synthetic:0.8b' });
  });

  it.each([['synthetic:7b', '7b'], ['synthetic:', ''], ['synthetic:tiny:f32', 'tiny:f32']])('%s: a one-line usage error naming --model-path and listing the presets', (value, preset) => {
    const e = usageError(() => resolveModelPathFlags({ modelPath: value }));
    expect(e.message).toBe(`--model-path ${value}: unknown synthetic preset '${preset}' (one of tiny, 0.8b, 2b, 4b, 9b)`);
    expect(e.message).not.toContain('\n');
  });

  it('--quant with a synthetic path is a usage error', () => {
    const e = usageError(() => resolveModelPathFlags({ modelPath: 'synthetic:tiny', quant: 'Q4_K_M' }));
    expect(e.message).toMatch(/^--quant Q4_K_M: does not apply to --model-path synthetic:tiny/);
  });

  it('other paths are unchanged: a missing one is still an error', () => {
    expect(isSyntheticModelPath('./synthetic:tiny')).toBe(false);
    expect(usageError(() => resolveModelPathFlags({ modelPath: '/nonexistent/synthetic:tiny' })).message)
      .toBe('--model-path: /nonexistent/synthetic:tiny does not exist');
  });
});

describe('loadModel(synthetic:<preset>)', () => {
  it.each(PRESET_NAMES.map((p) => [p]))('synthetic:%s: the preset config, no tensors, no files, bf16 and the default seed', (p) => {
    const m = loadModel(`synthetic:${p}`);
    expect(m.config).toEqual(presetConfig(p));
    expect(m.dir).toBe(`synthetic:${p}`);
    expect(m.tensors.size).toBe(0);
    expect(m.shards).toEqual([]);
    expect(m.bytesOnDisk).toBe(0);
    expect(m.dtype).toBe('BF16');
    expect(m.syntheticWeights).toEqual({ preset: p, dtype: 'bf16', seed: DEFAULT_SYNTH_SEED });
    expect(m.paramCount).toBeGreaterThan(0);
    expect(m.configHash).toMatch(/^[0-9a-f]{64}$/);
  });

  it('an unknown preset or --quant through the API: CheckpointError', () => {
    expect(() => loadModel('synthetic:7b')).toThrow(CheckpointError);
    expect(() => loadModel('synthetic:tiny', { quant: 'Q8_0' })).toThrow(CheckpointError);
    expect(() => loadModel('synthetic:tiny', { mtp: true })).toThrow(CheckpointError);
  });

  it('the reports say synthetic: preset, dtype, seed, in-memory bytes; no file hash', () => {
    const m = loadModel('synthetic:4b');
    const j = weightFormatJson(m);
    expect(j).toMatchObject({ container: 'synthetic', synthetic: true, preset: '4b', dtype: 'bf16', seed: DEFAULT_SYNTH_SEED, name: 'BF16', bits_per_weight: 16 });
    expect(j.sha256).toBeUndefined();
    expect(j.in_memory_bytes).toBe(syntheticWeightBytes(m.config, 'bf16'));
    expect(j.in_memory_bytes! / 1e9).toBeGreaterThan(8); // 4B parameters, mostly bf16
    expect(weightFormatLine(m)).toMatch(/^synthetic BF16: random weights of the 4B shape, seed 0, [\d.]+ GiB generated in memory \(no file, no hash\)$/);
    expect(describeSynthetic(m.syntheticWeights!)).toBe('synthetic:4b (random weights of the 4B shape, bf16, seed 0; generated in memory, no checkpoint)');
    const s = modelSection(m, false);
    expect(s).toMatchObject({ path: 'synthetic:4b', embedded: false, synthetic: true, bytes_on_disk: 0, shards: 0 });
    expect(s.weight_format).not.toHaveProperty('sha256');
  });
});

describe('the in-memory tokenizer is the one bench synth writes', () => {
  let dir: string;
  let written: LoadedTokenizer;
  let inMemory: LoadedTokenizer;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'lumen-synthetic-tok-'));
    await writeSynthCheckpoint({ preset: 'tiny', out: dir }); // bench synth --preset tiny (default dtype and seed)
    written = await loadTokenizer(dir);
    inMemory = await loadModelTokenizer(loadModel('synthetic:tiny'));
  });
  afterAll(() => { if (dir) rmSync(dir, { recursive: true, force: true }); });

  it('same ids, text, vocabulary and end-of-sequence ids', () => {
    for (const text of ['Hello world, 123!', 'the quick brown fox\n\tjumps <|im_start|>user\nhi<|im_end|>', 'caf\u00e9 \u6771\u4eac \ud83d\ude42']) {
      const ids = written.encode(text);
      expect(inMemory.encode(text)).toEqual(ids);
      expect(inMemory.decode(ids)).toBe(written.decode(ids));
    }
    expect(inMemory.vocabSize).toBe(written.vocabSize);
    expect(inMemory.eosTokenIds).toEqual(written.eosTokenIds);
    expect([...inMemory.specialTokenIds].sort()).toEqual([...written.specialTokenIds].sort());
  });

  it('same chat template (tiny does not think by default; 4b does, as bench synth writes them)', () => {
    const messages = [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }];
    for (const opts of [{ addGenerationPrompt: true }, { addGenerationPrompt: true, enableThinking: true }, { addGenerationPrompt: false }]) {
      expect(inMemory.applyChatTemplate(messages, opts)).toBe(written.applyChatTemplate(messages, opts));
    }
    expect(inMemory.applyChatTemplate(messages, { addGenerationPrompt: true })).toMatch(/<think>\n\n<\/think>\n\n$/);
  });

  it('bench serve takes the sampling defaults of the generation_config.json bench synth writes', () => {
    const m = loadModel('synthetic:tiny');
    const served = makeServeModel({
      name: m.dir, root: m.dir, tokenizer: inMemory, configEos: m.config.eosTokenId, maxSeq: 64, vocabSize: m.config.vocabSize,
      generationConfig: synthGenerationConfig(),
    });
    expect(served.defaults).toEqual(samplingDefaults(dir));
    expect(served.defaults).toEqual({ temperature: 0.7, topP: 0.8, topK: 20 });
  });

  it('4b thinks by default', async () => {
    const t = await loadModelTokenizer(loadModel('synthetic:4b'));
    expect(t.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true })).toMatch(/<\|im_start\|>assistant\n<think>\n$/);
  });
});

describe('the engine on synthetic:tiny', () => {
  it('generates the weights with the model\'s dtype and seed: the in-memory byte count the reports give, the same logits as the engine API with that seed', async () => {
    const m = loadModel('synthetic:tiny');
    const opts = { ...baseOptions, maxSeqs: 1 };
    const a = await loadEngine(m, opts);
    const b = await loadEngine({ synthetic: presetConfig('tiny') }, opts, {}, { syntheticDtype: 'bf16', syntheticSeed: DEFAULT_SYNTH_SEED });
    const c = await loadEngine({ synthetic: presetConfig('tiny') }, opts, {}, { syntheticDtype: 'bf16', syntheticSeed: DEFAULT_SYNTH_SEED + 1 });
    try {
      expect(a.info.weightBytes).toBe(weightFormatJson(m).in_memory_bytes);
      expect(a.info.dtype).toBe('bf16');
      const req = { prompt: [1, 2, 3, 4, 5], maxTokens: 2, logits: 'all' as const, ignoreEos: true };
      const [ra, rb, rc] = await Promise.all([a.submit(req).done, b.submit(req).done, c.submit(req).done]);
      expect(ra.finishReason).toBe('length');
      const bytes = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
      expect(ra.logits!.length).toBe((5 + 2) * m.config.vocabSize);
      expect(bytes(ra.logits!).equals(bytes(rb.logits!))).toBe(true);
      expect(bytes(ra.logits!).equals(bytes(rc.logits!))).toBe(false);
    } finally {
      await Promise.all([a.close(), b.close(), c.close()]);
    }
  });
});
