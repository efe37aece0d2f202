// sync_style fully_async: the explorer's weights are swapped in the middle of an explore step, between two model
// calls, never under one. The gate wraps the rollout model's backend (what EngineModelHandle and its OpenAI endpoint
// call): every call (generate, chat, score) passes through it, and a swap (../sync/'s channels loading new weights
// and setting the new version) runs only while no call is in flight:
//
//   swap requested   new calls wait at the gate; the calls in flight finish on the weights they started with
//   none in flight   one event-loop turn later (setImmediate) the swap runs: weights loaded, version set
//   swap done        the waiting calls go on, on the new weights
//
// So a call runs wholly on one weights version, and the version a caller reads right after its call returns (the
// handle's modelVersion, in the same turn: its promise continuations run before the swap's setImmediate) is the one
// that served it: the rollout model's stamps (EngineModelHandle, the OpenAI endpoint's recorded turns, a workflow
// thread's replies) read it there. Swaps run one at a time, in the order asked.
import type { OpenAIBackend } from '../../openai/index.js';
import type { RolloutBackend } from './model-handle.js';

/** A backend the gate wraps: the handle's, with what its OpenAI endpoint reads besides (context length, score). */
export type GatedBackend = RolloutBackend & Partial<Pick<OpenAIBackend, 'maxLength' | 'score'>>;

export class WeightSwapGate {
  /** Calls in flight. */
  #inFlight = 0;
  /** Swaps asked for and not done. */
  #swapsPending = 0;
  /** While swaps are pending: resolves when the last is done (new calls wait on it). */
  #closed: Promise<void> | null = null;
  #open: () => void = () => {};
  /** The running swap's wake-up once no call is in flight. */
  #drained: (() => void) | null = null;
  /** The last swap asked for (the next one runs after it). */
  #swaps: Promise<void> = Promise.resolve();

  /** Runs `load` (load the new weights, set the version) once no model call is in flight; see the header. */
  swap<T>(load: () => Promise<T>): Promise<T> {
    // closed from now on: a call made after this one waits for the new weights
    if (this.#swapsPending++ === 0)
      this.#closed = new Promise<void>((resolve) => {
        this.#open = resolve;
      });
    const swapped = this.#swaps
      .then(async () => {
        if (this.#inFlight > 0) await new Promise<void>((resolve) => (this.#drained = resolve));
        // a turn after the last call returned: its caller has read the version that served it
        await new Promise<void>((resolve) => setImmediate(resolve));
        return await load();
      })
      .finally(() => {
        if (--this.#swapsPending > 0) return;
        this.#closed = null;
        this.#open();
      });
    this.#swaps = swapped.then(
      () => undefined,
      () => undefined,
    );
    return swapped;
  }

  /** `backend` with every call passing through the gate (tokenizer and sizes read from it as they are). */
  gated(backend: GatedBackend): GatedBackend {
    const through = <T>(call: () => Promise<T>) => this.#through(call);
    const gated: GatedBackend = {
      get tokenizer() {
        return backend.tokenizer;
      },
      get vocabSize() {
        return backend.vocabSize;
      },
      get maxLength() {
        return backend.maxLength;
      },
      generate: (request) => through(() => backend.generate(request)),
      chat: (messages, options) => through(() => backend.chat(messages, options)),
    };
    const score = backend.score?.bind(backend);
    if (score) gated.score = (tokenIds, options) => through(() => score(tokenIds, options));
    return gated;
  }

  async #through<T>(call: () => Promise<T>): Promise<T> {
    while (this.#closed !== null) await this.#closed;
    this.#inFlight++;
    try {
      return await call();
    } finally {
      this.#inFlight--;
      if (this.#inFlight === 0 && this.#drained !== null) {
        const wake = this.#drained;
        this.#drained = null;
        wake();
      }
    }
  }
}
