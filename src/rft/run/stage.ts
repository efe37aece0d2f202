// One stage of a run, assembled from its parts: the explorer loop (../explorer/loop.ts), the trainer loop
// (../trainer/loop.ts), the buffer between them, the weight channel (../sync/weight-channel.ts,
// ../sync/sync-folder.ts) and bench (../explorer/bench.ts).
//
//   mode both     explorer loop (rollouts on the engine's worker thread) ─▶ buffer ─▶ trainer loop (trainer worker)
//                 weights flow back through a LocalWeightChannel (memory: by reference; checkpoint: a folder)
//   mode explore  explorer loop only; experiences to a shared buffer (SQLite or PostgreSQL), explore steps claimed
//                 there among the explorer processes (explorer.name); weights from the trainer process through a
//                 ProcessWeightChannel (the buffer's database for PostgreSQL, else the job folder)
//   mode train    trainer loop only; experiences from the shared SQLite buffer (or a dataset for SFT/DPO)
//   mode bench    the base model and saved checkpoints on the eval tasksets
//
// Resume: the trainer restarts from the latest checkpoint (model, optimizer, critic, KL controller, step); the
// explorer from the task scheduler state saved with it (as it was after exploring that step); the sample strategy
// and the auxiliary datasets from their saved positions; metrics.jsonl keeps only steps up to it. Steps after the
// checkpoint are explored and trained again: none is lost, none counted twice. An explorer process (mode explore)
// goes on with the steps nobody finished instead (../explorer/share.ts): a step's rows and its finished marker go
// into the shared buffer in one transaction, and the trainer process reads on from its own checkpoint's cursor.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { EmbeddedEnginePool, WorkerRolloutEngine } from '../../engine/index.js';
import { OpenAIRemoteEngine, RemoteEnginePool, startEngineProcesses } from '../../openai/index.js';
import { loadModelConfig } from '../../model/index.js';
import { Tokenizer } from '../../tokenizer/index.js';
import { loadAlgorithmPlugins } from '../algorithm/plugins.js';
import { type ResolvedAlgorithm, resolveAlgorithm } from '../algorithm/presets.js';
import { createSampleStrategy } from '../algorithm/sample-strategy.js';
import {
  AuxiliaryReader,
  BufferClosedError,
  DatasetReader,
  displayBufferPath,
  type ExperienceBuffer,
  loadDpoDataset,
  loadSftDataset,
  loadTaskset,
  type PriorityFnName,
  PriorityReplayBuffer,
  type PriorityReplayState,
  QueueBuffer,
  openSharedBuffer,
  type SharedExperienceBuffer,
  sourceFromArray,
  TasksetScheduler,
  writeBufferRecord,
} from '../buffer/index.js';
import { type LoadedCheckpoint, latestCheckpoint } from '../checkpoint.js';
import type { Experience, ModelBounds } from '../experience.js';
import { ExperiencePipeline, explorerSavePath } from '../data/experience-pipeline/index.js';
import { runTaskPipeline, type TaskPipelineSettings, workflowSampler } from '../data/task-pipeline/index.js';
import { createMonitors, type MonitorGroup, ProgressReporter } from '../monitor/index.js';
import { TrainerClient, type TrainerInit } from '../trainer/trainer.js';
import { startAuxiliaryModels } from '../auxiliary/index.js';
import { EngineModelHandle, type WorkflowRunner } from '../workflow/index.js';
import { stageWorkflowRunner } from '../explorer/evaluation.js';
import { describeStopRule, TrainStageEvaluator } from '../trainer/train-eval.js';
import { runBench } from '../explorer/bench.js';
import { BufferExperienceSource } from '../trainer/experience-source.js';
import { type ExploredStep, runExplorerLoop } from '../explorer/loop.js';
import { ClaimedExploreSteps, keepFinishedSteps, stampExperienceIds } from '../explorer/share.js';
import { openTaskClaims } from '../explorer/task-claims.js';
import type { StageHooks, StageResult, StageSettings } from '../settings.js';
import { openProcessWeightChannel } from '../sync/process-channel.js';
import { NO_PUBLISHER } from '../sync/sync-folder.js';
import { StepBatches, type StepBatchesState, type TrainerSource } from '../trainer/step-batches.js';
import { runTrainerLoop, WeightPublication } from '../trainer/loop.js';
import { LocalWeightChannel } from '../sync/local-channel.js';
import {
  type ExplorerEngine,
  type ProcessWeightChannel,
  type StartedEngine,
  type WeightReceiver,
  weightTransport,
} from '../sync/weight-channel.js';

export { requiredVersion } from '../explorer/loop.js';

/** explorer.name when the config names none (Trinity-RFT's default). */
const DEFAULT_EXPLORER_NAME = 'explorer';
export { readSyncPointer } from '../sync/sync-folder.js';

export async function runStage(settings: StageSettings, hooks: StageHooks = {}): Promise<StageResult> {
  const log = hooks.log ?? ((line: string) => console.log(line));
  mkdirSync(settings.jobDir, { recursive: true });
  await loadAlgorithmPlugins(settings.algorithm, settings.pluginBaseDir);
  const algorithm = resolveAlgorithm(settings.algorithm);
  switch (settings.mode) {
    case 'bench':
      return runBench(settings, async (dir) => (await startExplorerEngine(settings, dir)).engine, log, hooks.signal);
    case 'serve':
      throw new Error(`stage '${settings.stageName}': mode serve runs in src/serve (runServeStage)`);
    case 'both':
    case 'explore':
    case 'train': {
      const prepared = settings.taskPipeline ? await withTaskPipeline(settings, settings.taskPipeline, hooks, log) : settings;
      return (await StageBuilder.create(prepared, algorithm, hooks, log)).run();
    }
  }
}

/**
 * data_processor.task_pipeline (src/rft/data/task-pipeline): its operators run over the taskset's rows (or its
 * inputs) before the stage explores, and the stage explores the output instead. An operator that samples the model
 * gets the stage's engine and workflow runner, started for it and closed before the stage starts its own.
 */
async function withTaskPipeline(
  settings: StageSettings,
  pipeline: TaskPipelineSettings,
  hooks: StageHooks,
  log: (line: string) => void,
): Promise<StageSettings> {
  const [first, ...rest] = settings.tasksets;
  if (first === undefined || rest.length > 0)
    throw new Error(
      `stage '${settings.stageName}': data_processor.task_pipeline writes one taskset; this stage has ${settings.tasksets.length}`,
    );
  const started: { engine: StartedEngine; runner: WorkflowRunner }[] = [];
  // explorer.auxiliary_models, started only when an operator names one (llm_*: auxiliary_model)
  const namesAuxiliary = pipeline.operators.some((op) =>
    [op.args.auxiliary_model, op.args.auxiliaryModel].some((name) => typeof name === 'string' && name !== ''),
  );
  const auxiliary =
    namesAuxiliary && settings.auxiliaryModels.length > 0 ? await startAuxiliaryModels(settings.auxiliaryModels) : null;
  try {
    const result = await runTaskPipeline({
      settings: pipeline,
      taskset: first.taskset,
      jobDir: settings.jobDir,
      baseDir: settings.pluginBaseDir,
      seed: settings.seed,
      modelId: settings.modelPath,
      model: async () => {
        const engine = await startExplorerEngine(settings, settings.modelPath);
        const runner = stageWorkflowRunner(settings, new EngineModelHandle(engine.engine, { modelVersion: 0 }), log);
        started.push({ engine, runner });
        return workflowSampler(runner, settings.modelPath);
      },
      auxiliaryModels: auxiliary,
      ...(hooks.signal ? { signal: hooks.signal } : {}),
      log: (line) => log(`[${settings.stageName}] ${line}`),
      ...(hooks.progress ? { progress: hooks.progress } : {}),
    });
    const taskset = { ...first.taskset, path: result.outputPath, split: 'train', subset: null, storageType: 'file' as const };
    return { ...settings, tasksets: [{ ...first, taskset }] };
  } finally {
    for (const { engine, runner } of started) {
      runner.close();
      await engine.engine.close();
    }
    await auxiliary?.close();
  }
}

/**
 * The explorer's engine: the embedded one on its own thread with `weightsDir`'s weights (engine_num > 1: a pool of
 * them, on threads or in processes of their own), or external servers (engine_type openai; a list of base_url: a
 * pool), told to load `weightsDir` when that is not the model they started with.
 */
async function startExplorerEngine(
  settings: StageSettings,
  weightsDir: string,
  log: (line: string) => void = () => {},
): Promise<StartedEngine> {
  const spec = settings.explorer.engine;
  const tokenizer = () => (existsSync(join(settings.modelPath, 'tokenizer.json')) ? Tokenizer.load(settings.modelPath) : null);
  if (spec.type === 'embedded') {
    const engineOptions = {
      dtype: settings.dtype,
      device: settings.explorer.device,
      slots: settings.explorer.slots,
      maxLength: settings.explorer.maxLength,
    };
    if (spec.engineProcess) {
      const engine = await startEngineProcesses({
        modelDir: weightsDir,
        engineNum: spec.engineNum,
        numThreads: settings.threads.explorer,
        reloadRoot: settings.jobDir,
        tokenizer: existsSync(join(weightsDir, 'tokenizer.json')) ? Tokenizer.load(weightsDir) : tokenizer(),
        engine: engineOptions,
        downGraceMs: Math.min(60_000, settings.explorer.maxTimeout * 1000),
        log,
      });
      return { type: 'openai', engine };
    }
    if (spec.engineNum > 1) {
      const engine = await EmbeddedEnginePool.start(weightsDir, {
        ...engineOptions,
        engineNum: spec.engineNum,
        numThreads: settings.threads.explorer,
      });
      return { type: 'embedded', engine, weightSync: spec.weightSync };
    }
    const engine = await WorkerRolloutEngine.start(weightsDir, { ...engineOptions, numThreads: settings.threads.explorer });
    return { type: 'embedded', engine, weightSync: spec.weightSync };
  }
  const connection = { model: spec.modelName, apiKey: spec.apiKey, tokenizer: tokenizer() };
  const engine =
    typeof spec.baseUrl === 'string'
      ? await OpenAIRemoteEngine.connect({ ...connection, baseURL: spec.baseUrl })
      : await RemoteEnginePool.connect({
          ...connection,
          baseURLs: spec.baseUrl,
          reloadTimeoutMs: settings.sync.timeoutMs,
          // no server for as long as a workflow attempt may take (at most a minute): the run cannot go on
          downGraceMs: Math.min(60_000, settings.explorer.maxTimeout * 1000),
          log,
        });
  if (weightsDir !== settings.modelPath) await engine.syncWeightsFromDir(weightsDir, { timeoutMs: settings.sync.timeoutMs });
  return { type: 'openai', engine };
}

/**
 * The name a LoRA run's adapter is served under on an external pool of servers (requests ask for it as their model):
 * the run's name, unless that is the served base model's name (vLLM refuses an adapter named like its model). Null
 * without LoRA, and for embedded engines (engine_process children take merged weights: they have no adapter API).
 */
export function loraAdapterName(settings: StageSettings): string | null {
  const spec = settings.explorer.engine;
  if (settings.lora === null || spec.type !== 'openai') return null;
  return settings.name === spec.modelName ? `${settings.name}-lora` : settings.name;
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

/** The run state a checkpoint holds besides the trainer's own (see trainer-loop.ts). */
interface RunState extends StepBatchesState {
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
function memoryBufferState(buffer: ExperienceBuffer, step: number): Pick<RunState, 'unread' | 'replay'> {
  if (buffer instanceof PriorityReplayBuffer) return { replay: buffer.state({ throughStep: step }) };
  if (buffer instanceof QueueBuffer)
    return { unread: buffer.peek().filter((e) => (e.info.step ?? Number.POSITIVE_INFINITY) <= step) };
  return {};
}

/**
 * Puts a checkpoint's buffer contents back before the explorer starts. A replay state goes into a replay buffer as it
 * was; into another buffer (replay turned off since) its experiences are written in the order it would have read them.
 */
async function restoreMemoryBuffer(
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

/** The shared buffer's file or PostgreSQL URL (experience_buffer.path; derived for an SQLite file). */
function sharedBufferPath(settings: StageSettings): string {
  return settings.buffer.path ?? join(settings.jobDir, 'buffer.db');
}

/** Explorer parts shared by modes both and explore. */
interface ExplorerParts {
  started: StartedEngine;
  engine: ExplorerEngine;
  handle: EngineModelHandle;
  runner: WorkflowRunner;
  /** data_processor.experience_pipeline; null: experiences go to the buffer as they come. */
  pipeline: ExperiencePipeline | null;
}

/** Assembles and runs one stage of mode both, explore or train: which parts exist is decided by the mode. */
class StageBuilder {
  readonly settings: StageSettings;
  readonly algorithm: ResolvedAlgorithm;
  readonly hooks: StageHooks;
  readonly log: (line: string) => void;
  /** An explorer process (mode explore) shares the job folder with its trainer process: its metrics go beside, in
   * a folder of its explorer.name. */
  readonly metricsDir: string;
  readonly checkpoint: LoadedCheckpoint | null;
  readonly startStep: number;
  /** Closes the stage's parts, last made first; `failure`: what failed the stage (or an earlier part's close). */
  readonly #closers: ((failure: { error: unknown } | null) => Promise<void> | void)[] = [];
  /** Aborted when a part of the stage failed: the other parts stop waiting (mode both: explorer and trainer). */
  readonly #failed = new AbortController();
  /** The stage's stop signal: the user's (Ctrl-C, SIGTERM) or a failed part's. */
  readonly #signal: AbortSignal;

  /** A builder for the stage. */
  static async create(
    settings: StageSettings,
    algorithm: ResolvedAlgorithm,
    hooks: StageHooks,
    log: (line: string) => void,
  ): Promise<StageBuilder> {
    return new StageBuilder(settings, algorithm, hooks, log);
  }

  private constructor(settings: StageSettings, algorithm: ResolvedAlgorithm, hooks: StageHooks, log: (line: string) => void) {
    this.settings = settings;
    this.algorithm = algorithm;
    this.hooks = hooks;
    this.log = log;
    this.metricsDir = settings.mode === 'explore' ? join(settings.jobDir, settings.explorer.name) : settings.jobDir;
    this.#signal = hooks.signal ? AbortSignal.any([hooks.signal, this.#failed.signal]) : this.#failed.signal;
    this.checkpoint = latestCheckpoint(settings.jobDir);
    // an explorer process goes on with the steps no explorer finished (claims in the shared buffer's database): the
    // trainer's checkpoint says nothing of rows written after it
    this.startStep = settings.mode === 'explore' ? 0 : (this.checkpoint?.step ?? 0);
    if (settings.mode !== 'explore') {
      truncateSteps(join(this.metricsDir, 'metrics.jsonl'), this.startStep);
      truncateSteps(join(this.metricsDir, 'eval_samples.jsonl'), this.startStep);
      if (this.checkpoint)
        log(`[${settings.stageName}] resuming from checkpoint step ${this.startStep} (${this.checkpoint.dir})`);
    }
  }

  get #saved(): Partial<RunState> {
    if (this.settings.mode === 'explore') return {};
    return (this.checkpoint?.state ?? {}) as Partial<RunState>;
  }

  async run(): Promise<StageResult> {
    const { settings } = this;
    // every part is closed, and the first error is the one reported: a part that fails to close after the stage
    // failed (a trainer whose ranks are gone) does not hide why the stage failed
    let failure: { error: unknown } | null = null;
    try {
      switch (settings.mode) {
        case 'both':
          return await this.#runBoth();
        case 'explore':
          return await this.#runExplore();
        default:
          return await this.#runTrain();
      }
    } catch (error) {
      // a part that failed the stage (a rollout pool with no server left) names why, not the wait it cut short
      const reason: unknown = this.#failed.signal.aborted ? this.#failed.signal.reason : error;
      failure = { error: reason };
      throw reason;
    } finally {
      for (const close of this.#closers.reverse()) {
        try {
          await close(failure);
        } catch (error) {
          failure ??= { error };
        }
      }
      // biome-ignore lint/correctness/noUnsafeFinally: a part that failed to close fails a stage that succeeded
      if (failure !== null) throw failure.error;
    }
  }

  // --- mode both ---------------------------------------------------------------------------------------------

  async #runBoth(): Promise<StageResult> {
    const { settings } = this;
    const scheduler = await this.#scheduler();
    const totalSteps = this.#totalSteps(scheduler.totalSteps);
    const { monitors, progress } = this.#monitoring(totalSteps);
    const buffer = await this.#memoryBuffer();
    const trainer = await this.#trainer(totalSteps);
    const usesBaseWeights = settings.lora !== null || !this.checkpoint?.modelDir;
    const explorer = await this.#explorer(usesBaseWeights ? settings.modelPath : (this.checkpoint?.modelDir as string), progress);
    const channel = new LocalWeightChannel({
      trainer,
      transport: weightTransport(explorer.started, settings.jobDir, loraAdapterName(settings)),
      startVersion: this.startStep,
      timeoutMs: settings.sync.timeoutMs,
      signal: this.#signal,
      onVersion: (v) => {
        explorer.handle.modelVersion = v;
      },
    });
    // A LoRA run (or a resume without a full model in the checkpoint) starts the engine from the base weights: the
    // trainer's (merged) weights go over first when they differ from those (a resume, or an adapter from lora.path)
    if (usesBaseWeights && (this.startStep > 0 || settings.loraPath !== null)) await channel.publish(this.startStep);
    if (this.checkpoint) await restoreMemoryBuffer(buffer, this.#saved, this.checkpoint.dir);

    const explored = new Map<number, ExploredStep>();
    const publication = new WeightPublication(channel, this.startStep);
    // train step s takes train_batch_size (T) experiences; explore steps give batch_size × repeat_times (P) each
    // when every rollout succeeds, so explore step ceil(s·T / P) is the last that feeds it: once that one is in the
    // buffer, waiting longer for a short step would wait for rollouts that never come
    let writtenThrough = this.startStep;
    const perExploreStep = settings.batchSize * this.algorithm.repeatTimes;
    const source = this.#bufferSource(buffer, publication, (step) => {
      return writtenThrough >= Math.ceil((step * settings.trainBatchSize) / perExploreStep);
    });
    // an SQL buffer outlives the process: the steps a resumed run explores again (those after its checkpoint) write
    // the same ids as before the crash, which the buffer stores once (in-memory buffers start from the checkpoint)
    const stampIds = settings.buffer.storageType === 'sql';
    const explorerTask = runExplorerLoop({
      ...this.#explorerLoopBase(scheduler, explorer, buffer, channel, totalSteps),
      ...(stampIds
        ? {
            write: ({ step }: ExploredStep, experiences: Experience[]) =>
              buffer.write(stampExperienceIds(settings.stageName, step, experiences)),
          }
        : {}),
      onStep: (step) => explored.set(step.step, step),
      onWritten: (step) => {
        writtenThrough = step;
      },
      onEval: (step, metrics) => monitors.log(step, metrics),
    });
    let trainerFinished = false;
    const trainerTask = this.#trainerLoop({
      trainer,
      publication,
      source,
      totalSteps,
      monitors,
      progress,
      rolloutMetrics: (step) => {
        for (const s of [...explored.keys()]) if (s < step) explored.delete(s);
        return explored.get(step)?.metrics ?? {};
      },
      explorerState: (step) => ({ scheduler: explored.get(step)?.schedulerState ?? scheduler.state(), step }),
      bufferState: (step) => memoryBufferState(buffer, step),
    })
      .then((lastStep) => {
        trainerFinished = true;
        return lastStep;
      })
      .finally(() => buffer.close());
    // one loop failing stops the other (its waits end on the stage's signal, a closed buffer), and both have ended
    // before the parts close under them; the first failure is the stage's
    const failFast = (error: unknown) => {
      this.#failed.abort(error);
      throw error;
    };
    // with priority replay the trainer can finish on reused experiences before the explorer's last write: what the
    // explorer still had to write into the closed buffer is needed by no one
    const explorerDone = explorerTask.catch((error: unknown) =>
      trainerFinished && error instanceof BufferClosedError ? undefined : failFast(error),
    );
    const [exploring, trained] = await Promise.allSettled([explorerDone, trainerTask.catch(failFast)]);
    if (this.#failed.signal.aborted) throw this.#failed.signal.reason;
    if (exploring.status === 'rejected') throw exploring.reason;
    if (trained.status === 'rejected') throw trained.reason;
    const lastStep = trained.value;
    progress.done();
    return { finalModelDir: await this.#saveFinalModel(trainer), steps: lastStep };
  }

  // --- mode explore ------------------------------------------------------------------------------------------

  async #runExplore(): Promise<StageResult> {
    const { settings } = this;
    const scheduler = await this.#scheduler();
    const totalSteps = this.#totalSteps(scheduler.totalSteps);
    const buffer = await this.#sharedBuffer('writer');
    // the explore steps, shared with the other explorer processes of this buffer (../explorer/share.ts)
    const claims = await openTaskClaims({
      path: sharedBufferPath(settings),
      table: buffer.table,
      stage: settings.stageName,
      explorer: settings.explorer.name,
      deal: JSON.stringify({
        batchSize: settings.batchSize,
        tasksets: settings.tasksets.map((t) => [t.taskset.name, t.selector ?? null, t.weight ?? null]),
      }),
      totalSteps,
    });
    this.#closers.push(() => claims.close());
    const finished = new Set(await claims.completedBy());
    for (const file of ['metrics.jsonl', 'eval_samples.jsonl']) keepFinishedSteps(join(this.metricsDir, file), finished);
    if (finished.size > 0)
      this.log(
        `[${settings.stageName}] explorer '${settings.explorer.name}' resuming: ${finished.size} explore step(s) of ` +
          `${totalSteps} finished by it (claims in ${claims.location})`,
      );
    const { monitors, progress } = this.#monitoring(totalSteps);
    const steps = new ClaimedExploreSteps({
      claims,
      buffer,
      stage: settings.stageName,
      explorer: settings.explorer.name,
      newScheduler: () => createScheduler(settings),
      timeoutMs: settings.sync.timeoutMs,
      signal: this.#signal,
      log: (line) => progress.log(line),
    });
    // the newest weights the trainer process published, else the checkpoint's full model, else the base model
    const channel = await this.#processWeightChannel(buffer);
    const pointer = await channel.latest();
    const start = pointer
      ? { dir: pointer.dir, version: pointer.version }
      : this.checkpoint?.modelDir
        ? { dir: this.checkpoint.modelDir, version: this.checkpoint.step }
        : { dir: settings.modelPath, version: 0 };
    const explorer = await this.#explorer(start.dir, progress, start.version, finished);
    const receiver = channel.receiver({
      engine: explorer.engine,
      startVersion: start.version,
      timeoutMs: settings.sync.timeoutMs,
      signal: this.#signal,
      onVersion: (v) => {
        explorer.handle.modelVersion = v;
      },
    });
    await runExplorerLoop({
      ...this.#explorerLoopBase(scheduler, explorer, buffer, receiver, totalSteps),
      steps,
      // rows and the step's finished marker in one transaction, then the claim is done
      write: async ({ step }, experiences) => {
        await buffer.write(stampExperienceIds(settings.stageName, step, experiences), { meta: steps.writeMeta(step) });
        await claims.complete(step);
      },
      // readers stop waiting only once every explorer's steps are in
      finish: async () => {
        if (steps.allDone) await buffer.finishWriting();
      },
      onStep: ({ step, metrics }) => {
        monitors.log(step, metrics);
        progress.update(step, { reward: metrics['rollout/reward/mean'] ?? Number.NaN });
      },
      onEval: (step, metrics) => monitors.log(step, metrics),
    });
    progress.done();
    return { finalModelDir: null, steps: totalSteps };
  }

  // --- mode train --------------------------------------------------------------------------------------------

  async #runTrain(): Promise<StageResult> {
    const input = await this.#trainInput();
    const totalSteps = this.#totalSteps(input.stepsFromData);
    const { monitors, progress } = this.#monitoring(totalSteps);
    const trainer = await this.#trainer(totalSteps);
    const stop = await this.#stopRule(trainer, monitors, progress);
    if (stop.endedAt !== null) {
      progress.done();
      return { finalModelDir: await this.#saveFinalModel(trainer), steps: stop.endedAt };
    }
    const lastStep = await this.#trainerLoop({
      trainer,
      ...input.connect(trainer),
      totalSteps,
      monitors,
      progress,
      rolloutMetrics: () => ({}),
      explorerState: () => null,
      ...(stop.after ? { stopAfter: stop.after, stopState: stop.state } : {}),
    });
    progress.done();
    return { finalModelDir: await this.#saveFinalModel(trainer), steps: lastStep };
  }

  /**
   * trainer.stop_when (mode train over a dataset): an evaluator on a rollout engine of the stage's own
   * (../trainer/train-eval.ts), asked after every train step. `endedAt`: the step the stage already ended at — a resumed run
   * whose checkpoint recorded the rule met, or the evaluation at startup meeting it.
   */
  async #stopRule(
    trainer: TrainerClient,
    monitors: MonitorGroup,
    progress: ProgressReporter,
  ): Promise<{
    endedAt: number | null;
    after?: (step: number) => Promise<boolean | undefined>;
    state?: (step: number) => Pick<RunState, 'stoppedAt'>;
  }> {
    const { settings } = this;
    const rule = settings.trainer.stopWhen;
    if (rule === null) return { endedAt: null };
    const saved = this.#saved.stoppedAt;
    if (saved !== undefined) {
      this.log(`[${settings.stageName}] ${describeStopRule(rule)} was met at step ${saved} (checkpoint): the stage ended there`);
      return { endedAt: saved };
    }
    const started = await startExplorerEngine(settings, this.checkpoint?.modelDir ?? settings.modelPath, (line) =>
      progress.log(line),
    );
    const evaluator = new TrainStageEvaluator({
      settings,
      rule,
      trainer,
      started,
      monitors,
      metricsDir: this.metricsDir,
      log: this.log,
      signal: this.#signal,
    });
    this.#closers.push(() => evaluator.close());
    let metAt: number | null = null;
    if (this.startStep === 0 && evaluator.due(0) && (await evaluator.evaluate(0))) return { endedAt: 0 };
    return {
      endedAt: null,
      after: async (step) => {
        if (!evaluator.due(step)) return false;
        const met = await evaluator.evaluate(step);
        if (met) metAt = step;
        return met;
      },
      // a checkpoint at the step the rule was met says so: a resumed run does not train on past it
      state: (step) => (metAt === step ? { stoppedAt: step } : {}),
    };
  }

  /**
   * What a mode-train stage learns from: the shared buffer explorer processes fill (weights published for them through
   * the process weight channel), or a dataset (SFT, DPO: one batch per step, nothing published).
   */
  async #trainInput(): Promise<{
    stepsFromData: number | null;
    connect: (trainer: TrainerClient) => { publication: WeightPublication; source: TrainerSource };
  }> {
    const { settings } = this;
    if (settings.buffer.storageType === 'sql') {
      const buffer = await this.#sharedBuffer('reader');
      const channel = await this.#processWeightChannel(buffer);
      return {
        stepsFromData: null,
        connect: (trainer) => {
          const publication = new WeightPublication(channel.publisher(trainer), this.startStep);
          return { publication, source: this.#bufferSource(buffer, publication) };
        },
      };
    }
    if (settings.buffer.storageType !== 'file')
      throw new Error(`stage '${settings.stageName}': mode train reads a shared buffer (storage_type sql) or a dataset (file)`);
    const dataset = await loadTrainDataset(settings, this.algorithm);
    return {
      stepsFromData: dataset.stepsFor(settings.totalEpochs),
      connect: () => ({
        publication: new WeightPublication(NO_PUBLISHER, this.startStep),
        source: (step) => sourceFromArray(dataset.batch(step)),
      }),
    };
  }

  // --- parts -------------------------------------------------------------------------------------------------

  #totalSteps(fromData: number | null): number {
    return stageSteps(this.settings, fromData);
  }

  /** The task scheduler over the tasksets (it fixes the number of steps), at its saved position on resume. */
  async #scheduler(): Promise<TasksetScheduler> {
    const scheduler = await createScheduler(this.settings);
    const saved = this.#saved.explorer;
    if (saved?.scheduler) scheduler.loadState(saved.scheduler);
    return scheduler;
  }

  #monitoring(totalSteps: number): { monitors: MonitorGroup; progress: ProgressReporter } {
    const { settings } = this;
    const monitors = createMonitors({
      jobDir: this.metricsDir,
      types: settings.monitorTypes,
      project: settings.project,
      name: `${settings.name}/${settings.stageName}`,
      config: { mode: settings.mode, algorithm: settings.algorithm },
      args: settings.monitorArgs,
    });
    this.#closers.push(() => monitors.close());
    const progress = this.hooks.progress ?? new ProgressReporter({ label: settings.stageName, total: totalSteps });
    progress.setLabel(settings.stageName, totalSteps);
    progress.resumeAt(this.startStep);
    return { monitors, progress };
  }

  async #memoryBuffer(): Promise<ExperienceBuffer> {
    const { settings } = this;
    if (settings.buffer.storageType === 'sql') return this.#sharedBuffer('reader');
    if (settings.buffer.storageType === 'file')
      throw new Error(`stage '${settings.stageName}': a file experience buffer (a dataset) needs mode train`);
    const replay = settings.buffer.replay;
    const buffer = replay
      ? new PriorityReplayBuffer({
          name: settings.buffer.name,
          capacity: settings.buffer.capacity,
          priorityFn: replay.priorityFn as PriorityFnName,
          decay: replay.decay,
          reuseCooldownMs: replay.reuseCooldownMs,
          ...(replay.useCountLimit !== undefined ? { useCountLimit: replay.useCountLimit } : {}),
          ...(replay.sigma !== undefined ? { sigma: replay.sigma } : {}),
          seed: settings.seed,
        })
      : new QueueBuffer({
          name: settings.buffer.name,
          capacity: settings.buffer.capacity,
          // a full queue waits for the trainer as long as the explorer waits for weights
          writeTimeoutMs: settings.sync.timeoutMs,
        });
    this.#closers.push(() => buffer.close());
    return buffer;
  }

  /** The trainer's view of the buffer; explorer_driven: it answers the explorer's requests for weights while it waits. */
  #bufferSource(
    buffer: ExperienceBuffer,
    publication: WeightPublication,
    stepFilled: ((step: number) => boolean) | null = null,
  ): BufferExperienceSource {
    const { sync } = this.settings;
    const source: BufferExperienceSource = new BufferExperienceSource({
      buffer,
      maxStaleness: sync.maxStaleness,
      stepFilled,
      answerRequests:
        sync.style === 'explorer_driven'
          ? async () => {
              await publication.answerPending(source.modelVersion);
            }
          : null,
    });
    return source;
  }

  /**
   * The shared buffer (an SQLite file or PostgreSQL: ./shared.ts chooses by path); a resumed trainer reads on from
   * the position its checkpoint committed.
   */
  async #sharedBuffer(role: 'reader' | 'writer'): Promise<SharedExperienceBuffer> {
    const { settings } = this;
    // a reader with replay_buffer on reads by priority, its replay state in the database (../buffer/sql-replay.ts)
    const replay = role === 'reader' ? settings.buffer.replay : null;
    const buffer = await openSharedBuffer({
      path: sharedBufferPath(settings),
      name: settings.buffer.name,
      ...(replay
        ? {
            replay: {
              capacity: settings.buffer.capacity,
              priorityFn: replay.priorityFn as PriorityFnName,
              decay: replay.decay,
              reuseCooldownMs: replay.reuseCooldownMs,
              ...(replay.useCountLimit !== undefined ? { useCountLimit: replay.useCountLimit } : {}),
              ...(replay.sigma !== undefined ? { sigma: replay.sigma } : {}),
              seed: settings.seed,
            },
          }
        : {}),
    });
    this.#closers.push(() => buffer.close());
    // where the buffer is, for readers of the job folder (the Studio): a PostgreSQL buffer is not in it
    writeBufferRecord(settings.jobDir, sharedBufferPath(settings), buffer.table);
    // the trainer reads on from its checkpoint's cursor, even when the commit after that checkpoint never happened
    const cursor = this.#saved.buffer?.cursor;
    const savedKind = this.#saved.bufferCursor;
    const kind = replay ? 'replay' : 'rows';
    if (role === 'reader' && typeof cursor === 'number' && savedKind !== undefined && savedKind !== kind) {
      await buffer.close();
      const state = join(this.checkpoint?.dir ?? settings.jobDir, 'state.json');
      const why =
        savedKind === 'replay'
          ? 'a priority replay revision (written with experience_buffer.replay_buffer.enable: true), but ' +
            "replay_buffer is off now: a plain reader cannot read on from the replay's position; turn it back on"
          : 'a row id (written with experience_buffer.replay_buffer off), but replay_buffer.enable is true now: ' +
            "the replay cannot take over a plain reader's position; turn it off";
      throw new Error(
        `${state}: its buffer cursor ${cursor} is ${why} to resume this run, or start a new one ` +
          `(buffer '${settings.buffer.name}' in ${displayBufferPath(sharedBufferPath(settings))})`,
      );
    }
    if (role === 'reader') {
      if (typeof cursor === 'number') await buffer.restore(cursor);
      else if (this.checkpoint) await buffer.rewind();
    }
    return buffer;
  }

  /**
   * Where this process meets the other processes of the job to move weights (mode train or explore): on PostgreSQL,
   * the table `<buffer's table>_sync`, so the buffers of one database (experience_buffer.name) sync apart.
   */
  async #processWeightChannel(buffer: SharedExperienceBuffer): Promise<ProcessWeightChannel> {
    const { settings } = this;
    const channel = await openProcessWeightChannel({
      path: sharedBufferPath(settings),
      table: buffer.table,
      jobDir: settings.jobDir,
    });
    // closed after the trainer: the publisher's finished marker is written before the connection goes
    this.#closers.push(() => channel.close());
    return channel;
  }

  async #trainer(totalSteps: number): Promise<TrainerClient> {
    const { trainer } = await TrainerClient.start(trainerInit(this.settings, totalSteps));
    // a data-parallel trainer's other ranks fail with the stage's error instead of going on to the next stage
    this.#closers.push((failure) => trainer.close(failure === null ? {} : { failure: failure.error }));
    return trainer;
  }

  /**
   * The explorer's engine, workflow runner and experience pipeline. `finishedSteps`: mode explore's steps this
   * explorer finished, which its save_input file keeps (it forgets the rest, which are explored again).
   */
  async #explorer(
    weightsDir: string,
    progress: ProgressReporter,
    version = this.startStep,
    finishedSteps?: ReadonlySet<number>,
  ): Promise<ExplorerParts> {
    const { settings } = this;
    const pipelineSettings = settings.experiencePipeline;
    // an explorer process of several writes save_input to a file of its own name (the default name: the file itself)
    const inputSavePath =
      pipelineSettings?.inputSavePath && settings.mode === 'explore' && settings.explorer.name !== DEFAULT_EXPLORER_NAME
        ? explorerSavePath(pipelineSettings.inputSavePath, settings.explorer.name)
        : (pipelineSettings?.inputSavePath ?? null);
    // before the engine starts, so a bad operator fails fast; its save file forgets the steps that are explored again
    const pipeline = pipelineSettings
      ? await ExperiencePipeline.create(
          { ...pipelineSettings, inputSavePath },
          {
            baseDir: settings.pluginBaseDir,
            startStep: this.startStep,
            ...(finishedSteps ? { keepSteps: finishedSteps } : {}),
          },
        )
      : null;
    if (pipeline) this.#closers.push(() => pipeline.close());
    const started = await startExplorerEngine(settings, weightsDir, (line) => progress.log(line));
    const engine = started.engine;
    this.#closers.push(() => engine.close());
    // a pool of servers none of which answers any more stops the stage with its NoRolloutServerError
    if (engine instanceof RemoteEnginePool) engine.onFailure((error) => this.#failed.abort(error));
    const handle = new EngineModelHandle(engine, { modelVersion: version });
    const auxiliary = await startAuxiliaryModels(settings.auxiliaryModels); // judges, reward models, teachers
    this.#closers.push(() => auxiliary.close());
    const runner = stageWorkflowRunner(settings, handle, (line) => progress.log(line), auxiliary);
    this.#closers.push(() => runner.close()); // frees its workflow worker threads (module-path workflows)
    return { started, engine, handle, runner, pipeline };
  }

  #explorerLoopBase(
    scheduler: TasksetScheduler,
    explorer: ExplorerParts,
    buffer: ExperienceBuffer,
    weights: WeightReceiver,
    totalSteps: number,
  ) {
    return {
      settings: this.settings,
      scheduler,
      runner: explorer.runner,
      pipeline: explorer.pipeline,
      buffer,
      weights,
      repeatTimes: this.algorithm.repeatTimes,
      bounds: this.#modelBounds(),
      startStep: this.startStep,
      totalSteps,
      metricsDir: this.metricsDir,
      log: (line: string) => this.log(line),
      signal: this.#signal,
    };
  }

  /** The trainer loop with the algorithm's sample strategy and auxiliary datasets, restored on resume. */
  async #trainerLoop(parts: {
    trainer: TrainerClient;
    publication: WeightPublication;
    source: TrainerSource;
    totalSteps: number;
    monitors: MonitorGroup;
    progress: ProgressReporter;
    rolloutMetrics: (step: number) => Record<string, number>;
    explorerState: (step: number) => RunState['explorer'];
    /** What a checkpoint at `step` keeps of the in-memory buffer (mode both). */
    bufferState?: (step: number) => Pick<RunState, 'unread' | 'replay'>;
    /** trainer.stop_when: after each step, whether the stage ends there, and what a checkpoint records of it. */
    stopAfter?: (step: number) => Promise<boolean | undefined>;
    stopState?: (step: number) => Pick<RunState, 'stoppedAt'>;
  }): Promise<number> {
    const { settings, algorithm } = this;
    const batches = new StepBatches({
      settings,
      repeatTimes: algorithm.repeatTimes,
      strategy: createSampleStrategy(algorithm.sampleStrategy.name, algorithm.sampleStrategy.args),
      auxiliary: await this.#auxiliaryReaders(),
      source: parts.source,
    });
    batches.loadState(this.#saved);
    return runTrainerLoop({
      settings,
      trainer: parts.trainer,
      weights: parts.publication,
      nextBatch: (step) => batches.next(step),
      checkpointState: (step) => {
        const state: RunState = {
          explorer: parts.explorerState(step),
          ...batches.state(),
          ...parts.bufferState?.(step),
          ...parts.stopState?.(step),
          stage: settings.stageName,
        };
        if (state.buffer) state.bufferCursor = settings.buffer.replay ? 'replay' : 'rows';
        return { ...state };
      },
      onCheckpoint: () => batches.committed(),
      rolloutMetrics: parts.rolloutMetrics,
      monitors: parts.monitors,
      progress: parts.progress,
      startStep: this.startStep,
      totalSteps: parts.totalSteps,
      ...(parts.stopAfter ? { stopAfter: parts.stopAfter } : {}),
      signal: this.#signal,
    });
  }

  /** The trained model's vocabulary and context length (an external server's model with no local folder: unknown). */
  #modelBounds(): ModelBounds {
    const { settings } = this;
    const local = existsSync(join(settings.modelPath, 'config.json'));
    return {
      vocabSize: local ? loadModelConfig(settings.modelPath).vocabSize : Number.MAX_SAFE_INTEGER,
      maxLength: settings.explorer.maxLength,
    };
  }

  /** Auxiliary datasets (trainer_input.auxiliary_buffers, e.g. mix's expert data), rows marked as expert data. */
  async #auxiliaryReaders(): Promise<Record<string, AuxiliaryReader>> {
    const { settings } = this;
    const readers: Record<string, AuxiliaryReader> = {};
    for (const [name, dataset] of Object.entries(settings.auxiliaryDatasets)) {
      const rows = await loadSftDataset(dataset.path, Tokenizer.load(settings.modelPath), dataset.format);
      for (const row of rows) row.info.isExpert = true;
      readers[name] = new AuxiliaryReader(name, rows);
    }
    return readers;
  }

  async #saveFinalModel(trainer: TrainerClient): Promise<string> {
    const dir = finalModelDir(this.settings);
    rmSync(dir, { recursive: true, force: true });
    await trainer.saveWeights(dir);
    return dir;
  }
}

// --- shared with the follower ranks of a data-parallel trainer (./follower.ts): they must count the same steps and
// start the same trainer as rank 0 --------------------------------------------------------------------------------

/** The stage's steps: buffer.total_steps, else what the data gives (`fromData`); none is an error. */
function stageSteps(settings: StageSettings, fromData: number | null): number {
  const total = settings.totalSteps ?? fromData ?? 0;
  if (total <= 0) throw new Error(`stage '${settings.stageName}': no steps to run (set buffer.total_steps or give tasks)`);
  return total;
}

/** The task scheduler over the stage's tasksets, at its start (a resumed stage loads its saved position into it). */
async function createScheduler(settings: StageSettings): Promise<TasksetScheduler> {
  const tasksets = await Promise.all(settings.tasksets.map((t) => loadTaskset(t.taskset)));
  return new TasksetScheduler({
    tasksets: settings.tasksets.map((t, i) => ({
      taskset: tasksets[i] as Awaited<ReturnType<typeof loadTaskset>>,
      ...(t.selector ? { selector: t.selector } : {}),
      ...(t.weight !== undefined ? { weight: t.weight } : {}),
    })),
    batchSize: settings.batchSize,
    totalEpochs: settings.totalEpochs,
    ...(settings.totalSteps !== null ? { totalSteps: settings.totalSteps } : {}),
  });
}

/** Mode train from a dataset file (SFT, DPO): one batch of its rows per step. */
async function loadTrainDataset(settings: StageSettings, algorithm: ResolvedAlgorithm): Promise<DatasetReader> {
  if (!settings.buffer.path) throw new Error(`stage '${settings.stageName}': the file experience buffer needs a path`);
  const load = algorithm.schema === 'dpo' ? loadDpoDataset : loadSftDataset;
  const rows = await load(settings.buffer.path, Tokenizer.load(settings.modelPath), settings.buffer.format ?? {});
  return new DatasetReader(rows, settings.trainBatchSize);
}

/**
 * The train steps of a stage of mode both or train, counted as rank 0's stage counts them (the learning-rate schedule
 * depends on it): buffer.total_steps, else the tasksets' (mode both) or the dataset's (mode train, file) steps.
 */
export async function countTrainSteps(settings: StageSettings, algorithm: ResolvedAlgorithm): Promise<number> {
  // rank 0 counts the task pipeline's output, which the other ranks cannot wait for before the rendezvous
  if (settings.mode === 'both' && settings.taskPipeline !== null && settings.totalSteps === null)
    throw new Error(
      `stage '${settings.stageName}': a data-parallel trainer with data_processor.task_pipeline needs buffer.total_steps ` +
        '(the other ranks cannot count the steps of a taskset rank 0 is still writing)',
    );
  if (settings.mode === 'both') return stageSteps(settings, (await createScheduler(settings)).totalSteps);
  if (settings.mode === 'train' && settings.buffer.storageType === 'file')
    return stageSteps(settings, (await loadTrainDataset(settings, algorithm)).stepsFor(settings.totalEpochs));
  return stageSteps(settings, null);
}

/** What the stage's trainer starts with; every rank of a data-parallel trainer starts with the same. */
export function trainerInit(settings: StageSettings, totalSteps: number): TrainerInit {
  const d = settings.distributed;
  return {
    jobDir: settings.jobDir,
    resume: true,
    modelPath: settings.modelPath,
    dtype: settings.trainer.paramDtype,
    masterDtype: settings.trainer.masterDtype,
    device: settings.trainer.device,
    algorithm: settings.algorithm,
    pluginBaseDir: settings.pluginBaseDir,
    lora: settings.lora,
    loraPath: settings.loraPath,
    criticModelPath: settings.criticModelPath,
    totalSteps,
    microBatchSize: settings.trainer.microBatchSize,
    gradientCheckpointing: settings.trainer.gradientCheckpointing,
    padTokenId: 0,
    seed: settings.seed,
    numThreads: settings.threads.trainer,
    distributed: d
      ? {
          rank: d.rank,
          worldSize: d.worldSize,
          masterAddr: d.masterAddr,
          masterPort: d.masterPort,
          timeoutMs: settings.trainer.distributedTimeoutMs,
          stage: settings.stageName,
          zeroStage: settings.trainer.zeroStage,
        }
      : null,
  };
}

/** Where a stage of mode both or train leaves its final weights (a Hugging Face folder, the next stage's start). */
export function finalModelDir(settings: StageSettings): string {
  return join(settings.jobDir, 'final_model');
}
