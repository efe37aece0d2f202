// What a checkpoint holds, and how a resumed stage puts it back. A checkpoint (written by ../checkpoint.ts, in
// <jobDir>/checkpoints/global_step_<N>/) has three kinds of state:
//
//   model/ or adapter/, optimizer.safetensors, critic*.safetensors   the trainer's tensors (../checkpoint.ts)
//   trainer.json    the trainer's other state (SavedTrainerState, ../trainer/trainer-worker-main.ts): the train
//                   step's own (adaptive KL coefficients, ...), the LR scheduler's step, the LoRA dropout stream
//   state.json      { step, optimizer: {kind, groups}, ...RunState } — RunState below: the explorer's task scheduler,
//                   the step batches' sample strategy and auxiliary positions and the shared buffer's cursor
//                   (StepBatchesState, ../trainer/step-batches.ts), mode both's in-memory buffer contents, and
//                   trainer.stop_when's verdict
//
// Resume: the trainer restarts from the latest checkpoint's tensors and trainer.json; the explorer from the task
// scheduler state saved with it (as it was after exploring that step); the sample strategy and the auxiliary datasets
// from their saved positions; an in-memory buffer from its saved contents; metrics.jsonl keeps only steps up to it.
import { join } from 'node:path';
import {
  type ExperienceBuffer,
  PriorityReplayBuffer,
  type PriorityReplayState,
  QueueBuffer,
  type TasksetScheduler,
} from '../buffer/index.js';
import type { Experience } from '../experience.js';
import { keepStepLines } from '../monitor/index.js';
import type { StepBatchesState } from '../trainer/step-batches.js';

/** state.json: the run state a checkpoint holds besides the trainer's own. */
export interface RunState extends StepBatchesState {
  explorer: { scheduler: ReturnType<TasksetScheduler['state']>; step: number } | null;
  /** Mode both, in-memory queue: rollouts of explored steps <= the checkpoint's that the trainer had not read yet
   * (a strategy that reads fewer than a step explored leaves them for the next step); written back on resume. */
  unread?: Experience[];
  /** Mode both, priority replay buffer (replay_buffer.enable): its entries of explored steps <= the checkpoint's, with
   * their use counts, priorities and cooldowns, and its noise generator; loaded into it on resume. */
  replay?: PriorityReplayState;
  /**
   * What `buffer.cursor` counts (an SQL buffer): row ids (a plain reader) or the priority replay's revisions
   * (replay_buffer.enable); the other reader cannot read on from it. Absent in checkpoints written before it was kept.
   */
  bufferCursor?: 'rows' | 'replay';
  /** trainer.stop_when was met at this step (the checkpoint's own): the stage ended there. */
  stoppedAt?: number;
  stage: string;
}

/**
 * What a checkpoint at `step` keeps of mode both's in-memory buffer: what it holds from explored steps <= `step` (a
 * resumed explorer explores the later ones again). The SQLite buffer keeps its own read position (`buffer.cursor`).
 */
export function memoryBufferState(buffer: ExperienceBuffer, step: number): Pick<RunState, 'unread' | 'replay'> {
  if (buffer instanceof PriorityReplayBuffer) return { replay: buffer.state({ throughStep: step }) };
  if (buffer instanceof QueueBuffer)
    return { unread: buffer.peek().filter((e) => (e.info.step ?? Number.POSITIVE_INFINITY) <= step) };
  return {};
}

/**
 * Puts a checkpoint's buffer contents back before the explorer starts. A replay state goes into a replay buffer as it
 * was; into another buffer (replay turned off since) its experiences are written in the order it would have read them.
 */
export async function restoreMemoryBuffer(
  buffer: ExperienceBuffer,
  saved: Pick<RunState, 'unread' | 'replay'>,
  checkpointDir: string,
): Promise<void> {
  const experiences = [...(saved.unread ?? [])];
  if (saved.replay && buffer instanceof PriorityReplayBuffer) {
    try {
      buffer.loadState(saved.replay);
    } catch (error) {
      throw new Error(`${join(checkpointDir, 'state.json')}: ${(error as Error).message}`);
    }
  } else if (saved.replay)
    for (const entry of [...saved.replay.entries].sort((a, b) => b.priority - a.priority || a.seq - b.seq))
      experiences.push({ ...entry.experience, info: { ...entry.experience.info, useCount: entry.useCount } });
  if (experiences.length) await buffer.write(experiences);
}

/** Keeps the JSONL lines (metrics, eval samples) of steps <= `step`: a resumed run redoes the later ones. */
export function truncateSteps(file: string, step: number): void {
  keepStepLines(file, (recorded) => recorded <= step);
}
