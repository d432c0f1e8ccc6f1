// The held-out near-8k retrieval check: a seeded random five-digit number hidden at a seeded depth in
// filler this project generates (sentences drawn from its own word lists, no digits anywhere, so
// the key is the only number in the prompt), sized with the server's own token counts (/tokenize
// over the chat messages, else usage.prompt_tokens of one-token probes) so that the prompt plus the
// answer stays under 8192 tokens, and within the server's max_model_len when that is smaller.
import { Rng } from '../util/rng.js';
import { firstChoice, type Json } from './http-client.js';
import { numberInAnswer } from './scoring.js';
import { CheckNotRun, CheckRefused, requireAnswer, runCheck, type CheckResult, type Session } from './session.js';
import { performance } from 'node:perf_hooks';

/** The check's id in the seed report. */
export const RETRIEVAL_ID = 'heldout-near-8k-retrieval';
/** The window the check is named after: prompt + answer stay below it. */
export const RETRIEVAL_WINDOW = 8192;
/** Most tokens the answer may take. */
export const RETRIEVAL_ANSWER_TOKENS = 16;

const WORDS = {
  det: ['The', 'A', 'Every', 'That', 'One', 'Each'],
  adj: ['quiet', 'amber', 'weathered', 'narrow', 'patient', 'silver', 'crooked', 'gentle', 'distant', 'faded', 'restless', 'hollow', 'brisk', 'velvet', 'sturdy', 'pale'],
  noun: ['keeper', 'heron', 'lantern', 'ferryman', 'orchard', 'weaver', 'shepherd', 'compass', 'kettle', 'sparrow', 'baker', 'willow', 'courier', 'miller', 'quarry', 'cartographer'],
  verb: ['folded', 'carried', 'painted', 'watched', 'mended', 'followed', 'polished', 'gathered', 'counted', 'traded', 'sketched', 'buried', 'admired', 'lifted', 'scattered', 'whistled past'],
  obj: ['maps', 'ropes', 'letters', 'lanterns', 'baskets', 'feathers', 'stones', 'ribbons', 'shells', 'barrels', 'candles', 'blankets', 'pebbles', 'nets', 'keys', 'jars'],
  prep: ['before', 'after', 'beside', 'beneath', 'beyond', 'during', 'near', 'across'],
  place: ['the evening tide', 'the northern pier', 'the old mill', 'the frozen river', 'the chapel bells', 'the market square', 'the windy ridge', 'the harbour wall', 'the first frost', 'the long harvest', 'the quiet meadow', 'the cedar bridge'],
  tail: ['', '', '', ' without a word', ' as the gulls circled', ' while the rain thinned', ' and nobody asked why', ' for the third winter running'],
};

function pick<T>(rng: Rng, xs: readonly T[]): T {
  return xs[rng.nextU32() % xs.length]!;
}

/** The `i`-th filler sentence stream of `seed`: deterministic, digit-free. */
export function fillerSentences(seed: number, count: number, stream = 'retrieval-filler'): string[] {
  const rng = new Rng(seed, stream);
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    out.push(`${pick(rng, WORDS.det)} ${pick(rng, WORDS.adj)} ${pick(rng, WORDS.noun)} ${pick(rng, WORDS.verb)} the ${pick(rng, WORDS.adj)} ${pick(rng, WORDS.obj)} ${pick(rng, WORDS.prep)} ${pick(rng, WORDS.place)}${pick(rng, WORDS.tail)}.`);
  }
  return out;
}

/** Filler sentences joined into paragraphs of six. */
export function fillerText(sentences: readonly string[]): string {
  const paras: string[] = [];
  for (let i = 0; i < sentences.length; i += 6) paras.push(sentences.slice(i, i + 6).join(' '));
  return paras.join('\n\n');
}

export interface RetrievalPrompt {
  prompt: string;
  key: number;
  /** Where the key sits: the fraction of filler sentences before it. */
  depth: number;
  sentences: number;
}

/** The key (10000–99999) and depth (0.15–0.85) of a seed. */
export function retrievalKey(seed: number): { key: number; depth: number } {
  const k = new Rng(seed, 'retrieval-key');
  const d = new Rng(seed, 'retrieval-depth');
  return { key: 10000 + (k.nextU32() % 90000), depth: 0.15 + 0.7 * d.nextFloat() };
}

/** The prompt with `sentences` filler sentences and the key's sentence at the seeded depth. */
export function buildRetrievalPrompt(seed: number, sentences: number): RetrievalPrompt {
  const { key, depth } = retrievalKey(seed);
  const filler = fillerSentences(seed, sentences);
  const at = Math.round(depth * sentences);
  filler.splice(at, 0, `The vault code of the harbour office is ${key}.`);
  const prompt = 'Below are the keeper\'s notes. Exactly one sentence in them gives the vault code of the harbour office. ' +
    'Read all of the notes, then answer the question after them.\n\n' +
    `${fillerText(filler)}\n\n` +
    'Question: what is the vault code of the harbour office? Reply with the number only.';
  return { prompt, key, depth: sentences > 0 ? at / sentences : 0, sentences };
}

export interface SizedPrompt extends RetrievalPrompt {
  tokens: number;
  /** How many times the server counted a prompt. */
  counts: number;
}

/**
 * The largest prompt (in whole filler sentences) whose token count is at most `target`, found with
 * at most `maxCounts` counts; it stops early once within `tolerance` tokens of the target.
 */
export async function sizeRetrievalPrompt(
  seed: number, target: number, count: (prompt: string) => Promise<number>, maxCounts = 12,
  tolerance = Math.max(32, Math.floor(target * 0.015)),
): Promise<SizedPrompt> {
  let counts = 0;
  const measure = async (n: number): Promise<SizedPrompt> => {
    const p = buildRetrievalPrompt(seed, n);
    counts++;
    return { ...p, tokens: await count(p.prompt), counts };
  };
  const a = await measure(8);
  if (a.tokens > target) {
    const one = await measure(1);
    if (one.tokens > target) throw new CheckNotRun(`even the smallest retrieval prompt (${one.tokens} tokens) exceeds the room of ${target} tokens`);
    return { ...one, counts };
  }
  const b = await measure(64);
  const slope = Math.max(1, (b.tokens - a.tokens) / 56);
  const base = a.tokens - 8 * slope;
  let best = b.tokens <= target ? b : a;
  let hi = b.tokens > target ? 64 : Infinity; // smallest size known to be too large
  let next = Math.floor((target - base) / slope);
  while (counts < maxCounts && target - best.tokens > tolerance) {
    next = Math.min(next, hi - 1);
    if (next <= best.sentences) next = best.sentences + Math.max(1, Math.floor((target - best.tokens) / slope / 2));
    if (next >= hi) break;
    const m = await measure(next);
    if (m.tokens <= target) {
      if (m.tokens > best.tokens) best = m;
      next = m.sentences + Math.max(1, Math.floor((target - m.tokens) / slope));
    } else {
      hi = Math.min(hi, m.sentences);
      next = m.sentences - Math.ceil((m.tokens - target) / slope) - 1;
    }
  }
  return { ...best, counts };
}

/** The prompt's token count as the server renders the chat: /tokenize with messages (the "ran" rule: session.ts, replyKind). */
function tokenizeCounter(s: Session): (prompt: string) => Promise<number> {
  return async (prompt) => {
    const r = requireAnswer(await s.client.post('/tokenize', {
      model: s.model, messages: [{ role: 'user', content: prompt }], add_generation_prompt: true,
      ...(s.extras.chatTemplateKwargs ? { chat_template_kwargs: { enable_thinking: false } } : {}),
    }), 'sizing: /tokenize');
    const n = (r.body as Json).count;
    if (typeof n !== 'number') throw new CheckNotRun(`sizing: /tokenize: HTTP ${r.status} without a numeric count`, r.body);
    return n;
  };
}

/**
 * The prompt's token count from usage.prompt_tokens of a one-token request (a whole prefill each). The
 * search overshoots at times, and a probe past the server's context is refused (400/413/422): once a
 * probe has been answered, a refused one counts as too large (target + 1), the tool's own probe and
 * not the check's finding; a refusal of the first probe leaves the check not run.
 */
function usageCounter(s: Session, target: number): (prompt: string) => Promise<number> {
  let answered = false;
  return async (prompt) => {
    let r: Awaited<ReturnType<Session['chat']>>;
    try {
      r = await s.chat(s.userBody(prompt, { maxTokens: 1 }), 'sizing probe');
    } catch (err) {
      if (!(err instanceof CheckRefused)) throw err;
      if (answered) return target + 1;
      throw new CheckNotRun(err.message, err.response);
    }
    answered = true;
    const u = (r.body as Json).usage;
    const n = typeof u === 'object' && u !== null ? (u as Json).prompt_tokens : undefined;
    if (typeof n !== 'number') throw new CheckNotRun(`sizing probe: HTTP ${r.status} without a numeric usage.prompt_tokens`, r.body);
    return n;
  };
}

/** The token limit of the check: under 8192, and within max_model_len when that is smaller. */
export function retrievalLimit(maxModelLen: number | null): { target: number; limit: number; limitedBy: 'window' | 'max_model_len' } {
  if (maxModelLen !== null && maxModelLen < RETRIEVAL_WINDOW) {
    return { target: maxModelLen - RETRIEVAL_ANSWER_TOKENS, limit: maxModelLen, limitedBy: 'max_model_len' };
  }
  return { target: RETRIEVAL_WINDOW - 1 - RETRIEVAL_ANSWER_TOKENS, limit: RETRIEVAL_WINDOW, limitedBy: 'window' };
}

export async function runRetrieval(s: Session, seed: number, maxModelLen: number | null): Promise<CheckResult> {
  return runCheck(RETRIEVAL_ID, async () => {
    const lim = retrievalLimit(maxModelLen);
    const t0 = performance.now();
    let countedBy = '/tokenize';
    let sized: SizedPrompt;
    // /tokenize must take chat messages (vLLM's and our serve's do); else the usage probes.
    const tokenize = tokenizeCounter(s);
    const hasTokenize = await tokenize('probe').then(() => true, (err: unknown) => {
      if (err instanceof CheckNotRun || err instanceof CheckRefused) return false;
      throw err;
    });
    if (hasTokenize) {
      sized = await sizeRetrievalPrompt(seed, lim.target, tokenize);
    } else {
      countedBy = 'usage.prompt_tokens';
      sized = await sizeRetrievalPrompt(seed, lim.target, usageCounter(s, lim.target), 5);
    }
    const sizingSeconds = (performance.now() - t0) / 1000;
    const t1 = performance.now();
    let r;
    let refusedBy: CheckRefused | null = null;
    try {
      r = await s.chat(s.userBody(sized.prompt, { maxTokens: RETRIEVAL_ANSWER_TOKENS }));
    } catch (err) {
      if (!(err instanceof CheckRefused)) throw err;
      refusedBy = err;
    }
    const seconds = (performance.now() - t1) / 1000;
    const common = {
      prepared_prompt_tokens: sized.tokens, token_limit: lim.limit, limited_by: lim.limitedBy, max_model_len: maxModelLen,
      max_tokens: RETRIEVAL_ANSWER_TOKENS, counted_by: countedBy, counts: sized.counts, sizing_seconds: sizingSeconds,
      filler_sentences: sized.sentences, depth: sized.depth, expected: String(sized.key),
    };
    if (refusedBy !== null || r === undefined) {
      return { pass: false, seconds, response: refusedBy?.response ?? null, ...common, reason: `the server refused the prompt: ${refusedBy?.message ?? ''}` };
    }
    const score = numberInAnswer(sized.key)(r.body);
    const reported = ((r.body as Json).usage as Json | undefined)?.prompt_tokens;
    return {
      pass: score.pass, seconds, response: r.body, ...common,
      usage_prompt_tokens: typeof reported === 'number' ? reported : null,
      answer: score.answer, reason: score.reason,
      finish_reason: firstChoice(r.body)?.finish_reason ?? null,
    };
  });
}
