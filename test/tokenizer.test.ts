// The synthetic tokenizer (real Qwen3.5 layout and special ids) and the tokenizer wrapper.
import { copyFileSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BPE_VOCAB_SIZE, buildSynthTokenizer, byteLevelAlphabet, SPECIAL_TOKENS, synthTokenizerConfig,
} from '../src/model/synth-tokenizer.js';
import { loadTokenizer, type LoadedTokenizer } from '../src/model/tokenizer.js';
import { CheckpointError } from '../src/model/types.js';
import { cleanupAllFixtures, synthFixture, tempDir } from './helpers/synth-fixture.js';

// How long the build takes is a figure, not a property: no test asserts it (it varies with the CPU
// and with the other work on a shared machine).
const built = buildSynthTokenizer();

let dir: string;
let tok: LoadedTokenizer;
beforeAll(async () => {
  // Tokenizer files only matter here; keep the weights small.
  dir = (await synthFixture({ overrides: { hiddenSize: 32, intermediateSize: 64, numLayers: 4 } })).dir;
  tok = await loadTokenizer(dir);
});
afterAll(() => cleanupAllFixtures());

describe('synthetic tokenizer.json', () => {
  it('is small', () => {
    expect(built.tokenizerJson.length).toBeLessThan(15 * 1024 * 1024);
    expect(built.vocabSize).toBe(248077);
  });

  it('has the real-layout vocabulary: byte symbols, merges inside the vocab, contiguous unique ids', () => {
    const j = JSON.parse(built.tokenizerJson);
    expect(j.normalizer).toEqual({ type: 'NFC' });
    expect(j.pre_tokenizer.pretokenizers[0]).toMatchObject({ type: 'Split', behavior: 'Isolated', invert: false });
    expect(j.pre_tokenizer.pretokenizers[1]).toMatchObject({ type: 'ByteLevel', add_prefix_space: false, use_regex: false });
    expect(j.decoder.type).toBe('ByteLevel');
    const vocab = j.model.vocab as Record<string, number>;
    const ids = Object.values(vocab).sort((a, b) => a - b);
    expect(ids.length).toBe(BPE_VOCAB_SIZE);
    expect(ids[0]).toBe(0);
    expect(ids[ids.length - 1]).toBe(BPE_VOCAB_SIZE - 1);
    expect(new Set(ids).size).toBe(BPE_VOCAB_SIZE);
    const { byteToChar } = byteLevelAlphabet();
    expect(vocab['!']).toBe(0);
    expect(vocab[byteToChar[10]!]).toBe(198); // "\n", as in Qwen
    for (let b = 0; b < 256; b++) expect(vocab[byteToChar[b]!], `byte ${b}`).toBeLessThan(256);
    expect(j.model.merges.length).toBeGreaterThan(3000);
    for (const [a, b] of j.model.merges as Array<[string, string]>) {
      expect(vocab[a] !== undefined && vocab[b] !== undefined && vocab[a + b] !== undefined, `${a} ${b}`).toBe(true);
    }
    expect(j.added_tokens.map((t: { id: number }) => t.id)).toEqual(SPECIAL_TOKENS.map((_, i) => 248044 + i));
    expect(j.added_tokens.every((t: { special: boolean }) => t.special)).toBe(true);
  });
});

describe('loadTokenizer', () => {
  it('special tokens sit at their real ids', () => {
    const expected: Record<string, number> = {
      '<|endoftext|>': 248044, '<|im_start|>': 248045, '<|im_end|>': 248046, '<|vision_start|>': 248053,
      '<|image_pad|>': 248056, '<|video_pad|>': 248057, '<tool_call>': 248058, '<|fim_prefix|>': 248060,
      '<|file_sep|>': 248065, '<think>': 248068, '</think>': 248069, '<|audio_pad|>': 248076,
    };
    for (const [s, id] of Object.entries(expected)) {
      expect(tok.encode(s), s).toEqual([id]);
      expect(tok.idToToken(id)).toBe(s);
      expect(tok.decode([id])).toBe(s);
    }
    expect(tok.vocabSize).toBe(248077);
    expect(tok.eosTokenIds).toEqual([248044, 248046]);
    expect(tok.encode('\n')).toEqual([198]);
  });

  it('round-trips ASCII and unicode text', () => {
    const texts = [
      'Hello, world! The quick brown fox jumps over the lazy dog.',
      '    def f(x):\n        return x * 2  # comment\n\n',
      "It's 2026; we'll see 1234567 tokens/s?",
      'café naïve résumé — “quotes” 日本語のテキスト 한국어 Ελληνικά 🙂🚀 \t tabs',
      '<|im_start|>user\nhi there<|im_end|>\n',
      '',
    ];
    for (const t of texts) {
      const ids = tok.encode(t);
      expect(ids.every((i) => Number.isInteger(i) && i >= 0 && i < 248077), t).toBe(true);
      expect(tok.decode(ids), t).toBe(t);
    }
    // NFC normalisation: a decomposed "é" encodes like the composed one.
    expect(tok.encode('e\u0301')).toEqual(tok.encode('\u00e9'));
    // Digits split singly (Qwen3.5 pre-tokenizer); English compresses.
    expect(tok.encode('12345').length).toBe(5);
    const english = 'The people of the world think that this is a good time to study the water and the light.';
    expect(tok.encode(english).length).toBeLessThan(english.length / 3);
    expect(tok.decode(tok.encode('<|im_end|>x'), { skipSpecialTokens: true })).toBe('x');
  });

  it('renders the ChatML template (thinking off by default for tiny)', () => {
    const msgs = [{ role: 'user', content: 'Hi!' }];
    expect(tok.applyChatTemplate(msgs, { addGenerationPrompt: true }))
      .toBe('<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    expect(tok.applyChatTemplate(msgs, { addGenerationPrompt: true, enableThinking: true }))
      .toBe('<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n');
    expect(tok.applyChatTemplate([{ role: 'system', content: 'S' }, ...msgs, { role: 'assistant', content: 'A' }], { addGenerationPrompt: false }))
      .toBe('<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n');
    const ids = tok.encode(tok.applyChatTemplate(msgs, { addGenerationPrompt: true, enableThinking: true }));
    expect(ids[0]).toBe(248045);
    expect(ids.slice(-2)).toEqual([248068, 198]);
    expect(ids.filter((i) => i === 248046).length).toBe(1);
  });

  it('thinks by default for 4b/9b-style templates', () => {
    const cfg = synthTokenizerConfig(true);
    const d = tempDir('tok');
    copyFileSync(path.join(dir, 'tokenizer.json'), path.join(d, 'tokenizer.json'));
    writeFileSync(path.join(d, 'tokenizer_config.json'), JSON.stringify(cfg));
    return loadTokenizer(d).then((t) => {
      expect(t.applyChatTemplate([{ role: 'user', content: 'x' }], { addGenerationPrompt: true }).endsWith('<think>\n')).toBe(true);
      expect(t.applyChatTemplate([{ role: 'user', content: 'x' }], { addGenerationPrompt: true, enableThinking: false }).endsWith('</think>\n\n')).toBe(true);
    });
  });

  it('prefers chat_template.jinja when present', async () => {
    const d = tempDir('tok');
    copyFileSync(path.join(dir, 'tokenizer.json'), path.join(d, 'tokenizer.json'));
    copyFileSync(path.join(dir, 'tokenizer_config.json'), path.join(d, 'tokenizer_config.json'));
    writeFileSync(path.join(d, 'chat_template.jinja'), '{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}');
    const t = await loadTokenizer(d);
    expect(t.applyChatTemplate([{ role: 'user', content: 'q' }], { addGenerationPrompt: true })).toBe('[user]q');
  });

  it('missing or broken tokenizer.json is a CheckpointError naming the file', async () => {
    const d = tempDir('tok');
    const file = path.join(d, 'tokenizer.json');
    await expect(loadTokenizer(d)).rejects.toThrow(CheckpointError);
    await expect(loadTokenizer(d)).rejects.toThrow(`${file}: tokenizer.json not found`);
    writeFileSync(file, readFileSync(path.join(dir, 'tokenizer.json'), 'utf8').slice(0, 1000));
    await expect(loadTokenizer(d)).rejects.toThrow(new RegExp(`${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: tokenizer\\.json is not valid JSON`));
    writeFileSync(file, JSON.stringify({ version: '1.0', model: { type: 'BPE' } }));
    await expect(loadTokenizer(d)).rejects.toThrow(/tokenizer\.json has no model\.vocab/);
    rmSync(file);
    expect(statSync(d).isDirectory()).toBe(true);
  });

  it('a small synthetic tokenizer (fewer merges, specials right after the BPE tokens) loads', async () => {
    const small = buildSynthTokenizer(300);
    expect(small.vocabSize).toBe(333);
    expect(small.mergeCount).toBeLessThanOrEqual(44);
    const d = tempDir('tok');
    writeFileSync(path.join(d, 'tokenizer.json'), small.tokenizerJson);
    writeFileSync(path.join(d, 'tokenizer_config.json'), JSON.stringify(synthTokenizerConfig(false, 4096, 300)));
    const t = await loadTokenizer(d);
    expect(t.vocabSize).toBe(333);
    expect(t.tokenToId('<|im_end|>')).toBe(302);
    expect(t.decode(t.encode('Hello world'))).toBe('Hello world');
  });

  it('malformed tokenizer files name the file and the key at fault', async () => {
    const d = tempDir('tok');
    const file = path.join(d, 'tokenizer.json');
    const tcFile = path.join(d, 'tokenizer_config.json');
    const good = JSON.parse(buildSynthTokenizer(300).tokenizerJson) as Record<string, any>;
    const cfg = synthTokenizerConfig(false, 4096, 300);
    const rejects = async (edit: (tok: Record<string, any>, tc: Record<string, any>) => void, re: RegExp) => {
      const tok = structuredClone(good);
      const tc = structuredClone(cfg) as Record<string, any>;
      edit(tok, tc);
      writeFileSync(file, JSON.stringify(tok));
      writeFileSync(tcFile, JSON.stringify(tc));
      const err = await loadTokenizer(d).then(() => null, (e: unknown) => e);
      expect(err, String(re)).toBeInstanceOf(CheckpointError);
      expect((err as Error).message).toMatch(re);
      expect((err as Error).message).not.toContain('\n');
    };
    await rejects((t) => { t.model.merges[0] = ['zz', 'yy']; }, /tokenizer\.json: model\.merges\[0\] \(\["zz", "yy"\]\) uses token "zz", which is not in model\.vocab/);
    await rejects((t) => { t.model.vocab.a = -3; }, /tokenizer\.json: model\.vocab entry "a" has id -3/);
    await rejects((t) => { t.pre_tokenizer.pretokenizers[0].pattern = { Regex: 5 }; }, /pre_tokenizer\.pretokenizers\[0\]\.pattern must be \{"Regex": <string>\}/);
    await rejects((t) => { t.pre_tokenizer.pretokenizers[0].behavior = {}; }, /pre_tokenizer\.pretokenizers\[0\]\.behavior must be a string/);
    await rejects((t) => { t.pre_tokenizer.pretokenizers = 5; }, /pre_tokenizer\.pretokenizers must be an array of stages/);
    await rejects((t) => { t.added_tokens[0].content = ''; }, /added_tokens\[0\] is \{/);
    await rejects((_t, c) => { c.chat_template = '{% for m in messages %}{{ m.content }}'; }, /tokenizer_config\.json: chat template does not parse \(the template ends inside an unclosed block or tag\)/);
    await rejects((_t, c) => { c.chat_template = "{{ raise_exception('no') }}"; }, /tokenizer_config\.json: chat template fails to render \(no\)/);
    await rejects((_t, c) => { c.chat_template = ''; }, /chat template renders no text for a user message/);
    await rejects((_t, c) => { c.chat_template = [null]; }, /chat_template must be a string or a list of \{"name", "template"\} \(got \[null\]\)/);
    await rejects((_t, c) => { c.additional_special_tokens = 5; }, /additional_special_tokens must be an array of token strings/);
  });
});
