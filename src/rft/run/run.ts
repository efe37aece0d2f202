// `trinity run --config FILE`: the stages of a run in order. Each stage starts from the previous stage's final
// weights; a stage that finished (its done.json exists: ./stage-done.ts) is skipped when the same command runs again,
// and an unfinished one resumes from its latest checkpoint (see ./stage.ts). With continue_from_checkpoint false and
// the job folder already there, the run starts afresh in <job dir>_<timestamp> (as Trinity-RFT renames the
// experiment), and the earlier folder is left as it is. The job folder belongs to one run at a time (./job-lock.ts):
// a second run of it fails at once, before it writes anything there. The Trinity-RFT keys the config carried that this
// backend ignores or maps are printed once, before the first stage, and kept in the job folder.
import { existsSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, relative } from 'node:path';
import type { Config, StageConfig } from './config/index.js';
import { resolveStages } from './config/index.js';
import { checkBeforeRun } from './config/preflight.js';
import { ProgressReporter } from '../monitor/index.js';
import { describePlacement, describeRank, distributedLaunchFromEnv } from './distributed.js';
import { runFollower } from './follower.js';
import { jobLockFile, lockJobFolder } from './job-lock.js';
import { runningStatus, writeRunStatus } from './run-status.js';
import type { DistributedSettings, StageHooks, StageRecord, StageResult, StageSettings } from '../settings.js';
import { runStage } from './stage.js';
import { finishedStage, STAGE_DONE_FILE, writeStageDone } from './stage-done.js';
import { stageSettings } from './config/stage-settings.js';
import { describeTrinityKeys } from './config/trinity-report.js';

export { stageSettings } from './config/stage-settings.js';

/**
 * Where a run keeps the ignored and mapped Trinity keys it printed at its start (./config/trinity-report.ts):
 * `trinity-keys.txt`, or beside an explorer process's own lock (`trinity-keys.explorer-<name>.txt`), as the processes
 * of one job folder each keep their own.
 */
export const trinityKeysFile = (lockFile: string): string => lockFile.replace(/^run(.*)\.lock$/, 'trinity-keys$1.txt');

export interface RunOptions {
  log?: (line: string) => void;
  /** Where module-path plug-ins resolve (default: the working directory; the CLI passes the config file's folder). */
  baseDir?: string;
  signal?: AbortSignal;
  /** Runs a mode-serve stage (the CLI passes src/serve's runServeStage; the rft layer has no HTTP server of its own). */
  serveStage?: (settings: StageSettings, hooks: StageHooks) => Promise<StageResult>;
  /** This process's place among data-parallel trainer ranks (default: the torchrun environment; null: one process). */
  distributed?: DistributedSettings | null;
}

/** Runs every stage of the config in order; returns the last stage's final model folder. */
export async function runConfig(
  config: Config,
  options: RunOptions = {},
): Promise<{ finalModelDir: string | null; stages: StageRecord[] }> {
  const log = options.log ?? ((line: string) => console.log(line));
  const distributed = options.distributed === undefined ? distributedLaunchFromEnv() : options.distributed;
  // what every stage needs from the disk and the registries, before anything is made or run (as `config check`)
  await checkBeforeRun(config, options.baseDir !== undefined ? { baseDir: options.baseDir } : {});
  const configured = config.checkpoint_job_dir;
  let jobDir = configured;
  let stages = resolveStages(config);
  // once per run (rank 0's), before the first stage: the Trinity keys this backend ignores or maps
  const trinityKeys = await describeTrinityKeys(config, stages);
  if (distributed !== null) {
    log(`data-parallel trainer: ${describeRank(distributed)}, host ${hostname()}, pid ${process.pid}`);
    if (distributed.rank > 0)
      return runFollower(
        stages.length,
        config.model.model_path,
        (index, modelPath) => stageSettings(stages[index] as StageConfig, modelPath, options.baseDir, distributed),
        { log, ...(options.signal ? { signal: options.signal } : {}) },
      );
    // the other ranks could not learn the name of a renamed folder: they follow the stages of the configured one
    if (!config.continue_from_checkpoint && existsSync(configured))
      throw new Error(
        `continue_from_checkpoint is false and ${configured} exists: a data-parallel run cannot start afresh in a ` +
          'renamed folder (ranks > 0 would not know its name); move the folder away, or set continue_from_checkpoint: true',
      );
  }
  for (const line of trinityKeys) log(line);
  if (!config.continue_from_checkpoint && existsSync(configured)) {
    jobDir = `${configured}_${new Date().toISOString().replace(/[-:]/g, '').replace(/\..*$/, '')}`;
    const fresh = jobDir;
    stages = stages.map((s) => ({ ...s, checkpoint_job_dir: fresh + s.checkpoint_job_dir.slice(configured.length) }));
    log(`continue_from_checkpoint is false and ${configured} exists: this run starts afresh in ${fresh}`);
  }
  // before anything is written there: a second run of the folder leaves the owner's files as they are
  const lockFile = jobLockFile(stages);
  const unlock = lockJobFolder(jobDir, lockFile);
  try {
    // the stage folders in run order (the report reads it)
    writeFileSync(
      join(jobDir, 'stages.json'),
      `${JSON.stringify(stages.map((s) => relative(jobDir, s.checkpoint_job_dir) || '.'))}\n`,
    );
    if (trinityKeys.length > 0) writeFileSync(join(jobDir, trinityKeysFile(lockFile)), `${trinityKeys.join('\n')}\n`);
    writeRunStatus(jobDir, runningStatus());
    try {
      const result = await runStages(stages, config.model.model_path, options, distributed, log);
      writeRunStatus(jobDir, { state: result.finalModelDir === null && options.signal?.aborted ? 'interrupted' : 'finished' });
      return result;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      writeRunStatus(jobDir, { state: 'failed', error: message.split('\n')[0] ?? '' });
      throw error;
    }
  } finally {
    unlock();
  }
}

/** The stages in order, each from the previous one's final model; a finished stage (done.json) is skipped. */
async function runStages(
  stages: readonly StageConfig[],
  firstModelPath: string,
  options: RunOptions,
  distributed: DistributedSettings | null,
  log: (line: string) => void,
): Promise<{ finalModelDir: string | null; stages: StageRecord[] }> {
  const records: StageRecord[] = [];
  let modelPath = firstModelPath;
  const progress = new ProgressReporter({ label: 'run', total: 1 });
  for (const [index, stage] of stages.entries()) {
    const settings = stageSettings(stage, modelPath, options.baseDir, distributed);
    const earlier = finishedStage(settings.jobDir, settings.mode);
    if (earlier !== null) {
      log(`[${settings.stageName}] finished earlier (${join(settings.jobDir, STAGE_DONE_FILE)}): skipped`);
      records.push(earlier);
      if (earlier.finalModelDir) modelPath = earlier.finalModelDir;
      continue;
    }
    log(
      `[${settings.stageName}] stage ${index + 1}/${stages.length}: mode ${settings.mode}, model ${modelPath}, job ${settings.jobDir}`,
    );
    log(`[${settings.stageName}] ${describePlacement(settings)}`);
    const hooks: StageHooks = {
      log: (line) => progress.log(line),
      progress,
      ...(options.signal ? { signal: options.signal } : {}),
    };
    let result: StageResult;
    if (settings.mode === 'serve') {
      if (!options.serveStage)
        throw new Error(`stage '${settings.stageName}': mode serve needs the serving layer (run it with the trinity CLI)`);
      result = await options.serveStage(settings, hooks);
    } else result = await runStage(settings, hooks);
    if (options.signal?.aborted) {
      log(`[${settings.stageName}] stopped; run the same command to resume`);
      return { finalModelDir: null, stages: records };
    }
    if (result.openEnded) {
      log(
        `[${settings.stageName}] the processes writing the buffer finished: trained to step ${result.steps} ` +
          `(final model ${result.finalModelDir}); run the same command to train on when they write again`,
      );
      records.push({ finalModelDir: result.finalModelDir, steps: result.steps });
      if (result.finalModelDir) modelPath = result.finalModelDir;
      continue;
    }
    const record = writeStageDone(settings.jobDir, settings.mode, result);
    if (record.stepsAsked !== undefined)
      log(`[${settings.stageName}] finished: trained ${record.steps} of ${record.stepsAsked} step(s)`);
    records.push(record);
    if (record.finalModelDir) modelPath = record.finalModelDir;
  }
  return { finalModelDir: records.at(-1)?.finalModelDir ?? null, stages: records };
}
