// The order of a train step's rows under trainer.bitwise_on_policy: the experiences sorted by what produced them
// (explore step, task, repeat, turn) instead of the order they arrived in the buffer. The batch-invariant forward
// (../../model/batch-invariant.ts) makes each row's log-probs independent of its companions, but the step's sums over
// rows (the gradient's X^T dY over the batch, a group's advantage mean and std, the loss aggregation) add in row order,
// so two runs whose engines finished requests in another order (engine_num, runner_per_model, thread timing) would
// round those sums differently and drift apart. Sorted, the same rollouts give the same update bit for bit.
import type { Experience } from '../experience.js';

/** The sort key of an experience: explore step, task id, repeat (run id), turn (step index); missing parts sort first. */
function orderKey(e: Experience): [number, string, number, number] {
  const { step, taskId, runId, stepIndex } = e.info;
  return [step ?? -1, taskId ?? '', runId ?? -1, stepIndex ?? -1];
}

/** `experiences` sorted by orderKey (stable: rows without any of it, e.g. expert data, keep their relative order). */
export function canonicalExperienceOrder(experiences: readonly Experience[]): Experience[] {
  const keyed = experiences.map((e) => ({ e, key: orderKey(e) }));
  keyed.sort((a, b) => {
    for (let i = 0; i < a.key.length; i++) {
      const x = a.key[i] as number | string;
      const y = b.key[i] as number | string;
      if (x !== y) return x < y ? -1 : 1;
    }
    return 0;
  });
  return keyed.map(({ e }) => e);
}
