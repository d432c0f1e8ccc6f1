// Preloaded into a `bench convert` child (node --require) by test/convert-cli.test.ts: the process
// stops itself (SIGSTOP) right after the rename that puts its complete `.NAME.PID.partial` file in
// place, so the test can send a signal in the window between the rename and the end of the run,
// whatever the machine's speed, and then let it continue (SIGCONT). fs.renameSync is wrapped, and
// syncBuiltinESMExports() hands the wrapper to the ES modules' `import { renameSync } from 'node:fs'`.
'use strict';
const fs = require('node:fs');
const { syncBuiltinESMExports } = require('node:module');
const { isMainThread } = require('node:worker_threads');

if (isMainThread) {
  const renameSync = fs.renameSync;
  fs.renameSync = function (from, ...rest) {
    renameSync.call(this, from, ...rest);
    if (String(from).endsWith('.partial')) process.kill(process.pid, 'SIGSTOP');
  };
  syncBuiltinESMExports();
}
