// The workflow runner: the explorer's side of rollouts. It runs a step's tasks × repeat_times through their
// workflows, concurrently and in isolation, and returns the experiences with the step's metrics.
//
//   const runner = new WorkflowRunner({ models: [handle], runnerPerModel: 8, maxTimeout: 1800, maxRetryTimes: 2 });
//   const { experiences, metrics } = await runner.runStep(tasks, { step: 3, repeatTimes: 8 });
//   const { metrics: evalMetrics } = await runner.evaluate(evalTasks, { step: 3, repeatTimes: 4 });
//
// A run is one workflow call: a repeatable workflow runs once per task with n = repeatTimes, a non-repeatable one
// runs repeatTimes times with n = 1 (runIdBase = the repeat). Each model serves at most runnerPerModel runs at once
// (Trinity-RFT's explorer.runner_per_model); a run goes to the model with the most free runners.
//
// Isolation (docs/architecture.md, "Reliability"): an attempt that throws, passes maxTimeout seconds (its AbortSignal
// fires and every model call it made through its handle is aborted), or returns no/malformed experiences
// (validateExperience) is retried up to maxRetryTimes times with exponential backoff, then its run counts as failed;
// nothing a workflow does stops the step. Stopping the step (RunOptions.signal) cancels the runs in flight: their
// statuses say `cancelled` and name the stop's reason (a stage that failed elsewhere, e.g. a checkpoint write), which
// is logged once for the step, never as a failure of each attempt it cut short. Experiences are stamped with
// info.taskId, runId, modelVersion (when missing) and step.
//
// Where workflow code runs:
// - A module path (`path/to/file.ts#export`, not a registered name) is user code: it runs on a workflow worker
//   thread (./isolation/pool.ts; one attempt per thread, up to models × runnerPerModel threads kept for reuse). A
//   timeout or a stop terminates the thread, which ends even a synchronous infinite loop; an uncaught exception,
//   an unhandled rejection or running out of its heap (workflowMaxHeapMb) there fails that attempt only (errored);
//   the thread is replaced. Its model handle is the
//   same EngineModelHandle code, generating on the main thread's model.
// - Registered workflows (the built-ins, and functions a program registers) run in-process: they are trusted not to
//   block the event loop (a synchronous hang there cannot be timed out). Errors escaping their promise chains are
//   attributed to their attempt by the handlers of ./isolation/faults.ts, which a run installs.
//
// Neighbours: ./model-pool.ts (the runners per model), ./step-metrics.ts (RunStatus and the step's metrics).
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { isModulePath } from '../../util/module-path.js';
import { type AuxiliaryModelSet, AuxiliaryUsage, NO_AUXILIARY_MODELS } from '../auxiliary/index.js';
import { type Experience, validateExperience } from '../experience.js';
import type { Task } from '../task.js';
import { evalMetrics, type TaskSamples } from './eval-metrics.js';
import { runInAttemptScope } from './isolation/faults.js';
import { UnsendableResult, type WorkflowWorker, WorkflowWorkerPool } from './isolation/pool.js';
import { ModelPool } from './model-pool.js';
import { attemptModelHandle } from './model-handle.js';
import { WORKFLOWS, type WorkflowRegistry } from './registry.js';
import { type RunStatus, stepMetrics } from './step-metrics.js';
import type { ModelHandle, WorkflowSpec } from './types.js';

export { type RunStatus, stepMetrics } from './step-metrics.js';

export interface WorkflowRunnerOptions {
  /** Rollout models (one per engine). */
  models: ModelHandle | readonly ModelHandle[];
  /** Runs at once per model (explorer.runner_per_model). Default 8. */
  runnerPerModel?: number;
  /** Seconds one attempt may take (explorer.max_timeout). Default 1800. */
  maxTimeout?: number;
  /** Retries after a failed attempt (explorer.max_retry_times). Default 2. */
  maxRetryTimes?: number;
  /** Wait before retry r (1-based): retryBackoffMs · 2^(r−1), at most maxRetryBackoffMs. Defaults 1000 and 30000. */
  retryBackoffMs?: number;
  maxRetryBackoffMs?: number;
  /** Workflow of tasks that name none (buffer.explorer_input.taskset.default_workflow_type). */
  defaultWorkflow?: string;
  /** Workflow of eval tasks that name none (default_eval_workflow_type; default: defaultWorkflow). */
  defaultEvalWorkflow?: string;
  workflows?: WorkflowRegistry;
  /** Folder that relative workflow module paths resolve against. */
  baseDir?: string;
  /** Base of the per-run seeds. Default 42. */
  seed?: number;
  /** Eval: a response is correct (pass@k) when metrics.accuracy, else its reward, is at least this. Default 1. */
  passThreshold?: number;
  /** One line per failed attempt (default: none; statuses carry the errors too). */
  log?: (line: string) => void;
  /** How long starting a workflow worker thread or loading a module-path workflow in it may take. Default 120 s. */
  workerStartTimeoutMs?: number;
  /** The run's auxiliary models (explorer.auxiliary_models), handed to every workflow. Default: none. */
  auxiliaryModels?: AuxiliaryModelSet;
  /** Heap limit of each workflow worker thread in MB (explorer.workflow_max_heap_mb; ./isolation/pool.ts). */
  workflowMaxHeapMb?: number;
}

export interface RunOptions {
  /** Explorer step, stamped on the experiences. */
  step: number;
  /** Responses per task (algorithm.repeat_times). */
  repeatTimes: number;
  /** Stops the step: running attempts are aborted, nothing new starts or retries. */
  signal?: AbortSignal;
}

export interface StepResult {
  experiences: Experience[];
  /**
   * rollout/reward/{mean,std,max,min}, rollout/response_length/{mean,max,min}, rollout/<metric>/mean for each
   * experience metric, rollout/experiences, rollout/tasks/{ok,failed}, rollout/runs/{ok,failed},
   * rollout/attempts/{timed_out,malformed,errored,retried}, rollout/run_time_s/{mean,max}, rollout/time_s, and the
   * step's auxiliary calls: auxiliary/<name>/{calls,failed,tokens,seconds} (src/rft/auxiliary/usage.ts).
   */
  metrics: Record<string, number>;
  statuses: RunStatus[];
}

export interface EvalResult extends StepResult {
  /** Per taskset: mean@n, best@k, worst@k, pass@k (./eval-metrics.ts), also in metrics as eval/<taskset>/<name>. */
  tasksets: Record<string, Record<string, number>>;
}

/** Why an attempt was aborted. */
class AttemptTimeout extends Error {
  constructor(seconds: number) {
    super(`timed out after ${seconds} s (explorer.max_timeout)`);
    this.name = 'AttemptTimeout';
  }
}

class MalformedExperiences extends Error {
  override name = 'MalformedExperiences';
}

/** A workflow as the runner runs it: in this thread, or on a worker thread by module path (see the header). */
type ResolvedWorkflow = { isolated: false; spec: WorkflowSpec } | { isolated: true; spec: string; repeatable: boolean };

interface Run {
  task: Task;
  workflow: ResolvedWorkflow;
  repeatTimes: number;
  runIdBase: number;
}

export class WorkflowRunner {
  readonly #pool: ModelPool;
  readonly #maxTimeout: number;
  readonly #maxRetryTimes: number;
  readonly #retryBackoffMs: number;
  readonly #maxRetryBackoffMs: number;
  readonly #defaultWorkflow: string | undefined;
  readonly #defaultEvalWorkflow: string | undefined;
  readonly #workflows: WorkflowRegistry;
  readonly #baseDir: string | undefined;
  readonly #seed: number;
  readonly #passThreshold: number;
  readonly #log: (line: string) => void;
  readonly #workers: WorkflowWorkerPool;
  readonly #auxiliary: AuxiliaryModelSet;
  /** Module-path workflows checked on a worker thread, by (baseDir, spec); a failed check is retried. */
  readonly #isolated = new Map<string, Promise<ResolvedWorkflow>>();

  constructor(options: WorkflowRunnerOptions) {
    const models = Array.isArray(options.models)
      ? [...(options.models as readonly ModelHandle[])]
      : [options.models as ModelHandle];
    if (models.length === 0) throw new RangeError('WorkflowRunner: models is empty');
    const runnerPerModel = options.runnerPerModel ?? 8;
    if (!Number.isInteger(runnerPerModel) || runnerPerModel < 1)
      throw new RangeError(`WorkflowRunner: runnerPerModel must be a positive integer, got ${String(runnerPerModel)}`);
    this.#maxTimeout = options.maxTimeout ?? 1800;
    if (!(this.#maxTimeout > 0)) throw new RangeError(`WorkflowRunner: maxTimeout must be > 0 seconds, got ${this.#maxTimeout}`);
    this.#maxRetryTimes = options.maxRetryTimes ?? 2;
    if (!Number.isInteger(this.#maxRetryTimes) || this.#maxRetryTimes < 0)
      throw new RangeError(`WorkflowRunner: maxRetryTimes must be a non-negative integer, got ${this.#maxRetryTimes}`);
    this.#retryBackoffMs = options.retryBackoffMs ?? 1000;
    this.#maxRetryBackoffMs = options.maxRetryBackoffMs ?? 30_000;
    if (!(this.#retryBackoffMs >= 0) || !(this.#maxRetryBackoffMs >= 0))
      throw new RangeError('WorkflowRunner: retryBackoffMs and maxRetryBackoffMs must be >= 0');
    this.#pool = new ModelPool(models, runnerPerModel);
    this.#defaultWorkflow = options.defaultWorkflow;
    this.#defaultEvalWorkflow = options.defaultEvalWorkflow ?? options.defaultWorkflow;
    this.#workflows = options.workflows ?? WORKFLOWS;
    this.#baseDir = options.baseDir;
    this.#seed = options.seed ?? 42;
    this.#passThreshold = options.passThreshold ?? 1;
    this.#log = options.log ?? (() => {});
    this.#auxiliary = options.auxiliaryModels ?? NO_AUXILIARY_MODELS;
    this.#workers = new WorkflowWorkerPool({
      maxIdle: models.length * runnerPerModel,
      ...(options.workerStartTimeoutMs !== undefined ? { startTimeoutMs: options.workerStartTimeoutMs } : {}),
      ...(options.workflowMaxHeapMb !== undefined ? { maxHeapMb: options.workflowMaxHeapMb } : {}),
      log: this.#log,
    });
  }

  /** Workflow worker threads started so far (each terminated one is replaced by a new one when needed). */
  get workerThreadsStarted(): number {
    return this.#workers.started;
  }

  /** Terminates the workflow worker threads (idle ones never keep the process alive; this frees them now). */
  close(): void {
    this.#workers.close();
  }

  /** A registered name (in-process) or a module path (checked, then run, on a worker thread). */
  #resolve(name: string): Promise<ResolvedWorkflow> {
    if (this.#workflows.has(name) || !isModulePath(name))
      return this.#workflows.resolve(name, this.#baseDir).then((spec) => ({ isolated: false, spec }));
    const key = `${this.#baseDir ?? ''}\0${name}`;
    let resolved = this.#isolated.get(key);
    if (resolved === undefined) {
      resolved = this.#workers.acquire(name, this.#baseDir).then(({ worker, repeatable }) => {
        this.#workers.release(worker, true);
        return { isolated: true, spec: name, repeatable };
      });
      resolved.catch(() => this.#isolated.delete(key));
      this.#isolated.set(key, resolved);
    }
    return resolved;
  }

  /** Runs in flight now, over all models. */
  get inFlight(): number {
    return this.#pool.busy;
  }

  /** Runs a training step's tasks; see the header. */
  runStep(tasks: readonly Task[], options: RunOptions): Promise<StepResult> {
    return this.#run(tasks, options, false);
  }

  /** Runs eval tasks (grouped by task.taskset) and computes mean@n, best@k, worst@k and pass@k per taskset. */
  async evaluate(tasks: readonly Task[], options: RunOptions): Promise<EvalResult> {
    const result = await this.#run(tasks, options, true);
    const samples = new Map<string, Map<string, TaskSamples>>();
    for (const task of tasks) {
      const byTask = samples.get(task.taskset) ?? new Map<string, TaskSamples>();
      byTask.set(task.id, { rewards: [], correct: [] });
      samples.set(task.taskset, byTask);
    }
    const tasksetOf = new Map(tasks.map((t) => [t.id, t.taskset]));
    for (const e of result.experiences) {
      const taskId = String(e.info.taskId);
      const entry = samples.get(tasksetOf.get(taskId) ?? '')?.get(taskId);
      if (entry === undefined) continue;
      const reward = e.reward ?? 0;
      entry.rewards.push(reward);
      entry.correct.push((e.metrics?.accuracy ?? reward) >= this.#passThreshold);
    }
    const tasksets: Record<string, Record<string, number>> = {};
    for (const [name, byTask] of samples) {
      tasksets[name] = evalMetrics([...byTask.values()]);
      for (const [key, value] of Object.entries(tasksets[name])) result.metrics[`eval/${name}/${key}`] = value;
    }
    return { ...result, tasksets };
  }

  async #run(tasks: readonly Task[], options: RunOptions, isEval: boolean): Promise<StepResult> {
    const { step, repeatTimes, signal } = options;
    if (!Number.isInteger(repeatTimes) || repeatTimes < 1)
      throw new RangeError(`WorkflowRunner: repeatTimes must be a positive integer, got ${String(repeatTimes)}`);
    const started = performance.now();
    const defaultName = isEval ? this.#defaultEvalWorkflow : this.#defaultWorkflow;
    // A bad default is a config error for the whole step; a bad name in one task's row fails that task.
    if (defaultName !== undefined) await this.#resolve(defaultName);

    const statuses: RunStatus[] = [];
    const runs: Run[] = [];
    for (const task of tasks) {
      const name = task.workflow ?? defaultName;
      let workflow: ResolvedWorkflow;
      try {
        if (name === undefined) throw new Error(`task ${task.id} names no workflow and the runner has no default workflow`);
        workflow = await this.#resolve(name);
      } catch (error) {
        statuses.push(failedStatus(task, range(0, repeatTimes), (error as Error).message));
        continue;
      }
      if (repeatableOf(workflow)) {
        runs.push({ task, workflow, repeatTimes, runIdBase: 0 });
      } else {
        for (let r = 0; r < repeatTimes; r++) runs.push({ task, workflow, repeatTimes: 1, runIdBase: r });
      }
    }

    const usage = new AuxiliaryUsage();
    // every concurrent attempt listens to the step's signal: one step-local signal, so the caller's gets one listener
    const stepStop = new AbortController();
    setMaxListeners(0, stepStop.signal);
    const onStop = () => stepStop.abort(signal?.reason);
    if (signal?.aborted) onStop();
    else signal?.addEventListener('abort', onStop, { once: true });
    let outcomes: { experiences: Experience[]; status: RunStatus }[];
    try {
      outcomes = await Promise.all(runs.map((run) => this.#runWithRetry(run, step, isEval, usage, stepStop.signal)));
    } finally {
      signal?.removeEventListener('abort', onStop);
    }
    const experiences: Experience[] = [];
    let retried = 0;
    for (const outcome of outcomes) {
      statuses.push(outcome.status);
      experiences.push(...outcome.experiences);
      retried += Math.max(0, outcome.status.attempts - 1);
    }
    const cancelled = statuses.filter((s) => s.cancelled).length;
    if (cancelled > 0) this.#log(`step ${step}: ${cancelled} workflow runs ${stopMessage(stepStop.signal)}`);
    const metrics = stepMetrics(experiences, statuses);
    metrics['rollout/attempts/retried'] = retried;
    metrics['rollout/time_s'] = (performance.now() - started) / 1000;
    // runs (an environment workflow's episodes) finished per second of the step
    metrics['rollout/runs_per_s'] = (metrics['rollout/runs/ok'] as number) / (metrics['rollout/time_s'] as number);
    Object.assign(metrics, usage.metrics());
    return { experiences, metrics, statuses };
  }

  async #runWithRetry(
    run: Run,
    step: number,
    isEval: boolean,
    usage: AuxiliaryUsage,
    stop: AbortSignal | undefined,
  ): Promise<{ experiences: Experience[]; status: RunStatus }> {
    const status: RunStatus = {
      taskId: run.task.id,
      taskset: run.task.taskset,
      runIds: range(run.runIdBase, run.repeatTimes),
      ok: false,
      attempts: 0,
      timedOut: 0,
      malformed: 0,
      errored: 0,
      seconds: 0,
    };
    const started = performance.now();
    for (let attempt = 0; attempt <= this.#maxRetryTimes; attempt++) {
      if (attempt > 0) {
        const wait = Math.min(this.#retryBackoffMs * 2 ** (attempt - 1), this.#maxRetryBackoffMs);
        await sleep(wait, undefined, stop ? { signal: stop } : {}).catch(() => {});
      }
      if (stop?.aborted) {
        cancel(status, stop);
        break;
      }
      const lease = await this.#pool.acquire(stop).catch(() => null);
      if (lease === null) {
        cancel(status, stop);
        break;
      }
      status.attempts++;
      const attemptStarted = performance.now();
      try {
        const experiences = await this.#attempt(run, lease.model, step, isEval, attempt, usage, stop);
        status.ok = true;
        delete status.error;
        status.seconds = (performance.now() - attemptStarted) / 1000;
        return { experiences, status };
      } catch (error) {
        // cut short by the step stopping: whatever it threw (the stop's reason, an aborted model call) is not its own
        if (stop?.aborted) {
          cancel(status, stop);
          break;
        }
        if (error instanceof AttemptTimeout) status.timedOut++;
        else if (error instanceof MalformedExperiences || error instanceof UnsendableResult) status.malformed++;
        else status.errored++;
        status.error = error instanceof Error ? error.message : String(error);
        this.#log(
          `workflow run of task ${run.task.id} (runs ${status.runIds.join(',')}) attempt ${attempt + 1}/${this.#maxRetryTimes + 1} failed: ${status.error}`,
        );
      } finally {
        lease.release();
      }
    }
    status.seconds = (performance.now() - started) / 1000;
    return { experiences: [], status };
  }

  /** One attempt: the workflow under a timeout, its experiences checked and stamped. Throws on any failure. */
  async #attempt(
    run: Run,
    model: ModelHandle,
    step: number,
    isEval: boolean,
    attempt: number,
    usage: AuxiliaryUsage,
    stop: AbortSignal | undefined,
  ): Promise<Experience[]> {
    const { task, workflow } = run;
    // a worker thread with the module loaded, before the clock starts: starting one is not the workflow's time
    let worker: WorkflowWorker | null = null;
    if (workflow.isolated) {
      worker = (await this.#workers.acquire(workflow.spec, this.#baseDir)).worker;
      if (stop?.aborted) {
        this.#workers.release(worker, true);
        throw stop.reason ?? new Error('the step was stopped');
      }
    }
    const controller = new AbortController();
    setMaxListeners(0, controller.signal); // every model call of a long episode listens to it
    const onStop = () => controller.abort(stop?.reason ?? new Error('the step was stopped'));
    stop?.addEventListener('abort', onStop, { once: true });
    const timer = setTimeout(() => controller.abort(new AttemptTimeout(this.#maxTimeout)), this.#maxTimeout * 1000);
    let onAbort = () => {};
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(controller.signal.reason);
      controller.signal.addEventListener('abort', onAbort, { once: true });
    });
    const modelVersion = model.modelVersion;
    const seed = runSeed(this.#seed, step, task.id, run.runIdBase, attempt);
    /** The worker's attempt ended on its own (returned or threw): its thread may serve the next one. */
    let workerFinished = false;
    try {
      let running: Promise<unknown>;
      if (worker !== null) {
        running = worker.run({
          spec: workflow.spec as string,
          baseDir: this.#baseDir,
          task,
          repeatTimes: run.repeatTimes,
          runIdBase: run.runIdBase,
          seed,
          isEval,
          model,
          auxiliary: { models: this.#auxiliary, usage },
          signal: controller.signal,
        });
        running.then(
          () => (workerFinished = true),
          () => (workerFinished = !controller.signal.aborted),
        );
      } else {
        const spec = workflow.spec as WorkflowSpec;
        const context = {
          task,
          model: attemptModelHandle(model, { signal: controller.signal, taskId: task.id }),
          repeatTimes: run.repeatTimes,
          runIdBase: run.runIdBase,
          seed,
          signal: controller.signal,
          isEval,
          ...(this.#baseDir !== undefined ? { baseDir: this.#baseDir } : {}),
          auxiliaryModels: this.#auxiliary.forAttempt({ signal: controller.signal, usage }),
        };
        // in the attempt's async context, so an error escaping its callbacks fails it (./isolation/faults.ts);
        // Promise.resolve().then: a workflow that throws synchronously fails like one that rejects
        running = runInAttemptScope({ fail: (error) => controller.abort(error) }, () =>
          Promise.resolve().then(() => spec.run(context)),
        );
      }
      const result: unknown = await Promise.race([running, aborted]);
      const experiences = checkExperiences(result, task.id);
      for (const [i, e] of experiences.entries()) {
        e.info.taskId ??= task.id;
        if (!repeatableOf(workflow)) e.info.runId = run.runIdBase;
        else e.info.runId ??= run.runIdBase + i;
        e.info.modelVersion ??= modelVersion;
        e.info.step = step;
      }
      return experiences;
    } finally {
      clearTimeout(timer);
      stop?.removeEventListener('abort', onStop);
      controller.signal.removeEventListener('abort', onAbort);
      // Whatever the workflow still has running (it returned early, or hangs) is cut off from the model now.
      if (!controller.signal.aborted) controller.abort(new Error(`the attempt for task ${task.id} has ended`));
      aborted.catch(() => {});
      // a thread whose attempt timed out, was stopped or crashed is terminated (a synchronous loop ends with it)
      if (worker !== null) this.#workers.release(worker, workerFinished);
    }
  }
}

const repeatableOf = (workflow: ResolvedWorkflow): boolean =>
  workflow.isolated ? workflow.repeatable : workflow.spec.repeatable !== false;

/** The workflow's result as experiences, or MalformedExperiences naming the first problems. */
function checkExperiences(result: unknown, taskId: string): Experience[] {
  if (!Array.isArray(result))
    throw new MalformedExperiences(
      `task ${taskId}: the workflow returned ${result === null ? 'null' : typeof result}, not a list of experiences`,
    );
  if (result.length === 0) throw new MalformedExperiences(`task ${taskId}: the workflow returned no experiences`);
  const problems: string[] = [];
  for (const [i, e] of result.entries()) {
    const found =
      e === null || typeof e !== 'object' || Array.isArray(e) ? ['not an object'] : validateExperience(e as Experience);
    if (found.length > 0) problems.push(`experience ${i}: ${found.join('; ')}`);
  }
  if (problems.length > 0)
    throw new MalformedExperiences(
      `task ${taskId}: malformed experiences: ${problems.slice(0, 3).join(' | ')}${problems.length > 3 ? ` (+${problems.length - 3} more)` : ''}`,
    );
  return result as Experience[];
}

/** `cancelled: the step was stopped by: <its reason>` (a plain abort() has no reason worth naming). */
function stopMessage(stop: AbortSignal | undefined): string {
  const reason: unknown = stop?.reason;
  const named = reason instanceof Error ? reason.name !== 'AbortError' && reason.message : reason !== undefined && String(reason);
  return `cancelled: the step was stopped${named ? ` by: ${named}` : ''}`;
}

/** Marks a run cut short by the step stopping; an error of its own from an earlier attempt is kept after the reason. */
function cancel(status: RunStatus, stop: AbortSignal | undefined): void {
  status.cancelled = true;
  status.error = `${stopMessage(stop)}${status.error ? ` (its last error of its own: ${status.error})` : ''}`;
}

function failedStatus(task: Task, runIds: number[], error: string): RunStatus {
  return {
    taskId: task.id,
    taskset: task.taskset,
    runIds,
    ok: false,
    attempts: 0,
    timedOut: 0,
    malformed: 0,
    errored: 1,
    error,
    seconds: 0,
  };
}

const range = (start: number, count: number): number[] => Array.from({ length: count }, (_, i) => start + i);

/** A 31-bit seed from the run's identity (FNV-1a), the same on every machine and rerun. */
export function runSeed(seed: number, step: number, taskId: string, runIdBase: number, attempt: number): number {
  let hash = 0x811c9dc5;
  for (const ch of `${seed}/${step}/${taskId}/${runIdBase}/${attempt}`) {
    hash ^= ch.codePointAt(0) as number;
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 1;
}
