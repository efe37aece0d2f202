// The metrics of one train step while it runs. Modules report tensors (../algorithm/metrics.ts): reading one waits for
// the device, so the step keeps them, with the weights it sums them by, and reads them all in one transfer when it
// ends. The sums are then folded on the host in the order they were added, in float64: the same numbers as reading
// each value as it came.
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { type MetricValue, readScalars } from '../algorithm/metrics.js';

interface Entry {
  /**
   * add: a sum that skips non-finite terms (a key with none is left out); total: a plain sum (a NaN shows); set: the
   * one value as it is.
   */
  kind: 'add' | 'total' | 'set';
  terms: { value: number | Tensor; weight: number }[];
}

export class StepMetrics {
  readonly #entries = new Map<string, Entry>();

  /** key += value × weight, where value turns out finite (a module's metric: one NaN term does not hide the rest). */
  add(key: string, value: MetricValue, weight = 1): void {
    this.#entry(key, 'add').terms.push({ value: hold(value), weight });
  }

  /** key += value × weight, whatever value turns out to be (the loss: a NaN must show). */
  total(key: string, value: MetricValue, weight = 1): void {
    this.#entry(key, 'total').terms.push({ value: hold(value), weight });
  }

  /** key = value (replacing what it had). */
  set(key: string, value: MetricValue): void {
    this.#release(this.#entries.get(key));
    this.#entries.set(key, { kind: 'set', terms: [{ value: hold(value), weight: 1 }] });
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  /** Every key's number (tensors read in one transfer per device), then frees what it held. */
  read(): Map<string, number> {
    const tensors: Tensor[] = [];
    for (const entry of this.#entries.values())
      for (const term of entry.terms) if (typeof term.value !== 'number') tensors.push(term.value);
    const values = readScalars(tensors);
    let k = 0;
    const out = new Map<string, number>();
    for (const [key, entry] of this.#entries) {
      const numbers = entry.terms.map((t) => ({
        value: typeof t.value === 'number' ? t.value : (values[k++] as number),
        weight: t.weight,
      }));
      if (entry.kind === 'set') {
        out.set(key, (numbers[0] as { value: number }).value);
        continue;
      }
      let sum: number | null = null;
      for (const { value, weight } of numbers)
        if (entry.kind === 'total' || Number.isFinite(value)) sum = (sum ?? 0) + value * weight;
      if (sum !== null) out.set(key, sum);
    }
    this.dispose();
    return out;
  }

  /** Frees the tensors held (read() does it too). */
  dispose(): void {
    for (const entry of this.#entries.values()) this.#release(entry);
    this.#entries.clear();
  }

  /** key's entry of `kind`, replacing one of another kind. */
  #entry(key: string, kind: 'add' | 'total'): Entry {
    let entry = this.#entries.get(key);
    if (entry === undefined || entry.kind !== kind) {
      this.#release(entry);
      entry = { kind, terms: [] };
      this.#entries.set(key, entry);
    }
    return entry;
  }

  #release(entry: Entry | undefined): void {
    for (const term of entry?.terms ?? []) if (typeof term.value !== 'number') term.value.dispose();
  }
}

/** A tensor value kept past the scope that made it (detached: no graph is held). */
function hold(value: MetricValue): number | Tensor {
  return typeof value === 'number' ? value : torch.keep(torch.noGrad(() => value.detach()));
}
