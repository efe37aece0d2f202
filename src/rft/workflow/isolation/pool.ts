// Workflow worker threads, main-thread side: user workflow code (module paths) runs on these, one attempt per thread
// at a time, so explorer.max_timeout can end any attempt — even a synchronous infinite loop — by terminating its
// thread, and an uncaught exception or unhandled rejection there ends that attempt only.
//
//   const pool = new WorkflowWorkerPool({ maxIdle: 8 });
//   const worker = await pool.acquire('./wf.ts#solve', baseDir);      // the module is loaded before the clock starts
//   try { value = await worker.run({ ...attempt, model, signal }); } finally { pool.release(worker, clean) }
//
// The model stays here: the worker's handle sends generate() requests (plain data) and its tokenizer's calls over the
// thread's ports (./protocol.ts), and this side answers them through the attempt's model handle and signal, so a
// terminated attempt's generations are aborted like an in-process one's. A thread is reused after an attempt that
// returned or threw; after a timeout, a stop, or a crash it is terminated and a new one started when next needed.
//
// Each thread's JavaScript heap is bounded (resourceLimits.maxOldGenerationSizeMb = maxHeapMb, the setting
// explorer.workflow_max_heap_mb): a workflow that allocates without bound ends its own thread with
// WorkflowOutOfMemory, which fails that attempt, instead of taking the process (and the machine's memory) with it.
// Buffers and ArrayBuffers live outside that heap and are not bounded by it.
import { type MessagePort, Worker } from 'node:worker_threads';
import type { AuxiliaryModelSet, AuxiliaryUsage } from '../../auxiliary/index.js';
import type { Tokenizer } from '../../../tokenizer/index.js';
import type { ModelHandle } from '../types.js';
import {
  type AttemptStart,
  type FromWorker,
  receivedError,
  type SentError,
  sendError,
  type SyncReply,
  TOKENIZER_METHODS,
  type TokenizerInfo,
  type ToWorker,
} from './protocol.js';

/** The worker's code failed outside the attempt's promise chain, or its thread died. */
export class WorkflowWorkerCrash extends Error {
  override name = 'WorkflowWorkerCrash';
}

/** The workflow's thread reached its heap limit (explorer.workflow_max_heap_mb) and was ended by Node. */
export class WorkflowOutOfMemory extends Error {
  override name = 'WorkflowOutOfMemory';
}

/** The workflow returned something that cannot be sent between threads (a function, a symbol, ...). */
export class UnsendableResult extends Error {
  override name = 'UnsendableResult';
}

/** One attempt as the runner asks for it: what the worker starts it with, and where its model calls go. */
export interface IsolatedAttempt
  extends Pick<AttemptStart, 'spec' | 'baseDir' | 'task' | 'repeatTimes' | 'runIdBase' | 'seed' | 'isEval'> {
  /** The model the attempt's generations go to. */
  model: ModelHandle;
  /** The run's auxiliary models and where the attempt's calls to them are counted. */
  auxiliary: { models: AuxiliaryModelSet; usage: AuxiliaryUsage };
  /** Aborted when the attempt ends (timeout, stop): its generations are aborted and the worker is told. */
  signal: AbortSignal;
}

interface Running {
  serial: number;
  model: ModelHandle;
  auxiliary: IsolatedAttempt['auxiliary'];
  signal: AbortSignal;
  calls: Map<number, AbortController>;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

const WORKER_MAIN = new URL(`./worker-main${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);
// TypeScript worker modules start through the bootstrap that registers tsx on the new thread (as tensor workers do).
const WORKER_ENTRY = WORKER_MAIN.pathname.endsWith('.ts')
  ? new URL('../../../torch/worker-entry.mjs', import.meta.url)
  : WORKER_MAIN;

/** One workflow worker thread. */
export class WorkflowWorker {
  readonly #worker: Worker;
  readonly #syncPort: MessagePort;
  readonly #syncFlag: Int32Array;
  readonly #loads = new Map<number, { resolve: (v: { repeatable: boolean }) => void; reject: (e: Error) => void }>();
  readonly #onIdleFailure: (error: Error) => void;
  #running: Running | null = null;
  #serial = 0;
  #nextLoad = 1;
  /** Why the thread is gone (null while it lives). */
  #dead: Error | null = null;
  /** The model of the latest attempt: tokenizer calls left over from it are still answered. */
  #lastModel: ModelHandle | null = null;
  #lastAuxiliary: AuxiliaryModelSet | null = null;

  private constructor(
    worker: Worker,
    ready: Extract<FromWorker, { type: 'ready' }>,
    onIdleFailure: (error: Error) => void,
    maxHeapMb: number,
  ) {
    this.#worker = worker;
    this.#syncPort = ready.syncPort;
    this.#syncFlag = new Int32Array(ready.syncFlag);
    this.#onIdleFailure = onIdleFailure;
    worker.on('message', (message: FromWorker) => this.#receive(message));
    worker.on('error', (error: Error) =>
      this.#die(
        outOfMemory(error, maxHeapMb) ??
          new WorkflowWorkerCrash(
            `the workflow's code failed outside its attempt (an uncaught exception or unhandled promise rejection in its worker thread): ${error.message}`,
          ),
      ),
    );
    worker.on('exit', (code) => this.#die(new WorkflowWorkerCrash(`the workflow's worker thread exited (code ${code})`)));
  }

  /** Starts a thread with a heap of at most `maxHeapMb` and waits for it to report ready (at most `timeoutMs`). */
  static start(options: {
    timeoutMs: number;
    maxHeapMb: number;
    onIdleFailure: (error: Error) => void;
  }): Promise<WorkflowWorker> {
    const worker = new Worker(WORKER_ENTRY, {
      workerData: { trinityWorkerModule: WORKER_MAIN.href },
      resourceLimits: { maxOldGenerationSizeMb: options.maxHeapMb },
    });
    return new Promise((resolve, reject) => {
      const fail = (error: Error) => {
        clearTimeout(timer);
        void worker.terminate();
        reject(error);
      };
      const onError = (error: Error) => fail(outOfMemory(error, options.maxHeapMb) ?? error);
      const timer = setTimeout(
        () => fail(new Error(`a workflow worker thread did not start within ${options.timeoutMs / 1000} s`)),
        options.timeoutMs,
      );
      worker.once('message', (message: FromWorker) => {
        if (message.type !== 'ready') return fail(new Error(`a workflow worker thread sent '${message.type}' before 'ready'`));
        clearTimeout(timer);
        worker.off('error', onError);
        resolve(new WorkflowWorker(worker, message, options.onIdleFailure, options.maxHeapMb));
      });
      worker.once('error', onError);
    });
  }

  get alive(): boolean {
    return this.#dead === null;
  }

  /** Loads a module-path workflow in this thread (at most `timeoutMs`: a module may hang at import). */
  load(spec: string, baseDir: string | undefined, timeoutMs: number): Promise<{ repeatable: boolean }> {
    if (this.#dead) return Promise.reject(this.#dead);
    const id = this.#nextLoad++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#loads.delete(id);
        this.terminate();
        reject(new Error(`workflow '${spec}': loading its module did not finish within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.#loads.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.#post({ type: 'load', id, spec, baseDir });
    });
  }

  /** Runs one attempt: the workflow's raw result, or its error (the caller checks the result). */
  async run(attempt: IsolatedAttempt): Promise<unknown> {
    if (this.#dead) throw this.#dead;
    if (this.#running) throw new Error('WorkflowWorker: an attempt is already running on this thread');
    const models = attempt.auxiliary.models.list;
    // endpoints first (an embedded model starts its endpoint on first use), so the worker can make its own clients
    const endpoints = await Promise.all(models.map((m) => m.endpoint()));
    if (this.#dead) throw this.#dead;
    if (this.#running) throw new Error('WorkflowWorker: an attempt is already running on this thread');
    const auxiliary = models.map((m, i) => ({
      name: m.name,
      modelName: m.modelName,
      ...(endpoints[i] as { baseURL: string; apiKey: string | null }),
      tokenizer: tokenizerInfo(m.tokenizer),
      contextLength: m.contextLength ?? null,
    }));
    const serial = ++this.#serial;
    const { model, signal } = attempt;
    this.#lastModel = model;
    this.#lastAuxiliary = attempt.auxiliary.models;
    return new Promise((resolve, reject) => {
      const running: Running = {
        serial,
        model,
        auxiliary: attempt.auxiliary,
        signal,
        calls: new Map(),
        resolve,
        reject,
      };
      const onAbort = () =>
        this.#post({ type: 'abort', attempt: serial, reason: String((signal.reason as Error)?.message ?? signal.reason) });
      signal.addEventListener('abort', onAbort, { once: true });
      const settle =
        <T>(fn: (value: T) => void) =>
        (value: T) => {
          signal.removeEventListener('abort', onAbort);
          for (const call of running.calls.values()) call.abort(new Error('the attempt has ended'));
          if (this.#running === running) this.#running = null;
          fn(value);
        };
      running.resolve = settle(resolve);
      running.reject = settle(reject);
      this.#running = running;
      this.#post({
        type: 'run',
        start: {
          attempt: serial,
          spec: attempt.spec,
          baseDir: attempt.baseDir,
          task: attempt.task,
          repeatTimes: attempt.repeatTimes,
          runIdBase: attempt.runIdBase,
          seed: attempt.seed,
          isEval: attempt.isEval,
          modelVersion: model.modelVersion,
          tokenizer: tokenizerInfo(model.tokenizer),
          promptLimit: model.promptLimit ?? null,
          vision: model.vision ?? null,
          auxiliary,
        },
      });
    });
  }

  /** Ends the thread now, whatever it runs (a synchronous loop included). */
  terminate(): void {
    this.#die(new WorkflowWorkerCrash('the workflow worker thread was terminated'));
    void this.#worker.terminate();
  }

  /** Whether the thread keeps the process alive (busy threads do, idle ones do not). */
  setBusy(busy: boolean): void {
    if (busy) this.#worker.ref();
    else this.#worker.unref();
  }

  #post(message: ToWorker): void {
    if (this.#dead === null) this.#worker.postMessage(message);
  }

  #die(reason: Error): void {
    if (this.#dead) return;
    this.#dead = reason;
    const running = this.#running;
    for (const load of this.#loads.values()) load.reject(reason);
    this.#loads.clear();
    if (running) running.reject(reason);
    else if (!reason.message.includes('was terminated')) this.#onIdleFailure(reason);
  }

  #receive(message: FromWorker): void {
    const running = this.#running;
    switch (message.type) {
      case 'loaded': {
        const load = this.#loads.get(message.id);
        this.#loads.delete(message.id);
        if (message.ok) load?.resolve({ repeatable: message.repeatable });
        else load?.reject(receivedError(message.error));
        return;
      }
      case 'result': {
        if (running?.serial !== message.attempt) return;
        if (message.ok) running.resolve(message.value);
        else if (message.unsendable)
          running.reject(
            new UnsendableResult(`the workflow returned a value that cannot leave its thread: ${message.error.message}`),
          );
        else running.reject(receivedError(message.error));
        return;
      }
      case 'generate':
        this.#generate(running, message);
        return;
      case 'cancel':
        running?.calls.get(message.call)?.abort(new Error('the workflow cancelled the call'));
        return;
      case 'tokenizer':
        this.#answerTokenizer(message.method, message.args, message.model);
        return;
      case 'auxiliaryScore':
        this.#auxiliaryScore(running, message);
        return;
      case 'auxiliaryUsage':
        if (running?.serial === message.attempt) running.auxiliary.usage.record(message.name, message.call);
        return;
      case 'ready':
        return;
    }
  }

  #generate(running: Running | null, message: Extract<FromWorker, { type: 'generate' }>): void {
    const { call } = message;
    if (running === null || running.serial !== message.attempt) {
      const error: SentError = { name: 'Error', message: 'generate: the attempt that made this call has ended' };
      this.#post({ type: 'generated', call, ok: false, error });
      return;
    }
    const controller = new AbortController();
    running.calls.set(call, controller);
    running.model
      .generate({
        ...message.request,
        signal: AbortSignal.any([controller.signal, running.signal]),
        ...(message.stream ? { onToken: (token) => this.#post({ type: 'token', call, token }) } : {}),
      })
      .then(
        (value) => this.#post({ type: 'generated', call, ok: true, value, modelVersion: running.model.modelVersion }),
        (error: unknown) => this.#post({ type: 'generated', call, ok: false, error: sendError(error) }),
      )
      .finally(() => running.calls.delete(call));
  }

  /** An auxiliary model's logprobs() for the worker, aborted with the attempt; counted there by its metered view. */
  #auxiliaryScore(running: Running | null, message: Extract<FromWorker, { type: 'auxiliaryScore' }>): void {
    const { call } = message;
    if (running === null || running.serial !== message.attempt) {
      const error: SentError = { name: 'Error', message: 'logprobs: the attempt that made this call has ended' };
      this.#post({ type: 'auxiliaryScored', call, ok: false, error });
      return;
    }
    Promise.resolve()
      .then(() =>
        running.auxiliary.models.get(message.name).logprobs(message.promptIds, message.completionIds, {
          signal: running.signal,
          ...(message.temperature !== undefined ? { temperature: message.temperature } : {}),
        }),
      )
      .then(
        (value) => this.#post({ type: 'auxiliaryScored', call, ok: true, value }),
        (error: unknown) => this.#post({ type: 'auxiliaryScored', call, ok: false, error: sendError(error) }),
      );
  }

  /** Answers on the sync port, then raises the flag the worker waits on (it is blocked until then). */
  #answerTokenizer(method: string, args: unknown[], auxiliary: string | undefined): void {
    let reply: SyncReply;
    try {
      let tokenizer: Tokenizer | null;
      if (auxiliary === undefined) {
        tokenizer = this.#lastModel?.tokenizer ?? null;
        if (tokenizer === null) throw new Error('the rollout model has no tokenizer');
      } else {
        tokenizer = this.#lastAuxiliary?.get(auxiliary).tokenizer ?? null;
        if (tokenizer === null) throw new Error(`auxiliary model '${auxiliary}' has no tokenizer`);
      }
      if (!(TOKENIZER_METHODS as readonly string[]).includes(method)) throw new Error(`tokenizer has no method '${method}'`);
      const fn = tokenizer[method as (typeof TOKENIZER_METHODS)[number]] as (...a: unknown[]) => unknown;
      reply = { ok: true, value: fn.apply(tokenizer, args) };
    } catch (error) {
      reply = { ok: false, error: sendError(error) };
    }
    this.#syncPort.postMessage(reply);
    Atomics.store(this.#syncFlag, 0, 1);
    Atomics.notify(this.#syncFlag, 0);
  }
}

/** WorkflowOutOfMemory when `error` is Node's report of a worker that reached its heap limit, else null. */
function outOfMemory(error: Error & { code?: string }, maxHeapMb: number): WorkflowOutOfMemory | null {
  if (error.code !== 'ERR_WORKER_OUT_OF_MEMORY') return null;
  return new WorkflowOutOfMemory(
    `out of memory: the workflow's worker thread reached its heap limit of ${maxHeapMb} MB ` +
      '(explorer.workflow_max_heap_mb) and was ended',
  );
}

function tokenizerInfo(t: Tokenizer | null): TokenizerInfo | null {
  if (t === null) return null;
  return {
    vocabSize: t.vocabSize,
    hasChatTemplate: t.hasChatTemplate,
    eosTokenIds: [...t.eosTokenIds],
    padTokenId: t.padTokenId,
    bosTokenId: t.bosTokenId,
  };
}

export interface WorkflowWorkerPoolOptions {
  /** Idle threads kept for reuse (the runner's concurrency: models × runner_per_model). */
  maxIdle: number;
  /** How long starting a thread, or loading a workflow module in it, may take. Default 120 s. */
  startTimeoutMs?: number;
  /** A line when an idle thread fails (code a finished attempt left running threw). */
  log?: (line: string) => void;
  /** Each thread's JavaScript heap limit in MB (explorer.workflow_max_heap_mb; see the header). Default 1024. */
  maxHeapMb?: number;
}

/** explorer.workflow_max_heap_mb's default. */
export const DEFAULT_WORKFLOW_MAX_HEAP_MB = 1024;

/** Threads for module-path workflows, started when needed and reused; see the header. */
export class WorkflowWorkerPool {
  readonly #idle: WorkflowWorker[] = [];
  readonly #busy = new Set<WorkflowWorker>();
  readonly #maxIdle: number;
  readonly #startTimeoutMs: number;
  readonly #log: (line: string) => void;
  readonly #maxHeapMb: number;
  #closed = false;
  /** Threads started, over the pool's life (a new one replaces each terminated one). */
  started = 0;

  constructor(options: WorkflowWorkerPoolOptions) {
    this.#maxIdle = options.maxIdle;
    this.#startTimeoutMs = options.startTimeoutMs ?? 120_000;
    this.#log = options.log ?? (() => {});
    this.#maxHeapMb = options.maxHeapMb ?? DEFAULT_WORKFLOW_MAX_HEAP_MB;
  }

  /** A thread with `spec` loaded (its import is not part of any attempt's time). */
  async acquire(spec: string, baseDir: string | undefined): Promise<{ worker: WorkflowWorker; repeatable: boolean }> {
    if (this.#closed) throw new Error('WorkflowWorkerPool is closed');
    let worker = this.#idle.pop();
    while (worker !== undefined && !worker.alive) worker = this.#idle.pop();
    if (worker === undefined) {
      this.started++;
      worker = await WorkflowWorker.start({
        timeoutMs: this.#startTimeoutMs,
        maxHeapMb: this.#maxHeapMb,
        onIdleFailure: (error) =>
          this.#log(`a workflow worker thread failed between attempts and was replaced: ${error.message}`),
      });
    }
    this.#busy.add(worker);
    worker.setBusy(true);
    try {
      const { repeatable } = await worker.load(spec, baseDir, this.#startTimeoutMs);
      return { worker, repeatable };
    } catch (error) {
      this.release(worker, true);
      throw error;
    }
  }

  /** Gives a thread back: kept for reuse when `reusable` and alive, else terminated. */
  release(worker: WorkflowWorker, reusable: boolean): void {
    this.#busy.delete(worker);
    if (!reusable || !worker.alive || this.#closed || this.#idle.length >= this.#maxIdle) {
      worker.terminate();
      return;
    }
    worker.setBusy(false);
    this.#idle.push(worker);
  }

  /** Terminates every thread. */
  close(): void {
    this.#closed = true;
    for (const worker of [...this.#idle, ...this.#busy]) worker.terminate();
    this.#idle.length = 0;
    this.#busy.clear();
  }
}
