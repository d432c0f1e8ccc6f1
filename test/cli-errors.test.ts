// Bad checkpoints through the real CLI: one clear line naming the file or tensor, a non-zero exit,
// never a crash (signals) or a hang.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanupAllFixtures, editConfig, nanFixture, nanLogitsError, rewriteSafetensors, SMALL_VOCAB, smallFixture, synthFixture } from './helpers/synth-fixture.js';

const run = promisify(execFile);
const BENCH = path.resolve('bin/bench.js');
afterAll(() => cleanupAllFixtures());

async function prompt(dir: string): Promise<{ code: number; stderr: string; signal: string | null }> {
  try {
    await run(process.execPath, [BENCH, 'prompt', '--model-path', dir, '--prompt-ids', '1,2,3', '--max-new-tokens', '1'], { timeout: 60_000 });
    return { code: 0, stderr: '', signal: null };
  } catch (err) {
    const e = err as { code?: number; stderr?: string; signal?: string | null };
    return { code: e.code ?? -1, stderr: e.stderr ?? '', signal: e.signal ?? null };
  }
}

function expectOneLineError(r: { code: number; stderr: string; signal: string | null }, mention: RegExp): void {
  expect(r.signal).toBeNull();
  expect(r.code).not.toBe(0);
  const lines = r.stderr.trim().split('\n');
  expect(lines.length, r.stderr).toBe(1);
  expect(lines[0]).toMatch(mention);
}

describe('bench prompt on bad checkpoints', () => {
  it('a chat template that does not parse stops --chat only (a raw text prompt does not use it)', async () => {
    const f = await synthFixture({ vision: false });
    const tc = path.join(f.dir, 'tokenizer_config.json');
    writeFileSync(tc, JSON.stringify({ ...JSON.parse(readFileSync(tc, 'utf8')), chat_template: '{% if %}' }));
    const raw = await bench(['prompt', '--model-path', f.dir, '--prompt', 'hello', '--max-new-tokens', '1']);
    expect(raw.code, raw.stderr).toBe(0);
    const chat = await bench(['prompt', '--model-path', f.dir, '--prompt', 'hello', '--max-new-tokens', '1', '--chat']);
    expect(chat.code, chat.stderr).toBe(2);
    expect(chat.stderr.trim().split('\n').pop()).toMatch(/^bench: --(chat|model-path): .*tokenizer_config\.json: chat template does not parse/);
  });

  it('names config.json when it is missing', async () => {
    const f = await smallFixture();
    rmSync(path.join(f.dir, 'config.json'));
    expectOneLineError(await prompt(f.dir), /config\.json/);
  });

  it('names the missing field of a config', async () => {
    const f = await smallFixture();
    editConfig(f.dir, (c) => { delete c.text_config.hidden_size; });
    expectOneLineError(await prompt(f.dir), /hidden_size/);
  });

  it('names a truncated safetensors file', async () => {
    const f = await smallFixture();
    const file = path.join(f.dir, 'model.safetensors');
    truncateSync(file, Math.floor(readFileSync(file).length / 2));
    expectOneLineError(await prompt(f.dir), /model\.safetensors/);
  });

  it('names a tensor with the wrong shape', async () => {
    const f = await smallFixture();
    const file = path.join(f.dir, 'model.safetensors');
    const buf = readFileSync(file);
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { shape: number[] }>;
    const name = 'model.language_model.layers.0.mlp.up_proj.weight';
    const [rows, cols] = header[name]!.shape;
    header[name]!.shape = [cols!, rows!];  // same byte count, transposed shape
    const text = JSON.stringify(header).padEnd(n, ' ');
    expect(Buffer.byteLength(text)).toBe(n);
    writeFileSync(file, Buffer.concat([buf.subarray(0, 8), Buffer.from(text), buf.subarray(8 + n)]));
    expectOneLineError(await prompt(f.dir), /up_proj/);
  });
});

async function bench(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string; signal: string | null }> {
  try {
    const r = await run(process.execPath, [BENCH, ...args], { timeout: 60_000, killSignal: 'SIGKILL', env: { ...process.env, ...env } });
    return { code: 0, stdout: r.stdout, stderr: r.stderr, signal: null };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; signal?: string | null };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '', signal: e.signal ?? null };
  }
}

/** The engine's error for a request whose logits hold NaN (it fails the request: no token is picked). */
const NAN_LOGITS_ERROR = nanLogitsError(0);

describe('bench prompt --logits-out beyond what one request may return', () => {
  it('is a usage error naming the flag, before the model loads (it was the engine\'s error, exit 1, after the load)', async () => {
    const ids = Array.from({ length: 2200 }, (_, i) => 100 + i).join(',');
    const r = await bench(['prompt', '--model-path', 'synthetic:tiny', '--prompt-ids', ids, '--max-new-tokens', '0',
      '--logits-out', path.join(os.tmpdir(), 'lumen-never-written.f32')]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n').at(-1)).toBe('bench: --logits-out: 2200 positions x vocabulary 248320 x 4 bytes is 2083 MiB, more than the 2048 MiB one request may return (at most 2162 positions: shorten the prompt or --max-new-tokens)');
  });
});

describe('bench prompt: what the prompt flags ask that cannot be had is a usage error naming the flag', () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'lumen-cli-prompt-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('past the model\'s positions (max_position_embeddings): the flag named, with the maximum and where it is written (it ran on)', async () => {
    const f = await smallFixture({ overrides: { maxPositionEmbeddings: 8 } });
    const cfg = path.join(f.dir, 'config.json');
    const out = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1,2,3', '--max-new-tokens', '6']);
    expect(out.code).toBe(2);
    expect(out.stderr.trim().split('\n')).toEqual([
      `bench: --max-new-tokens: the prompt's 3 tokens + 6 new need 9 positions, more than the model's maximum of 8 (max_position_embeddings in ${cfg}); give --max-new-tokens 5 or less`,
    ]);
    const long = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1,2,3,4,5,6,7,8,9', '--max-new-tokens', '0']);
    expect(long.code).toBe(2);
    expect(long.stderr.trim().split('\n')).toEqual([
      `bench: --prompt-ids: the prompt is 9 tokens, more than the model's maximum of 8 positions (max_position_embeddings in ${cfg})`,
    ]);
    const fits = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1,2,3', '--max-new-tokens', '5', '--ignore-eos']);
    expect(fits.code, fits.stderr).toBe(0);
    expect(fits.stdout.trim().split(' ')).toHaveLength(5);
    // The embedded model: the real Qwen3.5 maximum.
    const embedded = await bench(['prompt', '--prompt-ids', '1', '--max-new-tokens', '1073741824']);
    expect(embedded.code).toBe(2);
    expect(embedded.stderr.trim().split('\n').at(-1)).toMatch(/^bench: --max-new-tokens: the prompt's 1 token \+ 1073741824 new need 1073741825 positions, more than the model's maximum of 262144 \(max_position_embeddings in .*config\.json\); give --max-new-tokens 262143 or less$/);
    // A config that does not state it: the default, named as such (it was reported as the file's).
    editConfig(f.dir, (c) => { delete c.text_config.max_position_embeddings; delete c.max_position_embeddings; });
    const dflt = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1', '--max-new-tokens', '1073741824']);
    expect(dflt.code).toBe(2);
    expect(dflt.stderr.trim().split('\n').at(-1)).toBe(`bench: --max-new-tokens: the prompt's 1 token + 1073741824 new need 1073741825 positions, more than the model's maximum of 262144 ` +
      `(the default 262144: ${cfg} does not state max_position_embeddings); give --max-new-tokens 262143 or less`);
  });

  it('--max-new-tokens past any KV cache: the flag named (the engine\'s message said to give less KV memory, exit 1)', async () => {
    // A model built for more positions than any KV cache holds.
    const f = await smallFixture({ overrides: { maxPositionEmbeddings: 2 ** 31 - 1 } });
    const r = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1', '--max-new-tokens', '1073741824']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n').at(-1)).toMatch(/^bench: --max-new-tokens: one sequence of 1073741825 tokens \(the prompt's 1 \+ 1073741824 new\) needs a KV cache that cannot be had \(.*\); lower --max-new-tokens$/);
    // A --kv-memory too small for the sequence: that flag is named, whatever --max-new-tokens says.
    const small = await bench(['prompt', '--prompt-ids', '1', '--max-new-tokens', '4000', '--kv-memory', '64KiB']);
    expect(small.code).toBe(2);
    expect(small.stderr.trim().split('\n').at(-1)).toMatch(/^bench: --kv-memory: KV pool too small: /);
  });

  it('a KV cache the flags ask for that cannot be had: serve exits 2 naming the flag, a sweep row names it (both quoted the engine alone)', async () => {
    const serve = await bench(['serve', '--port', '0', '--kv-memory', '64KiB']);
    expect(serve.code).toBe(2);
    expect(serve.stderr.trim().split('\n').at(-1)).toMatch(/^bench: --kv-memory: KV pool too small: /);
    const sweep = await bench(['--cells', '8:4', '--concurrency', '1', '--warmup', '0', '--kv-memory', '64KiB']);
    expect(sweep.code).toBe(3);
    expect(sweep.stdout).toContain('model failed to load: --kv-memory: KV pool too small: ');
  });

  it('what the loader left out is shown: the sweep\'s header and JSON, serve\'s header, convert\'s summary (each was silent)', async () => {
    const f = await synthFixture(); // with a tokenizer: serve needs one
    rewriteSafetensors(path.join(f.dir, 'model.safetensors'), (ts) => [...ts,
      { name: 'extra_probe.weight', dtype: 'BF16', shape: [2, 2], data: new Uint8Array(8) }]);
    const note = 'model: ignored 1 unrecognised tensor(s), e.g. extra_probe.weight';
    const out = path.join(tmp, 'notes-run');
    const sweep = await bench(['--model-path', f.dir, '--cells', '8:2', '--concurrency', '1', '--warmup', '0', '--output', out]);
    expect(sweep.code).toBe(0);
    expect(sweep.stderr).toContain(note);
    expect((JSON.parse(readFileSync(`${out}.json`, 'utf8')) as { notes: string[] }).notes).toContain(note);
    const serve = await bench(['serve', '--model-path', f.dir, '--port', '0', '--kv-memory', '64KiB']);
    expect(serve.stderr).toContain(note); // the header, before the load fails on purpose
    const conv = await bench(['convert', '--model-path', f.dir, '--out', path.join(tmp, 'notes.gguf'), '--dtype', 'bf16']);
    expect(conv.code).toBe(0);
    expect(conv.stderr).toContain(`convert: ${note}`);
  });

  it('a model whose logits are NaN: exit 1 saying so, no tokens printed (it printed token 0 every time, exit 0)', async () => {
    const f = await nanFixture();
    const r = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1,2', '--max-new-tokens', '2']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n').at(-1)).toBe(`bench: generation failed: ${NAN_LOGITS_ERROR}`);
    // Sampling (top-k on the pick's path, and top-k 0: the sampler's whole-row path) fails alike.
    for (const extra of [['--temperature', '0.8', '--top-k', '5'], ['--temperature', '0.8']]) {
      const s = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1,2', '--max-new-tokens', '2', ...extra]);
      expect(s.code, extra.join(' ')).toBe(1);
      expect(s.stderr.trim().split('\n').at(-1)).toBe(`bench: generation failed: ${NAN_LOGITS_ERROR}`);
    }
    // --logits-out keeps the rows that show the NaNs.
    const out = path.join(tmp, 'nan-logits.f32');
    const w = await bench(['prompt', '--model-path', f.dir, '--prompt-ids', '1,2', '--max-new-tokens', '2', '--logits-out', out]);
    expect(w.code).toBe(1);
    expect(w.stderr.trim().split('\n').at(-1)).toBe(`bench: generation failed: ${NAN_LOGITS_ERROR} (--logits-out holds the 2 rows computed)`);
    const rows = new Float32Array(readFileSync(out).buffer.slice(0));
    expect(rows.length).toBe(2 * SMALL_VOCAB.vocabSize!);
    expect(rows.every((v) => Number.isNaN(v))).toBe(true);
  });

  it('a sweep on a model whose logits are NaN: each row an error saying so, exit 3 (it timed token 0 every time)', async () => {
    const f = await nanFixture();
    const r = await bench(['--model-path', f.dir, '--cells', '8:4', '--concurrency', '1,2', '--warmup', '0']);
    expect(r.code).toBe(3);
    const rows = r.stdout.trim().split('\n').slice(1);
    expect(rows.length).toBe(2);
    for (const row of rows) {
      expect(row).toContain('error');
      expect(row).toContain('not all finite (NaN or infinite)');
    }
  });

  it('--logits-out naming one of the model\'s files (directly or through a link): exit 2, the model untouched (it was overwritten, exit 0)', async () => {
    const dir = path.join(tmp, 'model');
    expect((await bench(['synth', '--preset', 'tiny', '--out', dir])).code).toBe(0);
    const shard = path.join(dir, 'model.safetensors');
    const before = readFileSync(shard);
    const link = path.join(tmp, 'logits.f32');
    symlinkSync(path.join(dir, 'tokenizer.json'), link);
    for (const [out, clash] of [[shard, shard], [link, path.join(dir, 'tokenizer.json')]] as const) {
      const r = await bench(['prompt', '--model-path', dir, '--prompt-ids', '1,2', '--max-new-tokens', '1', '--logits-out', out]);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n').at(-1)).toBe(`bench: --logits-out ${out}: the same file as ${clash}, which the model is read from; choose another path`);
    }
    expect(readFileSync(shard).equals(before)).toBe(true);
    // A name the loader would read there once written: the logits would be read back as the model's.
    rmSync(path.join(dir, 'chat_template.jinja'), { force: true });
    const gguf = path.join(tmp, 'gguf-dir');
    mkdirSync(gguf);
    expect((await bench(['convert', '--model-path', dir, '--out', path.join(gguf, 'm-BF16.gguf')])).code).toBe(0);
    for (const [model, out] of [[dir, path.join(dir, 'chat_template.jinja')], [dir, path.join(dir, 'extra.safetensors')],
      [gguf, path.join(gguf, 'tokenizer.json')], [gguf, path.join(gguf, 'logits.gguf')]] as const) {
      const r = await bench(['prompt', '--model-path', model, '--prompt-ids', '1,2', '--max-new-tokens', '1', '--logits-out', out]);
      expect(r.code, out).toBe(2);
      expect(r.stderr.trim().split('\n').at(-1)).toMatch(/^bench: --logits-out .*: .* in the model's directory .* is a name its loader reads as part of the model; choose another name or directory$/);
      expect(existsSync(out), out).toBe(false);
    }
    const fine = await bench(['prompt', '--model-path', gguf, '--prompt-ids', '1,2', '--max-new-tokens', '1', '--logits-out', path.join(gguf, 'logits.f32')]);
    expect(fine.code, fine.stderr).toBe(0);
  }, 120_000);

  it('--chat on a model without a chat template: exit 2 naming --chat and the model (it was exit 1)', async () => {
    const dir = path.join(tmp, 'no-template');
    expect((await bench(['synth', '--preset', 'tiny', '--out', dir])).code).toBe(0);
    const tc = path.join(dir, 'tokenizer_config.json');
    const cfg = JSON.parse(readFileSync(tc, 'utf8')) as Record<string, unknown>;
    delete cfg.chat_template;
    writeFileSync(tc, JSON.stringify(cfg));
    rmSync(path.join(dir, 'chat_template.jinja'), { force: true });
    const r = await bench(['prompt', '--model-path', dir, '--chat', '--prompt', 'hi', '--max-new-tokens', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n').at(-1)).toMatch(/^bench: --chat: .*no-template: no chat template/);
  });
});

describe('output prefixes and files in a directory that does not exist yet are made (the docs\' out/run on a fresh clone)', () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'lumen-cli-out-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('bench --output out/run, --memory-stages, bench prompt --logits-out and bench report --out pages/run.html make their directories', async () => {
    const prefix = path.join(tmp, 'out', 'nested', 'run');
    const r = await bench(['--model-path', 'synthetic:tiny', '--cells', '8:2', '--concurrency', '1', '--warmup', '0', '-q', '--output', prefix]);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(`${prefix}.json`) && existsSync(`${prefix}.html`)).toBe(true);
    const page = path.join(tmp, 'pages', 'a', 'run.html');
    expect((await bench(['report', `${prefix}.json`, '--out', page])).code).toBe(0);
    expect(existsSync(page)).toBe(true);
    // A report that is not there makes no directory.
    const none = await bench(['report', path.join(tmp, 'nope.json'), '--out', path.join(tmp, 'never', 'x.html')]);
    expect(none.code).toBe(2);
    expect(none.stderr.trim()).toMatch(/nope\.json: no such file$/);
    expect(existsSync(path.join(tmp, 'never'))).toBe(false);
    // A sweep refused by a usage check that needs the device (--kv-memory 1.0 on the CPU) makes no directory.
    const refused = await bench(['--model-path', 'synthetic:tiny', '--cells', '8:2', '--concurrency', '1', '--device', 'cpu',
      '--kv-memory', '1.0', '--output', path.join(tmp, 'refused', 'run')]);
    expect(refused.code).toBe(2);
    expect(refused.stderr.trim()).toMatch(/^bench: --kv-memory: /);
    expect(existsSync(path.join(tmp, 'refused'))).toBe(false);
    // --memory-stages and bench prompt --logits-out make theirs too, when they write (beside --output's).
    const stages = path.join(tmp, 'out2', 'a', 'stages.jsonl');
    const withStages = await bench(['--model-path', 'synthetic:tiny', '--cells', '8:2', '--concurrency', '1', '--warmup', '0', '-q',
      '--output', path.join(tmp, 'out2', 'run'), '--memory-stages', stages]);
    expect(withStages.code, withStages.stderr).toBe(0);
    expect(readFileSync(stages, 'utf8').trim().split('\n').length).toBeGreaterThan(0);
    const logits = path.join(tmp, 'logits', 'b', 'x.bin');
    const prompted = await bench(['prompt', '--model-path', 'synthetic:tiny', '--prompt-ids', '1,2,3', '--max-new-tokens', '1', '--logits-out', logits]);
    expect(prompted.code, prompted.stderr).toBe(0);
    expect(statSync(logits).size).toBeGreaterThan(0);
    // A path that is a directory is still refused.
    const dir = await bench(['report', `${prefix}.json`, '--out', tmp]);
    expect(dir.code).toBe(2);
    expect(dir.stderr.trim()).toMatch(/^bench: --out: .* is a directory, not a file$/);
  });
});

describe('output paths and flags that do not apply: exit 2 naming the flag, before any work', () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'lumen-cli-errors-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));
  const file = path.join(tmp, 'a-file');
  writeFileSync(file, 'x');

  it.each([
    [['synth', '--preset', 'tiny', '--out', file], /^bench: --out: .*a-file is a file, not a directory$/],
    [['synth', '--preset', 'tiny', '--out', path.join(file, 'sub')], /^bench: --out: .*a-file is a file, not a directory$/],
    // Node's recursive mkdir spins for ever here; each level is made on its own instead.
    [['synth', '--preset', 'tiny', '--out', '/proc/lumen-no-such-dir/x'], /^bench: --out: cannot create \/proc\/lumen-no-such-dir /],
    [['convert', '--model-path', file, '--out', path.join(tmp, 'x.gguf'), '--dtype', 'f32'], /^bench: --model-path .*a-file: a file, not a directory/],
    [['prompt', '--prompt', 'hi', '--think'], /^bench: --think applies with --chat/],
    // commander's own usage errors read as the others: one line after `bench:`.
    [['--bogus'], /^bench: unknown option '--bogus'$/],
    // A command without -v: its errors stay plain lines (-v is not its flag).
    [['synth', '-v'], /^bench: unknown option '-v'$/],
    [['--ouput', 'x'], /^bench: unknown option '--ouput' \(did you mean --output\?\)$/],
    [['prompt', '--top-k'], /^bench: option '--top-k <k>' argument missing$/],
    // A value-taking flag followed by a flag: commander took the flag for the value.
    [['--api', '--cells', '16:4'], /^bench: --api needs a value, but the next argument is the flag --cells \(give --api VALUE\)$/],
    [['--concurrency', '--cells=16:4'], /^bench: --concurrency needs a value, but the next argument is the flag --cells=16:4 \(give --concurrency VALUE\)$/],
    [['prompt', '--max-new-tokens', '-h'], /^bench: --max-new-tokens needs a value, but the next argument is the flag -h \(give --max-new-tokens VALUE\)$/],
    [['serve', '--port', '--host', '0.0.0.0'], /^bench: --port needs a value, but the next argument is the flag --host/],
    // A value-taking flag given twice: the last had silently won.
    [['--cells', '512:64', '--concurrency', '1', '--cells', '16:4'], /^bench: --cells is given twice \(the second would silently replace the first\): give it once$/],
    [['prompt', '--prompt', 'a', '--prompt=b'], /^bench: --prompt is given twice /],
    // The values are not printed: one may be a secret.
    [['serve', '--api-key', 's3cretKEY', '--api-key', 'other'], /^bench: --api-key is given twice \(the second would silently replace the first\): give it once$/],
    [['prompt', '--prompt', 'hi', '--logits-out', path.join(file, 'x.bin')], /^bench: --logits-out: .*a-file is a file, not a directory$/],
    [['--model-path', 'synthetic:tiny', '--memory-stages', path.join(file, 'sub', 's.jsonl')], /^bench: --memory-stages: .*a-file is a file, not a directory$/],
    [['prompt', '--prompt', 'hi', '--logits-out', tmp], /^bench: --logits-out: .* is a directory, not a file$/],
    // `-` made a file named `-` in the working directory.
    [['prompt', '--prompt', 'hi', '--logits-out', '-'], /^bench: --logits-out -: writes a file, not stdout; give the file's name$/],
    [['--model-path', 'synthetic:tiny', '--memory-stages', '-'], /^bench: --memory-stages -: writes a file, not stdout; give the file's name$/],
    // An empty path had been the working directory.
    [['prompt', '--model-path', '', '--prompt', 'hi'], /^bench: --model-path: empty \(give a checkpoint directory, a \.gguf file or synthetic:<preset>\)$/],
    // A directory by its form, not there yet: before the model loads (it ran, then failed with EISDIR).
    [['prompt', '--prompt', 'hi', '--logits-out', `${path.join(tmp, 'not-yet')}/`], /^bench: --logits-out .*not-yet\/: names a directory, not a file; give the file's name too$/],
  ])('%j', async (args, message) => {
    const r = await bench(args as string[]);
    expect(r.signal).toBeNull();
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr.trim()).toMatch(message as RegExp);
  });
});

describe('-v: a usage error is a JSON log line too', () => {
  it.each([
    [['-v', '--cells', 'bad'], "--cells: 'bad' is not an isl:osl pair (e.g. 128:128)"],
    [['-vv', '--ouput', 'x'], "unknown option '--ouput' (did you mean --output?)"],
    [['-qv', '--cells', 'bad'], "--cells: 'bad' is not an isl:osl pair (e.g. 128:128)"],
    [['serve', '--verbose', '--port', '--host'], '--port needs a value, but the next argument is the flag --host (give --port VALUE)'],
  ])('%j', async (args, msg) => {
    const r = await bench(args as string[]);
    expect(r.code, r.stderr).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'error', tool: 'lumen-bench', event: 'usage_error', msg });
  });

  it('any other error too (the engine not built: exit 1)', async () => {
    const r = await bench(['-v', '--cells', '8:2', '--concurrency', '1'], { LUMEN_ADDON: '/nonexistent/lumen_engine.node' });
    expect(r.code, r.stderr).toBe(1);
    const last = JSON.parse(r.stderr.trim().split('\n').pop()!);
    expect(last).toMatchObject({ level: 'error', event: 'error' });
    expect(last.msg).toMatch(/^native engine not built: \/nonexistent\/lumen_engine\.node is missing/);
    for (const l of r.stderr.trim().split('\n')) expect(() => JSON.parse(l), l).not.toThrow();
  });
});

describe('bench prompt with an empty prompt text', () => {
  it('names the text, not a --prompt flag that was not given (exit 2)', async () => {
    const r = await bench(['prompt', '']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n').pop()).toBe('bench: prompt: the prompt text "" encodes to no tokens');
  });
});
