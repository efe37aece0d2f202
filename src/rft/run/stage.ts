// One stage of a run: the explorer and trainer loops, the buffer between them and the synchronizer.
//
//   mode both     explorer loop (rollouts on the engine's worker thread) ─▶ buffer ─▶ trainer loop (trainer worker)
//                 weights flow back every sync_interval trainer steps (memory: by reference; checkpoint: files)
//   mode explore  explorer loop only; experiences to a shared SQLite buffer; weights from the trainer's sync folder
//   mode train    trainer loop only; experiences from the shared SQLite buffer (or a dataset for SFT/DPO)
//   mode bench    the base model and every saved checkpoint on the eval tasksets
//
// Synchronisation (sync_style fixed): explorer step e (1-based) may start once the explorer holds weights of version
//   required(e) = max(0, floor((e - 1 - sync_offset) / sync_interval) * sync_interval)
// so offset 0, interval 1 is strictly on-policy and offset 1 lets the explorer run one step ahead. Syncs happen
// between explorer steps (a lock), never in the middle of a rollout.
//
// Resume: the trainer restarts from the latest checkpoint (model, optimizer, step); the explorer from the task
// scheduler state saved with it (as it was after exploring that step); metrics.jsonl keeps only steps up to it.
// Steps after the checkpoint are explored and trained again: none is lost, none counted twice.
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { WorkerRolloutEngine } from '../../engine/index.js';
import { OpenAIRemoteEngine } from '../../openai/index.js';
import { Tokenizer } from '../../tokenizer/index.js';
import type { Tensor } from '../../torch/index.js';
import { loadAlgorithmPlugins } from '../algorithm/plugins.js';
import { arrayReader, type ExperienceReader, SAMPLE_STRATEGY } from '../algorithm/sample-strategy.js';
import { resolveAlgorithm } from '../algorithm/presets.js';
import {
  BufferTimeoutError,
  type DatasetFormat,
  DatasetReader,
  loadDpoDataset,
  loadSftDataset,
  loadTaskset,
  type PriorityFnName,
  PriorityReplayBuffer,
  QueueBuffer,
  SqliteBuffer,
  type SelectorConfig,
  type TasksetConfig,
  TasksetScheduler,
} from '../buffer/index.js';
import { latestCheckpoint, listCheckpoints } from '../checkpoint.js';
import type { Experience } from '../experience.js';
import type { Task } from '../task.js';
import { createMonitors, type MonitorGroup, ProgressReporter } from '../monitor/index.js';
import type { StageHooks, StageResult, StageSettings } from './settings.js';
import { TrainerClient } from '../trainer/trainer.js';
import { EngineModelHandle, WorkflowRunner } from '../workflow/index.js';

/** What the explorer needs of its engine: rollouts, weights from a folder, close. */
type ExplorerEngine = WorkerRolloutEngine | OpenAIRemoteEngine;

/**
 * The explorer's engine: the embedded one on its own thread with `weightsDir`'s weights, or an external server
 * (engine_type openai), told to load `weightsDir` when that is not the model it started with.
 */
async function startExplorerEngine(settings: StageSettings, weightsDir: string): Promise<ExplorerEngine> {
  const spec = settings.explorer.engine;
  if (spec.type === 'embedded') {
    return WorkerRolloutEngine.start(weightsDir, {
      dtype: settings.dtype,
      slots: settings.explorer.slots,
      maxLength: settings.explorer.maxLength,
      numThreads: settings.threads.explorer,
    });
  }
  const tokenizer = existsSync(join(settings.modelPath, 'tokenizer.json')) ? Tokenizer.load(settings.modelPath) : null;
  const engine = await OpenAIRemoteEngine.connect({
    baseURL: spec.baseUrl,
    model: spec.modelName,
    apiKey: spec.apiKey,
    tokenizer,
  });
  if (weightsDir !== settings.modelPath) await engine.syncWeightsFromDir(weightsDir, { timeoutMs: settings.sync.timeoutMs });
  return engine;
}

/** The weights version the explorer needs before explore step `step` (see the header). */
export function requiredVersion(step: number, syncInterval: number, syncOffset: number): number {
  return Math.max(0, Math.floor((step - 1 - syncOffset) / syncInterval) * syncInterval);
}

/** A mutex: syncs and explorer steps never overlap. */
class Lock {
  #tail: Promise<void> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(fn);
    this.#tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

/** Waits until `ready()` or the timeout; the error names what it waited for. */
async function waitFor(ready: () => boolean, timeoutMs: number, what: string, signal?: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ready()) {
    if (signal?.aborted) throw new Error(`stopped while waiting for ${what}`);
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Keeps the JSONL lines (metrics, eval samples) of steps <= `step`: a resumed run redoes the later ones. */
function truncateSteps(file: string, step: number): void {
  if (!existsSync(file)) return;
  const kept = readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => {
      if (line.trim() === '') return false;
      try {
        const recorded = (JSON.parse(line) as { step?: unknown }).step;
        return typeof recorded === 'number' && recorded <= step;
      } catch {
        return false;
      }
    });
  writeFileSync(`${file}.tmp`, kept.length ? `${kept.join('\n')}\n` : '');
  renameSync(`${file}.tmp`, file);
}

const mean = (values: readonly number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : Number.NaN);

// ---------------------------------------------------------------------------------------------------------------
// the weight channel between trainer and explorer

interface SyncChannel {
  /** Publishes the trainer's weights as `version`. */
  publish(version: number): Promise<void>;
}

function syncFolder(jobDir: string): string {
  return join(jobDir, 'sync');
}

/** Written by a trainer (mode train, or checkpoint sync): the newest weights for explorers. */
function writeSyncPointer(jobDir: string, version: number, dir: string): void {
  const file = join(syncFolder(jobDir), 'latest.json');
  writeFileSync(`${file}.tmp`, JSON.stringify({ version, dir }));
  renameSync(`${file}.tmp`, file);
}

export function readSyncPointer(jobDir: string): { version: number; dir: string } | null {
  const file = join(syncFolder(jobDir), 'latest.json');
  if (!existsSync(file)) return null;
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as { version: number; dir: string };
  } catch {
    return null; // being replaced: read it next time
  }
}

async function publishToFolder(trainer: TrainerClient, jobDir: string, version: number): Promise<string> {
  const dir = join(syncFolder(jobDir), `version_${version}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(syncFolder(jobDir), { recursive: true });
  await trainer.saveWeights(`${dir}.tmp`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(`${dir}.tmp`, dir);
  const previous = readSyncPointer(jobDir);
  writeSyncPointer(jobDir, version, dir);
  if (previous && previous.dir !== dir) rmSync(previous.dir, { recursive: true, force: true });
  return dir;
}

// ---------------------------------------------------------------------------------------------------------------

/** A few eval answers per eval step (the report shows them before and after training). */
function writeEvalSamples(
  jobDir: string,
  step: number,
  tasks: readonly Task[],
  experiences: readonly Experience[],
  limit = 12,
): void {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const seen = new Set<string>();
  const lines: string[] = [];
  for (const e of experiences) {
    const taskId = e.info.taskId ?? '';
    if (seen.has(taskId) || lines.length >= limit) continue;
    seen.add(taskId);
    const task = byId.get(taskId);
    lines.push(
      JSON.stringify({
        step,
        taskset: task?.taskset ?? '',
        taskId,
        prompt: task?.prompt ?? '',
        response: e.responseText ?? '',
        reference: task?.response ?? '',
        reward: e.reward ?? 0,
      }),
    );
  }
  if (lines.length) appendFileSync(join(jobDir, 'eval_samples.jsonl'), `${lines.join('\n')}\n`);
}

export async function runStage(settings: StageSettings, hooks: StageHooks = {}): Promise<StageResult> {
  const log = hooks.log ?? ((line: string) => console.log(line));
  mkdirSync(settings.jobDir, { recursive: true });
  await loadAlgorithmPlugins(settings.algorithm, settings.pluginBaseDir);
  const algorithm = resolveAlgorithm(settings.algorithm);
  if (settings.mode === 'bench') return runBench(settings, log);
  if (settings.mode === 'serve') throw new Error(`stage '${settings.stageName}': mode serve runs in src/serve (runServeStage)`);

  // an explorer process (mode explore) shares the job folder with its trainer process: its metrics go beside
  const metricsDir = settings.mode === 'explore' ? join(settings.jobDir, 'explorer') : settings.jobDir;
  const metricsFile = join(metricsDir, 'metrics.jsonl');
  const checkpoint = latestCheckpoint(settings.jobDir);
  const startStep = checkpoint?.step ?? 0;
  truncateSteps(metricsFile, startStep);
  truncateSteps(join(metricsDir, 'eval_samples.jsonl'), startStep);
  if (checkpoint) log(`[${settings.stageName}] resuming from checkpoint step ${startStep} (${checkpoint.dir})`);

  const needsExplorer = settings.mode === 'both' || settings.mode === 'explore';
  const needsTrainer = settings.mode === 'both' || settings.mode === 'train';

  // tasks (the scheduler fixes the number of steps)
  const tasksets = needsExplorer ? await Promise.all(settings.tasksets.map((t) => loadTaskset(t.taskset))) : [];
  const scheduler = needsExplorer
    ? new TasksetScheduler({
        tasksets: settings.tasksets.map((t, i) => ({
          taskset: tasksets[i] as Awaited<ReturnType<typeof loadTaskset>>,
          ...(t.selector ? { selector: t.selector } : {}),
          ...(t.weight !== undefined ? { weight: t.weight } : {}),
        })),
        batchSize: settings.batchSize,
        totalEpochs: settings.totalEpochs,
        ...(settings.totalSteps !== null ? { totalSteps: settings.totalSteps } : {}),
      })
    : null;
  let dataset: DatasetReader | null = null;
  if (settings.buffer.storageType === 'file') {
    if (settings.mode !== 'train')
      throw new Error(`stage '${settings.stageName}': a file experience buffer (a dataset) needs mode train`);
    if (!settings.buffer.path) throw new Error(`stage '${settings.stageName}': the file experience buffer needs a path`);
    const load = algorithm.schema === 'dpo' ? loadDpoDataset : loadSftDataset;
    const rows = await load(settings.buffer.path, Tokenizer.load(settings.modelPath), settings.buffer.format ?? {});
    dataset = new DatasetReader(rows, settings.trainBatchSize);
  }
  const totalSteps = settings.totalSteps ?? scheduler?.totalSteps ?? dataset?.stepsFor(settings.totalEpochs) ?? 0;
  if (totalSteps <= 0) throw new Error(`stage '${settings.stageName}': no steps to run (set buffer.total_steps or give tasks)`);
  const savedExplorer = (checkpoint?.state.explorer ?? null) as { scheduler?: unknown; step?: number } | null;
  if (scheduler && savedExplorer?.scheduler)
    scheduler.loadState(savedExplorer.scheduler as Parameters<TasksetScheduler['loadState']>[0]);

  const monitors: MonitorGroup = createMonitors({
    jobDir: metricsDir,
    types: settings.monitorTypes,
    project: settings.project,
    name: `${settings.name}/${settings.stageName}`,
    config: { mode: settings.mode, algorithm: settings.algorithm },
  });
  const progress = hooks.progress ?? new ProgressReporter({ label: settings.stageName, total: totalSteps });
  progress.setLabel(settings.stageName, totalSteps);
  progress.resumeAt(startStep);

  let trainer: TrainerClient | null = null;
  let engine: ExplorerEngine | null = null;
  let buffer: QueueBuffer | PriorityReplayBuffer | SqliteBuffer | null = null;
  // Rollout log-probs are taken at the sampling temperature, so the trainer recomputes them at the same one; SFT and
  // DPO rows are not rollouts, so their loss uses the model's own distribution (temperature 1).
  const temperature =
    algorithm.schema === 'experience' && typeof settings.rolloutArgs.temperature === 'number'
      ? settings.rolloutArgs.temperature
      : 1;
  try {
    if (needsTrainer) {
      const started = await TrainerClient.start({
        jobDir: settings.jobDir,
        resume: true,
        modelPath: settings.modelPath,
        dtype: settings.dtype,
        algorithm: settings.algorithm,
        pluginBaseDir: settings.pluginBaseDir,
        lora: settings.lora,
        totalSteps,
        microBatchSize: settings.trainer.microBatchSize,
        gradientCheckpointing: settings.trainer.gradientCheckpointing,
        temperature,
        padTokenId: 0,
        seed: settings.seed,
        numThreads: settings.threads.trainer,
      });
      trainer = started.trainer;
    }
    buffer =
      settings.buffer.storageType === 'sql'
        ? new SqliteBuffer({ path: settings.buffer.path ?? join(settings.jobDir, 'buffer.db'), name: 'experience_buffer' })
        : dataset
          ? null
          : settings.buffer.replay
            ? new PriorityReplayBuffer({
                name: 'experience_buffer',
                capacity: settings.buffer.capacity,
                priorityFn: settings.buffer.replay.priorityFn as PriorityFnName,
                decay: settings.buffer.replay.decay,
                reuseCooldownMs: settings.buffer.replay.reuseCooldownMs,
              })
            : new QueueBuffer({ name: 'experience_buffer', capacity: settings.buffer.capacity });
    if (buffer instanceof SqliteBuffer && checkpoint) {
      const cursor = (checkpoint.state.buffer as { cursor?: number } | undefined)?.cursor;
      if (typeof cursor === 'number') buffer.commit(cursor);
      buffer.rewind();
    }

    // the explorer side: an engine on its own thread, the model handle, the workflow runner
    let version = startStep;
    let handle: EngineModelHandle | null = null;
    let runner: WorkflowRunner | null = null;
    if (needsExplorer) {
      const startWeights = checkpoint?.modelDir && settings.lora === null ? checkpoint.modelDir : settings.modelPath;
      engine = await startExplorerEngine(settings, startWeights);
      handle = new EngineModelHandle(engine, { modelVersion: version });
      runner = new WorkflowRunner({
        models: handle,
        baseDir: settings.pluginBaseDir,
        runnerPerModel: settings.explorer.runnerPerModel,
        maxTimeout: settings.explorer.maxTimeout,
        maxRetryTimes: settings.explorer.maxRetryTimes,
        defaultWorkflow: settings.explorer.defaultWorkflow,
        seed: settings.seed,
        log: (line) => progress.log(line),
      });
    }

    const lock = new Lock();
    const sync: SyncChannel | null =
      trainer && engine
        ? {
            publish: async (v) => {
              if (settings.sync.method === 'memory') {
                const weights: Map<string, Tensor> = await (trainer as TrainerClient).beginSync();
                try {
                  if (!(engine instanceof WorkerRolloutEngine))
                    throw new Error('memory sync needs the embedded engine (engine_type openai syncs by checkpoint)');
                  await engine.syncWeights(weights, { timeoutMs: settings.sync.timeoutMs });
                } finally {
                  for (const t of weights.values()) t.dispose();
                  await (trainer as TrainerClient).endSync();
                }
              } else {
                const dir = await publishToFolder(trainer as TrainerClient, settings.jobDir, v);
                await (engine as ExplorerEngine).syncWeightsFromDir(dir, { timeoutMs: settings.sync.timeoutMs });
              }
              version = v;
              if (handle) handle.modelVersion = v;
            },
          }
        : null;
    // A LoRA run (or a resume without a full model in the checkpoint) starts the engine from the base weights.
    if (sync && startStep > 0 && (settings.lora !== null || !checkpoint?.modelDir)) await lock.run(() => sync.publish(startStep));

    const explorerMetrics = new Map<number, Record<string, number>>();
    const schedulerStates = new Map<number, unknown>();
    if (scheduler) schedulerStates.set(startStep, scheduler.state());
    let explorerDone = false;
    let trainerDone = false;
    // explorer_driven: the explorer's request for weights (in memory, or a file for a separate trainer process)
    let syncRequested = false;
    const requestFile = join(syncFolder(settings.jobDir), 'request.json');
    const requestSync = (have: number) => {
      syncRequested = true;
      if (settings.mode === 'explore') {
        mkdirSync(syncFolder(settings.jobDir), { recursive: true });
        writeFileSync(requestFile, JSON.stringify({ after: have }));
      }
    };
    const syncRequestPending = (): boolean => (settings.mode === 'train' ? existsSync(requestFile) : syncRequested);
    const clearSyncRequest = (): void => {
      if (settings.mode === 'train') rmSync(requestFile, { force: true });
      syncRequested = false;
    };
    // a trainer process that finished writes its last version; the explorer then stops waiting for more
    const trainerFinished = () => existsSync(join(syncFolder(settings.jobDir), 'finished'));

    const explorerLoop = async () => {
      if (!scheduler || !runner || !buffer) return;
      try {
        if (settings.evalOnStartup && startStep === 0 && settings.evalTasksets.length) await evaluate(0);
        for (let step = startStep + 1; step <= totalSteps; step++) {
          if (hooks.signal?.aborted) break;
          const style = settings.sync.style;
          if (style === 'explorer_driven') {
            // at each sync point ask the trainer for its current weights and wait until they arrive
            const since = step - 1 - settings.sync.offset;
            if (since > 0 && since % settings.sync.interval === 0) {
              const have = settings.mode === 'explore' ? await followTrainer(0) : version;
              requestSync(have);
              const what = `the trainer to answer the sync requested at explore step ${step}`;
              if (settings.mode === 'explore') {
                await waitFor(() => !existsSync(requestFile) || trainerFinished(), settings.sync.timeoutMs, what, hooks.signal);
                await followTrainer(0);
              } else await waitFor(() => !syncRequested || trainerDone, settings.sync.timeoutMs, what, hooks.signal);
            }
          } else {
            const need = style === 'fixed' ? requiredVersion(step, settings.sync.interval, settings.sync.offset) : 0;
            if (settings.mode === 'explore') await followTrainer(need);
            else
              await waitFor(
                () => version >= need,
                settings.sync.timeoutMs,
                `weights version ${need} for explore step ${step} (have ${version})`,
                hooks.signal,
              );
          }
          const batch = scheduler.nextBatch();
          if (batch === null) break;
          const result = await lock.run(() =>
            (runner as WorkflowRunner).runStep(batch.tasks, {
              step,
              repeatTimes: algorithm.repeatTimes,
              ...(hooks.signal ? { signal: hooks.signal } : {}),
            }),
          );
          for (const task of batch.tasks) {
            const rewards = result.experiences.filter((e) => e.info.taskId === task.id).map((e) => e.reward ?? 0);
            if (rewards.length) scheduler.feedback(task.id, rewards);
          }
          schedulerStates.set(step, scheduler.state());
          explorerMetrics.set(step, { ...result.metrics, 'explorer/model_version': version });
          await buffer.write(result.experiences);
          if (settings.mode === 'explore') {
            monitors.log(step, explorerMetrics.get(step) ?? {});
            progress.update(step, { reward: result.metrics['rollout/reward/mean'] ?? Number.NaN });
          }
          if (settings.evalInterval > 0 && step % settings.evalInterval === 0 && settings.evalTasksets.length)
            await evaluate(step);
        }
      } finally {
        explorerDone = true;
        buffer.finishWriting();
      }
    };

    // explore mode: take the newest weights the trainer published; wait while they are older than needed
    const followTrainer = async (need: number): Promise<number> => {
      const deadline = Date.now() + settings.sync.timeoutMs;
      for (;;) {
        const pointer = readSyncPointer(settings.jobDir);
        if (pointer && pointer.version > version) {
          await (engine as ExplorerEngine).syncWeightsFromDir(pointer.dir, { timeoutMs: settings.sync.timeoutMs });
          version = pointer.version;
          if (handle) handle.modelVersion = version;
        }
        if (version >= need) return version;
        if (Date.now() > deadline)
          throw new Error(
            `timed out after ${settings.sync.timeoutMs} ms waiting for the trainer's weights version ${need} in ${syncFolder(settings.jobDir)}`,
          );
        await new Promise((r) => setTimeout(r, 200));
      }
    };

    const evaluate = async (step: number) => {
      if (!runner) return;
      const {
        tasks,
        metrics: evalMetrics,
        experiences,
      } = await lock.run(() => evaluateTasksets(runner as WorkflowRunner, settings, step));
      monitors.log(step, evalMetrics);
      writeEvalSamples(metricsDir, step, tasks, experiences);
      progress.log(
        `[${settings.stageName}] eval at step ${step}: ${Object.entries(evalMetrics)
          .map(([k, v]) => `${k} ${v.toFixed(3)}`)
          .join(', ')}`,
      );
    };

    let lastStep = startStep;
    let lastPublished = startStep;
    const publishWeights = async (v: number) => {
      if (sync) await lock.run(() => sync.publish(v));
      // a trainer fed by a shared buffer publishes weights for the explorer process; one fed by a dataset has none
      else if (settings.mode === 'train' && !dataset) await publishToFolder(trainer as TrainerClient, settings.jobDir, v);
      lastPublished = v;
    };
    // explorer_driven: a pending request gets the newest trained weights (or just an answer when nothing is newer)
    const answerSyncRequest = async (trained: number): Promise<boolean> => {
      if (settings.sync.style !== 'explorer_driven' || !syncRequestPending()) return false;
      if (trained > lastPublished) await publishWeights(trained);
      clearSyncRequest();
      return true;
    };
    const readOnce = async (timeoutMs: number): Promise<{ experiences: Experience[]; cursor: number | null }> => {
      if (buffer instanceof SqliteBuffer) return buffer.readBatch(settings.trainBatchSize, { timeoutMs, minCount: 1 });
      if (buffer === null) throw new Error('no experience source');
      return { experiences: await buffer.read(settings.trainBatchSize, { timeoutMs, minCount: 1 }), cursor: null };
    };
    const readBatch = async (step: number): Promise<{ experiences: Experience[]; cursor: number | null }> => {
      if (dataset) return { experiences: dataset.batch(step), cursor: null };
      if (settings.sync.style !== 'explorer_driven') return readOnce(settings.sync.timeoutMs);
      // while waiting for rollouts, keep answering the explorer's sync requests (it may be waiting on one)
      const deadline = Date.now() + settings.sync.timeoutMs;
      for (;;) {
        await answerSyncRequest(step - 1);
        try {
          return await readOnce(Math.max(1, Math.min(250, deadline - Date.now())));
        } catch (error) {
          if (!(error instanceof BufferTimeoutError) || Date.now() >= deadline) throw error;
        }
      }
    };
    const sampleStrategy = SAMPLE_STRATEGY.create(algorithm.sampleStrategy.name, algorithm.sampleStrategy.args);
    // auxiliary datasets (trainer_input.auxiliary_buffers, e.g. expert data for mix), cycled
    const auxiliary: Record<string, ExperienceReader> = {};
    for (const [name, dataset] of Object.entries(settings.auxiliaryDatasets)) {
      const rows = await loadSftDataset(dataset.path, Tokenizer.load(settings.modelPath), dataset.format);
      for (const row of rows) row.info.isExpert = true;
      let position = 0;
      auxiliary[name] = (count) => Array.from({ length: count }, () => rows[position++ % rows.length] as Experience);
    }
    const trainerLoop = async () => {
      if (!trainer) return;
      for (let step = startStep + 1; step <= totalSteps; step++) {
        if (hooks.signal?.aborted) break;
        const batchRead = await readBatch(step);
        // staleness control: the trainer at step s holds weights s - 1; drop rollouts more than maxStaleness behind
        const maxStaleness = settings.sync.maxStaleness;
        let experiences: Experience[] =
          maxStaleness === null
            ? batchRead.experiences
            : batchRead.experiences.filter((e) => step - 1 - (e.info.modelVersion ?? step - 1) <= maxStaleness);
        const staleDropped = batchRead.experiences.length - experiences.length;
        // the algorithm's sample strategy over the batch (reward filters, dynamic sampling, expert mixing)
        const sampled = sampleStrategy({
          read: arrayReader(experiences),
          batchSize: Math.max(1, experiences.length),
          modelVersion: step - 1,
          auxiliary,
        });
        experiences = sampled.experiences;
        if (batchRead.experiences.length === 0 && (explorerDone || settings.mode === 'train')) break;
        const started = Date.now();
        // every rollout too stale: the step passes without an update (its metrics say so)
        const trainMetrics = experiences.length > 0 ? await trainer.step(experiences) : {};
        const rollout = explorerMetrics.get(step) ?? {};
        explorerMetrics.delete(step);
        const metrics: Record<string, number> = {
          ...rollout,
          ...Object.fromEntries(Object.entries(trainMetrics).map(([k, v]) => [k.startsWith('actor/') ? k : `actor/${k}`, v])),
          'time/train_s': (Date.now() - started) / 1000,
          'perf/train_tokens_per_s': (trainMetrics.tokens ?? 0) / Math.max(1e-9, (Date.now() - started) / 1000),
          'trainer/staleness': mean(experiences.map((e) => step - 1 - (e.info.modelVersion ?? step - 1))),
          'trainer/stale_dropped': staleDropped,
          ...sampled.metrics,
        };
        const syncStarted = Date.now();
        if (settings.sync.style === 'explorer_driven') {
          if ((await answerSyncRequest(step)) || step === totalSteps) {
            if (lastPublished < step) await publishWeights(step);
            metrics['time/sync_s'] = (Date.now() - syncStarted) / 1000;
          }
        } else if (step % settings.sync.interval === 0 || step === totalSteps) {
          await publishWeights(step);
          metrics['time/sync_s'] = (Date.now() - syncStarted) / 1000;
        }
        if (step % settings.trainer.saveInterval === 0 || step === totalSteps) {
          const explorerState = scheduler ? { scheduler: schedulerStates.get(step) ?? scheduler.state(), step } : null;
          await trainer.save(
            step,
            {
              explorer: explorerState,
              buffer: batchRead.cursor === null ? null : { cursor: batchRead.cursor },
              stage: settings.stageName,
            },
            settings.trainer.maxCheckpointsToKeep,
          );
          if (buffer instanceof SqliteBuffer && batchRead.cursor !== null) buffer.commit(batchRead.cursor);
        }
        for (const s of [...schedulerStates.keys()]) if (s < step) schedulerStates.delete(s);
        monitors.log(step, metrics);
        lastStep = step;
        progress.update(step, {
          reward: metrics['rollout/reward/mean'] ?? Number.NaN,
          loss: metrics['actor/loss'] ?? Number.NaN,
        });
      }
    };

    if (settings.mode === 'train') rmSync(join(syncFolder(settings.jobDir), 'finished'), { force: true });
    const trainerTask = trainerLoop().finally(() => {
      trainerDone = true;
      if (settings.mode === 'train') {
        mkdirSync(syncFolder(settings.jobDir), { recursive: true });
        writeFileSync(join(syncFolder(settings.jobDir), 'finished'), `${lastStep}\n`);
      }
    });
    await Promise.all([explorerLoop(), trainerTask]);
    progress.done();
    let finalModelDir: string | null = null;
    if (trainer) {
      finalModelDir = join(settings.jobDir, 'final_model');
      rmSync(finalModelDir, { recursive: true, force: true });
      await trainer.saveWeights(finalModelDir);
    }
    return { finalModelDir, steps: needsTrainer ? lastStep : totalSteps };
  } finally {
    await monitors.close();
    await engine?.close();
    await trainer?.close();
    buffer?.close();
  }
}

/** Each eval taskset with its own samples per task; its eval/<taskset>/* metrics, tasks and experiences, together. */
async function evaluateTasksets(
  runner: WorkflowRunner,
  settings: StageSettings,
  step: number,
): Promise<{ tasks: Task[]; metrics: Record<string, number>; experiences: Experience[] }> {
  const out = { tasks: [] as Task[], metrics: {} as Record<string, number>, experiences: [] as Experience[] };
  for (const [i, config] of settings.evalTasksets.entries()) {
    const { tasks } = await loadTaskset({ ...config, isEval: true });
    const result = await runner.evaluate(tasks, { step, repeatTimes: settings.evalRepeatTimes[i] ?? 1 });
    out.tasks.push(...tasks);
    out.experiences.push(...result.experiences);
    for (const [k, v] of Object.entries(result.metrics)) if (k.startsWith('eval/')) out.metrics[k] = v;
  }
  return out;
}

/** mode bench: the base model and every checkpoint of the job on the eval tasksets; one metrics line each. */
async function runBench(settings: StageSettings, log: (line: string) => void): Promise<StageResult> {
  if (settings.evalTasksets.length === 0) throw new Error(`stage '${settings.stageName}': mode bench needs eval_tasksets`);
  const monitors = createMonitors({
    jobDir: settings.jobDir,
    types: settings.monitorTypes,
    project: settings.project,
    name: `${settings.name}/bench`,
  });
  const engine = await startExplorerEngine(settings, settings.modelPath);
  try {
    const handle = new EngineModelHandle(engine, { modelVersion: 0 });
    const runner = new WorkflowRunner({
      models: handle,
      baseDir: settings.pluginBaseDir,
      runnerPerModel: settings.explorer.runnerPerModel,
      defaultWorkflow: settings.explorer.defaultWorkflow,
      seed: settings.seed,
    });
    const targets: { step: number; dir: string | null }[] = [{ step: 0, dir: null }];
    for (const step of listCheckpoints(settings.jobDir)) {
      const dir = join(settings.jobDir, 'checkpoints', `global_step_${step}`, 'model');
      if (existsSync(dir)) targets.push({ step, dir });
    }
    for (const target of targets) {
      if (target.dir) await engine.syncWeightsFromDir(target.dir);
      handle.modelVersion = target.step;
      const { metrics: evalMetrics } = await evaluateTasksets(runner, settings, target.step);
      monitors.log(target.step, evalMetrics);
      log(
        `[bench] ${target.step === 0 ? 'base model' : `checkpoint ${target.step}`}: ${Object.entries(evalMetrics)
          .map(([k, v]) => `${k} ${v.toFixed(3)}`)
          .join(', ')}`,
      );
    }
    return { finalModelDir: null, steps: targets.length };
  } finally {
    await monitors.close();
    await engine.close();
  }
}
