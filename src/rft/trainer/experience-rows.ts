// The rows a train step trains on, by the algorithm's schema (../algorithm/presets.ts `schema`). The step asks the
// schema's record what differs, never the schema's name:
//   experience  the experiences as they are (MIX/CHORD expert rows, info.isExpert, among them)
//   sft         the same: the loss is the NLL of the response tokens, no advantages
//   dpo         each experience holds a prompt and `chosen`/`rejected` responses: two rows, chosen first, as the pair
//               losses read them (../algorithm/policy-loss/dpo.ts dpoPairRows); pairs take no advantages or values
import { dpoPairRows } from '../algorithm/policy-loss/index.js';
import type { AlgorithmSchema, ResolvedAlgorithm } from '../algorithm/presets.js';
import type { Experience } from '../experience.js';

export interface RowSchema {
  /** The rows the step trains on, from the experiences the sample strategy gave. */
  rows(experiences: readonly Experience[]): Experience[];
  /** Its rows take advantages (and the critic's values) when the algorithm has an advantage_fn. */
  readonly takesAdvantages: boolean;
}

const asTheyAre: RowSchema = { rows: (experiences) => [...experiences], takesAdvantages: true };

export const ROW_SCHEMAS: Readonly<Record<AlgorithmSchema, RowSchema>> = {
  experience: asTheyAre,
  sft: asTheyAre,
  dpo: { rows: dpoPairRows, takesAdvantages: false },
};

/** The step computes advantages for the rows: the algorithm has an advantage_fn and its schema's rows take them. */
export function rowsTakeAdvantages(algorithm: Pick<ResolvedAlgorithm, 'advantageFn' | 'schema'>): boolean {
  return algorithm.advantageFn !== null && ROW_SCHEMAS[algorithm.schema].takesAdvantages;
}
