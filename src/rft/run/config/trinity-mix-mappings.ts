// The expert data of Trinity-RFT's mix sample strategy (MIX, CHORD) in its older form, read as Trinity read it (part
// of the "mapped" block of ./trinity-mappings.ts, which calls this on the YAML tree before the schema sees it):
//
//   buffer.trainer_input.sft_warmup_dataset   (with sft_warmup_steps unset or 0, an algorithm that samples with mix)
//       → buffer.trainer_input.auxiliary_buffers.<sample_strategy_args.sft_dataset_name, default sft_dataset>
//
// Trinity before auxiliary_buffers (v0.2) read mix's expert rows from sft_warmup_dataset; since then the strategy
// looks its expert data up in auxiliary_buffers by sft_dataset_name (the key it is listed under; the entry's `name`
// is Trinity's storage name and may differ). The older dataset's `algorithm_type: sft` (the rows are SFT rows, as
// expert rows are here) is taken out with it. With sft_warmup_steps > 0 the dataset is an SFT warm-up, as written.
import { algorithmPreset } from '../../algorithm/presets.js';
import { describeValue, getIn, isMapping, type Segment, type Tree } from '../../config/source.js';

/** A mapped key's record, as ./trinity-mappings.ts's MappedSetting (which this file's caller collects). */
interface MappedSetting {
  readonly path: string;
  readonly value: unknown;
  readonly to: string | null;
}

/** Whether `algorithm` (a stage's or the run's section, as written) samples its batches with mix. */
function samplesWithMix(algorithm: unknown): boolean {
  if (!isMapping(algorithm)) return false;
  if (algorithm.sample_strategy !== undefined && algorithm.sample_strategy !== null) return algorithm.sample_strategy === 'mix';
  if (typeof algorithm.algorithm_type !== 'string') return false;
  try {
    return algorithmPreset(algorithm.algorithm_type).sampleStrategy.name === 'mix';
  } catch {
    return false; // an unknown algorithm_type is the algorithm section's problem
  }
}

/** sft_warmup_dataset as mix's expert data (see the header); `algorithm`: the section that applies to `node`. */
export function mapMixExpertData(
  node: Tree,
  algorithm: unknown,
  at: (path: readonly Segment[]) => string,
  mapped: MappedSetting[],
  problem: (path: string, message: string) => void,
): void {
  const trainerInput = getIn(node, ['buffer', 'trainer_input']);
  if (!isMapping(trainerInput) || !isMapping(trainerInput.sft_warmup_dataset)) return;
  const steps = trainerInput.sft_warmup_steps;
  if (steps !== undefined && steps !== null && steps !== 0 && steps !== '0') return; // an SFT warm-up
  if (!samplesWithMix(algorithm)) return;
  const args = isMapping(algorithm) ? getIn(algorithm, ['sample_strategy_args']) : undefined;
  const key = isMapping(args) && typeof args.sft_dataset_name === 'string' ? args.sft_dataset_name : 'sft_dataset';
  const auxiliary = isMapping(trainerInput.auxiliary_buffers) ? trainerInput.auxiliary_buffers : {};
  const path = at(['buffer', 'trainer_input', 'sft_warmup_dataset']);
  if (auxiliary[key] !== undefined) {
    problem(path, `is mix's expert data in Trinity's older form, and auxiliary_buffers.${key} is set too: remove one`);
    return;
  }
  const { algorithm_type: datasetAlgorithm, ...dataset } = trainerInput.sft_warmup_dataset;
  if (datasetAlgorithm !== undefined && datasetAlgorithm !== null && datasetAlgorithm !== 'sft')
    problem(`${path}.algorithm_type`, `mix's expert rows are SFT rows: expected sft, got ${describeValue(datasetAlgorithm)}`);
  trainerInput.auxiliary_buffers = { ...auxiliary, [key]: dataset };
  delete trainerInput.sft_warmup_dataset;
  delete trainerInput.sft_warmup_steps;
  mapped.push({
    path,
    value: dataset.name ?? dataset.path,
    to:
      `buffer.trainer_input.auxiliary_buffers.${key} (mix's expert data, which Trinity read from sft_warmup_dataset ` +
      'before auxiliary_buffers)',
  });
}
