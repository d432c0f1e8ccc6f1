// Compare our engine with llama.cpp on one checkpoint and one prompt.
//
//   node dist/scripts/compare-llama.js --model-path DIR (--prompt-ids 1,2,3 | --prompt-len N)
//        [--new-tokens 32] [--seed 0] [--threads 2] [--tol 1e-3] [--gguf FILE] [--json]
//
// Converts DIR to an f32 GGUF (our converter), evaluates the prompt with llama.cpp
// (node-llama-cpp, CPU) and with `bench prompt` (our engine, CPU), and reports the largest
// log-softmax difference over every prompt position and the whole vocabulary, and whether the
// greedy continuations match. node-llama-cpp does not expose raw logits, only the softmax
// probabilities, so "logits" are compared with each position's max logit subtracted.
// Exit status: 0 within tolerance and same continuation, 1 otherwise, 2 usage error.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Command, CommanderError } from 'commander';
import { countArg, idListArg, numberArg } from '../src/cli/flag-values.js';
import { UsageError } from '../src/util/usage-error.js';
import { ConvertError, writeGguf } from '../src/convert/convert.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { CheckpointError } from '../src/model/types.js';
import { REPO_ROOT } from '../src/util/version.js';
import { compareLogSoftmax, LlamaRef, logSoftmax, pseudoRandomIds } from '../test/helpers/llama-ref.js';

const execFileP = promisify(execFile);

interface Opts {
  modelPath?: string;
  promptIds?: number[];
  promptLen?: number;
  newTokens: number;
  seed: number;
  threads: number;
  tol: number;
  gguf?: string;
  json?: boolean;
}

async function bench(args: string[]): Promise<string> {
  const bin = join(REPO_ROOT, 'bin', 'bench.js');
  try {
    const { stdout } = await execFileP(process.execPath, [bin, ...args], { cwd: REPO_ROOT, maxBuffer: 64 << 20 });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`bench ${args[0]} failed: ${(e.stderr ?? '').trim() || e.message}`);
  }
}

async function run(opts: Opts): Promise<number> {
  if (!opts.modelPath) throw new UsageError('--model-path <dir> is required');
  if ((opts.promptIds === undefined) === (opts.promptLen === undefined)) {
    throw new UsageError('give exactly one of --prompt-ids 1,2,3 or --prompt-len N');
  }
  const dir = resolve(opts.modelPath);
  let ckpt;
  try {
    ckpt = loadCheckpoint(dir);
  } catch (err) {
    if (err instanceof CheckpointError) throw new UsageError(err.message);
    throw err;
  }
  const V = ckpt.config.vocabSize;
  // Pseudo-random prompts stay in the plain BPE range (below the first special token).
  const normalTop = Math.min(V, 248044);
  const prompt = opts.promptIds ?? pseudoRandomIds(opts.promptLen!, opts.seed, 0, normalTop);
  const bad = prompt.find((t) => t >= V);
  if (bad !== undefined) throw new UsageError(`--prompt-ids: token ${bad} is outside the vocabulary (${V})`);
  const log = (s: string) => { if (!opts.json) process.stdout.write(`${s}\n`); };

  const work = mkdtempSync(join(tmpdir(), 'lumen-compare-'));
  const gguf = opts.gguf ? resolve(opts.gguf) : join(work, 'model-f32.gguf');
  const t: Record<string, number> = {};
  try {
    log(`model     ${dir} (${ckpt.dtype}; hidden ${ckpt.config.hiddenSize}, ${ckpt.config.numLayers} layers, ` +
      `linear heads ${ckpt.config.linearNumKeyHeads}k/${ckpt.config.linearNumValueHeads}v, ` +
      `${ckpt.config.tieWordEmbeddings ? 'tied' : 'untied'})`);
    if (ckpt.dtype !== 'F32') log(`note      the checkpoint is ${ckpt.dtype}: our engine may run it in ${ckpt.dtype}, llama.cpp runs the f32 GGUF`);
    log(`prompt    ${prompt.length} tokens${opts.promptIds ? '' : ` (pseudo-random, seed ${opts.seed})`}; greedy continuation ${opts.newTokens}`);

    let t0 = performance.now();
    if (!opts.gguf || !existsSync(gguf)) {
      try {
        writeGguf(ckpt, gguf, { dtype: 'f32' });
      } catch (err) {
        if (err instanceof ConvertError || err instanceof CheckpointError) throw new UsageError(err.message); // (the tokenizer files: CheckpointError)
        throw err;
      }
      t.convert = performance.now() - t0;
      log(`convert   ${gguf} (f32) in ${(t.convert / 1000).toFixed(1)} s`);
    } else {
      log(`convert   reusing ${gguf}`);
    }

    t0 = performance.now();
    const ref = await LlamaRef.load(gguf, { threads: opts.threads, contextSize: Math.max(512, prompt.length + opts.newTokens + 8) });
    let refRes;
    try {
      refRes = await ref.evaluate(prompt, { newTokens: opts.newTokens, logSoftmax: 'all' });
    } finally {
      await ref.close();
    }
    t.llama = performance.now() - t0;

    t0 = performance.now();
    const logitsFile = join(work, 'ours.f32');
    const common = ['--model-path', dir, '--prompt-ids', prompt.join(','), '--device', 'cpu', '--threads', String(opts.threads)];
    await bench(['prompt', ...common, '--max-new-tokens', '0', '--logits-out', logitsFile]);
    const buf = readFileSync(logitsFile);
    if (buf.length !== prompt.length * V * 4) {
      throw new Error(`our logits file holds ${buf.length} bytes, expected ${prompt.length} x ${V} float32`);
    }
    const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
    const ours = new Float32Array(logits.length);
    for (let r = 0; r < prompt.length; r++) logSoftmax(logits.subarray(r * V, (r + 1) * V), ours.subarray(r * V, (r + 1) * V));
    let ourGreedy: number[] = [];
    if (opts.newTokens > 0) {
      const out = await bench(['prompt', ...common, '--max-new-tokens', String(opts.newTokens), '--ignore-eos']);
      ourGreedy = (out.trim().split('\n').pop() ?? '').split(/\s+/).filter(Boolean).map(Number);
    }
    t.ours = performance.now() - t0;

    const cmp = compareLogSoftmax(ours, refRes.logSoftmax, V);
    const firstDiff = ourGreedy.findIndex((tok, i) => tok !== refRes.greedy[i]);
    const greedyMatch = ourGreedy.length === refRes.greedy.length && firstDiff === -1;
    const pass = cmp.maxAbs <= opts.tol && cmp.floorViolations === 0 && greedyMatch;

    if (opts.json) {
      process.stdout.write(`${JSON.stringify({
        model: dir, promptTokens: prompt.length, newTokens: opts.newTokens,
        compared: 'log-softmax at every prompt position (llama.cpp exposes probabilities, not raw logits)',
        maxAbsLogSoftmax: cmp.maxAbs, at: { position: cmp.row, token: cmp.token },
        maxAbsLogitMinusMax: cmp.maxAbsCentered, argmaxMismatches: cmp.argmaxMismatches,
        belowFloorViolations: cmp.floorViolations, greedyMatch, oursGreedy: ourGreedy, llamaGreedy: refRes.greedy,
        tolerance: opts.tol, pass, ms: t,
      })}\n`);
    } else {
      log('compared  llama.cpp (node-llama-cpp) gives softmax probabilities, not raw logits; compared are');
      log('          log-softmax, and logits minus each position\'s max logit, at every prompt position x vocab');
      log(`max |Δ log-softmax|         ${cmp.maxAbs.toExponential(3)} (position ${cmp.row}, token ${cmp.token}); tolerance ${opts.tol}`);
      log(`max |Δ(logit - max logit)|  ${cmp.maxAbsCentered.toExponential(3)}`);
      log(`argmax mismatches           ${cmp.argmaxMismatches} / ${prompt.length} positions`);
      if (cmp.floorViolations > 0) log(`below-float-floor entries   ${cmp.floorViolations} where llama.cpp's probability underflowed but ours is not tiny`);
      if (opts.newTokens > 0) {
        log(`greedy ${opts.newTokens} tokens           ${greedyMatch ? 'match' : `differ at index ${firstDiff === -1 ? ourGreedy.length : firstDiff}`}`);
        if (!greedyMatch) {
          log(`  ours      ${ourGreedy.join(' ')}`);
          log(`  llama.cpp ${refRes.greedy.join(' ')}`);
        }
      }
      // Wall time of each side's steps, not a speed comparison: ours is one or two `bench prompt`
      // processes (each loads the model), llama.cpp one load in this process.
      log(`time      convert ${((t.convert ?? 0) / 1000).toFixed(1)} s, llama.cpp ${(t.llama / 1000).toFixed(1)} s (one load in this process), ours ${(t.ours / 1000).toFixed(1)} s (${opts.newTokens > 0 ? 'two `bench prompt` processes, each loading the model' : 'one `bench prompt` process'}); wall times of the steps, not a speed comparison`);
      log(pass ? 'PASS' : 'FAIL');
    }
    return pass ? 0 : 1;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

async function main(argv: string[]): Promise<number> {
  const program = new Command('compare-llama')
    .description('compare our engine with llama.cpp (log-softmax at every position, greedy continuation)')
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) })
    .option('--model-path <dir>', 'checkpoint directory (f32 recommended)')
    .option('--prompt-ids <ids>', 'prompt token ids, comma separated', idListArg('--prompt-ids'))
    .option('--prompt-len <n>', 'pseudo-random prompt of N plain tokens', countArg('--prompt-len', 1, 100_000))
    .option('--new-tokens <n>', 'greedy continuation length', countArg('--new-tokens', 0, 100_000), 32)
    .option('--seed <n>', 'seed of the pseudo-random prompt', countArg('--seed', 0), 0)
    .option('--threads <n>', 'CPU threads for both engines', countArg('--threads', 1, 1024), 2)
    .option('--tol <x>', 'log-softmax tolerance', numberArg('--tol', 0), 1e-3)
    .option('--gguf <file>', 'GGUF path to write and keep (reused when it exists)')
    .option('--json', 'one JSON object on stdout instead of the report');
  let code = 0;
  program.action(async (opts: Opts) => { code = await run(opts); });
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) return err.code === 'commander.helpDisplayed' ? 0 : 2;
    if (err instanceof UsageError) {
      process.stderr.write(`compare-llama: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  return code;
}

main(process.argv).then(
  (code) => { process.exitCode = code; },
  (err) => {
    process.stderr.write(`compare-llama: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
