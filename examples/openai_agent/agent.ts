// An agent written with the official `openai` npm SDK and nothing else: it asks the model a question and, when the
// reply is not a plain number, points that out and asks again (up to MAX_ATTEMPTS replies). Nothing here knows about
// training: workflow.ts hands it a client on the rollout model, and every call it makes is recorded.
//
//   const client = new OpenAI({ baseURL: 'https://api.openai.com/v1', apiKey: process.env.OPENAI_API_KEY });
//   const answer = await solve(client, 'gpt-4o-mini', '67+42=');
import type OpenAI from 'openai';

export const MAX_ATTEMPTS = 2;
export const REASK = 'Digits only.';

/** Optional sampling settings for every request (the server's defaults otherwise). */
export type Sampling = Pick<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, 'temperature' | 'top_p' | 'seed'>;

const isNumber = (text: string) => /^-?\d+$/.test(text.trim());

/** Asks `question`; returns the first reply that is a number, else the last reply (trimmed). */
export async function solve(client: OpenAI, model: string, question: string, sampling: Sampling = {}): Promise<string> {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: question }];
  let answer = '';
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const completion = await client.chat.completions.create({ model, messages, max_tokens: 8, ...sampling });
    const reply = completion.choices[0]?.message;
    answer = (reply?.content ?? '').trim();
    if (isNumber(answer)) break;
    if (reply) messages.push(reply); // the reply as returned, then the correction
    messages.push({ role: 'user', content: REASK });
  }
  return answer;
}
