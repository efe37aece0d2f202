// The parts of one stage of mode both, explore or train, each made when its mode's runner asks for it: monitors and
// progress, the experience buffer (in memory, or shared: SQLite or PostgreSQL, read on from the checkpoint's cursor),
// the process weight channel, the trainer, the explorer (engine, workflow runner, experience pipeline, auxiliary
// models) and the trainer loop's batches. Every part made is closed when the stage ends, last made first; a part that
// fails stops the others (its error is the stage's). Which parts a stage has is its mode's runner's business
// (./stage-both.ts, ./stage-explore.ts, ./stage-train.ts); what a checkpoint holds: ./checkpoint-state.ts.
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { RemoteEnginePool, tokenizerVocabularyWarning } from '../../openai/index.js';
import { languageConfigOf } from '../../engine/index.js';
import { Tokenizer } from '../../tokenizer/index.js';
import { missingStateKeyWarning } from '../algorithm/advantage/index.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import { createSampleStrategy } from '../algorithm/sample-strategy.js';
import { startAuxiliaryModels } from '../auxiliary/index.js';
import { checkRewardModels } from '../reward/index.js';
import {
  AuxiliaryReader,
  displayBufferPath,
  type ExperienceBuffer,
  loadSftDataset,
  openSharedBuffer,
  type PriorityFnName,
  PriorityReplayBuffer,
  QueueBuffer,
  type SharedExperienceBuffer,
  type TasksetScheduler,
  writeBufferRecord,
} from '../buffer/index.js';
import { type LoadedCheckpoint, latestCheckpoint } from '../checkpoint.js';
import type { StageHooks, StageResult, StageSettings } from '../settings.js';
import { ExperiencePipeline, explorerSavePath } from '../data/experience-pipeline/index.js';
import type { ModelBounds } from '../experience.js';
import { engineCounters, startExplorerEngine } from '../explorer/engines.js';
import { stageWorkflowRunner } from '../explorer/evaluation.js';
import { ADVANTAGES_FILE, createMonitors, type MonitorGroup, ProgressReporter } from '../monitor/index.js';
import { openProcessWeightChannel } from '../sync/process-channel.js';
import type { ExplorerEngine, ProcessWeightChannel, StartedEngine, WeightReceiver } from '../sync/weight-channel.js';
import { BufferExperienceSource, type BufferSourceOptions } from '../trainer/experience-source.js';
import { runTrainerLoop, type WeightPublication } from '../trainer/loop.js';
import { StepBatches, type TrainerSource } from '../trainer/step-batches.js';
import { TrainerClient } from '../trainer/trainer.js';
import { EngineModelHandle, WeightSwapGate, type WorkflowRunner } from '../workflow/index.js';
import { type RunState, truncateSteps } from './checkpoint-state.js';
import { changedSettingsWarning, recordedSettings } from './resume-settings.js';
import { createScheduler, finalModelDir, stageSteps, trainerInit } from './stage-plan.js';

/** explorer.name when the config names none (Trinity-RFT's default). */
const DEFAULT_EXPLORER_NAME = 'explorer';

/** The shared buffer's file or PostgreSQL URL (experience_buffer.path; derived for an SQLite file). */
export function sharedBufferPath(settings: Pick<StageSettings, 'buffer' | 'jobDir'>): string {
  return settings.buffer.path ?? join(settings.jobDir, 'buffer.db');
}

/** Explorer parts shared by modes both and explore. */
export interface ExplorerParts {
  started: StartedEngine;
  engine: ExplorerEngine;
  handle: EngineModelHandle;
  /** sync_style fully_async: the gate the handle's calls pass, through which the channel swaps weights mid-step. */
  swapGate: WeightSwapGate | null;
  runner: WorkflowRunner;
  /** data_processor.experience_pipeline; null: experiences go to the buffer as they come. */
  pipeline: ExperiencePipeline | null;
}

/**
 * The parts of one stage of mode both, explore or train, made on demand by the mode's runner (./stage-both.ts,
 * ./stage-explore.ts, ./stage-train.ts), and closed by run() when the stage ends, last made first.
 */
export class StageParts {
  readonly settings: StageSettings;
  readonly algorithm: ResolvedAlgorithm;
  readonly hooks: StageHooks;
  readonly log: (line: string) => void;
  /** An explorer process (mode explore) shares the job folder with its trainer process: its metrics go beside, in
   * a folder of its explorer.name. */
  readonly metricsDir: string;
  readonly checkpoint: LoadedCheckpoint | null;
  readonly startStep: number;
  /** This process is one explorer of several (mode explore). */
  readonly explorerProcess: boolean;
  /** The checkpoint's run state to resume from (nothing for an explorer process: it resumes from its claims). */
  readonly saved: Partial<RunState>;
  /** Closes the stage's parts, last made first; `failure`: what failed the stage (or an earlier part's close). */
  readonly #closers: ((failure: { error: unknown } | null) => Promise<void> | void)[] = [];
  /** Aborted when a part of the stage failed: the other parts stop waiting (mode both: explorer and trainer). */
  readonly #failed = new AbortController();
  /** The stage's stop signal: the user's (Ctrl-C, SIGTERM) or a failed part's. */
  readonly #signal: AbortSignal;

  /**
   * The parts of a stage. `explorerProcess`: this process is one explorer of several (mode explore): it goes on with
   * the steps no explorer finished (claims in the shared buffer's database), not from the trainer's checkpoint,
   * which says nothing of rows written after it; its metrics go beside the trainer's, in a folder of its name.
   */
  constructor(
    settings: StageSettings,
    algorithm: ResolvedAlgorithm,
    hooks: StageHooks,
    log: (line: string) => void,
    options: { explorerProcess: boolean },
  ) {
    this.settings = settings;
    this.algorithm = algorithm;
    this.hooks = hooks;
    this.log = log;
    this.explorerProcess = options.explorerProcess;
    this.metricsDir = options.explorerProcess ? join(settings.jobDir, settings.explorer.name) : settings.jobDir;
    this.#signal = hooks.signal ? AbortSignal.any([hooks.signal, this.#failed.signal]) : this.#failed.signal;
    this.checkpoint = latestCheckpoint(settings.jobDir);
    this.startStep = options.explorerProcess ? 0 : (this.checkpoint?.step ?? 0);
    this.saved = options.explorerProcess ? {} : ((this.checkpoint?.state ?? {}) as Partial<RunState>);
    if (!options.explorerProcess) {
      truncateSteps(join(this.metricsDir, 'metrics.jsonl'), this.startStep);
      truncateSteps(join(this.metricsDir, 'eval_samples.jsonl'), this.startStep);
      truncateSteps(join(this.metricsDir, ADVANTAGES_FILE), this.startStep);
      if (this.checkpoint) {
        log(`[${settings.stageName}] resuming from checkpoint step ${this.startStep} (${this.checkpoint.dir})`);
        const current = recordedSettings(settings, algorithm);
        const warning = changedSettingsWarning(this.checkpoint.state.settings, current, this.checkpoint.dir);
        if (warning !== null) log(`[${settings.stageName}] ${warning}`);
      }
    }
  }

  /** The stage's stop signal: the user's (Ctrl-C, SIGTERM) or a failed part's. */
  get signal(): AbortSignal {
    return this.#signal;
  }

  /** Whether a part failed the stage (its error: failedReason). */
  get failed(): boolean {
    return this.#failed.signal.aborted;
  }

  get failedReason(): unknown {
    return this.#failed.signal.reason;
  }

  /** Fails the stage with `error`: every other part stops waiting. */
  fail(error: unknown): void {
    this.#failed.abort(error);
  }

  /** Registers a part's close (run() calls them last made first; `failure`: what failed the stage). */
  onClose(close: (failure: { error: unknown } | null) => Promise<void> | void): void {
    this.#closers.push(close);
  }

  /** Runs the stage's body, then closes every part made; the first error is the stage's. */
  async run(body: (parts: this) => Promise<StageResult>): Promise<StageResult> {
    // every part is closed, and the first error is the one reported: a part that fails to close after the stage
    // failed (a trainer whose ranks are gone) does not hide why the stage failed
    let failure: { error: unknown } | null = null;
    try {
      return await body(this);
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

  totalSteps(fromData: number | null): number {
    return stageSteps(this.settings, fromData);
  }

  /** The task scheduler over the tasksets (it fixes the number of steps), at its saved position on resume. */
  async scheduler(): Promise<TasksetScheduler> {
    const scheduler = await createScheduler(this.settings);
    const saved = this.saved.explorer;
    if (saved?.scheduler) scheduler.loadState(saved.scheduler);
    return scheduler;
  }

  monitoring(totalSteps: number): { monitors: MonitorGroup; progress: ProgressReporter } {
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

  async memoryBuffer(): Promise<ExperienceBuffer> {
    const { settings } = this;
    if (settings.buffer.storageType === 'sql') return this.sharedBuffer('reader');
    if (settings.buffer.storageType === 'file')
      throw new Error(`stage '${settings.stageName}': a file experience buffer (a dataset) needs mode train`);
    const replay = settings.buffer.replay;
    const buffer = replay
      ? new PriorityReplayBuffer({ name: settings.buffer.name, ...this.replayOptions(replay) })
      : new QueueBuffer({
          name: settings.buffer.name,
          capacity: settings.buffer.capacity,
          // a full queue waits for the trainer as long as the explorer waits for weights
          writeTimeoutMs: settings.sync.timeoutMs,
        });
    this.#closers.push(() => buffer.close());
    return buffer;
  }

  /** Priority replay (experience_buffer.replay_buffer) as both its stores take it: in memory, or in the SQL buffer. */
  replayOptions(replay: NonNullable<StageSettings['buffer']['replay']>) {
    return {
      capacity: this.settings.buffer.capacity,
      priorityFn: replay.priorityFn as PriorityFnName,
      decay: replay.decay,
      reuseCooldownMs: replay.reuseCooldownMs,
      ...(replay.useCountLimit !== undefined ? { useCountLimit: replay.useCountLimit } : {}),
      ...(replay.sigma !== undefined ? { sigma: replay.sigma } : {}),
      seed: this.settings.seed,
    };
  }

  /** The trainer's view of the buffer; explorer_driven: it answers the explorer's requests for weights while it waits. */
  bufferSource(
    buffer: ExperienceBuffer,
    publication: WeightPublication,
    stepFilled: ((step: number) => boolean) | null = null,
    explorerWaitsOn: BufferSourceOptions['explorerWaitsOn'] = null,
  ): BufferExperienceSource {
    const { sync } = this.settings;
    const source: BufferExperienceSource = new BufferExperienceSource({
      buffer,
      maxStaleness: sync.maxStaleness,
      stepFilled,
      explorerWaitsOn,
      signal: this.#signal,
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
  async sharedBuffer(role: 'reader' | 'writer'): Promise<SharedExperienceBuffer> {
    const { settings } = this;
    // a reader with replay_buffer on reads by priority, its replay state in the database (../buffer/sql-replay.ts)
    const replay = role === 'reader' ? settings.buffer.replay : null;
    const buffer = await openSharedBuffer({
      path: sharedBufferPath(settings),
      name: settings.buffer.name,
      ...(replay ? { replay: this.replayOptions(replay) } : {}),
    });
    this.#closers.push(() => buffer.close());
    // where the buffer is, for readers of the job folder (the Studio): a PostgreSQL buffer is not in it
    writeBufferRecord(settings.jobDir, sharedBufferPath(settings), buffer.table);
    // the trainer reads on from its checkpoint's cursor, even when the commit after that checkpoint never happened
    const cursor = this.saved.buffer?.cursor;
    const savedKind = this.saved.bufferCursor;
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
  async processWeightChannel(buffer: SharedExperienceBuffer): Promise<ProcessWeightChannel> {
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

  async trainer(totalSteps: number): Promise<TrainerClient> {
    const { trainer } = await TrainerClient.start(trainerInit(this.settings, totalSteps));
    // a data-parallel trainer's other ranks fail with the stage's error instead of going on to the next stage
    this.#closers.push((failure) => trainer.close(failure === null ? {} : { failure: failure.error }));
    return trainer;
  }

  /**
   * The explorer's engine, workflow runner and experience pipeline. `finishedSteps`: mode explore's steps this
   * explorer finished, which its save_input file keeps (it forgets the rest, which are explored again).
   */
  async explorer(
    weightsDir: string,
    progress: ProgressReporter,
    version = this.startStep,
    finishedSteps?: ReadonlySet<number>,
  ): Promise<ExplorerParts> {
    const { settings } = this;
    const pipelineSettings = settings.experiencePipeline;
    // an explorer process of several writes save_input to a file of its own name (the default name: the file itself)
    const inputSavePath =
      pipelineSettings?.inputSavePath && this.explorerProcess && settings.explorer.name !== DEFAULT_EXPLORER_NAME
        ? explorerSavePath(pipelineSettings.inputSavePath, settings.explorer.name)
        : (pipelineSettings?.inputSavePath ?? null);
    // before the engine starts, so a bad operator fails fast; its save file forgets the steps that are explored again
    let auxiliary: Awaited<ReturnType<typeof startAuxiliaryModels>> | null = null; // started below, before any step
    const pipeline = pipelineSettings
      ? await ExperiencePipeline.create(
          { ...pipelineSettings, inputSavePath },
          {
            baseDir: settings.pluginBaseDir,
            startStep: this.startStep,
            ...(finishedSteps ? { keepSteps: finishedSteps } : {}),
            auxiliaryModels: () => auxiliary,
            log: (line) => progress.log(line),
          },
        )
      : null;
    if (pipeline) this.#closers.push(() => pipeline.close());
    const started = await startExplorerEngine(settings, weightsDir, (line) => progress.log(line));
    const engine = started.engine;
    this.#closers.push(() => engine.close());
    // a pool of servers none of which answers any more stops the stage with its NoRolloutServerError
    if (engine instanceof RemoteEnginePool) engine.onFailure((error) => this.fail(error));
    const swapGate = settings.sync.style === 'fully_async' ? new WeightSwapGate() : null;
    const handle = new EngineModelHandle(swapGate ? swapGate.gated(engine) : engine, { modelVersion: version });
    // said once here, not found per rollout: rollouts with ids the model has no row for are rejected before the buffer
    const { vocabSize } = this.modelBounds();
    const rejectedIds = 'cannot be trained on: rollouts holding them are rejected before the buffer';
    const vocabularyWarning = tokenizerVocabularyWarning(handle.tokenizer, vocabSize, settings.modelPath, rejectedIds);
    if (vocabularyWarning !== null) this.log(`[${settings.stageName}] ${vocabularyWarning}`);
    const models = await startAuxiliaryModels(settings.auxiliaryModels); // judges, reward models, teachers
    auxiliary = models;
    this.#closers.push(() => models.close());
    // a judge whose fixed prompt cannot fit its context: the stage's error now, not a failure of every call
    checkRewardModels([...settings.tasksets.map(({ taskset }) => taskset), ...settings.evalTasksets], models);
    const runner = stageWorkflowRunner(settings, handle, (line) => progress.log(line), models);
    this.#closers.push(() => runner.close()); // frees its workflow worker threads (module-path workflows)
    return { started, engine, handle, swapGate, runner, pipeline };
  }

  explorerLoopBase(
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
      bounds: this.modelBounds(),
      startStep: this.startStep,
      totalSteps,
      metricsDir: this.metricsDir,
      engineCounters: engineCounters(explorer.started),
      log: (line: string) => this.log(line),
      signal: this.#signal,
    };
  }

  /** The trainer loop with the algorithm's sample strategy and auxiliary datasets, restored on resume. */
  async trainerLoop(parts: {
    trainer: TrainerClient;
    publication: WeightPublication;
    source: TrainerSource;
    totalSteps: number;
    monitors: MonitorGroup;
    progress: ProgressReporter;
    rolloutMetrics: (step: number) => Record<string, number>;
    /** The newest rollout failures the explorer reported (mode both; ../trainer/empty-steps.ts names them). */
    rolloutFailures?: () => readonly string[];
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
      auxiliary: await this.auxiliaryReaders(),
      source: parts.source,
    });
    batches.loadState(this.saved);
    // a batch without the states the advantage function groups steps by (gigpo, a module-path workflow or rows from
    // elsewhere: config check refuses the built-in workflows that write none) is said once, at the first such step
    let statesWarned = false;
    const nextBatch = async (step: number) => {
      const batch = await batches.next(step);
      const usual = batch.experiences.filter((e) => e.info.isExpert !== true).map((e) => e.info);
      const warning =
        statesWarned || algorithm.advantageFn === null ? null : missingStateKeyWarning(algorithm.advantageFn, usual);
      if (warning !== null) parts.progress.log(`[${settings.stageName}] train step ${step}: ${warning}`);
      statesWarned ||= warning !== null;
      return batch;
    };
    return runTrainerLoop({
      settings,
      trainer: parts.trainer,
      weights: parts.publication,
      nextBatch,
      checkpointState: (step) => {
        const state: RunState = {
          explorer: parts.explorerState(step),
          ...batches.state(),
          ...parts.bufferState?.(step),
          ...parts.stopState?.(step),
          stage: settings.stageName,
        };
        if (state.buffer) state.bufferCursor = settings.buffer.replay ? 'replay' : 'rows';
        return { ...state, settings: recordedSettings(settings, algorithm) };
      },
      onCheckpoint: () => batches.committed(),
      advantagesFile: join(this.metricsDir, ADVANTAGES_FILE),
      rolloutMetrics: parts.rolloutMetrics,
      ...(parts.rolloutFailures ? { rolloutFailures: parts.rolloutFailures } : {}),
      monitors: parts.monitors,
      progress: parts.progress,
      startStep: this.startStep,
      totalSteps: parts.totalSteps,
      ...(parts.stopAfter ? { stopAfter: parts.stopAfter } : {}),
      signal: this.#signal,
    });
  }

  /** The trained model's vocabulary (a vision-language folder: its language model's) and context length (an external
   * server's model with no local folder: unknown). */
  modelBounds(): ModelBounds {
    const { settings } = this;
    const local = existsSync(join(settings.modelPath, 'config.json'));
    return {
      vocabSize: local ? languageConfigOf(settings.modelPath).vocabSize : Number.MAX_SAFE_INTEGER,
      maxLength: settings.explorer.maxLength,
    };
  }

  /** Auxiliary datasets (trainer_input.auxiliary_buffers, e.g. mix's expert data), rows marked as expert data. */
  async auxiliaryReaders(): Promise<Record<string, AuxiliaryReader>> {
    const { settings } = this;
    const readers: Record<string, AuxiliaryReader> = {};
    for (const [name, dataset] of Object.entries(settings.auxiliaryDatasets)) {
      const format = { ...dataset.format, modelDir: settings.modelPath }; // the images' processor (format.image_key)
      const rows = await loadSftDataset(dataset.path, Tokenizer.load(settings.modelPath), format);
      for (const row of rows) row.info.isExpert = true;
      readers[name] = new AuxiliaryReader(dataset.name, rows, dataset.totalEpochs);
    }
    return readers;
  }

  async saveFinalModel(trainer: TrainerClient): Promise<string> {
    const dir = finalModelDir(this.settings.jobDir);
    rmSync(dir, { recursive: true, force: true });
    await trainer.saveWeights(dir);
    return dir;
  }
}
