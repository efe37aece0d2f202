// What a run needs from the disk and the registries, checked before it starts: `trinity config check` and runConfig
// (src/rft/run/run.ts) call the same function, so a config that passes the check does not fail in these ways later.
//
//   folders      every stage's job folder (checkpoints, metrics) and an SQLite buffer's folder can be made and written
//                (a path in a kernel file system such as /proc is refused: making folders there never succeeds)
//   model        the folder a stage starts from has config.json; a critic folder too; a LoRA adapter has
//                adapter_config.json (./model.ts checkModelFolders)
//   tasksets     each one the stage reads loads: its file or split exists, and every row has the format keys
//                (src/rft/buffer/taskset.ts names file:line and the key)
//   names        every workflow and reward function the tasks name is registered or loads as a module path
//   states       an advantage function that groups steps by environment state (gigpo) trains on tasks whose
//                workflow writes it (./state-hashes.ts)
//   datasets     the files of a file experience buffer, SFT warm-up data and auxiliary buffers exist
//                (src/rft/buffer/config.ts checkDatasetFiles)
//   pipelines    Data-Juicer recipes map to operators here; the task pipeline's inputs exist (./pipeline-checks.ts)
//   token ids    rollout_args.stop_token_ids are below the model's vocab_size
//   monitors     a wandb or mlflow monitor has its credentials (monitor_args, else the environment)
//
// Only stages that will run are checked: a stage whose done.json exists is skipped by runConfig, and so here (the
// model a stage starts from is then the previous stage's final model, as runConfig passes it on).
import { accessSync, constants, readFileSync, realpathSync, statfsSync, statSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { isPostgresUrl } from '../../buffer/postgres.js';
import { checkDatasetFiles } from '../../buffer/config.js';
import { loadTaskset, type TasksetConfig as TasksetSettings } from '../../buffer/taskset.js';
import { monitorSettings } from '../../monitor/config.js';
import { missingMonitorSettings } from '../../monitor/monitor.js';
import { REWARD_FUNCTIONS } from '../../reward/registry.js';
import { WORKFLOWS } from '../../workflow/registry.js';
import { didYouMean } from '../../../util/index.js';
import { ConfigError, type ConfigProblem, type ReportProblem } from '../../config/errors.js';
import { resolveStages } from './load.js';
import type { Config, StageConfig, TasksetConfig } from './schema.js';
import { checkModelFolders, presence } from './model.js';
import { dataProcessorProblems } from './pipeline-checks.js';
import { stageSettings } from './stage-settings.js';
import { missingStateHashes, stateKeyOf, type TaskWorkflow, taskWorkflow } from './state-hashes.js';
import { clusterPlacement, type Machine, shardingPlacement, thisMachine } from './trinity-report.js';

export interface PreflightOptions {
  /** Where module-path workflows and reward functions resolve: the config file's folder (default: the working directory). */
  baseDir?: string;
  /** The environment the run's monitors read their credentials from (default: process.env). */
  env?: NodeJS.ProcessEnv;
  /** The GPUs and ranks cluster.* is checked against (default: this machine's). */
  machine?: Machine;
}

/** Every problem the run of `config` would meet before or in its first step (empty: none). Creates nothing. */
export async function preflightProblems(config: Config, options: PreflightOptions = {}): Promise<ConfigProblem[]> {
  const baseDir = options.baseDir ?? process.cwd();
  const problems: ConfigProblem[] = [];
  const seen = new Set<string>();
  const stages = resolveStages(config);
  const multiStage = config.stages.length > 0;
  // cluster.{node_num, gpu_per_node}: the placement they imply must exist here
  if (config.trinity_keys.cluster !== null) {
    const machine = options.machine ?? (await thisMachine(options.env));
    problems.push(...clusterPlacement(config.trinity_keys.cluster, stages, machine).problems);
  }
  // trainer.{param,optimizer}_offload: on a GPU (not implemented) a problem
  if (stages.some((s) => s.trainer.param_offload || s.trainer.optimizer_offload)) {
    const machine = options.machine ?? (await thisMachine(options.env));
    problems.push(...shardingPlacement(stages, machine).problems);
  }
  // as runConfig: with continue_from_checkpoint false and the job folder there, every stage starts afresh elsewhere
  // (a job folder that cannot be looked at, a symlink loop, is not "absent": the folder check below names it)
  const fresh = !config.continue_from_checkpoint && presence(config.checkpoint_job_dir) !== false;
  let modelPath: string | null = config.model.model_path;
  let first = true;
  for (const stage of stages) {
    const done = fresh ? null : finishedRecord(stage);
    if (done !== null) {
      if (done.finalModelDir !== null) modelPath = done.finalModelDir;
      continue;
    }
    const add = (path: string, message: string) => {
      const text = multiStage ? `${message} (in stage '${stage.stage_name}')` : message;
      const key = `${path}\n${message}`;
      if (seen.has(key)) return;
      seen.add(key);
      problems.push({ path, message: text });
    };
    // the first stage to run starts from the configured model or a finished stage's; later ones from its output
    await checkStage(stage, first ? modelPath : null, baseDir, add);
    // a wandb or mlflow monitor without its credentials: the stage's createMonitors would refuse to start
    const { monitorTypes, monitorArgs } = monitorSettings(stage.monitor);
    for (const missing of missingMonitorSettings(monitorTypes, monitorArgs, options.env ?? process.env)) {
      add('monitor.monitor_type', missing.message);
    }
    first = false;
  }
  return problems;
}

/** Throws a ConfigError listing what preflightProblems finds (runConfig calls it before any stage). */
export async function checkBeforeRun(config: Config, options: PreflightOptions = {}): Promise<void> {
  const problems = await preflightProblems(config, options);
  if (problems.length > 0) throw new ConfigError(problems);
}

type Report = ReportProblem;

function finishedRecord(stage: StageConfig): { finalModelDir: string | null } | null {
  const file = join(stage.checkpoint_job_dir, 'done.json');
  if (presence(file) !== true) return null; // a done.json that cannot be looked at: runConfig fails on it, naming why
  try {
    const record = JSON.parse(readFileSync(file, 'utf8')) as { finalModelDir?: unknown };
    return { finalModelDir: typeof record.finalModelDir === 'string' ? record.finalModelDir : null };
  } catch {
    return null; // runConfig fails on it with the parse error; the checks here do not hide that
  }
}

/**
 * A taskset's reward arguments, refused before the first task: its reward function's reward_fn_args (a built-in's
 * judge template, score range, judge endpoint) and an environment workflow's episode reward (workflow_args
 * reward_fn_type, named like any reward, and reward_fn_args: src/rft/workflow/env/episode-reward.ts).
 */
function checkRewardArgs(section: TasksetConfig, rewardName: string | null, path: string, names: NameChecks, add: Report): void {
  const check = (name: string, args: unknown, argsPath: string) => {
    try {
      REWARD_FUNCTIONS.checkArgs(name, (args ?? {}) as Record<string, unknown>);
    } catch (error) {
      add(argsPath, (error as Error).message);
    }
  };
  if (rewardName !== null) check(rewardName, section.reward_fn_args, `${path}.reward_fn_args`);
  const episodeReward = section.workflow_args?.reward_fn_type;
  if (typeof episodeReward === 'string') {
    names.reward(episodeReward, `${path}.workflow_args.reward_fn_type`, null);
    check(episodeReward, section.workflow_args?.reward_fn_args, `${path}.workflow_args.reward_fn_args`);
  }
}

async function checkStage(stage: StageConfig, modelPath: string | null, baseDir: string, add: Report): Promise<void> {
  const { mode } = stage;
  const remote = stage.explorer.rollout_model.engine_type === 'openai';

  // folders the stage writes
  const folderProblem = unwritableReason(stage.checkpoint_job_dir);
  if (folderProblem !== null) add('checkpoint_root_dir', `the job folder cannot be made: ${folderProblem}`);
  const experienceBuffer = stage.buffer.trainer_input.experience_buffer;
  const bufferPath = 'buffer.trainer_input.experience_buffer';
  // a PostgreSQL buffer (postgresql:// path) has no folder: its server is reached when the stage opens it
  if (experienceBuffer.storage_type === 'sql' && experienceBuffer.path !== null && !isPostgresUrl(experienceBuffer.path)) {
    const reason = unwritableReason(dirname(experienceBuffer.path));
    if (reason !== null) add(`${bufferPath}.path`, `the SQLite buffer's folder cannot be made: ${reason}`);
  }

  // models: an external server in modes explore and bench needs no local folder (it only names the model)
  const policyPath = modelPath !== null && !(remote && (mode === 'explore' || mode === 'bench')) ? modelPath : null;
  const vocabSize = checkModelFolders(stage.model, policyPath, add);

  // tasksets, and the names their tasks use
  const settings = stageSettings(stage, modelPath ?? stage.model.model_path, baseDir);
  const explores = mode === 'both' || mode === 'explore';
  const evaluates = explores || mode === 'bench';
  const input = stage.buffer.explorer_input;
  const trainPath = (i: number) =>
    input.tasksets.length === 1 ? 'buffer.explorer_input.taskset' : `buffer.explorer_input.tasksets.${i}`;
  // curated: a training taskset the task pipeline writes before the stage explores (its rows are checked then)
  const sets: { section: TasksetConfig; settings: TasksetSettings; path: string; curated?: boolean; trains?: boolean }[] = [];
  if (explores) {
    settings.tasksets.forEach(({ taskset }, i) => {
      const curated = settings.taskPipeline !== null;
      sets.push({ section: input.tasksets[i] as TasksetConfig, settings: taskset, path: trainPath(i), curated, trains: true });
    });
  }
  // gigpo: the training tasks' workflows must write the states it groups steps by (./state-hashes.ts)
  const stateKey = explores ? stateKeyOf(stage.algorithm) : null;
  if (evaluates) {
    settings.evalTasksets.forEach((taskset, i) => {
      const path = `buffer.explorer_input.eval_tasksets.${i}`;
      sets.push({ section: input.eval_tasksets[i] as TasksetConfig, settings: taskset, path });
    });
  }
  const names = new NameChecks(baseDir, add);
  const defaultWorkflow = settings.explorer.defaultWorkflow;
  if (sets.length > 0) names.workflow(defaultWorkflow, 'buffer.explorer_input.default_workflow_type', null);
  const evalWorkflow = input.default_eval_workflow_type;
  if (evalWorkflow !== null && evaluates) names.workflow(evalWorkflow, 'buffer.explorer_input.default_eval_workflow_type', null);
  if (input.default_reward_fn_type !== null && sets.length > 0) {
    names.reward(input.default_reward_fn_type, 'buffer.explorer_input.default_reward_fn_type', null);
  }
  for (const { section, settings: tasksetSettings, path, curated, trains } of sets) {
    const workflowOf = tasksetSettings.defaultWorkflowType ?? defaultWorkflow;
    const checkStates = (tasks: Iterable<TaskWorkflow>) => {
      const problem = trains && stateKey !== null ? missingStateHashes(stateKey, tasks) : null;
      if (problem !== null) add(`${path}.workflow_args`, problem);
    };
    // the taskset's own defaults, where they are not the explorer_input's (reported there already)
    const inherited = [input.default_workflow_type, ...(trains ? [] : [evalWorkflow])];
    if (section.default_workflow_type !== null && !inherited.includes(section.default_workflow_type)) {
      names.workflow(section.default_workflow_type, `${path}.default_workflow_type`, null);
    }
    if (section.default_reward_fn_type !== null && section.default_reward_fn_type !== input.default_reward_fn_type) {
      names.reward(section.default_reward_fn_type, `${path}.default_reward_fn_type`, null);
    }
    checkRewardArgs(section, section.default_reward_fn_type ?? input.default_reward_fn_type, path, names, add);
    if (vocabSize !== null) {
      for (const id of section.rollout_args.stop_token_ids ?? []) {
        if (id >= vocabSize) {
          add(
            `${path}.rollout_args.stop_token_ids`,
            `token id ${id} is outside the model's vocabulary (vocab_size ${vocabSize})`,
          );
        }
      }
    }
    if (curated) {
      checkStates([{ workflow: workflowOf, args: section.workflow_args, row: null }]);
      names.workflowArgs([workflowOf], section.workflow_args, `${path}.workflow_args`);
      continue;
    }
    let tasks: Awaited<ReturnType<typeof loadTaskset>>['tasks'];
    try {
      ({ tasks } = await loadTaskset(tasksetSettings));
    } catch (error) {
      add(`${path}.path`, (error as Error).message);
      continue;
    }
    if (tasks.length === 0) add(`${path}.path`, `taskset '${section.name}' has no rows (${section.path})`);
    // names a row gives itself (format.workflow_key / reward_fn_key): the first row with each
    const format = section.format;
    const workflows = new Set([workflowOf]);
    for (const task of tasks) {
      if (task.workflow !== undefined) workflows.add(task.workflow);
      const row = `taskset '${section.name}' row ${task.index + 1} (task '${task.id}')`;
      if (task.workflow !== undefined && task.workflow !== tasksetSettings.defaultWorkflowType) {
        names.workflow(task.workflow, `${path}.format.workflow_key`, `${row}, key '${format.workflow_key}'`);
      }
      if (task.rewardFn !== undefined && task.rewardFn !== tasksetSettings.defaultRewardFnType) {
        names.reward(task.rewardFn, `${path}.format.reward_fn_key`, `${row}, key '${format.reward_fn_key}'`);
      }
    }
    names.workflowArgs([...workflows], section.workflow_args, `${path}.workflow_args`);
    checkStates(tasks.map((task) => taskWorkflow(task, workflowOf, `taskset '${section.name}' row ${task.index + 1}`)));
  }
  await names.settled();

  checkDatasetFiles(stage.buffer, mode, add);
  dataProcessorProblems(stage, settings, explores, add);
}

/** Resolves each workflow and reward function name once (module paths are imported); reports the ones that fail. */
class NameChecks {
  readonly #pending: Promise<void>[] = [];
  readonly #asked = new Set<string>();

  constructor(
    readonly baseDir: string,
    readonly add: Report,
  ) {}

  /** `row`: the row that names it (null: the key at `path` does). */
  workflow(name: string, path: string, row: string | null): void {
    this.#check('workflow', name, path, row, () => WORKFLOWS.resolve(name, this.baseDir));
  }

  /**
   * Refuses the keys of `args` (a taskset's workflow_args, at `path`) that none of `workflows` (the workflows its
   * tasks run) reads, where each declares the keys it reads (WorkflowSpec.workflowArgs; a built-in does), and what
   * their checkArgs refuse, with no arguments too (defaults may need a setting: a web search service's URL).
   */
  workflowArgs(workflows: readonly string[], args: Readonly<Record<string, unknown>>, path: string): void {
    const declared = Promise.all(workflows.map((name) => WORKFLOWS.resolve(name, this.baseDir)));
    const check = declared.then(
      (specs) => {
        if (specs.some((spec) => spec.workflowArgs === undefined)) return;
        const known = [...new Set(specs.flatMap((spec) => spec.workflowArgs ?? []))];
        const reads = known.length > 0 ? `it reads ${known.join(', ')}` : 'it reads none';
        const named = workflows.map((name) => `'${name}'`).join(', ');
        for (const key of Object.keys(args).filter((k) => !known.includes(k))) {
          this.add(`${path}.${key}`, `unknown argument '${key}' of workflow ${named}${didYouMean(key, known)}; ${reads}`);
        }
        for (const spec of specs) {
          try {
            spec.checkArgs?.(args);
          } catch (error) {
            this.add(path, (error as Error).message);
          }
        }
      },
      () => undefined, // a workflow that does not resolve is reported by workflow()
    );
    this.#pending.push(check);
  }

  reward(name: string, path: string, row: string | null): void {
    this.#check('reward', name, path, row, () => REWARD_FUNCTIONS.resolve(name, this.baseDir));
  }

  #check(kind: string, name: string, path: string, row: string | null, resolveName: () => Promise<unknown>): void {
    const key = `${kind}\0${name}`;
    if (this.#asked.has(key)) return;
    this.#asked.add(key);
    this.#pending.push(
      resolveName().then(
        () => undefined,
        (error: unknown) => {
          const message = error instanceof Error ? error.message : String(error);
          this.add(path, row === null ? message : `${message} (named by ${row})`);
        },
      ),
    );
  }

  async settled(): Promise<void> {
    await Promise.all(this.#pending);
  }
}

// statfs f_type of the kernel's virtual file systems, where mkdir never makes a usable folder (Linux magic.h)
const VIRTUAL_FILE_SYSTEMS: ReadonlyMap<number, string> = new Map([
  [0x9fa0, 'proc'],
  [0x62656572, 'sysfs'],
  [0x27e0eb, 'cgroup'],
  [0x63677270, 'cgroup2'],
  [0x64626720, 'debugfs'],
  [0x73636673, 'securityfs'],
  [0x74726163, 'tracefs'],
  [0xcafe4a11, 'bpf'],
  [0x1cd1, 'devpts'],
]);
/** Folders of devices and kernel state: a run's files never belong there (/dev/shm, a memory file system, does). */
const SYSTEM_ROOTS = ['/proc', '/sys', '/dev'];
const SYSTEM_EXCEPTIONS = ['/dev/shm'];

const under = (path: string, root: string): boolean => path === root || path.startsWith(`${root}${sep}`);

/**
 * Why the folder `dir` cannot be made (or written, when it exists), or null when it can. Creates nothing: walks up
 * to the deepest part of the path that exists, which must be a writable folder outside the kernel's file systems.
 */
export function unwritableReason(dir: string): string | null {
  let existing = resolve(dir);
  for (;;) {
    try {
      statSync(existing);
      break;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') return `${existing}: ${(error as Error).message}`;
      const parent = dirname(existing);
      if (parent === existing) return `no part of ${dir} exists`;
      existing = parent;
    }
  }
  if (!statSync(existing).isDirectory()) return `${existing} is a file, not a folder`;
  let real: string;
  try {
    real = realpathSync(existing);
  } catch (error) {
    return `${existing}: ${(error as Error).message}`;
  }
  const root = SYSTEM_ROOTS.find((r) => under(real, r) && !SYSTEM_EXCEPTIONS.some((e) => under(real, e)));
  if (root !== undefined) return `${dir} is under ${root}, a system folder (choose a folder for data)`;
  try {
    const fsType = VIRTUAL_FILE_SYSTEMS.get(Number(statfsSync(real).type));
    if (fsType !== undefined) return `${dir} is on a ${fsType} file system (kernel state, not storage)`;
  } catch {
    // statfs is not available everywhere; the checks above and below still hold
  }
  try {
    accessSync(real, constants.W_OK);
  } catch {
    return `${existing} is not writable`;
  }
  return null;
}
