// `trinity quickstart`: what it runs (examples/quickstart/config.yaml with the seed's model and task order, and the
// user's --set overrides) and where that run writes (the job folder its summary and report are read from).
import { join } from 'node:path';
import { loadConfig } from '../rft/run/config/index.js';

export interface QuickstartPlan {
  /** examples/quickstart/config.yaml under the repository root. */
  configFile: string;
  /** The seed's model folder (runs/quickstart/model, or model-seedN), created by the command when missing. */
  modelDir: string;
  /** `--set` overrides for `trinity run`: the seed's model, job name and task order, then the user's own. */
  overrides: string[];
}

/** The run `trinity quickstart --seed N [--threads T] [--set k=v]...` makes; the user's overrides come last and win. */
export function quickstartPlan(root: string, seed: number, threads: number | null, sets: readonly string[]): QuickstartPlan {
  const jobName = `addition${seed === 0 ? '' : `-seed${seed}`}${threads === null ? '' : `-threads${threads}`}`;
  const modelDir = join(root, 'runs', 'quickstart', seed === 0 ? 'model' : `model-seed${seed}`);
  return {
    configFile: join(root, 'examples', 'quickstart', 'config.yaml'),
    modelDir,
    overrides: [
      `model.model_path=${modelDir}`,
      ...(jobName === 'addition' ? [] : [`name=${jobName}`]),
      ...(seed === 0 ? [] : [`buffer.explorer_input.taskset.task_selector.seed=${seed}`]),
      ...sets,
    ],
  };
}

/**
 * The job folder the plan's run writes: checkpoint_root_dir/project/name as the config resolves them with every
 * override (a `--set name=...` or `checkpoint_root_dir=...` moves it; the summary and the report must follow).
 */
export function quickstartJobDir(plan: QuickstartPlan): string {
  return loadConfig(plan.configFile, { overrides: plan.overrides }).checkpoint_job_dir;
}
