// Incremental detokenisation that never emits half a UTF-8 character. For ByteLevel tokenizers (every
// Qwen checkpoint) a token's bytes come from its vocabulary string through the inverse byte map and go
// through one streaming TextDecoder, so the pieces always concatenate to exactly the text of the whole
// token list. Other tokenizers use the windowed decode-and-diff method. Special tokens are skipped,
// except the marker tokens the output parsers read (`<think>`, `<tool_call>`, ...), which appear as
// their text.
import type { LoadedTokenizer } from '../model/tokenizer.js';
import { byteLevelAlphabet } from '../model/synth-tokenizer.js';

/** Marker tokens kept in the text even though they are special: the reasoning and tool-call parsers read them. */
export const MARKER_TOKENS = ['<think>', '</think>', '<tool_call>', '</tool_call>'] as const;

const utf8 = new TextEncoder();

/** Per-model token -> text knowledge, shared by every request's detokenizer. */
export class TokenText {
  private readonly bytes = new Map<number, Uint8Array | null>();
  private readonly charToByte: Map<number, number> | null;
  private readonly skipped: ReadonlySet<number>;

  constructor(private readonly tok: LoadedTokenizer) {
    const keep = new Set<number>();
    for (const m of MARKER_TOKENS) {
      const id = tok.tokenToId(m);
      if (id !== undefined) keep.add(id);
    }
    const skipped = new Set<number>();
    for (const id of tok.specialTokenIds) if (!keep.has(id)) skipped.add(id);
    this.skipped = skipped;
    if (tok.byteLevelDecoder) {
      const { byteToChar } = byteLevelAlphabet();
      this.charToByte = new Map(byteToChar.map((ch, b) => [ch.codePointAt(0)!, b]));
    } else {
      this.charToByte = null;
    }
  }

  get byteLevel(): boolean {
    return this.charToByte !== null;
  }

  /** Whether a token contributes no text (a special token other than the markers). */
  isSkipped(id: number): boolean {
    return this.skipped.has(id);
  }

  /** The bytes of one token (ByteLevel tokenizers only); empty for skipped tokens. */
  bytesOf(id: number): Uint8Array {
    let b = this.bytes.get(id);
    if (b === undefined) {
      b = this.compute(id);
      this.bytes.set(id, b);
    }
    return b ?? EMPTY;
  }

  private compute(id: number): Uint8Array | null {
    if (this.skipped.has(id)) return null;
    const s = this.tok.idToToken(id);
    if (s === undefined) return null;
    if (this.tok.addedTokenIds.has(id)) return utf8.encode(s);
    const out = new Uint8Array(s.length);
    let n = 0;
    for (const ch of s) {
      const b = this.charToByte!.get(ch.codePointAt(0)!);
      if (b === undefined) return utf8.encode(s); // not a byte-level symbol: its own text
      out[n++] = b;
    }
    return out.subarray(0, n);
  }

  /** Text of a token list as the detokenizer would produce it (markers kept, other specials skipped). */
  text(ids: readonly number[]): string {
    const d = this.detokenizer();
    return d.push(ids) + d.flush();
  }

  detokenizer(): Detokenizer {
    return this.charToByte ? new ByteDetokenizer(this) : new DiffDetokenizer(this.tok, this);
  }

  /** One token on its own, for logprobs: its text (invalid UTF-8 shown as U+FFFD) and its bytes. */
  tokenPiece(id: number): { text: string; bytes: number[] } {
    if (this.charToByte) {
      const b = this.bytesOf(id);
      return { text: new TextDecoder().decode(b), bytes: [...b] };
    }
    const text = this.skipped.has(id) ? '' : this.tok.decode([id]);
    return { text, bytes: [...utf8.encode(text)] };
  }
}

const EMPTY = new Uint8Array(0);

export interface Detokenizer {
  /** Text completed by these tokens (a partial character waits for the next tokens). */
  push(ids: readonly number[]): string;
  /** What is still held (an incomplete character becomes U+FFFD), at the end of the output. */
  flush(): string;
}

class ByteDetokenizer implements Detokenizer {
  private readonly decoder = new TextDecoder('utf-8', { fatal: false });
  constructor(private readonly text: TokenText) {}

  push(ids: readonly number[]): string {
    let out = '';
    for (const id of ids) {
      const b = this.text.bytesOf(id);
      if (b.length) out += this.decoder.decode(b, { stream: true });
    }
    return out;
  }

  flush(): string {
    return this.decoder.decode();
  }
}

/** The windowed method for non-ByteLevel tokenizers: decode a short window and emit what grew, holding U+FFFD tails. */
class DiffDetokenizer implements Detokenizer {
  private ids: number[] = [];
  private prefix = 0;
  private read = 0;
  constructor(private readonly tok: LoadedTokenizer, private readonly text: TokenText) {}

  push(ids: readonly number[]): string {
    for (const id of ids) if (!this.text.isSkipped(id)) this.ids.push(id);
    const before = this.tok.decode(this.ids.slice(this.prefix, this.read));
    const now = this.tok.decode(this.ids.slice(this.prefix));
    if (now.length <= before.length || now.endsWith('\uFFFD')) return '';
    this.prefix = this.read;
    this.read = this.ids.length;
    return now.slice(before.length);
  }

  flush(): string {
    const before = this.tok.decode(this.ids.slice(this.prefix, this.read));
    const now = this.tok.decode(this.ids.slice(this.prefix));
    this.prefix = this.read = this.ids.length;
    return now.slice(before.length);
  }
}
