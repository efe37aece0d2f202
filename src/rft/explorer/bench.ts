// Mode bench: the base model and every saved checkpoint of the job on the eval tasksets, one metrics line each
// (explorer.bench_on_latest_checkpoint: only the newest checkpoint, or the base model when there is none).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { listCheckpoints } from '../checkpoint.js';
import { createMonitors } from '../monitor/index.js';
import { startAuxiliaryModels } from '../auxiliary/index.js';
import { checkRewardModels } from '../reward/index.js';
import { EngineModelHandle } from '../workflow/index.js';
import {
  type EvaluationSettings,
  evaluateTasksets,
  formatEvalMetrics,
  type RunnerSettings,
  stageWorkflowRunner,
} from './evaluation.js';
import type { StageResult, StageSettings } from '../settings.js';
import type { ExplorerEngine } from '../sync/weight-channel.js';

/** What mode bench reads of the stage's settings. */
export type BenchSettings = Pick<
  StageSettings,
  'stageName' | 'jobDir' | 'modelPath' | 'project' | 'name' | 'bench' | 'monitorTypes' | 'monitorArgs' | 'auxiliaryModels'
> &
  RunnerSettings &
  EvaluationSettings;

/**
 * The models mode bench evaluates: step 0 is the base model (dir null). A checkpoint holding only a LoRA adapter
 * cannot be loaded by the engine: it is an error naming it (the stage's final_model holds the merged weights).
 */
export function benchTargets(jobDir: string, onLatestCheckpoint: boolean): { step: number; dir: string | null }[] {
  const checkpoints = listCheckpoints(jobDir).map((step) => {
    const folder = join(jobDir, 'checkpoints', `global_step_${step}`);
    const dir = join(folder, 'model');
    // (a LoRA checkpoint holds the adapter; a fully sharded one each rank's shards, trainer/fsdp-checkpoint.ts)
    const holds = existsSync(join(folder, 'sharded')) ? "a fully sharded policy's shards" : 'a LoRA adapter';
    if (!existsSync(dir))
      throw new Error(
        `mode bench: checkpoint ${folder} holds ${holds}, not a full model; bench a run whose checkpoints hold one, or ` +
          `evaluate the final weights in ${join(jobDir, 'final_model')} (eval_tasksets with model_path there)`,
      );
    return { step, dir };
  });
  const latest = checkpoints.at(-1);
  if (onLatestCheckpoint) return latest ? [latest] : [{ step: 0, dir: null }];
  return [{ step: 0, dir: null }, ...checkpoints];
}

export async function runBench(
  settings: BenchSettings,
  startEngine: (weightsDir: string) => Promise<ExplorerEngine>,
  log: (line: string) => void,
  signal?: AbortSignal,
): Promise<StageResult> {
  if (settings.evalTasksets.length === 0) throw new Error(`stage '${settings.stageName}': mode bench needs eval_tasksets`);
  const targets = benchTargets(settings.jobDir, settings.bench.onLatestCheckpoint);
  const monitors = createMonitors({
    jobDir: settings.jobDir,
    types: settings.monitorTypes,
    project: settings.project,
    name: `${settings.name}/bench`,
    args: settings.monitorArgs,
  });
  const engine = await startEngine(targets[0]?.dir ?? settings.modelPath).catch(async (error: unknown) => {
    await monitors.close();
    throw error;
  });
  try {
    const handle = new EngineModelHandle(engine, { modelVersion: 0 });
    const auxiliary = await startAuxiliaryModels(settings.auxiliaryModels);
    const runner = stageWorkflowRunner(settings, handle, log, auxiliary);
    try {
      checkRewardModels(settings.evalTasksets, auxiliary); // a judge that cannot fit its prompt: said now, not per call
      for (const [i, target] of targets.entries()) {
        if (target.dir && i > 0) await engine.syncWeightsFromDir(target.dir);
        handle.modelVersion = target.step;
        const { metrics } = await evaluateTasksets(runner, settings, target.step, signal);
        if (signal?.aborted) break;
        monitors.log(target.step, metrics);
        log(`[bench] ${target.step === 0 ? 'base model' : `checkpoint ${target.step}`}: ${formatEvalMetrics(metrics)}`);
      }
    } finally {
      await runner.close();
      await auxiliary.close();
    }
    return { finalModelDir: null, steps: targets.length };
  } finally {
    await monitors.close();
    await engine.close();
  }
}
