// Untrusted text in error messages: strings that come from a user's files (tensor names, keys,
// values) are escaped and bounded so that an error message stays one readable line.

/** Longest message an error built from file contents keeps. */
export const MAX_MESSAGE_CHARS = 2000;
/** Longest untrusted string (a tensor name, a key) quoted inside a message. */
export const MAX_NAME_CHARS = 120;

// C0 and C1 control characters, DEL, and the two Unicode line/paragraph separators.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;

function escapeControl(ch: string): string {
  switch (ch) {
    case '\n': return '\\n';
    case '\r': return '\\r';
    case '\t': return '\\t';
    default: return `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`;
  }
}

/** The text with control characters escaped (`\n`, `\u0007`) and cut to `max` characters. */
export function oneLine(s: string, max = MAX_MESSAGE_CHARS): string {
  const flat = s.replace(CONTROL, escapeControl);
  return flat.length <= max ? flat : `${flat.slice(0, max)}... (${flat.length - max} more characters)`;
}

/** An untrusted name for a message: control characters escaped, long names cut. */
export function displayName(s: string): string {
  return oneLine(s, MAX_NAME_CHARS);
}
