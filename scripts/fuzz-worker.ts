// The fuzzer's child process: loads each case it is sent through the real CLI loading path
// (loadCheckpoint, loadTokenizer, the native engine and one short greedy request; or the GGUF
// reader) and reports the outcome over IPC. A crash or hang here is caught by the parent.
import { statSync } from 'node:fs';
import { loadEngine } from '../src/engine/engine.js';
import type { EngineOptions } from '../src/engine/types.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { modelMaxPositions } from '../src/model/model-path.js';
import { parseGguf, parseGgufHeader } from '../src/model/gguf-reader.js';
import { checkTokenizerFitsModel, loadTokenizer } from '../src/model/tokenizer.js';
import { UsageError } from '../src/util/usage-error.js';
import { checkCheckpoint, checkGguf, judgeError, Violation } from './fuzz/oracle.js';
import type { CaseRequest, CaseResult } from './fuzz/protocol.js';

const ENGINE: EngineOptions = {
  device: 'cpu', threads: 1, blockSize: 16, kvcache: 'paged', maxSeq: 64, maxSeqs: 1, prefillChunk: 64, stepTokenBudget: 256, prefixCache: false,
};

const USER_TURN = 'Hello there, how are you?';
/**
 * The request encodes at most this much of the rendered prompt: a template may legitimately
 * render a huge prompt (a 1 MiB literal), and tokenizing and prefilling that is slow work, not a
 * parser defect.
 */
const MAX_PROMPT_CHARS = 4096;

/** Tokens the request generates. */
const MAX_TOKENS = 2;

/** Stages after which an error is the engine's (the loaders accepted the input). */
const ENGINE_STAGES = new Set(['engine', 'request']);

async function loadCheckpointCase(dir: string, setStage: (s: string) => void): Promise<void> {
  setStage('checkpoint');
  const ckpt = loadCheckpoint(dir);
  checkCheckpoint(ckpt, dir);
  setStage('tokenizer');
  const tok = await loadTokenizer(dir);
  checkTokenizerFitsModel(tok, ckpt.config.vocabSize, dir);
  setStage('prompt');
  const text = tok.hasChatTemplate ? tok.applyChatTemplate([{ role: 'user', content: USER_TURN }], { addGenerationPrompt: true }) : USER_TURN;
  const ids = tok.encode(text.slice(0, MAX_PROMPT_CHARS));
  if (ids.length === 0) throw new Violation('loaded, but the prompt encodes to no tokens');
  const vocab = ckpt.config.vocabSize;
  const badId = ids.find((t) => !Number.isInteger(t) || t < 0 || t >= vocab);
  if (badId !== undefined) throw new Violation(`loaded, but the tokenizer produced id ${badId} outside the vocabulary (${vocab})`);
  // The positions the model was built for bound the request, as in every command (`bench prompt`
  // refuses more with a usage error naming max_position_embeddings and the file, before the engine).
  const positions = modelMaxPositions(ckpt);
  if (ids.length + MAX_TOKENS > positions.max) {
    throw new UsageError(`the prompt's ${ids.length} tokens + ${MAX_TOKENS} new need more than the model's maximum of ${positions.max} positions (${positions.source})`);
  }
  setStage('engine');
  const engine = await loadEngine(ckpt, { ...ENGINE, maxSeq: Math.min(Math.max(64, ids.length + 8), positions.max) });
  try {
    setStage('request');
    const res = await engine.submit({
      prompt: ids, maxTokens: MAX_TOKENS, temperature: 0, stopTokens: [...new Set([ckpt.config.eosTokenId, ...tok.eosTokenIds])],
    }).done;
    // Damaged weight bytes are still weights: a NaN or infinity among them makes the logits NaN, and
    // the engine refusing to pick a token from them is the clean outcome (it picked token 0 before).
    if (res.finishReason === 'error' && res.errorCode === 'non_finite_logits') return;
    if (res.finishReason === 'error') throw new Error(`the request failed: ${res.error ?? 'no reason given'}`);
    const out = res.tokens.find((t) => !Number.isInteger(t) || t < 0 || t >= vocab);
    if (out !== undefined) throw new Violation(`loaded, but the engine generated id ${out} outside the vocabulary (${vocab})`);
  } finally {
    await engine.close();
  }
}

/**
 * What the libraries printed through console.* during the current case: a load must fail with one
 * error, not also leave warnings on the user's terminal.
 */
let consoleOutput: string[] = [];
for (const k of ['log', 'info', 'warn', 'error', 'debug'] as const) {
  console[k] = (...args: unknown[]) => { consoleOutput.push(`console.${k}: ${args.map(String).join(' ').slice(0, 200)}`); };
}

async function runCase(req: CaseRequest): Promise<CaseResult> {
  consoleOutput = [];
  const result = await runLoads(req);
  if (consoleOutput.length > 0 && result.outcome !== 'failure') {
    return { ...result, outcome: 'failure', why: `the load printed to the console (${consoleOutput[0]})` };
  }
  return result;
}

async function runLoads(req: CaseRequest): Promise<CaseResult> {
  const t0 = performance.now();
  let stage = 'start';
  const done = (r: Omit<CaseResult, 'type' | 'index' | 'ms' | 'rssBytes' | 'stage'>): CaseResult => ({
    type: 'result', index: req.index, stage, ...r, ms: performance.now() - t0, rssBytes: process.memoryUsage.rss(),
  });
  try {
    if (req.kind === 'gguf') {
      stage = 'gguf';
      const full = parseGguf(req.path);
      checkGguf(full, statSync(req.path).size);
      // The header-only reader the model loader uses must accept the same file the same way.
      stage = 'gguf-header';
      const head = parseGgufHeader(req.path);
      if (head.dataStart !== full.dataStart || head.tensorOrder.join('\n') !== full.tensorOrder.join('\n') || head.kv.size !== full.kv.size) {
        throw new Violation('loaded, but the header-only reader (parseGgufHeader) reads it differently');
      }
    } else {
      await loadCheckpointCase(req.path, (s) => { stage = s; });
    }
    return done({ outcome: 'loaded' });
  } catch (err) {
    if (err instanceof Violation) return done({ outcome: 'failure', errorClass: 'Violation', message: err.message, why: err.message });
    const v = judgeError(err, req.path);
    if (ENGINE_STAGES.has(stage)) {
      return done({ outcome: 'failure', errorClass: v.errorClass, message: v.message, why: `the engine rejected what the loaders accepted (${stage})` });
    }
    if (!v.clear) return done({ outcome: 'failure', errorClass: v.errorClass, message: v.message, why: v.why });
    return done({ outcome: 'rejected', errorClass: v.errorClass, message: v.message });
  }
}

function send(msg: unknown): Promise<void> {
  return new Promise((resolve, reject) => process.send!(msg, (err: Error | null) => (err ? reject(err) : resolve())));
}

if (!process.send) {
  process.stderr.write('fuzz-worker: run by scripts/fuzz.js, not directly\n');
  process.exit(2);
}
process.on('uncaughtException', (err) => {
  // Something escaped every await (an engine callback, a timer): the case cannot be trusted.
  process.stderr.write(`fuzz-worker: uncaught ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}\n`);
  process.exit(70);
});
process.on('unhandledRejection', (err) => {
  process.stderr.write(`fuzz-worker: unhandled rejection ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}\n`);
  process.exit(70);
});
process.on('message', (m: CaseRequest) => {
  if (m.type !== 'case') return;
  void runCase(m).then(send);
});
void send({ type: 'ready' });
