// `trinity quickstart`: what it runs (examples/quickstart/config.yaml with the seed's model and task order, and the
// user's --set overrides) and where that run writes (the job folder its summary and report are read from).
//
// Runs go to runs/ of the repository, or, when the command runs from an installed copy (the package inside a
// node_modules folder, which npm may replace or make read-only), to runs/ of the working directory.
//
// --arch qwen3_moe runs the same task on a qwen3_moe of the same size and active MLP width: every MLP a
// sparse block of 8 experts, top 2, each of half the dense MLP's width (runs/quickstart/model-moe, job addition-moe);
// `--set algorithm.enable_router_replay=true` then trains through the experts the rollouts chose (README, router
// replay), and the runs' rollout_corr/* metrics show the trainer's and the engine's log-prob gap with and without it.
import { join, sep } from 'node:path';
import type { ModelInitOptions } from '../model/init.js';
import { loadConfig } from '../rft/run/config/index.js';

/** The model architectures the quickstart makes. */
export const QUICKSTART_ARCHITECTURES = ['qwen2', 'qwen3_moe'] as const;
export type QuickstartArchitecture = (typeof QUICKSTART_ARCHITECTURES)[number];

/**
 * The quickstart model (0.75M parameters as qwen2): hidden 128, 4 layers, 4 heads / 2 kv, MLP 352 (8/3 hidden); the
 * benchmarks run the same shape, with the positions they need.
 */
export const QUICKSTART_MODEL: ModelInitOptions = {
  hiddenSize: 128,
  numLayers: 4,
  numHeads: 4,
  numKeyValueHeads: 2,
  maxPositionEmbeddings: 64,
};

/** qwen3_moe: 8 experts of width 176, top 2 (the dense MLP's 352 active per token). */
const MOE_EXPERTS: ModelInitOptions = { numExperts: 8, numExpertsPerTok: 2, moeIntermediateSize: 176 };

export interface QuickstartPlan {
  /** examples/quickstart/config.yaml under the repository root. */
  configFile: string;
  /** The seed's model folder (runs/quickstart/model, or model-seedN), created by the command when missing. */
  modelDir: string;
  /** `--set` overrides for `trinity run`: the seed's model, job name and task order, then the user's own. */
  overrides: string[];
  /** How the command makes the model when modelDir has none (`trinity model init` options; seeded by --seed). */
  modelInit: ModelInitOptions;
}

/** Where the quickstart's runs go: `root`/runs, or `cwd`/runs when `root` is an installed copy (under node_modules). */
export function quickstartRunsDir(root: string, cwd: string): string {
  const installed = root.split(sep).includes('node_modules');
  return join(installed ? cwd : root, 'runs');
}

/**
 * The run `trinity quickstart --seed N [--threads T] [--arch A] [--set k=v]...` makes from the package at `root`,
 * writing under `runsDir` (quickstartRunsDir); the user's overrides come last and win.
 */
export function quickstartPlan(
  root: string,
  runsDir: string,
  seed: number,
  threads: number | null,
  sets: readonly string[],
  architecture: QuickstartArchitecture = 'qwen2',
): QuickstartPlan {
  const moe = architecture === 'qwen3_moe' ? '-moe' : '';
  const jobName = `addition${moe}${seed === 0 ? '' : `-seed${seed}`}${threads === null ? '' : `-threads${threads}`}`;
  const modelDir = join(runsDir, 'quickstart', `model${moe}${seed === 0 ? '' : `-seed${seed}`}`);
  return {
    modelInit: { ...QUICKSTART_MODEL, architecture, ...(moe === '' ? {} : MOE_EXPERTS), seed },
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
