// A synthetic, real-layout Qwen3.5 tokenizer: byte-level BPE with the genuine special tokens at
// their genuine ids, so prompts, chat templates and stop tokens behave like the real thing.
//
// Vocabulary (ids 0..248043):
//   0..255     the 256 byte symbols in GPT-2 bytes_to_unicode order (so "\n" is 198, as in Qwen)
//   256..      tokens produced by a small BPE training run over a built-in English word list,
//              in the order the merges created them, so ordinary English text compresses somewhat
//   rest       unique filler pseudo-words ("Ġbalomi", "ruteka", ...) with no merges: never
//              produced by encoding, but they decode to readable text when a model samples them.
// Added tokens 248044..248076: the 33 Qwen3.5 special tokens (special: true).
// buildSynthTokenizer(n) builds the same layout with n BPE tokens (at most n - 256 merges) and the
// special tokens at n..n+32: a small, fast tokenizer for tests and the fuzzer.

import { hashString } from '../util/rng.js';

export const BPE_VOCAB_SIZE = 248044;

/** The Qwen3.5 added tokens, in id order starting at 248044. */
export const SPECIAL_TOKENS: readonly string[] = [
  '<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|object_ref_start|>', '<|object_ref_end|>',
  '<|box_start|>', '<|box_end|>', '<|quad_start|>', '<|quad_end|>', '<|vision_start|>',
  '<|vision_end|>', '<|vision_pad|>', '<|image_pad|>', '<|video_pad|>', '<tool_call>',
  '</tool_call>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|fim_pad|>',
  '<|repo_name|>', '<|file_sep|>', '<tool_response>', '</tool_response>', '<think>', '</think>',
  '<|audio_start|>', '<|audio_end|>', '<tts_pad>', '<tts_text_bos>', '<tts_text_eod>',
  '<tts_text_bos_single>', '<|audio_pad|>',
];

export const SPECIAL_TOKEN_IDS: Readonly<Record<string, number>> = Object.fromEntries(
  SPECIAL_TOKENS.map((t, i) => [t, BPE_VOCAB_SIZE + i]),
);

export const ENDOFTEXT_ID = 248044;
export const IM_START_ID = 248045;
export const IM_END_ID = 248046;
export const THINK_ID = 248068;
export const END_THINK_ID = 248069;

/** The Qwen3.5 pre-tokenizer split pattern. */
export const QWEN35_SPLIT_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/**
 * A Qwen3.5 tokenizer.json (byte-level BPE, NFC, the Qwen3.5 split pattern) around a vocabulary,
 * its merges and its added tokens: the one layout the synthetic tokenizer and a GGUF's tokenizer share.
 */
export function qwen35TokenizerJson(vocab: unknown, merges: unknown, added: unknown[]): Record<string, unknown> {
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: 'NFC' },
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: QWEN35_SPLIT_REGEX }, behavior: 'Isolated', invert: false },
        byteLevel,
      ],
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
}

/** GPT-2 bytes_to_unicode: byte -> printable code point, and the byte order used for ids 0..255. */
export function byteLevelAlphabet(): { byteToChar: string[]; order: number[] } {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const isPrintable = new Set(printable);
  const byteToChar: string[] = new Array(256);
  const order = printable.slice();
  let next = 256;
  for (const b of printable) byteToChar[b] = String.fromCodePoint(b);
  for (let b = 0; b < 256; b++) {
    if (!isPrintable.has(b)) {
      byteToChar[b] = String.fromCodePoint(next++);
      order.push(b);
    }
  }
  return { byteToChar, order };
}

// Common English words, roughly by frequency (a hand-written list; rank sets the training weight).
const WORDS = `user assistant system tool think the of and to a in is it you that he was for on are with as I his they be at one have this from
or had by not word but what some we can out other were all there when up use your how said an each she which do
their time if will way about many then them write would like so these her long make thing see him two has look
more day could go come did number sound no most people my over know water than call first who may down side been
now find any new work part take get place made live where after back little only round man year came show every
good me give our under name very through just form sentence great think say help low line differ turn cause much
mean before move right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light kind off need
house picture try us again animal point mother world near build self earth father head stand own page should
country found answer school grow study still learn plant cover food sun four between state keep eye never last
let thought city tree cross farm hard start might story saw far sea draw left late run while press close night
real life few north open seem together next white children begin got walk example ease paper group always music
those both mark often letter until mile river car feet care second book carry took science eat room friend began
idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain girl usual young
ready above ever red list though feel talk bird soon body dog family direct pose leave song measure door product
black short numeral class wind question happen complete ship area half rock order fire south problem piece told
knew pass since top whole king space heard best hour better true during hundred five remember step early hold
west ground interest reach fast verb sing listen six table travel less morning ten simple several vowel toward war
lay against pattern slow center love person money serve appear road map rain rule govern pull cold notice voice
unit power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest correct
able pound done beauty drive stood contain front teach week final gave green oh quick develop ocean warm free
minute strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel full force
blue object decide surface deep moon island foot system busy test record boat common gold possible plane stead dry
wonder laugh thousand ago ran check game shape equate hot miss brought heat snow tire bring yes distant fill east
paint language among grand ball yet wave drop heart am present heavy dance engine position arm wide sail material
size vary settle speak weight general ice matter circle pair include divide syllable felt perhaps pick sudden count
square reason length represent art subject region energy hunt probable bed brother egg ride cell believe fraction
forest sit race window store summer train sleep prove lone leg exercise wall catch mount wish sky board joy winter
sat written wild instrument kept glass grass cow job edge sign visit past soft fun bright gas weather month million
bear finish happy hope flower clothe strange gone jump baby eight village meet root buy raise solve metal whether
push seven paragraph third shall held hair describe cook floor either result burn hill safe cat century consider
type law bit coast copy phrase silent tall sand soil roll temperature finger industry value fight lie beat excite
natural view sense ear else quite broke case middle kill son lake moment scale loud spring observe child straight
consonant nation dictionary milk speed method organ pay age section dress cloud surprise quiet stone tiny climb
cool design poor lot experiment bottom key iron single stick flat twenty skin smile crease hole trade melody trip
office receive row mouth exact symbol die least trouble shout except wrote seed tone join suggest clean break lady
yard rise bad blow oil blood touch grew cent mix team wire cost lost brown wear garden equal sent choose fell fit
flow fair bank collect save control decimal gentle woman captain practice separate difficult doctor please protect
noon whose locate ring character insect caught period indicate radio spoke atom human history effect electric
expect crop modern element hit student corner party supply bone rail imagine provide agree thus capital chair
danger fruit rich thick soldier process operate guess necessary sharp wing create neighbor wash bat rather crowd
corn compare poem string bell depend meat rub tube famous dollar stream fear sight thin triangle planet hurry chief
colony clock mine tie enter major fresh search send yellow gun allow print dead spot desert suit current lift rose
continue block chart hat sell success company subtract event particular deal swim term opposite wife shoe shoulder
spread arrange camp invent cotton born determine quart nine truck noise level chance gather shop stretch throw
shine property column molecule select wrong gray repeat require broad prepare salt nose plural anger claim continent
oxygen sugar death pretty skill women season solution magnet silver thank branch match suffix especially fig afraid
huge sister steel discuss forward similar guide experience score apple bought led pitch coat mass card band rope
slip win dream evening condition feed tool total basic smell valley nor double seat arrive master track parent shore
division sheet substance favor connect post spend chord fat glad original share station dad bread charge proper bar
offer segment slave duck instant market degree populate chick dear enemy reply drink occur support speech nature
range steam motion path liquid log meant quotient teeth shell neck model benchmark token tokens latency throughput
batch prompt decode prefill memory cache kernel thread request model layer attention hidden state vector matrix
function return value string number error file data code input output server client query result system`;

/** Short non-word pieces the pre-tokenizer commonly yields (punctuation runs, whitespace runs). */
const PIECES = [
  "'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
  '.\n', '.\n\n', ',', '.', ':', ';', '!', '?', ' (', ')', ').', '),', ' "', '".', '",', "'", ' -', ' =', ' ==',
  ' {', ' }', '();', ' {\n', '}\n', ' //', ' #', ' *', ' +', ' /', ' <', ' >', '\n\n', '\n\n\n', '  ', '   ',
  '    ', '        ', ' $', ' %', ' &', ' [', ']', '],', ' `', '`', '```', ' ->', ' =>', ' ...', '...',
];

/** Binary max-heap of (count, key), ordered by count descending then key ascending. */
class PairHeap {
  private counts: number[] = [];
  private keys: number[] = [];
  get size(): number { return this.counts.length; }
  private above(i: number, j: number): boolean {
    const ci = this.counts[i]!, cj = this.counts[j]!;
    return ci > cj || (ci === cj && this.keys[i]! < this.keys[j]!);
  }
  private swap(i: number, j: number): void {
    const c = this.counts[i]!; this.counts[i] = this.counts[j]!; this.counts[j] = c;
    const k = this.keys[i]!; this.keys[i] = this.keys[j]!; this.keys[j] = k;
  }
  push(count: number, key: number): void {
    this.counts.push(count);
    this.keys.push(key);
    let i = this.counts.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.above(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }
  pop(): [number, number] {
    const top: [number, number] = [this.counts[0]!, this.keys[0]!];
    const last = this.counts.length - 1;
    this.swap(0, last);
    this.counts.pop();
    this.keys.pop();
    let i = 0;
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let m = i;
      if (l < last && this.above(l, m)) m = l;
      if (r < last && this.above(r, m)) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
    return top;
  }
}

/** Trains merges on a weighted list of words given as byte-level symbol strings. */
function trainMerges(
  words: Array<{ symbols: number[]; weight: number }>,
  symbolText: string[],
  symbolOf: Map<string, number>,
  maxMerges: number,
): Array<[number, number]> {
  const KEY = 1 << 20;
  const pairCount = new Map<number, number>();
  const pairWords = new Map<number, Set<number>>();
  let onChange: ((k: number) => void) | null = null;
  const addPairs = (wi: number, sign: number) => {
    const s = words[wi]!.symbols;
    const w = words[wi]!.weight * sign;
    for (let i = 0; i + 1 < s.length; i++) {
      const k = s[i]! * KEY + s[i + 1]!;
      const c = (pairCount.get(k) ?? 0) + w;
      if (c > 0) pairCount.set(k, c);
      else pairCount.delete(k);
      onChange?.(k);
      if (sign > 0) {
        let set = pairWords.get(k);
        if (!set) pairWords.set(k, (set = new Set()));
        set.add(wi);
      }
    }
  };
  for (let wi = 0; wi < words.length; wi++) addPairs(wi, 1);
  const merges: Array<[number, number]> = [];
  // Best pair = highest count, then smallest key. A lazy max-heap: every count change pushes a new
  // entry; popped entries whose count is no longer current are skipped.
  const heap = new PairHeap();
  for (const [k, c] of pairCount) heap.push(c, k);
  const touched = new Set<number>();
  onChange = (k) => touched.add(k);
  while (merges.length < maxMerges) {
    let best = -1;
    let bestCount = 0;
    while (heap.size > 0) {
      const [c, k] = heap.pop();
      if (pairCount.get(k) === c) {
        best = k;
        bestCount = c;
        break;
      }
    }
    if (best < 0 || bestCount < 2) break;
    const a = Math.floor(best / KEY);
    const b = best % KEY;
    // Two different merges can spell the same string ("ab"+"c", "a"+"bc"): they share one token.
    const text = symbolText[a]! + symbolText[b]!;
    let id = symbolOf.get(text);
    if (id === undefined) {
      id = symbolText.length;
      symbolText.push(text);
      symbolOf.set(text, id);
    }
    merges.push([a, b]);
    const affected = pairWords.get(best);
    pairWords.delete(best);
    if (!affected) continue;
    for (const wi of affected) {
      addPairs(wi, -1);
      const s = words[wi]!.symbols;
      const out: number[] = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === a && s[i + 1] === b) {
          out.push(id);
          i++;
        } else out.push(s[i]!);
      }
      words[wi]!.symbols = out;
      addPairs(wi, 1);
    }
    for (const k of touched) {
      const c = pairCount.get(k);
      if (c !== undefined) heap.push(c, k);
    }
    touched.clear();
  }
  return merges;
}

export interface SynthTokenizerFiles {
  /** tokenizer.json text. */
  tokenizerJson: string;
  vocabSize: number;
  mergeCount: number;
}

const cache = new Map<number, SynthTokenizerFiles>();

/** Fewest BPE tokens a synthetic tokenizer may have: the 256 byte symbols. */
export const MIN_BPE_VOCAB_SIZE = 256;

/**
 * Builds (once per process and size) the synthetic tokenizer.json. Deterministic; independent of
 * any seed. `bpeVocabSize` (default 248044, the real layout) is the number of BPE tokens: the 256
 * byte symbols, then at most `bpeVocabSize - 256` merges (fewer merges for a smaller vocabulary),
 * then fillers; the 33 special tokens follow at ids bpeVocabSize.. (a small vocabulary gives a
 * small, fast tokenizer for tests; only the default has the special tokens at their real ids).
 */
export function buildSynthTokenizer(bpeVocabSize = BPE_VOCAB_SIZE): SynthTokenizerFiles {
  if (!Number.isInteger(bpeVocabSize) || bpeVocabSize < MIN_BPE_VOCAB_SIZE || bpeVocabSize > BPE_VOCAB_SIZE) {
    throw new Error(`synth tokenizer: bpeVocabSize must be an integer in [${MIN_BPE_VOCAB_SIZE}, ${BPE_VOCAB_SIZE}] (got ${bpeVocabSize})`);
  }
  const hit = cache.get(bpeVocabSize);
  if (hit) return hit;
  const { byteToChar, order } = byteLevelAlphabet();
  const enc = new TextEncoder();
  const toByteLevel = (s: string) => Array.from(enc.encode(s), (b) => byteToChar[b]!).join('');
  // Symbol ids for training: 0..255 follow the vocabulary order.
  const symbolText: string[] = order.map((b) => byteToChar[b]!);
  const symbolOf = new Map<string, number>(symbolText.map((t, i) => [t, i]));

  const words = WORDS.split(/\s+/).filter(Boolean);
  const uniq: string[] = [];
  const seenWord = new Set<string>();
  for (const w of words) if (!seenWord.has(w)) { seenWord.add(w); uniq.push(w); }
  const training: Array<{ symbols: number[]; weight: number }> = [];
  const add = (text: string, weight: number) => {
    const bl = toByteLevel(text);
    training.push({ symbols: Array.from(bl, (ch) => symbolOf.get(ch)!), weight });
  };
  uniq.forEach((w, rank) => {
    const base = Math.round(1_000_000 / (rank + 20));
    const cap = w[0]!.toUpperCase() + w.slice(1);
    add(' ' + w, base * 4);
    add(w, base);
    if (cap !== w) {
      add(' ' + cap, Math.max(1, base >> 1));
      add(cap, Math.max(1, base >> 1));
    }
  });
  PIECES.forEach((p, rank) => add(p, Math.round(400_000 / (rank + 10))));
  const merges = trainMerges(training, symbolText, symbolOf, Math.min(12000, bpeVocabSize - MIN_BPE_VOCAB_SIZE));

  // Vocabulary: bytes, merged tokens, then fillers.
  const vocabTokens: string[] = symbolText.slice();
  const merged = new Set(vocabTokens);
  const consonants = 'bcdfghjklmnprstvz';
  const vowels = 'aeiou';
  const syll: string[] = [];
  for (const c of consonants) for (const v of vowels) syll.push(c + v);
  const S = syll.length; // 85
  const space = byteToChar[0x20]!;
  // Walk a permutation of the 3-syllable space (step coprime to S^3): every word is new, so only
  // collisions with trained tokens need checking.
  const space3 = S * S * S;
  const mult = 392_837; // odd and not a multiple of 5 or 17, hence coprime to 85^3
  let k = hashString('lumen-synth-fillers') % space3;
  for (let step = 0; vocabTokens.length < bpeVocabSize; step++) {
    if (step >= space3) throw new Error('synth tokenizer: ran out of filler words');
    k = (k + mult) % space3;
    const w = syll[k % S]! + syll[Math.floor(k / S) % S]! + syll[Math.floor(k / (S * S))]!;
    const spaced = space + w;
    if (!merged.has(spaced)) vocabTokens.push(spaced);
    if (vocabTokens.length < bpeVocabSize && !merged.has(w)) vocabTokens.push(w);
  }

  // The vocab object is spliced in as text so it is listed in id order (a JS object would move
  // integer-like keys such as "0" to the front).
  // Byte-level symbols are all printable: only '"' and '\\' need escaping.
  const quote = (t: string) => (t.includes('"') || t.includes('\\') ? JSON.stringify(t) : `"${t}"`);
  const vocabText = '{' + vocabTokens.map((t, i) => `${quote(t)}:${i}`).join(',') + '}';
  const added = SPECIAL_TOKENS.map((content, i) => ({
    id: bpeVocabSize + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  const tok = qwen35TokenizerJson('__VOCAB__', merges.map(([a, b]) => [symbolText[a]!, symbolText[b]!]), added);
  const json = JSON.stringify(tok);
  const at = json.indexOf('"__VOCAB__"');
  const tokenizerJson = json.slice(0, at) + vocabText + json.slice(at + '"__VOCAB__"'.length);
  const built = { tokenizerJson, vocabSize: bpeVocabSize + SPECIAL_TOKENS.length, mergeCount: merges.length };
  cache.set(bpeVocabSize, built);
  return built;
}

/** The instructions Qwen3.5's template puts after the tool schemas (the format the model was trained to call in). */
export const QWEN35_TOOL_INSTRUCTIONS =
  '\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n' +
  '<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n' +
  '<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n' +
  '</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n' +
  '- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within ' +
  '<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n' +
  '- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n' +
  '- If there is no function call available, answer the question like normal with your current knowledge and do not ' +
  'tell the user about function calls\n</IMPORTANT>';

/**
 * ChatML chat template with Qwen3.5's tool layout; `thinkDefault` decides the generation prompt when
 * enable_thinking is not given. Tools: a system turn listing each schema as one JSON line inside
 * <tools></tools>, then the call-format instructions, then the system message (if any); assistant
 * tool calls as <tool_call><function=NAME><parameter=ARG>VALUE</parameter></function></tool_call>;
 * tool results as <tool_response> blocks in one user turn per run of tool messages.
 */
export function chatTemplate(thinkDefault: boolean): string {
  const think = thinkDefault
    ? `{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}`
    : `{%- if enable_thinking is defined and enable_thinking %}{{- '<think>\\n' }}{%- else %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}`;
  const instructions = JSON.stringify(QWEN35_TOOL_INSTRUCTIONS).slice(1, -1).replace(/'/g, "\\'");
  return [
    `{%- macro text_of(content) %}{%- if content is string %}{{- content }}{%- elif content is iterable and content is not mapping %}`,
    `{%- for part in content %}{%- if part.type == 'text' %}{{- part.text }}{%- endif %}{%- endfor %}{%- endif %}{%- endmacro %}`,
    `{%- set has_tools = tools is defined and tools is iterable and tools is not mapping and tools | length > 0 %}`,
    `{%- if has_tools %}`,
    `{{- '<|im_start|>system\\n# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>' }}`,
    `{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}`,
    `{{- '\\n</tools>${instructions}' }}`,
    `{%- if messages[0].role == 'system' %}{%- set system_text = text_of(messages[0].content) | trim %}{%- if system_text %}{{- '\\n\\n' + system_text }}{%- endif %}{%- endif %}`,
    `{{- '<|im_end|>\\n' }}`,
    `{%- endif %}`,
    `{%- for message in messages %}`,
    `{%- set content = text_of(message.content) %}`,
    `{%- if message.role == 'system' and has_tools and loop.first %}`,
    `{%- elif message.role == 'assistant' and message.tool_calls is defined and message.tool_calls %}`,
    `{{- '<|im_start|>assistant\\n' + content }}`,
    `{%- for call in message.tool_calls %}`,
    `{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}`,
    `{%- if not loop.first %}{{- '\\n' }}{%- elif content | trim %}{{- '\\n\\n' }}{%- endif %}`,
    `{{- '<tool_call>\\n<function=' + call.name + '>\\n' }}`,
    `{%- if call.arguments is mapping %}{%- for name, value in call.arguments | items %}`,
    `{{- '<parameter=' + name + '>\\n' }}{%- if value is string %}{{- value }}{%- else %}{{- value | tojson }}{%- endif %}{{- '\\n</parameter>\\n' }}`,
    `{%- endfor %}{%- endif %}`,
    `{{- '</function>\\n</tool_call>' }}`,
    `{%- endfor %}`,
    `{{- '<|im_end|>\\n' }}`,
    `{%- elif message.role == 'tool' %}`,
    `{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}`,
    `{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}`,
    `{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}`,
    `{%- else %}`,
    `{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}`,
    `{%- endif %}`,
    `{%- endfor %}`,
    `{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}${think}{%- endif %}`,
  ].join('\n');
}

/** tokenizer_config.json object for the synthetic tokenizer (of `bpeVocabSize` BPE tokens). */
export function synthTokenizerConfig(thinkDefault: boolean, modelMaxLength = 262144, bpeVocabSize = BPE_VOCAB_SIZE): Record<string, unknown> {
  const decoder: Record<string, unknown> = {};
  SPECIAL_TOKENS.forEach((content, i) => {
    decoder[String(bpeVocabSize + i)] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
  });
  return {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: decoder,
    additional_special_tokens: ['<|im_start|>', '<|im_end|>', '<|object_ref_start|>', '<|object_ref_end|>', '<|box_start|>',
      '<|box_end|>', '<|quad_start|>', '<|quad_end|>', '<|vision_start|>', '<|vision_end|>', '<|vision_pad|>', '<|image_pad|>',
      '<|video_pad|>'],
    bos_token: null,
    chat_template: chatTemplate(thinkDefault),
    clean_up_tokenization_spaces: false,
    eos_token: '<|im_end|>',
    errors: 'replace',
    model_max_length: modelMaxLength,
    pad_token: '<|endoftext|>',
    split_special_tokens: false,
    tokenizer_class: 'Qwen2Tokenizer',
    unk_token: null,
  };
}
