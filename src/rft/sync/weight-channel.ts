// The weight channel between trainer and explorer (Trinity-RFT's synchronizer). The trainer side publishes weights
// versions; the explorer side waits for the version it needs, or (sync_style explorer_driven) asks for the newest
// ones. Three implementations:
//
//   LocalWeightChannel    mode both (./local-channel.ts): trainer and explorer in one process. Publishing moves the weights into the
//                         explorer's engine right away — by reference (sync_method memory, embedded engine) or through
//                         a folder the engine loads (sync_method checkpoint; an external OpenAI-compatible server) —
//                         between explorer steps, never in the middle of one (a lock).
//   FolderWeightPublisher mode train: a trainer process writes version folders + a pointer (./sync-folder.ts) for
//   FolderWeightReceiver  mode explore: an explorer process that follows the pointer.
//   PostgresWeightPublisher / PostgresWeightReceiver  the same with the pointer, the sync requests and the finished
//                         marker in the PostgreSQL buffer's database (./postgres-channel.ts).
//
// Modes train and explore meet through a ProcessWeightChannel (the job folder, or the database), opened by
// ./process-channel.ts the way the shared buffer is chosen: by the buffer's path.
//
// A new way to move weights (NCCL broadcast) is a new implementation of these two interfaces; an engine pool is one
// engine here (its syncWeights/syncWeightsFromDir reach every member).
//
// sync_style fully_async: the explorer's engine is behind a WeightSwapGate (../workflow/weight-swap-gate.ts) and
// every implementation loads new weights through it, in the middle of an explore step. In one process publishing
// swaps at once; an explorer process follows the published versions as they come (followPublishedWeights).
import type { EmbeddedEnginePool, WorkerRolloutEngine } from '../../engine/index.js';
import type { OpenAIRemoteEngine, RemoteEnginePool } from '../../openai/index.js';
import type { Tensor } from '../../torch/index.js';
import type { WeightSwapGate } from '../workflow/index.js';

/**
 * What the explorer needs of its engine: rollouts, weights from a folder, close. A pool (engine_num > 1, a list of
 * base_url, engine_process) is one engine here: its syncWeights/syncWeightsFromDir reach every member.
 */
export type ExplorerEngine = WorkerRolloutEngine | EmbeddedEnginePool | OpenAIRemoteEngine | RemoteEnginePool;

/** The trainer's side of the channel. */
export interface WeightPublisher {
  /** Makes the trainer's current weights available to the explorer as `version`. */
  publish(version: number): Promise<void>;
  /** explorer_driven: true while the explorer waits for an answer to its request for weights. */
  requestPending(): boolean;
  /** Answers the pending request (after publishing, or without new weights when none are newer). */
  answerRequest(): void;
  /** The trainer stopped after `lastStep`: an explorer waiting for more weights stops waiting. */
  finish(lastStep: number): void;
}

/** The explorer's side of the channel. */
export interface WeightReceiver {
  /** The weights version loaded in the explorer's engine. */
  readonly version: number;
  /** Resolves once weights of at least `version` are loaded; `what` names the wait in its timeout error. */
  waitForVersion(version: number, what: string): Promise<void>;
  /** explorer_driven: asks the trainer for its newest weights and resolves once it answered. */
  requestWeights(what: string): Promise<void>;
  /** Runs `work` (an explore or eval step) with no weight update in the middle of it (fully_async: as it comes). */
  withWeights<T>(work: () => Promise<T>): Promise<T>;
  /** The trainer said it stopped (it publishes nothing more). */
  readonly trainerFinished: boolean;
}

/** A wait for weights ran past the synchronizer's timeout (sync_timeout). */
export class SyncTimeoutError extends Error {
  override name = 'SyncTimeoutError';
}

/**
 * fully_async in an explorer process: loads every version the trainer process publishes as soon as it is seen
 * (through the receiver's gate, mid-step) until the trainer finishes or `signal` aborts (the explorer loop ended). A
 * trainer slower than sync_timeout between two versions is waited for again; any other failure (a folder that does
 * not load) is the stage's.
 */
export async function followPublishedWeights(receiver: WeightReceiver, signal: AbortSignal): Promise<void> {
  while (!signal.aborted && !receiver.trainerFinished) {
    try {
      await receiver.waitForVersion(receiver.version + 1, `weights version ${receiver.version + 1} (sync_style fully_async)`);
    } catch (error) {
      if (signal.aborted || receiver.trainerFinished) return;
      if (!(error instanceof SyncTimeoutError)) throw error;
    }
  }
}

/**
 * What publishing needs of the trainer (src/rft/trainer/trainer.ts's TrainerClient has it): its weights written as a
 * Hugging Face folder, its LoRA adapter as a PEFT folder, or its weights by reference (beginSync, copied, endSync).
 * The channel names only these, so the synchronizer sits below the trainer loop that publishes through it.
 */
export interface WeightSource {
  saveWeights(dir: string): Promise<void>;
  saveAdapter(dir: string): Promise<void>;
  /** The weights to copy (by reference); endSync() once they are copied. */
  beginSync(): Promise<Map<string, Tensor>>;
  endSync(): Promise<void>;
}

/** What publishing a folder needs of the trainer. */
export type WeightSaver = Pick<WeightSource, 'saveWeights'>;

/** The newest published weights: their version and the folder (an absolute path) that holds them. */
export interface SyncPointer {
  version: number;
  dir: string;
}

/** An explorer process's receiver: the engine it loads published folders into, and how long it waits. */
export interface ProcessReceiverOptions {
  engine: Pick<ExplorerEngine, 'syncWeightsFromDir'>;
  /** The version the engine starts with. */
  startVersion: number;
  timeoutMs: number;
  signal?: AbortSignal;
  /** Called after each update with the new version (the model handle stamps rollouts with it). */
  onVersion?: (version: number) => void;
  /** fully_async: the gate in front of the engine, through which updates happen mid-step. */
  swapGate?: WeightSwapGate | null;
}

/**
 * Where a trainer process (mode train) and its explorer processes (mode explore) meet: the sync pointer, the sync
 * requests and the trainer's finished marker. The weights themselves are folders on storage both can read.
 */
export interface ProcessWeightChannel {
  /** Where the pointer lives, for messages. */
  readonly location: string;
  /** The newest published weights (an explorer starts from them), or null when none were published. */
  latest(): Promise<SyncPointer | null>;
  /** The trainer process's side (a restarted trainer: explorers wait for it again). */
  publisher(trainer: WeightSaver): WeightPublisher;
  /** An explorer process's side. */
  receiver(options: ProcessReceiverOptions): WeightReceiver;
  /** Waits for what the publisher still writes, then lets go of connections. */
  close(): Promise<void>;
}

/** The explorer's engine as started for the stage's engine settings (the `type` says which it is). */
export type StartedEngine =
  | { type: 'embedded'; engine: WorkerRolloutEngine | EmbeddedEnginePool; weightSync: 'memory' | 'checkpoint' }
  | { type: 'openai'; engine: OpenAIRemoteEngine | RemoteEnginePool };

/**
 * How a local channel moves weights `version` from the trainer into the explorer's engine. `adapter`: a LoRA run on a
 * pool of servers (a list of base_url, engine_process) gets the adapter alone, loaded by every server as `name`
 * (vLLM's dynamic adapter API), and rollouts ask for model `name`.
 */
export type WeightTransport =
  | { method: 'memory'; engine: WorkerRolloutEngine | EmbeddedEnginePool }
  | { method: 'checkpoint'; engine: ExplorerEngine; jobDir: string }
  | { method: 'adapter'; engine: RemoteEnginePool; jobDir: string; name: string };

/**
 * By reference into the embedded engine when the settings say memory; a LoRA run's adapter (`loraAdapterName`, null
 * without LoRA) into a pool of servers; otherwise a folder the engine loads.
 */
export function weightTransport(started: StartedEngine, jobDir: string, loraAdapterName: string | null = null): WeightTransport {
  if (started.type === 'embedded' && started.weightSync === 'memory') return { method: 'memory', engine: started.engine };
  if (started.type === 'openai' && loraAdapterName !== null && 'syncLoraAdapter' in started.engine)
    return { method: 'adapter', engine: started.engine, jobDir, name: loraAdapterName };
  return { method: 'checkpoint', engine: started.engine, jobDir };
}

/** A mutex: weight updates and explorer steps never overlap. */
export class Lock {
  #tail: Promise<void> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(fn);
    this.#tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

/**
 * A value that loops wait on: `waitUntil` resolves as soon as a change makes its condition true (no polling), or
 * rejects with an error naming what it waited for at its deadline or when `signal` aborts.
 */
export class Signal {
  readonly #waiters = new Set<() => void>();

  /** Wakes every waiter to re-check its condition. */
  notify(): void {
    for (const wake of [...this.#waiters]) wake();
  }

  waitUntil(ready: () => boolean, timeoutMs: number, what: string, signal?: AbortSignal): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const finish = (error?: Error) => {
        clearTimeout(timer);
        this.#waiters.delete(check);
        signal?.removeEventListener('abort', onAbort);
        if (error) reject(error);
        else resolve();
      };
      const check = () => {
        if (ready()) finish();
      };
      const onAbort = () => finish(new Error(`stopped while waiting for ${what}`));
      const timer = setTimeout(
        () => finish(new SyncTimeoutError(`timed out after ${timeoutMs} ms waiting for ${what}`)),
        timeoutMs,
      );
      this.#waiters.add(check);
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort);
    });
  }
}
