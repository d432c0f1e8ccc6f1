// GGUF files as models (src/model/gguf-checkpoint.ts, model-path.ts, gguf-tokenizer.ts): choosing a
// file by --quant, the manifest and config from the qwen35 metadata, the weight format for the
// reports, the tokenizer from tokenizer.ggml.* (the same ids as tokenizer.json), split files, and
// the errors (unsupported type, missing split part, none or several files for --quant).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertCheckpoint } from '../src/convert/convert.js';
import { GgufWriter, type GgufScalarType } from '../src/convert/gguf-writer.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { QUANT_DTYPES, QUANT_SCHEMES } from '../src/convert/quant-mix.js';
import { GGUF_QUANT_NAMES, loadGgufCheckpoint, quantOfGgufName, selectGguf } from '../src/model/gguf-checkpoint.js';
import { parseGgufHeader } from '../src/model/gguf-reader.js';
import { loadModel, loadModelTokenizer, modelMaxPositions } from '../src/model/model-path.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import { loadTokenizer } from '../src/model/tokenizer.js';

const execFileP = promisify(execFile);
const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const BENCH = join(ROOT, 'bin', 'bench.js');

let work: string;
let dir: string; // safetensors checkpoint (4B value-head layout) with model-F32.gguf and model-Q8_0.gguf beside
let q8: string;
let f32: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'lumen-gguf-model-'));
  dir = join(work, 'ckpt');
  await writeSynthCheckpoint({ preset: 'tiny', out: dir, dtype: 'f32', seed: 5, overrides: { linearNumValueHeads: 4 }, vision: false });
  q8 = join(dir, 'model-Q8_0.gguf');
  f32 = join(dir, 'model-F32.gguf');
  await convertCheckpoint(dir, q8, { dtype: 'q8_0' });
  await convertCheckpoint(dir, f32, { dtype: 'f32' });
}, 120_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** A copy of a GGUF file split in `n` parts named like llama.cpp's gguf-split (`base-0000i-of-0000n.gguf`). */
function splitGguf(src: string, base: string, n: number): string[] {
  const g = parseGgufHeader(src);
  const buf = readFileSync(src);
  const names = g.tensorOrder;
  const per = Math.ceil(names.length / n);
  const files: string[] = [];
  for (let i = 0; i < n; i++) {
    const w = new GgufWriter(g.alignment);
    if (i === 0) {
      for (const [k, v] of g.kv) {
        if (k === 'general.alignment') continue;
        if (v.itemType !== undefined) w.addArray(k, v.itemType as GgufScalarType, v.value as never[]);
        else w.add(k, { type: v.type as GgufScalarType, value: v.value as never });
      }
    }
    w.add('split.no', { type: 2, value: i });
    w.add('split.count', { type: 2, value: n });
    w.add('split.tensors.count', { type: 5, value: names.length });
    const mine = names.slice(i * per, (i + 1) * per);
    for (const name of mine) {
      const t = g.tensors.get(name)!;
      w.addTensor(name, t.ne, t.type);
    }
    const file = `${base}-${String(i + 1).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.gguf`;
    w.open(file);
    for (const name of mine) {
      const t = g.tensors.get(name)!;
      w.writeTensor(name, buf.subarray(g.dataStart + t.offset, g.dataStart + t.offset + t.nbytes));
    }
    w.close();
    files.push(file);
  }
  return files;
}

/** A copy of a (single-file) GGUF with metadata keys set (`undefined`: removed); tensors as they are. */
function withMetadata(src: string, dst: string, set: Record<string, { type: number; value: unknown } | undefined>): string {
  const g = parseGgufHeader(src);
  const buf = readFileSync(src);
  const w = new GgufWriter(g.alignment);
  for (const [k, v] of g.kv) {
    if (k === 'general.alignment' || k in set) continue;
    if (v.itemType !== undefined) w.addArray(k, v.itemType as GgufScalarType, v.value as never[]);
    else w.add(k, { type: v.type as GgufScalarType, value: v.value as never });
  }
  for (const [k, v] of Object.entries(set)) if (v) w.add(k, { type: v.type as GgufScalarType, value: v.value as never });
  for (const name of g.tensorOrder) {
    const t = g.tensors.get(name)!;
    w.addTensor(name, t.ne, t.type);
  }
  w.open(dst);
  for (const name of g.tensorOrder) {
    const t = g.tensors.get(name)!;
    w.writeTensor(name, buf.subarray(g.dataStart + t.offset, g.dataStart + t.offset + t.nbytes));
  }
  w.close();
  return dst;
}

async function benchPrompt(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileP(process.execPath, [BENCH, 'prompt', ...args], { cwd: ROOT, maxBuffer: 64 << 20, timeout: 100_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

describe('choosing a GGUF file', () => {
  it('--quant picks the file whose name carries it, in any case; a file is taken as is', () => {
    expect(selectGguf(dir, 'q8_0')).toBe(q8);
    expect(selectGguf(dir, 'Q8_0')).toBe(q8);
    expect(selectGguf(dir, 'f32')).toBe(f32);
    expect(selectGguf(q8)).toBe(q8);
  });

  it('none or several matching: one line listing what the directory holds', () => {
    expect(() => selectGguf(dir, 'Q4_K_M')).toThrow(/no GGUF file named for --quant Q4_K_M \(the directory holds: model-F32\.gguf, model-Q8_0\.gguf\)/);
    expect(() => selectGguf(dir)).toThrow(/several GGUF files \(model-F32\.gguf, model-Q8_0\.gguf\); choose one with --quant, or give the file's path as --model-path$/);
    const two = join(work, 'two');
    mkdirSync(two);
    copyFileSync(q8, join(two, 'a-Q8_0.gguf'));
    copyFileSync(q8, join(two, 'b.q8_0.gguf'));
    expect(() => selectGguf(two, 'q8_0')).toThrow(/more than one GGUF file named for --quant q8_0 \(the directory holds: a-Q8_0\.gguf, b\.q8_0\.gguf\); give the file's path as --model-path$/);
    // Two of one quantization: --quant cannot tell them apart, so it is not offered.
    expect(() => selectGguf(two)).toThrow(/several GGUF files \(a-Q8_0\.gguf, b\.q8_0\.gguf\); give the file's path as --model-path$/);
    expect(selectGguf(join(two, 'a-Q8_0.gguf'), 'Q8_0')).toBe(join(two, 'a-Q8_0.gguf'));
  });

  it('a dangling or looping *.gguf symlink is skipped, and named only when nothing else matches', async () => {
    const links = join(work, 'links');
    mkdirSync(links);
    copyFileSync(q8, join(links, 'm-Q8_0.gguf'));
    symlinkSync(join(links, 'gone.gguf'), join(links, 'broken-Q4_K_M.gguf'));
    symlinkSync(join(links, 'loop.gguf'), join(links, 'loop.gguf'));
    expect(selectGguf(links, 'Q8_0')).toBe(join(links, 'm-Q8_0.gguf'));
    expect(selectGguf(links)).toBe(join(links, 'm-Q8_0.gguf'));
    expect(() => selectGguf(links, 'Q4_K_M')).toThrow(/no GGUF file named for --quant Q4_K_M \(the directory holds: m-Q8_0\.gguf; unreadable: broken-Q4_K_M\.gguf \(ENOENT\), loop\.gguf \(ELOOP\)\)$/);
    const ok = await benchPrompt(['--model-path', links, '--quant', 'Q8_0', '--prompt-ids', '1,2', '--max-new-tokens', '1']);
    expect(ok.code, ok.stderr).toBe(0);
    rmSync(join(links, 'm-Q8_0.gguf'));
    expect(() => loadModel(links, { hash: false })).toThrow(/links: no readable \.gguf files; unreadable: broken-Q4_K_M\.gguf \(ENOENT\), loop\.gguf \(ELOOP\)$/);
    const bad = await benchPrompt(['--model-path', links, '--quant', 'Q4_K_M', '--prompt-ids', '1,2', '--max-new-tokens', '1']);
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split('\n').pop()).toMatch(/^bench: --model-path: .*links: no GGUF file named for --quant Q4_K_M \(the directory holds: no readable \.gguf files; unreadable: broken-Q4_K_M\.gguf \(ENOENT\), loop\.gguf \(ELOOP\)\)$/);
  }, 60_000);

  it('--quant Q4_K_XL chooses a publisher\'s mix named in llama.cpp\'s shape', () => {
    const d = join(work, 'shaped');
    mkdirSync(d);
    for (const n of ['Qwen3.5-4B-UD-Q4_K_XL.gguf', 'Qwen3.5-4B-Q4_K_M.gguf']) writeFileSync(join(d, n), '');
    expect(selectGguf(d, 'q4_k_xl')).toBe(join(d, 'Qwen3.5-4B-UD-Q4_K_XL.gguf'));
    expect(selectGguf(d, 'Q4_K_M')).toBe(join(d, 'Qwen3.5-4B-Q4_K_M.gguf'));
    expect(() => selectGguf(d, 'Q4_K_L')).toThrow(/no GGUF file named for --quant Q4_K_L/);
  });

  it('a vision projector (mmproj-*.gguf) and a split part without its first part are no models: left out, named only when nothing matches', () => {
    const d = join(work, 'projector');
    mkdirSync(d);
    for (const n of ['Qwen3.5-4B-Q4_K_M.gguf', 'mmproj-F16.gguf', 'MMPROJ-Qwen3.5-4B-BF16.gguf', 'x-Q8_0-00002-of-00002.gguf']) writeFileSync(join(d, n), '');
    // One model beside its projector needs no --quant; --quant F16 no longer picks the projector.
    expect(selectGguf(d)).toBe(join(d, 'Qwen3.5-4B-Q4_K_M.gguf'));
    expect(() => selectGguf(d, 'F16')).toThrow(/no GGUF file named for --quant F16 \(the directory holds: Qwen3\.5-4B-Q4_K_M\.gguf; left out: MMPROJ-Qwen3\.5-4B-BF16\.gguf \(a vision projector\), mmproj-F16\.gguf \(a vision projector\), x-Q8_0-00002-of-00002\.gguf \(part 2 of 2, whose first part is missing\)\)$/);
    expect(() => selectGguf(d, 'Q8_0')).toThrow(/no GGUF file named for --quant Q8_0 .*part 2 of 2, whose first part is missing/);
    rmSync(join(d, 'Qwen3.5-4B-Q4_K_M.gguf'));
    expect(() => selectGguf(d)).toThrow(/projector: no model \.gguf files; left out: /);
  });

  it('--quant is the name\'s last component, a known quantization: --quant 8B picked …-0.8B.gguf (the selection runs on names alone)', async () => {
    const d = join(work, 'names');
    mkdirSync(d);
    const names = ['Qwen3.5-0.8B.gguf', 'Qwen3.5-9B-Q4_K_M.gguf', 'Qwen3.5-9B_IQ4_XS.gguf', 'm.q8_0-00001-of-00002.gguf', 'm.q8_0-00002-of-00002.gguf', 'BF16.gguf'];
    for (const n of names) writeFileSync(join(d, n), '');
    const holds = 'the directory holds: BF16\\.gguf, Qwen3\\.5-0\\.8B\\.gguf, Qwen3\\.5-9B-Q4_K_M\\.gguf, Qwen3\\.5-9B_IQ4_XS\\.gguf, m\\.q8_0-00001-of-00002\\.gguf';
    for (const q of ['8B', '0', 'K_M', 'M', '9B']) {
      expect(() => selectGguf(d, q)).toThrow(new RegExp(`: --quant ${q} is not a quantization name \\(F32, .*Q4_K_M, .*; any case\\); ${holds}$`));
    }
    // A file given as is: the same refusal (it accepted --quant 8B for …-0.8B.gguf).
    expect(() => selectGguf(join(d, 'Qwen3.5-0.8B.gguf'), '8B')).toThrow(/Qwen3\.5-0\.8B\.gguf: --quant 8B is not a quantization name/);
    expect(() => selectGguf(join(d, 'Qwen3.5-0.8B.gguf'), 'Q8_0')).toThrow(/--quant Q8_0 does not match this file's name \(it names no quantization; /);
    expect(() => selectGguf(join(d, 'BF16.gguf'), 'F16')).toThrow(/--quant F16 does not match this file's name \(it names BF16; /);
    // After -, . or _, any case; the split suffix set aside.
    expect(selectGguf(d, 'q4_k_m')).toBe(join(d, 'Qwen3.5-9B-Q4_K_M.gguf'));
    expect(selectGguf(d, 'IQ4_XS')).toBe(join(d, 'Qwen3.5-9B_IQ4_XS.gguf'));
    expect(selectGguf(d, 'Q8_0')).toBe(join(d, 'm.q8_0-00001-of-00002.gguf'));
    expect(selectGguf(d, 'bf16')).toBe(join(d, 'BF16.gguf'));
    // Known, but the whole component only: Q4_K is not Q4_K_M, F16 not BF16.
    expect(() => selectGguf(d, 'Q4_K')).toThrow(/no GGUF file named for --quant Q4_K \(/);
    expect(() => selectGguf(d, 'F16')).toThrow(/no GGUF file named for --quant F16 \(/);
    const r = await benchPrompt(['--model-path', d, '--quant', '8B', '--prompt-ids', '1,2', '--max-new-tokens', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(new RegExp(`^bench: --model-path: .*names: --quant 8B is not a quantization name \\(.*\\); ${holds}\\n$`));
  });

  it('the quantization names: llama.cpp\'s file types and `bench convert`\'s, none a component-suffix of another', () => {
    for (const d of QUANT_DTYPES) {
      expect(GGUF_QUANT_NAMES).toContain(d.toUpperCase());
      expect(GGUF_QUANT_NAMES).toContain(QUANT_SCHEMES[d].llama.ftypeName);
    }
    for (const d of ['F32', 'F16', 'BF16', 'Q4_K_S', 'Q5_K_S', 'Q3_K_M', 'IQ2_XXS', 'TQ1_0']) expect(GGUF_QUANT_NAMES).toContain(d);
    for (const a of GGUF_QUANT_NAMES) {
      expect(a).toBe(a.toUpperCase());
      expect(quantOfGgufName(`model-${a}.gguf`)).toBe(a);
      for (const b of GGUF_QUANT_NAMES) if (a !== b) expect(a.endsWith(`_${b}`), `${a} ends in _${b}`).toBe(false);
    }
    expect(quantOfGgufName('Qwen3.5-0.8B.gguf')).toBeNull();
    expect(quantOfGgufName('modelQ8_0.gguf')).toBeNull();
    expect(quantOfGgufName('m-q4_k_m-00002-of-00003.GGUF')).toBe('Q4_K_M');
    // Publishers' own mixes, named in llama.cpp's shape: taken (they were refused as "not a quantization name").
    expect(quantOfGgufName('Qwen3.5-4B-UD-Q4_K_XL.gguf')).toBe('Q4_K_XL');
    expect(quantOfGgufName('Qwen3.5-4B-Q8_K_XL.gguf')).toBe('Q8_K_XL');
    expect(quantOfGgufName('Qwen3.5-4B-Q4_K_L.gguf')).toBe('Q4_K_L');
    for (const notQuant of ['Qwen3.5-4B.gguf', 'm-K_XL.gguf', 'm-Q4.gguf', 'm-8B.gguf']) expect(quantOfGgufName(notQuant), notQuant).toBeNull();
  });

  it('the CLI: a --quant that matches nothing is a usage error naming the flag and the files (exit 2)', async () => {
    const r = await benchPrompt(['--model-path', dir, '--quant', 'Q6_K', '--prompt-ids', '1,2', '--max-new-tokens', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n').pop()).toMatch(/--model-path: .*no GGUF file named for --quant Q6_K \(the directory holds: model-F32\.gguf, model-Q8_0\.gguf\)/);
    const bad = await benchPrompt(['--quant', 'Q8_0', '--prompt-ids', '1', '--max-new-tokens', '0']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--quant needs --model-path/);
  });
});

describe('a GGUF model', () => {
  it('has the safetensors checkpoint\'s config (value heads tiled), every tensor by role, and names its format', () => {
    const st = loadCheckpoint(dir);
    const g = loadGgufCheckpoint(q8);
    // Equal but for what GGUF states otherwise: eps as f32 (what the engine uses anyway), the eos of
    // the tokenizer (<|im_end|>), no MTP layers (the converter wrote none), the tiled value heads.
    const same = (c: typeof st.config) => ({ ...c, rmsNormEps: Math.fround(c.rmsNormEps), eosTokenId: 0, mtpNumHiddenLayers: 0, linearValueHeadsTiled: undefined });
    expect(same(g.config)).toEqual(same(st.config));
    expect(g.config.eosTokenId).toBe(248046);
    expect(g.config.linearValueHeadsTiled).toBe(true);
    expect([...g.tensors.keys()].sort()).toEqual([...st.tensors.keys()].sort());
    for (const t of g.tensors.values()) {
      expect(t.fold).toBeUndefined(); // folded in the file already
      expect(t.file).toBe(q8);
    }
    expect(g.tensors.get('layers.0.mlp.gate_proj.weight')!.dtype).toBe('Q8_0');
    expect(g.tensors.get('layers.0.linear_attn.A_log')!.dtype).toBe('F32');
    expect(g.paramCount).toBe(st.paramCount);
    expect(g.format!.name).toBe('Q8_0');
    expect(g.format!.tensorTypes).toEqual({ Q8_0: 32, F32: 23 });
    expect(g.format!.bitsPerWeight).toBeGreaterThan(8);
    expect(g.format!.bitsPerWeight).toBeLessThan(9);
    expect(g.format!.sha256).toBe(createHash('sha256').update(readFileSync(q8)).digest('hex'));
    expect(loadGgufCheckpoint(f32).format!.name).toBe('F32');
  });

  it('its tokenizer from tokenizer.ggml.* gives tokenizer.json\'s ids and renders the same chat template', async () => {
    const alone = join(work, 'alone');
    mkdirSync(alone);
    copyFileSync(q8, join(alone, 'm-Q8_0.gguf'));
    const own = await loadModelTokenizer(loadModel(alone, { hash: false }));
    const ref = await loadTokenizer(dir);
    for (const text of ['Hello world, 123!', 'café 東京 🙂', '<|im_start|>user\nhi<|im_end|>\n', "don't  stop\n\n\tnow"]) {
      expect(own.encode(text), text).toEqual(ref.encode(text));
      expect(own.decode(ref.encode(text))).toBe(text);
    }
    const msgs = [{ role: 'user', content: 'Hi' }];
    expect(own.applyChatTemplate(msgs, { addGenerationPrompt: true })).toBe(ref.applyChatTemplate(msgs, { addGenerationPrompt: true }));
    expect(own.eosTokenIds).toContain(248046);
  });

  it('a tokenizer.json alone beside the file keeps the GGUF\'s chat template (it was dropped: --chat failed)', async () => {
    const d = join(work, 'tok-alone');
    mkdirSync(d);
    copyFileSync(q8, join(d, 'm-Q8_0.gguf'));
    copyFileSync(join(dir, 'tokenizer.json'), join(d, 'tokenizer.json'));
    const t = await loadModelTokenizer(loadModel(d, { hash: false }));
    const ref = await loadTokenizer(dir);
    const msgs = [{ role: 'user', content: 'Hi' }];
    expect(t.applyChatTemplate(msgs, { addGenerationPrompt: true })).toBe(ref.applyChatTemplate(msgs, { addGenerationPrompt: true }));
    expect(t.eosTokenIds).toContain(248046); // the GGUF's end-of-sequence id (it was dropped too)
    // A template beside it wins over the GGUF's.
    writeFileSync(join(d, 'chat_template.jinja'), 'BESIDE{% for m in messages %}{{ m.content }}{% endfor %}');
    const t2 = await loadModelTokenizer(loadModel(d, { hash: false }));
    expect(t2.applyChatTemplate(msgs, { addGenerationPrompt: true })).toBe('BESIDEHi');
  }, 60_000);

  it('a tokenizer.json beside the file that disagrees with the GGUF vocabulary is an error', async () => {
    // tokenizer.json with the ids of two byte tokens swapped: a valid tokenizer, other ids.
    const tok = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as { model: { vocab: Record<string, number> } };
    const v = tok.model.vocab;
    [v.H, v.e] = [v.e!, v.H!];
    const mixed = join(work, 'mixed');
    mkdirSync(mixed);
    copyFileSync(q8, join(mixed, 'm-Q8_0.gguf'));
    writeFileSync(join(mixed, 'tokenizer.json'), JSON.stringify(tok));
    await expect(loadModelTokenizer(loadModel(mixed, { hash: false }))).rejects.toThrow(/tokenizer\.json: gives token ids \[.*\] for a test text, but .*m-Q8_0\.gguf's vocabulary gives/);
  }, 60_000);

  it('a tensor of a type the engine does not run: an error naming the tensor and the type', () => {
    const buf = Buffer.from(readFileSync(q8));
    // The tensor info of blk.0.ffn_gate.weight: name, n_dims (2), ne (2 x u64), then the u32 type.
    const name = Buffer.from('blk.0.ffn_gate.weight');
    const at = buf.indexOf(Buffer.concat([Buffer.from([name.length, 0, 0, 0, 0, 0, 0, 0]), name]));
    expect(at).toBeGreaterThan(0);
    const typeAt = at + 8 + name.length + 4 + 16;
    expect(buf.readUInt32LE(typeAt)).toBe(8); // Q8_0
    buf.writeUInt32LE(3, typeAt); // Q4_1: smaller, so the layout stays valid
    const file = join(work, 'q41.gguf');
    writeFileSync(file, buf);
    expect(() => loadGgufCheckpoint(file, { hash: false })).toThrow(/tensor blk\.0\.ffn_gate\.weight has type Q4_1, which the engine does not run/);
  });
});

describe('a damaged vector in a quantized file', () => {
  it('a NaN in a norm is refused at load, naming the tensor (the activation quantization would have hidden it: finite, wrong logits)', async () => {
    const g = parseGgufHeader(q8);
    const t = g.tensors.get('output_norm.weight')!;
    expect(t.type).toBe(0); // F32
    const buf = Buffer.from(readFileSync(q8));
    buf.writeFloatLE(Number.NaN, g.dataStart + t.offset + 4 * 3);
    const file = join(work, 'nan-norm-Q8_0.gguf');
    writeFileSync(file, buf);
    const r = await benchPrompt(['--model-path', file, '--prompt-ids', '1,2', '--max-new-tokens', '1']);
    expect(r.code, r.stderr).not.toBe(0);
    expect(r.stderr.trim().split('\n').pop()).toMatch(/tensor output_norm\.weight in .*nan-norm-Q8_0\.gguf: element 3 is NaN \(a damaged file: a vector's values are finite\)$/);
  }, 60_000);
});

describe('qwen35.block_count below the layers the tensors hold', () => {
  const U32 = 4;
  it('a tensor beyond block_count is an error naming it and the key (it ran with fewer layers, the rest called MTP)', async () => {
    const short = withMetadata(q8, join(work, 'short-Q8_0.gguf'), { 'qwen35.block_count': { type: U32, value: 3 } });
    expect(() => loadGgufCheckpoint(short, { hash: false })).toThrow(/short-Q8_0\.gguf: tensor blk\.3\.[a-z_.]+ belongs to layer 3, but qwen35\.block_count is 3$/);
    const r = await benchPrompt(['--model-path', short, '--prompt-ids', '1,2', '--max-new-tokens', '0']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n').pop()).toMatch(/^bench: --model-path: .*short-Q8_0\.gguf: tensor blk\.3\.[a-z_.]+ belongs to layer 3, but qwen35\.block_count is 3$/);
    // Declared MTP layers are counted in block_count: a tensor past them is refused too.
    const past = withMetadata(q8, join(work, 'past-Q8_0.gguf'), { 'qwen35.block_count': { type: U32, value: 3 }, 'qwen35.nextn_predict_layers': { type: U32, value: 1 } });
    expect(() => loadGgufCheckpoint(past, { hash: false })).toThrow(/tensor blk\.3\.[a-z_.]+ belongs to layer 3, but qwen35\.block_count is 3 \(2 layers \+ 1 from qwen35\.nextn_predict_layers\)$/);
  }, 60_000);

  it('the MTP layers qwen35.nextn_predict_layers declares are skipped, with a note', () => {
    const mtp = withMetadata(q8, join(work, 'mtp-Q8_0.gguf'), { 'qwen35.nextn_predict_layers': { type: U32, value: 1 } });
    const g = loadGgufCheckpoint(mtp, { hash: false });
    expect(g.config.numLayers).toBe(3);
    expect(g.notes.join(' ')).toMatch(/skipped \d+ MTP tensor\(s\) \(blk\.3\.\*\)/);
  });
});

describe('qwen35.context_length: the positions the model was built for', () => {
  const U32 = 4;
  it('bounds the prompt and its output: past it, a usage error naming the flag and the key (it ran on, silently)', async () => {
    const ctx = withMetadata(q8, join(work, 'ctx8-Q8_0.gguf'), { 'qwen35.context_length': { type: U32, value: 8 } });
    expect(loadGgufCheckpoint(ctx, { hash: false }).config.maxPositionEmbeddings).toBe(8);
    const over = await benchPrompt(['--model-path', ctx, '--prompt-ids', '1,2,3', '--max-new-tokens', '6']);
    expect(over.code, over.stderr).toBe(2);
    expect(over.stderr.trim().split('\n')).toEqual([
      `bench: --max-new-tokens: the prompt's 3 tokens + 6 new need 9 positions, more than the model's maximum of 8 (qwen35.context_length in ${ctx}); give --max-new-tokens 5 or less`,
    ]);
    const ok = await benchPrompt(['--model-path', ctx, '--prompt-ids', '1,2,3', '--max-new-tokens', '5', '--ignore-eos']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout.trim().split(' ')).toHaveLength(5);
    // Absent: the config parser's default (the real Qwen3.5 value), as for a config.json without the key.
    const none = withMetadata(q8, join(work, 'noctx-Q8_0.gguf'), { 'qwen35.context_length': undefined });
    const noneModel = loadGgufCheckpoint(none, { hash: false });
    expect(noneModel.config.maxPositionEmbeddings).toBe(262144);
    expect(modelMaxPositions(noneModel).source).toBe(`the default 262144: ${none} does not state qwen35.context_length`);
    // Stated at the default's value (as real Qwen3.5 files do): the file's, not the default.
    const stated = withMetadata(q8, join(work, 'ctxdefault-Q8_0.gguf'), { 'qwen35.context_length': { type: U32, value: 262144 } });
    expect(modelMaxPositions(loadGgufCheckpoint(stated, { hash: false })).source).toBe(`qwen35.context_length in ${stated}`);
  }, 60_000);
});

describe('the tiled value heads (4B layout)', () => {
  it('decode steps on an f32 GGUF give the safetensors checkpoint\'s tokens and logits', async () => {
    // Prefill of 20 tokens (the chunked DeltaNet), then 8 decode steps (the per-key-head decode path).
    const ids = Array.from({ length: 20 }, (_, i) => 1000 + 7919 * i).join(',');
    const run = async (path: string, out: string) => {
      const r = await benchPrompt(['--model-path', path, '--prompt-ids', ids, '--max-new-tokens', '8', '--ignore-eos', '--logits-out', out, '--threads', '2']);
      expect(r.code, r.stderr).toBe(0);
      const b = readFileSync(out);
      return { tokens: r.stdout.trim().split('\n').pop(), logits: new Float32Array(b.buffer, b.byteOffset, b.length / 4) };
    };
    const a = await run(dir, join(work, 'st.f32'));
    const g = await run(f32, join(work, 'gg.f32'));
    expect(g.tokens).toBe(a.tokens);
    expect(g.logits.length).toBe(a.logits.length);
    let max = 0;
    for (let i = 0; i < a.logits.length; i++) max = Math.max(max, Math.abs(a.logits[i]! - g.logits[i]!));
    expect(max).toBeGreaterThan(0); // ssm_out sums the value channels in the tiled order: not bit-identical
    expect(max).toBeLessThan(1e-3);
  }, 120_000);
});

describe('split GGUF files', () => {
  it('load from the first part (and give the single file\'s logits); a missing part is named', async () => {
    const sdir = join(work, 'split');
    mkdirSync(sdir);
    const parts = splitGguf(q8, join(sdir, 'm-Q8_0'), 3);
    const g = loadGgufCheckpoint(parts[0]!);
    expect(g.shards).toEqual(parts);
    expect(new Set([...g.tensors.values()].map((t) => t.file)).size).toBe(3);
    expect(g.format!.files).toEqual(parts.map((p) => p.split('/').pop()));
    expect(selectGguf(sdir, 'Q8_0')).toBe(parts[0]);

    const ids = '11,22,33,44,55,66,77,88,99,1000,2000,3000';
    const run = async (path: string, out: string) => {
      const r = await benchPrompt(['--model-path', path, '--prompt-ids', ids, '--max-new-tokens', '0', '--logits-out', out, '--threads', '2']);
      expect(r.code, r.stderr).toBe(0);
      return readFileSync(out);
    };
    const a = await run(q8, join(work, 'single.f32'));
    const b = await run(sdir, join(work, 'split.f32'));
    expect(b.equals(a)).toBe(true);

    rmSync(parts[1]!);
    expect(() => loadGgufCheckpoint(parts[0]!)).toThrow(/m-Q8_0-00002-of-00003\.gguf: part 2 of 3 of the split GGUF is missing/);
  }, 120_000);
});
