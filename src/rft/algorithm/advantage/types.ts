// What advantage functions take and give. One row per experience (a response, or one step of a multi-step run).
import type { Generator, Tensor } from '../../../torch/index.js';
import type { AlgorithmModule } from '../registry.js';

/** A task id or run id; experiences with equal ids form a group. */
export type GroupId = string | number;

export interface AdvantageInput {
  /** [B, T]: 1 (or true) on the response tokens the policy produced. */
  actionMask: Tensor;
  /** [B]: one scalar (outcome) reward per experience. Group functions fall back to tokenLevelRewards.sum(-1). */
  rewards?: Tensor;
  /** [B, T]: per-token rewards (ppo, reinforceplusplus, remax); the outcome reward usually sits on the last token. */
  tokenLevelRewards?: Tensor;
  /** Task id per experience (Trinity-RFT `eid.task`): the responses to one prompt. */
  groupIds?: readonly GroupId[];
  /** Run id per experience (`eid.run`, step_wise_grpo): the steps of one run, in step order. */
  runIds?: readonly GroupId[];
  /** [B, T]: critic values (ppo / GAE). */
  values?: Tensor;
  /** [B]: reward of the greedy response to the same prompt (remax). */
  rewardBaselines?: Tensor;
  /** [B, T]: log-probs of the sampling policy (on_policy_distill). */
  logprobs?: Tensor;
  /** [B, T]: log-probs of the teacher on the same tokens (on_policy_distill). */
  teacherLogprobs?: Tensor;
  /** [B, T]: entropy of the current policy at each response position (clipb, clipv). */
  entropy?: Tensor;
  /** [B, T]: N = Σ_v p_v² (H + log p_v) of the current policy at each response position (clipv; model/training.ts). */
  necs?: Tensor;
  /** Each experience's info (Trinity-RFT `exp.info`): step rewards and state keys by name (gigpo). */
  infos?: readonly Readonly<Record<string, unknown>>[];
  /** Random source for modules that sample (rec drop: balance; grpo duplicate_experiences). */
  generator?: Generator;
}

export interface AdvantageResult {
  /** [B, T], zero outside the action mask (except ppo, whose whitened advantages are only meaningful inside it). */
  advantages: Tensor;
  /** [B, T]: value targets (ppo) or a copy of the advantages. */
  returns: Tensor;
  /** [B] bool: false for experiences the function drops (std_threshold, rec balance); their advantages are 0. */
  keep: Tensor;
  metrics: Record<string, number>;
  /** [B, T]: the tokens to train on, when the function filters tokens (clipb, clipv); absent: input.actionMask. */
  actionMask?: Tensor;
  /** [D] int64: input rows appended once more after the kept ones (grpo duplicate_experiences refills dropped groups). */
  duplicates?: Tensor;
}

export type AdvantageModule<Options extends object> = AlgorithmModule<AdvantageInput, Options, AdvantageResult> & {
  /** Trinity-RFT `compute_in_trainer()`: false for group functions that run as an explorer pipeline operator. */
  readonly computeInTrainer: boolean;
  /** The function reads input.entropy, so the trainer runs the current policy over the batch first (clipb). */
  readonly needsEntropy?: boolean;
  /** The function reads input.necs too, from the same pass (clipv). */
  readonly needsNecs?: boolean;
  /**
   * The info key each step names the environment state it acted from by, which the function groups steps by (gigpo:
   * env_state_hash_key). A run refuses a built-in workflow that writes none; a batch with none is warned about.
   */
  readonly stateKey?: (options: Options) => string;
};

export function requireField<K extends keyof AdvantageInput>(
  input: AdvantageInput,
  field: K,
  module: string,
): NonNullable<AdvantageInput[K]> {
  const value = input[field];
  if (value === undefined || value === null) throw new Error(`advantage_fn '${module}' needs input.${String(field)}`);
  return value as NonNullable<AdvantageInput[K]>;
}
