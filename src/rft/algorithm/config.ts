// The `algorithm` section of the run config (Trinity's AlgorithmConfig): algorithm_type, the optimizer, and the
// module keys (advantage_fn, policy_loss_fn, ...) that ./presets.ts fills in from the algorithm's preset — the schema
// with its defaults, and the section resolved: one max gradient norm, and repeat_times from the algorithm resolver.
// Module names and arguments are checked by the resolver (resolveAlgorithm, ./presets.ts), not here. Written in the
// config language of src/rft/config/.
import { z } from 'zod';
import type { ReportProblem } from '../config/errors.js';
import { args, intIn, MAX_REPEAT_TIMES, MAX_STEPS, nonEmpty, num, numIn } from '../config/value-schemas.js';

export const LR_SCHEDULER_TYPES = ['constant', 'constant_with_warmup', 'linear', 'cosine'] as const;

export const OptimizerSchema = z.strictObject({
  lr: numIn(0, 1, true).default(1e-6), // (0, 1]
  lr_warmup_steps: intIn(-1, MAX_STEPS).default(-1), // [-1, 1e9]; -1: use lr_warmup_steps_ratio
  lr_warmup_steps_ratio: numIn(0, 1).default(0), // [0, 1]
  min_lr_ratio: numIn(0, 1).default(0.01), // [0, 1]
  lr_scheduler_type: z.enum(LR_SCHEDULER_TYPES).default('constant'),
  optimizer_type: nonEmpty().default('adam'), // 'adam' and 'adamw' are AdamW (as Trinity's FSDP trainer); others refused
  // each in [0, 1)
  betas: z.tuple([num(z.number().min(0).lt(1)), num(z.number().min(0).lt(1))]).default((): [number, number] => [0.9, 0.999]),
  weight_decay: numIn(0, 1).default(0.01), // [0, 1] (decoupled: each step scales weights by 1 − lr·weight_decay)
  clip_grad: numIn(0, 1e6, true).nullable().default(null), // (0, 1e6]; derived: trainer.grad_clip, else 1.0
});

const moduleName = () => nonEmpty().optional();
const moduleArgs = () => args().optional();

/** Trinity's AlgorithmConfig keys; unset module keys are left to the preset of algorithm_type. */
export const AlgorithmSchema = z.strictObject({
  algorithm_type: nonEmpty().default('ppo'),
  repeat_times: intIn(1, MAX_REPEAT_TIMES).optional(), // [1, 1024]; derived: 1 (Trinity's AlgorithmConfig), or the algorithm resolver's value
  optimizer: OptimizerSchema.prefault({}),
  sample_strategy: moduleName(),
  sample_strategy_args: moduleArgs(),
  advantage_fn: moduleName(),
  advantage_fn_args: moduleArgs(),
  policy_loss_fn: moduleName(),
  policy_loss_fn_args: moduleArgs(),
  kl_penalty_fn: moduleName(),
  kl_penalty_fn_args: moduleArgs(),
  kl_loss_fn: moduleName(),
  kl_loss_fn_args: moduleArgs(),
  entropy_loss_fn: moduleName(),
  entropy_loss_fn_args: moduleArgs(),
  loss_agg_mode: moduleName(),
  bypass_old_logprobs: z.boolean().default(true), // false: the trainer recomputes old log-probs before the update
  enable_router_replay: z.boolean().optional(), // MoE (default false): the trainer routes tokens through the rollout's experts
  // truncated IS weights of the rollout/training mismatch (verl's names; rejection sampling is not offered)
  rollout_correction: z
    .strictObject({
      rollout_is: z.enum(['token', 'sequence']).nullable().default(null), // null: mismatch metrics only
      rollout_is_threshold: numIn(0, 1e6, true).default(2.0), // (0, 1e6]: C of min(π_train / π_rollout, C)
    })
    .prefault({}),
});

export type OptimizerConfig = Omit<z.output<typeof OptimizerSchema>, 'clip_grad'> & { clip_grad: number };

export type AlgorithmConfig = Omit<z.output<typeof AlgorithmSchema>, 'repeat_times' | 'optimizer'> & {
  repeat_times: number;
  optimizer: OptimizerConfig;
};

/**
 * Checks the `algorithm` section (module names and arguments) and returns its repeat_times: pass
 * `resolveAlgorithm` from src/rft/algorithm. Throw an Error whose message starts with the key path
 * (`algorithm.policy_loss_fn: ...`) to report a problem, or an AggregateError of such Errors to report several.
 */
export type AlgorithmResolver = (algorithm: Readonly<Record<string, unknown>>) => { readonly repeatTimes: number };

const ALGORITHM_PROBLEM = /^(algorithm(?:\.[A-Za-z0-9_]+)*):\s*([\s\S]*)$/;

/**
 * The section resolved: optimizer.clip_grad is the one max gradient norm (`trainerGradClip`, trainer.grad_clip,
 * first), repeat_times the resolver's (else the section's, else 1 as Trinity's); a resolver's error is a problem.
 */
export function resolveAlgorithmSection(
  section: z.output<typeof AlgorithmSchema>,
  trainerGradClip: number | null,
  resolveAlgorithm: AlgorithmResolver | undefined,
  problem: ReportProblem,
): AlgorithmConfig {
  // one max gradient norm: trainer.grad_clip first (what Trinity's FSDP and Tinker trainers clip with), else
  // algorithm.optimizer.clip_grad (its Megatron optimizer's), else 1.0 (both defaults)
  const gradClip = trainerGradClip ?? section.optimizer.clip_grad ?? 1.0;
  const optimizer = { ...section.optimizer, clip_grad: gradClip };

  // algorithm: module names and arguments are the resolver's; repeat_times comes from it (else 1, as Trinity)
  let repeatTimes = section.repeat_times ?? 1;
  if (resolveAlgorithm !== undefined) {
    try {
      repeatTimes = resolveAlgorithm({ ...section, optimizer }).repeatTimes;
    } catch (error) {
      // an AggregateError carries several problems (every bad module argument), each reported at its key path
      const texts = error instanceof AggregateError ? error.errors.map((e) => (e instanceof Error ? e.message : String(e))) : [];
      if (texts.length === 0) texts.push(error instanceof Error ? error.message : String(error));
      for (const text of texts) {
        const match = ALGORITHM_PROBLEM.exec(text);
        problem(match?.[1] ?? 'algorithm', match?.[2] ?? text);
      }
    }
  }
  const { algorithm_type, repeat_times: _given, optimizer: _optimizer, ...modules } = section;
  return { algorithm_type, repeat_times: repeatTimes, optimizer, ...modules };
}

/** The stage's algorithm settings: the resolved section without its unset keys (the preset fills those in). */
export function algorithmSettings(algorithm: AlgorithmConfig): Record<string, unknown> {
  return Object.fromEntries(Object.entries(algorithm).filter(([, v]) => v !== null && v !== undefined));
}
