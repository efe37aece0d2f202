// The `explorer` section of the run config (Trinity's ExplorerConfig): the rollout model and its engines, the
// workflow runners, evaluation, and mode serve's endpoint — the schema with its defaults, the rollout model's rules
// (embedded engines or an external OpenAI-compatible pool), and the explorer's and the endpoint's settings. Its
// auxiliary models are ../auxiliary/config.ts. Written in the config language of src/rft/config/.
import { z } from 'zod';
import { AuxiliaryModelSchema } from '../auxiliary/config.js';
import type { ReportProblem } from '../config/errors.js';
import {
  bool,
  coerceString,
  deviceSetting,
  ENGINE_TYPES,
  intIn,
  MAX_SLOTS,
  MAX_STEPS,
  MAX_TIMEOUT_SECONDS,
  MAX_TOKENS,
  numIn,
  str,
} from '../config/value-schemas.js';
import { DEFAULT_MAX_PREFILL_TOKENS } from '../../engine/index.js';
import type { StageMode, StageSettings } from '../settings.js';
import { DEFAULT_WORKFLOW_MAX_HEAP_MB } from '../workflow/isolation/pool.js';

/** explorer.rollout_model.weight_sync_buffer_size's default, in MB (Trinity's InferenceModelConfig). */
export const DEFAULT_WEIGHT_SYNC_BUFFER_MB = 1024;

export const RolloutModelSchema = z.strictObject({
  engine_type: z.enum(ENGINE_TYPES).default('embedded'), // Trinity vllm; openai: an external OpenAI-compatible server
  engine_num: intIn(1, 64).default(1), // [1, 64] embedded: engines, each on its own thread (or process) with a share of the cores; openai: 1 or the number of base_urls
  engine_process: bool().default(false), // embedded only: each engine in its own process (weights by checkpoint reload)
  // embedded only: [1, 1048576] MB of a weights folder an engine reads at a time when it loads one (checkpoint sync),
  // each bucket copied in and freed (Trinity's, for its NCCL buckets); null: Trinity's 1024
  weight_sync_buffer_size: intIn(1, 1024 * 1024)
    .nullable()
    .default(null),
  slots: intIn(1, MAX_SLOTS).default(8), // [1, 4096] sequences decoded at once per engine (KV-cache slots)
  // embedded only: a paged KV cache whose full blocks are kept and reused by prompts with the same prefix (vLLM's key)
  enable_prefix_caching: bool().default(false),
  // embedded only: a prompt longer than a step's token budget is prefilled in chunks between decode steps (vLLM's key)
  enable_chunked_prefill: bool().default(false),
  // embedded only: [1, 2^20] tokens of one engine step (vLLM's key): with enable_chunked_prefill each decoding sequence
  // takes one and the prefill chunk the rest (at least slots then); without, the padded tokens of one prefill forward
  // (a longer prompt still runs whole, alone); null: 8192 (veRL's rollout default)
  max_num_batched_tokens: intIn(1, MAX_TOKENS).nullable().default(null),
  // openai only: one server (…/v1), or a list: a pool with health checks and failover
  base_url: z
    .union([z.array(str()).min(1), str()])
    .nullable()
    .default(null),
  api_key: str().nullable().default(null), // openai only
  model_name: str().nullable().default(null), // openai only; null: model.model_path
  device: deviceSetting(), // embedded only; auto: cuda when a GPU is visible, else cpu
  // the base of each workflow run's sampling seed (Trinity: vLLM's seed 42); null: the first taskset's selector seed, else 42
  seed: intIn(0, Number.MAX_SAFE_INTEGER).nullable().default(null), // [0, 2^53 − 1]
  // Qwen3's chat-template switch (Trinity's enable_thinking; model.enable_thinking is mapped here): passed to every
  // render of the rollout model's chat template as the variable enable_thinking; null: not passed (the template's default)
  enable_thinking: bool().nullable().default(null),
});

export const ExplorerSchema = z.strictObject({
  // mode explore: this explorer process among several sharing one buffer (its claims of explore steps, its metrics
  // folder <job dir>/<name>); null: 'explorer' (Trinity's default)
  name: z
    .preprocess(
      coerceString,
      z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, 'expected a name of letters, digits, _ . - (at most 64)'),
    )
    .nullable()
    .default(null),
  runner_per_model: intIn(1, MAX_SLOTS).default(8), // [1, 4096] concurrent workflow runs per engine
  max_timeout: numIn(0, MAX_TIMEOUT_SECONDS, true).default(1800), // (0, 2147483] seconds per attempt
  max_retry_times: intIn(0, 100).default(2), // [0, 100]
  // [16, 1048576] MB of JavaScript heap per module-path workflow's worker thread; over it the attempt fails (out of memory)
  workflow_max_heap_mb: intIn(16, 1024 * 1024).default(DEFAULT_WORKFLOW_MAX_HEAP_MB),
  eval_interval: intIn(1, MAX_STEPS).default(100), // [1, 1e9] explore steps
  eval_on_startup: bool().default(true),
  bench_on_latest_checkpoint: bool().default(false),
  rollout_model: RolloutModelSchema.prefault({}),
  auxiliary_models: z.array(AuxiliaryModelSchema).default([]), // judges, reward models, teachers (src/rft/auxiliary)
  // mode serve (Trinity's proxy): the OpenAI-compatible endpoint external agents call
  proxy_port: intIn(0, 65535).default(8010), // [0, 65535]; 0: any free port
  listen_address: str().default('127.0.0.1'), // Trinity 0.0.0.0; loopback unless asked
  api_key: str().nullable().default(null), // null: $TRINITY_API_KEY if set, else no key
  // [1, 2^20]; a reply's default and cap (a request asking more gets this); null: model.max_response_tokens
  serve_max_tokens: intIn(1, MAX_TOKENS).nullable().default(null),
  serve_max_prompt_tokens: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; null: the model's context
  serve_max_body_bytes: intIn(1, 1024 * 1024 * 1024).default(1024 * 1024), // [1, 1 GiB]
  serve_max_n: intIn(1, 1024).default(16), // [1, 1024]
});

export type RolloutModelConfig = z.output<typeof RolloutModelSchema>;
export type ExplorerConfig = z.output<typeof ExplorerSchema>;

/** The rollout model's rules: an external pool (engine_type openai) or embedded engines, each with its own keys. */
export function checkRolloutModel(rollout: RolloutModelConfig, mode: StageMode, problem: ReportProblem): void {
  if (rollout.engine_type === 'openai') {
    if (rollout.device !== 'auto')
      problem(
        'explorer.rollout_model.device',
        `places the embedded engine; an external server (engine_type openai) runs where it was started: remove it`,
      );
    if (rollout.base_url === null) problem('explorer.rollout_model.base_url', 'is required with engine_type openai');
    const servers = Array.isArray(rollout.base_url) ? rollout.base_url.length : 1;
    if (rollout.engine_num !== 1 && rollout.engine_num !== servers)
      problem(
        'explorer.rollout_model.engine_num',
        `(${rollout.engine_num}) an external pool has one engine per base_url (${servers} given): list the servers in ` +
          'base_url, and set engine_num to their number or leave it out',
      );
    if (Array.isArray(rollout.base_url) && new Set(rollout.base_url).size !== rollout.base_url.length)
      problem('explorer.rollout_model.base_url', 'lists a server twice: each base_url is one server of the pool');
    if (rollout.engine_process)
      problem(
        'explorer.rollout_model.engine_process',
        "starts embedded engines in processes of their own: use engine_type 'embedded'",
      );
    if (rollout.enable_prefix_caching)
      problem(
        'explorer.rollout_model.enable_prefix_caching',
        "switches the embedded engine's prefix cache; an external server sets its own: remove it",
      );
    const stepKeys = {
      enable_chunked_prefill: rollout.enable_chunked_prefill,
      max_num_batched_tokens: rollout.max_num_batched_tokens !== null,
    };
    for (const [key, set] of Object.entries(stepKeys))
      if (set)
        problem(
          `explorer.rollout_model.${key}`,
          "schedules the embedded engine's steps; an external server sets its own: remove it",
        );
    if (rollout.weight_sync_buffer_size !== null)
      problem(
        'explorer.rollout_model.weight_sync_buffer_size',
        'sizes how an embedded engine loads a weights folder; an external server (engine_type openai) loads it itself: remove it',
      );
  } else if (mode === 'serve' && rollout.engine_process) {
    problem('explorer.rollout_model.engine_process', 'mode serve runs its engines on threads of its own process: remove it');
  } else {
    const budget = rollout.max_num_batched_tokens ?? DEFAULT_MAX_PREFILL_TOKENS;
    if (rollout.enable_chunked_prefill && budget < rollout.slots)
      problem(
        'explorer.rollout_model.max_num_batched_tokens',
        `(${budget}) is below slots (${rollout.slots}): with enable_chunked_prefill each decoding sequence takes one ` +
          "token of a step's budget: raise it to at least slots",
      );
    for (const key of ['base_url', 'api_key', 'model_name'] as const) {
      if (rollout[key] !== null) problem(`explorer.rollout_model.${key}`, "is only used with engine_type 'openai'");
    }
  }
}

/** What the explorer's settings take from other sections, and the engine's device resolved where it runs. */
export interface ExplorerSettingsContext {
  /** The weights the stage starts from: an external server's model name when it sets none. */
  modelPath: string;
  /** model.max_model_len. */
  maxLength: number;
  /** model.max_prompt_tokens, max_model_len and enable_prompt_truncation. */
  promptLimit: StageSettings['explorer']['promptLimit'];
  /** buffer.explorer_input.default_workflow_type. */
  defaultWorkflowType: string | null;
  /** synchronizer.sync_method: how an embedded engine gets weights (validation allows only checkpoint for a server). */
  weightSync: 'memory' | 'checkpoint';
  /** The embedded engine's device, resolved ('cpu' or 'cuda:N'). */
  device: string;
}

/** The stage's explorer settings. */
export function explorerSettings(explorer: ExplorerConfig, context: ExplorerSettingsContext): StageSettings['explorer'] {
  const rollout = explorer.rollout_model;
  return {
    name: explorer.name ?? 'explorer',
    runnerPerModel: explorer.runner_per_model,
    maxTimeout: explorer.max_timeout,
    maxRetryTimes: explorer.max_retry_times,
    workflowMaxHeapMb: explorer.workflow_max_heap_mb,
    slots: rollout.slots,
    maxLength: context.maxLength,
    promptLimit: context.promptLimit,
    chatTemplateVariables: rollout.enable_thinking === null ? {} : { enable_thinking: rollout.enable_thinking },
    defaultWorkflow: context.defaultWorkflowType ?? 'simple_workflow',
    device: context.device,
    engine:
      rollout.engine_type === 'openai'
        ? {
            type: 'openai',
            baseUrl: rollout.base_url as string | string[],
            apiKey: rollout.api_key ?? process.env.OPENAI_API_KEY ?? null,
            modelName: rollout.model_name ?? context.modelPath,
          }
        : // embedded engines: how many and where (validation checks engine_num against an external pool's base_url list)
          {
            type: 'embedded',
            weightSync: context.weightSync,
            engineNum: rollout.engine_num,
            engineProcess: rollout.engine_process,
            prefixCaching: rollout.enable_prefix_caching,
            prefill: {
              chunkedPrefill: rollout.enable_chunked_prefill,
              ...(rollout.max_num_batched_tokens !== null ? { maxPrefillTokens: rollout.max_num_batched_tokens } : {}),
            },
            weightSyncBufferBytes: (rollout.weight_sync_buffer_size ?? DEFAULT_WEIGHT_SYNC_BUFFER_MB) * 1024 * 1024,
          },
  };
}

/**
 * Mode serve's endpoint (src/serve/serve-stage.ts). `lengths`: the model section's, resolved (max_model_len is the
 * context of a whole conversation; max_response_tokens a reply's default and cap unless serve_max_tokens is set).
 */
export function serveSettings(
  explorer: ExplorerConfig,
  lengths: { max_model_len: number; max_prompt_tokens: number; max_response_tokens: number },
): StageSettings['serve'] {
  return {
    host: explorer.listen_address,
    port: explorer.proxy_port,
    apiKey: explorer.api_key ?? process.env.TRINITY_API_KEY ?? null,
    maxTokens: explorer.serve_max_tokens ?? lengths.max_response_tokens,
    maxTokensKey: explorer.serve_max_tokens !== null ? 'explorer.serve_max_tokens' : 'model.max_response_tokens',
    // equal to the sum: derived from it (Trinity's rule when max_model_len is unset), or set to it
    contextIsPromptPlusResponse: lengths.max_model_len === lengths.max_prompt_tokens + lengths.max_response_tokens,
    maxPromptTokens: explorer.serve_max_prompt_tokens,
    maxBodyBytes: explorer.serve_max_body_bytes,
    maxN: explorer.serve_max_n,
  };
}
