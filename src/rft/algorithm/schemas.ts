// The algorithm's experience schemas (./presets.ts `schema`): what a train step's rows are and how a mode-train
// dataset file is read, by schema. The trainer and the stage ask the schema's record what differs, never its name:
//   experience  the experiences as they are (MIX/CHORD expert rows, info.isExpert, among them); a dataset file of
//               prompt/response rows (SFT's form)
//   sft         the same: the loss is the NLL of the response tokens, no advantages
//   dpo         each experience holds a prompt and `chosen`/`rejected` responses: two rows, chosen first, as the pair
//               losses read them (./policy-loss/dpo.ts dpoPairRows); pairs take no advantages or values; a dataset
//               file of preference rows
// A new schema is one more record here.
import type { Tokenizer } from '../../tokenizer/index.js';
import { type DatasetFormat, loadDpoDataset, loadSftDataset } from '../buffer/index.js';
import type { Experience } from '../experience.js';
import { dpoPairRows } from './policy-loss/index.js';
import type { AlgorithmSchema, ResolvedAlgorithm } from './presets.js';

export interface ExperienceSchema {
  /** The rows the step trains on, from the experiences the sample strategy gave. */
  rows(experiences: readonly Experience[]): Experience[];
  /** Its rows take advantages (and the critic's values) when the algorithm has an advantage_fn. */
  readonly takesAdvantages: boolean;
  /** Reads a mode-train dataset file (experience_buffer storage_type file) into experiences of this schema. */
  readDataset(file: string, tokenizer: Tokenizer, format?: DatasetFormat): Promise<Experience[]>;
}

const asTheyAre: ExperienceSchema = {
  rows: (experiences) => [...experiences],
  takesAdvantages: true,
  readDataset: loadSftDataset,
};

export const EXPERIENCE_SCHEMAS: Readonly<Record<AlgorithmSchema, ExperienceSchema>> = {
  experience: asTheyAre,
  sft: asTheyAre,
  dpo: { rows: dpoPairRows, takesAdvantages: false, readDataset: loadDpoDataset },
};

/** The step computes advantages for the rows: the algorithm has an advantage_fn and its schema's rows take them. */
export function rowsTakeAdvantages(algorithm: Pick<ResolvedAlgorithm, 'advantageFn' | 'schema'>): boolean {
  return algorithm.advantageFn !== null && EXPERIENCE_SCHEMAS[algorithm.schema].takesAdvantages;
}
