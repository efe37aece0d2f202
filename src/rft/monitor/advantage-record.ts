// The advantages a stage trained with, beside its rollouts: <stage>/trainer_advantages.jsonl, one line per train step,
//
//   {"step": 3, "advantages": {"<eid>": -0.57, "<eid>": 1.15, ...}}
//
// each experience's advantage as the trainer used it: the mean over its response tokens of A[t] (action mask 1),
// before rollout IS weights (src/rft/trainer/loss-inputs.ts rowAdvantages). Algorithms whose advantages are computed in
// the trainer (GRPO and every group estimator) store none in the experience buffer; the Studio joins this file with
// the buffer's rows by experience id (src/studio/rollouts.ts). A resumed stage cuts it back like metrics.jsonl.
import { appendFileSync } from 'node:fs';

export const ADVANTAGES_FILE = 'trainer_advantages.jsonl';

/** Appends train step `step`'s advantages (experience id → advantage) to `file`; nothing when there are none. */
export function appendAdvantages(file: string, step: number, advantages: ReadonlyMap<string, number>): void {
  if (advantages.size === 0) return;
  appendFileSync(file, `${JSON.stringify({ step, advantages: Object.fromEntries(advantages) })}\n`);
}

/** One line of the file: its experience ids and advantages (a non-finite advantage, written as null, is left out). */
export function parseAdvantageLine(value: unknown): [string, number][] {
  const advantages = (value as { advantages?: unknown } | null)?.advantages;
  if (typeof advantages !== 'object' || advantages === null) throw new Error('not {"step", "advantages": {eid: number}}');
  return Object.entries(advantages).filter((entry): entry is [string, number] => typeof entry[1] === 'number');
}
