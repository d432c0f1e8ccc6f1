// The behaviour checks of `bench diagnose`, as one table: the seed's ids and answers
// (../shared/seeds/serving-diagnostics-report.json; a copy in test/fixtures/), each with the prompt
// this project wrote, the most tokens its answer may take, and its scoring rule (scoring.ts). Every
// request is greedy (temperature 0), thinking off where the server takes chat_template_kwargs.
import type { Json } from './http-client.js';
import { exactAnswer, isEvenAnswer, jsonAnswer, toolCallAnswer, type Scorer } from './scoring.js';

export interface BehaviorCheck {
  id: string;
  /** The user message. */
  prompt: string;
  /** What the scorer accepts, for the report and the summary. */
  expected: string;
  maxTokens: number;
  /** OpenAI `tools` offered with the request. */
  tools?: Json[];
  score: Scorer;
}

export const GET_WEATHER_TOOL: Json = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', description: 'The city name, e.g. Paris' } },
      required: ['city'],
    },
  },
};

export const BEHAVIOR_CHECKS: readonly BehaviorCheck[] = [
  {
    id: 'behavior-arithmetic',
    prompt: 'What is 17 × 23? Reply with the number only: no words, no punctuation.',
    expected: '391', maxTokens: 16, score: exactAnswer('391'),
  },
  {
    id: 'behavior-json',
    prompt: 'Write a JSON object with exactly two keys: "name" with the string value "Ada", and "age" with the number 37. Reply with the JSON object only.',
    expected: '{"name": "Ada", "age": 37}', maxTokens: 32, score: jsonAnswer({ name: 'Ada', age: 37 }),
  },
  {
    id: 'behavior-sort',
    prompt: 'Sort these numbers from smallest to largest and reply with a JSON array only: [5, -2, 8, 0]',
    expected: '[-2, 0, 5, 8]', maxTokens: 32, score: jsonAnswer([-2, 0, 5, 8]),
  },
  {
    id: 'behavior-french',
    prompt: 'Translate the English greeting "hello" into French. Reply with that one word in lowercase, without punctuation.',
    expected: 'bonjour', maxTokens: 16, score: exactAnswer('bonjour'),
  },
  {
    id: 'behavior-spanish',
    prompt: '¿Cuántos días tiene el mes de enero? Responde solo con el número, sin palabras.',
    expected: '31', maxTokens: 16, score: exactAnswer('31'),
  },
  {
    id: 'behavior-japanese',
    prompt: '日本の首都はどこですか。都市名だけを漢字二文字で答えてください。句読点は不要です。',
    expected: '東京', maxTokens: 16, score: exactAnswer('東京'),
  },
  {
    id: 'behavior-python',
    prompt: 'Write a Python function named is_even that takes one integer argument and returns True when it is even and False otherwise. Reply with the code only, no explanation.',
    expected: 'def is_even(n): return n % 2 == 0 (or not n % 2, or n & 1 == 0)', maxTokens: 64,
    score: isEvenAnswer('a Python def is_even(x) whose first return is x % 2 == 0, not x % 2 or x & 1 == 0'),
  },
  {
    id: 'behavior-extract',
    prompt: 'Extract the email address from this sentence and reply with the address only: "Please send the signed draft to Mira at mira@example.org before Friday."',
    expected: 'mira@example.org', maxTokens: 16, score: exactAnswer('mira@example.org'),
  },
  {
    id: 'behavior-reasoning',
    prompt: 'Tom has 3 boxes with 4 apples in each box. He then buys 2 more apples. How many apples does Tom have now? Reply with the number only.',
    expected: '14', maxTokens: 16, score: exactAnswer('14'),
  },
  {
    id: 'behavior-instruction',
    prompt: 'Here is a list of colours: red, green, blue, violet. Ignore every colour except the last one in the list and reply with that colour only, in lowercase, without punctuation.',
    expected: 'violet', maxTokens: 16, score: exactAnswer('violet'),
  },
  {
    id: 'behavior-tool',
    prompt: 'What is the weather like in Oslo right now? Use the get_weather tool.',
    expected: 'tool call get_weather({"city": "Oslo"})', maxTokens: 64, tools: [GET_WEATHER_TOOL],
    score: toolCallAnswer('get_weather', { city: 'Oslo' }),
  },
];
