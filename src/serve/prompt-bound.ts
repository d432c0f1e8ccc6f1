// A prompt text -> its token ids, refusing a text that cannot fit in --max-seq tokens before
// tokenizing all of it. Pure (a tokenizer's encode and the model's length facts in, ids or the reason
// out), so it runs the same on the server's JS thread and in a tokenizer worker (tokenize-worker.ts).

/** What the length guard needs to know of the model and its tokenizer. */
export interface PromptBound {
  /** --max-seq: a prompt of this many tokens or more is refused. */
  maxSeq: number;
  /** UTF-8 bytes of the longest token text: a text of B bytes is at least B / this many tokens. */
  longestTokenBytes: number;
  /** Whether a prefix cut at a space between two ASCII letters counts exactly (see ServeModel.prefixCountable). */
  prefixCountable: boolean;
}

/** The ids, or (the text cannot fit) what it is: "<n> bytes of text, at least <m> tokens (...)". */
export type BoundedIds = { ids: number[] } | { tooLong: string };

/**
 * Normalisation slack of the byte bound: a normaliser (NFC, NFKC, lowercasing) can shrink a text's
 * UTF-8 bytes at most 3-fold (Hangul jamo -> a syllable, the Kelvin sign -> k), so a text of B bytes
 * is at least B / (4 x the longest token's bytes) tokens whatever the normaliser.
 */
const NORMALIZER_SLACK = 4;
/** Texts longer than this many characters per --max-seq token are counted on a prefix first. */
const PREFIX_CHARS_PER_TOKEN = 8;
/** How far past the prefix length a cut point (a space between ASCII letters) is looked for. */
const PREFIX_CUT_SEARCH = 4096;

/** The first index at or after `from` (within PREFIX_CUT_SEARCH) of a space between two ASCII letters; -1 if none. */
function prefixCut(text: string, from: number): number {
  const letter = (c: number) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
  const end = Math.min(text.length - 1, from + PREFIX_CUT_SEARCH);
  for (let i = text.indexOf(' ', Math.max(1, from)); i >= 0 && i < end; i = text.indexOf(' ', i + 1)) {
    if (letter(text.charCodeAt(i - 1)) && letter(text.charCodeAt(i + 1))) return i;
  }
  return -1;
}

/** The refusal when the text has more bytes than max_seq tokens can hold (no tokenizing), else null. */
export function byteBound(bound: PromptBound, text: string): { tooLong: string } | null {
  const bytes = Buffer.byteLength(text, 'utf8');
  const bytesPerToken = bound.longestTokenBytes * NORMALIZER_SLACK;
  if (bytes <= bound.maxSeq * bytesPerToken) return null;
  return { tooLong: `${bytes} bytes of text, at least ${Math.ceil(bytes / bytesPerToken)} tokens (no token of this model is longer than ${bound.longestTokenBytes} bytes)` };
}

/**
 * The text's ids; with a bound, two checks first, each a lower bound on the count, so no prompt that
 * fits is refused: a text of more than max_seq x longest token x NORMALIZER_SLACK bytes (no
 * tokenizing at all); and, for a long text of a tokenizer whose prefix counts are exact, the tokens
 * of a prefix of about PREFIX_CHARS_PER_TOKEN x max_seq characters cut at a pre-token boundary.
 * Anything else is tokenized whole (the caller checks the count against max_seq).
 */
export function boundedEncode(encode: (text: string) => number[], bound: PromptBound | null, text: string): BoundedIds {
  if (bound !== null) {
    const over = byteBound(bound, text);
    if (over !== null) return over;
    const probe = bound.maxSeq * PREFIX_CHARS_PER_TOKEN;
    if (bound.prefixCountable && text.length > probe) {
      const cut = prefixCut(text, probe);
      if (cut > 0) {
        const n = encode(text.slice(0, cut)).length;
        if (n >= bound.maxSeq) return { tooLong: `more than ${n} tokens (its first ${cut} characters are ${n})` };
      }
    }
  }
  return { ids: encode(text) };
}
