// Single-turn workflows (Trinity-RFT's SimpleWorkflow family): one prompt, repeatTimes sampled answers in one call,
// each scored by a reward function.
//
//   prompt ids = chat_template([system?, user], tools?, add_generation_prompt) ++ encode(reply_prefix)
//                (tools: the task's tools_key column, rendered by the model's template)
//                (over model.max_prompt_tokens: its bounded head, and the n responses are masked placeholders,
//                ./prompt-truncation.ts; image content parts (format.image_key): each image's placeholder run
//                expanded to its token count, the images passed with the ids, bounded by max_model_len as chat() is;
//                the messages go along for an OpenAI-compatible server, which takes images only inside a chat: it
//                refuses them after a reply prefix)
//   responses  = generate(prompt ids, n = repeatTimes, seed, task.rolloutArgs)
//   reward     = rewardFn(reply_prefix + response text, task)          (the prefix is part of the answer's format)
//                a group reward (ruler_reward) scores the n responses of the task in one call instead
//                (../reward/types.ts); rewards reach the run's auxiliary models (judges), the attempt's signal and
//                the prompt messages (a trajectory judge reads them)
//
//   simple_workflow      reward from the task's reward_fn (no default: a task without one is an error)
//   math_workflow        <think>…</think><answer>…</answer> system prompt; default reward math_reward
//   math_boxed_workflow  \boxed{} system prompt; default reward math_boxed_reward, workflow_args with_think and
//                        format_score_coef passed on to it; use_base: true prompts a base model with plain text instead
//                        of the chat template (Trinity-RFT's format):
//                          "System:" + system + "\nUser:\n" + prompt + "\nAssistant:\n"   ("User:\n…" with no system)
//   The reward also gets each response's generated token count (math_dapo_reward's overlong penalty reads it).
import type { Completion, GenerateOptions } from '../../engine/index.js';
import { chatImages, expandImagePads, hasImageParts } from '../../engine/vision-chat.js';
import type { ChatMessage } from '../../tokenizer/index.js';
import { snakeToCamel } from '../../util/module-args.js';
import type { ChatTurn } from '../experience.js';
import { REWARD_FUNCTIONS, type RewardRegistry, type ScoredResponse, scoreResponses } from '../reward/registry.js';
import type { Task } from '../task.js';
import { limitedPromptIds, overPromptLimit } from './prompt-truncation.js';
import type { WorkflowContext, WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

export const MATH_SYSTEM_PROMPT =
  'You are a helpful assistant that solves math problems. First think about the reasoning process, then give the ' +
  'answer. Write the reasoning inside <think> </think> and only the final answer inside <answer> </answer>, e.g. ' +
  '<think> reasoning here </think> <answer> 42 </answer>.';

export const MATH_BOXED_SYSTEM_PROMPT =
  'You are a helpful assistant that solves math problems. Reason step by step, then put the final answer in \\boxed{}.';

export const MATH_BOXED_THINK_SYSTEM_PROMPT =
  'You are a helpful assistant that solves math problems. Reason step by step inside <think> </think>, then put the ' +
  'final answer in \\boxed{}.';

export interface SingleTurnOptions {
  /** Used when the task has no system prompt. */
  systemPrompt?: string | ((task: Task) => string | undefined);
  /** Used when the task names no reward_fn; without one a task must name it. */
  defaultRewardFn?: string;
  /** reward_fn_args for defaultRewardFn (a judge's prompt and verdict form); the task's reward_fn_args override them. */
  defaultRewardArgs?: Readonly<Record<string, unknown>>;
  /** Extra reward arguments from the task's workflow_args (keys copied when present). */
  rewardArgsFromWorkflowArgs?: readonly string[];
  rewards?: RewardRegistry;
  /** Folder that relative reward module paths resolve against. */
  baseDir?: string;
  /** workflow_args.use_base is read: true renders the prompt as basePrompt() does rather than by the chat template. */
  basePromptArg?: boolean;
}

/** Trinity-RFT's plain-text prompt for a base model (no chat template): see the header. */
export function basePrompt(messages: readonly ChatMessage[], who: string): string {
  const system = messages[0]?.role === 'system' ? messages[0] : undefined;
  const turns = system === undefined ? messages : messages.slice(1);
  if (turns.length !== 1 || turns[0]?.role !== 'user')
    throw new Error(`${who}: workflow_args.use_base needs one user prompt (and a system prompt), not a list of messages`);
  const user = `User:\n${turns[0].content}\nAssistant:\n`;
  return system?.content ? `System:${system.content}\n${user}` : user;
}

/** A single-turn workflow with the given defaults; see the header. */
export function singleTurnWorkflow(name: string, options: SingleTurnOptions = {}): WorkflowSpec {
  const rewards = options.rewards ?? REWARD_FUNCTIONS;
  return {
    repeatable: true,
    workflowArgs: [...(options.rewardArgsFromWorkflowArgs ?? []), ...(options.basePromptArg ? ['use_base'] : [])],
    description: `single-turn: chat template + reply prefix, n samples, reward ${options.defaultRewardFn ?? "from the task's reward_fn"}`,
    run: async (context: WorkflowContext) => {
      const { task, model, signal, auxiliaryModels } = context;
      const rewardName = task.rewardFn ?? options.defaultRewardFn;
      if (rewardName === undefined)
        throw new Error(`${name}: task ${task.id} names no reward function (set the taskset's default_reward_fn_type)`);
      const rewardFn = await rewards.resolve(rewardName, options.baseDir ?? context.baseDir);
      const rewardArgs: Record<string, unknown> = {
        ...(rewardName === options.defaultRewardFn ? options.defaultRewardArgs : {}),
        ...task.rewardFnArgs,
      };
      for (const key of options.rewardArgsFromWorkflowArgs ?? []) {
        if (task.workflowArgs?.[key] !== undefined) rewardArgs[key] = task.workflowArgs[key];
      }

      const messages = promptMessages(
        task,
        typeof options.systemPrompt === 'function' ? options.systemPrompt(task) : options.systemPrompt,
        name,
      );
      const useBase = options.basePromptArg === true && task.workflowArgs?.use_base === true;
      const { completions, responses } = await sampleResponses(context, messages, name, {
        ...(useBase ? { text: basePrompt(messages, name) } : {}),
        ...(task.tools ? { tools: task.tools } : {}),
      });

      // All responses of the task are scored together: a group reward (RULER) sees them in one call, a per-response
      // reward is called once per response.
      const scored = await scoreResponses(
        rewardFn,
        {
          responses,
          responseTokens: completions.map((completion) => completion.tokenIds.length),
          task,
          args: rewardArgs,
          conversation: messages,
          signal,
          auxiliaryModels,
        },
        `reward function '${rewardName}'`,
      );
      const experiences = completions.map((completion, i) => {
        const response = responses[i] as string;
        const { reward, metrics } = scored[i] as ScoredResponse;
        const transcript: ChatTurn[] = [...messages.map((m) => ({ ...m })), { role: 'assistant', content: response }];
        return model.toExperience(completion, { reward, metrics, responseText: response, messages: transcript });
      });
      return experiences;
    },
  };
}

/**
 * The responses of one prompt (the header's first two lines): `messages` rendered by the chat template (with `tools`),
 * or `text` as it is; bounded by model.max_prompt_tokens; the reply prefix (default the task's) appended to the prompt
 * and to each response's text; n samples (default repeatTimes) from `seed` (default the run's). Single-turn ports of
 * Trinity's workflows (toolcall, learn2ask, the trainable ruler's policy and judge) sample through it too.
 */
export async function sampleResponses(
  { task, model, repeatTimes, seed }: Pick<WorkflowContext, 'task' | 'model' | 'repeatTimes' | 'seed'>,
  messages: readonly ChatMessage[],
  name: string,
  options: { text?: string; tools?: Task['tools']; n?: number; seed?: number; prefix?: string } = {},
): Promise<{ completions: Completion[]; responses: string[] }> {
  const tokenizer = model.tokenizer;
  if (tokenizer === null) throw new Error(`${name}: the rollout model has no tokenizer (chat template needed)`);
  const prefix = options.prefix ?? task.replyPrefix ?? '';
  const limit = model.promptLimit ?? null;
  const chatText =
    options.text ??
    tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true, ...(options.tools ? { tools: options.tools } : {}) });
  // image parts (a vision-language model): each image's placeholder run expanded to its token count, and the prompt
  // bounded by max_model_len as chat() bounds one (its length is known only once the images are decoded)
  if (options.text !== undefined && hasImageParts(messages))
    throw new Error(`${name}: task ${task.id} has images (format.image_key), which a plain-text prompt (use_base) cannot hold`);
  const images = options.text === undefined && hasImageParts(messages) ? await chatImages(messages, model.vision) : null;
  // a prompt over the limit is only ever needed up to its head: the rest of a huge one is never tokenized
  const chatIds = images
    ? expandImagePads(tokenizer.encode(chatText), images.imageTokenId, images.tokenCounts).ids
    : limit
      ? limitedPromptIds(tokenizer, chatText, limit)
      : tokenizer.encode(chatText);
  const over = limit && !images ? limit.truncate && overPromptLimit(chatIds, limit) : false;
  const promptIds = prefix && !over ? [...chatIds, ...tokenizer.encode(prefix)] : chatIds;
  // an image prompt carries the chat it was rendered from (an OpenAI-compatible server takes images only in chats;
  // a reply prefix after the chat prompt is not a chat: such a server refuses it)
  const renderedFrom = { messages, ...(options.tools ? { tools: options.tools } : {}) };
  const result = await model.generate({
    ...rolloutOptions(task.rolloutArgs ?? {}, name),
    promptIds,
    ...(images ? { images: images.decoded, ...(promptIds === chatIds ? { renderedFrom } : {}) } : {}),
    n: options.n ?? repeatTimes,
    seed: options.seed ?? seed,
  });
  const responses = result.completions.map(
    (completion) => prefix + (completion.text ?? tokenizer.decode(completion.tokenIds, { skipSpecialTokens: true })),
  );
  return { completions: result.completions, responses };
}

/** [system?, user] from the task's prompt, or the task's own messages (its system prompt first when it has none). */
export function promptMessages(task: Task, defaultSystemPrompt: string | undefined, who: string): ChatMessage[] {
  const system = task.systemPrompt ?? defaultSystemPrompt;
  if (task.messages !== undefined && task.messages.length > 0) {
    const turns = task.messages.map((turn) => ({ ...turn }) as ChatMessage);
    return system !== undefined && turns[0]?.role !== 'system' ? [{ role: 'system', content: system }, ...turns] : turns;
  }
  if (typeof task.prompt !== 'string') throw new Error(`${who}: task ${task.id} has no prompt (the taskset's prompt_key)`);
  return [
    ...(system !== undefined ? [{ role: 'system' as const, content: system }] : []),
    { role: 'user', content: task.prompt },
  ];
}

const NUMERIC_ROLLOUT_ARGS = new Set(['temperature', 'topP', 'topK', 'minP', 'maxTokens']);
/** Keys Trinity-RFT's rollout args may carry that do not apply here (logprobs are always returned; n is repeatTimes). */
const IGNORED_ROLLOUT_ARGS = new Set(['logprobs', 'n']);

/** Generation options from a task's rollout_args (snake_case or camelCase); unknown keys are errors. */
export function rolloutOptions(args: Readonly<Record<string, unknown>>, who: string): GenerateOptions {
  const out: GenerateOptions = {};
  for (const [key, value] of Object.entries(args)) {
    const name = snakeToCamel(key);
    if (IGNORED_ROLLOUT_ARGS.has(name)) continue;
    if (NUMERIC_ROLLOUT_ARGS.has(name)) {
      if (typeof value !== 'number')
        throw new Error(`${who}: rollout_args.${key} must be a number, got ${JSON.stringify(value)}`);
      (out as Record<string, number>)[name] = value;
    } else if (name === 'stop') {
      if (!(typeof value === 'string' || (Array.isArray(value) && value.every((s) => typeof s === 'string'))))
        throw new Error(`${who}: rollout_args.stop must be a string or a list of strings`);
      out.stop = value;
    } else if (name === 'stopTokenIds') {
      if (!(Array.isArray(value) && value.every((id) => Number.isInteger(id))))
        throw new Error(`${who}: rollout_args.stop_token_ids must be a list of integers`);
      out.stopTokenIds = value;
    } else if (name === 'ignoreEos') {
      if (typeof value !== 'boolean') throw new Error(`${who}: rollout_args.ignore_eos must be a boolean`);
      out.ignoreEos = value;
    } else {
      throw new Error(
        `${who}: unknown rollout_args key '${key}'; expected temperature, top_p, top_k, min_p, max_tokens, stop, stop_token_ids, ignore_eos`,
      );
    }
  }
  return out;
}

export const simpleWorkflow = singleTurnWorkflow('simple_workflow');

export const mathWorkflow = singleTurnWorkflow('math_workflow', {
  systemPrompt: MATH_SYSTEM_PROMPT,
  defaultRewardFn: 'math_reward',
});

export const mathBoxedWorkflow = singleTurnWorkflow('math_boxed_workflow', {
  systemPrompt: (task) => (task.workflowArgs?.with_think === true ? MATH_BOXED_THINK_SYSTEM_PROMPT : MATH_BOXED_SYSTEM_PROMPT),
  defaultRewardFn: 'math_boxed_reward',
  rewardArgsFromWorkflowArgs: ['with_think', 'format_score_coef'],
  basePromptArg: true,
});

WORKFLOWS.register('simple_workflow', simpleWorkflow);
WORKFLOWS.register('math_workflow', mathWorkflow);
WORKFLOWS.register('math_boxed_workflow', mathBoxedWorkflow);
