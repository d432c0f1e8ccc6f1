// The pure parts of bench:peer (scripts/peer-bench.ts): the --quant list, the cached GGUFs' names and
// content keys (scripts/bench-quant-model.ts), and the roofline arithmetic and target verdicts
// (scripts/peer-roofline.ts). No engine runs and nothing is timed.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { planTensors } from '../src/convert/convert.js';
import { expectedTensors } from '../src/model/checkpoint.js';
import { ggmlTensorBytes } from '../src/model/gguf-reader.js';
import { presetConfig } from '../src/model/presets.js';
import type { Checkpoint, ModelCheckpoint, TextConfig, WeightRef } from '../src/model/types.js';
import { UsageError } from '../src/util/usage-error.js';
import {
  conversionKey, converterCodeFiles, parseQuantList, quantModelFile, staleQuantModels,
} from '../scripts/bench-quant-model.js';
import { decodeStepBytes, formatTarget, judgeTargets, prefillFlopsPerToken, recurrentStateBytes } from '../scripts/peer-roofline.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'peer-units-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A model of `c`'s tensors as the loaders build them, each `bytesOf` bytes (default bf16). */
function modelOf(c: TextConfig, bytesOf: (name: string, shape: number[]) => number = (_n, s) => 2 * s.reduce((a, b) => a * b, 1)): ModelCheckpoint {
  const tensors = new Map<string, WeightRef>();
  for (const e of expectedTensors(c)) {
    tensors.set(e.name, { name: e.name, file: 'x', offset: 0, nbytes: bytesOf(e.name, e.shape), dtype: 'BF16', shape: e.shape, role: e.role.role, layer: e.layer });
  }
  return { dir: 'x', config: c, configHash: '', prefix: '', tensors, shards: [], bytesOnDisk: 0, paramCount: 0, dtype: 'BF16', hasMtp: false };
}

describe('--quant', () => {
  it('takes a comma-separated list of bench convert types, in order, any case', () => {
    expect(parseQuantList('bf16')).toEqual(['bf16']);
    expect(parseQuantList('q8_0,Q4_K_M')).toEqual(['q8_0', 'q4_k_m']);
    expect(parseQuantList(' q4_k_m , bf16 ,f16')).toEqual(['q4_k_m', 'bf16', 'f16']);
  });

  it('rejects unknown, repeated and empty entries with a one-line error naming the flag', () => {
    for (const [value, words] of [
      ['q3_k', "'q3_k' is not one of"], ['q8_0,q8_0', 'listed twice'], ['', 'empty list'], [',', 'empty list'], ['q8_0,,bf16', 'empty entry'],
    ] as const) {
      let err: unknown;
      try {
        parseQuantList(value);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(UsageError);
      expect((err as Error).message).toMatch(/^--quant: /);
      expect((err as Error).message).toContain(words);
      expect((err as Error).message).not.toContain('\n');
    }
  });
});

describe('bench:peer flags (the compiled script, dist/)', () => {
  const script = path.resolve('dist/scripts/peer-bench.js');
  const runPeer = async (args: string[]) => {
    try {
      await promisify(execFile)(process.execPath, [script, ...args], { timeout: 60_000 });
      return { code: 0, stderr: '' };
    } catch (err) {
      const e = err as { code?: number; stderr?: string };
      return { code: e.code ?? -1, stderr: e.stderr ?? '' };
    }
  };

  it('refuses a bad --quant (and other bad values) with one line naming the flag and exit 2, before making any model', async () => {
    expect(existsSync(script), 'dist/ missing: run `npx tsc -p .`').toBe(true);
    for (const [args, words] of [
      [['--quant', 'q8_0,q2_k'], "--quant: 'q2_k' is not one of"], [['--quant', 'q8_0,q8_0'], "--quant: 'q8_0' is listed twice"],
      [['--rounds', '0'], '--rounds: 0 is below the minimum of 1'], [['--llama', 'other'], "--llama: 'other' is not one of"],
      [['--preset', 'huge'], "--preset: 'huge' is not one of"],
    ] as const) {
      // A bad --preset last, so that a check letting its value through still stops before any model is made.
      const r = await runPeer([...args, '--preset', 'huge']);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(words);
    }
  });
});

describe('cached quantized GGUFs', () => {
  it('names a file by preset, type and key, and finds the same preset and type under other keys as stale', () => {
    const dir = path.join(tmp, 'models');
    mkdirSync(dir);
    const current = quantModelFile(dir, '0.8b', 'q4_k_m', 'a'.repeat(64));
    expect(path.basename(current)).toBe(`peer-0.8b-q4_k_m-${'a'.repeat(12)}.gguf`);
    const names = [
      `peer-0.8b-q4_k_m-${'a'.repeat(12)}.gguf`, `peer-0.8b-q4_k_m-${'b'.repeat(12)}.gguf`, `peer-0.8b-q8_0-${'c'.repeat(12)}.gguf`,
      `peer-tiny-q4_k_m-${'d'.repeat(12)}.gguf`, `peer-0.8b-q4_k-${'e'.repeat(12)}.gguf`, 'peer-0.8b-bf16.gguf', 'peer-0.8b-q4_k_m-mine.gguf',
    ];
    for (const n of names) writeFileSync(path.join(dir, n), '');
    expect(staleQuantModels(dir, '0.8b', 'q4_k_m', current)).toEqual([path.join(dir, `peer-0.8b-q4_k_m-${'b'.repeat(12)}.gguf`)]);
    expect(staleQuantModels(dir, '0.8b', 'q4_k', quantModelFile(dir, '0.8b', 'q4_k', 'f'.repeat(64)))).toEqual([path.join(dir, `peer-0.8b-q4_k-${'e'.repeat(12)}.gguf`)]);
    expect(staleQuantModels(path.join(tmp, 'absent'), '0.8b', 'q8_0', current)).toEqual([]);
  });

  it('keys the file by the converter code, the source bytes and the type', () => {
    const src = path.join(tmp, 'src');
    mkdirSync(src);
    writeFileSync(path.join(src, 'config.json'), '{}');
    writeFileSync(path.join(src, 'model.safetensors'), 'weights');
    const code = path.join(tmp, 'convert.js');
    writeFileSync(code, 'v1');
    const key = conversionKey(src, 'q8_0', [code]);
    expect(key).toMatch(/^[0-9a-f]{64}$/);
    expect(conversionKey(src, 'q8_0', [code])).toBe(key);
    expect(conversionKey(src, 'q4_k_m', [code])).not.toBe(key);
    writeFileSync(code, 'v2');
    const key2 = conversionKey(src, 'q8_0', [code]);
    expect(key2).not.toBe(key);
    writeFileSync(path.join(src, 'model.safetensors'), 'weightz');
    expect(conversionKey(src, 'q8_0', [code])).not.toBe(key2);
  });

  it('hashes the converter modules and the tensor-role table that this process runs', () => {
    const names = converterCodeFiles().map((f) => path.basename(f));
    expect(names).toEqual(expect.arrayContaining(['convert.ts', 'quant-k.ts', 'quant-mix.ts', 'tensor-roles.ts']));
  });
});

describe('roofline arithmetic', () => {
  const c08 = presetConfig('0.8b');

  it('counts the DeltaNet state read and written, f32', () => {
    // tiny: 3 linear layers; per layer S = 2 value heads x 128 x 128, conv windows 3 x (2 x 2 x 128 + 2 x 128).
    expect(recurrentStateBytes(presetConfig('tiny'))).toBe(3 * (2 * 128 * 128 + 3 * (2 * 2 * 128 + 2 * 128)) * 4 * 2);
  });

  it('reads every matrix once per decode step, a tied embedding once as the head, an untied embedding not at all', () => {
    const bf16 = decodeStepBytes(modelOf(c08));
    // 0.8B: 751,894,528 matrix weights (layers + the tied 248320 x 1024 embedding), bf16.
    expect(bf16.matrixBytes).toBe(751_894_528 * 2);
    expect(bf16.total).toBe(bf16.matrixBytes + recurrentStateBytes(c08));
    const embedBytes = 2 * c08.vocabSize * c08.hiddenSize;
    const bigEmbed = decodeStepBytes(modelOf(c08, (n, s) => (n === 'embed_tokens.weight' ? 3 : 2) * s.reduce((a, b) => a * b, 1)));
    expect(bigEmbed.matrixBytes - bf16.matrixBytes).toBe(embedBytes / 2);
    const untiedCfg = { ...c08, tieWordEmbeddings: false };
    const untied = decodeStepBytes(modelOf(untiedCfg, (n, s) => (n === 'embed_tokens.weight' ? 3 : 2) * s.reduce((a, b) => a * b, 1)));
    expect(untied.matrixBytes).toBe(bf16.matrixBytes); // the lm_head (bf16) replaces the embedding; the 3-byte embedding is not read
  });

  it('takes each tensor at its stored size, as the converter writes it for q8_0 and q4_k_m', () => {
    const base = modelOf(c08);
    for (const dtype of ['q8_0', 'q4_k_m'] as const) {
      // The converter's plan, by GGUF name -> bytes; the decode rule independently: the 2-D tensors but the conv taps.
      const plan = planTensors(base as unknown as Checkpoint, dtype);
      const bytes = new Map(plan.map((p) => [p.ggufName, ggmlTensorBytes(p.type, p.ne) as number]));
      const want = plan.filter((p) => p.ne.length === 2 && !p.ggufName.endsWith('ssm_conv1d.weight')).reduce((a, p) => a + bytes.get(p.ggufName)!, 0);
      const gguf = (name: string) => {
        const m = /^layers\.(\d+)\.(.*)$/.exec(name);
        const e = expectedTensors(c08).find((x) => x.name === name)!;
        return m ? `blk.${m[1]}.${e.role.gguf}` : e.role.gguf;
      };
      const q = decodeStepBytes(modelOf(c08, (n) => bytes.get(gguf(n))!));
      expect(q.matrixBytes).toBe(want);
      expect(q.matrixBytes).toBeLessThan(decodeStepBytes(base).matrixBytes);
    }
  });

  it('costs a prompt token 2 FLOPs per layer matrix weight, without the embedding or the head', () => {
    // 0.8B: 751,894,528 matrix weights less the 248320 x 1024 embedding.
    expect(prefillFlopsPerToken(modelOf(c08))).toBe(2 * (751_894_528 - c08.vocabSize * c08.hiddenSize));
    expect(prefillFlopsPerToken(modelOf({ ...c08, tieWordEmbeddings: false }))).toBe(2 * (751_894_528 - c08.vocabSize * c08.hiddenSize));
  });
});

describe('issue 19 targets', () => {
  const pass = { isl: 512, prefillRatio: 2.1, decodeRatio: 1.35, decodeRoofFraction: 0.81, c8OverC1: 5.2 };

  it('meets each target at or above its threshold, and names the one missed', () => {
    expect(judgeTargets(pass).map((t) => t.met)).toEqual([true, true, true, true]);
    const miss = judgeTargets({ ...pass, decodeRoofFraction: 0.79, c8OverC1: 4.9 });
    expect(miss.map((t) => t.met)).toEqual([true, false, true, false]);
    expect(formatTarget(miss[1]!)).toBe('decode c=1 >= 80 % of the roofline: NOT met (79 %, needs 80 %)');
    expect(formatTarget(miss[3]!)).toBe('aggregate c=8 >= 5x own c=1: NOT met (4.90x, needs 5.00x)');
    expect(formatTarget(miss[0]!)).toBe('decode c=1 >= 1.3x llama.cpp: met (1.35x)');
  });

  it('never meets a target whose figure is missing, and flags a prefill not of 512 tokens', () => {
    expect(judgeTargets({ ...pass, decodeRatio: NaN })[0]!.met).toBe(false);
    const other = judgeTargets({ ...pass, isl: 256 })[2]!;
    expect(other.note).toContain('256 tokens, not 512');
  });
});
