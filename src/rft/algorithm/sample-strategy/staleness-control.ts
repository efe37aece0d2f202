// `staleness_control` (Trinity-RFT, PR #445): experiences with info.modelVersion < modelVersion − max_staleness are
// dropped and the batch is refilled from the source, up to max_read_rounds more reads within the step's deadline.
// Experiences without a version are kept (and counted). When the deadline leaves fewer than minCount fresh ones the
// step rejects with BufferTimeoutError and the fresh ones it read are held for the next call (the strategy's state).
import type { Experience } from '../../experience.js';
import {
  checkNonNegativeInteger,
  checkSampleInput,
  Deadline,
  HeldExperiences,
  readRound,
  type SampleStrategyModule,
  stepTimeout,
} from './contract.js';
import { SAMPLE_STRATEGY } from './registry.js';

export interface StalenessControlOptions {
  /** Oldest accepted version = modelVersion − maxStaleness (0: on-policy only). */
  maxStaleness: number;
  /** Reads (of the missing count) after the first before returning a short batch. */
  maxReadRounds: number;
}

export const STALENESS_CONTROL_DEFAULTS: Readonly<StalenessControlOptions> = { maxStaleness: 1, maxReadRounds: 8 };

const NAME = 'staleness_control';

export const stalenessControlSampleStrategy: SampleStrategyModule<StalenessControlOptions> = {
  name: NAME,
  description: 'drops experiences older than model_version - max_staleness and reads on to refill',
  defaults: STALENESS_CONTROL_DEFAULTS,
  run: (init, options = {}) => {
    const { maxStaleness, maxReadRounds } = { ...STALENESS_CONTROL_DEFAULTS, ...options };
    const where = `sample_strategy '${init.name}'`;
    checkNonNegativeInteger(where, 'max_staleness', maxStaleness);
    checkNonNegativeInteger(where, 'max_read_rounds', maxReadRounds);
    const held = new HeldExperiences(where);
    return {
      state: () => held.state(),
      loadState: (state) => held.loadState(state),
      async sample(input) {
        const minCount = checkSampleInput(where, input);
        if (input.modelVersion === undefined) throw new Error(`${where} needs the trainer's current modelVersion`);
        const deadline = new Deadline(input.timeoutMs);
        const oldest = input.modelVersion - maxStaleness;
        const kept: Experience[] = [];
        const over: Experience[] = [];
        let stale = 0;
        let unversioned = 0;
        const absorb = (chunk: readonly Experience[]) => {
          for (const e of chunk) {
            const version = e.info.modelVersion;
            if (version !== undefined && version < oldest) stale++;
            else if (kept.length >= input.batchSize) over.push(e);
            else {
              if (version === undefined) unversioned++;
              kept.push(e);
            }
          }
        };
        absorb(held.take());
        let reads = 0;
        let read = 0;
        let finished = false;
        let timedOut = false;
        try {
          while (kept.length < input.batchSize && !finished && !timedOut && reads <= maxReadRounds) {
            const round = await readRound(input.source, input.batchSize - kept.length, deadline);
            reads++;
            read += round.experiences.length;
            ({ finished, timedOut } = round);
            absorb(round.experiences);
          }
          if (timedOut && kept.length < minCount) {
            throw stepTimeout(
              input.source,
              `${input.batchSize} experiences of model version >= ${oldest} (${kept.length} after ${reads} reads, ` +
                `${stale} stale dropped; at least ${minCount} accepted)`,
              input.timeoutMs,
            );
          }
        } catch (error) {
          // nothing fresh that was read is lost: the next call starts with it
          held.hold([...kept, ...over]);
          throw error;
        }
        held.hold(over);
        const short = kept.length < input.batchSize;
        return {
          experiences: kept,
          metrics: {
            'sample/count': kept.length,
            'sample/read': read,
            'sample/read_rounds': reads,
            'sample/stale_dropped': stale,
            'sample/unversioned': unversioned,
            'sample/held': held.count,
            'sample/source_finished': finished ? 1 : 0,
            'sample/timed_out': timedOut && short ? 1 : 0,
            'sample/max_rounds_reached': short && !finished && !timedOut ? 1 : 0,
          },
        };
      },
    };
  },
};

SAMPLE_STRATEGY.register(stalenessControlSampleStrategy);
