// Algorithm presets (`algorithm.algorithm_type`) as data — Trinity-RFT `trinity/algorithm/algorithm.py` (each
// AlgorithmType's flags and default_config()) — and `resolveAlgorithm`, which turns the YAML `algorithm:` section into
// the modules a trainer runs. A preset names one module per slot with default arguments:
//   sample_strategy → advantage_fn → policy_loss_fn (+ kl_loss_fn + entropy_loss_fn, aggregated by loss_agg_mode),
//   kl_penalty_fn (KL in the reward, before the advantage)
// plus flags: use_critic, use_reference, compute_advantage_in_trainer, schema (experience | sft | dpo | cpt) and the default
// repeat_times. Every slot and argument can be overridden in YAML; resolution fills in every module's defaults and
// checks every name and argument (errors name the key path and suggest the closest name).
//
// Where Python Trinity-RFT differs: `dr_grpo` is a preset here (there: grpo without std + a loss_agg_mode);
// `dapo`'s dynamic sampling and overlong penalty are the `dynamic_sampling` sample strategy (there: a pipeline filter
// and the reward function); `raft` filters rollouts with the `reward_filter` sample strategy (there: in the
// workflow); `dpo` keeps kl_loss_fn none (there: k2 is forced only so that verl computes reference log-probs).
import { ADVANTAGE_COMPUTE_IN_TRAINER } from './advantage/index.js';
import { isLossAggMode, LOSS_AGG_MODES, type LossAggMode } from './loss-agg.js';
import {
  algorithmProblemMessages,
  algorithmProblemsError,
  isPlainObject,
  type ModuleChoice,
  type ResolvedModule,
  resolveSlot,
  type Slot,
} from './module-slots.js';
import { policyLossAccumulation, policyLossModule } from './policy-loss/index.js';
import { didYouMean, resolveArgs } from './registry.js';
import { ROLLOUT_CORRECTION_DEFAULTS, ROLLOUT_IS_LEVELS, type RolloutCorrectionOptions } from './rollout-correction.js';

export type { ModuleChoice, ResolvedModule } from './module-slots.js';

export type AlgorithmSchema = 'experience' | 'sft' | 'dpo' | 'cpt';

export interface AlgorithmPreset {
  readonly description: string;
  readonly useCritic: boolean;
  readonly useReference: boolean;
  readonly computeAdvantageInTrainer: boolean;
  readonly schema: AlgorithmSchema;
  readonly repeatTimes: number;
  readonly sampleStrategy: ModuleChoice;
  /** null: the policy loss needs no advantages (sft, dpo, raft). */
  readonly advantageFn: ModuleChoice | null;
  readonly policyLossFn: ModuleChoice;
  readonly klPenaltyFn: ModuleChoice;
  readonly klLossFn: ModuleChoice;
  readonly entropyLossFn: ModuleChoice;
  readonly lossAggMode: LossAggMode;
}

const none: ModuleChoice = { name: 'none' };
const k2: ModuleChoice = { name: 'k2' };
const entropy: ModuleChoice = { name: 'default' };
const sampleDefault: ModuleChoice = { name: 'default' };

/** GRPO-style: no critic, a reference for the k2 KL loss, group advantages computed in the explorer, 2 repeats. */
const groupRelative = {
  useCritic: false,
  useReference: true,
  computeAdvantageInTrainer: false,
  schema: 'experience',
  repeatTimes: 2,
  sampleStrategy: sampleDefault,
  advantageFn: { name: 'grpo' },
  policyLossFn: { name: 'ppo' },
  klPenaltyFn: none,
  klLossFn: k2,
  entropyLossFn: entropy,
  lossAggMode: 'token-mean',
} as const satisfies Omit<AlgorithmPreset, 'description'>;

/** Supervised: no critic, no reference, no advantages. */
const supervised = {
  useCritic: false,
  useReference: false,
  computeAdvantageInTrainer: false,
  schema: 'sft',
  repeatTimes: 1,
  sampleStrategy: sampleDefault,
  advantageFn: null,
  policyLossFn: { name: 'sft' },
  klPenaltyFn: none,
  klLossFn: none,
  entropyLossFn: none,
  lossAggMode: 'token-mean',
} as const satisfies Omit<AlgorithmPreset, 'description'>;

export const ALGORITHM_PRESETS = {
  ppo: {
    ...groupRelative,
    description: 'PPO with a critic and GAE (arXiv 1707.06347)',
    useCritic: true,
    computeAdvantageInTrainer: true,
    repeatTimes: 1,
    advantageFn: { name: 'ppo' },
  },
  grpo: { ...groupRelative, description: 'GRPO: group-normalised rewards, clipped surrogate (arXiv 2402.03300)' },
  dr_grpo: {
    ...groupRelative,
    description: 'Dr. GRPO: no std division, constant loss normaliser, no KL (arXiv 2503.20783)',
    useReference: false,
    advantageFn: { name: 'dr_grpo' },
    klLossFn: none,
    lossAggMode: 'seq-mean-token-sum-norm',
  },
  dapo: {
    ...groupRelative,
    description: 'DAPO: clip-higher, token-mean, dynamic sampling, overlong penalty, no KL (arXiv 2503.14476)',
    useReference: false,
    repeatTimes: 16,
    sampleStrategy: { name: 'dynamic_sampling', args: { max_response_length: 20480, overlong_buffer_len: 4096 } },
    policyLossFn: { name: 'ppo', args: { clip_range_low: 0.2, clip_range_high: 0.28 } },
    klLossFn: none,
  },
  gspo: {
    ...groupRelative,
    description: 'GSPO: clipped sequence-level ratio (arXiv 2507.18071)',
    policyLossFn: { name: 'gspo' },
    lossAggMode: 'seq-mean-token-mean',
  },
  cispo: {
    ...groupRelative,
    description: 'CISPO: clipped IS-weight policy gradient (MiniMax-M1, arXiv 2506.13585)',
    policyLossFn: { name: 'cispo' },
  },
  sapo: {
    ...groupRelative,
    description: 'SAPO: soft adaptive gate instead of a hard clip',
    policyLossFn: { name: 'sapo' },
  },
  rloo: {
    ...groupRelative,
    description: 'RLOO: leave-one-out baseline (arXiv 2402.14740)',
    computeAdvantageInTrainer: true,
    advantageFn: { name: 'rloo' },
  },
  reinforceplusplus: {
    ...groupRelative,
    description: 'REINFORCE++: batch-whitened discounted returns (arXiv 2501.03262)',
    computeAdvantageInTrainer: true,
    advantageFn: { name: 'reinforceplusplus' },
  },
  opmd: {
    ...groupRelative,
    description: 'OPMD: online policy mirror descent (Trinity-RFT, arXiv 2505.17826)',
    advantageFn: { name: 'opmd' },
    policyLossFn: { name: 'opmd' },
  },
  asymre: {
    ...groupRelative,
    description: 'AsymRE: shifted group baseline, no KL (arXiv 2506.20520)',
    useReference: false,
    advantageFn: { name: 'asymre' },
    policyLossFn: { name: 'opmd' },
    klLossFn: none,
    entropyLossFn: none,
  },
  topr: {
    ...groupRelative,
    description: 'TOPR: tapered off-policy REINFORCE (arXiv 2503.14286)',
    advantageFn: { name: 'reinforce' },
    policyLossFn: { name: 'topr' },
  },
  sppo: {
    ...groupRelative,
    description: 'sPPO: advantage times log-ratio inside a ratio band (arXiv 2108.05828)',
    useReference: false,
    advantageFn: { name: 'opmd' },
    policyLossFn: { name: 'sppo' },
    klLossFn: none,
    entropyLossFn: none,
  },
  rec: {
    ...groupRelative,
    description: 'REC: group-relative REINFORCE with clipping variants (arXiv 2509.24203)',
    advantageFn: { name: 'rec' },
    policyLossFn: { name: 'rec' },
  },
  multi_step_grpo: {
    ...groupRelative,
    description: "GRPO for multi-step agents: each run's last-step advantage on all its steps",
    repeatTimes: 8,
    advantageFn: { name: 'step_wise_grpo' },
  },
  sft: { ...supervised, description: 'supervised fine-tuning: NLL of the response tokens' },
  cpt: {
    ...supervised,
    description: 'continued pre-training: NLL of every token of plain-text rows, no chat template (Trinity-RFT v0.6)',
    schema: 'cpt',
  },
  dpo: {
    ...supervised,
    description: 'DPO on chosen/rejected pairs against a frozen reference (arXiv 2305.18290)',
    useReference: true,
    schema: 'dpo',
    repeatTimes: 2,
    policyLossFn: { name: 'dpo' },
  },
  mix: {
    ...groupRelative,
    description: 'MIX: GRPO on rollouts + SFT on expert data in one batch',
    repeatTimes: 8,
    sampleStrategy: { name: 'mix' },
    policyLossFn: { name: 'mix' },
    entropyLossFn: { name: 'mix' },
  },
  mix_chord: {
    ...groupRelative,
    description: 'CHORD: GRPO + mu-scheduled, phi-weighted SFT on expert data (arXiv 2508.11408)',
    repeatTimes: 8,
    sampleStrategy: { name: 'mix' },
    policyLossFn: { name: 'mix_chord' },
    entropyLossFn: { name: 'mix' },
  },
  raft: {
    ...supervised,
    description: 'RAFT: SFT on the best-rewarded rollout of each task (arXiv 2304.06767)',
    schema: 'experience',
    repeatTimes: 4,
    sampleStrategy: { name: 'reward_filter' },
  },
  grpo_verl: {
    ...groupRelative,
    description: 'GRPO with the group advantage computed in the trainer (verl)',
    computeAdvantageInTrainer: true,
    advantageFn: { name: 'grpo_verl' },
  },
  gigpo: {
    ...groupRelative,
    description: 'GiGPO: episode and anchor-state step advantages for multi-step agents (arXiv 2505.10978)',
    repeatTimes: 8,
    advantageFn: { name: 'gigpo' },
  },
  m2po: {
    ...groupRelative,
    description: 'M2PO: second-moment trust region for stale rollouts, no KL (Trinity-RFT issue 615)',
    useReference: false,
    repeatTimes: 8,
    policyLossFn: { name: 'm2po' },
    klLossFn: none,
    entropyLossFn: none,
  },
  jsd: {
    ...groupRelative,
    description: 'on-policy distillation with a generalised Jensen-Shannon advantage (arXiv 2306.13649)',
    useReference: false,
    computeAdvantageInTrainer: true,
    repeatTimes: 8,
    advantageFn: { name: 'jsd', args: { kl_coef: 1.0, lambda_coef: 0.5 } },
    klLossFn: none,
    entropyLossFn: none,
  },
  on_policy_distill: {
    ...groupRelative,
    description: 'on-policy distillation: advantage = teacher - student log-prob per token (arXiv 2306.13649)',
    useReference: false,
    computeAdvantageInTrainer: true,
    repeatTimes: 8,
    advantageFn: { name: 'on_policy_distill' },
    klLossFn: none,
    entropyLossFn: none,
  },
} as const satisfies Record<string, AlgorithmPreset>;

export type AlgorithmType = keyof typeof ALGORITHM_PRESETS;

/** Other spellings accepted for algorithm_type. */
export const ALGORITHM_ALIASES: Readonly<Record<string, AlgorithmType>> = {
  reinforce_plus_plus: 'reinforceplusplus',
  chord: 'mix_chord',
  drgrpo: 'dr_grpo',
};

export const ALGORITHM_TYPES = Object.keys(ALGORITHM_PRESETS) as AlgorithmType[];

/** The YAML `algorithm:` section, as it arrives (Trinity-RFT's key names). */
export interface AlgorithmConfig {
  algorithm_type?: string;
  repeat_times?: number;
  sample_strategy?: string;
  sample_strategy_args?: Record<string, unknown>;
  advantage_fn?: string | null;
  advantage_fn_args?: Record<string, unknown>;
  policy_loss_fn?: string;
  policy_loss_fn_args?: Record<string, unknown>;
  kl_penalty_fn?: string;
  kl_penalty_fn_args?: Record<string, unknown>;
  kl_loss_fn?: string;
  kl_loss_fn_args?: Record<string, unknown>;
  entropy_loss_fn?: string;
  entropy_loss_fn_args?: Record<string, unknown>;
  loss_agg_mode?: string;
  optimizer?: Record<string, unknown>;
  bypass_old_logprobs?: boolean;
  enable_router_replay?: boolean;
  rollout_correction?: Record<string, unknown>;
}

/** Trinity-RFT's `algorithm.optimizer` (OptimizerConfig), camelCased. */
export interface OptimizerConfig {
  lr: number;
  lrWarmupSteps: number;
  lrWarmupStepsRatio: number;
  minLrRatio: number;
  lrSchedulerType: string;
  optimizerType: string;
  betas: number[];
  weightDecay: number;
  /** Max global gradient norm (clip_grad). */
  clipGrad: number;
}

export const OPTIMIZER_DEFAULTS: Readonly<OptimizerConfig> = {
  lr: 1e-6,
  lrWarmupSteps: -1,
  lrWarmupStepsRatio: 0.0,
  minLrRatio: 0.01,
  lrSchedulerType: 'constant',
  optimizerType: 'adam',
  betas: [0.9, 0.999],
  weightDecay: 0.01,
  clipGrad: 1.0,
};

export interface ResolvedAlgorithm {
  readonly algorithmType: AlgorithmType;
  readonly repeatTimes: number;
  /** The advantage function is ppo (GAE needs critic values). */
  readonly useCritic: boolean;
  /** Some module reads reference log-probs (a KL function other than none, or a policy loss that needsReference). */
  readonly useReference: boolean;
  /** The advantage function's compute_in_trainer (false: an explorer pipeline operator computes it). */
  readonly computeAdvantageInTrainer: boolean;
  readonly schema: AlgorithmSchema;
  readonly sampleStrategy: ResolvedModule;
  readonly advantageFn: ResolvedModule | null;
  readonly policyLossFn: ResolvedModule;
  readonly klPenaltyFn: ResolvedModule;
  readonly klLossFn: ResolvedModule;
  readonly entropyLossFn: ResolvedModule;
  readonly lossAggMode: LossAggMode;
  readonly optimizer: Readonly<OptimizerConfig>;
  /**
   * Trinity-RFT `bypass_old_logprobs` (default true): the rollout's log-probs are the old log-probs. false: the
   * trainer recomputes them with its current weights before the update (no gradient); rows without rollout log-probs
   * take the current policy's either way.
   */
  readonly bypassOldLogprobs: boolean;
  /**
   * Trinity-RFT `enable_router_replay` (default false; mixture-of-experts policies only): the engine records each
   * token's chosen experts (Experience.routedExperts) and the trainer's forwards route those tokens through them
   * (../trainer/router-replay.ts).
   */
  readonly routerReplay: boolean;
  /** verl / Trinity-RFT `rollout_correction`: truncated IS weights of the rollout/training mismatch. */
  readonly rolloutCorrection: Readonly<RolloutCorrectionOptions>;
}

const CONFIG_KEYS = [
  'algorithm_type',
  'repeat_times',
  'sample_strategy',
  'sample_strategy_args',
  'advantage_fn',
  'advantage_fn_args',
  'policy_loss_fn',
  'policy_loss_fn_args',
  'kl_penalty_fn',
  'kl_penalty_fn_args',
  'kl_loss_fn',
  'kl_loss_fn_args',
  'entropy_loss_fn',
  'entropy_loss_fn_args',
  'loss_agg_mode',
  'optimizer',
  'bypass_old_logprobs',
  'enable_router_replay',
  'rollout_correction',
] as const;

/** The preset of an algorithm_type (aliases accepted), or an error with the closest name. */
export function algorithmPreset(algorithmType: string, where = 'algorithm.algorithm_type'): AlgorithmPreset {
  const name = (ALGORITHM_ALIASES[algorithmType] ?? algorithmType) as AlgorithmType;
  if (!Object.hasOwn(ALGORITHM_PRESETS, name)) {
    throw new Error(
      `${where}: unknown algorithm '${algorithmType}'${didYouMean(algorithmType, [...ALGORITHM_TYPES, ...Object.keys(ALGORITHM_ALIASES)])}; ` +
        `expected one of ${ALGORITHM_TYPES.join(', ')}`,
    );
  }
  return ALGORITHM_PRESETS[name];
}

/** algorithm.rollout_correction: its arguments, checked (IS weights need a loss linear in the advantages). */
function resolveRolloutCorrection(value: unknown, policyLossName: string): ResolvedAlgorithm['rolloutCorrection'] {
  const correctionValue = value ?? {};
  if (!isPlainObject(correctionValue)) {
    throw new Error(`algorithm.rollout_correction: expected a mapping, got ${JSON.stringify(correctionValue)}`);
  }
  const rolloutCorrection = resolveArgs('algorithm.rollout_correction', ROLLOUT_CORRECTION_DEFAULTS, correctionValue);
  if (rolloutCorrection.rolloutIs !== null && !ROLLOUT_IS_LEVELS.includes(rolloutCorrection.rolloutIs)) {
    throw new Error(
      `algorithm.rollout_correction.rollout_is: expected token, sequence or null, got ${JSON.stringify(rolloutCorrection.rolloutIs)}`,
    );
  }
  if (!(rolloutCorrection.rolloutIsThreshold > 0)) {
    throw new Error(
      `algorithm.rollout_correction.rollout_is_threshold: must be > 0, got ${rolloutCorrection.rolloutIsThreshold}`,
    );
  }
  if (rolloutCorrection.rolloutIs !== null && policyLossModule(policyLossName).linearInAdvantages !== true) {
    throw new Error(
      `algorithm.rollout_correction.rollout_is: policy_loss_fn '${policyLossName}' does not take per-token IS weights ` +
        '(its loss is not proportional to the advantage); use ppo, gspo, cispo, sapo, importance_sampling or m2po',
    );
  }
  return rolloutCorrection;
}

/**
 * The algorithm a trainer runs: the preset of `algorithm_type` (default ppo, as Trinity-RFT) with every slot,
 * argument and flag that `config` sets; every argument filled from the module's defaults. loss_agg_mode is passed to
 * the policy loss and the entropy loss unless their args set it. Throws on unknown keys, names, arguments, and bad
 * values, naming the key path (algorithm.policy_loss_fn_args.clip_range) and the closest valid name; the module
 * slots' problems all at once (an AggregateError, ./module-slots.ts).
 */
export function resolveAlgorithm(config: unknown = {}): ResolvedAlgorithm {
  if (!isPlainObject(config)) throw new Error(`algorithm: expected a mapping, got ${JSON.stringify(config)}`);
  for (const key of Object.keys(config)) {
    if (!(CONFIG_KEYS as readonly string[]).includes(key)) {
      throw new Error(`algorithm.${key}: unknown key${didYouMean(key, CONFIG_KEYS)}; expected one of ${CONFIG_KEYS.join(', ')}`);
    }
  }
  const typeValue = config.algorithm_type ?? 'ppo';
  if (typeof typeValue !== 'string')
    throw new Error(`algorithm.algorithm_type: expected a string, got ${JSON.stringify(typeValue)}`);
  const preset = algorithmPreset(typeValue);
  const algorithmType = (ALGORITHM_ALIASES[typeValue] ?? typeValue) as AlgorithmType;

  const lossAggMode = config.loss_agg_mode ?? preset.lossAggMode;
  if (typeof lossAggMode !== 'string' || !isLossAggMode(lossAggMode)) {
    throw new Error(
      `algorithm.loss_agg_mode: unknown mode ${JSON.stringify(lossAggMode)}${
        typeof lossAggMode === 'string' ? didYouMean(lossAggMode, LOSS_AGG_MODES) : ''
      }; expected one of ${LOSS_AGG_MODES.join(', ')}`,
    );
  }

  // every slot is resolved before any problem is thrown, so that one run reports the bad arguments of all of them
  const inject = { lossAggMode };
  const slotProblems: string[] = [];
  const slot = (name: Slot, choice: ModuleChoice | null, injected?: Record<string, unknown>): ResolvedModule | null => {
    try {
      return resolveSlot(config, algorithmType, name, choice, injected);
    } catch (error) {
      slotProblems.push(...algorithmProblemMessages(error));
      return null;
    }
  };
  const sampleStrategy = slot('sample_strategy', preset.sampleStrategy) as ResolvedModule;
  const advantageFn = slot('advantage_fn', preset.advantageFn);
  const policyLossFn = slot('policy_loss_fn', preset.policyLossFn, inject) as ResolvedModule;
  const klPenaltyFn = slot('kl_penalty_fn', preset.klPenaltyFn) as ResolvedModule;
  const klLossFn = slot('kl_loss_fn', preset.klLossFn) as ResolvedModule;
  const entropyLossFn = slot('entropy_loss_fn', preset.entropyLossFn, inject) as ResolvedModule;
  if (slotProblems.length > 0) throw algorithmProblemsError(slotProblems);

  const repeatTimes = config.repeat_times ?? preset.repeatTimes;
  if (typeof repeatTimes !== 'number' || !Number.isInteger(repeatTimes) || repeatTimes < 1) {
    throw new Error(`algorithm.repeat_times: expected a positive integer, got ${JSON.stringify(repeatTimes)}`);
  }
  if (preset.schema === 'dpo' && repeatTimes !== 2) {
    throw new Error(`algorithm.repeat_times: ${algorithmType} needs 2 (a chosen and a rejected response), got ${repeatTimes}`);
  }
  const schema = preset.schema;
  if (schema === 'dpo' && policyLossAccumulation(policyLossFn.name, policyLossFn.args, lossAggMode).rowsPerGroup !== 2) {
    throw new Error(
      `algorithm.policy_loss_fn: ${algorithmType} trains on chosen/rejected pairs and needs a loss over row pairs ` +
        `(such as 'dpo'), got '${policyLossFn.name}'`,
    );
  }
  const useCritic = advantageFn?.name === 'ppo';
  const useReference =
    klLossFn.name !== 'none' || klPenaltyFn.name !== 'none' || policyLossModule(policyLossFn.name).needsReference === true;
  const computeAdvantageInTrainer = advantageFn === null ? false : (ADVANTAGE_COMPUTE_IN_TRAINER[advantageFn.name] ?? true);

  const optimizerValue = config.optimizer ?? {};
  if (!isPlainObject(optimizerValue)) {
    throw new Error(`algorithm.optimizer: expected a mapping, got ${JSON.stringify(optimizerValue)}`);
  }
  const optimizer = resolveArgs('algorithm.optimizer', OPTIMIZER_DEFAULTS, optimizerValue);
  if (!(optimizer.lr > 0)) throw new Error(`algorithm.optimizer.lr: must be > 0, got ${optimizer.lr}`);
  if (!(optimizer.clipGrad > 0)) throw new Error(`algorithm.optimizer.clip_grad: must be > 0, got ${optimizer.clipGrad}`);

  const bypassOldLogprobs = config.bypass_old_logprobs ?? true;
  if (typeof bypassOldLogprobs !== 'boolean') {
    throw new Error(`algorithm.bypass_old_logprobs: expected true or false, got ${JSON.stringify(bypassOldLogprobs)}`);
  }
  if (!bypassOldLogprobs && policyLossFn.name === 'm2po') {
    throw new Error(
      "algorithm.bypass_old_logprobs: policy_loss_fn 'm2po' measures the log-ratio to the rollout policy; keep it true",
    );
  }
  const routerReplay = config.enable_router_replay ?? false;
  if (typeof routerReplay !== 'boolean') {
    throw new Error(`algorithm.enable_router_replay: expected true or false, got ${JSON.stringify(routerReplay)}`);
  }
  const rolloutCorrection = resolveRolloutCorrection(config.rollout_correction, policyLossFn.name);

  return {
    algorithmType,
    repeatTimes,
    useCritic,
    useReference,
    computeAdvantageInTrainer,
    schema,
    sampleStrategy,
    advantageFn,
    policyLossFn,
    klPenaltyFn,
    klLossFn,
    entropyLossFn,
    lossAggMode,
    optimizer,
    bypassOldLogprobs,
    routerReplay,
    rolloutCorrection,
  };
}
