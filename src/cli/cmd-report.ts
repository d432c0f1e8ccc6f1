// `bench report PREFIX.json [--out FILE]`: re-render the HTML report of a saved sweep (docs/report.md).
import { existsSync, statSync } from 'node:fs';
import type { Command } from 'commander';
import { UsageError } from '../util/usage-error.js';
import { prepareOutputFile } from '../util/output-dir.js';
import { isSameFile } from '../util/same-file.js';
import { htmlPathFor, writeHtmlReport } from '../report/write-html.js';
import { readReport } from '../report/report-file.js';

export function registerReport(program: Command, setResult: (code: number) => void): void {
  program
    .command('report')
    .argument('<report.json>', 'a PREFIX.json written by bench --output')
    .summary('render the HTML report of a saved sweep: PREFIX.json -> PREFIX.html (docs/report.md)')
    .description('Render the HTML report (charts and every row) of a saved sweep: PREFIX.json -> PREFIX.html\nExit status: 0 written, 2 usage error (missing or malformed report, an --out that is the report itself or another existing file than a .html page).')
    .option('--out <file>', 'where to write the page (default: the report with .html for .json)')
    .action(async (file: string, opts: { out?: string }) => {
      if (opts.out !== undefined) {
        // The report is checked first (a bad one makes no directory), then --out's missing directories
        // are made (out/run.html on a fresh clone); a path that is a directory is still refused.
        readReport(file);
        // The page over its own report would lose the report: refused, whatever the spelling of the path.
        if (isSameFile(opts.out, file)) throw new UsageError(`--out: ${opts.out} is the report being read; the page would overwrite it (give another file, or leave --out out for ${htmlPathFor(file)})`);
        // An existing file not named as a page (the run's PREFIX.csv, another report) is no earlier page to replace.
        if (existsSync(opts.out) && statSync(opts.out).isFile() && !/\.html?$/i.test(opts.out)) {
          throw new UsageError(`--out: ${opts.out} exists and is not a page (.html); the page would overwrite it (give a .html file)`);
        }
        prepareOutputFile('--out', opts.out);
      }
      const out = await writeHtmlReport(file, opts.out ?? htmlPathFor(file));
      process.stderr.write(`bench: wrote ${out}\n`);
      setResult(0);
    });
}
