// `dynamic_sampling`: DAPO's dynamic sampling (arXiv 2503.14476, §3.2) with its soft overlong punishment (§3.4).
// Rewards are shaped with the overlong penalty; a group (one task's responses: consecutive experiences with the same
// info.taskId and info.step) whose reward std is ≤ std_threshold carries no gradient signal and is dropped; groups
// are read on from the source until the batch holds batch_size experiences of informative groups.
//
// Groups are never split. A group is complete when it has repeatTimes experiences, when the next group follows it,
// or when the source has finished; reads ask for whole groups (the missing count rounded up to repeatTimes, less
// the part of a group already read). An informative group that does not fit in what is left of the batch ends the
// step's reading: it and everything read after it are held for the next step, as is the start of a group whose
// rest has not arrived. Held experiences are the strategy's state (checkpointed), so nothing read is lost except
// the dropped groups, and a resumed run continues with the same groups.
//
// Reading stops with a short batch after max_read_rounds reads beyond the first (sample/max_rounds_reached) or at
// the step's deadline (sample/timed_out; with fewer than minCount it rejects with BufferTimeoutError instead and
// holds everything it read).
import { type Experience, responseLength } from '../../experience.js';
import {
  checkNonNegativeInteger,
  checkSampleInput,
  consecutiveGroups,
  Deadline,
  HeldExperiences,
  readRound,
  rewardOf,
  type SampleInput,
  type SampleResult,
  type SampleStrategyModule,
  standardDeviation,
  stepTimeout,
} from './contract.js';
import { SAMPLE_STRATEGY } from './registry.js';

export interface OverlongPenaltyOptions {
  /** L_max: the rollout's response-token limit; null turns the penalty off. */
  maxResponseLength: number | null;
  /** L_cache: the soft zone before L_max where the penalty ramps from 0 to −penalty_factor. */
  overlongBufferLen: number;
  overlongPenaltyFactor: number;
}

export interface DynamicSamplingOptions extends OverlongPenaltyOptions {
  /** Groups with reward std ≤ this carry no signal and are dropped. */
  stdThreshold: number;
  /** Reads after the first before returning a short batch (DAPO's max_num_gen_batches − 1). */
  maxReadRounds: number;
}

export const DYNAMIC_SAMPLING_DEFAULTS: Readonly<DynamicSamplingOptions> = {
  stdThreshold: 0,
  maxReadRounds: 8,
  maxResponseLength: null,
  overlongBufferLen: 4096,
  overlongPenaltyFactor: 1.0,
};

/**
 * DAPO's soft overlong punishment added to each reward, with L = response length:
 *   0                                   L ≤ L_max − L_cache
 *   ((L_max − L_cache) − L) / L_cache   L_max − L_cache < L ≤ L_max      (× penalty_factor)
 *   −1                                  L > L_max                          (× penalty_factor)
 */
export function overlongPenalty(length: number, options: OverlongPenaltyOptions): number {
  const { maxResponseLength: max, overlongBufferLen: buffer, overlongPenaltyFactor: factor } = options;
  if (max === null) return 0;
  const expected = max - buffer;
  if (length <= expected) return 0;
  if (length > max) return -factor;
  return ((expected - length) / buffer) * factor;
}

const NAME = 'dynamic_sampling';

export const dynamicSamplingStrategy: SampleStrategyModule<DynamicSamplingOptions> = {
  name: NAME,
  description: 'overlong reward shaping, then only groups with reward variance, refilled by reading on (DAPO)',
  defaults: DYNAMIC_SAMPLING_DEFAULTS,
  run: (init, options = {}) => {
    const o = { ...DYNAMIC_SAMPLING_DEFAULTS, ...options };
    const where = `sample_strategy '${init.name}'`;
    if (o.maxResponseLength !== null && !(o.overlongBufferLen > 0 && o.overlongBufferLen <= o.maxResponseLength)) {
      throw new Error(`${where}: overlong_buffer_len must be in (0, max_response_length]`);
    }
    checkNonNegativeInteger(where, 'max_read_rounds', o.maxReadRounds);
    const held = new HeldExperiences(where);
    return {
      state: () => held.state(),
      loadState: (state) => held.loadState(state),
      sample: (input) => sampleInformativeGroups(where, o, held, input),
    };
  },
};

/**
 * One step's sample (see the header): reads whole groups from input.source, shapes their rewards with the overlong
 * penalty, drops those whose reward std is ≤ std_threshold and keeps the rest until the batch is full, holding in
 * `held` what was read and not decided.
 */
async function sampleInformativeGroups(
  where: string,
  o: DynamicSamplingOptions,
  held: HeldExperiences,
  input: SampleInput,
): Promise<SampleResult> {
  const minCount = checkSampleInput(where, input);
  const groupSize = input.repeatTimes;
  if (groupSize === undefined) {
    throw new Error(`${where} needs repeatTimes (algorithm.repeat_times) to know when a group is complete`);
  }
  const batchSize = input.batchSize;
  const deadline = new Deadline(input.timeoutMs);
  const kept: Experience[] = [];
  /** `kept` before shaping: held again if the step times out. */
  const keptRaw: Experience[] = [];
  /** Read and not decided yet, in source order. */
  let pending = held.take();
  let keptGroups = 0;
  let droppedGroups = 0;
  let droppedExperiences = 0;
  let penalised = 0;
  let finished = false;
  let timedOut = false;
  /** An informative group did not fit: the batch is as full as it gets this step. */
  let full = false;

  const shape = (e: Experience): Experience => {
    const penalty = overlongPenalty(responseLength(e), o);
    if (penalty === 0) return e;
    return { ...e, reward: rewardOf(NAME, e) + penalty, info: { ...e.info, overlongPenalty: penalty } };
  };
  /** Decides the complete groups at the front of `pending` and removes them from it (also when one throws). */
  const decide = () => {
    const groups = consecutiveGroups(NAME, pending);
    let decided = 0;
    try {
      for (const [i, group] of groups.entries()) {
        if (kept.length >= batchSize) break;
        const open = i === groups.length - 1 && group.length < groupSize && !finished;
        if (open) break;
        const shaped = group.map(shape);
        if (standardDeviation(shaped.map((e) => rewardOf(NAME, e))) <= o.stdThreshold) {
          droppedGroups++;
          droppedExperiences += group.length;
        } else if (kept.length + group.length > batchSize) {
          if (kept.length === 0) {
            throw new Error(
              `${where}: a group of ${group.length} experiences (task ${String(group[0]?.info.taskId)}) does not ` +
                `fit in a batch of ${batchSize}: batch_size must be at least the group size`,
            );
          }
          full = true;
          break;
        } else {
          keptGroups++;
          kept.push(...shaped);
          keptRaw.push(...group);
        }
        penalised += shaped.filter((e, j) => e !== group[j]).length;
        decided += group.length;
      }
    } finally {
      pending = pending.slice(decided);
    }
  };

  let reads = 0;
  let read = 0;
  const short = () => kept.length < batchSize;
  try {
    decide();
    while (!full && short() && !finished && !timedOut && reads <= o.maxReadRounds) {
      // whole groups: the missing count rounded up to groups, less what is already read of an open group
      const count = Math.ceil((batchSize - kept.length) / groupSize) * groupSize - pending.length;
      const round = await readRound(input.source, Math.max(1, count), deadline);
      reads++;
      read += round.experiences.length;
      ({ finished, timedOut } = round);
      pending.push(...round.experiences);
      decide();
    }
    if (timedOut && short() && !full && kept.length < minCount) {
      throw stepTimeout(
        input.source,
        `${batchSize} experiences from groups with reward std > ${o.stdThreshold} (${kept.length} after ${reads} ` +
          `reads, ${droppedGroups} groups dropped; at least ${minCount} accepted)`,
        input.timeoutMs,
      );
    }
  } catch (error) {
    // nothing read is lost: the next call starts again from here (dropped groups stay dropped)
    held.hold([...keptRaw, ...pending]);
    throw error;
  }
  held.hold(pending);
  return {
    experiences: kept,
    metrics: {
      'sample/count': kept.length,
      'sample/read': read,
      'sample/read_rounds': reads,
      'sample/kept_groups': keptGroups,
      'sample/dropped_groups': droppedGroups,
      'sample/dropped_experiences': droppedExperiences,
      'sample/overlong_penalised': penalised,
      'sample/held': held.count,
      'sample/source_finished': finished ? 1 : 0,
      'sample/timed_out': timedOut && short() && !full ? 1 : 0,
      'sample/max_rounds_reached': short() && !full && !finished && !timedOut ? 1 : 0,
    },
  };
}

SAMPLE_STRATEGY.register(dynamicSamplingStrategy);
