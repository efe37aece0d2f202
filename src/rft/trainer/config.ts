// The `trainer` section of the run config (Trinity's TrainerConfig): checkpoints, micro-batches (by rows, or by a
// token budget: use_dynamic_bsz, ./token-budget.ts), device, mixed
// precision, ZeRO-1, fully sharded training (trainer_strategy, offload), data-parallel timeouts, stop_when and
// bitwise_on_policy — the schema with its defaults, the dtypes derived from the
// model with their rules, stop_when's rules, and the trainer's settings (./loop.ts, ./train-step.ts). Written in the
// config language of src/rft/config/.
import { z } from 'zod';
import type { ReportProblem } from '../config/errors.js';
import {
  bool,
  DTYPES,
  deviceSetting,
  intIn,
  MAX_EXPERIENCES_PER_STEP,
  MAX_STEPS,
  MAX_TIMEOUT_SECONDS,
  MAX_TOKENS,
  nonEmpty,
  numIn,
} from '../config/value-schemas.js';
import type { StageMode, StageSettings } from '../settings.js';

/**
 * trainer.stop_when (not in Trinity): a mode-train stage (e.g. an SFT warm-up) evaluates the eval tasksets every
 * explorer.eval_interval train steps and ends at the first evaluation whose `metric` (as logged:
 * eval/<taskset>/mean@1, eval/<taskset>/pass@8, ...) is >= at_least (or <= at_most); total_steps stays the most it
 * trains. One of at_least / at_most.
 */
export const StopWhenSchema = z.strictObject({
  metric: nonEmpty(),
  at_least: numIn(-1e12, 1e12).nullable().default(null), // [-1e12, 1e12]
  at_most: numIn(-1e12, 1e12).nullable().default(null), // [-1e12, 1e12]
});

export const TrainerSchema = z.strictObject({
  save_interval: intIn(0, MAX_STEPS).default(0), // [0, 1e9] train steps; 0: only at the end
  max_checkpoints_to_keep: intIn(0, MAX_STEPS).default(0), // [0, 1e9]; 0: keep all
  grad_clip: numIn(0, 1e6, true).nullable().default(null), // (0, 1e6] max gradient norm; derived: algorithm.optimizer.clip_grad, else 1.0
  micro_batch_size: intIn(1, MAX_EXPERIENCES_PER_STEP).default(1), // [1, 65536]; Trinity/veRL ppo_micro_batch_size_per_gpu 1; not read with use_dynamic_bsz
  // micro-batches by a token budget (./token-budget.ts); derived: true when a budget below is set, else false
  // (Trinity's default is true: here the row count stays the default, same gradients either way)
  use_dynamic_bsz: bool().nullable().default(null),
  max_token_len_per_gpu: intIn(1, 64 * MAX_TOKENS)
    .nullable()
    .default(null), // [1, 2^26] positions per micro-batch; derived: ppo_max_token_len_per_gpu, else 2 * model.max_model_len (Trinity)
  ppo_max_token_len_per_gpu: intIn(1, 64 * MAX_TOKENS)
    .nullable()
    .default(null), // veRL's name for max_token_len_per_gpu (Trinity's older key)
  gradient_checkpointing: bool().default(true), // veRL enable_gradient_checkpointing true
  // training forwards run their rows packed end to end without pads (src/model/packed-rows.ts); derived (null): each
  // forward packs when that computes <= 0.8 of the padded positions (Trinity's default is true; bench/README.md)
  use_remove_padding: bool().nullable().default(null),
  device: deviceSetting(), // auto: cuda when a GPU is visible (a rank's own: LOCAL_RANK), else cpu
  // mixed precision as verl's FSDP (mixed_precision.param_dtype bf16 over float32 parameters and optimizer state)
  param_dtype: z.enum(DTYPES).nullable().default(null), // derived: model.dtype; forward/backward dtype
  master_dtype: z.enum(DTYPES).nullable().default(null), // derived: float32 (with LoRA: param_dtype); weights the optimizer updates
  zero_stage: z // 1: ZeRO-1, AdamW state sharded over the data-parallel ranks
    .literal([0, 1], {
      error:
        'must be 0 (off) or 1 (ZeRO-1: AdamW state sharded over the ranks); ZeRO stages 2 and 3 (gradients, parameters sharded) are not implemented',
    })
    .default(0),
  // veRL's strategy names: fsdp/fsdp2 shard the policy's parameters, gradients and AdamW state over the data-parallel
  // ranks (./fsdp.ts; one rank: nothing to shard); null: data parallelism, every rank the whole policy (Trinity's
  // default is fsdp: unset here, the replicated trainer stays the default); megatron is refused
  trainer_strategy: z.enum(['fsdp', 'fsdp2', 'megatron']).nullable().default(null),
  // Trinity 0.6's keys (veRL fsdp_config): the shards, their gradients and AdamW state live in host memory between
  // uses and the optimizer steps there; on the CPU they already do (the config report says so)
  param_offload: bool().default(false),
  optimizer_offload: bool().default(false),
  distributed_timeout: numIn(0, MAX_TIMEOUT_SECONDS, true).default(600), // (0, 2147483] seconds a data-parallel rank waits in a collective (veRL nccl_timeout 600)
  total_steps: intIn(1, MAX_STEPS).nullable().default(null), // [1, 1e9]; null: until the buffer runs out
  stop_when: StopWhenSchema.nullable().default(null), // mode train: end the stage once an eval metric reaches a value
  // not in Trinity: the rollout engine and the trainer run the batch-invariant forward (src/model/batch-invariant.ts),
  // so the trainer's log-probs equal the sampler's bit for bit (rollout_corr/kl exactly 0); CPU only; its cost is in
  // bench/README.md (bench:on-policy)
  bitwise_on_policy: bool().default(false),
});

export type TrainerConfig = Omit<
  z.output<typeof TrainerSchema>,
  'grad_clip' | 'param_dtype' | 'master_dtype' | 'use_dynamic_bsz' | 'max_token_len_per_gpu'
> & {
  grad_clip: number;
  param_dtype: (typeof DTYPES)[number];
  master_dtype: (typeof DTYPES)[number];
  use_dynamic_bsz: boolean;
  max_token_len_per_gpu: number;
};

/**
 * The token budget of use_dynamic_bsz: max_token_len_per_gpu, or its veRL name ppo_max_token_len_per_gpu (both set
 * to different values is a problem), else Trinity's default 2 · model.max_model_len (ulysses_sequence_parallel_size 1);
 * use_dynamic_bsz unset is true when either budget key is set.
 */
export function trainerTokenBudget(
  trainer: z.output<typeof TrainerSchema>,
  maxModelLen: number,
  problem: ReportProblem,
): { use_dynamic_bsz: boolean; max_token_len_per_gpu: number } {
  const { max_token_len_per_gpu: budget, ppo_max_token_len_per_gpu: veRLBudget } = trainer;
  if (budget !== null && veRLBudget !== null && budget !== veRLBudget)
    problem(
      'trainer.ppo_max_token_len_per_gpu',
      `(${veRLBudget}) is veRL's name for trainer.max_token_len_per_gpu, which is set to ${budget}: remove one`,
    );
  const given = budget ?? veRLBudget;
  return { use_dynamic_bsz: trainer.use_dynamic_bsz ?? given !== null, max_token_len_per_gpu: given ?? 2 * maxModelLen };
}

type Dtype = (typeof DTYPES)[number];

/**
 * Mixed precision: compute in param_dtype (derived: model.dtype), keep master weights and optimizer state in
 * master_dtype (derived: float32, with LoRA param_dtype).
 */
export function trainerDtypes(
  trainer: z.output<typeof TrainerSchema>,
  model: { dtype: Dtype; lora: unknown },
  problem: ReportProblem,
): { param_dtype: Dtype; master_dtype: Dtype } {
  const paramDtype = trainer.param_dtype ?? model.dtype;
  const masterDtype = trainer.master_dtype ?? (model.lora === null ? 'float32' : paramDtype);
  if (paramDtype === 'float32' && masterDtype === 'bfloat16')
    problem('trainer.master_dtype', "bfloat16 master weights under float32 compute lose precision for nothing: use 'float32'");
  if (model.lora !== null && masterDtype !== paramDtype)
    problem(
      'trainer.master_dtype',
      `LoRA adapters train in one dtype (param_dtype ${paramDtype}); master_dtype ${masterDtype} is for full ` +
        'fine-tuning: remove it or set it equal',
    );
  return { param_dtype: paramDtype, master_dtype: masterDtype };
}

/** What trainer.bitwise_on_policy's rules read from the rest of the stage. */
export interface BitwiseOnPolicyContext {
  /** model.dtype: the rollout engine's. */
  modelDtype: Dtype;
  paramDtype: Dtype;
  engineType: string;
  rolloutDevice: string;
}

/**
 * trainer.bitwise_on_policy: both sides must run the batch-invariant forward on the same weights in the same dtype, on
 * the CPU: not an external server, not a GPU. LoRA runs (the engine samples with the merged weights) are covered.
 */
export function checkBitwiseOnPolicy(
  trainer: z.output<typeof TrainerSchema>,
  context: BitwiseOnPolicyContext,
  problem: ReportProblem,
): void {
  if (!trainer.bitwise_on_policy) return;
  const at = 'trainer.bitwise_on_policy';
  if (context.engineType !== 'embedded')
    problem(at, `needs the embedded rollout engine; explorer.rollout_model.engine_type ${context.engineType} samples elsewhere`);
  if (context.paramDtype !== context.modelDtype)
    problem(
      at,
      `needs the trainer to compute in the rollout engine's dtype: trainer.param_dtype is ${context.paramDtype}, model.dtype ${context.modelDtype}`,
    );
  for (const [key, device] of [
    ['trainer.device', trainer.device],
    ['explorer.rollout_model.device', context.rolloutDevice],
  ] as const)
    if (device.startsWith('cuda')) problem(at, `runs on the CPU (its fixed-order kernels are CPU kernels); ${key} is ${device}`);
  // the mode's forward takes the whole model on each rank (rows padded or packed: either layout keeps the bits)
  if (trainer.trainer_strategy === 'fsdp' || trainer.trainer_strategy === 'fsdp2')
    problem(
      at,
      `is not covered under trainer.trainer_strategy ${trainer.trainer_strategy} (parameters sharded): remove one of them`,
    );
}

/**
 * trainer.trainer_strategy fsdp/fsdp2 (./fsdp.ts): what it covers. A layer is gathered again for its backward, which
 * recomputes it (gradient checkpointing); ZeRO-1 is subsumed; Megatron is not implemented. (LoRA: the frozen base is
 * sharded, the adapters replicated, ./fsdp-trainer.ts.)
 */
export function checkTrainerStrategy(trainer: z.output<typeof TrainerSchema>, problem: ReportProblem): void {
  const strategy = trainer.trainer_strategy;
  if (strategy === 'megatron')
    problem(
      'trainer.trainer_strategy',
      'megatron (tensor and pipeline parallelism) is not implemented: use fsdp (parameters sharded over the ranks) or leave it unset (data parallelism)',
    );
  if (strategy !== 'fsdp' && strategy !== 'fsdp2') {
    for (const key of ['param_offload', 'optimizer_offload'] as const)
      if (trainer[key])
        problem(`trainer.${key}`, 'offloads the shards of trainer.trainer_strategy fsdp/fsdp2: set that too, or remove it');
    return;
  }
  if (!trainer.gradient_checkpointing)
    problem(
      'trainer.gradient_checkpointing',
      `false: trainer.trainer_strategy ${strategy} gathers each layer again for its backward, which recomputes it from its input: set true`,
    );
  if (trainer.zero_stage !== 0)
    problem(
      'trainer.zero_stage',
      `${trainer.zero_stage}: trainer.trainer_strategy ${strategy} already shards the optimizer state (and the parameters and gradients): remove zero_stage`,
    );
}

/** What stop_when's rules read from the rest of the stage. */
export interface StopWhenContext {
  /** False for the top level of a multi-stage file (it never runs by itself). */
  runnable: boolean;
  mode: StageMode;
  /** buffer.trainer_input.experience_buffer.storage_type. */
  storageType: string;
  /** The names of the eval tasksets. */
  evalTasksets: readonly string[];
}

/** trainer.stop_when: a train stage over a dataset evaluates between its steps and ends at the target. */
export function checkStopWhen(
  stopWhen: z.output<typeof StopWhenSchema> | null,
  { runnable, mode, storageType, evalTasksets }: StopWhenContext,
  problem: ReportProblem,
): void {
  if (stopWhen === null) return;
  const at = 'trainer.stop_when';
  if ((stopWhen.at_least === null) === (stopWhen.at_most === null))
    problem(at, 'give one of at_least or at_most: the value the metric must reach for the stage to end');
  if (runnable && (mode !== 'train' || storageType !== 'file'))
    problem(
      at,
      `ends a mode-train stage that learns from a dataset (storage_type file: SFT, DPO) early; this stage is mode ${mode}` +
        (mode === 'train' ? ` reading storage_type ${storageType}` : '') +
        ' (stopping explorers and trainer together is not implemented)',
    );
  const [scope, taskset, statistic] = stopWhen.metric.split('/');
  if (scope !== 'eval' || taskset === undefined || statistic === undefined || !/^(mean|best|worst|pass)@\d+$/.test(statistic))
    problem(`${at}.metric`, `'${stopWhen.metric}' is not an eval metric: write eval/<taskset>/<mean@k|best@k|worst@k|pass@k>`);
  else if (!evalTasksets.includes(taskset))
    problem(
      `${at}.metric`,
      `names eval taskset '${taskset}', which is not in buffer.explorer_input.eval_tasksets (${evalTasksets.join(', ') || 'none set'})`,
    );
}

/** The stage's trainer settings; `device`: trainer.device resolved where the trainer runs ('cpu' or 'cuda:N'). */
export function trainerSettings(trainer: TrainerConfig, device: string): StageSettings['trainer'] {
  const tokenBudget = trainer.max_token_len_per_gpu; // read either way: it is resolved (derived) either way
  return {
    saveInterval: trainer.save_interval > 0 ? trainer.save_interval : Number.MAX_SAFE_INTEGER,
    maxCheckpointsToKeep: trainer.max_checkpoints_to_keep,
    microBatchSize: trainer.micro_batch_size,
    microBatchTokens: trainer.use_dynamic_bsz ? tokenBudget : null,
    gradientCheckpointing: trainer.gradient_checkpointing,
    removePadding: trainer.use_remove_padding,
    paramDtype: trainer.param_dtype,
    masterDtype: trainer.master_dtype,
    device,
    distributedTimeoutMs: trainer.distributed_timeout * 1000,
    zeroStage: trainer.zero_stage,
    bitwiseOnPolicy: trainer.bitwise_on_policy,
    strategy: trainer.trainer_strategy === 'fsdp' || trainer.trainer_strategy === 'fsdp2' ? 'fsdp' : 'ddp',
    stopWhen: trainer.stop_when
      ? { metric: trainer.stop_when.metric, atLeast: trainer.stop_when.at_least, atMost: trainer.stop_when.at_most }
      : null,
  };
}
