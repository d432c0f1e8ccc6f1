// Preloaded into a `bench convert` child (node --require) by test/convert-cli.test.ts: the process
// stops itself (SIGSTOP) as soon as it has created its temporary `.NAME.PID.partial` file, so the
// test can send a signal while the conversion is certainly in progress, whatever the machine's speed,
// and then let it continue (SIGCONT). fs.openSync is wrapped, and syncBuiltinESMExports() hands the
// wrapper to the ES modules' `import { openSync } from 'node:fs'`.
'use strict';
const fs = require('node:fs');
const { syncBuiltinESMExports } = require('node:module');
const { isMainThread } = require('node:worker_threads');

if (isMainThread) {
  const openSync = fs.openSync;
  fs.openSync = function (file, ...rest) {
    const fd = openSync.call(this, file, ...rest);
    if (String(file).endsWith('.partial')) process.kill(process.pid, 'SIGSTOP');
    return fd;
  };
  syncBuiltinESMExports();
}
