// The Workflow API: what user code implements to produce experiences from a task with the rollout model.
//
//   const myWorkflow: Workflow = async ({ task, model, repeatTimes, seed }) => {
//     const result = await model.chat([{ role: 'user', content: task.prompt ?? '' }], { n: repeatTimes, seed });
//     return result.choices.map((c) => model.toExperience(c, { reward: score(c.message.content, task.response) }));
//   };
//
// The runner hands each attempt its own ModelHandle: every model call carries the attempt's AbortSignal (a timeout
// cancels the generation even if the workflow forgot to pass `signal`), and toExperience() fills in the task id.
import type {
  ChatChoice,
  ChatOptions,
  ChatResult,
  Completion,
  ConversationTracker,
  GenerateRequest,
  GenerateResult,
  ImagePrompts,
} from '../../engine/index.js';
import type { ChatInputMessage, Tokenizer } from '../../tokenizer/index.js';
import type { AuxiliaryModels } from '../auxiliary/types.js';
import type { ChatTurn, Experience, ExperienceInfo } from '../experience.js';
import type { Task } from '../task.js';
import type { PromptLimit } from './prompt-truncation.js';

/** What toExperience() may be given: a chat choice (or the whole ChatResult, meaning choice 0) or a completion. */
export type RolloutOutput = ChatChoice | Completion;

export interface ToExperienceOptions {
  reward?: number;
  /** Named parts of the reward and other per-response numbers (accuracy, format_score, ...). */
  metrics?: Record<string, number>;
  /** Default: the choice's index within its call (n samples of one task are runs 0..n-1). */
  runId?: number;
  taskId?: string;
  /**
   * The prompt ids the output continues. Default: looked up from the call that produced the output (same object);
   * needed only for outputs that did not come from this handle.
   */
  promptIds?: readonly number[];
  /** Default: the model version when the call started. */
  modelVersion?: number;
  /** Text scored as the response (default: the output's text). */
  responseText?: string;
  promptText?: string;
  messages?: ChatTurn[];
  /** Extra info fields. */
  info?: ExperienceInfo;
  /** Default: a random UUID. */
  eid?: string;
  /**
   * For a chat choice that continued a conversation (messages ++ earlier reply ++ new turns): 'conversation'
   * (default) makes one experience of the whole conversation from its first prompt, action mask 1 on every token the
   * model generated and 0 on the turns in between; 'turn' makes one of this call alone (its full prompt as prompt).
   */
  scope?: 'conversation' | 'turn';
}

/** What recordedExperiences() makes of the recorded chat calls. */
export interface RecordedExperienceOptions {
  /** 'conversation' (default): one experience per conversation (its last turn, whole history); 'turn': one per call. */
  scope?: 'conversation' | 'turn';
  reward?: number;
  metrics?: Record<string, number>;
  runId?: number;
  info?: ExperienceInfo;
}

/** What ModelHandle.serveScope records and how a client reaches it. */
export interface ServeScopeOptions {
  conversation: ConversationTracker;
  /** Ends the scope (its calls are aborted, later ones refused). */
  signal?: AbortSignal;
  /**
   * True: the scope is reached with a per-run API key on the endpoint's plain /v1 (./recording.ts, Trinity's
   * WorkflowWithRecording): a black-box agent needs only OPENAI_BASE_URL and OPENAI_API_KEY, and any other key gets
   * 401. False (default): by a path of its own, /s/<id>/v1, with any key.
   */
  byApiKey?: boolean;
}

/** An OpenAI-compatible endpoint for one scope of calls (see ModelHandle.serveScope). */
export interface ServedScope {
  /** …/v1, for any OpenAI-compatible SDK. */
  baseURL: string;
  /** The scope's API key (byApiKey): the only key its calls are accepted with, revoked by release(). */
  apiKey?: string;
  /** The model name the endpoint expects (any name is accepted). */
  modelName: string;
  release(): void;
}

/** The rollout model as a workflow sees it: exact token ids in and out, whatever engine serves it. */
export interface ModelHandle {
  readonly tokenizer: Tokenizer | null;
  /** Weights version currently served (bumped by the synchronizer). */
  readonly modelVersion: number;
  /**
   * What the attempt's calls do with a prompt over model.max_prompt_tokens (./prompt-truncation.ts); null or absent:
   * prompts go to the engine as they are. A workflow that tokenizes its own prompt bounds the work with it.
   */
  readonly promptLimit?: PromptLimit | null;
  /** A vision-language model's image token and processor: chat() then takes image content parts. */
  readonly vision?: ImagePrompts | null;
  generate(request: GenerateRequest): Promise<GenerateResult>;
  /**
   * Chat with exact token ids. Messages that extend an earlier call's messages plus its reply (the choice's message
   * appended as is) continue that call's exact ids (src/engine/conversation.ts): no re-tokenising of past turns.
   */
  chat(messages: readonly ChatInputMessage[], options?: ChatOptions): Promise<ChatResult>;
  /**
   * An Experience of one output of generate()/chat(), exactly: tokens = prompt ids ++ completion ids (never
   * re-tokenised), logprobs = the engine's, actionMask all 1. The placeholder of a prompt over promptLimit is the
   * prompt's head with actionMask [0] and truncateStatus 'prompt_truncated' (./prompt-truncation.ts).
   */
  toExperience(output: RolloutOutput, options?: ToExperienceOptions): Experience;
  /**
   * An official `openai` client (npm package) on this model: every chat.completions call through it is recorded
   * with exact token ids, and follow-up calls continue earlier ones exactly (as chat() does). Any model name works.
   */
  openai(): Promise<import('openai').OpenAI>;
  /** The same endpoint as a base URL (…/v1) for other SDKs (e.g. the Vercel AI SDK's OpenAI-compatible provider). */
  openaiBaseUrl(): Promise<string>;
  /** Experiences of the chat calls recorded so far (chat() and the OpenAI endpoint), oldest first. */
  recordedExperiences(options?: RecordedExperienceOptions): Experience[];
  /** For wrappers: an HTTP endpoint whose chat calls are recorded into `conversation`. */
  serveScope(scope: ServeScopeOptions): Promise<ServedScope>;
}

export interface WorkflowContext {
  task: Task;
  model: ModelHandle;
  /** Responses wanted for this task (algorithm.repeat_times); a repeatable workflow runs once with n = repeatTimes. */
  repeatTimes: number;
  /** Run id of the first response: a non-repeatable workflow gets repeatTimes 1 and runIdBase = its repeat. */
  runIdBase: number;
  /** Seed for this task's sampling (reproducible runs). */
  seed: number;
  /** Aborted when the task times out or the run stops: pass it on to anything else that waits. */
  signal: AbortSignal;
  /** True when running an eval taskset (greedy or eval rollout args, no training). */
  isEval: boolean;
  /** The folder relative module paths (a reward function named `file.ts#export`) resolve against: the config's. */
  baseDir?: string;
  /**
   * The run's auxiliary models (explorer.auxiliary_models: judges, reward models, teachers), by name or in config
   * order (`auxiliaryModels.list[0]` is Trinity's `auxiliary_models[0]`). Their calls are aborted with `signal`, counted
   * in the step's auxiliary/<name>/* metrics, and never recorded as experiences.
   */
  auxiliaryModels: AuxiliaryModels;
}

/** Runs a task; returns its experiences (info.taskId/runId/modelVersion are stamped by the runner if missing). */
export type Workflow = (context: WorkflowContext) => Promise<Experience[]>;

/** A workflow with what the runner needs to know about it (Trinity-RFT's class flags). */
export interface WorkflowSpec {
  /** The workflow function. */
  run: Workflow;
  /**
   * True (default): one run produces all repeatTimes responses (n samples in one call, Trinity-RFT's `can_repeat`).
   * False: the runner runs it repeatTimes times with repeatTimes = 1, concurrently, each its own runId.
   */
  repeatable?: boolean;
  /** One line for listings. */
  description?: string;
  /**
   * The workflow_args keys it reads: `config check` (and the run's pre-run checks) refuse any other key of a taskset
   * that runs it, suggesting the closest. Undefined: not declared, any key is accepted (a user's workflow).
   */
  workflowArgs?: readonly string[];
  /**
   * Throws an error naming the argument when a value of a taskset's workflow_args is unusable (a range, a type), so
   * `config check` and the run's pre-run checks refuse it before the first task; the workflow checks again when run.
   */
  checkArgs?: (args: Readonly<Record<string, unknown>>) => void;
  /**
   * Why a taskset's workflow_args are not read, for a workflow that reads none where Trinity's workflow of the same
   * name took and dropped them (configs written for it carry some): a config's are taken out and reported in the
   * "ignored on this backend" block with this reason (src/rft/run/config/trinity-workflow-args.ts), not refused.
   */
  ignoredWorkflowArgs?: string;
  /**
   * False: the workflow builds its task from the row's own fields (an environment's seed, size, p), so the rows of a
   * taskset whose default workflow it is need no prompt column (format.prompt_key); a row that has one still gets it.
   * Default true. Read for registered workflows (a module-path default workflow is taken as reading the prompt).
   */
  readsPrompt?: boolean;
  /**
   * Whether each experience of a task with these arguments (workflow_args overridden by the row) carries
   * info.env_state_hash, the state its step acted from (advantage_fn gigpo's anchor states): true, or why not (the
   * fix included). Absent: a registered workflow writes none (a run with gigpo is refused at start); a module-path
   * workflow is not known until it runs (the first train step whose batch has no state hash warns).
   */
  stateHashes?: (args: Readonly<Record<string, unknown>>) => true | string;
}

// The reward contract lives with the rewards (src/rft/reward/types.ts); workflows call reward functions.
export type { RewardFn, RewardOutput } from '../reward/types.js';
