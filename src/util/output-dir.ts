// Output paths named on the command line, checked (or, for a directory, made) before any work, so every
// failure is one line naming the flag: a file's directory must exist and the file must not be a
// directory; an output directory is made one missing level at a time below the nearest existing one
// (Node's recursive mkdir loops for ever under some read-only trees, such as /proc).
import { existsSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { UsageError } from './usage-error.js';

/** The levels of `dir` that do not exist yet, outermost first; throws when the nearest existing one is a file. */
function missingLevels(flag: string, dir: string): string[] {
  const missing: string[] = [];
  let at = path.resolve(dir);
  while (!existsSync(at)) {
    missing.unshift(at);
    const up = path.dirname(at);
    if (up === at) break;
    at = up;
  }
  if (existsSync(at) && !statSync(at).isDirectory()) {
    throw new UsageError(`${flag}: ${at} is a file, not a directory`);
  }
  return missing;
}

/** What ensureOutputDir would refuse, refused now, without making anything (for checks before the rest of a command's usage checks). */
export function checkOutputDir(flag: string, dir: string): void {
  missingLevels(flag, dir);
}

export function ensureOutputDir(flag: string, dir: string): void {
  for (const d of missingLevels(flag, dir)) {
    try {
      mkdirSync(d);
    } catch (err) {
      throw new UsageError(`${flag}: cannot create ${d} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
  }
}

/** A file a command will write whose directory is made when missing (ensureOutputDir), and is not a directory. */
export function prepareOutputFile(flag: string, file: string): void {
  ensureOutputDir(flag, path.dirname(path.resolve(file)));
  checkWritableFile(flag, path.resolve(file));
}

/** A file a command will write: its directory exists and the path is not a directory. */
export function checkWritableFile(flag: string, file: string): void {
  checkWritableParent(flag, file);
  if (existsSync(file) && statSync(file).isDirectory()) throw new UsageError(`${flag}: ${file} is a directory, not a file`);
}

/** The directory a file would be written in exists. */
export function checkWritableParent(flag: string, file: string): void {
  const dir = path.dirname(file);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new UsageError(`${flag}: directory ${dir} does not exist`);
  }
}
