// `bench` command line: the default command is the sweep; subcommands prompt, serve, synth, convert, diagnose,
// report and compare.
import { Command, CommanderError } from 'commander';
import { registerSweep } from './cmd-sweep.js';
import { registerPrompt } from './cmd-prompt.js';
import { registerServe } from './cmd-serve.js';
import { registerSynth } from './cmd-synth.js';
import { registerConvert } from './cmd-convert.js';
import { registerDiagnose } from './cmd-diagnose.js';
import { registerReport } from './cmd-report.js';
import { registerCompare } from './cmd-compare.js';
import { createLogger } from '../bench/logger.js';
import { guardFlagValues } from './flag-guard.js';
import { UsageError } from '../util/usage-error.js';
import { TOOL_VERSION } from '../util/version.js';

export async function main(argv: string[]): Promise<number> {
  // A closed stderr (`bench 2> >(head -1)`, a log reader that died) loses the diagnostics, not the run:
  // without a listener its EPIPE was an uncaught exception that ended a sweep before its first CSV row.
  // (A closed stdout is the sweep's own business: row-sinks.ts.)
  process.stderr.on('error', () => {});
  // Under -v stderr is JSON lines (for log readers): a usage error, and any other error, is one too.
  const verbose = verbosityOf(argv) >= 1;
  const usageLine = verbose
    ? (msg: string) => createLogger(1).error({ event: 'usage_error' }, msg)
    : (msg: string) => { process.stderr.write(`bench: ${msg}\n`); };
  const program = new Command('bench');
  program
    .version(TOOL_VERSION)
    .description('Benchmark Qwen3.5 inference on this machine (CSV on stdout, diagnostics on stderr)')
    .exitOverride()
    // commander's own usage errors (an unknown flag, a missing argument) read as every other usage
    // error: one line after `bench:` (its "(Did you mean --x?)" line joined to it).
    .configureOutput({
      writeErr: (s) => process.stderr.write(s),
      outputError: (s) => usageLine(s.replace(/^error: /, '').replace(/\n\(Did you mean (.*)\)\n$/, ' (did you mean $1)').replace(/\n$/, '')),
    });
  let result = 0;
  const setResult = (code: number) => { result = code; };
  registerSweep(program, setResult);
  registerPrompt(program, setResult);
  registerServe(program, setResult);
  registerSynth(program, setResult);
  registerConvert(program, setResult);
  registerDiagnose(program, setResult);
  registerReport(program, setResult);
  registerCompare(program, setResult);
  guardFlagValues(program);
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help / --version exit 0; anything else commander rejects is a usage error.
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help') return 0;
      return 2;
    }
    if (err instanceof UsageError) {
      usageLine(err.message);
      return 2;
    }
    if (verbose) {
      createLogger(1).error({ event: 'error' }, err instanceof Error ? err.message : String(err));
      return 1;
    }
    throw err;
  }
  return result;
}

/** The commands that take -v (the sweep is the default: a command line that names none). */
const VERBOSE_COMMANDS: ReadonlySet<string> = new Set(['sweep', 'serve']);

/**
 * The -v count a command line asks for of a command that takes -v (`-v`, `-vv`, `-qv`, `--verbose`,
 * before a `--`): its errors are logged as JSON from 1. The command is the first argument when it is
 * not an option (commander dispatches a subcommand only from there); otherwise the default sweep.
 */
function verbosityOf(argv: readonly string[]): number {
  const args = argv.slice(2);
  const command = args[0] !== undefined && !args[0].startsWith('-') ? args[0] : 'sweep';
  if (!VERBOSE_COMMANDS.has(command)) return 0;
  let n = 0;
  for (const a of args) {
    if (a === '--') break;
    if (a === '--verbose') n++;
    else if (/^-[a-zA-Z]+$/.test(a)) n += [...a].filter((c) => c === 'v').length;
  }
  return n;
}
