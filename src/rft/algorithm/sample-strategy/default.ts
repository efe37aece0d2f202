// `default` (and `warmup`, Trinity-RFT's deprecated alias): the batch as the experience source hands it out.
import { checkSampleInput, type SampleStrategyModule } from './contract.js';
import { SAMPLE_STRATEGY } from './registry.js';

export type DefaultSampleOptions = Record<string, never>;

export const defaultSampleStrategy: SampleStrategyModule<DefaultSampleOptions> = {
  name: 'default',
  description: 'the batch as the experience buffer hands it out',
  defaults: {},
  run: (init) => ({
    async sample(input) {
      const minCount = checkSampleInput(`sample_strategy '${init.name}'`, input);
      const experiences = await input.source.read(input.batchSize, { timeoutMs: input.timeoutMs, minCount });
      return { experiences, metrics: { 'sample/count': experiences.length, 'sample/read': experiences.length } };
    },
  }),
};

export const warmupSampleStrategy: SampleStrategyModule<DefaultSampleOptions> = {
  ...defaultSampleStrategy,
  name: 'warmup',
  description: "deprecated alias of 'default' (Trinity-RFT)",
};

SAMPLE_STRATEGY.register(defaultSampleStrategy);
SAMPLE_STRATEGY.register(warmupSampleStrategy);
