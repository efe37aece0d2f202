// Tensor work off the main thread. The addon is context-aware, so each worker_threads Worker loads it and runs
// libtorch ops on its own thread (grad mode and intra-op thread count are per thread), while the main event loop
// keeps serving HTTP and workflows.
//
//   main thread                                   worker module
//   const w = await TensorWorker.start(url)       serveTensorWorker({ async step(batch) { ...; return loss } })
//   const loss = await w.call('step', [batch])
//
// Tensors cross threads by reference, not by copy: arguments and results are walked, and each Tensor becomes a
// token (exportTensor) that the other side turns back into a Tensor sharing the same storage (importTensor). A token
// is an id in the addon's process-wide registry of exported tensors: importing takes the tensor out exactly once
// (a second import, or a made-up id, is an Error), and a token nobody will import is released. TensorWorker releases
// the tokens of every message it drops (a call that timed out, a late answer to it), and when the worker exits it
// releases every export tagged with the worker's threadId that is still registered: arguments the worker never read,
// results it exported but never sent.
import { isMainThread, parentPort, threadId, Worker, workerData } from 'node:worker_threads';
import { native } from './native.js';
import { fromHandle, Tensor } from './tensor.js';

/** A tensor reference in transit between threads. Import it exactly once, or release it; until then it holds memory. */
export interface TransferableTensor {
  readonly __trinityTensor: bigint;
}

/**
 * A token for `t` (a new reference: `t` itself stays usable and must still be disposed). `owner` tags the export
 * (a worker's threadId) so that everything still registered under it can be freed at once when that worker exits.
 */
export function exportTensor(t: Tensor, owner = 0): TransferableTensor {
  return { __trinityTensor: native.exportTensor(t.handle, owner) };
}

/** The tensor behind a token, as a Tensor of this thread. Throws if the token was already imported or released. */
export function importTensor(token: TransferableTensor): Tensor {
  return fromHandle(native.importTensor(token.__trinityTensor));
}

/** Frees a token that will not be imported; returns false if it was already imported or released. */
export function releaseTensorToken(token: TransferableTensor): boolean {
  return native.releaseExported(token.__trinityTensor);
}

/** Exported tensors not yet imported or released, in this process (all threads): a leak detector for tests. */
export function liveExportCount(): number {
  return native.liveExportCount();
}

function isToken(value: unknown): value is TransferableTensor {
  return value !== null && typeof value === 'object' && typeof (value as TransferableTensor).__trinityTensor === 'bigint';
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype;
}

/** Calls fn on every token inside plain data (arrays and plain objects are walked). */
function forEachToken(value: unknown, fn: (token: TransferableTensor) => void): void {
  if (isToken(value)) fn(value);
  else if (Array.isArray(value)) for (const v of value) forEachToken(v, fn);
  else if (isPlainObject(value)) for (const v of Object.values(value)) forEachToken(v, fn);
}

/**
 * Replaces tensors inside plain data with tokens (arrays and plain objects are walked). If a tensor cannot be
 * exported (it was disposed), the tokens made so far are released before the error is thrown.
 */
export function encodeTensors(value: unknown, owner = 0): unknown {
  const made: TransferableTensor[] = [];
  const encode = (v: unknown): unknown => {
    if (v instanceof Tensor) {
      const token = exportTensor(v, owner);
      made.push(token);
      return token;
    }
    if (Array.isArray(v)) return v.map(encode);
    if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, encode(x)]));
    return v;
  };
  try {
    return encode(value);
  } catch (error) {
    for (const token of made) releaseTensorToken(token);
    throw error;
  }
}

/**
 * Replaces tokens with tensors (the inverse of encodeTensors). If a token cannot be imported, the tensors imported
 * so far are disposed and the remaining tokens released before the error is thrown: nothing of the message leaks.
 */
export function decodeTensors(value: unknown): unknown {
  const imported: Tensor[] = [];
  const decode = (v: unknown): unknown => {
    if (isToken(v)) {
      const t = importTensor(v);
      imported.push(t);
      return t;
    }
    if (Array.isArray(v)) return v.map(decode);
    if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, decode(x)]));
    return v;
  };
  try {
    return decode(value);
  } catch (error) {
    for (const t of imported) t.dispose();
    releaseTokens(value);
    throw error;
  }
}

/** Releases every token inside a message that will not be decoded; returns how many were still registered. */
export function releaseTokens(value: unknown): number {
  let released = 0;
  forEachToken(value, (token) => {
    if (releaseTensorToken(token)) released++;
  });
  return released;
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

type PendingCall = {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
  method: string;
  /** The encoded arguments, whose tokens are released if the call is dropped before the worker imports them. */
  args: unknown[];
};

/** The main-thread side: starts a worker module that calls serveTensorWorker() and calls its handlers. */
export class TensorWorker {
  readonly #worker: Worker;
  /** The worker's threadId, the owner tag of every tensor exported to or from it. */
  readonly #owner: number;
  readonly #pending = new Map<number, PendingCall>();
  readonly #timeoutMs: number;
  readonly #eventListeners = new Map<string, (data: unknown) => void>();
  #nextId = 1;
  #exited: Error | null = null;

  private constructor(worker: Worker, owner: number, timeoutMs: number) {
    this.#worker = worker;
    this.#owner = owner;
    this.#timeoutMs = timeoutMs;
    worker.on('message', (message: Response | WorkerEvent) => {
      if ('event' in message) this.#eventListeners.get(message.event)?.(message.data);
      else this.#settle(message);
    });
    worker.on('error', (error) => this.#failAll(error));
    worker.on('exit', (code) => {
      this.#failAll(new Error(`tensor worker exited with code ${code}`));
      // Node delivers every message the worker posted before 'exit', so whatever is still registered under its tag
      // now will never be imported: arguments it did not read, results it exported but did not send.
      native.releaseExportsOf(this.#owner);
    });
  }

  /** Starts the worker module at `moduleUrl` (a file URL or path; .ts modules run through tsx). */
  static async start(moduleUrl: string | URL, options: TensorWorkerOptions = {}): Promise<TensorWorker> {
    const href = new URL(moduleUrl.toString(), 'file://').href;
    const data = { numThreads: options.numThreads ?? null, trinityWorkerModule: href };
    // TypeScript modules start through a bootstrap that registers tsx on the worker thread.
    const entry = href.endsWith('.ts') ? new URL('./worker-entry.mjs', import.meta.url) : new URL(href);
    const worker = new Worker(entry, { workerData: data });
    const owner = worker.threadId; // -1 once the worker has exited: read it now
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
    return new TensorWorker(worker, owner, options.timeoutMs ?? 600_000);
  }

  /** Calls a handler in the worker; tensors in args and result travel by reference. */
  call<T = unknown>(method: string, args: unknown[] = [], options: { timeoutMs?: number } = {}): Promise<T> {
    if (this.#exited) return Promise.reject(this.#exited);
    const id = this.#nextId++;
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    return new Promise<T>((resolve, reject) => {
      const encoded = encodeTensors(args, this.#owner) as unknown[];
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        // The worker may not have read the arguments yet: it never will now (an import would fail and be answered
        // to nobody).
        releaseTokens(encoded);
        reject(new Error(`tensor worker call '${method}' did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, method, args: encoded });
      try {
        this.#worker.postMessage({ id, method, args: encoded } satisfies Request);
      } catch (error) {
        // e.g. an argument that cannot be cloned: the message never left
        clearTimeout(timer);
        this.#pending.delete(id);
        releaseTokens(encoded);
        throw error;
      }
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
      // The caller timed out: free the tensors of the late answer without importing them.
      if (message.ok) releaseTokens(message.result);
      return;
    }
    this.#pending.delete(message.id);
    clearTimeout(pending.timer);
    // The worker has answered, so it is done reading the arguments: any it did not import (no such handler, say)
    // it never will.
    releaseTokens(pending.args);
    if (!message.ok) {
      const error = new Error(`tensor worker '${pending.method}' failed: ${message.error.message}`);
      if (message.error.stack) error.stack = message.error.stack;
      pending.reject(error);
      return;
    }
    let result: unknown;
    try {
      result = decodeTensors(message.result);
    } catch (error) {
      pending.reject(error as Error);
      return;
    }
    pending.resolve(result);
  }

  #failAll(error: Error): void {
    this.#exited = error;
    for (const [id, pending] of this.#pending) {
      clearTimeout(pending.timer);
      releaseTokens(pending.args);
      pending.reject(error);
      this.#pending.delete(id);
    }
  }
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
      response = { id: request.id, ok: true, result: encodeTensors(result, threadId) };
    } catch (error) {
      response = errorResponse(request.id, error);
    }
    try {
      port.postMessage(response);
    } catch (error) {
      // e.g. a result that cannot be cloned: its tokens never leave, and the caller hears why instead of timing out
      if (response.ok) releaseTokens(response.result);
      port.postMessage(errorResponse(request.id, error));
    }
  });
  port.postMessage('ready');
}

function errorResponse(id: number, error: unknown): Response {
  const e = error as Error;
  return { id, ok: false, error: { message: e.message ?? String(error), ...(e.stack ? { stack: e.stack } : {}) } };
}
