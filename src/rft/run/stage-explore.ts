// Mode explore: one explorer process of several sharing a buffer (SQLite or PostgreSQL), each with its own
// explorer.name. Explore steps are claimed in the buffer's database (../explorer/share.ts, ../explorer/task-claims.ts):
// a step's rows and its finished marker go into the buffer in one transaction, so a restarted explorer goes on with
// the steps nobody finished. Weights come from the trainer process through a ProcessWeightChannel (the buffer's
// database for PostgreSQL, else the job folder). An explorer process whose every rollout fails fails as a trainer
// with nothing to train on does (../trainer/empty-steps.ts).
import { join } from 'node:path';
import type { StageResult } from '../settings.js';
import { ClaimedExploreSteps, keepFinishedSteps, stampExperienceIds } from '../explorer/share.js';
import { runExplorerLoop } from '../explorer/loop.js';
import { followPublishedWeights } from '../sync/weight-channel.js';
import { openTaskClaims } from '../explorer/task-claims.js';
import { EmptyStepGuard } from '../trainer/empty-steps.js';
import { createScheduler } from './stage-plan.js';
import { sharedBufferPath, type StageParts } from './stage-parts.js';

export async function runExploreStage(parts: StageParts): Promise<StageResult> {
  const { settings } = parts;
  const scheduler = await parts.scheduler();
  const totalSteps = parts.totalSteps(scheduler.totalSteps);
  const buffer = await parts.sharedBuffer('writer');
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
  parts.onClose(() => claims.close());
  const finished = new Set(await claims.completedBy());
  for (const file of ['metrics.jsonl', 'eval_samples.jsonl']) keepFinishedSteps(join(parts.metricsDir, file), finished);
  if (finished.size > 0)
    parts.log(
      `[${settings.stageName}] explorer '${settings.explorer.name}' resuming: ${finished.size} explore step(s) of ` +
        `${totalSteps} finished by it (claims in ${claims.location})`,
    );
  const { monitors, progress } = parts.monitoring(totalSteps);
  const steps = new ClaimedExploreSteps({
    claims,
    buffer,
    stage: settings.stageName,
    explorer: settings.explorer.name,
    newScheduler: () => createScheduler(settings),
    timeoutMs: settings.sync.timeoutMs,
    signal: parts.signal,
    log: (line) => progress.log(line),
  });
  // the newest weights the trainer process published, else the checkpoint's full model, else the base model
  const channel = await parts.processWeightChannel(buffer);
  const pointer = await channel.latest();
  const start = pointer
    ? { dir: pointer.dir, version: pointer.version }
    : parts.checkpoint?.modelDir
      ? { dir: parts.checkpoint.modelDir, version: parts.checkpoint.step }
      : { dir: settings.modelPath, version: 0 };
  const explorer = await parts.explorer(start.dir, progress, start.version, finished);
  // fully_async: the receiver follows each published version while the steps run, until the loop ends
  const exploring = new AbortController();
  const receiver = channel.receiver({
    engine: explorer.engine,
    startVersion: start.version,
    timeoutMs: settings.sync.timeoutMs,
    signal: AbortSignal.any([parts.signal, exploring.signal]),
    onVersion: (v) => {
      explorer.handle.modelVersion = v;
      // mid-step: said once per version, when the calls made from now on run on it
      if (explorer.swapGate) progress.log(`[${settings.stageName}] weights version ${v} swapped in (sync_style fully_async)`);
    },
    swapGate: explorer.swapGate,
  });
  const following = explorer.swapGate
    ? followPublishedWeights(receiver, exploring.signal).catch((error: unknown) => parts.fail(error))
    : null;
  // an explorer process whose rollouts all fail fails too (its trainer process only sees that nothing comes)
  let lastFailures: readonly string[] = [];
  const emptySteps = new EmptyStepGuard(settings.stageName, { unit: 'explore', lastFailures: () => lastFailures });
  const explored = runExplorerLoop({
    ...parts.explorerLoopBase(scheduler, explorer, buffer, receiver, totalSteps),
    steps,
    // rows and the step's finished marker in one transaction, then the claim is done
    write: async ({ step }, experiences) => {
      await buffer.write(stampExperienceIds(settings.stageName, step, experiences), { meta: steps.writeMeta(step) });
      await claims.complete(step);
      emptySteps.step(step, experiences.length, 'every rollout of the explore step failed, or was rejected or filtered out');
    },
    // readers stop waiting only once every explorer's steps are in
    finish: async () => {
      if (steps.allDone) await buffer.finishWriting();
    },
    onStep: ({ step, metrics, failures }) => {
      if (failures.length > 0) lastFailures = failures;
      monitors.log(step, metrics);
      progress.update(step, { reward: metrics['rollout/reward/mean'] ?? Number.NaN });
    },
    onEval: (step, metrics) => monitors.log(step, metrics),
  });
  try {
    await explored;
  } finally {
    exploring.abort();
    await following;
  }
  if (parts.failed) throw parts.failedReason;
  if (!parts.signal.aborted) emptySteps.finished();
  progress.done();
  return { finalModelDir: null, steps: totalSteps };
}
