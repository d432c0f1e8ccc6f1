// Whether a path a command will write is one of the files it reads: by path, through a symbolic link
// or as a hard link (the same device and inode). Writing it would replace an input (a checkpoint's
// shard, its tokenizer) with the command's output.
import { statSync } from 'node:fs';

/** Whether `a` and `b` both exist and are the same file or directory (links followed). */
export function isSameFile(a: string, b: string): boolean {
  try {
    const sa = statSync(a);
    const sb = statSync(b);
    return sa.dev === sb.dev && sa.ino === sb.ino;
  } catch {
    return false;
  }
}

/** The first of `inputs` that is the same file as `out`; null when `out` does not exist or is none of them. */
export function sameFileAmong(out: string, inputs: readonly string[]): string | null {
  return inputs.find((f) => isSameFile(out, f)) ?? null;
}
