// Evaluation inside a mode-train stage (trainer.stop_when): the trainer's weights go into a rollout engine of the
// stage's own (in memory when it is embedded), the eval tasksets run on it every explorer.eval_interval train steps,
// and the stage ends at the first evaluation whose metric reaches the rule's bound. This is how an SFT warm-up can
// stop at a held-out accuracy instead of after a step count whose outcome depends on the seed.
import type { MonitorGroup } from '../monitor/index.js';
import type { TrainerClient } from './trainer.js';
import { EngineModelHandle, type WorkflowRunner } from '../workflow/index.js';
import {
  type EvaluationSettings,
  evaluateTasksets,
  formatEvalMetrics,
  type RunnerSettings,
  stageWorkflowRunner,
  writeEvalSamples,
} from '../explorer/evaluation.js';
import { LocalWeightChannel } from '../sync/local-channel.js';
import type { StageSettings, StopRule } from '../settings.js';
import { type StartedEngine, type WeightTransport, weightTransport } from '../sync/weight-channel.js';

/** What the stage's evaluator reads of its settings: when to evaluate, on what, and its engine's folder. */
export type TrainEvalSettings = Pick<StageSettings, 'stageName' | 'jobDir' | 'evalInterval' | 'evalOnStartup' | 'sync'> &
  RunnerSettings &
  EvaluationSettings;

/** `eval/eval/mean@1 >= 0.3` */
export function describeStopRule(rule: StopRule): string {
  return rule.atLeast !== null ? `${rule.metric} >= ${rule.atLeast}` : `${rule.metric} <= ${rule.atMost}`;
}

/** Whether an evaluation's metrics meet the rule (a metric the evaluation lacks never does). */
export function stopRuleMet(rule: StopRule, metrics: Readonly<Record<string, number>>): boolean {
  const value = metrics[rule.metric];
  if (value === undefined || !Number.isFinite(value)) return false;
  return rule.atLeast !== null ? value >= rule.atLeast : value <= (rule.atMost as number);
}

export interface TrainStageEvaluatorParts {
  settings: TrainEvalSettings;
  rule: StopRule;
  trainer: TrainerClient;
  /** The stage's rollout engine (started from any weights of the model: the trainer's go over before each eval). */
  started: StartedEngine;
  monitors: MonitorGroup;
  /** Where eval_samples.jsonl goes. */
  metricsDir: string;
  log: (line: string) => void;
  signal?: AbortSignal;
}

/** Evaluates a mode-train stage's current weights; one per stage, closed with it (closes the engine too). */
export class TrainStageEvaluator {
  readonly #parts: TrainStageEvaluatorParts;
  readonly #channel: LocalWeightChannel;
  readonly #runner: WorkflowRunner;
  readonly #handle: EngineModelHandle;

  constructor(parts: TrainStageEvaluatorParts) {
    this.#parts = parts;
    const { settings, started } = parts;
    // trainer and engine share the process: the weights go over by reference whatever sync_method says (that key is
    // about explorer processes); an external server loads them from a folder
    const transport: WeightTransport =
      started.type === 'embedded' ? { method: 'memory', engine: started.engine } : weightTransport(started, settings.jobDir);
    this.#handle = new EngineModelHandle(started.engine, { modelVersion: 0 });
    this.#channel = new LocalWeightChannel({
      trainer: parts.trainer,
      transport,
      startVersion: 0,
      timeoutMs: settings.sync.timeoutMs,
      ...(parts.signal ? { signal: parts.signal } : {}),
      onVersion: (v) => {
        this.#handle.modelVersion = v;
      },
    });
    this.#runner = stageWorkflowRunner(settings, this.#handle, parts.log);
  }

  /** Due after train step `step` (and at 0 with eval_on_startup). */
  due(step: number): boolean {
    const { settings } = this.#parts;
    return step === 0 ? settings.evalOnStartup : step % settings.evalInterval === 0;
  }

  /**
   * Evaluates the trainer's weights after step `step`: metrics logged (eval/<taskset>/*), a few answers kept for
   * the report; true when the stop rule is met. Undefined when the stage was stopped during the evaluation.
   */
  async evaluate(step: number): Promise<boolean | undefined> {
    const { settings, rule, monitors, signal } = this.#parts;
    await this.#channel.publish(step);
    const evaluation = await evaluateTasksets(this.#runner, settings, step, signal);
    if (signal?.aborted) return undefined;
    monitors.log(step, evaluation.metrics);
    writeEvalSamples(this.#parts.metricsDir, step, evaluation);
    const met = stopRuleMet(rule, evaluation.metrics);
    const verdict = met ? `: ${describeStopRule(rule)} met, the stage ends here` : '';
    this.#parts.log(`[${settings.stageName}] eval at step ${step}: ${formatEvalMetrics(evaluation.metrics)}${verdict}`);
    return met;
  }

  async close(): Promise<void> {
    this.#runner.close();
    await this.#parts.started.engine.close();
  }
}
