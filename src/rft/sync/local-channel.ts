// Mode both: trainer and explorer in one process share a LocalWeightChannel (see ./weight-channel.ts). Publishing
// moves the weights into the explorer's engine right away, between explorer steps (a lock), and wakes the explorer
// waiting for that version (an event, no polling). sync_style fully_async (a swapGate): between two model calls
// instead, in the middle of an explore step (../workflow/weight-swap-gate.ts); steps hold no lock.
import type { Tensor } from '../../torch/index.js';
import type { WeightSwapGate } from '../workflow/index.js';
import { publishAdapterToSyncFolder, publishToSyncFolder } from './sync-folder.js';
import {
  Lock,
  Signal,
  type WeightPublisher,
  type WeightReceiver,
  type WeightSource,
  type WeightTransport,
} from './weight-channel.js';

export interface LocalChannelOptions {
  trainer: WeightSource;
  transport: WeightTransport;
  /** The version the engine starts with (the resumed step, or 0). */
  startVersion: number;
  timeoutMs: number;
  signal?: AbortSignal;
  /** Called after each update with the new version (the model handle stamps rollouts with it). */
  onVersion?: (version: number) => void;
  /** fully_async: the gate in front of the explorer's engine; publishing swaps through it, mid-step. */
  swapGate?: WeightSwapGate | null;
}

/** Mode both: trainer and explorer in one process. */
export class LocalWeightChannel implements WeightPublisher, WeightReceiver {
  readonly #options: LocalChannelOptions;
  readonly #lock = new Lock();
  readonly #changed = new Signal();
  #version: number;
  #requested = false;
  #trainerFinished = false;
  /** The adapter folder the servers loaded last (transport adapter): kept while the next one is written. */
  #adapterDir: string | undefined;

  constructor(options: LocalChannelOptions) {
    this.#options = options;
    this.#version = options.startVersion;
  }

  get version(): number {
    return this.#version;
  }

  /** Runs a weight update: between model calls (fully_async), else between explorer steps. */
  #update(load: () => Promise<void>): Promise<void> {
    const gate = this.#options.swapGate;
    return gate ? gate.swap(load) : this.#lock.run(load);
  }

  publish(version: number): Promise<void> {
    return this.#update(async () => {
      const { transport, trainer, timeoutMs } = this.#options;
      if (transport.method === 'memory') {
        const weights: Map<string, Tensor> = await trainer.beginSync();
        try {
          await transport.engine.syncWeights(weights, { timeoutMs });
        } finally {
          for (const t of weights.values()) t.dispose();
          await trainer.endSync();
        }
      } else if (transport.method === 'adapter') {
        const dir = await publishAdapterToSyncFolder(trainer, transport.jobDir, version, this.#adapterDir);
        await transport.engine.syncLoraAdapter(transport.name, dir, { timeoutMs });
        this.#adapterDir = dir;
      } else {
        const dir = await publishToSyncFolder(trainer, transport.jobDir, version);
        await transport.engine.syncWeightsFromDir(dir, { timeoutMs });
      }
      this.#version = version;
      this.#options.onVersion?.(version);
      this.#changed.notify();
    });
  }

  requestPending(): boolean {
    return this.#requested;
  }

  answerRequest(): void {
    this.#requested = false;
    this.#changed.notify();
  }

  finish(): void {
    this.#trainerFinished = true;
    this.#changed.notify();
  }

  get trainerFinished(): boolean {
    return this.#trainerFinished;
  }

  waitForVersion(version: number, what: string): Promise<void> {
    return this.#changed.waitUntil(
      () => this.#version >= version || this.#trainerFinished,
      this.#options.timeoutMs,
      `${what} (have weights version ${this.#version})`,
      this.#options.signal,
    );
  }

  requestWeights(what: string): Promise<void> {
    this.#requested = true;
    this.#changed.notify();
    return this.#changed.waitUntil(
      () => !this.#requested || this.#trainerFinished,
      this.#options.timeoutMs,
      what,
      this.#options.signal,
    );
  }

  withWeights<T>(work: () => Promise<T>): Promise<T> {
    return this.#options.swapGate ? work() : this.#lock.run(work);
  }
}
