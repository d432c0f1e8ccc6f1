// Server-sent events, read incrementally: bytes in as they arrive, complete events out. The OpenAI
// streams carry one JSON object per `data:` event and end with `data: [DONE]`.

export interface SseEvent {
  /** The `event:` field, or null (OpenAI streams name none). */
  event: string | null;
  /** The `data:` lines, joined with '\n'. */
  data: string;
}

/** Splits a UTF-8 text stream into events (blank-line separated; `\r\n` and `\n` both end a line; `:` lines are comments). */
export class SseParser {
  private buf = '';

  /** Characters held of an event not yet ended (a stream that never ends one grows it without bound). */
  get pending(): number {
    return this.buf.length;
  }

  push(text: string): SseEvent[] {
    this.buf += text;
    const out: SseEvent[] = [];
    for (;;) {
      const m = /\r?\n\r?\n/.exec(this.buf);
      if (!m) break;
      const block = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      const ev = parseBlock(block);
      if (ev) out.push(ev);
    }
    return out;
  }

  /** What is left after the stream ended: an event without its closing blank line, or null. */
  end(): SseEvent | null {
    const rest = this.buf;
    this.buf = '';
    return rest.trim() === '' ? null : parseBlock(rest);
  }
}

function parseBlock(block: string): SseEvent | null {
  let event: string | null = null;
  const data: string[] = [];
  for (const line of block.split(/\r?\n/)) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
  }
  return data.length === 0 && event === null ? null : { event, data: data.join('\n') };
}
