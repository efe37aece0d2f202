// Tensor work off the main thread. The addon is context-aware, so each worker_threads Worker loads it and runs
// libtorch ops on its own thread (grad mode and intra-op thread count are per thread), while the main event loop
// keeps serving HTTP and workflows.
//
//   main thread                                   worker module
//   const w = await TensorWorker.start(url)       serveTensorWorker({ async step(batch) { ...; return loss } })
//   const loss = await w.call('step', [batch])
//
// Tensors cross threads by reference, not by copy: arguments and results are walked, and each Tensor becomes a
// token that the other side turns back into a Tensor sharing the same storage (exportTensor/importTensor).
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { native } from './native.js';
import { fromHandle, Tensor } from './tensor.js';

/** A tensor reference in transit between threads. Import it exactly once, or its memory is never freed. */
export interface TransferableTensor {
  readonly __trinityTensor: bigint;
}

export function exportTensor(t: Tensor): TransferableTensor {
  return { __trinityTensor: native.exportTensor(t.handle) };
}

export function importTensor(token: TransferableTensor): Tensor {
  return fromHandle(native.importTensor(token.__trinityTensor));
}

function isToken(value: unknown): value is TransferableTensor {
  return value !== null && typeof value === 'object' && typeof (value as TransferableTensor).__trinityTensor === 'bigint';
}

/** Replaces tensors inside plain data with tokens (arrays and plain objects are walked). */
export function encodeTensors(value: unknown): unknown {
  if (value instanceof Tensor) return exportTensor(value);
  if (Array.isArray(value)) return value.map(encodeTensors);
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, encodeTensors(v)]));
  }
  return value;
}

/** Replaces tokens with tensors (the inverse of encodeTensors). */
export function decodeTensors(value: unknown): unknown {
  if (isToken(value)) return importTensor(value);
  if (Array.isArray(value)) return value.map(decodeTensors);
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, decodeTensors(v)]));
  }
  return value;
}

type Request = { id: number; method: string; args: unknown[] };
type Response = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: { message: string; stack?: string } };
/** A message the worker sends on its own (postWorkerEvent): plain data, no tensors. */
type WorkerEvent = { event: string; data: unknown };

export interface TensorWorkerOptions {
  /** Intra-op threads for this worker's libtorch ops. */
  numThreads?: number;
  /** Default timeout of call(), in milliseconds (default 10 minutes). */
  timeoutMs?: number;
  /** Time to wait for the worker module to load and report ready (default 60 s). */
  startTimeoutMs?: number;
}

/** The main-thread side: starts a worker module that calls serveTensorWorker() and calls its handlers. */
export class TensorWorker {
  readonly #worker: Worker;
  readonly #pending = new Map<
    number,
    { resolve: (v: unknown) => void; reject: (e: Error) => void; timer: NodeJS.Timeout; method: string }
  >();
  readonly #timeoutMs: number;
  readonly #eventListeners = new Map<string, (data: unknown) => void>();
  #nextId = 1;
  #exited: Error | null = null;

  private constructor(worker: Worker, timeoutMs: number) {
    this.#worker = worker;
    this.#timeoutMs = timeoutMs;
    worker.on('message', (message: Response | WorkerEvent) => {
      if ('event' in message) this.#eventListeners.get(message.event)?.(message.data);
      else this.#settle(message);
    });
    worker.on('error', (error) => this.#failAll(error));
    worker.on('exit', (code) => this.#failAll(new Error(`tensor worker exited with code ${code}`)));
  }

  /** Starts the worker module at `moduleUrl` (a file URL or path; .ts modules run through tsx). */
  static async start(moduleUrl: string | URL, options: TensorWorkerOptions = {}): Promise<TensorWorker> {
    const href = new URL(moduleUrl.toString(), 'file://').href;
    const data = { numThreads: options.numThreads ?? null, trinityWorkerModule: href };
    // TypeScript modules start through a bootstrap that registers tsx on the worker thread.
    const entry = href.endsWith('.ts') ? new URL('./worker-entry.mjs', import.meta.url) : new URL(href);
    const worker = new Worker(entry, { workerData: data });
    const startTimeout = options.startTimeoutMs ?? 60_000;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        void worker.terminate();
        reject(new Error(`tensor worker ${href} did not report ready within ${startTimeout} ms`));
      }, startTimeout);
      const onMessage = (message: unknown) => {
        if (message === 'ready') {
          clearTimeout(timer);
          worker.off('message', onMessage);
          resolve();
        }
      };
      worker.on('message', onMessage);
      worker.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
    return new TensorWorker(worker, options.timeoutMs ?? 600_000);
  }

  /** Calls a handler in the worker; tensors in args and result travel by reference. */
  call<T = unknown>(method: string, args: unknown[] = [], options: { timeoutMs?: number } = {}): Promise<T> {
    if (this.#exited) return Promise.reject(this.#exited);
    const id = this.#nextId++;
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`tensor worker call '${method}' did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, method });
      const request: Request = { id, method, args: encodeTensors(args) as unknown[] };
      this.#worker.postMessage(request);
    });
  }

  /** Listens to postWorkerEvent(event, ...) from the worker (one listener per event name); returns an unsubscribe. */
  onEvent(event: string, listener: (data: unknown) => void): () => void {
    this.#eventListeners.set(event, listener);
    return () => {
      if (this.#eventListeners.get(event) === listener) this.#eventListeners.delete(event);
    };
  }

  async terminate(): Promise<void> {
    await this.#worker.terminate();
  }

  #settle(message: Response): void {
    const pending = this.#pending.get(message.id);
    if (!pending) {
      // The caller timed out: free tensors that arrived late.
      if (message.ok) disposeDecoded(decodeTensors(message.result));
      return;
    }
    this.#pending.delete(message.id);
    clearTimeout(pending.timer);
    if (message.ok) pending.resolve(decodeTensors(message.result));
    else {
      const error = new Error(`tensor worker '${pending.method}' failed: ${message.error.message}`);
      if (message.error.stack) error.stack = message.error.stack;
      pending.reject(error);
    }
  }

  #failAll(error: Error): void {
    this.#exited = error;
    for (const [id, pending] of this.#pending) {
      clearTimeout(pending.timer);
      pending.reject(error);
      this.#pending.delete(id);
    }
  }
}

function disposeDecoded(value: unknown): void {
  if (value instanceof Tensor) value.dispose();
  else if (Array.isArray(value)) value.forEach(disposeDecoded);
  else if (value !== null && typeof value === 'object') Object.values(value).forEach(disposeDecoded);
}

/** From inside a worker: sends plain data to the TensorWorker's onEvent(event) listener (e.g. streamed tokens). */
export function postWorkerEvent(event: string, data: unknown): void {
  if (isMainThread || parentPort === null) throw new Error('postWorkerEvent() must run inside a worker thread');
  parentPort.postMessage({ event, data } satisfies WorkerEvent);
}

export type WorkerHandlers = Record<string, (...args: never[]) => unknown>;

/** The worker side: answers TensorWorker.call() with these handlers (sync or async). */
export function serveTensorWorker(handlers: WorkerHandlers): void {
  if (isMainThread || parentPort === null) throw new Error('serveTensorWorker() must run inside a worker thread');
  const port = parentPort;
  const numThreads = (workerData as { numThreads?: number | null } | null)?.numThreads;
  if (numThreads) native.setNumThreads(numThreads);
  port.on('message', async (request: Request) => {
    let response: Response;
    try {
      const handler = handlers[request.method];
      if (!handler) throw new Error(`no handler named '${request.method}' (have: ${Object.keys(handlers).join(', ')})`);
      const args = decodeTensors(request.args) as never[];
      const result = await handler(...args);
      response = { id: request.id, ok: true, result: encodeTensors(result) };
    } catch (error) {
      const e = error as Error;
      response = {
        id: request.id,
        ok: false,
        error: { message: e.message ?? String(error), ...(e.stack ? { stack: e.stack } : {}) },
      };
    }
    port.postMessage(response);
  });
  port.postMessage('ready');
}
