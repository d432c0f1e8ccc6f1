// `bench serve`: OpenAI- and Anthropic-compatible HTTP serving over the sweep's engine loop, with the
// sweep's engine flags (src/cli/engine-flags.ts). Routes and fields: docs/serve.md.
import { Command, Option } from 'commander';
import { lookup } from 'node:dns/promises';
import { resolveDevice } from '../engine/device.js';
import { checkKvMemoryForDevice } from '../engine/options.js';
import { embeddedModelError, ensureEmbeddedModel } from '../model/embedded.js';
import { CheckpointError } from '../model/types.js';
import { startServer, type RunningServer } from '../serve/server.js';
import { DEFAULT_TOKENIZER_WORKERS, INLINE_MAX_CHARS, INLINE_MAX_MESSAGES, MAX_TOKENIZER_WORKERS } from '../serve/tokenize-pool.js';
import { ENGINE_FLAGS, resolveEngineFlags, resolveModelPathFlags, type RawEngineFlags } from './engine-flags.js';
import { parseCount } from './flag-values.js';
import { UsageError } from '../util/usage-error.js';

/** Sequences in flight when --max-seqs is not given (the sweep's largest default concurrency). */
export const DEFAULT_MAX_SEQS = 8;

interface RawServeOptions extends RawEngineFlags {
  host: string;
  port: string;
  servedModelName?: string;
  tokenizerWorkers: string;
  apiKey?: string;
  apiKeyEnv?: string;
  verbose?: number;
  quiet?: boolean;
}

function count(_v: string, previous: number): number {
  return previous + 1;
}

/** Exit within this long of SIGINT/SIGTERM, whatever is still in flight. */
const SHUTDOWN_DEADLINE_MS = 1800;

export function registerServe(program: Command, setResult: (code: number) => void): void {
  program
    .command('serve')
    .description('serve the model over HTTP: OpenAI (/v1/chat/completions, /v1/completions) and Anthropic (/v1/messages) APIs, /metrics')
    .addOption(ENGINE_FLAGS.modelPath())
    .addOption(ENGINE_FLAGS.quant())
    .option('--host <host>', 'address to bind', '127.0.0.1')
    .option('--port <n>', 'port (0 = any free port)', '8000')
    .option('--served-model-name <name>', "the model's name in the API (default: the checkpoint directory's name)")
    .addOption(new Option('--api-key <key>', 'require this key (Authorization: Bearer KEY or x-api-key: KEY)').conflicts('apiKeyEnv'))
    .option('--api-key-env <var>', 'require the key held in environment variable VAR')
    .option('--tokenizer-workers <n>', `threads that tokenize prompt texts over ${INLINE_MAX_CHARS} characters and render conversations of more than ${INLINE_MAX_MESSAGES} messages, so a long prompt never stalls the other streams (0: all on the JS thread)`, String(DEFAULT_TOKENIZER_WORKERS))
    .addOption(ENGINE_FLAGS.device())
    .addOption(ENGINE_FLAGS.threads())
    .addOption(ENGINE_FLAGS.kvcache())
    .addOption(ENGINE_FLAGS.paged())
    .addOption(ENGINE_FLAGS.blockSize())
    .addOption(ENGINE_FLAGS.prefillChunk())
    .addOption(ENGINE_FLAGS.stepTokenBudget())
    .addOption(ENGINE_FLAGS.maxSeq())
    .addOption(ENGINE_FLAGS.cudaGraphs())
    .addOption(ENGINE_FLAGS.kvMemory())
    .addOption(ENGINE_FLAGS.kvCacheDtype())
    .addOption(ENGINE_FLAGS.maxSeqs(DEFAULT_MAX_SEQS))
    .option('-v, --verbose', 'pino JSON lines on stderr (one per request) instead of the human header; -vv adds debug', count, 0)
    .option('-q, --quiet', 'no header on stderr (errors still)')
    .action(async (raw: RawServeOptions) => {
      setResult(await runServe(raw));
    });
}

async function runServe(raw: RawServeOptions): Promise<number> {
  // Every flag is checked before anything loads.
  const engine = resolveEngineFlags(raw, DEFAULT_MAX_SEQS) as ReturnType<typeof resolveEngineFlags> & { maxSeqs: number };
  const port = parseCount('--port', raw.port, 0, 65535);
  const tokenizerWorkers = parseCount('--tokenizer-workers', raw.tokenizerWorkers, 0, MAX_TOKENIZER_WORKERS);
  if (raw.host.trim() === '') throw new UsageError('--host: empty');
  try {
    await lookup(raw.host);
  } catch (err) {
    throw new UsageError(`--host: cannot resolve '${raw.host}' (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  let apiKey: string | undefined = raw.apiKey;
  if (raw.apiKeyEnv !== undefined) {
    apiKey = process.env[raw.apiKeyEnv];
    if (apiKey === undefined || apiKey === '') throw new UsageError(`--api-key-env: environment variable ${raw.apiKeyEnv} is not set`);
  }
  if (apiKey !== undefined && apiKey === '') throw new UsageError('--api-key: empty');
  if (raw.servedModelName !== undefined && raw.servedModelName.trim() === '') throw new UsageError('--served-model-name: empty');
  const verbose = raw.verbose ?? 0;
  if (raw.quiet && verbose > 0) throw new UsageError('-q and -v contradict each other; give one');
  const { modelPath, quant } = resolveModelPathFlags(raw);
  const embedded = modelPath === null;
  const modelDir = modelPath ?? (await ensureEmbeddedModel());
  const device = resolveDevice(engine.device);
  checkKvMemoryForDevice(engine.kvMemory, device);

  let server: RunningServer | null = null;
  let signalled: NodeJS.Signals | null = null;
  let stop!: () => void;
  const stopped = new Promise<void>((r) => { stop = r; });
  const onSignal = (sig: NodeJS.Signals) => {
    if (signalled !== null) process.exit(0); // a second signal: leave now
    signalled = sig;
    // -v: stderr is a stream of JSON lines for log scrapers, this one included.
    if (server && verbose > 0) server.ctx.log.info({ event: 'shutdown', signal: sig }, 'stopping (in-flight requests are cancelled)');
    else process.stderr.write(`bench serve: ${sig}: stopping (in-flight requests are cancelled)\n`);
    setTimeout(() => process.exit(0), SHUTDOWN_DEADLINE_MS).unref();
    if (server) void server.close().then(stop, stop);
    else process.exit(0); // still loading: nothing to finish
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    try {
      server = await startServer({
        modelDir, ...(quant !== undefined ? { quant } : {}), embedded, host: raw.host, port, ...(raw.servedModelName !== undefined ? { servedModelName: raw.servedModelName } : {}),
        ...(apiKey !== undefined ? { apiKey } : {}), engine, device, tokenizerWorkers,
        verbosity: raw.quiet ? -1 : Math.min(verbose, 2), stderr: process.stderr, stderrIsTTY: process.stderr.isTTY === true,
      });
    } catch (err) {
      if (err instanceof CheckpointError) {
        if (embedded) throw embeddedModelError(modelDir, err);
        throw new UsageError(`--model-path: ${err.message}`);
      }
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL') {
        throw new UsageError(`--port/--host: cannot listen on ${raw.host}:${port} (${(err as Error).message})`);
      }
      throw err;
    }
    await stopped;
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
