// `bench prompt`: greedy (or sampled) generation through the serving engine; the verification
// interface (generated ids on one line for --prompt-ids, raw float32 logits with --logits-out).
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command, Option } from 'commander';
import { loadModel, loadModelTokenizer, modelMaxPositions, outputClashWithModel } from '../model/model-path.js';
import { checkTokenizerFitsModel, type loadTokenizer } from '../model/tokenizer.js';
import { embeddedModelError, ensureEmbeddedModel } from '../model/embedded.js';
import { describeSynthetic, syntheticWeightsOf } from '../model/synthetic-model.js';
import { CheckpointError } from '../model/types.js';
import { KvMemoryError, loadEngine } from '../engine/engine.js';
import { resolveDevice } from '../engine/device.js';
import { engineLimits } from '../engine/limits.js';
import { checkKvMemoryForDevice, engineOptionsFrom } from '../engine/options.js';
import { ENGINE_FLAG_MAX, ENGINE_FLAGS, resolveEngineFlags, resolveModelPathFlags, type RawEngineFlags } from './engine-flags.js';
import { choiceArg, countArg, idListArg, numberArg } from './flag-values.js';
import { checkNamesFile, checkOutputFile, makeParentDirs } from '../util/output-dir.js';
import { UsageError } from '../util/usage-error.js';

interface PromptOpts extends Omit<RawEngineFlags, 'maxSeq' | 'maxSeqs'> {
  prompt?: string;
  promptIds?: number[];
  maxNewTokens: number;
  chat?: boolean;
  think?: boolean;
  logitsOut?: string;
  temperature: number;
  topK: number;
  topP: number;
  seed: number;
  ignoreEos?: boolean;
  weightDtype: 'auto' | 'f32' | 'bf16';
}

// Chat end-of-turn and end-of-text ids of Qwen3.5 (architecture doc §5).
const QWEN_STOP_IDS = [248046, 248044];

export function registerPrompt(program: Command, setResult: (code: number) => void): void {
  program
    .command('prompt')
    .description('generate from a prompt through the serving engine (greedy by default)')
    .argument('[text]', 'prompt text (the same as --prompt TEXT)')
    .addOption(ENGINE_FLAGS.modelPath())
    .addOption(ENGINE_FLAGS.quant())
    .option('--prompt <text>', 'prompt text (tokenized with the checkpoint tokenizer)')
    .option('--prompt-ids <ids>', 'prompt as token ids, comma separated', idListArg('--prompt-ids'))
    .option('--max-new-tokens <n>', 'tokens to generate (0 = evaluate the prompt only)', countArg('--max-new-tokens', 0, ENGINE_FLAG_MAX.tokens), 32)
    .option('--chat', 'wrap --prompt in the chat template as a user message')
    .option('--think', 'with --chat: enable thinking in the template')
    .option('--logits-out <file>', 'write raw float32 logits [prompt_len + new_tokens, vocab], row-major')
    .addOption(ENGINE_FLAGS.device())
    .addOption(ENGINE_FLAGS.threads())
    .addOption(ENGINE_FLAGS.kvcache())
    .addOption(ENGINE_FLAGS.paged())
    .addOption(ENGINE_FLAGS.blockSize())
    .addOption(ENGINE_FLAGS.prefillChunk())
    .addOption(ENGINE_FLAGS.stepTokenBudget())
    .addOption(ENGINE_FLAGS.cudaGraphs())
    .addOption(ENGINE_FLAGS.kvMemory())
    .addOption(ENGINE_FLAGS.kvCacheDtype())
    .option('--temperature <t>', 'sampling temperature (0 = greedy)', numberArg('--temperature', 0, 100), 0)
    .option('--top-k <k>', 'top-k sampling (0 = off)', countArg('--top-k', 0, ENGINE_FLAG_MAX.tokens), 0)
    .option('--top-p <p>', 'top-p sampling (1 = off)', numberArg('--top-p', 0, 1), 1)
    .option('--seed <n>', 'sampling seed', countArg('--seed', 0, 0xffffffff), 0)
    .option('--ignore-eos', 'keep generating through end-of-sequence tokens')
    .addOption(new Option('--weight-dtype <t>', 'run weights as stored (auto), or convert to f32 / bf16').argParser(choiceArg('--weight-dtype', ['auto', 'f32', 'bf16'] as const)).default('auto'))
    .action(async (text: string | undefined, opts: PromptOpts) => {
      if (text !== undefined) {
        if (opts.prompt !== undefined) throw new UsageError('prompt: give the prompt text once (as an argument or as --prompt TEXT)');
        opts.prompt = text;
      }
      setResult(await runPrompt(opts));
    });
}

async function runPrompt(opts: PromptOpts): Promise<number> {
  if ((opts.prompt === undefined) === (opts.promptIds === undefined)) {
    throw new UsageError('prompt: give exactly one of --prompt TEXT or --prompt-ids 1,2,3');
  }
  if (opts.chat && opts.promptIds) throw new UsageError('--chat applies to --prompt TEXT, not --prompt-ids');
  if (opts.think && !opts.chat) throw new UsageError('--think applies with --chat (it switches the chat template\'s thinking on)');
  if (opts.logitsOut !== undefined) {
    checkNamesFile('--logits-out', opts.logitsOut);
    checkOutputFile('--logits-out', path.resolve(opts.logitsOut)); // its directories made when written
  }
  // The engine flags mean what they mean in the sweep and serve; max-seq is the request's length.
  const { modelPath, quant } = resolveModelPathFlags(opts);
  const flags = resolveEngineFlags(opts);
  const device = resolveDevice(flags.device);
  checkKvMemoryForDevice(flags.kvMemory, device);
  let dir: string;
  if (modelPath === null) {
    dir = await ensureEmbeddedModel();
    process.stderr.write(`bench: no --model-path; using the embedded synthetic model (${dir})\n`);
  } else {
    dir = modelPath;
    const synthetic = syntheticWeightsOf(dir);
    if (synthetic) process.stderr.write(`bench: --model-path ${describeSynthetic(synthetic)}\n`);
  }
  let ckpt;
  try {
    ckpt = loadModel(dir, { quant, hash: false });
  } catch (err) {
    // A bad checkpoint is the --model-path argument's fault, as in the sweep: exit 2.
    if (err instanceof CheckpointError) throw modelPath === null ? embeddedModelError(dir, err) : new UsageError(`--model-path: ${err.message}`);
    throw err;
  }
  if (opts.logitsOut !== undefined) {
    const why = outputClashWithModel(ckpt, path.resolve(opts.logitsOut));
    if (why !== null) throw new UsageError(`--logits-out ${opts.logitsOut}: ${why}`);
  }
  let ids: number[];
  let tokenizer: Awaited<ReturnType<typeof loadTokenizer>> | undefined;
  if (opts.promptIds) {
    ids = opts.promptIds;
    const bad = ids.find((t) => t >= ckpt.config.vocabSize);
    if (bad !== undefined) throw new UsageError(`--prompt-ids: token ${bad} is outside the vocabulary (${ckpt.config.vocabSize})`);
  } else {
    try {
      // The chat template only with --chat: a broken one does not stop a raw text prompt.
      tokenizer = await loadModelTokenizer(ckpt, { chatTemplate: !!opts.chat });
      checkTokenizerFitsModel(tokenizer, ckpt.config.vocabSize, ckpt.dir);
    } catch (err) {
      if (err instanceof CheckpointError) throw modelPath === null ? embeddedModelError(dir, err) : new UsageError(`--model-path: ${err.message}`);
      throw err;
    }
    let text = opts.prompt as string;
    if (opts.chat) {
      try {
        text = tokenizer.applyChatTemplate([{ role: 'user', content: text }], { addGenerationPrompt: true, enableThinking: !!opts.think });
      } catch (err) {
        // No template, or one that does not render: the model's, named by the message; --chat asked for it.
        if (err instanceof CheckpointError) throw new UsageError(`--chat: ${err.message}`);
        throw err;
      }
    }
    ids = tokenizer.encode(text);
    if (ids.length === 0) throw new UsageError(`prompt: the prompt text ${JSON.stringify(opts.prompt)} encodes to no tokens`);
  }
  // Qwen's end-of-turn ids, where the vocabulary has them (a small synthetic vocabulary does not).
  const stop = [...new Set([...QWEN_STOP_IDS, ckpt.config.eosTokenId, ...(tokenizer?.eosTokenIds ?? [])])].filter((t) => t >= 0 && t < ckpt.config.vocabSize);
  const total = ids.length + opts.maxNewTokens;
  // One position per token, prompt and output together: past the model's, the engine would run where
  // the model never trained, silently.
  const positions = modelMaxPositions(ckpt);
  const tokens = (n: number) => `${n} token${n === 1 ? '' : 's'}`;
  if (ids.length > positions.max) {
    throw new UsageError(`${opts.promptIds ? '--prompt-ids' : '--prompt'}: the prompt is ${tokens(ids.length)}, more than the model's maximum of ${positions.max} positions (${positions.source})`);
  }
  if (total > positions.max) {
    throw new UsageError(`--max-new-tokens: the prompt's ${tokens(ids.length)} + ${opts.maxNewTokens} new need ${total} positions, more than the model's maximum of ${positions.max} ` +
      `(${positions.source}); give --max-new-tokens ${positions.max - ids.length} or less`);
  }
  const logitBytes = total * ckpt.config.vocabSize * 4;
  const maxLogitBytes = engineLimits().maxLogitsAllBytes;
  if (opts.logitsOut !== undefined && logitBytes > maxLogitBytes) {
    throw new UsageError(`--logits-out: ${total} positions x vocabulary ${ckpt.config.vocabSize} x 4 bytes is ${Math.floor(logitBytes / 2 ** 20)} MiB, ` +
      `more than the ${maxLogitBytes / 2 ** 20} MiB one request may return (at most ${Math.floor(maxLogitBytes / (ckpt.config.vocabSize * 4))} positions: shorten the prompt or --max-new-tokens)`);
  }
  // One request, no prefix cache: its prefill is chunked by --prefill-chunk alone (no snapshot stops),
  // the layout the parity tests compare.
  let engine;
  try {
    engine = await loadEngine(ckpt, {
      ...engineOptionsFrom({ ...flags, maxSeq: Math.min(Math.max(total, 16), positions.max) }, device, 1), prefixCache: false,
    }, {}, { weightDtype: opts.weightDtype });
  } catch (err) {
    // A KV cache that cannot be had: --kv-memory's doing when given; else (the CPU sizes the pool for
    // one sequence: there is no --max-seq here) the prompt's and --max-new-tokens'.
    if (err instanceof KvMemoryError) {
      const msg = err.message;
      if (flags.kvMemory !== null) throw new UsageError(`--kv-memory: ${msg}`);
      if (device === 'cpu') {
        const flag = opts.maxNewTokens > 0 ? '--max-new-tokens' : opts.promptIds ? '--prompt-ids' : '--prompt';
        throw new UsageError(`${flag}: one sequence of ${total} tokens (the prompt's ${ids.length} + ${opts.maxNewTokens} new) needs a KV cache that cannot be had (${msg}); ` +
          (opts.maxNewTokens > 0 ? 'lower --max-new-tokens' : 'shorten the prompt'));
      }
    }
    throw err;
  }
  try {
    const result = await engine.submit({
      prompt: ids, maxTokens: opts.maxNewTokens, temperature: opts.temperature, topK: opts.topK, topP: opts.topP,
      seed: opts.seed, stopTokens: stop, ignoreEos: !!opts.ignoreEos, logits: opts.logitsOut ? 'all' : 'none',
    }).done;
    // The rows computed are written even when generation failed (the engine fails a request whose
    // logits hold NaN or infinite values rather than pick a token from them): they show where.
    let logitsNote = '';
    if (opts.logitsOut && result.logits) {
      try {
        makeParentDirs(opts.logitsOut);
        writeFileSync(opts.logitsOut, Buffer.from(result.logits.buffer, result.logits.byteOffset, result.logits.byteLength));
        logitsNote = ` (--logits-out holds the ${result.logits.length / ckpt.config.vocabSize} rows computed)`;
      } catch (err) {
        process.stderr.write(`bench: --logits-out: cannot write ${opts.logitsOut} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})\n`);
        return 1;
      }
    }
    if (result.finishReason === 'error') {
      process.stderr.write(`bench: generation failed: ${result.error}${logitsNote}\n`);
      return 1;
    }
    if (opts.promptIds) {
      process.stdout.write(`${result.tokens.join(' ')}\n`);
    } else if (tokenizer) {
      const shown = result.tokens.filter((t) => !stop.includes(t));
      process.stdout.write(`${tokenizer.decode(shown)}\n`);
    }
  } finally {
    await engine.close();
  }
  return 0;
}
