// <stage's job dir>/done.json: the stage finished. A rerun of the same command skips it and starts the next stage
// from its final model; the Studio shows it finished. Only a stage that ran to its end writes it (a failed or stopped
// one does not: ./run.ts):
//   {"finalModelDir": "…/final_model", "steps": 8, "stepsAsked": 10, "mode": "both"}
// `steps`: the last step it reached; `stepsAsked`: the train steps it was asked for (modes both and train).
//
// The record names the mode that wrote it: `trinity bench` over the folder of a finished training run (Trinity's flow:
// train, then benchmark the checkpoints) is a stage of another mode there, so it runs, and it leaves the training
// stage's done.json as it is; a training stage over a bench's record trains. A record from before `mode` was written
// is a training stage's when it has a final model (bench has none), else it counts for any mode (as it did).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { StageRecord, StageResult, StageSettings } from '../settings.js';

export const STAGE_DONE_FILE = 'done.json';

type Mode = StageSettings['mode'];

export interface StageDoneRecord extends StageRecord {
  stepsAsked?: number;
  mode?: Mode;
}

function readDone(jobDir: string): StageDoneRecord | null {
  const file = join(jobDir, STAGE_DONE_FILE);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as StageDoneRecord) : null;
}

/** Whether mode bench wrote a record (one without `mode`: not bench when it has a final model, else unknown). */
const benchRecord = (record: StageDoneRecord): boolean | null =>
  record.mode !== undefined ? record.mode === 'bench' : record.finalModelDir !== null ? false : null;

/**
 * The record of this stage finishing earlier, or null when it has to run: no done.json, or a bench stage over a
 * training stage's record (or the other way round). Otherwise a changed mode reruns nothing, as before.
 */
export function finishedStage(jobDir: string, mode: Mode): StageDoneRecord | null {
  if (mode === 'serve') return null; // it never finishes: its folder's done.json is its trainer process's
  const record = readDone(jobDir);
  if (record === null) return null;
  const bench = benchRecord(record);
  return bench === null || bench === (mode === 'bench') ? record : null;
}

/** Marks the stage finished; a bench over a finished training stage's folder leaves that stage's record. */
export function writeStageDone(jobDir: string, mode: Mode, result: StageResult): StageDoneRecord {
  const record: StageDoneRecord = {
    finalModelDir: result.finalModelDir,
    steps: result.steps,
    ...(result.stepsAsked !== undefined ? { stepsAsked: result.stepsAsked } : {}),
    mode,
  };
  const earlier = readDone(jobDir);
  if (mode === 'bench' && earlier !== null && benchRecord(earlier) === false) return record;
  mkdirSync(jobDir, { recursive: true });
  writeFileSync(join(jobDir, STAGE_DONE_FILE), `${JSON.stringify(record, null, 2)}\n`);
  return record;
}
