// A failed system call in words for a one-line message: "no space left on device (ENOSPC)", the
// meaning the C library gives the errno and its name (Node's own message adds the syscall and the
// path, which the caller names better).
import { getSystemErrorMap } from 'node:util';

/** The errno's meaning and code, e.g. `file too large (EFBIG)`; null when `err` is no system call's error. */
export function errnoText(err: unknown): string | null {
  const e = err as NodeJS.ErrnoException | null;
  if (typeof e?.code !== 'string' || typeof e.errno !== 'number') return null;
  const meaning = getSystemErrorMap().get(e.errno)?.[1];
  return meaning !== undefined ? `${meaning} (${e.code})` : e.code;
}

/** errnoText, else the error's message: what a write failure says after `writing F failed: `. */
export function failureText(err: unknown): string {
  return errnoText(err) ?? (err instanceof Error ? err.message : String(err));
}
