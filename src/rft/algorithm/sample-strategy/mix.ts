// `mix` (MIX / CHORD, Trinity-RFT trinity/algorithm/sample_strategy/mix_sample_strategy.py): each batch is
// ⌈expert_data_ratio · batch_size⌉ expert experiences from auxiliary[sft_dataset_name] (info.isExpert = true) and the
// rest, batch_size − ⌈expert_data_ratio · batch_size⌉, usual ones read from the source (info.isExpert = false).
// Exactly that many usual experiences are read: the rest stay in the source for the next steps. The expert rows are
// read only once the usual ones are there, so a timed-out step consumes nothing; a source that is finished and
// drained gives an empty batch (no expert rows either). Expert data with fewer rows left than a batch's share (its
// total_epochs given, AuxiliarySource.remaining) ends training before anything is read, as Trinity's reader does.
import type { Experience } from '../../experience.js';
import { checkSampleInput, type SampleResult, type SampleStrategyModule } from './contract.js';
import { SAMPLE_STRATEGY } from './registry.js';

export interface MixSampleOptions {
  /** Share of the batch taken from the expert (SFT) buffer. */
  expertDataRatio: number;
  /** The auxiliary buffer that holds the expert experiences. */
  sftDatasetName: string;
}

export const MIX_SAMPLE_DEFAULTS: Readonly<MixSampleOptions> = { expertDataRatio: 0.5, sftDatasetName: 'sft_dataset' };

/** The batch's split: expert = ⌈ratio · batchSize⌉ (Trinity-RFT), usual = the rest. */
export function mixSplit(batchSize: number, expertDataRatio: number): { usual: number; expert: number } {
  const expert = Math.ceil(expertDataRatio * batchSize);
  return { usual: batchSize - expert, expert };
}

const mark = (experiences: readonly Experience[], isExpert: boolean): Experience[] =>
  experiences.map((e) => ({ ...e, info: { ...e.info, isExpert } }));

export const mixSampleStrategy: SampleStrategyModule<MixSampleOptions> = {
  name: 'mix',
  description: 'usual experiences plus expert (SFT) experiences at expert_data_ratio (MIX / CHORD)',
  defaults: MIX_SAMPLE_DEFAULTS,
  run: (init, options = {}) => {
    const { expertDataRatio, sftDatasetName } = { ...MIX_SAMPLE_DEFAULTS, ...options };
    const where = `sample_strategy '${init.name}'`;
    if (!(expertDataRatio >= 0 && expertDataRatio <= 1)) {
      throw new Error(`${where}: expert_data_ratio must be in [0, 1], got ${expertDataRatio}`);
    }
    return {
      async sample(input): Promise<SampleResult> {
        const minCount = checkSampleInput(where, input);
        const readExpert = input.auxiliary?.[sftDatasetName];
        if (readExpert === undefined) {
          const given = Object.keys(input.auxiliary ?? {});
          throw new Error(
            `${where}: no auxiliary buffer '${sftDatasetName}' (sft_dataset_name); given: ${given.join(', ') || '(none)'}`,
          );
        }
        const split = mixSplit(input.batchSize, expertDataRatio);
        const left = readExpert.remaining?.() ?? Number.POSITIVE_INFINITY;
        if (split.expert > 0 && left < split.expert) {
          const ended = `the expert data '${sftDatasetName}' has ${left} row(s) left of its total_epochs, fewer than the ${split.expert} a batch takes`;
          return { experiences: [], metrics: { 'sample/count': 0 }, ended };
        }
        let usual: Experience[] = [];
        if (split.usual > 0) {
          usual = await input.source.read(split.usual, { timeoutMs: input.timeoutMs, minCount: Math.min(split.usual, minCount) });
        }
        const drained = split.usual > 0 && usual.length === 0;
        const expert = drained || split.expert === 0 ? [] : await readExpert.read(split.expert);
        return {
          experiences: [...mark(usual, false), ...mark(expert, true)],
          metrics: {
            'sample/count': usual.length + expert.length,
            'sample/read': usual.length,
            'sample/usual_count': usual.length,
            'sample/expert_count': expert.length,
          },
        };
      },
    };
  },
};

SAMPLE_STRATEGY.register(mixSampleStrategy);
