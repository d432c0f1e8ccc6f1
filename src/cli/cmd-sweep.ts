// `bench` (default command) / `bench sweep`: the isl:osl x concurrency sweep. Flags are documented in docs/bench.md.
import { Command } from 'commander';
import { resolveSweepConfig, type RawSweepOptions } from './sweep-options.js';
import { ENGINE_FLAGS } from './engine-flags.js';
import { runSweep, type SweepBackend } from '../bench/sweep.js';
import { resolveDevice } from '../engine/device.js';
import { usableCpus } from '../engine/native.js';
import { loadEngine } from '../engine/engine.js';
import { loadModel } from '../model/model-path.js';
import { ensureEmbeddedModel } from '../model/embedded.js';
import { connectEndpoint } from '../endpoint/connect.js';
import { writeHtmlReport } from '../report/write-html.js';

const realBackend: SweepBackend = {
  ensureEmbeddedModel,
  loadCheckpoint: (dir, quant) => loadModel(dir, { quant }),
  loadEngine,
  resolveDevice,
  usableCpus,
  connectEndpoint,
};

function count(_v: string, previous: number): number {
  return previous + 1;
}

export function sweepCommand(backend: SweepBackend, setResult: (code: number) => void): Command {
  return new Command('sweep')
    .summary('isl:osl x concurrency sweep (the default command): CSV on stdout, diagnostics on stderr')
    .description(
      'Run each isl:osl cell at each concurrency, one row at a time, as a closed loop of sessions.\n' +
      'stdout: a 21-column CSV, one row per cell x concurrency, flushed as each row completes.\n' +
      'With --endpoint URL the same sweep drives an OpenAI-compatible server (docs/endpoint.md).\n' +
      'Exit status: 0 all rows ok, 3 some rows failed (or the model or endpoint failed), 2 usage error, ' +
      '130 interrupted (SIGINT, or stdout closed), 143 terminated (SIGTERM), 1 anything else ' +
      '(e.g. the native engine not built, or PREFIX.html not written).',
    )
    .option('--endpoint <url>', 'benchmark the OpenAI-compatible server at URL instead of loading a model (docs/endpoint.md)')
    .option('--api <api>', 'with --endpoint: chat | completions (default chat)')
    .option('--model <name>', 'with --endpoint: the model to ask for (default: the first id of /v1/models)')
    .option('--api-key-env <var>', "with --endpoint: the environment variable holding the server's API key")
    .option('--tokenizer <dir>', "with --endpoint: the model's tokenizer directory (default: the server's /tokenize)")
    .option('--timeout-s <s>', 'with --endpoint: seconds one request may take (default 600)')
    .option('--request-rate <r>', 'open loop: timed requests arrive at R per second (inf or Infinity: all at once), at most --concurrency in flight')
    .option('--burstiness <b>', 'with --request-rate: gamma shape of the arrival gaps (default 1 = Poisson)')
    .option('--num-requests <n>', 'with --request-rate: timed requests per row (default concurrency x --iters)')
    .option('--goodput <bounds>', 'share of requests meeting every bound, e.g. ttft:500,tpot:50,e2el:10000 (ms)')
    .addOption(ENGINE_FLAGS.modelPath())
    .addOption(ENGINE_FLAGS.quant())
    .addOption(ENGINE_FLAGS.device())
    .addOption(ENGINE_FLAGS.threads())
    .option('--cells <list>', 'isl:osl cells, comma separated (default 128:128,2048:128,128:1024)')
    .option('--isl <n>', 'prompt tokens of a single cell (with --osl; default osl 128)')
    .option('--osl <n>', 'generated tokens of a single cell (with --isl; default isl 128)')
    .option('--prompt-tokens <n>', 'alias of --isl (peer compatibility)')
    .option('--max-output-tokens <n>', 'alias of --osl (peer compatibility)')
    .option('--concurrency <list>', 'sessions in flight, comma separated (default 1,4,8)')
    .option('--latency-only', 'concurrency 1 only (peer compatibility)')
    .option('--skip-training', 'accepted for peer compatibility; there is no training benchmark')
    .option('--shared-prefix <n>', 'leading prompt tokens common to every session (default 0)')
    .option('--unique-prompts', 'cold prompts: a fresh random prompt per session per iteration (the default; notes: prompts=cold)')
    .option('--repeat-prompts', 'one prompt set reused by warm-up and every iteration')
    .option('--warmup <n>', 'untimed full passes before timing (default 2)')
    .option('--iters <n>', 'timed passes (default 1)')
    .addOption(ENGINE_FLAGS.kvcache())
    .addOption(ENGINE_FLAGS.paged())
    .addOption(ENGINE_FLAGS.blockSize())
    .addOption(ENGINE_FLAGS.prefillChunk())
    .addOption(ENGINE_FLAGS.stepTokenBudget())
    .addOption(ENGINE_FLAGS.maxSeq())
    .addOption(ENGINE_FLAGS.cudaGraphs())
    .addOption(ENGINE_FLAGS.kvMemory())
    .addOption(ENGINE_FLAGS.kvCacheDtype())
    .option('--memory-stages <file>', "append the engine's memory counters at each stage of the model's life (JSON lines)")
    .option('--output <prefix>', 'also write PREFIX.csv, PREFIX.json and PREFIX.jsonl as rows complete, and PREFIX.html at the end')
    .option('--format <format>', 'stdout format: csv | json | md (default csv)')
    .option('--profile', 'per-op profile of each row on stderr')
    .option('--profile-pipeline', 'per-stage profile of each row on stderr')
    .option('--seed <n>', 'prompt PRNG seed (default 0)')
    .option('-v, --verbose', 'JSON log lines on stderr instead of the human view; -vv adds debug events', count, 0)
    .option('-q, --quiet', 'no header, progress or summary on stderr (errors still)')
    .action(async (raw: RawSweepOptions) => {
      const cfg = resolveSweepConfig(raw);
      const code = await runSweep(cfg, backend, {
        stdout: process.stdout,
        stderr: process.stderr,
        stderrIsTTY: process.stderr.isTTY === true,
        env: process.env,
        argv: process.argv,
        handleSignals: true,
        // The page is rendered under the sweep's signal handlers: a signal meanwhile says it was not written.
        ...(cfg.output !== null ? { afterSweep: (c: number, error: (msg: string) => void) => writeHtml(cfg.output!, c, error) } : {}),
      });
      setResult(code);
    });
}

/** PREFIX.html from the PREFIX.json the sweep left (finished, interrupted or failed to load). */
async function writeHtml(prefix: string, code: number, error: (msg: string) => void): Promise<number> {
  try {
    await writeHtmlReport(`${prefix}.json`, `${prefix}.html`);
    return code;
  } catch (err) {
    // Through the sweep's renderer: a JSON log line under -v.
    error(`${prefix}.html: ${err instanceof Error ? err.message : String(err)} (the other files are complete; \`bench report ${prefix}.json\` retries)`);
    return code === 0 ? 1 : code;
  }
}

export function registerSweep(program: Command, setResult: (code: number) => void): void {
  const cmd = sweepCommand(realBackend, setResult);
  cmd.copyInheritedSettings(program); // exitOverride and output routing, as program.command() would
  program.addCommand(cmd, { isDefault: true });
}
