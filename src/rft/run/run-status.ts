// <job dir>/run_status.json: what a run is doing, for whoever watches the folder (the Studio) without asking the
// process. A crash and a Ctrl-C leave the same checkpoints and metrics; only the run itself can say which happened.
//   {"state":"running","pid":123,"host":"node-1"}   written when the run starts
//   {"state":"interrupted"} / {"state":"failed","error":"…"} / {"state":"finished"}   written when it ends
// A "running" record whose process is gone means the process was killed (SIGKILL, power loss): nothing could write.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

export const RUN_STATUS_FILE = 'run_status.json';

export type RunState = 'running' | 'finished' | 'failed' | 'interrupted';

export interface RunStatus {
  state: RunState;
  /** The process and host of a running run. */
  pid?: number;
  host?: string;
  /** Why a failed run failed (its error's first line). */
  error?: string;
}

/** Writes <jobDir>/run_status.json atomically (temp file + rename: a reader never sees half a file). */
export function writeRunStatus(jobDir: string, status: RunStatus): void {
  mkdirSync(jobDir, { recursive: true });
  const file = join(jobDir, RUN_STATUS_FILE);
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, `${JSON.stringify(status)}\n`);
  renameSync(temp, file);
}

/** The status of this process running now. */
export const runningStatus = (): RunStatus => ({ state: 'running', pid: process.pid, host: hostname() });
