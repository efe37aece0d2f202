// One run of the config resolved: `resolveRun` fills in the derived keys of a schema-checked run and checks the rules
// that tie keys together, as Trinity-RFT's config validators (trinity/common/config_validator.py) do — a short
// sequence of each section's resolver, plus the few rules that span sections (the job dir, mode colocate, evaluation
// at sync points, what each mode needs). Every problem is collected, none thrown.
//
// Where things live, and why there is no import cycle: src/rft/config/ is the config language (problems, value
// schemas, the schema walker, refusals) and imports no part of src/rft. Each part declares its own section in it —
// src/rft/<part>/config.ts: the schema slice with its defaults, its rules, its resolver and the settings it becomes
// (buffer/, explorer/, auxiliary/, trainer/, sync/, algorithm/, monitor/, data/; the policy model's section is
// ./model.ts). This folder composes them (./schema.ts, this file, ./validate.ts, ./load.ts, ./preflight.ts,
// ./stage-settings.ts), above every part: run/ is the layer that may import them all. The sections call one another
// only downwards (explorer's schema names auxiliary's); what a rule needs from another section is passed in.
import { join, resolve } from 'node:path';
import { type AlgorithmResolver, resolveAlgorithmSection } from '../../algorithm/config.js';
import { trainsOffline } from '../../algorithm/schemas.js';
import { checkAuxiliaryModels } from '../../auxiliary/config.js';
import { type BufferConfig, resolveBuffer } from '../../buffer/config.js';
import type { ConfigProblem, ReportProblem } from '../../config/errors.js';
import { refusalProblems } from '../../config/refusals.js';
import { resolveDataProcessor } from '../../data/config.js';
import { checkRolloutModel } from '../../explorer/config.js';
import { checkMonitor } from '../../monitor/config.js';
import { resolveSynchronizer } from '../../sync/config.js';
import {
  checkBitwiseOnPolicy,
  checkStopWhen,
  checkTrainerStrategy,
  trainerDtypes,
  trainerTokenBudget,
} from '../../trainer/config.js';
import { resolveModel } from './model.js';
import type { Mode, RunConfig, RunInput } from './schema.js';

export interface ValidateOptions {
  /** Folder for the default checkpoint_root_dir (`./checkpoints`); default process.cwd(). */
  cwd?: string;
  /** Checks the algorithm section and supplies the default repeat_times (else: 1, Trinity's default). */
  resolveAlgorithm?: AlgorithmResolver;
}

export interface RunContext extends ValidateOptions {
  /** False for the top level of a multi-stage file: it never runs by itself, so mode requirements are not checked. */
  runnable: boolean;
  stageName?: string;
}

/** Fills in the derived keys of a schema-checked run and checks the rules between keys. */
export function resolveRun(input: RunInput, context: RunContext, problems: ConfigProblem[]): RunConfig {
  const problem: ReportProblem = (path, message) => problems.push({ path, message });
  // Trinity's colocate is mode both with explorer and trainer on one device, weights synced in memory
  const colocate = input.mode === 'colocate';
  const mode: Mode = input.mode === 'colocate' ? 'both' : input.mode;
  const singleStageRun = context.runnable && context.stageName === undefined;
  problems.push(...refusalProblems(input));

  const { name, rootDir, jobDir } = resolveJobDir(input, mode, context, problem);
  const model = resolveModel(input.model, problem);
  const algorithm = resolveAlgorithmSection(input.algorithm, input.trainer.grad_clip, context.resolveAlgorithm, problem);
  const offline = trainsOffline(algorithm.algorithm_type);
  const bufferContext = {
    mode,
    algorithmType: algorithm.algorithm_type,
    offline,
    repeatTimes: algorithm.repeat_times,
    maxResponseTokens: model.max_response_tokens,
    jobDir,
    inStage: context.stageName !== undefined,
    runnable: context.runnable,
  };
  const buffer = resolveBuffer(input.buffer, bufferContext, problem);
  const { tasksets, eval_tasksets: evalTasksets } = buffer.explorer_input;

  const rollout = input.explorer.rollout_model;
  const remoteEngine = rollout.engine_type === 'openai';
  const sync = resolveSynchronizer(input.synchronizer, { mode, remoteEngine, engineProcess: rollout.engine_process }, problem);
  const dtypes = trainerDtypes(input.trainer, model, problem);
  checkBitwiseOnPolicy(
    input.trainer,
    {
      modelDtype: model.dtype,
      paramDtype: dtypes.param_dtype,
      engineType: rollout.engine_type,
      rolloutDevice: rollout.device,
    },
    problem,
  );
  checkTrainerStrategy(input.trainer, problem);
  const tokenBudget = trainerTokenBudget(input.trainer, model.max_model_len, problem);
  const devices = colocate ? colocatedDevices(input, problem) : { rollout: rollout.device, trainer: input.trainer.device };
  const explorer = colocate ? { ...input.explorer, rollout_model: { ...rollout, device: devices.rollout } } : input.explorer;
  // evaluation runs at sync points
  if (evalTasksets.length > 0 && (mode === 'both' || mode === 'explore') && !offline) {
    if (explorer.eval_interval % sync.sync_interval !== 0) {
      const lower = Math.max(1, Math.floor(explorer.eval_interval / sync.sync_interval)) * sync.sync_interval;
      problem(
        'explorer.eval_interval',
        `(${explorer.eval_interval}) must be a multiple of synchronizer.sync_interval (${sync.sync_interval}): ` +
          `evaluation runs at sync points; use ${lower} or ${lower + sync.sync_interval}`,
      );
    }
  }
  const storageType = buffer.trainer_input.experience_buffer.storage_type;
  const evalNames = evalTasksets.map((t) => t.name);
  checkStopWhen(input.trainer.stop_when, { runnable: context.runnable, mode, storageType, evalTasksets: evalNames }, problem);
  checkMonitor(input.monitor, problem);
  // as written: mode colocate's shared device (above) is not the rollout model's own setting
  checkRolloutModel(rollout, mode, problem);
  // auxiliary models (src/rft/auxiliary): the explorer's workflows and rewards call them
  checkAuxiliaryModels(explorer.auxiliary_models, { mode, singleStageRun }, problem);
  const dataProcessor = resolveDataProcessor(input.data_processor, { mode, singleStageRun, tasksets }, problem);
  if (context.runnable) checkModeNeeds(input, mode, buffer, problem);

  return {
    mode,
    project: input.project,
    name,
    checkpoint_root_dir: rootDir,
    checkpoint_job_dir: jobDir,
    continue_from_checkpoint: input.continue_from_checkpoint,
    model,
    algorithm,
    buffer,
    explorer,
    trainer: {
      ...input.trainer,
      device: devices.trainer,
      grad_clip: algorithm.optimizer.clip_grad,
      ...dtypes,
      ...tokenBudget,
    },
    synchronizer: sync,
    monitor: input.monitor,
    data_processor: dataProcessor,
  };
}

/** checkpoint_root_dir/project/name: the job dir (Trinity adds `group`; stages add /<stage_name>). */
function resolveJobDir(
  input: RunInput,
  mode: Mode,
  context: RunContext,
  problem: ReportProblem,
): { name: string; rootDir: string; jobDir: string } {
  const name = context.stageName === undefined ? input.name : `${input.name}/${context.stageName}`;
  const rootDir = input.checkpoint_root_dir ?? resolve(context.cwd ?? process.cwd(), 'checkpoints');
  const jobDir = join(rootDir, input.project, name);
  if (input.checkpoint_job_dir !== null && resolve(input.checkpoint_job_dir) !== jobDir) {
    problem('checkpoint_job_dir', `is derived as checkpoint_root_dir/project/name = ${jobDir}; remove it or set those keys`);
  }
  if (mode === 'bench' && !input.continue_from_checkpoint) {
    problem('continue_from_checkpoint', 'mode bench evaluates the checkpoints in the job dir; it must be true');
  }
  return { name, rootDir, jobDir };
}

/** Mode colocate: explorer and trainer on one device, weights synced in memory; one device set: both take it. */
function colocatedDevices(input: RunInput, problem: ReportProblem): { rollout: string; trainer: string } {
  const rollout = input.explorer.rollout_model;
  const trainerDevice = input.trainer.device;
  if (input.synchronizer.sync_method === 'checkpoint')
    problem('synchronizer.sync_method', "mode colocate syncs weights in memory, on the device: remove it or set 'memory'");
  if (rollout.engine_type === 'openai')
    problem('explorer.rollout_model.engine_type', "mode colocate runs the embedded engine beside the trainer: use 'embedded'");
  if (rollout.engine_process)
    problem('explorer.rollout_model.engine_process', "mode colocate runs the engine in the trainer's process: remove it");
  const rolloutDevice = rollout.device;
  if (rolloutDevice !== 'auto' && trainerDevice !== 'auto' && rolloutDevice !== trainerDevice)
    problem(
      'explorer.rollout_model.device',
      `mode colocate puts the explorer and the trainer on one device: it is '${rolloutDevice}', trainer.device is ` +
        `'${trainerDevice}'`,
    );
  const shared = trainerDevice !== 'auto' ? trainerDevice : rolloutDevice;
  return { rollout: shared, trainer: shared };
}

/** What each mode needs (Trinity's GlobalConfigValidator / BufferConfigValidator, made explicit). */
function checkModeNeeds(input: RunInput, mode: Mode, buffer: BufferConfig, problem: ReportProblem): void {
  const { tasksets, eval_tasksets: evalTasksets } = buffer.explorer_input;
  const experienceBuffer = buffer.trainer_input.experience_buffer;
  const explicitBuffer = input.buffer.trainer_input.experience_buffer !== undefined;
  const bufferPath = 'buffer.trainer_input.experience_buffer';
  const tasksetBase =
    input.buffer.explorer_input.taskset !== undefined ? 'buffer.explorer_input.taskset' : 'buffer.explorer_input.tasksets';
  const needsTasks = mode === 'both' || mode === 'explore';
  if (needsTasks && tasksets.length === 0) {
    problem('buffer.explorer_input.taskset', `mode ${mode} explores tasks: set a taskset (or tasksets)`);
  }
  if (mode === 'bench' && evalTasksets.length === 0) {
    problem('buffer.explorer_input.eval_tasksets', 'mode bench evaluates checkpoints on eval_tasksets: set at least one');
  }
  if ((mode === 'explore' || mode === 'serve') && experienceBuffer.storage_type !== 'sql') {
    problem(
      `${bufferPath}.storage_type`,
      `mode ${mode} writes experiences for a separate train process: use a shared buffer, storage_type sql ` +
        `(got ${experienceBuffer.storage_type})`,
    );
  }
  // several explorer processes (mode explore) share the explore steps through the buffer (src/rft/explorer/task-claims.ts)
  if (mode !== 'explore' && input.explorer.name !== null) {
    problem('explorer.name', `names an explorer process of mode explore among those sharing a buffer; mode ${mode}: remove it`);
  }
  if (mode === 'explore') {
    tasksets.forEach((t, i) => {
      if (t.task_selector.selector_type === 'difficulty_based')
        problem(
          `${tasksetBase}${input.buffer.explorer_input.taskset !== undefined ? '' : `.${i}`}.data_selector.selector_type`,
          'difficulty_based picks from the rewards one process saw; explorer processes (mode explore) share the ' +
            'explore steps, so each must deal the same batches: use it in mode both, or a selector that needs no feedback',
        );
    });
  }
  if (mode === 'both' && experienceBuffer.storage_type === 'file') {
    problem(
      `${bufferPath}.storage_type`,
      "mode both passes experiences from explorer to trainer: use 'queue' or 'sql', not 'file'",
    );
  }
  if (mode === 'train') {
    const readable = explicitBuffer && experienceBuffer.storage_type !== 'queue';
    if (!readable) {
      problem(
        bufferPath,
        'mode train needs experiences to read: an experience_buffer with storage_type sql (shared with an explore ' +
          'process) or file (a dataset)',
      );
    }
  }
}
