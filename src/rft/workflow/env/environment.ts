// Environment workflows (Trinity-RFT's MultiTurnWorkflow and step-wise workflows): the model plays one episode of a
// text environment per run, one chat turn per environment step.
//
//   messages = [system?, user reset()]
//   repeat until done or max_steps:  reply = chat(messages) → env.step(reply.content) → messages ++ [reply, user obs]
//   reward   = Σ step rewards − invalid_action_penalty · invalid actions
//              (or a reward function's score of the episode: workflow_args reward_fn_type, ./episode-reward.ts)
//
// Each call continues the episode's earlier calls exactly (a ConversationTracker per episode: the prompt of step t
// is the exact ids of step t − 1 plus the new observation, never the conversation re-tokenised), and the episode
// becomes experiences in one of two ways (workflow_args.experience_mode):
//   'episode'  one experience of the whole conversation: prompt = the first call's prompt, action mask 1 on the
//              tokens the model generated and 0 on the observations between them (concatenated multi-turn); its
//              info lists each turn: info.step_spans (the reply's [start, end) among the response positions),
//              info.env_state_hash and info.step_reward (one per turn, as below), so gigpo gives each reply its
//              own step advantage without an experience per step (../../algorithm/advantage/gigpo.ts)
//   'step'     one experience per call (its whole context as prompt, its reply as response), info.stepIndex = t,
//              each step rewarded as workflow_args.step_reward_mode says (Trinity's two step-wise workflow bases):
//                'propagate'  (default; RewardPropagationWorkflow) every step carries the episode's reward
//                'step_wise'  (StepWiseRewardWorkflow) each step carries its own reward r_t (below), so a group's
//                             steps are compared by what each move earned, not by how its episode ended
//              for algorithm multi_step_grpo (advantage step_wise_grpo, which scores each run by its last step's
//              reward and broadcasts that to all its steps), grpo (every step of a task's runs one group member) and
//              gigpo, which also reads each step's
//                info.step_reward     r_t = the step's reward − invalid_action_penalty if the reply was invalid
//                                     (so Σ_t r_t is the episode's reward)
//                info.env_state_hash  sha256 (hex) of the state the step acted from: env.stateKey() before the
//                                     step, else the observation the model was shown (the grid environments render
//                                     their whole state, so equal states of any run of any task hash equal, in any
//                                     process or worker thread); GiGPO's anchor states are the steps sharing one
// The workflow is not repeatable: the runner plays repeat_times episodes concurrently, each its own run id.
//
// Each experience's metrics (the rollout's rollout/<name>/mean) say how its episode went and where its time went:
//   steps, invalid_actions, truncated (max_steps reached), context_full, and the environment's own (success, ...)
//   context_tokens      mean over the episode's calls of the context each call read (its prompt ids)
//   episode_tokens      the conversation's final length: the last call's prompt and reply
//   model_time_s        wall time in model calls; env_time_s: in the environment's reset() and step()
//
// Workflow arguments (taskset workflow_args, overridden by the same keys in the task's row): max_steps (default
// options.maxSteps; agent_max_steps is Trinity's newer name for it), experience_mode, step_reward_mode,
// invalid_action_penalty, reward_fn_type and reward_fn_args (./episode-reward.ts); the
// environment factory reads its own keys from the same merged arguments. The rows need no prompt column (Trinity's
// environment rows are {seed, size, p}: WorkflowSpec.readsPrompt false), but a task with no prompt must name its
// layout (options.layoutArgs, in its row or workflow_args): a row with none of them is not this environment's row.
// An argument the environment cannot use is an error naming the task and its taskset row.
import { createHash } from 'node:crypto';
import { ConversationTracker } from '../../../engine/index.js';
import type { ChatResult } from '../../../engine/index.js';
import type { ChatMessage } from '../../../tokenizer/index.js';
import { mixSeed } from '../../buffer/random.js';
import type { ChatTurn, Experience } from '../../experience.js';
import type { Task } from '../../task.js';
import { rolloutOptions } from '../single-turn.js';
import { EPISODE_REWARD_ARGS, type EpisodeReward, episodeReward, scoreEpisode } from './episode-reward.js';
import type { WorkflowContext, WorkflowSpec } from '../types.js';

/** What one environment step returns. */
export interface EnvironmentStep {
  /** The next observation (shown to the model unless done). */
  observation: string;
  reward: number;
  done: boolean;
  /** The reply was not a valid action: the step was a no-op (counted, and penalised by the workflow). */
  invalidAction?: boolean;
}

/** A text environment: one episode per instance. */
export interface Environment {
  /** Starts the episode; returns the first observation. */
  reset(): string | Promise<string>;
  /** Applies the model's reply (the raw assistant text: parsing the action is the environment's job). */
  step(reply: string): EnvironmentStep | Promise<EnvironmentStep>;
  /**
   * The current state as text, equal exactly when two states are equal (hashed into each step's info.env_state_hash,
   * GiGPO's anchor states). Absent: the last observation is the state (right when it shows the whole state, as the
   * grid environments' do; wrong when it also shows a turn counter or history).
   */
  stateKey?(): string;
  /** Episode metrics at the end (e.g. success); the workflow adds steps, invalid_actions and truncated. */
  metrics?(): Record<string, number>;
  close?(): void | Promise<void>;
}

export interface EnvironmentContext {
  task: Task;
  /** The task's workflow_args overridden by the task row's fields. */
  args: Readonly<Record<string, unknown>>;
  /** Seed for the environment's own randomness in this run (e.g. slippery moves). */
  seed: number;
  isEval: boolean;
}

export type EnvironmentFactory = (context: EnvironmentContext) => Environment | Promise<Environment>;

export type ExperienceMode = 'episode' | 'step';

/** How the experiences of experience_mode step are rewarded (see the header). */
export type StepRewardMode = 'propagate' | 'step_wise';

export interface EnvironmentWorkflowOptions {
  /** System prompt when the task has none. */
  systemPrompt?: string | ((task: Task) => string | undefined);
  /** The workflow_args keys the environment factory reads (the episode's own, ENVIRONMENT_ARGS, are added). */
  environmentArgs?: readonly string[];
  /** Default max_steps (10). */
  maxSteps?: number;
  /** Default experience_mode ('episode'). */
  experienceMode?: ExperienceMode;
  /** Default invalid_action_penalty (0): subtracted from the episode's reward per invalid action. */
  invalidActionPenalty?: number;
  /** The arguments that name a task's layout (e.g. seed, size, p): a task without a prompt must have one. */
  layoutArgs?: readonly string[];
  description?: string;
}

/** The workflow options of one task, checked. */
export interface EpisodeSettings {
  maxSteps: number;
  experienceMode: ExperienceMode;
  stepRewardMode: StepRewardMode;
  invalidActionPenalty: number;
}

/** The workflow_args keys every environment workflow reads (./episodeSettings). */
export const ENVIRONMENT_ARGS: readonly string[] = [
  'max_steps',
  'agent_max_steps',
  'experience_mode',
  'step_reward_mode',
  'invalid_action_penalty',
  ...EPISODE_REWARD_ARGS,
];

/** The task's workflow_args overridden by its row's fields (a row names its own seed, size, max_steps ...). */
export function environmentArgs(task: Task): Record<string, unknown> {
  return { ...task.workflowArgs, ...task.raw };
}

export function episodeSettings(
  args: Readonly<Record<string, unknown>>,
  options: EnvironmentWorkflowOptions,
  who: string,
): EpisodeSettings {
  if (args.max_steps !== undefined && args.agent_max_steps !== undefined && args.max_steps !== args.agent_max_steps)
    throw new Error(
      `${who}: max_steps (${JSON.stringify(args.max_steps)}) and agent_max_steps (${JSON.stringify(args.agent_max_steps)}) ` +
        'are one setting (agent_max_steps is its newer Trinity name): give one',
    );
  const maxSteps = args.max_steps ?? args.agent_max_steps ?? options.maxSteps ?? 10;
  if (typeof maxSteps !== 'number' || !Number.isInteger(maxSteps) || maxSteps < 1)
    throw new Error(`${who}: max_steps must be a positive integer, got ${JSON.stringify(maxSteps)}`);
  const experienceMode = args.experience_mode ?? options.experienceMode ?? 'episode';
  if (experienceMode !== 'episode' && experienceMode !== 'step')
    throw new Error(`${who}: experience_mode must be 'episode' or 'step', got ${JSON.stringify(experienceMode)}`);
  const stepRewardMode = args.step_reward_mode ?? 'propagate';
  if (stepRewardMode !== 'propagate' && stepRewardMode !== 'step_wise')
    throw new Error(`${who}: step_reward_mode must be 'propagate' or 'step_wise', got ${JSON.stringify(stepRewardMode)}`);
  if (stepRewardMode === 'step_wise' && experienceMode !== 'step')
    throw new Error(
      `${who}: step_reward_mode 'step_wise' rewards each step's own experience: it needs experience_mode 'step' ` +
        `(an episode experience has one reward; its turns' rewards are listed in info.step_reward), got '${experienceMode}'`,
    );
  if (stepRewardMode === 'step_wise' && args.reward_fn_type !== undefined && args.reward_fn_type !== null)
    throw new Error(
      `${who}: step_reward_mode 'step_wise' rewards each step by the environment, but reward_fn_type ` +
        `(${JSON.stringify(args.reward_fn_type)}) scores the whole episode: use step_reward_mode 'propagate' with it`,
    );
  const invalidActionPenalty = args.invalid_action_penalty ?? options.invalidActionPenalty ?? 0;
  if (typeof invalidActionPenalty !== 'number' || !Number.isFinite(invalidActionPenalty) || invalidActionPenalty < 0)
    throw new Error(`${who}: invalid_action_penalty must be a non-negative number, got ${JSON.stringify(invalidActionPenalty)}`);
  return { maxSteps, experienceMode, stepRewardMode, invalidActionPenalty };
}

/** Where a task came from, as an error names it. */
const taskRow = (task: Task): string => `task '${task.id}', taskset '${task.taskset}' row ${task.index + 1}`;

/** The episode settings and the environment of one task; an unusable argument is an error naming the task's row. */
async function prepareEpisode(
  name: string,
  factory: EnvironmentFactory,
  options: EnvironmentWorkflowOptions,
  context: Pick<WorkflowContext, 'task' | 'seed' | 'isEval' | 'baseDir'>,
): Promise<{ settings: EpisodeSettings; env: Environment; reward: EpisodeReward | null }> {
  const { task } = context;
  const args = environmentArgs(task);
  const layout = options.layoutArgs ?? [];
  if (task.prompt === undefined && task.messages === undefined && layout.length > 0 && !layout.some((k) => k in args))
    throw new Error(
      `${name}: ${taskRow(task)} has none of ${layout.join(', ')} (in its row or workflow_args) and no prompt: ` +
        `it is not a ${name} row (row keys: ${Object.keys(task.raw).join(', ') || 'none'})`,
    );
  try {
    const settings = episodeSettings(args, options, name);
    const reward = await episodeReward(args, name, context.baseDir);
    const env = await factory({ task, args, seed: mixSeed(context.seed, 0x5eed), isEval: context.isEval });
    return { settings, env, reward };
  } catch (error) {
    throw new Error(`${(error as Error).message} (${taskRow(task)})`, { cause: error });
  }
}

/** info.env_state_hash of a state: sha256 of its key (stateKey() or the observation), hex. */
export function environmentStateHash(stateKey: string): string {
  return createHash('sha256').update(stateKey, 'utf8').digest('hex');
}

/**
 * Each call's reply as [start, end) among the episode experience's response positions (info.step_spans): call t's
 * prompt is the conversation before it, exactly (the ConversationTracker), so its reply starts where that prompt ends.
 * They cover exactly the tokens the experience trains.
 */
function replySpans(calls: readonly ChatResult[], experience: Experience): [number, number][] {
  const mask = experience.actionMask ?? experience.tokens.slice(experience.promptLength).map(() => 1);
  const spans = calls.map((call): [number, number] => {
    const start = call.promptIds.length - experience.promptLength;
    return [start, start + call.completionIds.length];
  });
  const trained = mask.reduce((a, m) => a + m, 0);
  const inSpans = spans.reduce((a, [start, end]) => a + mask.slice(start, end).reduce((b, m) => b + m, 0), 0);
  const lengths = spans.reduce((a, [start, end]) => a + end - start, 0);
  if (spans.some(([start, end]) => start < 0 || end > mask.length) || inSpans !== trained || lengths !== trained) {
    throw new Error(
      `environment workflow: the episode's ${calls.length} replies (${lengths} tokens) are not the ${trained} tokens its experience trains`,
    );
  }
  return spans;
}

/**
 * Why a task with these arguments gets no info.env_state_hash (WorkflowSpec.stateHashes), or true when it does: in
 * both experience modes (an episode experience lists one per turn, with info.step_spans).
 */
function stepStateHashes(args: Readonly<Record<string, unknown>>, options: EnvironmentWorkflowOptions): true | string {
  const mode = args.experience_mode ?? options.experienceMode ?? 'episode';
  return mode === 'step' || mode === 'episode' ? true : `its experience_mode is ${JSON.stringify(mode)}, not step or episode`;
}

/** context_tokens and episode_tokens of an episode's calls (see the header); none when it made no call. */
function contextMetrics(calls: readonly ChatResult[]): Record<string, number> {
  const last = calls.at(-1);
  if (last === undefined) return {};
  return {
    context_tokens: calls.reduce((sum, call) => sum + call.promptIds.length, 0) / calls.length,
    episode_tokens: last.promptIds.length + last.completionIds.length,
  };
}

/** The engine refused a call because the conversation no longer fits its context (maxLength positions). */
export function isContextFull(error: unknown): boolean {
  return error instanceof Error && /maxLength/.test(error.message);
}

/** A workflow that plays one episode of the environment per run; see the header. */
export function environmentWorkflow(
  name: string,
  factory: EnvironmentFactory,
  options: EnvironmentWorkflowOptions = {},
): WorkflowSpec {
  return {
    repeatable: false,
    workflowArgs: [...ENVIRONMENT_ARGS, ...(options.environmentArgs ?? [])],
    readsPrompt: false,
    stateHashes: (args) => stepStateHashes(args, options),
    description: options.description ?? `${name}: one multi-turn episode per run (experience_mode episode | step, max_steps)`,
    run: async (context: WorkflowContext): Promise<Experience[]> => {
      const { task, model, runIdBase, seed, signal } = context;
      const { settings, env, reward } = await prepareEpisode(name, factory, options, context);
      const generation = rolloutOptions(task.rolloutArgs ?? {}, name);
      const system =
        task.systemPrompt ?? (typeof options.systemPrompt === 'function' ? options.systemPrompt(task) : options.systemPrompt);
      // One conversation per episode, so each call continues the previous one's exact ids.
      const conversation = model.tokenizer ? new ConversationTracker(model.tokenizer) : undefined;
      try {
        // where the episode's time goes (see the header)
        let modelSeconds = 0;
        let envSeconds = 0;
        const timed = async <T>(work: () => Promise<T> | T, into: 'model' | 'env'): Promise<T> => {
          const started = performance.now();
          try {
            return await work();
          } finally {
            const seconds = (performance.now() - started) / 1000;
            if (into === 'model') modelSeconds += seconds;
            else envSeconds += seconds;
          }
        };
        // the observation the next call acts from
        let observation = await timed(() => env.reset(), 'env');
        const messages: ChatMessage[] = [
          ...(system !== undefined ? [{ role: 'system' as const, content: system }] : []),
          { role: 'user', content: observation },
        ];
        const calls: ChatResult[] = [];
        // per call: the hash of the state it acted from and its step reward (info.env_state_hash, info.step_reward)
        const stateHashes: string[] = [];
        const stepRewards: number[] = [];
        let total = 0;
        let invalidActions = 0;
        let done = false;
        let contextFull = false;
        while (!done && calls.length < settings.maxSteps) {
          signal.throwIfAborted();
          let result: ChatResult;
          try {
            result = await timed(
              () =>
                model.chat(messages, {
                  ...generation,
                  seed: mixSeed(seed, calls.length),
                  signal,
                  ...(conversation ? { conversation } : {}),
                }),
              'model',
            );
          } catch (error) {
            if (calls.length > 0 && isContextFull(error)) {
              contextFull = true;
              break;
            }
            throw error;
          }
          calls.push(result);
          stateHashes.push(environmentStateHash(env.stateKey?.() ?? observation));
          messages.push(result.message);
          const step = await timed(() => env.step(result.message.content), 'env');
          const penalty = step.invalidAction ? settings.invalidActionPenalty : 0;
          if (step.invalidAction) invalidActions++;
          stepRewards.push(step.reward - penalty);
          total += step.reward - penalty;
          done = step.done;
          observation = step.observation;
          if (!done) messages.push({ role: 'user', content: step.observation });
        }
        // a reward function named in workflow_args scores the episode in place of the environment (./episode-reward.ts)
        const scored = reward && (await scoreEpisode(reward, { task, messages, envReward: total }, context));
        if (scored) total = scored.reward;
        const metrics: Record<string, number> = {
          ...scored?.metrics,
          ...env.metrics?.(),
          steps: calls.length,
          invalid_actions: invalidActions,
          truncated: done ? 0 : 1,
          ...(contextFull ? { context_full: 1 } : {}),
          ...contextMetrics(calls),
          model_time_s: modelSeconds,
          env_time_s: envSeconds,
        };
        const transcript: ChatTurn[] = messages.map((m) => ({ role: m.role, content: m.content ?? '' }));
        return episodeExperiences(model, calls, settings, conversation !== undefined, {
          reward: total,
          metrics,
          runId: runIdBase,
          transcript,
          stateHashes,
          stepRewards,
        });
      } finally {
        await env.close?.();
      }
    },
  };
}

/** What an episode's experiences carry besides its calls. */
interface EpisodeRecord {
  reward: number;
  metrics: Record<string, number>;
  runId: number;
  transcript: ChatTurn[];
  /** Per call: the state it acted from, hashed, and its step reward. */
  stateHashes: string[];
  stepRewards: number[];
}

/**
 * The episode's experiences (see the header): one of the whole conversation, each turn listed in its info when it
 * holds every turn (a conversation was tracked), or one per call.
 */
function episodeExperiences(
  model: WorkflowContext['model'],
  calls: readonly ChatResult[],
  settings: Pick<EpisodeSettings, 'experienceMode' | 'stepRewardMode'>,
  tracked: boolean,
  record: EpisodeRecord,
): Experience[] {
  const { reward, metrics, runId } = record;
  if (settings.experienceMode === 'episode') {
    const experience = model.toExperience(calls.at(-1) as ChatResult, { reward, metrics, runId, messages: record.transcript });
    if (tracked) {
      experience.info.step_spans = replySpans(calls, experience);
      experience.info.env_state_hash = record.stateHashes;
      experience.info.step_reward = record.stepRewards;
    }
    return [experience];
  }
  return calls.map((call, stepIndex) =>
    model.toExperience(call, {
      scope: 'turn',
      reward: settings.stepRewardMode === 'step_wise' ? (record.stepRewards[stepIndex] as number) : reward,
      metrics,
      runId,
      info: {
        stepIndex,
        episodeSteps: calls.length,
        env_state_hash: record.stateHashes[stepIndex],
        step_reward: record.stepRewards[stepIndex],
      },
    }),
  );
}

/** One episode played by a policy without a model (expert demonstrations, tests). */
export interface PlayedEpisode {
  /** [system?, user obs, assistant reply, user obs, ...]: the conversation the workflow would have had. */
  messages: ChatTurn[];
  reward: number;
  done: boolean;
  steps: number;
}

/** Plays `env` with `policy` (the reply to each observation) for at most maxSteps steps. */
export async function playEpisode(
  env: Environment,
  policy: (observation: string, stepIndex: number) => string | Promise<string>,
  options: { systemPrompt?: string; maxSteps: number },
): Promise<PlayedEpisode> {
  let observation = await env.reset();
  const messages: ChatTurn[] = [
    ...(options.systemPrompt !== undefined ? [{ role: 'system', content: options.systemPrompt }] : []),
    { role: 'user', content: observation },
  ];
  let reward = 0;
  let done = false;
  let steps = 0;
  while (!done && steps < options.maxSteps) {
    const reply = await policy(observation, steps);
    messages.push({ role: 'assistant', content: reply });
    const step = await env.step(reply);
    steps++;
    reward += step.reward;
    done = step.done;
    observation = step.observation;
    if (!done) messages.push({ role: 'user', content: observation });
  }
  return { messages, reward, done, steps };
}

/** Where the seeds of each set start (eval from 0), so the sets never share a seed. */
const DATA_SEEDS = { eval: 0, train: 100_000, sft: 200_000 } as const;

/**
 * An environment's data in three disjoint sets of seeds (the examples' make-data scripts): `eval` held-out seeds,
 * `train` seeds for RL and `sft` expert episodes played by `expert` (as conversations; solved ones only unless
 * keepFailed, for imperfect demonstrations); train and SFT seeds whose layout equals an eval seed's are skipped, so
 * no held-out layout is trained on.
 */
export async function seededEpisodeData<E extends Environment>(options: {
  counts: { train: number; eval: number; sft: number };
  /** The layout a seed makes (its rendered start state): seeds with equal layouts count as the same problem. */
  layout: (seed: number) => string;
  environment: (seed: number) => E;
  /** The expert's next reply in `env` (a solver). */
  expert: (env: E) => string;
  systemPrompt: string;
  maxSteps: number;
  /** Keep the expert's unsolved episodes too (default: only episodes with reward 1). */
  keepFailed?: boolean;
}): Promise<{ train: { seed: number }[]; eval: { seed: number }[]; sft: { seed: number; messages: ChatTurn[] }[] }> {
  const { counts } = options;
  const evalSeeds = Array.from({ length: counts.eval }, (_, i) => DATA_SEEDS.eval + i);
  const held = new Set(evalSeeds.map(options.layout));
  const pick = (first: number, count: number) => {
    const seeds: number[] = [];
    for (let seed = first; seeds.length < count; seed++) if (!held.has(options.layout(seed))) seeds.push(seed);
    return seeds;
  };
  const sft: { seed: number; messages: ChatTurn[] }[] = [];
  for (const seed of pick(DATA_SEEDS.sft, counts.sft)) {
    const env = options.environment(seed);
    const episode = await playEpisode(env, () => options.expert(env), {
      systemPrompt: options.systemPrompt,
      maxSteps: options.maxSteps,
    });
    // an episode cut at maxSteps ends with an observation; as SFT data it ends with the last move
    const messages = episode.messages.at(-1)?.role === 'user' ? episode.messages.slice(0, -1) : episode.messages;
    if (episode.reward === 1 || options.keepFailed) sft.push({ seed, messages });
  }
  return {
    train: pick(DATA_SEEDS.train, counts.train).map((seed) => ({ seed })),
    eval: evalSeeds.map((seed) => ({ seed })),
    sft,
  };
}
