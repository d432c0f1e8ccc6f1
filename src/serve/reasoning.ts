// Qwen3.5's thinking split: text inside <think>...</think> is `reasoning_content`, the rest `content`.
// When the rendered prompt leaves a <think> open (thinking on), the output starts as reasoning; an
// output that opens <think> itself (at its very start) is handled too. The newlines the template puts
// after </think> are not part of the content. Tags split across pieces are held back until complete.

export const THINK_OPEN = '<think>';
export const THINK_CLOSE = '</think>';

export interface ReasoningDelta {
  reasoning: string;
  content: string;
}

type Mode = 'start' | 'reasoning' | 'after-close' | 'content';

/** Whether a rendered prompt ends inside an open <think> block (the model's output starts as reasoning). */
export function promptOpensThinking(prompt: string): boolean {
  const open = prompt.lastIndexOf(THINK_OPEN);
  return open >= 0 && prompt.indexOf(THINK_CLOSE, open) < 0;
}

/** Longest suffix of `s` that is a proper prefix of `tag`. */
function partialTail(s: string, tag: string): number {
  for (let k = Math.min(tag.length - 1, s.length); k > 0; k--) if (tag.startsWith(s.slice(s.length - k))) return k;
  return 0;
}

export class ReasoningSplitter {
  private mode: Mode;
  private held = '';

  constructor(startsInReasoning: boolean) {
    this.mode = startsInReasoning ? 'reasoning' : 'start';
  }

  push(text: string): ReasoningDelta {
    const out: ReasoningDelta = { reasoning: '', content: '' };
    let buf = this.held + text;
    this.held = '';
    while (buf.length) {
      if (this.mode === 'start') {
        // Only an output that begins with <think> opens a reasoning block.
        if (buf.startsWith(THINK_OPEN)) {
          buf = buf.slice(THINK_OPEN.length);
          this.mode = 'reasoning';
        } else if (THINK_OPEN.startsWith(buf)) {
          this.held = buf;
          return out;
        } else {
          this.mode = 'content';
        }
      } else if (this.mode === 'reasoning') {
        const i = buf.indexOf(THINK_CLOSE);
        if (i >= 0) {
          out.reasoning += buf.slice(0, i);
          buf = buf.slice(i + THINK_CLOSE.length);
          this.mode = 'after-close';
        } else {
          const k = partialTail(buf, THINK_CLOSE);
          out.reasoning += buf.slice(0, buf.length - k);
          this.held = buf.slice(buf.length - k);
          return out;
        }
      } else if (this.mode === 'after-close') {
        const rest = buf.replace(/^\n+/, '');
        if (rest.length) this.mode = 'content';
        buf = rest;
      } else {
        out.content += buf;
        buf = '';
      }
    }
    return out;
  }

  /** End of output: a held partial tag is text of the block it was in. */
  flush(): ReasoningDelta {
    const t = this.held;
    this.held = '';
    if (this.mode === 'reasoning') return { reasoning: t, content: '' };
    return { reasoning: '', content: t };
  }
}
