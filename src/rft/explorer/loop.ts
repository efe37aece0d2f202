// The explorer loop: per explore step, wait for the weights the sync style requires, run the step's tasks through the
// workflows, pass the experiences through the experience pipeline (data_processor.experience_pipeline), feed rewards
// back to the task selectors, write the experiences to the buffer; evaluate every eval_interval steps.
//
// Synchronisation (sync_style fixed): explore step e (1-based) may start once the explorer holds weights of version
//   required(e) = max(0, floor((e - 1 - sync_offset) / sync_interval) * sync_interval)
// so offset 0, interval 1 is strictly on-policy and offset 1 lets the explorer run one step ahead. trainer_driven
// never waits (it explores with what the trainer published last); explorer_driven asks the trainer for its newest
// weights every sync_interval steps (after the first sync_offset) and waits for the answer. fully_async never waits
// either, and its weights change in the middle of a step: each version the trainer publishes is swapped in between
// two model calls (../workflow/weight-swap-gate.ts), so one step's experiences can carry several model versions.
import { counterIncrease } from '../../engine/index.js';
import type { ExperienceBuffer, TasksetScheduler } from '../buffer/index.js';
import { type Experience, type ModelBounds, modelBoundsProblem } from '../experience.js';
import type { ExperiencePipeline } from '../data/experience-pipeline/index.js';
import type { Task } from '../task.js';
import type { WorkflowRunner } from '../workflow/index.js';
import { type EvaluationSettings, evaluateTasksets, formatEvalMetrics, writeEvalSamples } from './evaluation.js';
import type { StageSettings } from '../settings.js';
import type { WeightReceiver } from '../sync/weight-channel.js';

/** What the explorer loop reads of the stage's settings (its evaluations read the eval tasksets too). */
export type ExplorerLoopSettings = Pick<StageSettings, 'stageName' | 'evalInterval' | 'evalOnStartup' | 'sync'> &
  EvaluationSettings;

/** The weights version the explorer needs before explore step `step` (sync_style fixed; see the header). */
export function requiredVersion(step: number, syncInterval: number, syncOffset: number): number {
  return Math.max(0, Math.floor((step - 1 - syncOffset) / syncInterval) * syncInterval);
}

/**
 * The weights version explore step `step` blocks on until the trainer publishes it: sync_style fixed's
 * requiredVersion; null for the styles that never wait for a version (trainer_driven waits for the first weights
 * only, explorer_driven's requests are answered by a trainer that is waiting, fully_async never waits).
 */
export function awaitedVersion(sync: StageSettings['sync'], step: number): number | null {
  return sync.style === 'fixed' ? requiredVersion(step, sync.interval, sync.offset) : null;
}

export interface ExploredStep {
  step: number;
  /** rollout/* metrics of the step, with the weights version that explored it. */
  metrics: Record<string, number>;
  /** The task scheduler's state after this step (a checkpoint at this step resumes the explorer from it). */
  schedulerState: ReturnType<TasksetScheduler['state']>;
  /**
   * Why rollouts of the step gave nothing to train on: the last error of each failed run, each rejected experience,
   * the pipeline dropping all (a stage that cannot fill its train steps names them: ../trainer/empty-steps.ts).
   */
  failures: string[];
}

/** Failures an explored step keeps (the first ones: enough to name the cause, not a log of the step). */
const FAILURES_KEPT = 3;

/**
 * Which explore steps this explorer runs, and their tasks. Default: steps startStep + 1 .. totalSteps from the task
 * scheduler, in order; mode explore: the steps it claims among several explorer processes (./share.ts).
 */
export interface ExploreStepSource {
  /** The next step to explore, or null when this explorer has none left. */
  next(): Promise<{ step: number; tasks: Task[] } | null>;
}

export interface ExplorerLoopParts {
  settings: ExplorerLoopSettings;
  scheduler: TasksetScheduler;
  runner: WorkflowRunner;
  buffer: ExperienceBuffer;
  weights: WeightReceiver;
  repeatTimes: number;
  /**
   * data_processor.experience_pipeline: each step's experiences go through it before the buffer; its metrics join the
   * step's; with an operator that feeds the selectors (pass_rate_calculator) they learn from what it saw.
   */
  pipeline?: ExperiencePipeline | null;
  /** What the trained model can take: rollouts beyond it are rejected (counted, the first reason logged). */
  bounds: ModelBounds;
  startStep: number;
  totalSteps: number;
  /** The steps to explore (default: the scheduler's, after startStep; see ExploreStepSource). */
  steps?: ExploreStepSource;
  /** When the loop ends, however it ends (default: buffer.finishWriting(), telling readers no more comes). */
  finish?: () => Promise<void>;
  /** Where eval_samples.jsonl goes (the metrics folder). */
  metricsDir: string;
  /** Called after each explore step (before its experiences are written). */
  onStep: (explored: ExploredStep) => void;
  /** Called once explore step `step`'s experiences (`written` of them) are all in the buffer. */
  onWritten?: (step: number, written: number) => void;
  /**
   * Called with the explore step about to wait for its weights (waitForWeights below), and with null once they are
   * there: mode both tells from it that the explorer waits on the train step the trainer is filling.
   */
  onWaitingForWeights?: (step: number | null) => void;
  /** Writes a step's experiences (default: buffer.write); mode explore writes its position with them. */
  write?: (explored: ExploredStep, experiences: Experience[]) => Promise<unknown>;
  /**
   * The embedded engine's cumulative counters (engineCounters in ./engines.ts): each step's metrics get what they
   * added during its rollouts, as rollout/prefix_cache/hits, misses, evictions, hit_rate, rollout/engine/prefill_tokens
   * and preemptions. Absent: none.
   */
  engineCounters?: (() => Promise<Record<string, number>>) | null;
  /** Eval metrics of step `step`. */
  onEval: (step: number, metrics: Record<string, number>) => void;
  log: (line: string) => void;
  signal?: AbortSignal;
}

export async function runExplorerLoop(parts: ExplorerLoopParts): Promise<void> {
  const { settings, scheduler, runner, buffer, weights } = parts;
  const evaluate = async (step: number) => {
    const evaluation = await weights.withWeights(() => evaluateTasksets(runner, settings, step, parts.signal));
    if (parts.signal?.aborted) return; // cut short: not a result
    parts.onEval(step, evaluation.metrics);
    writeEvalSamples(parts.metricsDir, step, evaluation);
    parts.log(`[${settings.stageName}] eval at step ${step}: ${formatEvalMetrics(evaluation.metrics)}`);
  };
  const evalDue = (step: number) =>
    settings.evalTasksets.length > 0 && settings.evalInterval > 0 && step % settings.evalInterval === 0;
  let sequential = parts.startStep;
  try {
    for (;;) {
      if (parts.signal?.aborted) break;
      const claimed = parts.steps ? await parts.steps.next() : null;
      if (parts.steps && claimed === null) break;
      const step = claimed?.step ?? ++sequential;
      if (step > parts.totalSteps) break;
      try {
        parts.onWaitingForWeights?.(step);
        await waitForWeights(parts, step);
      } catch (error) {
        if (parts.signal?.aborted) break; // stopped (Ctrl-C) while waiting: not a failure
        throw error;
      } finally {
        parts.onWaitingForWeights?.(null);
      }
      const batch = claimed ?? scheduler.nextBatch();
      if (batch === null) break;
      // eval at startup (step 0) comes with the first step, in whichever explorer explores it
      if (step === 1 && settings.evalOnStartup && settings.evalTasksets.length) await evaluate(0);
      const version = weights.version;
      const countersBefore = (await parts.engineCounters?.()) ?? null;
      const rejected: string[] = [];
      const result = await weights.withWeights(() =>
        runner.runStep(batch.tasks, {
          step,
          repeatTimes: parts.repeatTimes,
          ...(parts.signal ? { signal: parts.signal } : {}),
        }),
      );
      // stopped during the step: its runs were cut short, so it is dropped whole (no feedback, nothing written)
      // and a resumed run explores it again
      if (parts.signal?.aborted) break;
      const engineIncrease = countersBefore && counterIncrease(countersBefore, (await parts.engineCounters?.()) ?? {});
      const accepted = result.experiences.filter((e) => {
        const problem = modelBoundsProblem(e, parts.bounds);
        if (problem) rejected.push(`${e.info.taskId ?? e.eid}: ${problem}`);
        return problem === null;
      });
      const processed = parts.pipeline
        ? await parts.pipeline.process(accepted, { step, repeatTimes: parts.repeatTimes })
        : { experiences: accepted, metrics: {}, taskFeedback: null };
      // the step's rewards by task, to the selectors once per step (BOTS' estimator updates from the whole step)
      const feedback = new Map<string, readonly number[]>();
      if (parts.pipeline?.feedsSelectors) {
        // only the step's tasks: a workflow's own groups (math_trainable_ruler_workflow's `<id>-ruler`) are no task
        const stepTasks = new Set(batch.tasks.map((t) => t.id));
        for (const [taskId, rewards] of processed.taskFeedback ?? [])
          if (rewards.length && stepTasks.has(taskId)) feedback.set(taskId, rewards);
      } else {
        for (const task of batch.tasks) {
          const rewards = result.experiences.filter((e) => e.info.taskId === task.id).map((e) => e.reward ?? 0);
          if (rewards.length) feedback.set(task.id, rewards);
        }
      }
      if (feedback.size > 0) scheduler.feedback(feedback);
      if (rejected.length) {
        parts.log(
          `[${settings.stageName}] explore step ${step}: ${rejected.length} experience(s) rejected (the model cannot ` +
            `train on them), e.g. task ${rejected[0]}`,
        );
      }
      const failures = [
        ...result.statuses.filter((s) => !s.ok).map((s) => `task ${s.taskId} run(s) ${s.runIds.join(',')}: ${s.error}`),
        ...rejected.map((r) => `rejected: task ${r}`),
      ];
      if (accepted.length > 0 && processed.experiences.length === 0)
        failures.push(`the experience pipeline kept none of the step's ${accepted.length} experience(s)`);
      const explored: ExploredStep = {
        step,
        metrics: {
          ...result.metrics,
          'explorer/model_version': version,
          'rollout/rejected_experiences': rejected.length,
          ...Object.fromEntries(Object.entries(engineIncrease ?? {}).map(([name, value]) => [`rollout/${name}`, value])),
          ...processed.metrics,
        },
        schedulerState: scheduler.state(),
        failures: failures.slice(0, FAILURES_KEPT),
      };
      parts.onStep(explored);
      // eval before the step's experiences reach the trainer: its checkpoint of this step comes after the eval
      // metrics are on disk, so a run killed after that checkpoint lost none of them
      if (evalDue(step)) await evaluate(step);
      await (parts.write ? parts.write(explored, processed.experiences) : buffer.write(processed.experiences));
      parts.onWritten?.(step, processed.experiences.length);
    }
  } finally {
    await (parts.finish ? parts.finish() : buffer.finishWriting());
  }
}

async function waitForWeights(parts: ExplorerLoopParts, step: number): Promise<void> {
  const { interval, offset, style } = parts.settings.sync;
  switch (style) {
    case 'fixed': {
      const need = awaitedVersion(parts.settings.sync, step) ?? 0;
      return parts.weights.waitForVersion(need, `weights version ${need} for explore step ${step}`);
    }
    case 'trainer_driven':
      return parts.weights.waitForVersion(0, `weights for explore step ${step}`);
    case 'fully_async':
      return; // the weights come as they are published, mid-step
    case 'explorer_driven': {
      const since = step - 1 - offset;
      if (since > 0 && since % interval === 0)
        return parts.weights.requestWeights(`the trainer to answer the sync requested at explore step ${step}`);
    }
  }
}
