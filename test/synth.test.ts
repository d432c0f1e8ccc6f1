// Synthetic checkpoints: layout, determinism, weight statistics, the CLI command, and the
// embedded default model.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { registerSynth } from '../src/cli/cmd-synth.js';
import { UsageError } from '../src/util/usage-error.js';
import { countParams, loadCheckpoint } from '../src/model/checkpoint.js';
import { EMBEDDED_MODEL_NAME, embeddedModelDir, ensureEmbeddedModel } from '../src/model/embedded.js';
import { DTYPE_SIZE, f32ToBf16, readSafetensorsHeader, readTensorBytes, readTensorF32 } from '../src/model/safetensors.js';
import type { TensorRef } from '../src/model/types.js';
import { cleanupAllFixtures, smallFixture, SMALL_VOCAB, tempDir } from './helpers/synth-fixture.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import { loadTokenizer } from '../src/model/tokenizer.js';

afterAll(() => cleanupAllFixtures());

function sha(file: string): string {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

function stats(a: Float32Array): { mean: number; std: number; min: number; max: number } {
  let s = 0, s2 = 0, min = Infinity, max = -Infinity;
  for (const v of a) { s += v; s2 += v * v; if (v < min) min = v; if (v > max) max = v; }
  const mean = s / a.length;
  return { mean, std: Math.sqrt(Math.max(0, s2 / a.length - mean * mean)), min, max };
}

describe('synthetic checkpoint layout', () => {
  it('writes the real directory layout and config.json', async () => {
    const fx = await smallFixture({ shards: 2, mtp: true });
    const files = readdirSync(fx.dir).sort();
    expect(files).toEqual([
      'config.json', 'generation_config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors',
      'model.safetensors.index.json',
    ]);
    const cfg = JSON.parse(readFileSync(path.join(fx.dir, 'config.json'), 'utf8'));
    expect(cfg.architectures).toEqual(['Qwen3_5ForConditionalGeneration']);
    expect(cfg.model_type).toBe('qwen3_5');
    expect(cfg.text_config.model_type).toBe('qwen3_5_text');
    expect(cfg.text_config.layer_types).toEqual(['linear_attention', 'linear_attention', 'linear_attention', 'full_attention']);
    expect(cfg.text_config.rope_parameters).toMatchObject({ rope_theta: 1e7, partial_rotary_factor: 0.25, mrope_section: [11, 11, 10] });
    expect(cfg.text_config.head_dim).toBe(256);
    expect(cfg.vision_config.model_type).toBe('qwen3_5');
    expect([cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id]).toEqual([248056, 248057, 248053, 248054]);
    const gen = JSON.parse(readFileSync(path.join(fx.dir, 'generation_config.json'), 'utf8'));
    expect(gen.eos_token_id).toEqual([248046, 248044]);
    const index = JSON.parse(readFileSync(path.join(fx.dir, 'model.safetensors.index.json'), 'utf8'));
    const names = Object.keys(index.weight_map);
    expect(names).toContain('model.language_model.embed_tokens.weight');
    expect(names).toContain('model.visual.patch_embed.proj.weight');
    expect(names.filter((n) => n.startsWith('mtp.')).length).toBe(15);
    expect(names).not.toContain('lm_head.weight');
    // Every tensor starts at a multiple of its element size, and headers are 8-byte aligned.
    for (const f of files.filter((x) => x.endsWith('.safetensors'))) {
      const h = readSafetensorsHeader(path.join(fx.dir, f));
      expect(h.dataStart % 8).toBe(0);
      for (const e of h.tensors.values()) expect(e.offset % DTYPE_SIZE[e.dtype], e.name).toBe(0);
    }
    expect(fx.result.paramCount).toBe(countParams(fx.result.config).text);
    expect(fx.result.mtpParamCount).toBe(countParams(fx.result.config).mtp);
  });

  it('rewriting a directory with fewer shards leaves no stale shards or index', async () => {
    const fx = await smallFixture({ shards: 3 });
    const again = await writeSynthCheckpoint({ preset: 'tiny', out: fx.dir, seed: 1, tokenizer: false, overrides: SMALL_VOCAB });
    expect(readdirSync(fx.dir).sort()).toEqual(['config.json', 'generation_config.json', 'model.safetensors']);
    expect(loadCheckpoint(fx.dir).shards).toEqual([path.join(fx.dir, 'model.safetensors')]);
    expect(again.files.length).toBe(3);
  });

  it('is deterministic for a seed and differs across seeds', async () => {
    const a = await smallFixture({ seed: 11 });
    const b = await smallFixture({ seed: 11 });
    const c = await smallFixture({ seed: 12 });
    const file = (d: string) => path.join(d, 'model.safetensors');
    expect(sha(file(a.dir))).toBe(sha(file(b.dir)));
    expect(sha(file(a.dir))).not.toBe(sha(file(c.dir)));
  });

  it('bf16 output is the f32 values rounded to nearest even', async () => {
    const f32 = loadCheckpoint((await smallFixture({ seed: 3, dtype: 'f32' })).dir);
    const bf16 = loadCheckpoint((await smallFixture({ seed: 3, dtype: 'bf16' })).dir);
    expect(f32.dtype).toBe('F32');
    for (const name of ['embed_tokens.weight', 'layers.0.linear_attn.in_proj_qkv.weight', 'layers.0.linear_attn.dt_bias', 'norm.weight', 'layers.3.self_attn.k_norm.weight']) {
      const ref = f32.tensors.get(name)!;
      const want = readTensorF32(ref);
      const got = readTensorBytes(bf16.tensors.get(name)!);
      expect(bf16.tensors.get(name)!.dtype).toBe('BF16');
      let mismatches = 0;
      for (let i = 0; i < want.length; i++) if (got.readUInt16LE(2 * i) !== f32ToBf16(want[i]!)) mismatches++;
      expect(mismatches, name).toBe(0);
    }
    // A_log stays F32 in a bf16 checkpoint and is bit-identical to the f32 checkpoint's.
    expect(readTensorBytes(bf16.tensors.get('layers.1.linear_attn.A_log')!).equals(readTensorBytes(f32.tensors.get('layers.1.linear_attn.A_log')!))).toBe(true);
  });

  it('weights have the documented scales', async () => {
    const ck = loadCheckpoint((await smallFixture({ seed: 2, dtype: 'f32' })).dir);
    const t = (n: string) => readTensorF32(ck.tensors.get(n) as TensorRef);
    const H = 128;
    const emb = t('embed_tokens.weight');
    const e = stats(emb);
    expect(Math.sqrt(e.std ** 2 + e.mean ** 2)).toBeGreaterThan(0.9 * 4 / Math.sqrt(H));
    expect(Math.sqrt(e.std ** 2 + e.mean ** 2)).toBeLessThan(1.1 * 4 / Math.sqrt(H));
    const fn = stats(t('norm.weight'));
    expect(Math.abs(fn.mean)).toBeLessThan(0.03);
    expect(fn.std).toBeLessThan(0.08);
    const ln = stats(t('layers.0.input_layernorm.weight'));
    expect(Math.abs(ln.mean)).toBeLessThan(0.02);
    expect(ln.std).toBeGreaterThan(0.03);
    expect(ln.std).toBeLessThan(0.07);
    const gn = stats(t('layers.0.linear_attn.norm.weight'));
    expect(Math.abs(gn.mean - 1)).toBeLessThan(0.02);
    const alog = stats(t('layers.0.linear_attn.A_log'));
    expect(alog.min).toBeGreaterThanOrEqual(0);
    expect(alog.max).toBeLessThanOrEqual(Math.log(16));
    for (const v of t('layers.2.linear_attn.dt_bias')) {
      const dt = Math.log1p(Math.exp(v));
      expect(dt).toBeGreaterThanOrEqual(1e-3 * 0.999);
      expect(dt).toBeLessThanOrEqual(0.1 * 1.001);
    }
    const conv = stats(t('layers.1.linear_attn.conv1d.weight'));
    expect(conv.min).toBeGreaterThanOrEqual(-0.5);
    expect(conv.max).toBeLessThanOrEqual(0.5);
    expect(conv.std).toBeCloseTo(1 / Math.sqrt(12), 1);
    expect(stats(t('layers.3.self_attn.q_proj.weight')).std).toBeCloseTo(1 / Math.sqrt(H), 2);
    expect(stats(t('layers.3.self_attn.o_proj.weight')).std).toBeCloseTo(1.5 / Math.sqrt(512), 2);
    expect(stats(t('layers.0.mlp.down_proj.weight')).std).toBeCloseTo(1.5 / Math.sqrt(512), 2);
    expect(stats(t('layers.0.linear_attn.in_proj_a.weight')).std).toBeCloseTo(0.5 / Math.sqrt(H), 2);
  });
});

describe('bench synth', () => {
  function program(): { cmd: Command; code: () => number } {
    let code = -1;
    const cmd = new Command('bench').exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
    registerSynth(cmd, (c) => { code = c; });
    return { cmd, code: () => code };
  }

  it('writes a checkpoint with override flags', async () => {
    const out = path.join(tempDir('cli'), 'm');
    const p = program();
    await p.cmd.parseAsync(['node', 'bench', 'synth', '--preset', 'tiny', '--out', out, '--shards', '2', '--untied',
      '--linear-value-heads', '4', '--layers', '5', '--seed', '9', '--no-vision']);
    expect(p.code()).toBe(0);
    const ck = loadCheckpoint(out);
    expect(ck.config.numLayers).toBe(5);
    expect(ck.config.layerTypes[3]).toBe('full_attention');
    expect(ck.config.linearNumValueHeads).toBe(4);
    expect(ck.config.tieWordEmbeddings).toBe(false);
    expect(ck.tensors.has('lm_head.weight')).toBe(true);
    expect(ck.shards.length).toBe(2);
    expect(ck.notes.join(' ')).not.toMatch(/vision/);
    expect(existsSync(path.join(out, 'tokenizer.json'))).toBe(true);
  });

  it('rejects bad values with a UsageError naming the flag', async () => {
    const out = path.join(tempDir('cli'), 'm');
    const cases: Array<[string[], RegExp]> = [
      [['--preset', 'huge', '--out', out], /--preset/],
      [['--out', out], /--preset is required/],
      [['--preset', 'tiny'], /--out is required/],
      [['--preset', 'tiny', '--out', out, '--dtype', 'f16'], /--dtype/],
      [['--preset', 'tiny', '--out', out, '--seed', 'x'], /--seed/],
      [['--preset', 'tiny', '--out', out, '--shards', '0'], /--shards/],
      [['--preset', 'tiny', '--out', out, '--linear-value-heads', '3'], /--linear-value-heads \(linear_num_value_heads\) \(3\) must be a multiple of --linear-key-heads \(2\)/],
      [['--preset', 'tiny', '--out', out, '--heads', '3', '--kv-heads', '2'], /--heads/],
      [['--preset', 'tiny', '--out', out, '--tied', '--untied'], /--tied and --untied/],
      // 32 bits, as every --seed: 4294967296 had written the weights of seed 668265263.
      [['--preset', 'tiny', '--out', out, '--seed', '4294967296'], /^--seed: 4294967296 is too large \(at most 4294967295\)$/],
    ];
    for (const [args, re] of cases) {
      const p = program();
      const err = await p.cmd.parseAsync(['node', 'bench', 'synth', ...args]).then(() => null, (e: unknown) => e);
      expect(err, args.join(' ')).toBeInstanceOf(UsageError);
      expect((err as Error).message, args.join(' ')).toMatch(re);
    }
    expect(existsSync(out)).toBe(false);
  });
});

describe('bench synth into a directory', () => {
  const run = async (args: string[]) => {
    let code = -1;
    const cmd = new Command('bench').exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
    registerSynth(cmd, (c) => { code = c; });
    const err = await cmd.parseAsync(['node', 'bench', 'synth', ...args]).then(() => null, (e: unknown) => e);
    return { code, err };
  };

  it('a chat_template.jinja there is a checkpoint file: refused without --force, removed with it (it replaced the template written)', async () => {
    const out = path.join(tempDir('cli'), 'tpl');
    const a = await run(['--preset', 'TINY', '--out', out, '--no-vision']); // any case, as synthetic:<preset>
    expect(a.err).toBeNull();
    const chat = async () => (await loadTokenizer(out)).applyChatTemplate([{ role: 'user', content: 'Hi' }], { addGenerationPrompt: true });
    const rendered = await chat();
    expect(rendered).toContain('<|im_start|>user');
    writeFileSync(path.join(out, 'chat_template.jinja'), '{{ "BROKEN" }}');
    const b = await run(['--preset', 'tiny', '--out', out, '--seed', '3']);
    expect((b.err as Error).message).toBe(`--out: ${out} already holds a checkpoint (chat_template.jinja); pass --force to overwrite`);
    const fresh = path.join(tempDir('cli'), 'only-tpl');
    mkdirSync(fresh);
    writeFileSync(path.join(fresh, 'chat_template.jinja'), '{{ "BROKEN" }}');
    expect(((await run(['--preset', 'tiny', '--out', fresh])).err as Error).message).toMatch(/already holds a checkpoint \(chat_template\.jinja\)/);
    const c = await run(['--preset', 'tiny', '--out', out, '--seed', '3', '--force', '--no-vision']);
    expect(c.err).toBeNull();
    expect(existsSync(path.join(out, 'chat_template.jinja'))).toBe(false);
    expect(await chat()).toBe(rendered);
  });

  it('a directory that takes no new files: a usage error naming --out before anything is written', async () => {
    if (!existsSync('/proc/self')) return; // no /proc: nothing here refuses root
    const r = await run(['--preset', 'tiny', '--out', '/proc/self']);
    expect(r.err).toBeInstanceOf(UsageError);
    expect((r.err as Error).message).toMatch(/^--out: cannot create files in \/proc\/self \(/);
  });
});

describe('more shards than tensors', () => {
  it('bench synth: a usage error naming --shards before --out is made or its checkpoint removed (--force)', async () => {
    const fx = await smallFixture();
    const before = Object.fromEntries(readdirSync(fx.dir).map((f) => [f, sha(path.join(fx.dir, f))]));
    const fresh = path.join(tempDir('cli'), 'new', 'm');
    for (const args of [['--out', fx.dir, '--force'], ['--out', fresh]]) {
      let code = -1;
      const cmd = new Command('bench').exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
      registerSynth(cmd, (c) => { code = c; });
      const err = await cmd.parseAsync(['node', 'bench', 'synth', '--preset', 'tiny', '--shards', '100', ...args]).then(() => null, (e: unknown) => e);
      expect(err, args.join(' ')).toBeInstanceOf(UsageError);
      expect((err as Error).message).toBe('--shards: 100 shards, but this checkpoint has only 57 tensors (at most one shard per tensor)');
      expect(code).toBe(-1);
    }
    expect(Object.fromEntries(readdirSync(fx.dir).map((f) => [f, sha(path.join(fx.dir, f))]))).toEqual(before);
    expect(existsSync(path.dirname(fresh))).toBe(false);
  });

  it('writeSynthCheckpoint refuses them before it touches the directory', async () => {
    const fx = await smallFixture();
    const before = readdirSync(fx.dir).sort();
    await expect(writeSynthCheckpoint({ preset: 'tiny', out: fx.dir, shards: 56, vision: false, tokenizer: false, overrides: SMALL_VOCAB }))
      .rejects.toThrow('synth: 56 shards but only 55 tensors');
    expect(readdirSync(fx.dir).sort()).toEqual(before);
    const fresh = path.join(tempDir('lib'), 'm');
    await expect(writeSynthCheckpoint({ preset: 'tiny', out: fresh, shards: 58 })).rejects.toThrow('synth: 58 shards but only 57 tensors');
    expect(existsSync(fresh)).toBe(false);
  });
});

describe('embedded model', () => {
  const saved = process.env.LUMEN_CACHE_DIR;
  afterEach(() => {
    if (saved === undefined) delete process.env.LUMEN_CACHE_DIR;
    else process.env.LUMEN_CACHE_DIR = saved;
  });

  it('is created once (atomically) and reused', async () => {
    const cache = tempDir('cache');
    process.env.LUMEN_CACHE_DIR = cache;
    expect(embeddedModelDir()).toBe(path.join(cache, EMBEDDED_MODEL_NAME));
    const [a, b] = await Promise.all([ensureEmbeddedModel(), ensureEmbeddedModel()]);
    expect(a).toBe(path.join(cache, EMBEDDED_MODEL_NAME));
    expect(b).toBe(a);
    expect(readdirSync(cache)).toEqual([EMBEDDED_MODEL_NAME]); // no temp dirs left behind
    const weights = path.join(a, 'model.safetensors');
    const mtime = statSync(weights).mtimeMs;
    const ck = loadCheckpoint(a);
    expect(ck.config.hiddenSize).toBe(128);
    expect(ck.config.vocabSize).toBe(248320);
    expect(ck.dtype).toBe('BF16');
    expect(await ensureEmbeddedModel()).toBe(a);
    expect(statSync(weights).mtimeMs).toBe(mtime);

    // A directory missing files (not ours) is replaced by a complete one with the same content.
    const hash = sha(weights);
    rmSync(path.join(a, 'tokenizer.json'));
    expect(await ensureEmbeddedModel()).toBe(a);
    expect(existsSync(path.join(a, 'tokenizer.json'))).toBe(true);
    expect(sha(weights)).toBe(hash);

    // A file damaged since it was written (truncated) is written again, not loaded: its size is not the one recorded.
    truncateSync(weights, 1_000_000);
    expect(await ensureEmbeddedModel()).toBe(a);
    expect(sha(weights)).toBe(hash);
    expect(readdirSync(cache)).toEqual([EMBEDDED_MODEL_NAME]);
  });

  it('a cache directory that cannot be made is a usage error naming LUMEN_CACHE_DIR (under /proc Node\'s recursive mkdir spun for ever)', async () => {
    const file = path.join(tempDir('cachefile'), 'a-file');
    writeFileSync(file, 'x');
    process.env.LUMEN_CACHE_DIR = path.join(file, 'cache');
    await expect(ensureEmbeddedModel()).rejects.toThrow(new UsageError(`LUMEN_CACHE_DIR=${path.join(file, 'cache')}: ${file} is a file, not a directory`));
    const dangling = path.join(tempDir('cachelink'), 'link');
    symlinkSync(path.join(path.dirname(dangling), 'missing'), dangling);
    process.env.LUMEN_CACHE_DIR = path.join(dangling, 'cache');
    await expect(ensureEmbeddedModel()).rejects.toThrow(new UsageError(`LUMEN_CACHE_DIR=${path.join(dangling, 'cache')}: cannot create ${dangling} (a symbolic link to a missing target)`));
    if (existsSync('/proc/self')) {
      process.env.LUMEN_CACHE_DIR = '/proc/lumen-no-such-dir/cache';
      await expect(ensureEmbeddedModel()).rejects.toThrow(/^LUMEN_CACHE_DIR=\/proc\/lumen-no-such-dir\/cache: cannot create \/proc\/lumen-no-such-dir /);
    }
  });

  it('defaults to <repo>/.models when LUMEN_CACHE_DIR is unset', () => {
    delete process.env.LUMEN_CACHE_DIR;
    expect(embeddedModelDir()).toMatch(/[/\\]\.models[/\\]embedded-tiny-v2$/);
  });
});
