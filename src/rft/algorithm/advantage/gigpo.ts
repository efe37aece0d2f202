// GiGPO advantage — Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978).
// Trinity-RFT `advantage_fn: gigpo` (GiGPOAdvantageFn), for multi-step agents: each experience is one step of a run
// (groupIds: task, runIds: run; steps ordered by info.stepIndex, else batch order). Per run, step rewards r_t are
// info[step_reward_key] when any step of the run has one (missing steps: 0), else the run's last step carries its
// reward. With norm(x)_i = (x_i − mean(x)) / (d + ε), d = std(x) (unbiased) if fnorm is std else 1, and a set of one
// giving mean 0, d 1:
//   episode:  A^E(run)  = norm over the runs of a task of Σ_t r_t
//   step:     R_t       = Σ_{k ≥ t} γ^{k−t} r_k                        (discounted return of the step)
//             A^S(step) = norm of R over the steps of the whole batch that share info[env_state_hash_key]
//                         (anchor states; 0 for a step without a key or alone in its anchor group)
//   A[step, t] = (A^E + ω · A^S) · mask[step, t]
import * as torch from '../../../torch/index.js';
import { scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface GigpoAdvantageOptions {
  /** ω: weight of the anchor-state (step) advantage. */
  omega: number;
  /** γ of the discounted step returns. */
  gamma: number;
  /** 'std' divides by the unbiased std, 'none' by 1. */
  fnorm: 'std' | 'none';
  epsilon: number;
  /** info key of a step's own reward. */
  stepRewardKey: string;
  /** info key of the hash of the environment state the step acted in. */
  envStateHashKey: string;
}

export const GIGPO_ADVANTAGE_DEFAULTS: Readonly<GigpoAdvantageOptions> = {
  omega: 1.0,
  gamma: 1.0,
  fnorm: 'none',
  epsilon: 1e-6,
  stepRewardKey: 'step_reward',
  envStateHashKey: 'env_state_hash',
};

const average = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

export function computeGigpoAdvantages(input: AdvantageInput, options: Partial<GigpoAdvantageOptions> = {}): AdvantageResult {
  const o = { ...GIGPO_ADVANTAGE_DEFAULTS, ...options };
  if (o.fnorm !== 'std' && o.fnorm !== 'none') {
    throw new Error(`advantage_fn 'gigpo': fnorm must be std or none, got '${String(o.fnorm)}'`);
  }
  const rewardsTensor = requireField(input, 'rewards', 'gigpo');
  const taskIds = requireField(input, 'groupIds', 'gigpo');
  const runIds = requireField(input, 'runIds', 'gigpo');
  const infos = input.infos ?? [];
  const rewards = torch.scope(() => rewardsTensor.to({ dtype: 'float64', device: 'cpu' }).toTypedArray() as Float64Array);
  const n = rewards.length;
  if (taskIds.length !== n || runIds.length !== n || (input.infos !== undefined && infos.length !== n)) {
    throw new Error(
      `advantage_fn 'gigpo': ${n} rewards, ${taskIds.length} groupIds, ${runIds.length} runIds, ${infos.length} infos`,
    );
  }
  const info = (i: number) => infos[i] ?? {};
  const normalize = (values: readonly number[]): { scores: number[]; mean: number; denom: number } => {
    if (values.length === 1) return { scores: values.map((v) => v / (1 + o.epsilon)), mean: 0, denom: 1 };
    const mean = average(values);
    const denom = o.fnorm === 'std' ? Math.sqrt(values.reduce((a, v) => a + (v - mean) ** 2, 0) / (values.length - 1)) : 1;
    return { scores: values.map((v) => (v - mean) / (denom + o.epsilon)), mean, denom };
  };

  // runs keyed by task, then run; each run's steps sorted by stepIndex (stable: batch order among equals)
  const tasks = new Map<string, Map<string, number[]>>();
  for (let i = 0; i < n; i++) {
    const runs = tasks.get(String(taskIds[i])) ?? new Map<string, number[]>();
    tasks.set(String(taskIds[i]), runs);
    const steps = runs.get(String(runIds[i])) ?? [];
    runs.set(String(runIds[i]), steps);
    steps.push(i);
  }
  const stepOf = (i: number) => {
    const s = info(i).stepIndex;
    return typeof s === 'number' ? s : 0;
  };
  const episodeAdvantage = new Float64Array(n);
  const discountedReturn = new Float64Array(n);
  const episodeMeans: number[] = [];
  const episodeDenoms: number[] = [];
  for (const runs of tasks.values()) {
    const episodeReturns: number[] = [];
    const runSteps = [...runs.values()].map((steps) => [...steps].sort((a, b) => stepOf(a) - stepOf(b) || a - b));
    for (const steps of runSteps) {
      const hasStepReward = steps.some((i) => info(i)[o.stepRewardKey] !== undefined);
      const stepRewards = steps.map((i, k) => {
        if (hasStepReward) {
          const r = info(i)[o.stepRewardKey];
          if (r === undefined) return 0;
          if (typeof r !== 'number' || !Number.isFinite(r))
            throw new Error(`advantage_fn 'gigpo': info.${o.stepRewardKey} must be a finite number, got ${JSON.stringify(r)}`);
          return r;
        }
        return k === steps.length - 1 ? (rewards[i] as number) : 0;
      });
      let running = 0;
      for (let k = steps.length - 1; k >= 0; k--) {
        running = (stepRewards[k] as number) + o.gamma * running;
        discountedReturn[steps[k] as number] = running;
      }
      episodeReturns.push(stepRewards.reduce((a, b) => a + b, 0));
    }
    const { scores, mean, denom } = normalize(episodeReturns);
    episodeMeans.push(mean);
    episodeDenoms.push(denom);
    runSteps.forEach((steps, r) => {
      for (const i of steps) episodeAdvantage[i] = scores[r] as number;
    });
  }

  const anchors = new Map<string, number[]>();
  for (let i = 0; i < n; i++) {
    const hash = info(i)[o.envStateHashKey];
    if (hash === undefined || hash === null) continue;
    const key = String(hash);
    anchors.set(key, [...(anchors.get(key) ?? []), i]);
  }
  const stepAdvantage = new Float64Array(n);
  let sharedAnchors = 0;
  for (const members of anchors.values()) {
    if (members.length < 2) continue;
    sharedAnchors++;
    const { scores } = normalize(members.map((i) => discountedReturn[i] as number));
    members.forEach((i, k) => {
      stepAdvantage[i] = scores[k] as number;
    });
  }

  const score = episodeAdvantage.map((a, i) => a + o.omega * (stepAdvantage[i] as number));
  const abs = (xs: Float64Array) => average([...xs].map(Math.abs));
  return torch.scope(() =>
    scoresToResult(
      torch.tensor(score, { dtype: 'float64' }).to({ dtype: rewardsTensor.dtype, device: rewardsTensor.device }),
      input.actionMask,
      torch.ones([n], { dtype: 'bool', device: rewardsTensor.device }),
      {
        'gigpo/episode_reward_mean': average(episodeMeans),
        'gigpo/episode_reward_std': average(episodeDenoms),
        'gigpo/anchor_groups_total': anchors.size,
        'gigpo/anchor_groups_size_gt1': sharedAnchors,
        'gigpo/anchor_group_hit_ratio': anchors.size > 0 ? sharedAnchors / anchors.size : 0,
        'gigpo/mean_abs_A_E': abs(episodeAdvantage),
        'gigpo/mean_abs_A_S': abs(stepAdvantage),
        experience_count: n,
      },
    ),
  );
}

export const gigpoAdvantage: AdvantageModule<GigpoAdvantageOptions> = {
  name: 'gigpo',
  description: 'episode-level GRPO plus anchor-state step-level advantages for agents (GiGPO, arXiv 2505.10978)',
  defaults: GIGPO_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  stateKey: (options) => options.envStateHashKey,
  run: computeGigpoAdvantages,
};

ADVANTAGE_FN.register(gigpoAdvantage);
