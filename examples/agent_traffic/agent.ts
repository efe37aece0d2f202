// An agent written with the official `openai` npm client, trained on its own traffic: it asks the served model
// addition questions, scores each reply, and reports the score to the serving side's POST /feedback. Nothing in it
// is specific to training but the feedback call (and the base URL): pointed at another OpenAI-compatible server it
// runs as is.
//
// Each round asks `questions` questions `group` times each (n=1 calls), and the replies to one question in one round
// share a task_id in their feedback: GRPO compares them with each other (a group). The reward is the share of the
// reply's characters that are digits ("answer with a number"): a random model scores low, and training on the agent's
// traffic raises it. After a round the agent waits until the served weights have been trained on it (the serving
// side's GET /v1/trinity/status), so round r is answered by the weights of r - 1 training steps.
//
//   node --import tsx examples/agent_traffic/agent.ts [--base-url http://127.0.0.1:8010/v1] [--rounds 16]
//     [--questions 4] [--group 8] [--seed 0]                                  (the API key: $TRINITY_API_KEY)
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';

/** The share of `reply`'s characters that are digits (0 for an empty reply). */
export function digitShare(reply: string): number {
  const chars = [...reply.trim()];
  return chars.length === 0 ? 0 : chars.filter((c) => c >= '0' && c <= '9').length / chars.length;
}

/** The question of `round`'s `index`-th slot: a two-digit addition (its operands fixed by the seed). */
export function question(seed: number, round: number, index: number): string {
  const x = (seed * 7919 + round * 104_729 + index * 1299) % 10_000;
  return `${10 + (x % 90)}+${10 + (Math.floor(x / 90) % 90)}=`;
}

export interface AgentOptions {
  baseURL: string;
  apiKey: string | null;
  rounds: number;
  questions: number;
  group: number;
  seed: number;
  log?: (line: string) => void;
}

/** What a round measured: its mean reward and the weights version that answered it. */
export interface RoundResult {
  round: number;
  modelVersion: number;
  meanReward: number;
}

/** Runs the rounds (see the header); returns each round's mean reward. */
export async function runAgent(options: AgentOptions): Promise<RoundResult[]> {
  const apiKey = options.apiKey ?? 'none';
  const client = new OpenAI({ baseURL: options.baseURL, apiKey, maxRetries: 0 });
  const server = options.baseURL.replace(/\/v1\/?$/, '');
  const headers = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };
  const status = async () =>
    (await (await fetch(`${server}/v1/trinity/status`, { headers })).json()) as { model_version: number };
  const feedback = async (body: Record<string, unknown>) => {
    const res = await fetch(`${server}/feedback`, { method: 'POST', headers, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`POST /feedback: HTTP ${res.status} ${await res.text()}`);
  };
  const results: RoundResult[] = [];
  const startVersion = (await status()).model_version;
  for (let round = 1; round <= options.rounds; round++) {
    const modelVersion = (await status()).model_version;
    const rewards = await Promise.all(
      Array.from({ length: options.questions }, async (_, q) => {
        const content = question(options.seed, round, q);
        const replies = await Promise.all(
          Array.from({ length: options.group }, () =>
            client.chat.completions.create({ model: 'addition-agent', messages: [{ role: 'user', content }], temperature: 1 }),
          ),
        );
        const taskId = `round${round}-q${q}`;
        return Promise.all(
          replies.map(async (reply, run) => {
            const reward = digitShare(reply.choices[0]?.message.content ?? '');
            await feedback({ response_id: reply.id, reward, task_id: taskId, run_id: run });
            return reward;
          }),
        );
      }),
    );
    const all = rewards.flat();
    const meanReward = all.reduce((a, b) => a + b, 0) / all.length;
    results.push({ round, modelVersion, meanReward });
    options.log?.(`round ${round}: weights version ${modelVersion}, mean reward ${meanReward.toFixed(3)}`);
    // the next round waits for weights trained on this one (one train step per round: train_batch_size = a round)
    if (round < options.rounds) await waitForVersion(async () => (await status()).model_version, startVersion + round);
  }
  return results;
}

/** Resolves once the served weights are `version` or later, asking every half second (the serving side has no push for
 * new weights); throws after `timeoutMs` (the train side stopped, or never started). */
async function waitForVersion(served: () => Promise<number>, version: number, timeoutMs = 900_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let current = await served();
  while (current < version) {
    if (Date.now() > deadline)
      throw new Error(
        `waited ${timeoutMs / 1000} s for weights version ${version}, still serving version ${current}: is the train side running?`,
      );
    await new Promise((resolve) => setTimeout(resolve, 500));
    current = await served();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'base-url': { type: 'string', default: 'http://127.0.0.1:8010/v1' },
      rounds: { type: 'string', default: '16' },
      questions: { type: 'string', default: '4' },
      group: { type: 'string', default: '8' },
      seed: { type: 'string', default: '0' },
    },
  });
  const whole = (name: 'rounds' | 'questions' | 'group' | 'seed') => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < (name === 'seed' ? 0 : 1))
      throw new Error(`--${name}: expected a whole number, got ${values[name]}`);
    return n;
  };
  const results = await runAgent({
    baseURL: values['base-url'] as string,
    apiKey: process.env.TRINITY_API_KEY ?? null,
    rounds: whole('rounds'),
    questions: whole('questions'),
    group: whole('group'),
    seed: whole('seed'),
    log: (line) => console.log(line),
  });
  const first = results[0];
  const last = results.at(-1);
  if (first && last)
    console.log(`mean reward: ${first.meanReward.toFixed(3)} (round 1) → ${last.meanReward.toFixed(3)} (round ${last.round})`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
