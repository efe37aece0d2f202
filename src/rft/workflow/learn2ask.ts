// learn2ask_workflow (Trinity-RFT's learn_to_ask example, Learn2AskWorkflow; "Grounded in Reality: Learning and
// Deploying Proactive LLM from Offline Logs"): a doctor model learns to ask the next question of a consultation, or to
// stop with `<stop />` when it knows enough, rewarded against the row's truth with an auxiliary model as the judge.
//
// A row (the example's 2_build_dataset.py output; prompt_key: messages):
//   {"messages": [{"role": "user", "content": "..."}, ...], "decision_truth": "continue" | "stop",
//    "info_truth": "the facts still to ask about, comma separated", "cid": ..., ...}
//
//   messages = [system: the rollout prompt] ++ the row's turns        (train_mode Ra: the prompt without <stop />)
//   action   = "stop" when the response contains <stop />, else "continue"; truth: decision_truth (default continue)
//   a (action score) = 1 when action = truth, else 0 (and then c = f = 0)
//   truth stop:     c = 1, f = 1 when the response is exactly "<stop />", else 0
//   truth continue: the judge (auxiliary_models[0], exactly one configured) reads the dialogue with the response as
//                   the doctor's last turn ("patient: …" / "doctor: …" lines) and info_truth, and answers
//                   <format_score>f</format_score> <content_score>c</content_score>; a call that fails is retried
//                   5 times (waiting 1, 2, … 5 s), then f = c = 0; a missing tag is 0; a tag that is no number fails
//                   the attempt (Trinity's float() raises there too)
//   reward   = train_mode Ra+Rs (default): a · (1 + 2c) + f, or with fusion_mode sum: a + c + f
//              train_mode Ra: 2c + f;   any other train_mode (Rs): 3a + f
//
// The rollout and judge instructions are this backend's wording of the example's (the same rules, tags and scores).
// The taskset's default_reward_fn_type is not read: the reward is the workflow's own, as in Trinity.
import type { ChatMessage } from '../../tokenizer/index.js';
import type { AuxiliaryModel } from '../auxiliary/types.js';
import { askJudge, type JudgeMessage } from '../reward/judge-call.js';
import type { Task } from '../task.js';
import { promptMessages, sampleResponses } from './single-turn.js';
import type { WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

const NAME = 'learn2ask_workflow';

const ROLLOUT_RULES = `# Task
You are a medical assistant continuing a consultation with a patient, in English. Read the conversation so far and ask the next question.

## Rules
- Ask exactly one short, clear medical question and offer 2 or 3 possible answers.
- Never repeat a question already asked.
- Write a single sentence.
`;

/** The rollout system prompt; train_mode Ra (no decision reward) leaves out the stop rule. */
export const rolloutPrompt = (trainMode: string): string =>
  trainMode === 'Ra'
    ? ROLLOUT_RULES
    : `${ROLLOUT_RULES}- When you know enough to suggest a medication, reply with exactly: <stop />\n`;

/** The judge's system prompt for the facts still to ask about (`info`). */
export const judgePrompt = (info: string): string => `# Task
You grade the doctor's last message in a doctor-patient dialogue, which the user turn holds.

# Scores
## format_score
- 1.0: the last message asks exactly one question.
- 0.5: it asks two questions.
- 0.0: it asks three or more.
## content_score
- 1.0: its question asks directly about an item of the reference information.
- 0.5: its question is closely related to an item of the reference information without asking about it.
- 0.0: its question is unrelated to all of it.

# Reference information
${info}

# Answer format
Reply with exactly these three tags and nothing else:
<think>your reasoning, briefly</think>
<format_score>the format score as a number, e.g. 1.0</format_score>
<content_score>the content score as a number, e.g. 0.5</content_score>
Judge only the doctor's last message, against the reference information alone.
`;

/** The judge's reply budget (the example gives its judge 1024 response tokens), bounded by the judge's context. */
const JUDGE_MAX_TOKENS = 1024;
const JUDGE_RETRIES = 5;

/** `<tag>value</tag>` pairs of one line each (Trinity's parse_tag_string: no match across lines); the last wins. */
export function parseTags(text: string): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const [, tag, value] of text.matchAll(/<(\w+)>(.*?)<\/\1>/g)) tags[tag as string] = value as string;
  return tags;
}

/** Python's float() of a score tag; an error naming the tag when it is no number. */
function pythonFloat(text: string | undefined, tag: string): number {
  if (text === undefined) return 0;
  const t = text.trim();
  if (/^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/.test(t)) return Number(t);
  if (/^[+-]?(?:inf|infinity|nan)$/i.test(t))
    return t.toLowerCase().includes('nan') ? Number.NaN : t.startsWith('-') ? -Infinity : Infinity;
  throw new Error(`${NAME}: the judge's <${tag}> is not a number: ${JSON.stringify(text)}`);
}

/** The dialogue as the judge reads it: "patient: …" and "doctor: …" lines. */
export function dialogueText(turns: readonly { role: string; content: string }[]): string {
  return turns
    .map((t) => (t.role === 'user' ? `patient: ${t.content}\n` : t.role === 'assistant' ? `doctor: ${t.content}\n` : ''))
    .join('');
}

export interface Learn2AskJudge {
  judge: AuxiliaryModel;
  signal?: AbortSignal;
  /** Waits between retries of a failed judge call (default: real time, 1 s · retry). */
  wait?: (ms: number) => Promise<void>;
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });

/** The judge's format and content scores of `response` as the doctor's next turn (see the header). */
async function judgeScores(
  turns: readonly ChatMessage[],
  response: string,
  info: string,
  { judge, signal, wait }: Learn2AskJudge,
): Promise<{ format: number; content: number }> {
  const messages: JudgeMessage[] = [
    { role: 'system', content: judgePrompt(info) },
    { role: 'user', content: dialogueText([...turns, { role: 'assistant', content: response }]) },
  ];
  for (let retry = 0; ; retry++) {
    let answer: string;
    try {
      answer = await askJudge(
        judge,
        messages,
        { maxTokens: JUDGE_MAX_TOKENS, temperature: 1, ...(signal ? { signal } : {}) },
        NAME,
      );
    } catch (error) {
      if (signal?.aborted) throw error;
      if (retry >= JUDGE_RETRIES) return { format: 0, content: 0 };
      await (wait ?? ((ms) => sleep(ms, signal)))((retry + 1) * 1000);
      continue;
    }
    const tags = parseTags(answer);
    return { format: pythonFloat(tags.format_score, 'format_score'), content: pythonFloat(tags.content_score, 'content_score') };
  }
}

/** The reward of one response (see the header); `turns` are the row's conversation without the system prompt. */
export async function learn2askReward(
  response: string,
  task: Task,
  turns: readonly ChatMessage[],
  judge: Learn2AskJudge,
): Promise<{ reward: number; metrics: Record<string, number> }> {
  const trainMode = String(task.workflowArgs?.train_mode ?? 'Ra+Rs');
  const fusionMode = String(task.workflowArgs?.fusion_mode ?? 'default');
  const truth = task.raw.decision_truth ?? 'continue';
  const info = task.raw.info_truth ?? 'None';
  const action = response.includes('<stop />') ? 'stop' : 'continue';
  let a = 0;
  let f = 0;
  let c = 0;
  if (action === truth) {
    a = 1;
    if (truth === 'continue') ({ format: f, content: c } = await judgeScores(turns, response, String(info), judge));
    else [c, f] = [1, response === '<stop />' ? 1 : 0];
  }
  const reward =
    trainMode === 'Ra+Rs' ? (fusionMode !== 'sum' ? a * (1 + 2 * c) + f : a + c + f) : trainMode === 'Ra' ? 2 * c + f : a * 3 + f;
  return { reward, metrics: { action_score: a, content_score: c, format_score: f } };
}

export const learn2askWorkflow: WorkflowSpec = {
  repeatable: true,
  workflowArgs: ['train_mode', 'fusion_mode'],
  description: "learn_to_ask's doctor: ask the next question or <stop />, rewarded by the decision and a judge",
  run: async (context) => {
    const { task, model, auxiliaryModels, signal } = context;
    if (auxiliaryModels.list.length !== 1)
      throw new Error(
        `${NAME} needs exactly one model in explorer.auxiliary_models (the judge), and this run has ${auxiliaryModels.list.length}`,
      );
    const judge = auxiliaryModels.list[0] as AuxiliaryModel;
    const trainMode = String(task.workflowArgs?.train_mode ?? 'Ra+Rs');
    // the row's turns as they are after the rollout prompt (the taskset's format.system_prompt is not read, as in Trinity)
    const { systemPrompt: _, ...row } = task;
    const turns = promptMessages(row, undefined, NAME);
    const messages: ChatMessage[] = [{ role: 'system', content: rolloutPrompt(trainMode) }, ...turns];
    const { completions, responses } = await sampleResponses(context, messages, NAME);
    return Promise.all(
      completions.map(async (completion, i) => {
        const response = responses[i] as string;
        const { reward, metrics } = await learn2askReward(response, task, turns, { judge, signal });
        return model.toExperience(completion, {
          reward,
          metrics,
          responseText: response,
          messages: [...messages.map((m) => ({ ...m })), { role: 'assistant', content: response }],
        });
      }),
    );
  },
};

WORKFLOWS.register(NAME, learn2askWorkflow);
