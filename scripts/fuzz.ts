// Fuzzer for the parsers that read files a user hands us: mutates valid checkpoint files
// (config.json, safetensors, the shard index, tokenizer.json, tokenizer_config.json / chat
// template) and GGUF files written by `bench convert`, and loads each mutated case in a child
// process through the real loading path. Every case must either load with in-range data or fail
// with one clear error; a crash, a hang (5 s), any other exception or out-of-range data fails.
//
//   npm run fuzz -- --cases N --seed S [--only i,j] [--json FILE] [--jobs N] [--keep]
//
// Exit status: 0 no failures, 1 failures, 2 usage error.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { writeBase } from './fuzz/base.js';
import { removeCase, writeCase } from './fuzz/case-dir.js';
import { makeCase } from './fuzz/cases.js';
import { Supervisor } from './fuzz/supervisor.js';
import { formatSummary, Tally, type Summary } from './fuzz/summary.js';

interface FuzzOptions {
  cases: number;
  seed: number;
  only?: number[];
  json?: string;
  jobs: number;
  keep: boolean;
  timeoutMs: number;
}

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fuzz-worker.js');

function intArg(flag: string, min: number) {
  return (v: string): number => {
    if (!/^\d+$/.test(v.trim()) || Number(v) < min || !Number.isSafeInteger(Number(v))) {
      throw new CommanderError(2, 'fuzz.usage', `fuzz: ${flag} wants an integer >= ${min} (got '${v}')`);
    }
    return Number(v);
  };
}

function parseArgs(argv: string[]): FuzzOptions {
  const program = new Command('fuzz')
    .description('Fuzz the checkpoint, tokenizer and GGUF parsers with mutated files')
    .option('--cases <n>', 'number of cases (case numbers 0..n-1)', intArg('--cases', 1), 500)
    .option('--seed <n>', 'run seed; case i draws from its own stream of it', intArg('--seed', 0), 1)
    .option('--only <list>', 'run only these case numbers (comma separated), e.g. to re-run a failure', (v: string) =>
      v.split(',').map((x) => intArg('--only', 0)(x)))
    .option('--json <file>', 'also write the summary as JSON')
    .option('--jobs <n>', 'child processes running cases side by side', intArg('--jobs', 1), 1)
    .option('--keep', 'keep the directories of failing cases (and the base files) for inspection', false)
    .option('--timeout-ms <n>', 'per-case watchdog', intArg('--timeout-ms', 100), 5000)
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  program.parse(argv);
  return program.opts<FuzzOptions>();
}

async function run(opts: FuzzOptions): Promise<Summary> {
  const root = mkdtempSync(path.join(tmpdir(), 'lumen-fuzz-'));
  let keepRoot = false;
  try {
    const base = await writeBase(root);
    const indices = opts.only ?? Array.from({ length: opts.cases }, (_, i) => i);
    const tally = new Tally();
    const supervisors = Array.from({ length: Math.min(opts.jobs, indices.length) }, () => new Supervisor(WORKER, opts.timeoutMs));
    let next = 0;
    let finished = 0;
    const progressEvery = Math.max(1000, Math.ceil(indices.length / 20));
    const t0 = performance.now();
    const lane = async (sup: Supervisor) => {
      while (next < indices.length) {
        const spec = makeCase(base, opts.seed, indices[next++]!);
        const disk = writeCase(spec, root);
        const result = await sup.run({ type: 'case', index: spec.index, kind: spec.gguf ? 'gguf' : 'checkpoint', path: disk.path });
        tally.add(spec, result, disk.path);
        if (opts.keep && result.outcome === 'failure') keepRoot = true;
        else removeCase(disk);
        if (++finished % progressEvery === 0) {
          process.stderr.write(`fuzz: ${finished}/${indices.length} cases, ${tally.failureCount()} failures, ${(finished / ((performance.now() - t0) / 1000)).toFixed(1)} cases/s\n`);
        }
      }
    };
    try {
      await Promise.all(supervisors.map(lane));
    } finally {
      for (const s of supervisors) s.close();
    }
    for (const s of supervisors) for (const late of s.lateFailures) tally.markFailed(late.index, late);
    const seconds = (performance.now() - t0) / 1000;
    const cpu = cpus();
    if (keepRoot) process.stderr.write(`fuzz: failing cases kept under ${root}\n`);
    return tally.summary(opts.seed, seconds, supervisors.reduce((n, s) => n + s.starts, 0), {
      cpu: cpu[0]?.model.trim() ?? 'unknown CPU', cores: cpu.length, node: process.version,
    });
  } finally {
    if (!keepRoot) rmSync(root, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  let opts: FuzzOptions;
  try {
    opts = parseArgs(process.argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.help') return 0;
      if (err.code === 'fuzz.usage') process.stderr.write(`${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const summary = await run(opts);
  process.stdout.write(formatSummary(summary));
  if (opts.json) writeFileSync(opts.json, JSON.stringify(summary, null, 2) + '\n');
  return summary.outcomes.failure === 0 ? 0 : 1;
}

main().then(
  (code) => { process.exitCode = code; },
  (err) => {
    process.stderr.write(`fuzz: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
