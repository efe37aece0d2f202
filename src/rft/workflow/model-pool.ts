// The workflow runner's leases on its rollout models: each model serves at most runnerPerModel runs at once
// (Trinity-RFT's explorer.runner_per_model), a run goes to the model with the most free runners, and runs waiting
// for a model are served in order (a waiter whose signal aborts leaves the queue).
import type { ModelHandle } from './types.js';

/** At most `perModel` leases per model; a lease goes to the model with the most free runners, waiters in order. */
export class ModelPool {
  readonly #models: readonly ModelHandle[];
  readonly #busy: number[];
  readonly #perModel: number;
  readonly #waiters: { grant: (index: number) => void }[] = [];

  constructor(models: readonly ModelHandle[], perModel: number) {
    this.#models = models;
    this.#perModel = perModel;
    this.#busy = models.map(() => 0);
  }

  get busy(): number {
    return this.#busy.reduce((a, b) => a + b, 0);
  }

  acquire(signal?: AbortSignal): Promise<{ model: ModelHandle; release: () => void }> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const waiter = {
        grant: (index: number) => {
          signal?.removeEventListener('abort', onAbort);
          let released = false;
          resolve({
            model: this.#models[index] as ModelHandle,
            release: () => {
              if (released) return;
              released = true;
              (this.#busy[index] as number)--;
              this.#dispatch();
            },
          });
        },
      };
      const onAbort = () => {
        const at = this.#waiters.indexOf(waiter);
        if (at >= 0) this.#waiters.splice(at, 1);
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
      this.#dispatch();
    });
  }

  #dispatch(): void {
    while (this.#waiters.length > 0) {
      let best = -1;
      for (let i = 0; i < this.#busy.length; i++) {
        if ((this.#busy[i] as number) < this.#perModel && (best < 0 || (this.#busy[i] as number) < (this.#busy[best] as number)))
          best = i;
      }
      if (best < 0) return;
      (this.#busy[best] as number)++;
      (this.#waiters.shift() as { grant: (index: number) => void }).grant(best);
    }
  }
}
