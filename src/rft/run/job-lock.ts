// <job dir>/run.lock: the job folder belongs to the one run that holds it. Two `trinity run` of one folder would
// both log every step's metrics and race on its checkpoints; the second fails at once, naming the owner's pid and
// host. The lock is a pid+host record checked for liveness, so a run that was killed (SIGKILL, power loss: nothing
// could remove the file) does not block the next:
//
//   take     link(temp file, run.lock): atomic, fails when the file exists (no two runs both take it)
//   held     the record's host is this one and its process is alive (kill(pid, 0), and the pid's start time is the
//            recorded one, so a pid the OS gave to another process since is not taken for the owner): refused,
//            naming pid and host;
//            another host's record cannot be checked from here: refused too, naming the file to delete
//   stale    its pid is gone: renamed aside (only one of two takers' renames succeeds) and taken again
//   release  the run ends (finished, failed or stopped): the file is removed if it is still this run's
//
// Explorer processes (mode explore) share the folder with the trainer process: each takes run.explorer-<name>.lock;
// the serving process (mode serve) shares it with its trainer process the same way: it takes run.serve.lock.
// Where the start time cannot be read (no /proc), a pid the OS reused for another process after a SIGKILL looks
// alive: the lock then names it, and the user removes the file (the message says so).
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { StageConfig } from './config/index.js';
import { processStartTime } from '../../util/index.js';
import { isRecordedProcessAlive } from './run-status.js';

export const JOB_LOCK_FILE = 'run.lock';

/**
 * The lock a run of these stages takes. Explorer processes (mode explore) share the job folder with the trainer
 * process and with each other: each holds the lock of its own explorer.name, so only two of one name conflict. A
 * serving process (mode serve) shares it with the trainer process: two serving processes of one folder conflict.
 */
export function jobLockFile(stages: readonly Pick<StageConfig, 'mode' | 'explorer'>[]): string {
  const first = stages[0];
  if (first !== undefined && stages.every((s) => s.mode === 'serve')) return 'run.serve.lock';
  if (first === undefined || !stages.every((s) => s.mode === 'explore')) return JOB_LOCK_FILE;
  return `run.explorer-${first.explorer.name ?? 'explorer'}.lock`;
}

interface LockRecord {
  pid: number;
  host: string;
  /** The owner's start time (src/util/process.ts processStartTime), when the host tells it. */
  startTime?: string;
}

export class JobFolderLockedError extends Error {
  override name = 'JobFolderLockedError';
}

function readRecord(file: string): LockRecord | null {
  try {
    const record = JSON.parse(readFileSync(file, 'utf8')) as Partial<LockRecord>;
    if (typeof record.pid !== 'number' || typeof record.host !== 'string') return null;
    return {
      pid: record.pid,
      host: record.host,
      ...(typeof record.startTime === 'string' ? { startTime: record.startTime } : {}),
    };
  } catch {
    return null; // gone meanwhile, or half a file from a writer that died: not a live owner's record
  }
}

function inUse(jobDir: string, file: string, owner: LockRecord, thisHost: string): JobFolderLockedError {
  const whose = `${jobDir} is in use by the run of pid ${owner.pid} on host ${owner.host} (${file})`;
  return new JobFolderLockedError(
    owner.host === thisHost
      ? `${whose}: wait for it to end, or stop it (if that pid is no longer a trinity run, delete the file)`
      : `${whose}; this host cannot check whether it is alive: if that run is gone, delete the file and run again`,
  );
}

/** Takes <jobDir>/<lockFile> for this process; returns its release. Throws JobFolderLockedError when a live run holds it. */
export function lockJobFolder(jobDir: string, lockFile = JOB_LOCK_FILE): () => void {
  mkdirSync(jobDir, { recursive: true });
  const file = join(jobDir, lockFile);
  const startTime = processStartTime(process.pid);
  const mine: LockRecord = { pid: process.pid, host: hostname(), ...(startTime !== null ? { startTime } : {}) };
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, `${JSON.stringify(mine)}\n`);
  try {
    // two tries: the second after a stale lock was put aside
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        linkSync(temp, file);
        return () => {
          const held = readRecord(file);
          if (held?.pid === mine.pid && held.host === mine.host) rmSync(file, { force: true });
        };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const owner = readRecord(file);
      if (owner !== null && (owner.host !== mine.host || isRecordedProcessAlive(owner)))
        throw inUse(jobDir, file, owner, mine.host);
      // stale (its run was killed): put it aside; if another taker did so first, the rename finds nothing
      const aside = `${file}.stale.${process.pid}`;
      try {
        renameSync(file, aside);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
        continue;
      }
      const moved = readRecord(aside);
      if (moved !== null && (moved.pid !== owner?.pid || moved.host !== owner.host)) {
        // a new owner's lock, taken between our read and our rename: it goes back
        renameSync(aside, file);
        throw inUse(jobDir, file, moved, mine.host);
      }
      rmSync(aside, { force: true });
    }
    throw new JobFolderLockedError(`${jobDir}: could not take ${file} (another run took it meanwhile); run again`);
  } finally {
    rmSync(temp, { force: true });
  }
}
