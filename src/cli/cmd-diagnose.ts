// `bench diagnose --endpoint URL`: the serving-diagnostics check of any OpenAI-compatible server
// (behaviour, protocol, near-8k retrieval, decode timing, determinism, isolation). The report (JSON)
// goes to --output FILE or stdout, the summary table to stderr. Exit 0 complete, 3 incomplete (a
// check could not run), 4 the endpoint unreachable or never answering, 2 a usage error, 1 --output
// could not be written after the run (the report went to stdout).
// What each check does: docs/diagnose.md; the code: src/diagnose/.
import { existsSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import { DIAGNOSE_DEFAULTS, runDiagnose } from '../diagnose/diagnose.js';
import { EndpointError, normalizeBaseUrl } from '../diagnose/http-client.js';
import { summaryTable } from '../diagnose/report.js';
import { UsageError } from '../util/usage-error.js';
import { countArg, endpointUrlArg, numberArg } from './flag-values.js';
import { checkOutputFile, makeParentDirs } from '../util/output-dir.js';

/** Exit status when the endpoint cannot be reached or never answers. */
export const EXIT_UNREACHABLE = 4;
/** Exit status when the report is incomplete (some check could not run). */
export const EXIT_INCOMPLETE = 3;
/** Exit status when --output could not be written after the run (the report went to stdout instead). */
export const EXIT_OUTPUT_FAILED = 1;

/**
 * --output must name a file that can be written: not a directory, writable, its directory one that
 * takes new files or can be made (its missing levels are made when the report is written).
 */
function checkOutput(output: string): void {
  const file = path.resolve(output);
  if (existsSync(file) && statSync(file).isDirectory()) {
    throw new UsageError(`--output: ${output} is a directory; give a file name (such as ${path.join(output, 'report.json')})`);
  }
  checkOutputFile('--output', file);
}

interface DiagnoseFlags {
  endpoint: string;
  model?: string;
  output?: string;
  seed: number;
  apiKeyEnv?: string;
  timeoutS: number;
  concurrency: number;
  repeats: number;
  decodeTokens: number;
  compareTokens: number;
}

export function registerDiagnose(program: Command, setResult: (code: number) => void): void {
  const d = DIAGNOSE_DEFAULTS;
  program
    .command('diagnose')
    .description('check an OpenAI-compatible server: behaviour, protocol, near-8k retrieval, decode timing, determinism, request isolation (report: JSON)')
    .requiredOption('--endpoint <url>', 'the server, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted)', endpointUrlArg('--endpoint'))
    .option('--model <name>', 'the model to ask for (default: the first id of /v1/models)')
    .option('--output <file>', 'write the JSON report here (default: stdout)')
    .option('--seed <n>', 'seed of the retrieval key, depth and filler, and of the code words', countArg('--seed', 0, 0xffffffff), d.seed)
    .option('--api-key-env <var>', 'send the key held in environment variable VAR (Authorization: Bearer)')
    .option('--timeout-s <s>', 'longest wait for any one request, seconds', numberArg('--timeout-s', 0.001, 86400), d.timeoutS)
    .option('--concurrency <n>', 'concurrent requests of the isolation check (and distractors + 1 of the batch-invariance probe)', countArg('--concurrency', 2, 256), d.concurrency)
    .option('--repeats <k>', 'sequential greedy repeats of the determinism check', countArg('--repeats', 2, 100), d.repeats)
    .option('--decode-tokens <n>', 'output tokens of each timed decode run', countArg('--decode-tokens', 2, 65536), d.decodeTokens)
    .option('--compare-tokens <n>', 'output tokens of the repeat, isolation and batch-invariance requests', countArg('--compare-tokens', 1, 4096), d.compareTokens)
    .action(async (flags: DiagnoseFlags) => {
      setResult(await runDiagnoseCommand(flags));
    });
}

async function runDiagnoseCommand(f: DiagnoseFlags): Promise<number> {
  let apiKey: string | undefined;
  if (f.apiKeyEnv !== undefined) {
    apiKey = process.env[f.apiKeyEnv];
    if (apiKey === undefined || apiKey === '') throw new UsageError(`--api-key-env: environment variable ${f.apiKeyEnv} is not set`);
  }
  if (f.model !== undefined && f.model.trim() === '') throw new UsageError('--model: empty');
  if (f.output !== undefined) checkOutput(f.output); // before the run: a run of minutes must not end in EISDIR
  const base = normalizeBaseUrl(f.endpoint);
  let report;
  try {
    report = await runDiagnose({
      endpoint: base, ...(f.model !== undefined ? { model: f.model } : {}), ...(apiKey !== undefined ? { apiKey } : {}),
      seed: f.seed, timeoutMs: f.timeoutS * 1000, decodeTokens: f.decodeTokens, decodeRuns: DIAGNOSE_DEFAULTS.decodeRuns,
      repeats: f.repeats, concurrency: f.concurrency, compareTokens: f.compareTokens, sharedPrefixSentences: DIAGNOSE_DEFAULTS.sharedPrefixSentences,
      onPhase: (name) => process.stderr.write(`bench diagnose: ${name}\n`),
    });
  } catch (err) {
    if (err instanceof EndpointError) {
      process.stderr.write(`bench diagnose: ${err.message}\n`);
      return EXIT_UNREACHABLE;
    }
    throw err;
  }
  const json = `${JSON.stringify(report, null, 2)}\n`;
  if (f.output !== undefined) {
    try {
      makeParentDirs(f.output);
      writeFileSync(f.output, json);
    } catch (err) {
      // Checked before the run, yet it failed (the disk filled, the path changed): the report is not lost.
      process.stdout.write(json);
      process.stderr.write(summaryTable(report));
      process.stderr.write(`bench diagnose: cannot write --output ${f.output}: ${(err as Error).message}; the report went to stdout\n`);
      return EXIT_OUTPUT_FAILED;
    }
  } else {
    process.stdout.write(json);
  }
  process.stderr.write(summaryTable(report));
  if (f.output !== undefined) process.stderr.write(`report: ${f.output}\n`);
  return report.status === 'complete' ? 0 : EXIT_INCOMPLETE;
}
