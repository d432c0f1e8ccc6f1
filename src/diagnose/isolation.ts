// Determinism and isolation over HTTP: k sequential greedy repeats of one prompt; N concurrent greedy
// requests, each asked to repeat its own random code word (half of them behind one long shared
// prefix, one cancelled after its first chunk with text), judged against the same requests run alone; and a
// batch-invariance probe (one prompt alone, then among concurrent distractors). Outputs are compared
// by token ids where the server returns them (return_token_ids), else by text.
import { Rng } from '../util/rng.js';
import { firstChoice, summarizeStream, type Json } from './http-client.js';
import { fillerSentences, fillerText } from './retrieval.js';
import { CheckNotRun, requireStatus, runCheck, type CheckResult, type Session } from './session.js';

export interface Completion {
  text: string;
  ids: number[] | null;
  finish: string | null;
  response: unknown;
}

/** One greedy non-streamed chat completion (a refusal fails the check, other statuses leave it not run: session.ts, replyKind). */
export async function greedy(s: Session, prompt: string, maxTokens: number): Promise<Completion> {
  const r = await s.chat(s.userBody(prompt, { maxTokens }));
  const c = firstChoice(r.body);
  const m = c?.message as Json | undefined;
  const ids = Array.isArray(c?.token_ids) ? c!.token_ids as number[] : null;
  return { text: typeof m?.content === 'string' ? m.content : '', ids, finish: (c?.finish_reason as string | undefined) ?? null, response: r.body };
}

export type ComparedBy = 'token_ids' | 'text';

export function comparedBy(xs: readonly Pick<Completion, 'ids'>[]): ComparedBy {
  return xs.every((x) => x.ids !== null) ? 'token_ids' : 'text';
}

export interface Difference {
  compared_by: ComparedBy;
  /** The first position (token index or character index) where the two differ. */
  index: number;
  a: number | string | null;
  b: number | string | null;
}

/** The first difference of two outputs (token ids when both have them, else text), or null when equal. */
export function firstDifference(a: Pick<Completion, 'ids' | 'text'>, b: Pick<Completion, 'ids' | 'text'>): Difference | null {
  if (a.ids && b.ids) {
    const n = Math.max(a.ids.length, b.ids.length);
    for (let i = 0; i < n; i++) {
      if (a.ids[i] !== b.ids[i]) return { compared_by: 'token_ids', index: i, a: a.ids[i] ?? null, b: b.ids[i] ?? null };
    }
    return null;
  }
  const ca = Array.from(a.text);
  const cb = Array.from(b.text);
  const n = Math.max(ca.length, cb.length);
  for (let i = 0; i < n; i++) {
    if (ca[i] !== cb[i]) return { compared_by: 'text', index: i, a: ca[i] ?? null, b: cb[i] ?? null };
  }
  return null;
}

const ADJ = ['AMBER', 'COPPER', 'VELVET', 'CRIMSON', 'SILENT', 'FROSTED', 'GOLDEN', 'HOLLOW', 'IVORY', 'JADE', 'LUNAR', 'MOSSY', 'NORTHERN', 'OCHRE', 'PEWTER', 'RUSTY', 'SCARLET', 'TAWNY', 'UMBER', 'WINTER'];
const NOUN = ['HERON', 'FALCON', 'LANTERN', 'ORCHID', 'GLACIER', 'BADGER', 'CANYON', 'DYNAMO', 'EMBER', 'FJORD', 'GALLEON', 'HARBOR', 'KESTREL', 'MAGPIE', 'NEBULA', 'OTTER', 'PRISM', 'QUARRY', 'RAVEN', 'SPHINX'];

/** `n` distinct code words (ADJECTIVE-NOUN, upper case, no digits) for a seed. */
export function codeWords(seed: number, n: number): string[] {
  const rng = new Rng(seed, 'isolation-words');
  const out = new Set<string>();
  while (out.size < n) out.add(`${ADJ[rng.nextU32() % ADJ.length]}-${NOUN[rng.nextU32() % NOUN.length]}`);
  return [...out];
}

/** Whether `text` holds `word` as a whole word (case-insensitive; letters on either side do not count). */
export function holdsWord(text: string, word: string): boolean {
  return new RegExp(`(?<![A-Za-z])${word.replace(/[-]/g, '\\-')}(?![A-Za-z])`, 'i').test(text);
}

export interface IsolationPrompt {
  word: string;
  prompt: string;
  sharedPrefix: boolean;
}

/** The N prompts: the even-numbered ones behind one shared prefix of `prefixSentences` filler sentences. */
export function isolationPrompts(seed: number, n: number, prefixSentences: number): IsolationPrompt[] {
  const words = codeWords(seed, n);
  const prefix = fillerText(fillerSentences(seed, prefixSentences, 'isolation-prefix'));
  return words.map((word, i) => {
    const ask = `Your code word is ${word}. Reply with your code word only, exactly as written.`;
    const shared = i % 2 === 0;
    return { word, sharedPrefix: shared, prompt: shared ? `${prefix}\n\nThose were the keeper's notes. ${ask}` : ask };
  });
}

export interface IsolationOptions {
  seed: number;
  /** Concurrent requests (at least 2: one of them is the cancelled one). */
  requests: number;
  maxTokens: number;
  /** Filler sentences of the shared prefix. */
  prefixSentences: number;
}

/** k sequential greedy repeats of one prompt: pass when every output equals the first. */
export async function runRepeats(s: Session, k: number, maxTokens: number): Promise<CheckResult> {
  return runCheck('greedy-repeats', async () => {
    const prompt = 'Write a short paragraph about the sea at night.';
    const outs: Completion[] = [];
    for (let i = 0; i < k; i++) outs.push(await greedy(s, prompt, maxTokens));
    const by = comparedBy(outs);
    const key = (c: Completion) => by === 'token_ids' ? JSON.stringify(c.ids) : c.text;
    const distinct = new Set(outs.map(key)).size;
    const diff = outs.slice(1).map((o) => firstDifference(outs[0]!, o)).find((d) => d !== null) ?? null;
    return {
      pass: distinct === 1, response: outs.map((o) => o.response), repeats: k, max_tokens: maxTokens, compared_by: by,
      distinct_outputs: distinct, identical_repeats: outs.filter((o) => key(o) === key(outs[0]!)).length, first_difference: diff,
      reason: distinct === 1 ? `${k}/${k} repeats identical (${by})` : `${distinct} distinct outputs among ${k} repeats`,
    };
  });
}

interface RequestReport {
  word: string;
  shared_prefix: boolean;
  cancelled: boolean;
  solo_text: string | null;
  concurrent_text: string;
  equal_to_solo: boolean | null;
  first_difference: Difference | null;
  own_word_solo: boolean | null;
  own_word_concurrent: boolean;
  foreign_words: string[];
  /** false: evidence of a leak or a lost word; true: evidence of none (its own word kept, or its
   * answer equal to its solo answer); null: neither (see judgeIsolation). */
  pass: boolean | null;
  /** What decided `pass`: a foreign word, its own word, equality with its solo answer; null when nothing could. */
  judged_by: 'foreign_word' | 'own_word' | 'equal_to_solo' | 'foreign_words_only' | null;
}

export interface IsolationJudgement {
  /** null: not determinable (no request failed, and some could not be judged either way). */
  pass: boolean | null;
  comparedBy: ComparedBy;
  equal: number;
  compared: number;
  vacuous: boolean;
  requests: RequestReport[];
  /** Requests that could not be judged either way (their pass is null). */
  undetermined: number;
  reason: string;
}

function undeterminedWhy(requests: readonly RequestReport[]): string {
  const out: string[] = [];
  const n = requests.filter((r) => r.pass === null && !r.cancelled).length;
  if (n > 0) out.push(`${n} request(s) neither held their own word alone nor gave their solo answer under load (cross-talk, or a server that is not batch-invariant: the word check cannot tell)`);
  if (requests.some((r) => r.pass === null && r.cancelled)) out.push('the cancelled request streamed no text other than whitespace before it was cancelled or ended');
  return out.join('; ');
}

/**
 * The verdict on the concurrent answers: `solo[i]` and `conc[i]` for every prompt but the last,
 * whose partial (cancelled) text is `partial`. Per request: an answer holding another request's
 * word fails; a request whose solo answer held its own word passes when its concurrent answer still
 * holds it, and fails otherwise; a request whose solo answer did not hold its word (random weights:
 * the word check cannot decide) passes when its concurrent answer equals its solo answer (greedy on
 * the same server: the same tokens), and is undetermined (null) when it differs: cross-talk and a
 * server that is not batch-invariant look alike then. The cancelled request passes when its partial
 * text holds no other request's word, and is undetermined when it has no text (nothing was checked). The check fails when any request fails, is undetermined
 * (pass null) when none fails but some could not be judged, and passes only when every request
 * passed: never without evidence.
 */
export function judgeIsolation(prompts: readonly IsolationPrompt[], solo: readonly Completion[], conc: readonly Completion[], partial: string): IsolationJudgement {
  const cancelIndex = prompts.length - 1;
  const words = prompts.map((p) => p.word);
  const by = comparedBy([...solo, ...conc]);
  const requests: RequestReport[] = prompts.map((p, i) => {
    const text = i === cancelIndex ? partial : conc[i]!.text;
    const foreign = words.filter((w, j) => j !== i && holdsWord(text, w));
    if (i === cancelIndex) {
      // No text before the cancel (or before the stream ended): nothing was checked, so no evidence either way.
      const checked = text.trim() !== '';
      return {
        word: p.word, shared_prefix: p.sharedPrefix, cancelled: true, solo_text: null, concurrent_text: text, equal_to_solo: null,
        first_difference: null, own_word_solo: null, own_word_concurrent: holdsWord(text, p.word), foreign_words: foreign,
        pass: foreign.length > 0 ? false : checked ? true : null, judged_by: foreign.length > 0 ? 'foreign_word' : checked ? 'foreign_words_only' : null,
      };
    }
    const ownSolo = holdsWord(solo[i]!.text, p.word);
    const ownConc = holdsWord(text, p.word);
    const diff = firstDifference(by === 'token_ids' ? solo[i]! : { ids: null, text: solo[i]!.text }, by === 'token_ids' ? conc[i]! : { ids: null, text });
    let pass: boolean | null;
    let judgedBy: RequestReport['judged_by'];
    if (foreign.length > 0) { pass = false; judgedBy = 'foreign_word'; }
    else if (ownSolo) { pass = ownConc; judgedBy = 'own_word'; }
    else if (diff === null) { pass = true; judgedBy = 'equal_to_solo'; }
    else { pass = null; judgedBy = null; }
    return {
      word: p.word, shared_prefix: p.sharedPrefix, cancelled: false, solo_text: solo[i]!.text, concurrent_text: text,
      equal_to_solo: diff === null, first_difference: diff, own_word_solo: ownSolo, own_word_concurrent: ownConc,
      foreign_words: foreign, pass, judged_by: judgedBy,
    };
  });
  const completed = requests.filter((r) => !r.cancelled);
  const equal = completed.filter((r) => r.equal_to_solo).length;
  const vacuous = completed.every((r) => !r.own_word_solo);
  const failed = requests.filter((r) => r.pass === false).length;
  const undetermined = requests.filter((r) => r.pass === null).length;
  const pass = failed > 0 ? false : undetermined > 0 ? null : true;
  const leaks = requests.filter((r) => r.foreign_words.length > 0).length;
  const lost = completed.filter((r) => r.own_word_solo && !r.own_word_concurrent).length;
  const reason = (pass === false ? `${leaks} answer(s) hold another request's word, ${lost} lost their own`
    : pass === null ? `not determinable: ${undeterminedWhy(requests)}`
      : 'no answer holds another request\'s word; every request kept its own word or gave its solo answer') +
    `; ${equal}/${completed.length} concurrent answers equal their solo answers (${by})` +
    (vacuous ? '; the word check is vacuous (no solo answer held its own word): judged by equality with the solo answers' : '');
  return { pass, comparedBy: by, equal, compared: completed.length, vacuous, requests, undetermined, reason };
}

/**
 * N concurrent requests with their own code words, the last one streamed and cancelled after its
 * first chunk that carries text. The verdict: judgeIsolation. Detail: how many concurrent answers equal their solo answers.
 */
export async function runIsolation(s: Session, o: IsolationOptions): Promise<CheckResult> {
  return runCheck('request-isolation', async () => {
    if (o.requests < 2) throw new CheckNotRun('request isolation needs at least 2 requests');
    const prompts = isolationPrompts(o.seed, o.requests, o.prefixSentences);
    const cancelIndex = prompts.length - 1;
    const solo: Completion[] = [];
    for (let i = 0; i < cancelIndex; i++) solo.push(await greedy(s, prompts[i]!.prompt, o.maxTokens));

    // Cancelled once the stream has carried text other than whitespace (the role-only chunk before
    // it has none, and a cancel there, or after a model's leading "\n\n", would leave nothing the
    // judgement can check for foreign words: it was never judged on such models).
    let sawFinishBeforeCancel = false;
    let streamed = '';
    const cancelled = (async () => {
      const st = await s.client.stream('/v1/chat/completions',
        s.userBody(prompts[cancelIndex]!.prompt, { maxTokens: Math.max(64, o.maxTokens * 8), stream: true }),
        (ev) => {
          const c = firstChoice(ev.data);
          if (c?.finish_reason) sawFinishBeforeCancel = true;
          const delta = c?.delta as Json | undefined;
          const piece = typeof delta?.content === 'string' ? delta.content : typeof c?.text === 'string' ? c.text : '';
          streamed += piece;
          return streamed.trim() !== '' ? 'cancel' : undefined;
        });
      requireStatus(st.status, st.errorBody, 'the cancelled stream');
      // As for the decode runs: an answer to stream: true with no SSE events is not a stream; nothing to check.
      if (st.events.length === 0 && !st.done) {
        throw new CheckNotRun(`the cancelled stream: HTTP ${st.status} (${st.contentType || 'no content-type'}) carried no SSE data events: not an event stream`);
      }
      return st;
    })();
    const concurrent = await Promise.all([...prompts.slice(0, cancelIndex).map((p) => greedy(s, p.prompt, o.maxTokens)), cancelled]);
    const conc = concurrent.slice(0, cancelIndex) as Completion[];
    const cancelStream = concurrent[cancelIndex] as Awaited<typeof cancelled>;
    const partial = summarizeStream(cancelStream.events).text;

    const j = judgeIsolation(prompts, solo, conc, partial);
    return {
      pass: j.pass,
      response: [...conc.map((c) => c.response), cancelStream.events.map((e) => e.data)],
      requests_total: prompts.length, max_tokens: o.maxTokens, shared_prefix_sentences: o.prefixSentences,
      cancelled_request: cancelIndex, cancelled_mid_stream: cancelStream.cancelled && !sawFinishBeforeCancel,
      compared_by: j.comparedBy, concurrent_equal_to_solo: j.equal, compared: j.compared,
      word_check_vacuous: j.vacuous,
      ...(j.pass === null ? { not_determinable: j.reason } : {}),
      requests: j.requests,
      reason: j.reason,
    };
  });
}
/** The probe prompt alone, then among `distractors` concurrent requests of mixed lengths: reported, not judged. */
export async function runBatchInvariance(s: Session, seed: number, distractors: number, maxTokens: number): Promise<CheckResult> {
  return runCheck('batch-invariance', async () => {
    const probe = 'List three things a lighthouse keeper might carry, one per line.';
    const alone = await greedy(s, probe, maxTokens);
    const others = Array.from({ length: distractors }, (_, i) =>
      `${fillerText(fillerSentences(seed + i + 1, 2 + ((i * 7) % 24), 'batch-distractor'))}\n\nContinue these notes with one more sentence.`);
    const all = await Promise.all([...others.slice(0, Math.floor(distractors / 2)).map((p) => greedy(s, p, maxTokens)),
      greedy(s, probe, maxTokens), ...others.slice(Math.floor(distractors / 2)).map((p) => greedy(s, p, maxTokens))]);
    const batched = all[Math.floor(distractors / 2)]!;
    const diff = firstDifference(alone, batched);
    return {
      pass: diff === null, informational: true, response: { alone: alone.response, batched: batched.response },
      distractors, max_tokens: maxTokens, compared_by: comparedBy([alone, batched]), identical: diff === null, first_difference: diff,
      reason: diff === null ? `identical alone and among ${distractors} concurrent requests`
        : `differs at ${diff.compared_by === 'token_ids' ? 'token' : 'character'} ${diff.index}: ${JSON.stringify(diff.a)} alone vs ${JSON.stringify(diff.b)} batched`,
    };
  });
}
