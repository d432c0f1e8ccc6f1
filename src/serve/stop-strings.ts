// Stop strings matched on the text as it is generated, across token boundaries: text that could be
// the start of a stop string is held back until it is known not to be; a match ends the output just
// before the stop string (which is not included).

export interface StopResult {
  /** Text that is certainly output. */
  text: string;
  /** The stop string that matched (output ends here), or null. */
  stop: string | null;
}

export class StopStrings {
  private held = '';
  private matched: string | null = null;
  private readonly stops: string[];
  private readonly longest: number;

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
    this.longest = this.stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  get active(): boolean {
    return this.stops.length > 0;
  }

  get stopped(): string | null {
    return this.matched;
  }

  /**
   * The next piece of output text. `armed` false (a piece of the first min_tokens tokens, as vLLM
   * counts them): no stop string is matched, while text that could start one is still held back; a
   * match then ends in the text pushed armed (one ending in the held text stays output).
   */
  push(text: string, armed = true): StopResult {
    if (this.matched !== null) return { text: '', stop: this.matched };
    if (!this.stops.length) return { text, stop: null };
    const buf = this.held + text;
    // The earliest occurrence of any stop string wins.
    let at = -1;
    let which: string | null = null;
    for (const s of armed ? this.stops : []) {
      const i = buf.indexOf(s, Math.max(0, this.held.length - s.length + 1));
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        which = s;
      }
    }
    if (which !== null) {
      this.matched = which;
      this.held = '';
      return { text: buf.slice(0, at), stop: which };
    }
    // Hold back the longest suffix that is a proper prefix of some stop string.
    let keep = 0;
    for (let k = Math.min(this.longest - 1, buf.length); k > 0; k--) {
      const tail = buf.slice(buf.length - k);
      if (this.stops.some((s) => s.startsWith(tail))) {
        keep = k;
        break;
      }
    }
    this.held = buf.slice(buf.length - keep);
    return { text: buf.slice(0, buf.length - keep), stop: null };
  }

  /** The held text at the end of the output (no stop string matched). */
  flush(): string {
    const t = this.matched === null ? this.held : '';
    this.held = '';
    return t;
  }
}
