// `trinity quickstart`: what it runs (examples/quickstart/config.yaml with the seed's model and task order, and the
// user's --set overrides) and where that run writes (the job folder its summary and report are read from).
//
// Runs go to runs/ of the repository, or, when the command runs from an installed copy (the package inside a
// node_modules folder, which npm may replace or make read-only), to runs/ of the working directory.
import { join, sep } from 'node:path';
import { loadConfig } from '../rft/run/config/index.js';

export interface QuickstartPlan {
  /** examples/quickstart/config.yaml under the repository root. */
  configFile: string;
  /** The seed's model folder (runs/quickstart/model, or model-seedN), created by the command when missing. */
  modelDir: string;
  /** `--set` overrides for `trinity run`: the seed's model, job name and task order, then the user's own. */
  overrides: string[];
}

/** Where the quickstart's runs go: `root`/runs, or `cwd`/runs when `root` is an installed copy (under node_modules). */
export function quickstartRunsDir(root: string, cwd: string): string {
  const installed = root.split(sep).includes('node_modules');
  return join(installed ? cwd : root, 'runs');
}

/**
 * The run `trinity quickstart --seed N [--threads T] [--set k=v]...` makes from the package at `root`, writing under
 * `runsDir` (quickstartRunsDir); the user's overrides come last and win.
 */
export function quickstartPlan(
  root: string,
  runsDir: string,
  seed: number,
  threads: number | null,
  sets: readonly string[],
): QuickstartPlan {
  const jobName = `addition${seed === 0 ? '' : `-seed${seed}`}${threads === null ? '' : `-threads${threads}`}`;
  const modelDir = join(runsDir, 'quickstart', seed === 0 ? 'model' : `model-seed${seed}`);
  return {
    configFile: join(root, 'examples', 'quickstart', 'config.yaml'),
    modelDir,
    overrides: [
      // the config's checkpoint_root_dir is the repository's runs/ (../../runs from the config)
      ...(runsDir === join(root, 'runs') ? [] : [`checkpoint_root_dir=${runsDir}`]),
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
