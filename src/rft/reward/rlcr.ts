// rlcr_reward: RLCR's reward for stated confidence (Damani et al., "Beyond Binary Rewards: Training LMs to Reason About
// Their Uncertainty", arXiv 2507.16806; Trinity-RFT's RLCRRewardFn, the default reward of upstream's rlcr_math example).
// The response must end with the four-tag chain
//
//   <think>…</think><answer>…</answer><analysis>…</analysis><confidence>q</confidence>     q a number in [0, 1]
//
// with only whitespace between the blocks and after the last, and five weighted parts are summed into the reward:
//
//   format                  f = 1 when the chain is well formed (below), else 0
//   accuracy                a = 1 when f = 1 and the <answer> equals the reference, else 0
//   brier                   b = 1 − (a − q)²  when f = 1, else 0            (one minus the Brier score of q)
//   mean_confidence         c = the last closed <confidence> payload when it is a number in [0, 1], else 0
//   confidence_one_or_zero  e = 1 when that c exists and c < 0.01 or c > 0.99, else 0
//
//   reward = w_format·f + w_accuracy·a + w_brier·b + w_mean_confidence·c + w_confidence_one_or_zero·e
//
// with weights (reward_fn_args.weights, all five named when given) 0.5, 0.5, 0.5, 1e-5, 1e-5 by default; each weighted
// part is also a metric of that name. e.g. "…<answer>42</answer>…<confidence>0.8</confidence>" against 42:
// 0.5 + 0.5 + 0.5·(1 − 0.2²) + 1e-5·0.8 + 0 = 1.480008.
//
// Well formed: the reserved tags (<think>, <answer>, <analysis>, <confidence> and their closers, case-sensitive) never
// nest or cross anywhere in the response (earlier complete blocks are allowed: the last eight tags are the chain), and
// q parses as a finite number in [0, 1]. The answer is the <answer> payload's last \boxed{…}, else the payload, compared
// with the reference (its "####" part or \boxed{…}) as math_reward compares them (./math-answer.ts: exact numbers and
// normalised text; upstream uses math_verify's symbolic equivalence). A task without a reference is an error here
// (upstream scored it as a failed verification: accuracy and brier 0).
import type { Task } from '../task.js';
import { answersMatch, extractBoxed, extractReference } from './math-answer.js';
import type { RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';

/** The five parts, in the order the header lists them (the metric names and the keys of `weights`). */
export const RLCR_PARTS = ['format', 'accuracy', 'brier', 'mean_confidence', 'confidence_one_or_zero'] as const;
export type RlcrPart = (typeof RLCR_PARTS)[number];

export const RLCR_DEFAULT_WEIGHTS: Readonly<Record<RlcrPart, number>> = {
  format: 0.5,
  accuracy: 0.5,
  brier: 0.5,
  mean_confidence: 1e-5,
  confidence_one_or_zero: 1e-5,
};

const RESERVED_TAG = /<\/?(?:think|answer|analysis|confidence)>/g;
const CHAIN = ['<think>', '</think>', '<answer>', '</answer>', '<analysis>', '</analysis>', '<confidence>', '</confidence>'];

/** A confidence payload as a number in [0, 1] (surrounding whitespace allowed), else null. */
export function parseConfidence(payload: string): number | null {
  const text = payload.trim();
  // Python's float(): decimal or exponent notation; "inf"/"nan" are not finite and rejected below anyway
  if (!/^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/.test(text)) return null;
  const value = Number(text);
  return Number.isFinite(value) && value >= 0 && value <= 1 ? value : null;
}

/** The payload of the last closed <confidence> block as a confidence (none inside it: no reserved tag), else null. */
export function lastStatedConfidence(response: string): number | null {
  const open = response.lastIndexOf('<confidence>');
  const close = response.lastIndexOf('</confidence>');
  if (open < 0 || close < 0 || open > close) return null;
  const payload = response.slice(open + '<confidence>'.length, close);
  return new RegExp(RESERVED_TAG.source).test(payload) ? null : parseConfidence(payload);
}

/** The answer payload and confidence of a well-formed chain (see the header), else null. */
export function parseRlcrChain(response: string): { answer: string; confidence: number } | null {
  const tags = [...response.matchAll(RESERVED_TAG)];
  let open: string | null = null;
  for (const tag of tags) {
    const text = tag[0];
    const name = text.replace(/[</>]/g, '');
    if (text.startsWith('</')) {
      if (open !== name) return null;
      open = null;
    } else {
      if (open !== null) return null;
      open = name;
    }
  }
  if (open !== null || tags.length < CHAIN.length) return null;
  const chain = tags.slice(-CHAIN.length);
  if (chain.some((tag, i) => tag[0] !== CHAIN[i])) return null;
  const start = (i: number): number => (chain[i] as RegExpMatchArray).index as number;
  const end = (i: number): number => start(i) + (chain[i] as RegExpMatchArray)[0].length;
  for (const [close, next] of [
    [1, 2],
    [3, 4],
    [5, 6],
  ] as const) {
    if (response.slice(end(close), start(next)).trim() !== '') return null;
  }
  if (response.slice(end(7)).trim() !== '') return null;
  const confidence = parseConfidence(response.slice(end(6), start(7)));
  return confidence === null ? null : { answer: response.slice(end(2), start(3)), confidence };
}

/** The five unweighted parts of a response against its reference (see the header). */
export function rlcrParts(response: string, reference: string): Record<RlcrPart, number> {
  const stated = lastStatedConfidence(response);
  const chain = parseRlcrChain(response);
  let accuracy = 0;
  if (chain !== null) {
    const answer = (extractBoxed(chain.answer) ?? chain.answer).trim();
    accuracy = answersMatch(answer, extractReference(reference)) ? 1 : 0;
  }
  return {
    format: chain === null ? 0 : 1,
    accuracy,
    brier: chain === null ? 0 : 1 - (accuracy - chain.confidence) ** 2,
    mean_confidence: stated ?? 0,
    confidence_one_or_zero: stated !== null && (stated < 0.01 || stated > 0.99) ? 1 : 0,
  };
}

function reference(task: Task): string {
  if (typeof task.response !== 'string' || task.response.trim() === '')
    throw new Error(`rlcr_reward: task ${task.id} has no reference answer (the taskset's response_key)`);
  return task.response;
}

export const rlcrReward: RewardModule<{ weights: Record<string, unknown> }> = {
  name: 'rlcr_reward',
  description:
    'RLCR: format + accuracy of <answer> + Brier term of the stated <confidence> (+ two tiny confidence terms), weighted',
  defaults: { weights: { ...RLCR_DEFAULT_WEIGHTS } },
  check: ({ weights }, where) => {
    if (Array.isArray(weights) || weights === null)
      throw new Error(`${where}: argument 'weights' must be a mapping of ${RLCR_PARTS.join(', ')} to numbers`);
    const given = Object.keys(weights);
    const missing = RLCR_PARTS.filter((part) => !given.includes(part));
    const unknown = given.filter((key) => !(RLCR_PARTS as readonly string[]).includes(key));
    if (missing.length > 0 || unknown.length > 0)
      throw new Error(
        `${where}: argument 'weights' must name exactly ${RLCR_PARTS.join(', ')}` +
          `${missing.length > 0 ? `; missing ${missing.join(', ')}` : ''}${unknown.length > 0 ? `; unknown ${unknown.join(', ')}` : ''}`,
      );
    for (const part of RLCR_PARTS) {
      const value = weights[part];
      if (typeof value !== 'number' || !Number.isFinite(value))
        throw new Error(`${where}: weights.${part} must be a finite number, got ${JSON.stringify(value)}`);
    }
  },
  score: ({ response, task }, { weights }) => {
    const parts = rlcrParts(response, reference(task));
    const metrics: Record<string, number> = {};
    let reward = 0;
    for (const part of RLCR_PARTS) {
      metrics[part] = (weights[part] as number) * parts[part];
      reward += metrics[part];
    }
    return { reward, metrics };
  },
};

REWARD_FUNCTIONS.registerModule(rlcrReward);
