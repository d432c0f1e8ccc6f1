// Output paths named on the command line, checked (or, for a directory, made) before any work, so every
// failure is one line naming the flag: a file's directory must exist and take new files (tried, not
// inferred from its mode: root passes every permission check, and /proc or /sys still refuse), and the
// file must not be a directory, nor an existing file this process cannot write; an output directory is
// made one missing level at a time below the nearest existing one (Node's recursive mkdir loops for
// ever under some read-only trees, such as /proc).
import { accessSync, closeSync, constants, existsSync, lstatSync, mkdirSync, openSync, statSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import { UsageError } from './usage-error.js';

/** The levels of `dir` that do not exist yet, outermost first, and the nearest level that does. */
function unmadeLevels(dir: string): { missing: string[]; nearest: string } {
  const missing: string[] = [];
  let at = path.resolve(dir);
  while (!existsSync(at)) {
    missing.unshift(at);
    const up = path.dirname(at);
    if (up === at) break;
    at = up;
  }
  return { missing, nearest: at };
}

/** unmadeLevels' missing levels; throws when the nearest existing one is a file. */
function missingLevels(flag: string, dir: string): string[] {
  const { missing, nearest } = unmadeLevels(dir);
  if (existsSync(nearest) && !statSync(nearest).isDirectory()) {
    throw new UsageError(`${flag}: ${nearest} is a file, not a directory`);
  }
  return missing;
}

/**
 * The directories a command's checks have already found to take new files: a command whose outputs
 * share a directory hands the same set to each check, so the directory is tried once. (A directory that
 * refuses is never in it: its first check throws.)
 */
export type CheckedDirs = Set<string>;

/** A file can be created in `dir` (an existing directory): a file created and removed at once. */
function checkCanCreateIn(flag: string, dir: string, checked?: CheckedDirs): void {
  const key = path.resolve(dir);
  if (checked?.has(key)) return;
  const probe = path.join(dir, `.bench-write-check-${process.pid}`);
  try {
    closeSync(openSync(probe, 'wx'));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EEXIST') throw new UsageError(`${flag}: cannot create files in ${dir} (${code ?? (err as Error).message})`);
    checked?.add(key); // another check of this process left it: the directory takes files
    return;
  }
  checked?.add(key);
  try {
    unlinkSync(probe);
  } catch {
    // Created but not removable: the directory takes files, which is what was asked.
  }
}

/** What ensureOutputDir would refuse, refused now, without making anything (for checks before the rest of a command's usage checks). */
export function checkOutputDir(flag: string, dir: string, checked?: CheckedDirs): void {
  const missing = missingLevels(flag, dir);
  checkCanCreateIn(flag, missing.length > 0 ? path.dirname(missing[0]!) : path.resolve(dir), checked);
}

export function ensureOutputDir(flag: string, dir: string): void {
  for (const d of missingLevels(flag, dir)) {
    try {
      mkdirSync(d);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Made meanwhile by another process (two first runs making one cache): there, which is what was asked.
      if (code === 'EEXIST' && statSync(d, { throwIfNoEntry: false })?.isDirectory() === true) continue;
      // Not there for existsSync, there for mkdir: a symbolic link whose target is missing.
      const dangling = code === 'EEXIST' && lstatSync(d, { throwIfNoEntry: false })?.isSymbolicLink() === true;
      throw new UsageError(`${flag}: cannot create ${d} (${dangling ? 'a symbolic link to a missing target' : code ?? (err as Error).message})`);
    }
  }
}

/** An output directory made (ensureOutputDir) and tried for new files: a directory that refuses them is a usage error too. */
export function ensureWritableDir(flag: string, dir: string): void {
  ensureOutputDir(flag, dir);
  checkCanCreateIn(flag, path.resolve(dir));
}

/**
 * The missing directories of the file `file` made, one level at a time, by its writer at run time
 * (checked before the work by checkOutputFile): a failure is a plain error with its code (ENOTDIR for
 * a file in the way), for the writer's own message.
 */
export function makeParentDirs(file: string): void {
  for (const d of unmadeLevels(path.dirname(path.resolve(file))).missing) mkdirSync(d);
}

/** A file a command will write whose directory is made when missing (ensureOutputDir), and is not a directory. */
export function prepareOutputFile(flag: string, file: string): void {
  ensureOutputDir(flag, path.dirname(path.resolve(file)));
  checkWritableFile(flag, path.resolve(file));
}

/**
 * A file a command writes later, its missing directories made then (makeParentDirs, called by the
 * writer), as `--output`'s are: checked now without making anything. With its directory there, as
 * checkWritableFile; without it, what making it would meet (a file in the way, a parent that takes no
 * new files), as checkOutputDir.
 */
export function checkOutputFile(flag: string, file: string, opts: { replaced?: boolean; checked?: CheckedDirs } = {}): void {
  const dir = path.dirname(path.resolve(file));
  if (existsSync(dir) && statSync(dir).isDirectory()) checkWritableFile(flag, path.resolve(file), opts);
  else checkOutputDir(flag, dir, opts.checked);
}

/**
 * A file path as the user gave it does not name a directory by its form: a trailing "/" (or a last
 * part "." or ".."). path.resolve drops that, so "--out models/new/" would otherwise write a file
 * called "new" when the directory does not exist yet.
 */
export function checkNamesFile(flag: string, given: string): void {
  // `-` is stdout by convention, which these files are not written to: it made a file named `-`.
  if (given === '-') throw new UsageError(`${flag} -: writes a file, not stdout; give the file's name`);
  const last = given.split('/').pop()!;
  if (last === '' || last === '.' || last === '..') {
    throw new UsageError(`${flag} ${given}: names a directory, not a file; give the file's name too`);
  }
}

/**
 * A file a command will write: its directory exists and takes files, and the path is not a directory,
 * nor (unless `replaced`: written beside it and renamed over it, or removed first) a file it cannot write.
 */
export function checkWritableFile(flag: string, file: string, opts: { replaced?: boolean; checked?: CheckedDirs } = {}): void {
  checkWritableParent(flag, file, opts.checked);
  if (!existsSync(file)) return;
  if (statSync(file).isDirectory()) throw new UsageError(`${flag}: ${file} is a directory, not a file`);
  if (opts.replaced) return;
  try {
    accessSync(file, constants.W_OK);
  } catch (err) {
    throw new UsageError(`${flag}: cannot write ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

/** The directory a file would be written in exists and takes new files. */
function checkWritableParent(flag: string, file: string, checked?: CheckedDirs): void {
  const dir = path.dirname(file);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    missingLevels(flag, dir); // a file in the way is named as one
    throw new UsageError(`${flag}: directory ${dir} does not exist`);
  }
  checkCanCreateIn(flag, dir, checked);
}
