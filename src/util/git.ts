// The commit the tool was built from, when it runs from a git checkout.
import { execFileSync } from 'node:child_process';
import { realpathSync } from 'node:fs';

export interface GitInfo {
  commit: string;
  /** Uncommitted changes to tracked files at run time. */
  dirty: boolean;
}

function git(cwd: string, args: string[]): string | null {
  try {
    return execFileSync('git', args, { cwd, encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

/** HEAD of the repository at `dir`, or null outside a checkout (an npm install) or without git. */
export function gitInfo(dir: string): GitInfo | null {
  // Installed under someone else's repository (node_modules), git would answer for that repository.
  const top = git(dir, ['rev-parse', '--show-toplevel']);
  if (!top) return null;
  try {
    if (realpathSync(top) !== realpathSync(dir)) return null;
  } catch {
    return null;
  }
  const commit = git(dir, ['rev-parse', 'HEAD']);
  if (!commit || !/^[0-9a-f]{40,64}$/.test(commit)) return null;
  const status = git(dir, ['status', '--porcelain', '--untracked-files=no']);
  return { commit, dirty: status !== null && status.length > 0 };
}
