// One stage of a run: its mode, decided here once, picks the runner that assembles the stage from its parts
// (./stage-parts.ts): the explorer loop (../explorer/loop.ts), the trainer loop (../trainer/loop.ts), the buffer
// between them, the weight channel (../sync/) and bench (../explorer/bench.ts).
//
//   mode both     explorer loop (rollouts on the engine's worker thread) ─▶ buffer ─▶ trainer loop (trainer worker)
//                 weights flow back through a LocalWeightChannel (memory: by reference; checkpoint: a folder)
//   mode explore  explorer loop only; experiences to a shared buffer (SQLite or PostgreSQL), explore steps claimed
//                 there among the explorer processes (explorer.name); weights from the trainer process through a
//                 ProcessWeightChannel (the buffer's database for PostgreSQL, else the job folder)
//   mode train    trainer loop only; experiences from the shared SQLite buffer (or a dataset for SFT/DPO)
//   mode bench    the base model and saved checkpoints on the eval tasksets
//   mode serve    not a stage of this loop: src/serve/serve-stage.ts runs it
//
// Resume: the trainer restarts from the latest checkpoint (model, optimizer, critic, KL controller, step); the
// explorer from the task scheduler state saved with it (as it was after exploring that step); the sample strategy
// and the auxiliary datasets from their saved positions; metrics.jsonl keeps only steps up to it. Steps after the
// checkpoint are explored and trained again: none is lost, none counted twice. An explorer process (mode explore)
// goes on with the steps nobody finished instead (../explorer/share.ts): a step's rows and its finished marker go
// into the shared buffer in one transaction, and the trainer process reads on from its own checkpoint's cursor.
import { mkdirSync } from 'node:fs';
import { loadAlgorithmPlugins } from '../algorithm/plugins.js';
import { resolveAlgorithm } from '../algorithm/presets.js';
import type { StageHooks, StageResult, StageSettings } from '../settings.js';
import { runBench } from '../explorer/bench.js';
import { startExplorerEngine } from '../explorer/engines.js';
import { runBothStage } from './stage-both.js';
import { runExploreStage } from './stage-explore.js';
import { StageParts } from './stage-parts.js';
import { runTrainStage } from './stage-train.js';
import { withTaskPipeline } from './task-pipeline-stage.js';

export { requiredVersion } from '../explorer/loop.js';
export { readSyncPointer } from '../sync/sync-folder.js';

export async function runStage(settings: StageSettings, hooks: StageHooks = {}): Promise<StageResult> {
  const log = hooks.log ?? ((line: string) => console.log(line));
  mkdirSync(settings.jobDir, { recursive: true });
  await loadAlgorithmPlugins(settings.algorithm, settings.pluginBaseDir);
  const algorithm = resolveAlgorithm(settings.algorithm);
  if (settings.mode === 'bench')
    return runBench(settings, async (dir) => (await startExplorerEngine(settings, dir)).engine, log, hooks.signal);
  if (settings.mode === 'serve') throw new Error(`stage '${settings.stageName}': mode serve runs in src/serve (runServeStage)`);
  const prepared = settings.taskPipeline ? await withTaskPipeline(settings, settings.taskPipeline, hooks, log) : settings;
  const runner = { both: runBothStage, explore: runExploreStage, train: runTrainStage }[settings.mode];
  const parts = new StageParts(prepared, algorithm, hooks, log, { explorerProcess: settings.mode === 'explore' });
  return parts.run(runner);
}
