// `bench report PREFIX.json [--out FILE]`: re-render the HTML report of a saved sweep (docs/report.md).
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { UsageError } from '../util/usage-error.js';
import { htmlPathFor, writeHtmlReport } from '../report/write-html.js';

export function registerReport(program: Command, setResult: (code: number) => void): void {
  program
    .command('report')
    .argument('<report.json>', 'a PREFIX.json written by bench --output')
    .summary('render the HTML report of a saved sweep: PREFIX.json -> PREFIX.html (docs/report.md)')
    .description('Render the HTML report (charts and every row) of a saved sweep: PREFIX.json -> PREFIX.html\nExit status: 0 written, 2 usage error (missing or malformed report).')
    .option('--out <file>', 'where to write the page (default: the report with .html for .json)')
    .action(async (file: string, opts: { out?: string }) => {
      if (opts.out !== undefined) {
        const dir = path.dirname(path.resolve(opts.out));
        if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new UsageError(`--out: directory ${dir} does not exist`);
        if (existsSync(opts.out) && statSync(opts.out).isDirectory()) throw new UsageError(`--out: ${opts.out} is a directory, not a file`);
      }
      const out = await writeHtmlReport(file, opts.out ?? htmlPathFor(file));
      process.stderr.write(`bench: wrote ${out}\n`);
      setResult(0);
    });
}
