// Captured decode steps of a RolloutEngine: the model's forward for one token per running row, recorded once per
// shape (../torch/capture.ts) and replayed in one native call, instead of ~10 native calls per layer from JavaScript.
//
// A step's shape is its KV-cache plan's shapeKey (../model/kv-cache.ts): batch rows, the key length rounded up to
// the engine's decodeKeyBucket positions, how the rows read the cache. Per-step values (the tokens, slots, cache positions, RoPE
// offsets) are the captured step's inputs. A shape seen for the first time runs eagerly while it is captured; a step
// that cannot be replayed (a dynamic-RoPE model reads a value back, packing a weight ran inside it) runs eagerly, and
// after two such captures its shape stays eager. Weights and caches are used by reference: a weight sync must call
// invalidate(), since a captured step holds the packed weights the eager path would pack again.
import * as torch from '../torch/index.js';

/** Captured steps kept at most (least recently replayed go first). */
const MAX_STEPS = 64;
/** Captures of one shape that came back unreplayable before the shape stays eager. */
const MAX_FAILED_CAPTURES = 2;

interface Entry {
  step: torch.CapturedStep | null;
  failures: number;
  reason: string | null;
}

export interface DecodeStepStats {
  /** Steps run by a replay. */
  replays: number;
  /** Steps run eagerly while being captured. */
  captures: number;
  /** Steps run eagerly (capture off, or a shape that cannot be replayed). */
  eager: number;
  /** Captured steps held now. */
  held: number;
  /** Why the last unreplayable capture was not replayable (null: none was). */
  lastReason: string | null;
}

export class DecodeSteps {
  readonly #entries = new Map<string, Entry>();
  readonly #stats: DecodeStepStats = { replays: 0, captures: 0, eager: 0, held: 0, lastReason: null };

  /** Runs the step of shape `key`: a replay over `inputs` if captured, else `forward` (capturing it when worth it). */
  run(key: string, inputs: readonly torch.Tensor[], forward: () => torch.Tensor[]): torch.Tensor[] {
    const entry = this.#entries.get(key);
    if (entry?.step) {
      this.#entries.delete(key); // re-inserted: the Map's order is the replay order, oldest first
      this.#entries.set(key, entry);
      this.#stats.replays++;
      return entry.step.replay(inputs);
    }
    if (entry !== undefined && entry.failures >= MAX_FAILED_CAPTURES) {
      this.#stats.eager++;
      return forward();
    }
    const { outputs, step, reason } = torch.capture(inputs, forward);
    this.#stats.captures++;
    if (step === null) {
      this.#stats.lastReason = reason;
      this.#entries.set(key, { step: null, failures: (entry?.failures ?? 0) + 1, reason });
      return outputs;
    }
    this.#entries.set(key, { step, failures: 0, reason: null });
    for (const [oldKey, old] of this.#entries) {
      if (this.#held() <= MAX_STEPS) break;
      if (old.step === null) continue;
      old.step.dispose();
      this.#entries.delete(oldKey);
    }
    return outputs;
  }

  /** Drops every captured step (after the model's weights changed; on close). */
  invalidate(): void {
    for (const entry of this.#entries.values()) entry.step?.dispose();
    this.#entries.clear();
  }

  get stats(): DecodeStepStats {
    return { ...this.#stats, held: this.#held() };
  }

  #held(): number {
    let held = 0;
    for (const entry of this.#entries.values()) if (entry.step !== null) held++;
    return held;
  }
}
