// Mutations of the tokenizer files: tokenizer.json (vocab ids, merges, model type, added tokens,
// pipeline stages and their regexes) and tokenizer_config.json / chat_template.jinja (broken Jinja,
// wrong types of the template and the special tokens), plus JSON damage.
import { BAD_UTF8, insertBytes } from './bytes.js';
import type { BaseDir } from './base.js';
import { buf, fromMutated, genericChange, json, jsonChange, type Change } from './change.js';
import { allPaths, BAD_VALUES, badValueAt, mutateJsonDoc, mutateJsonText, renderWith, renderWithout, type JsonPath } from './json-mutations.js';
import type { CaseRng } from './random.js';

export function tokenizerChange(dir: BaseDir, rng: CaseRng): Change {
  const file = 'tokenizer.json';
  const bytes = dir.files.get(file)!;
  const doc = json(bytes) as { model: { vocab: Record<string, number>; merges: unknown[] }; added_tokens: unknown[] };
  const tokens = Object.keys(doc.model.vocab);
  const family = rng.weighted([
    ['vocab-id', 2], ['vocab-delete', 1], ['vocab', 1], ['merges', 2], ['model-type', 1], ['added-tokens', 2], ['pipeline', 2],
    ['json-doc', 2], ['json-text', 2], ['generic', 1],
  ] as const);
  const out = (desc: string, t: string): Change => ({ family, desc, file, bytes: buf(t) });
  switch (family) {
    case 'vocab-id': {
      const tok = rng.pick(tokens);
      const other = rng.pick(tokens);
      const [what, raw] = rng.pick([
        ...BAD_VALUES,
        [`the id of ${JSON.stringify(other)} (a duplicate id)`, String(doc.model.vocab[other])],
        ['512 (outside the model vocabulary)', '512'], ['5000', '5000'], ['2^31 - 1', '2147483647'],
      ] as const);
      return out(`model.vocab[${JSON.stringify(tok)}] set to ${what}`, renderWith(doc, ['model', 'vocab', tok], raw, 0));
    }
    case 'vocab-delete': {
      // The byte symbols and early merges are what the probe text and prompts need.
      const tok = rng.chance(0.5) ? rng.pick(tokens.slice(0, 300)) : rng.pick(tokens);
      return out(`model.vocab entry ${JSON.stringify(tok)} removed`, renderWithout(doc, ['model', 'vocab', tok], 0));
    }
    case 'vocab': {
      if (rng.chance(0.2)) return out('model.vocab removed', renderWithout(doc, ['model', 'vocab'], 0));
      const [what, raw] = rng.pick(BAD_VALUES);
      return out(`model.vocab set to ${what}`, renderWith(doc, ['model', 'vocab'], raw, 0));
    }
    case 'merges': {
      const merges = doc.model.merges;
      if (rng.chance(0.25)) {
        if (rng.chance(0.3)) return out('model.merges removed', renderWithout(doc, ['model', 'merges'], 0));
        const [what, raw] = rng.pick(BAD_VALUES);
        return out(`model.merges set to ${what}`, renderWith(doc, ['model', 'merges'], raw, 0));
      }
      const i = rng.int(merges.length);
      const [what, raw] = rng.pick([
        ...BAD_VALUES,
        ['a merge of unknown tokens', '["zz", "yy"]'], ['a one-token merge', '["a"]'], ['three tokens', '["a", "b", "c"]'],
        ['numbers', '[1, 2]'], ['the old string format', '"a b"'], ['a string without a space', '"ab"'],
      ] as const);
      return out(`model.merges[${i}] set to ${what}`, renderWith(doc, ['model', 'merges', i], raw, 0));
    }
    case 'model-type': {
      if (rng.chance(0.2)) return out('model.type removed', renderWithout(doc, ['model', 'type'], 0));
      const [what, raw] = rng.pick([['"WordPiece"', '"WordPiece"'], ['"Unigram"', '"Unigram"'], ['"bpe"', '"bpe"'], ['5', '5'], ['null', 'null']] as const);
      return out(`model.type set to ${what}`, renderWith(doc, ['model', 'type'], raw, 0));
    }
    case 'added-tokens': {
      if (rng.chance(0.2)) {
        const [what, raw] = rng.pick(BAD_VALUES);
        return out(`added_tokens set to ${what}`, renderWith(doc, ['added_tokens'], raw, 0));
      }
      const i = rng.int(doc.added_tokens.length);
      const key = rng.pick(['id', 'content', 'special', 'normalized', 'lstrip', 'rstrip']);
      if (rng.chance(0.2)) return out(`added_tokens[${i}].${key} removed`, renderWithout(doc, ['added_tokens', i, key], 0));
      const [what, raw] = rng.pick([...BAD_VALUES, ['"a"', '"a"'], ['"Hello"', '"Hello"']] as const);
      return out(`added_tokens[${i}].${key} set to ${what}`, renderWith(doc, ['added_tokens', i, key], raw, 0));
    }
    case 'pipeline': {
      const stage = rng.pick(['normalizer', 'pre_tokenizer', 'post_processor', 'decoder']);
      const choice = rng.pick(['value', 'unknown-type', 'regex', 'pretokenizers'] as const);
      if (choice === 'regex' || (choice === 'pretokenizers' && stage === 'pre_tokenizer')) {
        if (choice === 'pretokenizers') {
          const [what, raw] = rng.pick(BAD_VALUES);
          return out(`pre_tokenizer.pretokenizers set to ${what}`, renderWith(doc, ['pre_tokenizer', 'pretokenizers'], raw, 0));
        }
        const [what, raw] = rng.pick([['"("', '"("'], ['"["', '"["'], ['"\\\\"', '"\\\\"'], ['5', '5'], ['"(a+)+b"', '"(a+)+b"'], ['""', '""'], ['"\\\\p{Nope}"', '"\\\\p{Nope}"']] as const);
        return out(`pre_tokenizer.pretokenizers[0].pattern.Regex set to ${what}`, renderWith(doc, ['pre_tokenizer', 'pretokenizers', 0, 'pattern', 'Regex'], raw, 0));
      }
      const [what, raw] = choice === 'unknown-type' ? ['{"type": "Nope"}', '{"type": "Nope"}'] as const : rng.pick(BAD_VALUES);
      return out(`${stage} set to ${what}`, renderWith(doc, [stage], raw, 0));
    }
    case 'json-doc': {
      // Aim at the small parts of the document as often as at the vocabulary.
      const paths = allPaths(doc).filter((p) => p[0] !== 'model' || p[1] !== 'vocab' || rng.chance(0.05));
      const m = mutateJsonDoc(doc, rng, 0, paths);
      return out(m.desc, m.text);
    }
    case 'json-text': return { ...fromMutated(family, file, mutateJsonText(bytes, rng)) };
    case 'generic': return genericChange(file, bytes, rng);
  }
}


const BAD_TEMPLATES: readonly string[] = [
  '{% if %}',
  '{{ messages[0].content',
  '{% for m in messages %}{{ m.content }}',
  '{{ messages | no_such_filter }}',
  "{{ raise_exception('this template refuses') }}",
  '{{ 1 / 0 }}',
  '{% macro %}{% endmacro %}',
  '{{ messages.foo.bar() }}',
  '{% set x = %}',
  '{{ "unterminated }}',
  '{% endfor %}',
  '{{ undefined_function() }}',
  '{% for m in 5 %}{{ m }}{% endfor %}',
  '{{ messages[99].content }}',
  '{{ messages[0]["content"][0:5] }}',
  '',
  '{{ ' + '('.repeat(10_000) + '1' + ')'.repeat(10_000) + ' }}',
  '{% if true %}'.repeat(2000) + '{% endif %}'.repeat(2000),
];

export function tokenizerConfigChange(dir: BaseDir, rng: CaseRng): Change {
  const file = 'tokenizer_config.json';
  const bytes = dir.files.get(file)!;
  const doc = json(bytes) as Record<string, unknown>;
  const family = rng.weighted([
    ['chat-template', 4], ['template-list', 1], ['jinja-file', 1], ['special-tokens', 2], ['flags', 1], ['json-doc', 2], ['json-text', 2], ['generic', 1],
  ] as const);
  const out = (desc: string, t: string): Change => ({ family, desc, file, bytes: buf(t) });
  switch (family) {
    case 'chat-template': {
      if (rng.chance(0.3)) return badValueAtChange(family, file, doc, [['chat_template']], rng);
      const t = rng.pick(BAD_TEMPLATES);
      return out(`chat_template set to ${JSON.stringify(t.length > 60 ? `${t.slice(0, 60)}...` : t)}`, renderWith(doc, ['chat_template'], JSON.stringify(t), 2));
    }
    case 'template-list': {
      const tpl = doc.chat_template as string;
      const [what, raw] = rng.pick([
        ['[]', '[]'], ['[{}]', '[{}]'], ['[null]', '[null]'], ['[{"name": "default"}]', '[{"name": "default"}]'],
        ['[{"template": 5}]', '[{"template": 5}]'], ['[{"name": 5, "template": "x"}]', '[{"name": 5, "template": "x"}]'],
        ['a valid named list', JSON.stringify([{ name: 'tool_use', template: '{{ messages }}' }, { name: 'default', template: tpl }])],
        ['[a bad template]', JSON.stringify([{ name: 'default', template: '{% if %}' }])],
      ] as const);
      return out(`chat_template set to ${what}`, renderWith(doc, ['chat_template'], raw, 2));
    }
    case 'jinja-file': {
      const choice = rng.pick(['bad', 'non-utf8', 'valid', 'empty'] as const);
      if (choice === 'non-utf8') {
        const [what, seq] = rng.pick(BAD_UTF8);
        const m = insertBytes(buf(doc.chat_template as string), 10, Uint8Array.from(seq), what);
        return { family, desc: `chat_template.jinja added, ${m.desc}`, file: 'chat_template.jinja', bytes: m.bytes };
      }
      const t = choice === 'bad' ? rng.pick(BAD_TEMPLATES) : choice === 'empty' ? '' : '{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}';
      return { family, desc: `chat_template.jinja added (${choice}): ${JSON.stringify(t.slice(0, 60))}`, file: 'chat_template.jinja', bytes: buf(t) };
    }
    case 'special-tokens': {
      const key = rng.pick(['eos_token', 'bos_token', 'pad_token', 'unk_token', 'additional_special_tokens']);
      const [what, raw] = rng.pick([...BAD_VALUES, ['{"content": 5}', '{"content": 5}'], ['[5]', '[5]'], ['"<|no_such_token|>"', '"<|no_such_token|>"']] as const);
      return out(`${key} set to ${what}`, renderWith(doc, [key], raw, 2));
    }
    case 'flags': {
      const key = rng.pick(['clean_up_tokenization_spaces', 'remove_space', 'do_lowercase_and_remove_accent', 'model_max_length', 'add_bos_token']);
      const [what, raw] = rng.pick(BAD_VALUES);
      return out(`${key} set to ${what}`, renderWith(doc, [key], raw, 2));
    }
    case 'json-doc':
    case 'json-text': return { ...jsonChange(file, bytes, rng, 2), family };
    case 'generic': return genericChange(file, bytes, rng);
  }
}

function badValueAtChange(family: string, file: string, doc: unknown, paths: JsonPath[], rng: CaseRng): Change {
  const m = badValueAt(doc, paths, rng, 2);
  return { family, desc: m.desc, file, bytes: buf(m.text) };
}
