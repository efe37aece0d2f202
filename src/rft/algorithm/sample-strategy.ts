// Sample strategies (`algorithm.sample_strategy`), Trinity-RFT `trinity/algorithm/sample_strategy`: how the trainer
// assembles each training batch from its experience source (and auxiliary buffers).
//
//   const strategy = createSampleStrategy('mix', { expert_data_ratio: 0.25 });
//   strategy.loadState(checkpoint.sampleStrategy);                    // resumed run: before the first sample()
//   const { experiences, metrics } = await strategy.sample({ source, batchSize: 32, timeoutMs: 60_000,
//     minCount: 1, modelVersion: step - 1, repeatTimes: 8, auxiliary: { sft_dataset: new AuxiliaryReader(...) } });
//   checkpoint.sampleStrategy = strategy.state();                    // JSON, with the trainer's checkpoint
//
// A strategy reads the source itself (src/rft/buffer/source.ts: bounded reads with a deadline) and reads exactly
// what it uses or keeps: unread experiences stay in the source for later steps, and experiences it read but could not
// use yet are held in its state (checkpointed) for the next step. All reads of a step share one deadline
// (now + input.timeoutMs); when it passes, a strategy returns a short batch of at least input.minCount experiences
// (default batchSize) or rejects with BufferTimeoutError (src/rft/buffer/types.ts) having lost nothing.
//
//   default            batch_size experiences as they come (`warmup`: Trinity-RFT's deprecated alias)
//   staleness_control  drop experiences with info.modelVersion < modelVersion − max_staleness, read on to refill
//   mix                ⌈expert_data_ratio · batch_size⌉ expert experiences from auxiliary[sft_dataset_name]
//                      (info.isExpert = true) + the rest usual ones read from the source (info.isExpert = false)
//   dynamic_sampling   DAPO (arXiv 2503.14476, §3.2): soft overlong penalty on the reward, then keep only groups whose
//                      reward std > std_threshold, reading whole groups on until the batch has batch_size
//   reward_filter      RAFT (Dong et al., arXiv 2304.06767): per group keep the best response (best_of_group) and
//                      drop responses with reward < min_reward; the rest is trained with SFT
//
// Every strategy reports sample/count (the batch) and sample/read (experiences read from the source this step); the
// refilling ones also sample/read_rounds, sample/held (kept for the next step), and why they stopped short:
// sample/source_finished, sample/timed_out, sample/max_rounds_reached. Strategies never mutate the experiences they
// read: changed ones are shallow copies.
//
// A plug-in (`algorithm.sample_strategy: path/file.ts#export`, ./plugins.ts) is a module { defaults, run(init,
// options) } whose run() returns { sample(input), state?(), loadState?(state) } (./sample-strategy/contract.ts); it
// gets the same SampleInput as the built-ins, checked, through createSampleStrategy.
//
// A built-in strategy is one file in ./sample-strategy/ that ends by registering its module
// (SAMPLE_STRATEGY.register(...)), plus one line in the list below, which is the registration order
// (SAMPLE_STRATEGY.names()). Outside that folder, import the strategies from here only: a strategy's file imported
// before this one would register first and reorder the names.
import { checkSampleInput, type SampleInput, type SampleResult } from './sample-strategy/contract.js';
import { SAMPLE_STRATEGY } from './sample-strategy/registry.js';

export {
  type ArraySource,
  type AuxiliaryReaderState,
  type AuxiliarySource,
  AuxiliaryReader,
  type ExperienceSource,
  type SourceReadOptions,
  sourceFromArray,
} from '../buffer/source.js';
export * from './sample-strategy/contract.js';
export * from './sample-strategy/default.js'; // default, warmup
export * from './sample-strategy/staleness-control.js';
export * from './sample-strategy/mix.js';
export * from './sample-strategy/dynamic-sampling.js';
export * from './sample-strategy/reward-filter.js';
export { SAMPLE_STRATEGY };

/** A strategy's checkpoint state: which strategy, and its own state (JSON). */
export interface SampleStrategyState {
  readonly strategy: string;
  readonly state: unknown;
}

/** A created sample strategy: see the header. */
export interface SampleStrategy {
  readonly name: string;
  /** The batch of one train step. One call at a time. */
  sample(input: SampleInput): Promise<SampleResult>;
  /** What a resumed run needs to continue identically (JSON; between steps only). */
  state(): SampleStrategyState;
  /** Restores state() of the same strategy (a resumed run, before its first sample()). */
  loadState(state: unknown): void;
}

/** A JSON copy: what a checkpoint written now gives back when it is read. */
const jsonCopy = (value: unknown): unknown => (value === undefined ? null : JSON.parse(JSON.stringify(value)));

/**
 * The strategy registered as `name` (or loaded as a plug-in) with its options from snake_case (YAML) or camelCase
 * `args` over its defaults (unknown arguments and wrong types are errors that name them).
 */
export function createSampleStrategy(name: string, args: Readonly<Record<string, unknown>> = {}): SampleStrategy {
  const where = `sample_strategy '${name}'`;
  const instance = SAMPLE_STRATEGY.create(name, args)({ name });
  if (
    instance === null ||
    typeof instance !== 'object' ||
    typeof instance.sample !== 'function' ||
    (instance.state !== undefined && typeof instance.state !== 'function') ||
    (instance.loadState !== undefined && typeof instance.loadState !== 'function')
  ) {
    throw new Error(`${where}: run(init, options) must return { sample(input), state?(), loadState?(state) }`);
  }
  let running = false;
  const idle = (what: string) => {
    if (running) throw new Error(`${where}: ${what} while sample() is running`);
  };
  return {
    name,
    async sample(input) {
      idle('sample() called');
      checkSampleInput(where, input);
      running = true;
      try {
        const result = await instance.sample(input);
        if (
          result === null ||
          typeof result !== 'object' ||
          !Array.isArray(result.experiences) ||
          result.metrics === null ||
          typeof result.metrics !== 'object'
        ) {
          throw new Error(`${where}: sample() must resolve with { experiences: Experience[], metrics: Record<string, number> }`);
        }
        return result;
      } finally {
        running = false;
      }
    },
    state() {
      idle('state() called');
      return { strategy: name, state: jsonCopy(instance.state?.() ?? null) };
    },
    loadState(state) {
      idle('loadState() called');
      const s = state as Partial<SampleStrategyState> | null;
      if (s === null || typeof s !== 'object' || typeof s.strategy !== 'string' || !('state' in s)) {
        throw new Error(`${where}: bad checkpoint state ${JSON.stringify(state)} (want { strategy, state })`);
      }
      if (s.strategy !== name) {
        throw new Error(
          `${where}: the checkpoint holds the state of sample_strategy '${s.strategy}'; resume with the same strategy`,
        );
      }
      if (instance.loadState !== undefined) instance.loadState(jsonCopy(s.state));
      else if (s.state !== null) throw new Error(`${where}: keeps no state, but the checkpoint holds ${JSON.stringify(s.state)}`);
    },
  };
}
