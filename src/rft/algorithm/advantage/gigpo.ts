// GiGPO advantage — Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978).
// Trinity-RFT `advantage_fn: gigpo` (GiGPOAdvantageFn), for multi-step agents. A step of a run is either
//   - an experience of its own (Trinity's form, experience_mode step): groupIds task, runIds run, steps ordered by
//     info.stepIndex (else batch order), its reward info[step_reward_key], its state info[env_state_hash_key]; or
//   - one turn of an episode experience (experience_mode episode): info.step_spans lists each turn's reply as
//     [start, end) among the experience's response positions, and info[step_reward_key] / info[env_state_hash_key]
//     are arrays with one entry per turn. The turn's advantage goes on its reply's tokens only.
// A step experience's prompt is the whole conversation before it, so its reply is read in the same context as the
// same turn inside the episode experience: the tokens trained, their log-probs and their advantages are the same in
// both forms, and under token-mean loss aggregation so is the update (test/rft/trainer/gigpo-episode.test.ts); the
// episode form trains each token once where the step form re-reads the conversation once per step.
// Per run, step rewards r_t are the steps' own rewards when any step of the run has one (missing steps: 0), else the
// run's last step carries its reward. With norm(x)_i = (x_i − mean(x)) / (d + ε), d = std(x) (unbiased) if fnorm is
// std else 1, and a set of one giving mean 0, d 1:
//   episode:  A^E(run)  = norm over the runs of a task of Σ_t r_t
//   step:     R_t       = Σ_{k ≥ t} γ^{k−t} r_k                        (discounted return of the step)
//             A^S(step) = norm of R over the steps of the whole batch that share a state
//                         (anchor states; 0 for a step without one or alone in its anchor group)
//   A[token] = (A^E + ω · A^S) · mask[token], for the tokens of the step's reply
import * as torch from '../../../torch/index.js';
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

const average = (xs: readonly number[]): number => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);

/** One step of a run: a step experience, or one turn of an episode experience (see the header). */
interface RunStep {
  /** The batch row (experience) it belongs to. */
  row: number;
  /** [start, end) of its reply among the row's response positions; null: the whole row's response. */
  span: readonly [number, number] | null;
  /** Its order in its run. */
  order: number;
  state: unknown;
  /** Its own reward as written (undefined: none written). */
  reward: unknown;
}

/** The steps of batch row `row`: itself, or the turns its info.step_spans lists (checked against its action mask). */
function rowSteps(
  row: number,
  info: Readonly<Record<string, unknown>>,
  mask: Float32Array,
  width: number,
  o: GigpoAdvantageOptions,
): RunStep[] {
  const spans = info.step_spans;
  if (spans === undefined || spans === null) {
    const order = typeof info.stepIndex === 'number' ? info.stepIndex : 0;
    return [{ row, span: null, order, state: info[o.envStateHashKey], reward: info[o.stepRewardKey] }];
  }
  const where = `advantage_fn 'gigpo': experience ${row}`;
  if (!Array.isArray(spans))
    throw new Error(`${where}: info.step_spans must be a list of [start, end], got ${JSON.stringify(spans)}`);
  const perTurn = (key: string): readonly unknown[] | undefined => {
    const value = info[key];
    if (value === undefined || value === null) return undefined;
    if (!Array.isArray(value) || value.length !== spans.length) {
      throw new Error(
        `${where} has ${spans.length} info.step_spans, so info.${key} must list one per turn, got ${JSON.stringify(value)}`,
      );
    }
    return value;
  };
  const states = perTurn(o.envStateHashKey);
  const rewards = perTurn(o.stepRewardKey);
  const covered = new Uint8Array(width);
  const steps = spans.map((span: unknown, k): RunStep => {
    const [start, end] = Array.isArray(span) ? span : [];
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end < start) {
      throw new Error(`${where}: info.step_spans[${k}] must be [start, end) with 0 <= start <= end, got ${JSON.stringify(span)}`);
    }
    // a response cut to the batch's width keeps the turns' tokens inside it
    covered.fill(1, Math.min(start, width), Math.min(end, width));
    return { row, span: [start, end], order: k, state: states?.[k], reward: rewards?.[k] };
  });
  const stray = mask.findIndex((m, t) => m !== 0 && covered[t] === 0);
  if (stray >= 0) {
    throw new Error(`${where}: response token ${stray} is trained (action mask 1) but lies in none of its info.step_spans`);
  }
  return steps;
}

/** Every step of the batch's runs, row by row (rowSteps). */
function batchSteps(
  actionMask: AdvantageInput['actionMask'],
  width: number,
  infos: readonly Readonly<Record<string, unknown>>[],
  n: number,
  o: GigpoAdvantageOptions,
): RunStep[] {
  // the action masks come to the host only for episode experiences, whose spans are checked against them
  const hasSpans = infos.some((info) => info.step_spans !== undefined && info.step_spans !== null);
  const masks = hasSpans
    ? torch.scope(() => actionMask.to({ dtype: 'float32', device: 'cpu' }).toTypedArray() as Float32Array)
    : new Float32Array(0);
  return Array.from({ length: n }, (_, i) =>
    rowSteps(i, infos[i] ?? {}, masks.subarray(i * width, (i + 1) * width), width, o),
  ).flat();
}

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
  const width = input.actionMask.size(1);
  const steps = batchSteps(input.actionMask, width, infos, n, o);
  const normalize = (values: readonly number[]): { scores: number[]; mean: number; denom: number } => {
    if (values.length === 1) return { scores: values.map((v) => v / (1 + o.epsilon)), mean: 0, denom: 1 };
    const mean = average(values);
    const denom = o.fnorm === 'std' ? Math.sqrt(values.reduce((a, v) => a + (v - mean) ** 2, 0) / (values.length - 1)) : 1;
    return { scores: values.map((v) => (v - mean) / (denom + o.epsilon)), mean, denom };
  };

  // runs keyed by task, then run; each run's steps sorted by their order (stable: batch order among equals)
  const tasks = new Map<string, Map<string, RunStep[]>>();
  for (const step of steps) {
    const runs = tasks.get(String(taskIds[step.row])) ?? new Map<string, RunStep[]>();
    tasks.set(String(taskIds[step.row]), runs);
    const run = runs.get(String(runIds[step.row])) ?? [];
    runs.set(String(runIds[step.row]), run);
    run.push(step);
  }
  const episodeAdvantage = new Map<RunStep, number>();
  const discountedReturn = new Map<RunStep, number>();
  const episodeMeans: number[] = [];
  const episodeDenoms: number[] = [];
  for (const runs of tasks.values()) {
    const episodeReturns: number[] = [];
    const runSteps = [...runs.values()].map((run) => [...run].sort((a, b) => a.order - b.order));
    for (const run of runSteps) {
      const hasStepReward = run.some((step) => step.reward !== undefined && step.reward !== null);
      const stepRewards = run.map((step, k) => {
        if (hasStepReward) {
          const r = step.reward;
          if (r === undefined || r === null) return 0;
          if (typeof r !== 'number' || !Number.isFinite(r))
            throw new Error(`advantage_fn 'gigpo': info.${o.stepRewardKey} must be a finite number, got ${JSON.stringify(r)}`);
          return r;
        }
        return k === run.length - 1 ? (rewards[step.row] as number) : 0;
      });
      let running = 0;
      for (let k = run.length - 1; k >= 0; k--) {
        running = (stepRewards[k] as number) + o.gamma * running;
        discountedReturn.set(run[k] as RunStep, running);
      }
      episodeReturns.push(stepRewards.reduce((a, b) => a + b, 0));
    }
    const { scores, mean, denom } = normalize(episodeReturns);
    episodeMeans.push(mean);
    episodeDenoms.push(denom);
    runSteps.forEach((run, r) => {
      for (const step of run) episodeAdvantage.set(step, scores[r] as number);
    });
  }

  const anchors = new Map<string, RunStep[]>();
  for (const step of steps) {
    if (step.state === undefined || step.state === null) continue;
    const key = String(step.state);
    const members = anchors.get(key) ?? [];
    anchors.set(key, members);
    members.push(step);
  }
  const stepAdvantage = new Map<RunStep, number>();
  let sharedAnchors = 0;
  for (const members of anchors.values()) {
    if (members.length < 2) continue;
    sharedAnchors++;
    const { scores } = normalize(members.map((step) => discountedReturn.get(step) as number));
    members.forEach((step, k) => {
      stepAdvantage.set(step, scores[k] as number);
    });
  }

  // each step's score on its reply's tokens: the whole row's response, or its span
  const perToken = new Float64Array(n * width);
  for (const step of steps) {
    const score = (episodeAdvantage.get(step) as number) + o.omega * (stepAdvantage.get(step) ?? 0);
    const [start, end] = step.span ?? [0, width];
    perToken.fill(score, step.row * width + Math.min(start, width), step.row * width + Math.min(end, width));
  }
  const abs = (values: Iterable<number>) => average([...values].map(Math.abs));
  return torch.scope(() => {
    const { dtype, device } = rewardsTensor;
    const score = torch.tensor(perToken, { dtype: 'float64', shape: [n, width] }).to({ dtype, device });
    const advantages = score.mul(input.actionMask.to({ dtype, device }));
    return {
      advantages,
      returns: advantages.clone(),
      keep: torch.ones([n], { dtype: 'bool', device }),
      metrics: {
        'gigpo/episode_reward_mean': average(episodeMeans),
        'gigpo/episode_reward_std': average(episodeDenoms),
        'gigpo/anchor_groups_total': anchors.size,
        'gigpo/anchor_groups_size_gt1': sharedAnchors,
        'gigpo/anchor_group_hit_ratio': anchors.size > 0 ? sharedAnchors / anchors.size : 0,
        'gigpo/mean_abs_A_E': abs(episodeAdvantage.values()),
        'gigpo/mean_abs_A_S': abs(steps.map((step) => stepAdvantage.get(step) ?? 0)),
        'gigpo/steps_total': steps.length,
        experience_count: n,
      },
    };
  });
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
