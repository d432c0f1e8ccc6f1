// The pure parts of bench:peer (scripts/peer-bench.ts): the --quant list, the cached GGUFs' names and
// content keys (scripts/bench-quant-model.ts), the roofline arithmetic and target verdicts
// (scripts/peer-roofline.ts), the figures of a run from its round records and the order of a round
// (scripts/peer-rounds.ts), and what is read from llama.cpp's tools (scripts/llama-native.ts); and
// bench:batch's speedup over c=1 (scripts/bench-model.ts). No engine runs and nothing is timed.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { planTensors } from '../src/convert/convert.js';
import { GgmlType } from '../src/convert/gguf-writer.js';
import { expectedTensors } from '../src/model/checkpoint.js';
import { ggmlTensorBytes } from '../src/model/gguf-reader.js';
import { presetConfig } from '../src/model/presets.js';
import type { Checkpoint, ModelCheckpoint, TextConfig, WeightRef } from '../src/model/types.js';
import { UsageError } from '../src/util/usage-error.js';
import {
  conversionKey, converterCodeFiles, converterPackages, parseQuantList, quantModelFile, staleQuantModels,
} from '../scripts/bench-quant-model.js';
import { median, pairedRatios, roundOrder, speedupsOverC1 } from '../scripts/bench-model.js';
import { parseBatchedBench, parseLlamaBench } from '../scripts/llama-native.js';
import {
  decodeStepBytes, formatTarget, formatTargetValue, judgeTargets, prefillFlopsPerToken, recurrentStateBytes,
} from '../scripts/peer-roofline.js';
import {
  higherLimit, judgedFractions, peerRoundOrder, prefillRate, summarizeRounds, type Figures, type PeerRound,
} from '../scripts/peer-rounds.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
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
    const key3 = conversionKey(src, 'q8_0', [code]);
    expect(key3).not.toBe(key2);
    // An upgraded package the converter imports changes it too.
    expect(conversionKey(src, 'q8_0', [code], ['@huggingface/jinja@0.5.11'])).not.toBe(conversionKey(src, 'q8_0', [code], ['@huggingface/jinja@0.5.12']));
  });

  it('names the packages the converter imports with their installed versions', () => {
    const pkgs = converterPackages();
    const lock = JSON.parse(readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { version: string }> };
    for (const name of ['@huggingface/tokenizers', '@huggingface/jinja'])
      expect(pkgs).toContain(`${name}@${lock.packages[`node_modules/${name}`]!.version}`);
    expect(pkgs.every((p) => !p.startsWith('node:'))).toBe(true);
    // Bare, scoped and sub-path imports; a package that is not installed reads '?'.
    const code = path.join(tmp, 'imports.js');
    writeFileSync(code, "import { a } from 'left-pad/sub/x.js';\nimport b from '@scope/pkg/deep';\nimport { c } from './local.js';\nimport d from 'node:fs';\n");
    const nm = path.join(tmp, 'nm');
    mkdirSync(path.join(nm, '@scope', 'pkg'), { recursive: true });
    writeFileSync(path.join(nm, '@scope', 'pkg', 'package.json'), '{"version":"1.2.3"}');
    expect(converterPackages([code], nm)).toEqual(['@scope/pkg@1.2.3', 'left-pad@?']);
  });

  it('hashes the converter modules that this process runs and every project module they import', () => {
    const files = converterCodeFiles();
    const rel = files.map((f) => path.relative(path.join(ROOT, 'src'), f));
    expect(rel).toEqual(expect.arrayContaining(['convert/convert.ts', 'convert/quant-k.ts', 'convert/quant-mix.ts', 'model/tensor-roles.ts']));
    // Imported by the converter, not in src/convert: the loader it converts from and what that reads.
    expect(rel).toEqual(expect.arrayContaining(['model/checkpoint.ts', 'model/config.ts', 'model/gguf-reader.ts', 'model/safetensors.ts']));
    expect(rel.every((f) => !f.startsWith('..') && f.endsWith('.ts'))).toBe(true);
    expect(new Set(rel).size).toBe(rel.length);
  });
});

describe('roofline arithmetic', () => {
  const c08 = presetConfig('0.8b');

  it('counts the DeltaNet state read and written, f32, with the conv window the engine keeps: kernel - 1 inputs a channel', () => {
    for (const c of [presetConfig('tiny'), c08, { ...c08, linearConvKernelDim: 6 }]) {
      const linear = c.layerTypes.filter((t) => t === 'linear_attention').length;
      const channels = 2 * c.linearNumKeyHeads * c.linearKeyHeadDim + c.linearNumValueHeads * c.linearValueHeadDim;
      const s = c.linearNumValueHeads * c.linearKeyHeadDim * c.linearValueHeadDim;
      expect(recurrentStateBytes(c)).toBe(linear * (s + (c.linearConvKernelDim - 1) * channels) * 4 * 2);
    }
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

  it('gives the byte counts measured on real 0.8B files of each type', () => {
    // Not from this code: counted in the GGUFs `bench convert` wrote from `bench synth --preset 0.8b
    // --dtype bf16 --seed 7` (tensor by tensor), and the state the engine reported for that model.
    // The quantized types here come from the converter's per-tensor rules (src/convert/quant-mix.ts,
    // through planTensors), as the file's did, without writing one.
    const base = modelOf(c08);
    const planned = (dtype: 'q8_0' | 'q4_k_m') => {
      const plan = planTensors(base as unknown as Checkpoint, dtype);
      const bytes = new Map(plan.map((p) => [p.ggufName, { type: p.type, n: ggmlTensorBytes(p.type, p.ne) as number }]));
      const gguf = (name: string) => {
        const m = /^layers\.(\d+)\.(.*)$/.exec(name);
        const e = expectedTensors(c08).find((x) => x.name === name)!;
        return m ? `blk.${m[1]}.${e.role.gguf}` : e.role.gguf;
      };
      const byType = new Map<number, number>();
      for (const p of plan) {
        if (p.ne.length === 2 && !p.ggufName.endsWith('ssm_conv1d.weight')) byType.set(p.type, (byType.get(p.type) ?? 0) + bytes.get(p.ggufName)!.n);
      }
      return { step: decodeStepBytes(modelOf(c08, (n) => bytes.get(gguf(n))!.n)), byType, embed: bytes.get('token_embd.weight')! };
    };
    expect(recurrentStateBytes(c08)).toBe(40_402_944);
    const bf16 = decodeStepBytes(base);
    expect([bf16.matrixBytes, bf16.total]).toEqual([1_503_789_056, 1_544_192_000]);
    const q8 = planned('q8_0');
    expect(q8.step.matrixBytes).toBe(798_887_936);
    expect([...q8.byType]).toEqual([[GgmlType.Q8_0, 798_887_936]]);
    const q4 = planned('q4_k_m');
    expect([q4.step.matrixBytes, q4.step.stateBytes, q4.step.total]).toEqual([516_341_760, 40_402_944, 556_744_704]);
    expect(q4.byType.get(GgmlType.Q4_K)).toBe(219_156_480);
    expect(q4.byType.get(GgmlType.Q6_K)).toBe(297_185_280);
    expect(q4.byType.size).toBe(2);
    // The tied embedding, read as the head: Q6_K.
    expect(q4.embed).toEqual({ type: GgmlType.Q6_K, n: 208_588_800 });
  });

  it('costs a prompt token 2 FLOPs per layer matrix weight, without the embedding or the head', () => {
    // 0.8B: 751,894,528 matrix weights less the 248320 x 1024 embedding.
    expect(prefillFlopsPerToken(modelOf(c08))).toBe(2 * (751_894_528 - c08.vocabSize * c08.hiddenSize));
    expect(prefillFlopsPerToken(modelOf({ ...c08, tieWordEmbeddings: false }))).toBe(2 * (751_894_528 - c08.vocabSize * c08.hiddenSize));
  });
});

describe('issue 19 targets', () => {
  const pass = { isl: 512, prefillRatio: 2.1, decodeRatio: 1.35, decodeRoof: judgedFractions([0.81, 0.83, 0.8]), c8OverC1: 5.2 };

  it('meets each target at or above its threshold, and names the one missed', () => {
    expect(judgeTargets(pass).map((t) => t.met)).toEqual([true, true, true, true]);
    const miss = judgeTargets({ ...pass, decodeRoof: judgedFractions([0.79, 0.78, 0.8]), c8OverC1: 4.9 });
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

  it('prints a figure just under its line with the digits that show it is under, and one at the line plainly', () => {
    expect(formatTarget(judgeTargets({ ...pass, decodeRoof: judgedFractions([0.7996, 0.7996, 0.81]) })[1]!))
      .toBe('decode c=1 >= 80 % of the roofline: NOT met (79.96 %, needs 80 %)');
    expect(formatTarget(judgeTargets({ ...pass, c8OverC1: 4.996 })[3]!)).toBe('aggregate c=8 >= 5x own c=1: NOT met (4.996x, needs 5.00x)');
    expect(formatTarget(judgeTargets({ ...pass, decodeRoof: judgedFractions([0.8, 0.8, 0.9]) })[1]!)).toBe('decode c=1 >= 80 % of the roofline: met (80 %)');
    expect(formatTarget(judgeTargets({ ...pass, c8OverC1: 5 })[3]!)).toBe('aggregate c=8 >= 5x own c=1: met (5.00x)');
    expect(formatTargetValue(0.79999, 0.8, '%')).toBe('79.999 %');
    expect(formatTargetValue(1.2999, 1.3, 'x')).toBe('1.2999x');
    expect(formatTargetValue(0.796, 0.8, '%')).toBe('79.6 %');
    expect(formatTargetValue(0.79, 0.8, '%')).toBe('79 %');
    expect(formatTargetValue(5.004, 5, 'x')).toBe('5.00x');
    // Whatever the value, a verdict of not met never prints a figure that reads as the line or above it.
    for (const v of [0.8 - 1e-9, 0.8 - Number.EPSILON, 0.7999999999999999, ...Array.from({ length: 100 }, (_, i) => (7900 + i) / 10000)]) {
      expect(Number.parseFloat(formatTargetValue(v, 0.8, '%'))).toBeLessThan(80);
    }
    for (const v of [5 - 1e-9, 5 - 4 * Number.EPSILON, ...Array.from({ length: 100 }, (_, i) => (4900 + i) / 1000)]) {
      expect(Number.parseFloat(formatTargetValue(v, 5, 'x'))).toBeLessThan(5);
    }
  });

  it('judges the c=1 fraction without the rounds above 100 %, and not at all with fewer than 2 rounds left', () => {
    // Round 2 (104 %) would make the median 82 % and the target met; without it the median of 76 and 82 % is 79 %.
    const two = judgeTargets({ ...pass, decodeRoof: judgedFractions([0.76, 1.04, 0.82]) })[1]!;
    expect(two.met).toBe(false);
    expect(two.value).toBeCloseTo(0.79, 12);
    expect(formatTarget(two)).toBe('decode c=1 >= 80 % of the roofline: NOT met (79 %, needs 80 %); round 2 of 3 left out (above 100 % of the roofline its probes gave: not a measurement)');
    const one = judgeTargets({ ...pass, decodeRoof: judgedFractions([1.02, 0.85, 1.01]) })[1]!;
    expect(one.met).toBeNull();
    expect(formatTarget(one)).toBe('decode c=1 >= 80 % of the roofline: not judged; 1 of 3 rounds a measurement, fewer than 2; rounds 1, 3 of 3 left out (above 100 % of the roofline its probes gave: not a measurement)');
  });
});

/** A round of ours and llama.cpp, the limits given (sustained and best read GB/s, peak GFLOP/s). */
const round = (ours: [number, number, number], llama: [number, number, number], readGBs = 70, readBestGBs = 75, peakGflops = NaN): PeerRound => {
  const f = ([prefill, decode1, decode8]: [number, number, number]): Figures => ({ prefill, decode1, decode8 });
  return { ours: f(ours), llama: f(llama), readGBs, readBestGBs, peakGflops };
};

describe('a run\'s figures from its rounds', () => {
  // The thirty-fourth session's Q8_0 rounds (docs/performance.md: ours prefill / c=1 / c=8; llama.cpp's
  // c=1 / c=8 made up). The median c=8 (346.91) over the median c=1 (68.84) is 5.039, but those two are
  // of different rounds; each round's own ratio is 4.920, 4.827, 5.232, and their median 4.920.
  const q8 = [
    round([708.2, 68.84, 338.69], [162, 27.4, 52.4]),
    round([728.8, 72.79, 351.35], [160, 27.0, 55.0]),
    round([725.2, 66.31, 346.91], [165, 28.0, 50.0]),
  ];

  it('takes c=8 / c=1 within each round, then the median, for both engines', () => {
    const s = summarizeRounds(q8, 839e6, 1e9, true);
    expect(s.c8OverC1.rounds.ours).toEqual([338.69 / 68.84, 351.35 / 72.79, 346.91 / 66.31]);
    expect(s.c8OverC1.ours).toBe(338.69 / 68.84);
    expect(s.c8OverC1.ours).toBeLessThan(5);
    expect(s.ours.decode8 / s.ours.decode1).toBeGreaterThan(5); // the ratio of the medians, which pairs rounds 3 and 1
    expect(s.c8OverC1.rounds.llama).toEqual([52.4 / 27.4, 55 / 27, 50 / 28]);
    expect(s.c8OverC1.llama).toBe(52.4 / 27.4);
    expect(judgeTargets({ isl: 512, prefillRatio: s.ratios.prefill, decodeRatio: s.ratios.decode1, decodeRoof: s.decode, c8OverC1: s.c8OverC1.ours })[3]!.met).toBe(false);
    // The other way round: the ratio of the medians under the line, the rounds' own ratios over it.
    const up = summarizeRounds([round([1, 60, 306], [1, 1, 1]), round([1, 70, 360], [1, 1, 1]), round([1, 66, 320], [1, 1, 1])], 1, 1, true);
    expect(up.ours.decode8 / up.ours.decode1).toBeLessThan(5); // 320 / 66 = 4.85
    expect(up.c8OverC1.rounds.ours).toEqual([306 / 60, 360 / 70, 320 / 66]); // 5.10, 5.14, 4.85
    expect(up.c8OverC1.ours).toBe(306 / 60);
  });

  it('takes ours / llama.cpp within each round, then the median', () => {
    // llama.cpp's c=1 ran fast in the round where ours ran slow: the medians (69.0 / 27.4) pair ours of
    // round 1 with llama.cpp's of round 1 by chance only; each round's own ratio is 2.51, 2.27, 2.81.
    const rs = [round([700, 69, 340], [160, 27.5, 52]), round([720, 62, 330], [165, 27.3, 50]), round([690, 76, 345], [150, 27.0, 55])];
    const s = summarizeRounds(rs, 1e9, 1e9, true);
    expect(s.ratioRounds.decode1).toEqual([69 / 27.5, 62 / 27.3, 76 / 27]);
    expect(s.ratios.decode1).toBe(69 / 27.5);
    expect(s.ours.decode1 / s.llama.decode1).not.toBe(s.ratios.decode1); // 69 / 27.3: rounds 1 and 2
    expect(s.ratioRounds.prefill).toEqual([700 / 160, 720 / 165, 690 / 150]);
    expect(s.ratios.prefill).toBe(700 / 160);
    expect(s.ratios.decode8).toBe(340 / 52);
    // A prefill ratio that crosses 2x only as a ratio of medians is not met paired.
    const p = summarizeRounds([round([400, 1, 1], [210, 1, 1]), round([430, 1, 1], [200, 1, 1]), round([380, 1, 1], [195, 1, 1])], 1, 1, true);
    expect(p.ours.prefill / p.llama.prefill).toBe(2); // 400 / 200: round 1's ours over round 2's llama.cpp
    expect(p.ratios.prefill).toBe(380 / 195); // rounds 1.90, 2.15, 1.95
    expect(judgeTargets({ isl: 512, prefillRatio: p.ratios.prefill, decodeRatio: p.ratios.decode1, decodeRoof: p.decode, c8OverC1: p.c8OverC1.ours })[2]!.met).toBe(false);
  });

  it('sets each round\'s c=1 against the bandwidth probed around it, and leaves a round above 100 % out of the median', () => {
    const step = 1e9; // 1 GB a step: the roofline in tok/s is the read in GB/s
    const rs = [round([1, 60, 1], [1, 1, 1], 80, 90), round([1, 50, 1], [1, 1, 1], 48, 60), round([1, 62, 1], [1, 1, 1], 70, 75)];
    const s = summarizeRounds(rs, step, 1, true);
    expect(s.decode.rounds).toEqual([60 / 80, 50 / 48, 62 / 70]);
    expect(s.decode.leftOut).toEqual([2]);
    expect(s.decode.valid).toBe(2);
    expect(s.decode.median).toBeCloseTo((60 / 80 + 62 / 70) / 2, 12);
    expect(s.decodeBest.rounds).toEqual([60 / 90, 50 / 60, 62 / 75]);
    expect(s.decodeBest.leftOut).toEqual([]);
    expect(s.decodeBest.median).toBe(62 / 75);
    // Against the median read (70 GB/s) instead, the median c=1 (60) would read 86 %.
    expect(s.readGBs).toBe(70);
    expect(s.decodeRoof).toBe(70);
    expect(s.prefill).toBeNull();
  });

  it('sets a float prefill against the peak probed around it, per round', () => {
    const rs = [round([500, 40, 200], [1, 1, 1], 70, 75, 800), round([400, 40, 200], [1, 1, 1], 70, 75, 500), round([600, 40, 200], [1, 1, 1], 70, 75, 820)];
    const s = summarizeRounds(rs, 1.5e9, 1e9, false);
    expect(s.prefill!.rounds).toEqual([500 / 800, 400 / 500, 600 / 820]);
    expect(s.prefill!.median).toBe(600 / 820);
    expect(s.prefillPeak).toBe(800);
  });

  it('needs two rounds that are measurements to judge a fraction', () => {
    expect(judgedFractions([0.9])).toMatchObject({ judged: false, valid: 1, leftOut: [] });
    expect(Number.isNaN(judgedFractions([0.9]).median)).toBe(true);
    expect(judgedFractions([1.01, 0.9, 1.2])).toMatchObject({ judged: false, valid: 1, leftOut: [1, 3] });
    expect(judgedFractions([1, 0.9])).toMatchObject({ judged: true, valid: 2, leftOut: [], median: 0.95 });
  });

  it('takes the higher of the limits probed before and after a measurement, and a prefill from enqueue to first token', () => {
    expect(higherLimit({ readGBs: 80, readGBsMedian: 60 }, { readGBs: 75, readGBsMedian: 66 })).toEqual({ readGBs: 80, readGBsMedian: 66 });
    expect(prefillRate(512, 1000, 1800)).toBe(640);
  });
});

describe('the order of a round', () => {
  it('rotates the types and alternates which engine goes first, so that every (type, engine) takes every place', () => {
    for (const types of [['bf16'], ['q8_0', 'q4_k_m'], ['bf16', 'q8_0', 'q4_k_m']]) {
      const n = 2 * types.length;
      const orders = Array.from({ length: n }, (_, r) => peerRoundOrder(types, r).map((s) => `${s.type} ${s.engine}`));
      for (const o of orders) expect(new Set(o).size).toBe(n);
      for (let slot = 0; slot < n; slot++) expect(new Set(orders.map((o) => o[slot])).size).toBe(n);
      // Each type's two engines next to each other, and the cycle repeats after 2 x types rounds.
      for (const o of orders) for (let i = 0; i < n; i += 2) expect(o[i]!.split(' ')[0]).toBe(o[i + 1]!.split(' ')[0]);
      expect(peerRoundOrder(types, n)).toEqual(peerRoundOrder(types, 0));
    }
    expect(peerRoundOrder(['q8_0', 'q4_k_m'], 0).map((s) => `${s.type} ${s.engine}`)).toEqual(['q8_0 ours', 'q8_0 llama', 'q4_k_m ours', 'q4_k_m llama']);
    expect(peerRoundOrder(['q8_0', 'q4_k_m'], 1).map((s) => `${s.type} ${s.engine}`)).toEqual(['q4_k_m ours', 'q4_k_m llama', 'q8_0 ours', 'q8_0 llama']);
    expect(peerRoundOrder(['q8_0', 'q4_k_m'], 2).map((s) => `${s.type} ${s.engine}`)).toEqual(['q8_0 llama', 'q8_0 ours', 'q4_k_m llama', 'q4_k_m ours']);
  });
});

describe('llama.cpp\'s tools\' output', () => {
  // The shape tools/llama-bench/llama-bench.cpp prints with -o json (fields abridged), after log lines.
  const benchRow = (o: Record<string, unknown>) => ({
    build_commit: '80fb11ac', model_filename: '/m/peer-0.8b-q8_0-abc.gguf', model_type: 'qwen35 0.8B Q8_0', n_batch: 2048, n_ubatch: 512,
    n_threads: 2, type_k: 'f16', type_v: 'f16', n_gpu_layers: 0, flash_attn: 1, load_mode: 'none', n_prompt: 0, n_gen: 48, n_depth: 128,
    avg_ns: 1_700_000_000, stddev_ns: 0, avg_ts: 28.25, stddev_ts: 0, samples_ns: [1_700_000_000], samples_ts: [28.25], ...o,
  });
  const benchOut = (...rows: Record<string, unknown>[]) => `load_backend: loaded CPU backend\n${JSON.stringify(rows.map(benchRow), null, 2)}\n`;
  const ask = { model: '/m/peer-0.8b-q8_0-abc.gguf', threads: 2, prompt: 0, gen: 48, depth: 128 };

  it('reads the row of the test asked for', () => {
    expect(parseLlamaBench(benchOut({ n_prompt: 512, n_gen: 0, n_depth: 0, avg_ts: 160 }, {}), ask)).toBe(28.25);
    expect(parseLlamaBench(benchOut({ n_prompt: 512, n_gen: 0, n_depth: 0, avg_ts: 160 }), { ...ask, prompt: 512, gen: 0, depth: 0 })).toBe(160);
  });

  it('fails loudly on a row of other threads, flash attention off, another file or another depth', () => {
    expect(() => parseLlamaBench(benchOut({ n_threads: 16 }), ask)).toThrow(/not the test asked for: n_threads 16, asked 2/);
    expect(() => parseLlamaBench(benchOut({ flash_attn: 0 }), ask)).toThrow(/flash_attn 0, asked 1/);
    expect(() => parseLlamaBench(benchOut({ flash_attn: -1 }), ask)).toThrow(/flash_attn -1, asked 1/);
    // Mapped from the page cache: another memory than ours (llama-native.ts).
    expect(() => parseLlamaBench(benchOut({ load_mode: 'mmap' }), ask)).toThrow(/load_mode "mmap", asked "none"/);
    expect(() => parseLlamaBench(benchOut({ model_filename: '/m/peer-0.8b-q4_k_m-abc.gguf' }), ask)).toThrow(/model_filename "\/m\/peer-0.8b-q4_k_m-abc.gguf", asked "\/m\/peer-0.8b-q8_0-abc.gguf"/);
    expect(() => parseLlamaBench(benchOut({ n_threads: 1, flash_attn: 0 }), ask)).toThrow(/n_threads 1, asked 2; flash_attn 0/);
    expect(() => parseLlamaBench(benchOut({ n_depth: 0 }), ask)).toThrow(/no result for prompt 0, gen 48, depth 128/);
    expect(() => parseLlamaBench('error: failed to load model\n', ask)).toThrow(/no JSON array/);
  });

  // tools/batched-bench/batched-bench.cpp with --output-format jsonl.
  const batchedLine = (o: Record<string, unknown>) => JSON.stringify({
    n_kv_max: 1424, n_batch: 2048, n_ubatch: 512, flash_attn: 1, is_pp_shared: 0, n_gpu_layers: 0, n_threads: 2, n_threads_batch: 2,
    pp: 128, tg: 48, pl: 8, n_kv: 1408, t_pp: 5.1, speed_pp: 200.7, t_tg: 6.9, speed_tg: 55.6, t: 12, speed: 117.3, ...o,
  });
  const bAsk = { threads: 2, prompt: 128, gen: 48, sequences: 8 };

  it('reads the aggregate decode rate of the run asked for, and fails loudly on another', () => {
    expect(parseBatchedBench(`main: n_kv_max = 1424\n${batchedLine({})}\n`, bAsk)).toBe(55.6);
    expect(() => parseBatchedBench(`${batchedLine({ n_threads: 4, n_threads_batch: 4 })}\n`, bAsk)).toThrow(/n_threads 4, asked 2; n_threads_batch 4, asked 2/);
    expect(() => parseBatchedBench(`${batchedLine({ flash_attn: -1 })}\n`, bAsk)).toThrow(/flash_attn -1, asked 1/);
    expect(() => parseBatchedBench(`${batchedLine({ pl: 4 })}\n`, bAsk)).toThrow(/no result for pp 128, tg 48, pl 8/);
    expect(() => parseBatchedBench('nothing\n', bAsk)).toThrow(/no jsonl result/);
  });
});

describe('bench:batch: the speedup over c=1, paired by round', () => {
  it('divides each round\'s c by the same round\'s c=1, then takes the median', () => {
    // Round 2 ran slow throughout and round 1 fast: each round's own c=8 over c=1 is 5.14, 5.10, 4.85
    // (median 5.10), but the median c=8 over the median c=1 (both round 3's here) reads 4.85.
    const rates = new Map([[0, [500, 510, 505]], [1, [70, 60, 66]], [8, [360, 306, 320]]]);
    const s = speedupsOverC1(rates)!;
    expect([...s.keys()]).toEqual([1, 8]); // the prefill (0) left out
    expect(s.get(1)).toEqual([1, 1, 1]);
    expect(s.get(8)).toEqual([360 / 70, 306 / 60, 320 / 66]);
    expect(median(s.get(8)!)).toBe(306 / 60);
    expect(median(rates.get(8)!) / median(rates.get(1)!)).toBeLessThan(5);
    expect(median(s.get(8)!)).toBeGreaterThan(5);
  });

  it('has no speedup without c=1 (it was taken over the first level listed), and refuses rounds that do not pair', () => {
    expect(speedupsOverC1(new Map([[4, [100, 110]], [8, [180, 190]]]))).toBeNull();
    expect(() => pairedRatios([1, 2, 3], [1, 2])).toThrow(/3 rounds against 2/);
  });

  it('rotates an A/B\'s order so each build takes each slot once over their number of rounds', () => {
    const orders = [0, 1, 2].map((r) => roundOrder(['a', 'b', 'c'], r));
    expect(orders).toEqual([['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b']]);
  });
});
