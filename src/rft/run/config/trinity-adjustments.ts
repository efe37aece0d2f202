// Values that Trinity-RFT adjusts itself when it checks a config (with a warning in its log), and an older switch
// it still reads, rewritten the same way here and recorded for the "mapped" block (./trinity-mappings.ts calls
// mapTrinityAdjustments for the run and for each stage):
//
//   explorer.eval_interval not a multiple of synchronizer.sync_interval
//       → max(⌊eval_interval / sync_interval⌋, 1) · sync_interval        (Trinity's Config._check_interval; not
//         for algorithm_type dpo or mode bench, as there; evaluation runs at sync points)
//   buffer.trainer_input.experience_buffer.use_priority_queue true | false
//       → replay_buffer.enable (the priority queue that replays experiences, Trinity's older switch of it)
//
// An interval left at its default is checked, not adjusted, when the run is resolved (./resolve-run.ts).
import { describeValue, getIn, isMapping, type Segment, type Tree } from '../../config/source.js';
/** One adjusted key: where it was written, the value, and what it became (a record of the "mapped" block). */
interface Adjusted {
  path: string;
  value: unknown;
  to: string;
}

type At = (path: readonly Segment[]) => string;
type Problem = (path: string, message: string) => void;

/**
 * Rewrites the adjusted keys of `node` (the run, or one stage whose unset sections fall back to `run`), in place;
 * returns what it adjusted.
 */
export function mapTrinityAdjustments(node: Tree, run: Tree, at: At, problem: Problem): Adjusted[] {
  const mapped: Adjusted[] = [];
  mapEvalInterval(node, run, at, mapped);
  mapPriorityQueue(node, at, mapped, problem);
  return mapped;
}

/** A written value of a stage, else of the run (a stage overrides the run's sections key by key). */
function written(node: Tree, run: Tree, path: readonly string[]): unknown {
  return getIn(node, path) ?? (node === run ? undefined : getIn(run, path));
}

function mapEvalInterval(node: Tree, run: Tree, at: At, mapped: Adjusted[]): void {
  const explorer = node.explorer;
  if (!isMapping(explorer)) return;
  const evalInterval = explorer.eval_interval;
  const syncInterval = written(node, run, ['synchronizer', 'sync_interval']);
  const integer = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 1;
  // a value of the wrong type is the schema's to report
  if (!integer(evalInterval) || !integer(syncInterval) || evalInterval % syncInterval === 0) return;
  if (written(node, run, ['algorithm', 'algorithm_type']) === 'dpo' || (node.mode ?? run.mode) === 'bench') return;
  const rounded = Math.max(Math.floor(evalInterval / syncInterval), 1) * syncInterval;
  explorer.eval_interval = rounded;
  mapped.push({
    path: at(['explorer', 'eval_interval']),
    value: evalInterval,
    to:
      `${rounded} (a multiple of synchronizer.sync_interval ${syncInterval}, rounded down as Trinity does: ` +
      'evaluation runs at sync points)',
  });
}

function mapPriorityQueue(node: Tree, at: At, mapped: Adjusted[], problem: Problem): void {
  const bufferPath = ['buffer', 'trainer_input', 'experience_buffer'];
  const buffer = getIn(node, bufferPath);
  if (!isMapping(buffer) || buffer.use_priority_queue === undefined || buffer.use_priority_queue === null) return;
  const value = buffer.use_priority_queue;
  delete buffer.use_priority_queue;
  const path = at([...bufferPath, 'use_priority_queue']);
  const enable = value === 'true' ? true : value === 'false' ? false : value;
  if (typeof enable !== 'boolean') {
    problem(path, `expected a boolean (true or false), got ${describeValue(value)}`);
    return;
  }
  const replay = buffer.replay_buffer ?? {};
  if (!isMapping(replay)) return; // the schema reports replay_buffer's type
  if (replay.enable !== undefined && replay.enable !== null && replay.enable !== enable) {
    problem(
      path,
      `is Trinity's older switch of replay_buffer.enable, which is set to ${describeValue(replay.enable)}: remove one`,
    );
    return;
  }
  buffer.replay_buffer = { ...replay, enable };
  mapped.push({
    path,
    value,
    to: `${bufferPath.join('.')}.replay_buffer.enable ${enable} (the priority queue that replays experiences; its older switch)`,
  });
}
