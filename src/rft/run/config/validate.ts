// Validation: the schema (./schema.ts) checks each key's type, then `resolveRun` fills in the derived keys and checks
// the rules that tie keys together, as Trinity-RFT's config validators (trinity/common/config_validator.py) do. Every
// problem is collected; the caller throws one ConfigError with all of them.
//
// Stages: each stage's overrides are deep-merged onto the top level as written (before defaults), then validated
// and resolved as a run of its own, so derived keys (train_batch_size, ...) follow the stage's values. A stage that
// names a different algorithm_type replaces the `algorithm` section instead of merging into it (the top level's
// module arguments belong to the other algorithm). The top level of a multi-stage file is not run by itself, so the
// rules about what each mode needs apply only to the stages.
import { join, resolve } from 'node:path';
import type { ConfigProblem } from '../../config/errors.js';
import { type AlgorithmResolver, resolveAlgorithmSection } from '../../algorithm/config.js';
import { checkAuxiliaryModels } from '../../auxiliary/config.js';
import { resolveBuffer } from '../../buffer/config.js';
import { resolveDataProcessor } from '../../data/config.js';
import { checkRolloutModel } from '../../explorer/config.js';
import { checkStopWhen, trainerDtypes } from '../../trainer/config.js';
import { checkMonitor } from '../../monitor/config.js';
import { resolveSynchronizer } from '../../sync/config.js';
import { parseWith } from '../../config/parse.js';
import { refusalProblems } from '../../config/refusals.js';
import { ConfigSchema, type Mode, type Config, type RunConfig, type RunInput, RunSchema, type StageConfig } from './schema.js';
import { deepMerge, getIn, isMapping, joinPath, type Segment, type Tree } from '../../config/source.js';

export interface ValidateOptions {
  /** Folder for the default checkpoint_root_dir (`./checkpoints`); default process.cwd(). */
  cwd?: string;
  /** Checks the algorithm section and supplies the default repeat_times (else: 1, Trinity's default). */
  resolveAlgorithm?: AlgorithmResolver;
}

// --- derived keys and cross-field rules --------------------------------------------------------------------------------

interface RunContext extends ValidateOptions {
  /** False for the top level of a multi-stage file: it never runs by itself, so mode requirements are not checked. */
  runnable: boolean;
  stageName?: string;
}

/** Fills in the derived keys of a schema-checked run and checks the rules between keys. */
export function resolveRun(input: RunInput, context: RunContext, problems: ConfigProblem[]): RunConfig {
  const problem = (path: string, message: string) => problems.push({ path, message });
  // Trinity's colocate is mode both with explorer and trainer on one device, weights synced in memory
  const colocate = input.mode === 'colocate';
  const mode: Mode = input.mode === 'colocate' ? 'both' : input.mode;
  problems.push(...refusalProblems(input));

  // checkpoint_root_dir/project/name: the job dir (Trinity adds `group`; stages add /<stage_name>)
  const name = context.stageName === undefined ? input.name : `${input.name}/${context.stageName}`;
  const rootDir = input.checkpoint_root_dir ?? resolve(context.cwd ?? process.cwd(), 'checkpoints');
  const jobDir = join(rootDir, input.project, name);
  if (input.checkpoint_job_dir !== null && resolve(input.checkpoint_job_dir) !== jobDir) {
    problem('checkpoint_job_dir', `is derived as checkpoint_root_dir/project/name = ${jobDir}; remove it or set those keys`);
  }
  if (mode === 'bench' && !input.continue_from_checkpoint) {
    problem('continue_from_checkpoint', 'mode bench evaluates the checkpoints in the job dir; it must be true');
  }

  // model lengths (Trinity's ModelConfigValidator._check_model_len, without its silent clamping)
  const m = input.model;
  let maxModelLen = m.max_model_len;
  let maxPrompt = m.max_prompt_tokens;
  let maxResponse = m.max_response_tokens;
  if (maxModelLen !== null && maxPrompt !== null && maxResponse !== null && maxPrompt + maxResponse > maxModelLen) {
    problem(
      'model.max_model_len',
      `max_prompt_tokens + max_response_tokens (${maxPrompt} + ${maxResponse}) exceeds max_model_len (${maxModelLen})`,
    );
  }
  if (maxModelLen === null) {
    if (maxPrompt !== null && maxResponse !== null) maxModelLen = maxPrompt + maxResponse;
    else problem('model.max_model_len', 'cannot be derived: set it, or both max_prompt_tokens and max_response_tokens');
  }
  if (maxModelLen !== null) {
    if (maxPrompt === null && maxResponse === null) {
      maxPrompt = Math.floor(maxModelLen / 2);
      maxResponse = maxModelLen - maxPrompt;
    } else if (maxPrompt === null && maxResponse !== null) {
      if (maxResponse >= maxModelLen) {
        problem('model.max_response_tokens', `(${maxResponse}) leaves no room for the prompt in max_model_len (${maxModelLen})`);
      }
      maxPrompt = Math.max(1, maxModelLen - maxResponse);
    } else if (maxResponse === null && maxPrompt !== null) {
      if (maxPrompt >= maxModelLen) {
        problem('model.max_prompt_tokens', `(${maxPrompt}) leaves no room for a response in max_model_len (${maxModelLen})`);
      }
      maxResponse = Math.max(1, maxModelLen - maxPrompt);
    }
  }
  const model = {
    ...m,
    max_model_len: maxModelLen ?? 0,
    max_prompt_tokens: maxPrompt ?? 0,
    max_response_tokens: maxResponse ?? 0,
  };
  const algorithm = resolveAlgorithmSection(input.algorithm, input.trainer.grad_clip, context.resolveAlgorithm, problem);
  const repeatTimes = algorithm.repeat_times;
  const offline = algorithm.algorithm_type === 'sft' || algorithm.algorithm_type === 'dpo';

  const buffer = resolveBuffer(
    input.buffer,
    {
      mode,
      algorithmType: algorithm.algorithm_type,
      offline,
      repeatTimes,
      maxResponseTokens: model.max_response_tokens,
      jobDir,
      inStage: context.stageName !== undefined,
    },
    problem,
  );
  const { tasksets, eval_tasksets: evalTasksets } = buffer.explorer_input;
  const experienceBuffer = buffer.trainer_input.experience_buffer;
  const explicitBuffer = input.buffer.trainer_input.experience_buffer !== undefined;
  const bufferPath = 'buffer.trainer_input.experience_buffer';
  const tasksetBase =
    input.buffer.explorer_input.taskset !== undefined ? 'buffer.explorer_input.taskset' : 'buffer.explorer_input.tasksets';

  const remoteEngine = input.explorer.rollout_model.engine_type === 'openai';
  const engineProcess = input.explorer.rollout_model.engine_process;
  const sync = resolveSynchronizer(input.synchronizer, { mode, remoteEngine, engineProcess }, problem);
  const dtypes = trainerDtypes(input.trainer, input.model, problem);
  let explorer = input.explorer;
  let trainerDevice = input.trainer.device;
  if (colocate) {
    if (input.synchronizer.sync_method === 'checkpoint')
      problem('synchronizer.sync_method', "mode colocate syncs weights in memory, on the device: remove it or set 'memory'");
    if (remoteEngine)
      problem('explorer.rollout_model.engine_type', "mode colocate runs the embedded engine beside the trainer: use 'embedded'");
    if (explorer.rollout_model.engine_process)
      problem('explorer.rollout_model.engine_process', "mode colocate runs the engine in the trainer's process: remove it");
    const rolloutDevice = explorer.rollout_model.device;
    if (rolloutDevice !== 'auto' && trainerDevice !== 'auto' && rolloutDevice !== trainerDevice)
      problem(
        'explorer.rollout_model.device',
        `mode colocate puts the explorer and the trainer on one device: it is '${rolloutDevice}', trainer.device is ` +
          `'${trainerDevice}'`,
      );
    // one of them set: both take it
    const shared = trainerDevice !== 'auto' ? trainerDevice : rolloutDevice;
    trainerDevice = shared;
    explorer = { ...explorer, rollout_model: { ...explorer.rollout_model, device: shared } };
  }
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

  checkStopWhen(
    input.trainer.stop_when,
    {
      runnable: context.runnable,
      mode,
      storageType: experienceBuffer.storage_type,
      evalTasksets: evalTasksets.map((t) => t.name),
    },
    problem,
  );

  checkMonitor(input.monitor, problem);

  // as written: mode colocate's shared device (above) is not the rollout model's own setting
  checkRolloutModel(input.explorer.rollout_model, mode, problem);
  // auxiliary models (src/rft/auxiliary): the explorer's workflows and rewards call them
  const singleStageRun = context.runnable && context.stageName === undefined;
  checkAuxiliaryModels(explorer.auxiliary_models, { mode, singleStageRun }, problem);

  const dataProcessor = resolveDataProcessor(input.data_processor, { mode, singleStageRun, tasksets }, problem);

  // what each mode needs (Trinity's GlobalConfigValidator / BufferConfigValidator, made explicit)
  if (context.runnable) {
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
      device: trainerDevice,
      grad_clip: algorithm.optimizer.clip_grad,
      ...dtypes,
    },
    synchronizer: sync,
    monitor: input.monitor,
    data_processor: dataProcessor,
  };
}

// --- the whole file -------------------------------------------------------------------------------------------------

/** How deep `path` reaches into `tree` (the number of leading segments that exist there). */
function depthIn(tree: unknown, path: readonly Segment[]): number {
  let depth = 0;
  while (depth < path.length && getIn(tree, path.slice(0, depth + 1)) !== undefined) depth++;
  return depth;
}

const splitPath = (path: string): Segment[] =>
  path === '' ? [] : path.split('.').map((s): Segment => (/^\d+$/.test(s) ? Number(s) : s));

const WARMUP_KEYS = 'buffer.trainer_input.sft_warmup_dataset/sft_warmup_steps';

/**
 * Trinity's SFT warm-up as the stages it stands for: `sft_warmup` (mode train, algorithm_type sft, the warm-up dataset
 * as a file experience buffer, sft_warmup_steps steps of train_batch_size samples, the top level's optimizer), then
 * `rft`, the run as written without the warm-up keys, starting from the warm-up's final weights.
 */
function sftWarmupStages(
  rawTop: Tree,
  trainBatchSize: number,
  steps: number,
): { stageName: string; override: Tree; madeFrom: string; base: Tree }[] {
  const trainerInput = getIn(rawTop, ['buffer', 'trainer_input']) as Tree;
  const dataset = { ...(trainerInput.sft_warmup_dataset as Tree), storage_type: 'file' };
  const optimizer = getIn(rawTop, ['algorithm', 'optimizer']);
  const withoutWarmup = { sft_warmup_dataset: null, sft_warmup_steps: null };
  return [
    {
      stageName: 'sft_warmup',
      madeFrom: WARMUP_KEYS,
      // the warm-up dataset replaces the experience buffer (no key of the RL stage's buffer carries over), and the
      // stage explores nothing (its tasksets belong to the RL stage)
      base: deepMerge(rawTop, { buffer: { explorer_input: null, trainer_input: { experience_buffer: null } } }),
      override: {
        mode: 'train',
        algorithm: { algorithm_type: 'sft', ...(isMapping(optimizer) ? { optimizer } : {}) },
        buffer: {
          train_batch_size: trainBatchSize,
          total_steps: steps,
          trainer_input: { ...withoutWarmup, experience_buffer: dataset, auxiliary_buffers: null },
        },
        synchronizer: { sync_method: null }, // derived for mode train (checkpoint)
      },
    },
    { stageName: 'rft', madeFrom: WARMUP_KEYS, base: rawTop, override: { buffer: { trainer_input: withoutWarmup } } },
  ];
}

/**
 * Validates a config tree (after overrides, ${ENV} and path resolution) and resolves it; returns the problems
 * instead of throwing. `config` is set only when there are none.
 */
export function validateConfig(tree: Tree, options: ValidateOptions = {}): { config?: Config; problems: ConfigProblem[] } {
  const problems: ConfigProblem[] = [];
  const input = parseWith(ConfigSchema, tree, problems);
  if (input === undefined) return { problems };
  const { stages: stageInputs, ...runInput } = input;
  const { sft_warmup_dataset: warmupDataset, sft_warmup_steps: warmupSteps } = runInput.buffer.trainer_input;
  const warmup = stageInputs.length === 0 && warmupDataset !== null && warmupSteps > 0;
  const top = resolveRun(runInput, { ...options, runnable: stageInputs.length === 0 && !warmup }, problems);

  const topProblems = new Set(problems.map((p) => `${p.path}\n${p.message}`));
  const rawStages = Array.isArray(tree.stages) ? (tree.stages as unknown[]) : [];
  const { stages: _stages, checkpoint_job_dir: _jobDir, ...rawTop } = tree;
  // the stages as written, or the two stages an SFT warm-up stands for
  const written = stageInputs.map((stageInput, i) => {
    const { stage_name: _name, ...override } = isMapping(rawStages[i]) ? (rawStages[i] as Tree) : {};
    return { stageName: stageInput.stage_name, override, madeFrom: null as string | null, base: rawTop };
  });
  const stageList = warmup ? sftWarmupStages(rawTop, top.buffer.train_batch_size, warmupSteps) : written;
  const stageNames = new Map<string, number>();
  const stages: StageConfig[] = [];
  stageList.forEach(({ stageName, override, madeFrom, base: stageBase }, i) => {
    const first = stageNames.get(stageName);
    if (first !== undefined) {
      problems.push({ path: `stages.${i}.stage_name`, message: `'${stageName}' is already the name of stages.${first}` });
    } else stageNames.set(stageName, i);

    const base = { ...stageBase };
    const topType = isMapping(rawTop.algorithm) ? (rawTop.algorithm.algorithm_type ?? 'ppo') : 'ppo';
    if (
      isMapping(override.algorithm) &&
      override.algorithm.algorithm_type !== undefined &&
      override.algorithm.algorithm_type !== topType
    ) {
      delete base.algorithm; // another algorithm: the top level's module settings do not apply
    }
    const merged = deepMerge(base, override);
    const stageProblems: ConfigProblem[] = [];
    const runStage = parseWith(RunSchema, merged, stageProblems);
    const resolved =
      runStage === undefined ? undefined : resolveRun(runStage, { ...options, runnable: true, stageName }, stageProblems);
    // a problem in a key the stage wrote is the stage's; one in an inherited key is the top level's, once
    for (const p of stageProblems) {
      const path = splitPath(p.path);
      const inStage = depthIn(override, path);
      const where = madeFrom === null ? `in stage '${stageName}'` : `in stage '${stageName}', made from ${madeFrom}`;
      const attributed: ConfigProblem =
        madeFrom === null && inStage > 0 && inStage >= depthIn(rawTop, path)
          ? { ...p, path: joinPath(['stages', i, ...path]) }
          : { ...p, message: `${p.message} (${where})` };
      if (attributed.path === p.path && topProblems.has(`${p.path}\n${p.message}`)) continue;
      problems.push(attributed);
    }
    if (resolved !== undefined) stages.push({ ...resolved, stage_name: stageName });
  });
  return problems.length > 0 ? { problems } : { config: { ...top, stages }, problems };
}
