// <job dir>/run_status.json: what a run is doing, for whoever watches the folder (the Studio) without asking the
// process. A crash and a Ctrl-C leave the same checkpoints and metrics; only the run itself can say which happened.
//   {"state":"running","pid":123,"host":"node-1","startTime":"8812345"}   written when the run starts
//   {"state":"interrupted"} / {"state":"failed","error":"…"} / {"state":"finished"}   written when it ends
// A "running" record whose process is gone means the process was killed (SIGKILL, power loss): nothing could write.
// A pid alone does not say the process is gone: after a crash the system may give the same pid to another process.
// So the record carries the process's start time (Linux: /proc/<pid>/stat field 22, clock ticks since boot), and a
// watcher takes the run for alive only when the pid's start time now is the one recorded (isRecordedProcessAlive).
// Where the start time cannot be read (no /proc) it is left out, and the pid is all a watcher has.
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { processExists, processStartTime } from '../../util/index.js';

export const RUN_STATUS_FILE = 'run_status.json';

export type RunState = 'running' | 'finished' | 'failed' | 'interrupted';

export interface RunStatus {
  state: RunState;
  /** The process and host of a running run. */
  pid?: number;
  host?: string;
  /** The process's start time as the system counts it (see the header); absent where it cannot be read. */
  startTime?: string;
  /** Why a failed run failed (its error's first line). */
  error?: string;
}

/** Writes <jobDir>/run_status.json atomically (temp file + rename: a reader never sees half a file). */
export function writeRunStatus(jobDir: string, status: RunStatus): void {
  mkdirSync(jobDir, { recursive: true });
  const file = join(jobDir, RUN_STATUS_FILE);
  const temp = `${file}.${process.pid}.tmp`;
  // created anew ('wx': O_CREAT | O_EXCL, which does not follow a link put at the temp name, dangling or not)
  rmSync(temp, { force: true });
  writeFileSync(temp, `${JSON.stringify(status)}\n`, { flag: 'wx' });
  renameSync(temp, file);
}

/** The status of process `pid` (default: this one) running now, on this host. */
export function runningStatus(pid = process.pid): RunStatus {
  const startTime = processStartTime(pid);
  return { state: 'running', pid, host: hostname(), ...(startTime !== null ? { startTime } : {}) };
}

/**
 * Whether the process a "running" record names is still that process (on this host): it exists, and when the
 * record has a start time, the pid's start time now is the same (else the pid was given to another process).
 */
export function isRecordedProcessAlive(status: Pick<RunStatus, 'pid' | 'startTime'>): boolean {
  if (status.pid === undefined || !processExists(status.pid)) return false;
  if (status.startTime === undefined) return true;
  const now = processStartTime(status.pid);
  return now === null || now === status.startTime;
}
