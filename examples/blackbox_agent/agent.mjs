#!/usr/bin/env node
// A stand-alone agent: a plain Node script with the official `openai` npm client and nothing else. It knows nothing
// about training; pointed at api.openai.com it runs as is:
//
//   OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-... node agent.mjs "67+42=" --model gpt-4o-mini
//
// It asks the question; when the reply is not a plain number it says "Digits only." and asks again (at most two
// replies). The last line it prints on stdout is its answer. Options: --model <name> (default "default"),
// --temperature <τ>, --seed <n>, --max-tokens <n> (default 8). The client reads OPENAI_BASE_URL and OPENAI_API_KEY
// from the environment, as every `openai` program does.
import OpenAI from 'openai';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    model: { type: 'string', default: 'default' },
    temperature: { type: 'string' },
    seed: { type: 'string' },
    'max-tokens': { type: 'string', default: '8' },
  },
});
const question = positionals[0];
if (question === undefined) {
  console.error('usage: node agent.mjs <question> [--model name] [--temperature t] [--seed n] [--max-tokens n]');
  process.exit(2);
}

const client = new OpenAI({ maxRetries: 0 }); // a retried call would be answered (and recorded) twice
const sampling = {
  max_tokens: Number(values['max-tokens']),
  ...(values.temperature !== undefined ? { temperature: Number(values.temperature) } : {}),
  ...(values.seed !== undefined ? { seed: Number(values.seed) } : {}),
};
const messages = [{ role: 'user', content: question }];
let answer = '';
for (let attempt = 0; attempt < 2; attempt++) {
  const completion = await client.chat.completions.create({ model: values.model, messages, ...sampling });
  const reply = completion.choices[0]?.message;
  answer = (reply?.content ?? '').trim();
  if (/^-?\d+$/.test(answer)) break;
  if (reply) messages.push(reply); // the reply as returned, then the correction
  messages.push({ role: 'user', content: 'Digits only.' });
}
console.log(answer);
