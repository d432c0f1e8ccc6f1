// Checkpoint loading: safetensors reader/writer, config parsing, sharding, prefixes, tied/untied,
// vision and MTP handling, and one-line CheckpointErrors for damaged checkpoints.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { countParams, expectedTensors, loadCheckpoint } from '../src/model/checkpoint.js';
import { derivedDims, parseConfig, textConfigToJson } from '../src/model/config.js';
import { presetConfig, PRESET_NAMES } from '../src/model/presets.js';
import {
  bf16ToF32, encodeHeader, f32ToBf16, readSafetensorsHeader, readTensorBytes, readTensorF32, SafetensorsWriter, writeSafetensors,
  type TensorSpec,
} from '../src/model/safetensors.js';
import { CheckpointError } from '../src/model/types.js';
import {
  cleanupAllFixtures, editConfig, rewriteSafetensors, smallFixture, tempDir, writeRawSafetensors,
} from './helpers/synth-fixture.js';

afterAll(() => cleanupAllFixtures());

/** Runs fn, expects a one-line CheckpointError, returns its message. */
function checkpointError(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CheckpointError);
    const msg = (err as Error).message;
    expect(msg).not.toContain('\n');
    return msg;
  }
  throw new Error('expected a CheckpointError, nothing was thrown');
}

describe('safetensors', () => {
  it('round-trips BF16, F16 and F32 tensors with an 8-byte aligned header', () => {
    const dir = tempDir('st');
    const file = path.join(dir, 'a.safetensors');
    const f32 = new Float32Array([1.5, -2.25, 3e-3, 0, 7, -8]);
    const bf16 = new Uint16Array([f32ToBf16(1), f32ToBf16(-0.5), f32ToBf16(3.140625), f32ToBf16(65504)]);
    const f16 = new Uint16Array([0x3c00, 0xc000, 0x3555]); // 1, -2, ~0.333
    writeSafetensors(file, [
      { name: 'w.f32', dtype: 'F32', shape: [2, 3], data: f32 },
      { name: 'w.bf16', dtype: 'BF16', shape: [4], data: bf16 },
      { name: 'w.f16', dtype: 'F16', shape: [3, 1], data: f16 },
    ]);
    const h = readSafetensorsHeader(file);
    expect(h.dataStart % 8).toBe(0);
    expect(h.metadata).toEqual({ format: 'pt' });
    expect([...h.tensors.keys()]).toEqual(['w.f32', 'w.bf16', 'w.f16']);
    const e32 = h.tensors.get('w.f32')!;
    expect(e32.shape).toEqual([2, 3]);
    expect(e32.nbytes).toBe(24);
    expect(Array.from(readTensorF32({ ...e32, file }))).toEqual(Array.from(f32));
    expect(Array.from(readTensorF32({ ...h.tensors.get('w.bf16')!, file }))).toEqual([1, -0.5, 3.140625, 65536]);
    const h16 = readTensorF32({ ...h.tensors.get('w.f16')!, file });
    expect(h16[0]).toBe(1);
    expect(h16[1]).toBe(-2);
    expect(h16[2]).toBeCloseTo(1 / 3, 3);
    expect(statSync(file).size).toBe(h.dataStart + 24 + 8 + 6);
  });

  it('streams chunks that span tensors and rejects short or long data', () => {
    const dir = tempDir('st');
    const file = path.join(dir, 'b.safetensors');
    const w = new SafetensorsWriter(file, [
      { name: 'a', dtype: 'F32', shape: [3] },
      { name: 'b', dtype: 'F32', shape: [2] },
    ]);
    w.writeArray(new Float32Array([1, 2]));
    w.writeArray(new Float32Array([3, 4])); // finishes a, starts b
    expect(w.currentTensor).toBe('b');
    w.writeArray(new Float32Array([5]));
    w.close();
    const h = readSafetensorsHeader(file);
    expect(Array.from(readTensorF32({ ...h.tensors.get('b')!, file }))).toEqual([4, 5]);

    const short = new SafetensorsWriter(path.join(dir, 'c.safetensors'), [{ name: 'a', dtype: 'F32', shape: [3] }]);
    short.writeArray(new Float32Array([1]));
    expect(() => short.close()).toThrow(/declared 12/);
    const long = new SafetensorsWriter(path.join(dir, 'd.safetensors'), [{ name: 'a', dtype: 'BF16', shape: [1] }]);
    expect(() => long.writeArray(new Uint16Array([1, 2]))).toThrow(/more data than declared/);
    long.abort();
  });

  it('rounds f32 to bf16 to nearest even', () => {
    expect(f32ToBf16(1)).toBe(0x3f80);
    expect(f32ToBf16(1 + 2 ** -8)).toBe(0x3f80); // tie -> even (down)
    expect(f32ToBf16(1 + 3 * 2 ** -8)).toBe(0x3f82); // tie -> even (up)
    expect(f32ToBf16(1 + 2 ** -8 + 2 ** -12)).toBe(0x3f81); // above the tie
    expect(bf16ToF32(f32ToBf16(-2.5))).toBe(-2.5);
    expect(Number.isNaN(bf16ToF32(f32ToBf16(NaN)))).toBe(true);
  });
});

describe('config.json', () => {
  const tc = textConfigToJson(presetConfig('tiny'));

  it('parses nested and flat layouts to the same TextConfig', () => {
    const nested = parseConfig({ architectures: ['Qwen3_5ForConditionalGeneration'], text_config: tc, vision_config: {} }, 'config.json');
    const flat = parseConfig({ ...tc }, 'config.json');
    expect(nested).toEqual(flat);
    expect(nested).toEqual(presetConfig('tiny'));
  });

  it('derives layer types from full_attention_interval and reads top-level rope keys', () => {
    const t: Record<string, unknown> = { ...tc, num_hidden_layers: 8, full_attention_interval: 2, rope_theta: 5e6, partial_rotary_factor: 0.5 };
    delete t.layer_types;
    delete t.rope_parameters;
    const c = parseConfig({ text_config: t }, 'config.json');
    expect(c.layerTypes).toEqual(['linear_attention', 'full_attention', 'linear_attention', 'full_attention',
      'linear_attention', 'full_attention', 'linear_attention', 'full_attention']);
    expect(c.ropeTheta).toBe(5e6);
    expect(c.partialRotaryFactor).toBe(0.5);
    delete t.full_attention_interval;
    expect(parseConfig({ text_config: t }, 'config.json').layerTypes.filter((x) => x === 'full_attention').length).toBe(2);
  });

  it('names the file and key of missing or inconsistent fields', () => {
    const t: Record<string, unknown> = { ...tc };
    delete t.hidden_size;
    expect(checkpointError(() => parseConfig({ text_config: t }, 'config.json'))).toBe('config.json: text_config.hidden_size is missing');
    const flat: Record<string, unknown> = { ...tc };
    delete flat.vocab_size;
    expect(checkpointError(() => parseConfig(flat, '/m/config.json'))).toBe('/m/config.json: vocab_size is missing');
    expect(checkpointError(() => parseConfig({ text_config: { ...tc, layer_types: ['full_attention'] } }, 'config.json')))
      .toMatch(/text_config\.layer_types has 1 entries but num_hidden_layers is 4/);
    expect(checkpointError(() => parseConfig({ text_config: { ...tc, num_attention_heads: 3, num_key_value_heads: 2 } }, 'config.json')))
      .toMatch(/num_attention_heads \(3\) must be a multiple of num_key_value_heads \(2\)/);
    expect(checkpointError(() => parseConfig({ text_config: { ...tc, hidden_size: 0 } }, 'config.json')))
      .toMatch(/text_config\.hidden_size must be a positive integer/);
  });

  it('refuses settings that change the computation to what the engine does not implement (it ran them as Qwen3.5, silently)', () => {
    const bad = (patch: Record<string, unknown>, top: Record<string, unknown> = {}) =>
      checkpointError(() => parseConfig({ ...top, text_config: { ...tc, ...patch } }, 'config.json'));
    expect(bad({ hidden_act: 'gelu' })).toBe('config.json: text_config.hidden_act is "gelu"; the engine implements "silu" only (the SwiGLU MLP)');
    expect(bad({ attention_bias: true })).toBe('config.json: text_config.attention_bias is true; the engine implements false only (attention projections without biases)');
    expect(bad({ attn_output_gate: false })).toMatch(/attn_output_gate is false; the engine implements true only/);
    expect(bad({ rope_parameters: { ...(tc.rope_parameters as object), rope_type: 'yarn', factor: 4 } }))
      .toBe('config.json: text_config.rope_parameters.rope_type is "yarn"; the engine implements "default" or "mrope" only (unscaled rotary positions)');
    expect(bad({ num_experts: 256 })).toBe('config.json: text_config.num_experts is 256: a mixture-of-experts model, which the engine does not run (dense Qwen3.5 only)');
    expect(bad({ model_type: 'llama' })).toMatch(/text_config\.model_type is "llama"; the engine implements "qwen3_5_text" or "qwen3_5" only/);
    expect(bad({}, { model_type: 'qwen3_5_moe' })).toBe('config.json: model_type is "qwen3_5_moe"; the engine implements "qwen3_5" only (Qwen3.5 dense models)');
    // The values a real Qwen3.5 config.json states, and their absence, pass.
    expect(parseConfig({ model_type: 'qwen3_5', text_config: { ...tc, num_experts: 0 } }, 'config.json')).toEqual(presetConfig('tiny'));
    const bare: Record<string, unknown> = { ...tc };
    for (const k of ['model_type', 'hidden_act', 'attention_bias', 'attn_output_gate']) delete bare[k];
    expect(parseConfig({ text_config: bare }, 'config.json')).toEqual(presetConfig('tiny'));
  });

  it('rejects values the engine cannot take, with bounded messages', () => {
    const bad = (patch: Record<string, unknown>) => checkpointError(() => parseConfig({ text_config: { ...tc, ...patch } }, 'config.json'));
    // A deeply nested value is shown elided (JSON.stringify of it would overflow the stack).
    expect(bad({ hidden_size: JSON.parse('['.repeat(100_000) + ']'.repeat(100_000)) })).toBe('config.json: text_config.hidden_size must be a positive integer (got [[[[...]]]])');
    expect(bad({ hidden_size: 2 ** 31 })).toMatch(/hidden_size is 2147483648, above the limit of 2147483647/);
    const noTypes: Record<string, unknown> = { ...tc, num_hidden_layers: 1e9 };
    delete noTypes.layer_types;
    expect(checkpointError(() => parseConfig({ text_config: noTypes }, 'config.json'))).toMatch(/num_hidden_layers is 1000000000, above the limit of 1024/);
    expect(bad({ rms_norm_eps: 1e-320 })).toMatch(/rms_norm_eps is 1e-320, which is 0 as a float32/);
    expect(bad({ rms_norm_eps: 2 })).toMatch(/rms_norm_eps must be below 1/);
    expect(bad({ linear_conv_kernel_dim: 9 })).toMatch(/linear_conv_kernel_dim is 9; the engine supports 1\.\.8/);
    // 200 x 0.53 = 106, and 105.99999 with the factor as a float32: the engine rounds, so it is accepted.
    const odd = parseConfig({ text_config: { ...tc, head_dim: 200, rope_parameters: { ...(tc.rope_parameters as object), partial_rotary_factor: 0.53 } } }, 'config.json');
    expect(derivedDims(odd).rotaryDim).toBe(106);
    expect(checkpointError(() => parseConfig({ text_config: 7 }, 'config.json'))).toBe('config.json: text_config must be an object (got 7)');
  });

  it('preset parameter counts match the architecture reference', () => {
    const expected: Record<string, [number, number]> = {
      '0.8b': [752_393_024, 20_452_864],
      '2b': [1_881_825_088, 60_828_160],
      '4b': [4_205_751_296, 120_599_552],
      '9b': [8_953_803_264, 243_290_624],
    };
    for (const name of PRESET_NAMES) {
      if (name === 'tiny') continue;
      const p = countParams(presetConfig(name));
      expect([p.text, p.mtp], name).toEqual(expected[name]);
    }
    expect(presetConfig('9b').tieWordEmbeddings).toBe(false);
    expect(presetConfig('tiny').layerTypes).toEqual(['linear_attention', 'linear_attention', 'linear_attention', 'full_attention']);
  });
});

describe('loadCheckpoint', () => {
  it('loads the real layout: nested config, model.language_model. prefix, vision skipped', async () => {
    const fx = await smallFixture();
    const ck = loadCheckpoint(fx.dir);
    expect(ck.prefix).toBe('model.language_model.');
    expect(ck.shards).toEqual([path.join(fx.dir, 'model.safetensors')]);
    expect([...ck.tensors.keys()].some((n) => n.includes('visual'))).toBe(false);
    expect(ck.notes.join(' ')).toMatch(/skipped 2 vision tensor/);
    expect(ck.tensors.get('embed_tokens.weight')!.shape).toEqual([1024, 128]);
    expect(ck.tensors.get('layers.3.self_attn.q_proj.weight')!.shape).toEqual([1024, 128]);
    expect(ck.tensors.get('layers.0.linear_attn.conv1d.weight')!.shape).toEqual([768, 1, 4]);
    expect(ck.tensors.has('lm_head.weight')).toBe(false);
    expect(ck.config.tieWordEmbeddings).toBe(true);
    // Like the published checkpoints: A_log and the gated norm in F32, the rest BF16.
    expect(ck.tensors.get('layers.0.linear_attn.A_log')!.dtype).toBe('F32');
    expect(ck.tensors.get('layers.0.linear_attn.norm.weight')!.dtype).toBe('F32');
    expect(ck.dtype).toBe('BF16');
    expect(ck.paramCount).toBe(countParams(ck.config).text);
    expect(ck.configHash).toBe(createHash('sha256').update(readFileSync(path.join(fx.dir, 'config.json'))).digest('hex'));
    expect(ck.bytesOnDisk).toBe(statSync(path.join(fx.dir, 'model.safetensors')).size);
    expect(ck.hasMtp).toBe(false);
    // offsets point at the right bytes: q_norm read through the ref equals the header's view
    const ref = ck.tensors.get('layers.3.self_attn.q_norm.weight')!;
    expect(readTensorF32(ref).length).toBe(256);
  });

  it('reads shards through the index; values do not depend on sharding', async () => {
    const one = await smallFixture({ seed: 5 });
    const three = await smallFixture({ seed: 5, shards: 3 });
    const ck1 = loadCheckpoint(one.dir);
    const ck3 = loadCheckpoint(three.dir);
    expect(ck3.shards.map((s) => path.basename(s))).toEqual([
      'model-00001-of-00003.safetensors', 'model-00002-of-00003.safetensors', 'model-00003-of-00003.safetensors',
    ]);
    expect(new Set([...ck3.tensors.values()].map((t) => t.file)).size).toBe(3);
    expect([...ck3.tensors.keys()].sort()).toEqual([...ck1.tensors.keys()].sort());
    for (const name of ['embed_tokens.weight', 'layers.2.linear_attn.in_proj_qkv.weight', 'norm.weight']) {
      expect(readTensorBytes(ck3.tensors.get(name)!).equals(readTensorBytes(ck1.tensors.get(name)!)), name).toBe(true);
    }
    const index = JSON.parse(readFileSync(path.join(three.dir, 'model.safetensors.index.json'), 'utf8'));
    const total = [...readSafetensorsHeaderAll(ck3.shards)].reduce((s, n) => s + n, 0);
    expect(index.metadata.total_size).toBe(total);
    expect(ck3.bytesOnDisk).toBe(ck3.shards.reduce((s, f) => s + statSync(f).size, 0));
  });

  it('accepts the model. prefix and a flat config', async () => {
    const fx = await smallFixture({ prefix: 'model.', flatConfig: true });
    const cfg = JSON.parse(readFileSync(path.join(fx.dir, 'config.json'), 'utf8'));
    expect(cfg.text_config).toBeUndefined();
    expect(cfg.hidden_size).toBe(128);
    const ck = loadCheckpoint(fx.dir);
    expect(ck.prefix).toBe('model.');
    expect(ck.tensors.get('layers.1.linear_attn.out_proj.weight')!.shape).toEqual([128, 256]);
    expect(ck.config.hiddenSize).toBe(128);
  });

  it('untied: lm_head is required, counted and returned', async () => {
    const fx = await smallFixture({ overrides: { tieWordEmbeddings: false, linearNumValueHeads: 4 } });
    const ck = loadCheckpoint(fx.dir);
    expect(ck.config.tieWordEmbeddings).toBe(false);
    expect(ck.tensors.get('lm_head.weight')!.shape).toEqual([1024, 128]);
    expect(ck.paramCount).toBe(countParams(ck.config).text);
    expect(ck.tensors.get('layers.0.linear_attn.in_proj_qkv.weight')!.shape).toEqual([2 * 256 + 512, 128]);
    expect(ck.tensors.get('layers.0.linear_attn.in_proj_b.weight')!.shape).toEqual([4, 128]);

    // Config says untied but lm_head is gone -> error naming lm_head and config.json.
    rewriteSafetensors(path.join(fx.dir, 'model.safetensors'), (ts) => ts.filter((t) => t.name !== 'lm_head.weight'));
    const msg = checkpointError(() => loadCheckpoint(fx.dir));
    expect(msg).toMatch(/tensor lm_head\.weight is missing \(expected shape \[1024, 128\]\)/);
    expect(msg).toContain('config.json');
  });

  it('tied config with an lm_head present: ignored, with a note', async () => {
    const fx = await smallFixture({ overrides: { tieWordEmbeddings: false } });
    editConfig(fx.dir, (c) => { c.tie_word_embeddings = true; c.text_config.tie_word_embeddings = true; });
    const ck = loadCheckpoint(fx.dir);
    expect(ck.config.tieWordEmbeddings).toBe(true);
    expect(ck.tensors.has('lm_head.weight')).toBe(false);
    expect(ck.notes.join(' ')).toMatch(/ignoring lm_head\.weight/);
    // No tie_word_embeddings anywhere and no lm_head: tied by inference.
    const fx2 = await smallFixture();
    editConfig(fx2.dir, (c) => { delete c.tie_word_embeddings; delete c.text_config.tie_word_embeddings; });
    expect(loadCheckpoint(fx2.dir).config.tieWordEmbeddings).toBe(true);
  });

  it('a config.json dtype the tensors do not have: a note, and the weights run as stored', async () => {
    const fx = await smallFixture();
    const dtypeNote = (ck: { notes: string[] }) => ck.notes.find((n) => n.startsWith('config.json says'));
    const plain = loadCheckpoint(fx.dir);
    expect(plain.dtype).toBe('BF16');
    expect(dtypeNote(plain)).toBeUndefined();
    editConfig(fx.dir, (c) => { c.text_config.dtype = 'float32'; });
    const f32 = loadCheckpoint(fx.dir);
    expect(f32.dtype).toBe('BF16');
    expect(dtypeNote(f32)).toBe('config.json says dtype float32, but the weights are stored BF16 (most parameters): they run as stored');
    // transformers 4's key at the top level, when text_config states none.
    editConfig(fx.dir, (c) => { delete c.text_config.dtype; delete c.dtype; c.torch_dtype = 'float16'; });
    expect(dtypeNote(loadCheckpoint(fx.dir))).toMatch(/^config\.json says torch_dtype float16, but the weights are stored BF16/);
    editConfig(fx.dir, (c) => { c.torch_dtype = 'auto'; });
    expect(dtypeNote(loadCheckpoint(fx.dir))).toBeUndefined();
  });

  it("bench synth's provenance in config.json: a note that the weights are random", async () => {
    const fx = await smallFixture();
    const synthNote = (ck: { notes: string[] }) => ck.notes.find((n) => n.startsWith('random weights'));
    expect(synthNote(loadCheckpoint(fx.dir))).toMatch(/^random weights written by bench synth \(preset tiny, seed \d+, dtype bf16\): the figures time the shape; the text means nothing$/);
    editConfig(fx.dir, (c) => { delete c.lumen_synth; });
    expect(synthNote(loadCheckpoint(fx.dir))).toBeUndefined();
  });

  it('includes mtp.* only when asked', async () => {
    const fx = await smallFixture({ mtp: true });
    const plain = loadCheckpoint(fx.dir);
    expect([...plain.tensors.keys()].some((n) => n.startsWith('mtp.'))).toBe(false);
    expect(plain.hasMtp).toBe(false);
    expect(plain.notes.join(' ')).toMatch(/skipped 15 MTP tensor/);
    const withMtp = loadCheckpoint(fx.dir, { mtp: true });
    const mtpNames = [...withMtp.tensors.keys()].filter((n) => n.startsWith('mtp.'));
    expect(mtpNames.length).toBe(15);
    expect(withMtp.tensors.get('mtp.fc.weight')!.shape).toEqual([128, 256]);
    expect(withMtp.tensors.get('mtp.layers.0.self_attn.q_proj.weight')!.shape).toEqual([1024, 128]);
    expect(withMtp.hasMtp).toBe(true);
    expect(withMtp.paramCount).toBe(plain.paramCount);
    // Asking for MTP on a checkpoint without it is not an error.
    const none = await smallFixture();
    expect(loadCheckpoint(none.dir, { mtp: true }).hasMtp).toBe(false);
  });
});

describe('full-size real layout', () => {
  // The published Qwen3.5-4B layout, at full size but as sparse files (headers written, data left
  // as holes): two shards named as the Hub names them, bf16 with A_log / linear_attn.norm in F32,
  // vision and MTP tensors present, no lm_head (tied), the official config.json keys.
  it('loads a Qwen3.5-4B-shaped checkpoint', () => {
    const dir = tempDir('q4b');
    const cfg = {
      architectures: ['Qwen3_5ForConditionalGeneration'],
      image_token_id: 248056,
      model_type: 'qwen3_5',
      text_config: {
        attention_bias: false, attention_dropout: 0.0, attn_output_gate: true, dtype: 'bfloat16', eos_token_id: 248044,
        full_attention_interval: 4, head_dim: 256, hidden_act: 'silu', hidden_size: 2560, initializer_range: 0.02,
        intermediate_size: 9216,
        layer_types: Array.from({ length: 32 }, (_, i) => ((i + 1) % 4 === 0 ? 'full_attention' : 'linear_attention')),
        linear_conv_kernel_dim: 4, linear_key_head_dim: 128, linear_num_key_heads: 16, linear_num_value_heads: 32,
        linear_value_head_dim: 128, mamba_ssm_dtype: 'float32', max_position_embeddings: 262144, mlp_only_layers: [],
        model_type: 'qwen3_5_text', mtp_num_hidden_layers: 1, mtp_use_dedicated_embeddings: false,
        num_attention_heads: 16, num_hidden_layers: 32, num_key_value_heads: 4, rms_norm_eps: 1e-6,
        rope_parameters: { mrope_interleaved: true, mrope_section: [11, 11, 10], rope_type: 'default', rope_theta: 10000000, partial_rotary_factor: 0.25 },
        use_cache: true, vocab_size: 248320,
      },
      tie_word_embeddings: true,
      transformers_version: '4.57.0.dev0',
      video_token_id: 248057,
      vision_config: { deepstack_visual_indexes: [], depth: 24, hidden_size: 1024, model_type: 'qwen3_5', out_hidden_size: 2560 },
      vision_end_token_id: 248054,
      vision_start_token_id: 248053,
    };
    writeFileSync(path.join(dir, 'config.json'), JSON.stringify(cfg, null, 2));
    const text = parseConfig(cfg, 'config.json');
    const specs: TensorSpec[] = expectedTensors(text, { mtp: true, lmHead: false }).map((t) => ({
      name: t.group === 'text' ? `model.language_model.${t.name}` : t.name,
      dtype: /linear_attn\.(A_log|norm\.weight)$/.test(t.name) ? 'F32' : 'BF16',
      shape: t.shape,
    }));
    specs.push(
      { name: 'model.visual.patch_embed.proj.weight', dtype: 'BF16', shape: [1024, 3, 2, 16, 16] },
      { name: 'model.visual.blocks.0.attn.qkv.weight', dtype: 'BF16', shape: [3072, 1024] },
      { name: 'model.visual.merger.linear_fc2.weight', dtype: 'BF16', shape: [2560, 4096] },
    );
    const half = Math.floor(specs.length / 2);
    const shards = [specs.slice(0, half), specs.slice(half)];
    const weightMap: Record<string, string> = {};
    let total = 0;
    shards.forEach((list, i) => {
      const name = `model.safetensors-0000${i + 1}-of-00002.safetensors`;
      const file = path.join(dir, name);
      const h = encodeHeader(list);
      writeFileSync(file, h.bytes);
      truncateSync(file, h.bytes.length + h.dataBytes); // sparse: logical size only
      for (const t of list) weightMap[t.name] = name;
      total += h.dataBytes;
    });
    writeFileSync(path.join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }));

    const ck = loadCheckpoint(dir);
    expect(ck.prefix).toBe('model.language_model.');
    expect(ck.shards.length).toBe(2);
    expect(ck.config.tieWordEmbeddings).toBe(true);
    expect(ck.config.linearNumValueHeads).toBe(32);
    expect(ck.paramCount).toBe(4_205_751_296);
    expect(ck.dtype).toBe('BF16');
    expect(ck.hasMtp).toBe(false);
    expect(ck.tensors.size).toBe(expectedTensors(text, { lmHead: false }).length);
    expect(ck.tensors.get('layers.0.linear_attn.in_proj_qkv.weight')!.shape).toEqual([8192, 2560]);
    expect(ck.tensors.get('layers.0.linear_attn.A_log')!.dtype).toBe('F32');
    expect(ck.tensors.get('layers.31.self_attn.q_proj.weight')!.shape).toEqual([8192, 2560]);
    expect(ck.bytesOnDisk).toBeGreaterThan(8.4e9);
    expect(ck.notes.join(' ')).toMatch(/skipped 3 vision tensor.*skipped 15 MTP tensor/);
    const withMtp = loadCheckpoint(dir, { mtp: true });
    expect(withMtp.hasMtp).toBe(true);
    expect(withMtp.tensors.get('mtp.fc.weight')!.shape).toEqual([2560, 5120]);
  });
});

function* readSafetensorsHeaderAll(files: string[]): Generator<number> {
  for (const f of files) for (const e of readSafetensorsHeader(f).tensors.values()) yield e.nbytes;
}

describe('damaged checkpoints', () => {
  it('missing directory or config.json', async () => {
    expect(checkpointError(() => loadCheckpoint('/nonexistent/lumen-model'))).toMatch(/\/nonexistent\/lumen-model: checkpoint directory does not exist/);
    const fx = await smallFixture();
    rmSync(path.join(fx.dir, 'config.json'));
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`${path.join(fx.dir, 'config.json')}: not found (a Hugging Face checkpoint directory holds its config.json; a llama.cpp model is a .gguf file)`);
  });

  it('config without a needed field, and config that is not JSON', async () => {
    const fx = await smallFixture();
    editConfig(fx.dir, (c) => { delete c.text_config.num_hidden_layers; });
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`${path.join(fx.dir, 'config.json')}: text_config.num_hidden_layers is missing`);
    writeFileSync(path.join(fx.dir, 'config.json'), '{"text_config": ');
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toMatch(/config\.json: not valid JSON/);
  });

  it('JSON files: a leading byte-order mark is ignored; a character one cannot see is named by its code point', async () => {
    const fx = await smallFixture();
    const file = path.join(fx.dir, 'config.json');
    const text = readFileSync(file, 'utf8');
    writeFileSync(file, `\ufeff${text}`); // an editor's "UTF-8 with BOM"
    expect(loadCheckpoint(fx.dir).config.numLayers).toBe(4);
    writeFileSync(file, `\u200b${text}`);
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`${file}: not valid JSON: unexpected character U+200B`);
    writeFileSync(file, `\ufeff\ufeff${text}`); // only the first is a byte-order mark
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`${file}: not valid JSON: unexpected character U+FEFF (a byte-order mark)`);
    writeFileSync(file, `{"a": x}`);
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`${file}: not valid JSON: unexpected character "x"`);
  });

  it('truncated safetensors file', async () => {
    const fx = await smallFixture();
    const file = path.join(fx.dir, 'model.safetensors');
    truncateSync(file, Math.floor(statSync(file).size / 2));
    const msg = checkpointError(() => loadCheckpoint(fx.dir));
    expect(msg).toContain(file);
    expect(msg).toMatch(/truncated/);
    truncateSync(file, 5);
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toMatch(/model\.safetensors: truncated safetensors file \(5 bytes/);
    // A header length larger than the file.
    const big = Buffer.alloc(16);
    big.writeBigUInt64LE(1000n);
    writeFileSync(file, big);
    expect(checkpointError(() => readSafetensorsHeader(file))).toMatch(/truncated safetensors file: header claims 1000 bytes/);
    // An absurd header length (not a safetensors file at all).
    writeFileSync(file, Buffer.from('this is not a safetensors file at all'));
    expect(checkpointError(() => readSafetensorsHeader(file))).toMatch(/not plausible/);
  });

  it('offsets past the end of the file', () => {
    const file = path.join(tempDir('bad'), 'x.safetensors');
    writeRawSafetensors(file, { 'model.layers.0.w': { dtype: 'F32', shape: [4], data_offsets: [8, 24] } }, new Uint8Array(16));
    const msg = checkpointError(() => readSafetensorsHeader(file));
    expect(msg).toContain(file);
    expect(msg).toContain('model.layers.0.w');
    expect(msg).toMatch(/past the end/);
    // Overlapping and out-of-order entries are tolerated when in bounds.
    writeRawSafetensors(file, {
      b: { dtype: 'F32', shape: [2], data_offsets: [8, 16] },
      a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] },
    }, new Uint8Array(16));
    expect(readSafetensorsHeader(file).tensors.size).toBe(2);
    // Offsets that disagree with shape x dtype.
    writeRawSafetensors(file, { w: { dtype: 'BF16', shape: [3], data_offsets: [0, 8] } }, new Uint8Array(8));
    expect(checkpointError(() => readSafetensorsHeader(file))).toMatch(/tensor w spans 8 bytes but shape \[3\] x BF16 needs 6/);
  });

  it('unknown dtype', () => {
    const file = path.join(tempDir('bad'), 'y.safetensors');
    writeRawSafetensors(file, { 'model.embed_tokens.weight': { dtype: 'F8_E4M3', shape: [2], data_offsets: [0, 2] } }, new Uint8Array(2));
    expect(checkpointError(() => readSafetensorsHeader(file)))
      .toBe(`unknown dtype "F8_E4M3" for tensor model.embed_tokens.weight in ${file} (supported: BF16, F16, F32)`);
    writeRawSafetensors(file, '[1,2]');
    expect(checkpointError(() => readSafetensorsHeader(file))).toMatch(/header must be a JSON object/);
  });

  it('duplicate names, malformed UTF-8 and control characters in the header', () => {
    const file = path.join(tempDir('bad'), 'z.safetensors');
    const raw = (header: Buffer) => {
      const json = Buffer.concat([header, Buffer.alloc((8 - (header.length % 8)) % 8, 0x20)]);
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(json.length));
      writeFileSync(file, Buffer.concat([len, json, Buffer.alloc(8)]));
    };
    const entry = '{"dtype":"F32","shape":[2],"data_offsets":[0,8]}';
    raw(Buffer.from(`{"w":${entry},"w":${entry}}`));
    expect(checkpointError(() => readSafetensorsHeader(file))).toBe(`${file}: tensor w appears twice in the safetensors header`);
    raw(Buffer.concat([Buffer.from('{"w'), Buffer.from([0xff]), Buffer.from(`":${entry}}`)]));
    expect(checkpointError(() => readSafetensorsHeader(file))).toBe(`${file}: safetensors header is not valid UTF-8 (byte 3)`);
    raw(Buffer.from(`{"w":${entry}`));
    expect(checkpointError(() => readSafetensorsHeader(file))).toMatch(/safetensors header is not valid JSON: expected ',' or '}' after property value at line 1, column \d+$/);
    writeRawSafetensors(file, { 'w\n    at evil (x.js:1:1)': { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }, new Uint8Array(8));
    const msg = checkpointError(() => readSafetensorsHeader(file));
    expect(msg).not.toContain('\n');
    expect(msg).toContain('tensor w\\n    at evil');
  });

  it('an index entry must name a file inside the checkpoint directory', async () => {
    const fx = await smallFixture({ shards: 2 });
    const index = path.join(fx.dir, 'model.safetensors.index.json');
    const doc = JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> };
    const first = Object.keys(doc.weight_map)[0]!;
    for (const bad of ['..', `../${doc.weight_map[first]}`, 'x\u0000y']) {
      writeFileSync(index, JSON.stringify({ weight_map: { ...doc.weight_map, [first]: bad } }));
      expect(checkpointError(() => loadCheckpoint(fx.dir))).toMatch(/is not a file name in the checkpoint directory/);
    }
  });

  it('missing tensor and wrong shape name the tensor, shapes and file', async () => {
    const fx = await smallFixture();
    const file = path.join(fx.dir, 'model.safetensors');
    rewriteSafetensors(file, (ts) => ts.filter((t) => t.name !== 'model.language_model.layers.2.linear_attn.dt_bias'));
    expect(checkpointError(() => loadCheckpoint(fx.dir)))
      .toBe(`tensor model.language_model.layers.2.linear_attn.dt_bias is missing (expected shape [2]) in ${file}`);

    const fx2 = await smallFixture();
    const file2 = path.join(fx2.dir, 'model.safetensors');
    rewriteSafetensors(file2, (ts) => ts.map((t) => (t.name === 'model.language_model.layers.1.mlp.down_proj.weight' ? { ...t, shape: [512, 128] } : t)));
    expect(checkpointError(() => loadCheckpoint(fx2.dir)))
      .toBe(`${file2}: tensor model.language_model.layers.1.mlp.down_proj.weight has shape [512, 128], expected [128, 512]`);
  });

  it('a NaN or an infinity in a vector (a norm, the conv taps, a gate constant): refused at load, naming the tensor as the file does', async () => {
    const fx = await smallFixture();
    const file = path.join(fx.dir, 'model.safetensors');
    const bytes = readFileSync(file);
    const headerLen = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + headerLen).toString('utf8')) as Record<string, { dtype: string; data_offsets: [number, number] }>;
    const poke = (suffix: string, at: number, bits: number) => {
      const [name, e] = Object.entries(header).find(([k]) => k.endsWith(suffix))!;
      const copy = Buffer.from(bytes);
      const size = e.dtype === 'F32' ? 4 : 2;
      if (size === 4) copy.writeUInt32LE(bits, 8 + headerLen + e.data_offsets[0] + at * 4);
      else copy.writeUInt16LE(bits >>> 16, 8 + headerLen + e.data_offsets[0] + at * 2); // the top half of the f32 bits: bf16
      writeFileSync(file, copy);
      return name;
    };
    const norm = poke('layers.1.input_layernorm.weight', 5, 0x7fc00000);
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`tensor ${norm} in ${file}: element 5 is NaN (a damaged file: a vector's values are finite)`);
    const conv = poke('layers.0.linear_attn.conv1d.weight', 9, 0xff800000);
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`tensor ${conv} in ${file}: element 9 is infinite (a damaged file: a vector's values are finite)`);
    writeFileSync(file, bytes);
    expect(() => loadCheckpoint(fx.dir)).not.toThrow();
  });

  it('index naming a missing shard, and stray layers beyond the config', async () => {
    const fx = await smallFixture({ shards: 2 });
    const shard = path.join(fx.dir, 'model-00002-of-00002.safetensors');
    rmSync(shard);
    expect(checkpointError(() => loadCheckpoint(fx.dir))).toBe(`${shard}: shard named in model.safetensors.index.json does not exist`);

    const fx2 = await smallFixture();
    editConfig(fx2.dir, (c) => { c.text_config.num_hidden_layers = 3; c.text_config.layer_types = c.text_config.layer_types.slice(0, 3); });
    expect(checkpointError(() => loadCheckpoint(fx2.dir))).toMatch(/tensor model\.language_model\.layers\.3\.\S+ belongs to layer 3, but .*num_hidden_layers=3/);
    expect(existsSync(fx2.dir)).toBe(true);
  });
});
