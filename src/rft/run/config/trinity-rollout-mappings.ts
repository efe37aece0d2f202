// Trinity-RFT's rollout keys outside the tasksets' rollout_args, read in this backend's terms (part of the "mapped"
// block of ./trinity-mappings.ts, which calls these on the YAML tree before the schema sees it):
//
//   model.temperature           → the rollout_args.temperature of every taskset (training and eval) that sets none:
//                                  Trinity fills each taskset's rollout_args from model.* where they are unset, so a
//                                  taskset's own rollout_args.temperature wins (config_validator _fill_taskset_config)
//   <taskset>.rollout_args.n    → not read: Trinity overwrites n with the taskset's repeat_times (algorithm.repeat_times
//                                  for a training taskset, the eval taskset's repeat_times, default 1, for an eval one;
//                                  Workflow.set_repeat_times), so the line names the count that runs
//   model.enable_thinking       → explorer.rollout_model.enable_thinking where that is unset (the rollout model's own
//                                  setting wins): Qwen3's chat-template switch, passed to every render of its template
//   explorer.max_inflight_batches → 1: the explorer here runs one explore batch at a time (Trinity v0.6 keeps up to
//                                  this many in flight in sync_style fully_async, for throughput); written > 1 is reported
import { pathsMatching } from '../../config/refusals.js';
import { describeValue, getIn, isMapping, joinPath, type Segment, type Tree } from '../../config/source.js';

/** A mapped key's record, as ./trinity-mappings.ts's MappedSetting (which this file's caller collects). */
interface MappedSetting {
  readonly path: string;
  readonly value: unknown;
  readonly to: string | null;
}
type At = (path: readonly Segment[]) => string;
type Problem = (path: string, message: string) => void;

const TRAINING_TASKSETS = [
  ['buffer', 'explorer_input', 'taskset'],
  ['buffer', 'explorer_input', 'tasksets', '*'],
] as const;
const EVAL_TASKSETS = ['buffer', 'explorer_input', 'eval_tasksets', '*'] as const;

/** Every taskset of `node` (a run or a stage) with its path and whether it is an eval taskset. */
function tasksetsOf(node: Tree): { path: Segment[]; taskset: Tree; isEval: boolean }[] {
  const found: { path: Segment[]; taskset: Tree; isEval: boolean }[] = [];
  for (const [pattern, isEval] of [...TRAINING_TASKSETS.map((p) => [p, false] as const), [EVAL_TASKSETS, true] as const]) {
    for (const [path, taskset] of pathsMatching(node, [...pattern])) {
      if (isMapping(taskset)) found.push({ path, taskset, isEval });
    }
  }
  return found;
}

const asNumber = (value: unknown): unknown =>
  typeof value === 'string' && /^\s*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*$/i.test(value) ? Number(value) : value;

/** model.temperature: the default of the tasksets' rollout_args.temperature (the run's and each stage's tasksets). */
export function mapModelTemperature(tree: Tree, mapped: MappedSetting[], problem: Problem): void {
  const model = tree.model;
  if (!isMapping(model) || model.temperature === undefined || model.temperature === null) return;
  const value = model.temperature;
  delete model.temperature;
  const temperature = asNumber(value);
  if (typeof temperature !== 'number' || !Number.isFinite(temperature) || temperature < 0 || temperature > 100) {
    problem('model.temperature', `expected a number in [0, 100], got ${describeValue(value)}`);
    return;
  }
  const stages = Array.isArray(tree.stages) ? tree.stages : [];
  const roots: [Segment[], unknown][] = [[[], tree], ...stages.map((s, i): [Segment[], unknown] => [['stages', i], s])];
  const filled: string[] = [];
  let tasksets = 0;
  for (const [root, node] of roots) {
    if (!isMapping(node)) continue;
    for (const { path, taskset } of tasksetsOf(node)) {
      tasksets++;
      const args = isMapping(taskset.rollout_args) ? taskset.rollout_args : {};
      if (args.temperature !== undefined && args.temperature !== null) continue; // the taskset's own wins
      taskset.rollout_args = { ...args, temperature };
      filled.push(joinPath([...root, ...path, 'rollout_args', 'temperature']));
    }
  }
  mapped.push({
    path: 'model.temperature',
    value,
    to:
      filled.length > 0
        ? `${filled.join(', ')} (the tasksets that set no temperature of their own)`
        : tasksets > 0
          ? 'not used: every taskset sets its own rollout_args.temperature'
          : 'not used: the config has no taskset (rollouts sample at the temperature each request asks for)',
  });
}

/** <taskset>.rollout_args.n: Trinity overwrites it with the taskset's repeat_times; the line says how many run. */
export function mapRolloutN(node: Tree, at: At, mapped: MappedSetting[], problem: Problem, repeatTimes: unknown): void {
  for (const { path, taskset, isEval } of tasksetsOf(node)) {
    const args = taskset.rollout_args;
    if (!isMapping(args) || args.n === undefined || args.n === null) continue;
    const value = args.n;
    delete args.n;
    const n = asNumber(value);
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) {
      problem(at([...path, 'rollout_args', 'n']), `expected an integer >= 1, got ${describeValue(value)}`);
      continue;
    }
    const runs = isEval
      ? `${at([...path, 'repeat_times'])} ${String(taskset.repeat_times ?? 1)}`
      : repeatTimes === undefined || repeatTimes === null
        ? "algorithm.repeat_times (the algorithm's default)"
        : `algorithm.repeat_times ${String(repeatTimes)}`;
    mapped.push({
      path: at([...path, 'rollout_args', 'n']),
      value,
      to: `${runs}: Trinity sets n to the taskset's repeat_times, so n as written is not read`,
    });
  }
}

/** model.enable_thinking: the rollout model's enable_thinking where that is unset. */
export function mapModelEnableThinking(tree: Tree, mapped: MappedSetting[], problem: Problem): void {
  const model = tree.model;
  if (!isMapping(model) || model.enable_thinking === undefined || model.enable_thinking === null) return;
  const value = model.enable_thinking;
  delete model.enable_thinking;
  const flag = value === 'true' ? true : value === 'false' ? false : value;
  if (typeof flag !== 'boolean') {
    problem('model.enable_thinking', `expected a boolean (true or false), got ${describeValue(value)}`);
    return;
  }
  if (!isMapping(tree.explorer)) tree.explorer = {};
  const explorer = tree.explorer as Tree;
  if (!isMapping(explorer.rollout_model)) explorer.rollout_model = {};
  const rollout = explorer.rollout_model as Tree;
  const own = rollout.enable_thinking;
  if (own !== undefined && own !== null) {
    mapped.push({
      path: 'model.enable_thinking',
      value,
      to: `not used: explorer.rollout_model.enable_thinking (${String(own)}) is set and wins`,
    });
    return;
  }
  rollout.enable_thinking = flag;
  mapped.push({
    path: 'model.enable_thinking',
    value,
    to: `explorer.rollout_model.enable_thinking ${String(flag)} (passed to the rollout model's chat template)`,
  });
}

/** explorer.max_inflight_batches: one explore batch is in flight here. */
export function mapMaxInflightBatches(node: Tree, at: At, mapped: MappedSetting[], problem: Problem): void {
  const explorer = node.explorer;
  if (!isMapping(explorer) || explorer.max_inflight_batches === undefined || explorer.max_inflight_batches === null) return;
  const value = explorer.max_inflight_batches;
  delete explorer.max_inflight_batches;
  const path = at(['explorer', 'max_inflight_batches']);
  const batches = asNumber(value);
  if (typeof batches !== 'number' || !Number.isInteger(batches) || batches < 1) {
    problem(path, `expected an integer >= 1, got ${describeValue(value)}`);
    return;
  }
  mapped.push({
    path,
    value,
    to:
      batches === 1
        ? '1 (the explorer here runs one explore batch at a time)'
        : `1: the explorer here runs one explore batch at a time (its runners finish a batch before the next starts), ` +
          `not ${batches} in flight as Trinity's fully_async explorer does for throughput`,
  });
}

/** The run's algorithm.repeat_times as written (a stage's own, else the run's), for the n lines. */
export function writtenRepeatTimes(tree: Tree, node: Tree): unknown {
  return getIn(node, ['algorithm', 'repeat_times']) ?? getIn(tree, ['algorithm', 'repeat_times']);
}
