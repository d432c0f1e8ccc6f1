// `bench compare BASE.json NEW.json`: did a figure move beyond the runs' own noise and the threshold?
// Markdown on stdout by default; exit 0 no regression, 5 a regression or not a pass, 2 usage error (docs/report.md).
import type { Command } from 'commander';
import { compareReports, DEFAULT_THRESHOLD_PCT } from '../report/compare.js';
import { COMPARE_FORMATS, formatComparison, type CompareFormat } from '../report/compare-format.js';
import { readReport } from '../report/report-file.js';
import { choiceArg, numberArg } from './flag-values.js';
import { isSameFile } from '../util/same-file.js';

export function registerCompare(program: Command, setResult: (code: number) => void): void {
  program
    .command('compare')
    .argument('<base.json>', 'the baseline PREFIX.json')
    .argument('<new.json>', 'the PREFIX.json to judge against it')
    .summary('compare two saved sweeps beyond their own noise: Markdown on stdout, exit 5 on a regression')
    .description(
      'Compare two saved sweeps row by row: NEW/BASE per figure, flagged only\n' +
      'beyond both the noise floor (from each run\'s per-request samples) and\n' +
      '--threshold; provenance differences first.\n' +
      'Exit status: 0 no regression; 5 at least one regression (a figure beyond\n' +
      'noise and --threshold, or a row ok in BASE that failed in NEW) or a\n' +
      'comparison that is not a pass: NEW did not complete, a figure of BASE is\n' +
      'missing in NEW, a figure moved the worse way in a row measured under CPU\n' +
      'contention, a report holds two rows for one key, no row of BASE is in NEW,\n' +
      'or every row both share failed; 2 usage error (docs/report.md).',
    )
    .option('--threshold <pct>', `smallest change flagged, percent of BASE (default ${DEFAULT_THRESHOLD_PCT})`, numberArg('--threshold', 0, 1e6))
    .option('--format <format>', 'stdout format: md | csv | json (default md)', choiceArg('--format', COMPARE_FORMATS))
    .action((base: string, next: string, opts: { threshold?: number; format?: CompareFormat }) => {
      const c = compareReports(readReport(base), readReport(next), opts.threshold ?? DEFAULT_THRESHOLD_PCT);
      // Legitimate (the noise floors of a run against itself), and in a CI script a typo that would always pass.
      if (isSameFile(base, next)) process.stderr.write(`bench compare: warning: BASE and NEW are the same file (${next}): nothing can have changed\n`);
      process.stdout.write(formatComparison(c, opts.format ?? 'md'));
      for (const why of c.not_a_pass) process.stderr.write(`bench compare: not a pass: ${why}\n`);
      setResult(c.exit_code);
    });
}
