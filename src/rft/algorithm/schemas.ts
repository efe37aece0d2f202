// The algorithm's experience schemas (./presets.ts `schema`): what a train step's rows are and how a mode-train
// dataset file is read, by schema. The trainer and the stage ask the schema's record what differs, never its name:
//   experience  the experiences as they are (MIX/CHORD expert rows, info.isExpert, among them); a dataset file of
//               prompt/response rows (SFT's form)
//   sft         the same: the loss is the NLL of the response tokens, no advantages
//   dpo         each experience holds a prompt and `chosen`/`rejected` responses: two rows, chosen first, as the pair
//               losses read them (./policy-loss/dpo.ts dpoPairRows); pairs take no advantages or values; a dataset
//               file of preference rows
//   cpt         continued pre-training: a dataset file of plain text, each row one sequence whose every token after
//               the first is the loss (../buffer/cpt.ts); the rows train as SFT's do
// A new schema is one more record here.
import type { Tokenizer } from '../../tokenizer/index.js';
import { type DatasetFormat, loadCptDataset, loadDpoDataset, loadSftDataset } from '../buffer/index.js';
import type { Experience } from '../experience.js';
import { dpoPairRows } from './policy-loss/index.js';
import { type AlgorithmSchema, algorithmPreset, type ResolvedAlgorithm } from './presets.js';

export interface ExperienceSchema {
  /** The rows the step trains on, from the experiences the sample strategy gave. */
  rows(experiences: readonly Experience[]): Experience[];
  /** Its rows take advantages (and the critic's values) when the algorithm has an advantage_fn. */
  readonly takesAdvantages: boolean;
  /** Its rows come from a dataset file only, never from rollouts: the algorithm has no explore steps (sft, dpo, cpt). */
  readonly offline: boolean;
  /** Reads a mode-train dataset file (experience_buffer storage_type file) into experiences of this schema. */
  readDataset(file: string, tokenizer: Tokenizer, format?: DatasetFormat): Promise<Experience[]>;
}

const asTheyAre: ExperienceSchema = {
  rows: (experiences) => [...experiences],
  takesAdvantages: true,
  offline: false,
  readDataset: loadSftDataset,
};

export const EXPERIENCE_SCHEMAS: Readonly<Record<AlgorithmSchema, ExperienceSchema>> = {
  experience: asTheyAre,
  sft: { ...asTheyAre, offline: true },
  dpo: { rows: dpoPairRows, takesAdvantages: false, offline: true, readDataset: loadDpoDataset },
  cpt: { ...asTheyAre, offline: true, readDataset: loadCptDataset },
};

/** An algorithm_type (aliases accepted) trains on dataset rows only (its schema is offline); false for unknown types. */
export function trainsOffline(algorithmType: string): boolean {
  let schema: AlgorithmSchema;
  try {
    schema = algorithmPreset(algorithmType).schema;
  } catch {
    return false; // an unknown algorithm_type is reported by the algorithm section's check
  }
  return EXPERIENCE_SCHEMAS[schema].offline;
}

/** The step computes advantages for the rows: the algorithm has an advantage_fn and its schema's rows take them. */
export function rowsTakeAdvantages(algorithm: Pick<ResolvedAlgorithm, 'advantageFn' | 'schema'>): boolean {
  return algorithm.advantageFn !== null && EXPERIENCE_SCHEMAS[algorithm.schema].takesAdvantages;
}
