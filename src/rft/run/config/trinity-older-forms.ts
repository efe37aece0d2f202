// Keys of older Trinity-RFT versions whose meaning is clear, read as today's (part of the "mapped" block of
// ./trinity-mappings.ts, which calls this on the YAML tree before the schema sees it). Each rewrite is printed; an old
// key beside the key it became is a problem naming both, never a silent choice.
//
// The older mix form (mix_math, grpo_math's math_mix; Trinity 0.2):
//   algorithm.mu                 → algorithm.policy_loss_fn_args.mu        (the mix loss's SFT weight)
//   buffer.expert_data_ratio     → algorithm.sample_strategy_args.expert_data_ratio
//   buffer.explore_batch_size E  → buffer.batch_size E                      (tasks per explore step)
//   with it, buffer.batch_size B → buffer.train_batch_size B · repeat_times (then the train batch counted in tasks:
//                                  Trinity read B · repeat_times experiences per train step, expert rows included)
// Before buffer.train_batch_size existed, buffer.batch_size sized both steps unless explore_batch_size was set, when it
// sized only the train step (Trinity's config generator of the time: "Task Batch Size" was the explore step's); with
// no explore_batch_size it means what it means today.
//
//   model.max_token_len          → model.max_model_len (its name in modelscope's older dapo_math: prompt + response)
//   algorithm.add_strategy       → algorithm.advantage_fn (Trinity 0.2's add strategies step_wise_grpo, grpo, opmd:
//                                  the agentscope_* examples' step_wise_grpo is today's advantage_fn of that name)
import { getIn, isMapping, mappingAt, type Segment, type Tree } from '../../config/source.js';

/** A mapped key's record, as ./trinity-mappings.ts's MappedSetting (which this file's caller collects). */
interface MappedSetting {
  readonly path: string;
  readonly value: unknown;
  readonly to: string | null;
}

interface Moved {
  readonly from: readonly string[];
  readonly to: readonly string[];
  readonly why: string;
}

const MOVED: readonly Moved[] = [
  { from: ['algorithm', 'mu'], to: ['algorithm', 'policy_loss_fn_args', 'mu'], why: "the mix loss's SFT weight" },
  {
    from: ['buffer', 'expert_data_ratio'],
    to: ['algorithm', 'sample_strategy_args', 'expert_data_ratio'],
    why: "mix's share of expert rows in a train batch",
  },
  { from: ['model', 'max_token_len'], to: ['model', 'max_model_len'], why: 'prompt + response: its older name' },
  {
    from: ['algorithm', 'add_strategy'],
    to: ['algorithm', 'advantage_fn'],
    why: "Trinity 0.2's add strategy computed the advantages as experiences entered the buffer, by the same names",
  },
];

/** Rewrites the older keys of `node` (the run or one stage; see the header); `repeatTimes` as written for it. */
export function mapOlderForms(
  node: Tree,
  repeatTimes: unknown,
  at: (path: readonly Segment[]) => string,
  mapped: MappedSetting[],
  problem: (path: string, message: string) => void,
): void {
  for (const { from, to, why } of MOVED) {
    const parent = getIn(node, from.slice(0, -1));
    const key = from.at(-1) as string;
    if (!isMapping(parent) || parent[key] === undefined) continue;
    const value = parent[key];
    const target = mappingAt(node, to.slice(0, -1));
    if (target === null) continue; // the section's own problem, reported by the schema
    const toKey = to.at(-1) as string;
    if (target[toKey] !== undefined) {
      problem(at(from), `is Trinity's older name of ${to.join('.')}, which is set too: remove one`);
      continue;
    }
    target[toKey] = value;
    delete parent[key];
    mapped.push({ path: at(from), value, to: `${to.join('.')} (${why})` });
  }
  mapExploreBatchSize(node, repeatTimes, at, mapped, problem);
}

/** The older mix form's buffer.explore_batch_size and buffer.batch_size (see the header). */
function mapExploreBatchSize(
  node: Tree,
  repeatTimes: unknown,
  at: (path: readonly Segment[]) => string,
  mapped: MappedSetting[],
  problem: (path: string, message: string) => void,
): void {
  const buffer = node.buffer;
  if (!isMapping(buffer) || buffer.explore_batch_size === undefined) return;
  const explore = buffer.explore_batch_size;
  const trainTasks = buffer.batch_size;
  if (buffer.train_batch_size !== undefined) {
    problem(
      at(['buffer', 'explore_batch_size']),
      "is the older mix form's batch of an explore step, whose buffer.batch_size sized the train step; " +
        "buffer.train_batch_size is set too: write today's form (batch_size for an explore step, train_batch_size)",
    );
    return;
  }
  if (trainTasks !== undefined) {
    if (!Number.isInteger(trainTasks) || !Number.isInteger(repeatTimes) || (repeatTimes as number) < 1) {
      problem(
        at(['buffer', 'batch_size']),
        'with buffer.explore_batch_size (the older mix form) sizes the train step as batch_size · algorithm.repeat_times: ' +
          'both must be whole numbers as written',
      );
      return;
    }
    const experiences = (trainTasks as number) * (repeatTimes as number);
    buffer.train_batch_size = experiences;
    mapped.push({
      path: at(['buffer', 'batch_size']),
      value: trainTasks,
      to:
        `buffer.train_batch_size ${experiences} (= batch_size · repeat_times ${String(repeatTimes)}: the older mix ` +
        "form's experiences per train step, expert rows included)",
    });
  }
  buffer.batch_size = explore;
  delete buffer.explore_batch_size;
  mapped.push({
    path: at(['buffer', 'explore_batch_size']),
    value: explore,
    to: 'buffer.batch_size (tasks per explore step, as buffer.batch_size means today)',
  });
}
