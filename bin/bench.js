#!/usr/bin/env node
// Entry point for `npx bench`: the compiled CLI lives in dist/ (built by `npm ci` via the prepare script).
import { main } from '../dist/src/cli/main.js';

main(process.argv).then(
  (code) => { process.exitCode = code; },
  (err) => {
    process.stderr.write(`bench: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
