// Priority replay buffer (Trinity-RFT's `replay_buffer: {enable: true, priority_fn, priority_fn_args,
// reuse_cooldown_time}`, trinity/buffer/storage/queue.py AsyncPriorityQueue), one entry per experience:
//
//   priority = model_version − decay · use_count  (+ sigma · N(0, 1) for decay_limit_randomization)
//
// A read hands out the highest-priority experiences (oldest first among equal priority) and counts one use each.
// After a read an experience leaves when it has been used `useCountLimit` times or reuse is off
// (reuseCooldownMs null); otherwise it comes back, with its priority recomputed, after `reuseCooldownMs`.
// When full, a new experience replaces the lowest-priority one if its priority is at least as high, else it is
// dropped (write() reports how many were kept). finishWriting() stops further reuse so the trainer drains it.
//
// state() / loadState() carry the contents across a restart (a checkpoint's `replay`, src/rft/run/stage.ts) as plain
// JSON: each entry's experience, use count, priority (noise included) and sequence number, a cooldown as the
// milliseconds left (restored relative to the new clock), and the noise generator as (seed, draws taken). A buffer
// loaded from state() hands out the same reads as the one it was taken from.
import type { Experience } from '../experience.js';
import { gaussian, seededRandom } from './random.js';
import {
  BufferClosedError,
  BufferTimeoutError,
  checkReadArgs,
  type ExperienceBuffer,
  type ReadOptions,
  Waiters,
} from './types.js';

export type PriorityFnName = 'linear_decay' | 'decay_limit_randomization';

export interface PriorityReplayOptions {
  name?: string;
  /** Most experiences held, cooling ones included (default 10000). */
  capacity?: number;
  priorityFn?: PriorityFnName;
  /** Priority lost per use (priority_fn_args.decay, default 2.0). */
  decay?: number;
  /** Uses after which an experience leaves; 0 = unlimited (default 0 for linear_decay, 3 for decay_limit_randomization). */
  useCountLimit?: number;
  /** Gaussian noise on the priority (decay_limit_randomization only; default 0). */
  sigma?: number;
  /** Time before a read experience can be read again; null = read once (reuse_cooldown_time, default null). */
  reuseCooldownMs?: number | null;
  /** Seed of the priority noise. */
  seed?: number;
}

/** One entry of PriorityReplayState. */
export interface PriorityReplayStateEntry {
  experience: Experience;
  /** Insertion order: among equal priorities the lower (older) one is read first and evicted first. */
  seq: number;
  useCount: number;
  /** As computed when the entry went in (noise included), not recomputed on load. */
  priority: number;
  /** Milliseconds of reuse cooldown left when the state was taken (0: readable). */
  cooldownMs: number;
}

/** A PriorityReplayBuffer's contents as JSON-serialisable data (state(), loadState()). */
export interface PriorityReplayState {
  /** The sequence number the next entry gets (above every entry's). */
  nextSeq: number;
  /** The priority-noise generator: seededRandom(seed) after `draws` draws. */
  noise: { seed: number; draws: number };
  entries: PriorityReplayStateEntry[];
}

interface Entry {
  experience: Experience;
  seq: number;
  useCount: number;
  priority: number;
  /** Date.now() from which it can be read (cooldown). */
  availableAt: number;
}

export class PriorityReplayBuffer implements ExperienceBuffer {
  readonly name: string;
  readonly capacity: number;
  readonly priorityFn: PriorityFnName;
  readonly decay: number;
  readonly useCountLimit: number;
  readonly sigma: number;
  #reuseCooldownMs: number | null;
  #entries: Entry[] = [];
  #seq = 0;
  #finished = false;
  #closed = false;
  #noiseSeed: number;
  #noiseDraws = 0;
  #random: () => number;
  readonly #readers = new Waiters();

  constructor(options: PriorityReplayOptions = {}) {
    this.name = options.name ?? 'replay';
    this.capacity = options.capacity ?? 10000;
    this.priorityFn = options.priorityFn ?? 'linear_decay';
    if (this.priorityFn !== 'linear_decay' && this.priorityFn !== 'decay_limit_randomization') {
      throw new Error(
        `buffer '${this.name}': unknown priority_fn '${String(this.priorityFn)}' (linear_decay, decay_limit_randomization)`,
      );
    }
    this.decay = options.decay ?? 2.0;
    this.useCountLimit = options.useCountLimit ?? (this.priorityFn === 'decay_limit_randomization' ? 3 : 0);
    this.sigma = this.priorityFn === 'decay_limit_randomization' ? (options.sigma ?? 0) : 0;
    this.#reuseCooldownMs = options.reuseCooldownMs ?? null;
    this.#noiseSeed = options.seed ?? 0;
    this.#random = seededRandom(this.#noiseSeed);
    if (!Number.isInteger(this.capacity) || this.capacity < 1) {
      throw new RangeError(`buffer '${this.name}': capacity must be a positive integer, got ${this.capacity}`);
    }
    if (!Number.isInteger(this.useCountLimit) || this.useCountLimit < 0) {
      throw new RangeError(`buffer '${this.name}': useCountLimit must be an integer >= 0, got ${this.useCountLimit}`);
    }
    if (this.#reuseCooldownMs !== null && !(this.#reuseCooldownMs >= 0)) {
      throw new RangeError(`buffer '${this.name}': reuseCooldownMs must be >= 0 or null, got ${this.#reuseCooldownMs}`);
    }
  }

  /** Experiences held, including those cooling down. */
  get size(): number {
    return this.#entries.length;
  }

  /** Experiences a read could take right now. */
  get availableCount(): number {
    const now = Date.now();
    return this.#entries.filter((e) => e.availableAt <= now).length;
  }

  /** The priority an experience with this model version and use count gets (noise excluded). */
  priorityOf(modelVersion: number, useCount: number): number {
    return modelVersion - this.decay * useCount;
  }

  /**
   * The contents as plain data; `throughStep`: only experiences of explored steps <= it (info.step; one without a step
   * counts as later), the ones a checkpoint at that step keeps (later steps are explored again after a resume).
   */
  state(options: { throughStep?: number } = {}): PriorityReplayState {
    const through = options.throughStep ?? Number.POSITIVE_INFINITY;
    const now = Date.now();
    return {
      nextSeq: this.#seq,
      noise: { seed: this.#noiseSeed, draws: this.#noiseDraws },
      entries: this.#entries
        .filter((e) => (e.experience.info.step ?? Number.POSITIVE_INFINITY) <= through)
        .map((e) => ({
          experience: e.experience,
          seq: e.seq,
          useCount: e.useCount,
          priority: e.priority,
          cooldownMs: Math.max(0, e.availableAt - now),
        })),
    };
  }

  /**
   * Replaces the contents with `state` (from state(), possibly through JSON): cooldowns run on from now, the noise
   * generator continues where it was. Entries beyond the capacity leave lowest priority first, as on write.
   */
  loadState(state: PriorityReplayState): void {
    if (this.#closed) throw new BufferClosedError(this.name, 'cannot load state');
    const where = `buffer '${this.name}': replay state`;
    const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
    if (state === null || typeof state !== 'object' || !Array.isArray(state.entries))
      throw new TypeError(`${where} must be an object with an entries array`);
    if (!isCount(state.nextSeq)) throw new TypeError(`${where}.nextSeq must be an integer >= 0, got ${String(state.nextSeq)}`);
    const noise = state.noise as Partial<PriorityReplayState['noise']> | undefined;
    if (!noise || typeof noise.seed !== 'number' || !Number.isFinite(noise.seed) || !isCount(noise.draws))
      throw new TypeError(`${where}.noise must be {seed: number, draws: integer >= 0}, got ${JSON.stringify(noise)}`);
    const seqs = new Set<number>();
    const entries = state.entries.map((e, i): Entry => {
      const at = `${where}.entries[${i}]`;
      if (e === null || typeof e !== 'object') throw new TypeError(`${at} must be an object`);
      const x = e.experience;
      if (x === null || typeof x !== 'object' || typeof x.eid !== 'string' || x.info === null || typeof x.info !== 'object')
        throw new TypeError(`${at}.experience must be an experience (eid, info, ...)`);
      if (!isCount(e.seq) || e.seq >= state.nextSeq)
        throw new TypeError(`${at}.seq must be an integer in [0, nextSeq ${state.nextSeq}), got ${String(e.seq)}`);
      if (seqs.has(e.seq)) throw new TypeError(`${at}.seq ${e.seq} is taken by an earlier entry`);
      seqs.add(e.seq);
      if (!isCount(e.useCount)) throw new TypeError(`${at}.useCount must be an integer >= 0, got ${String(e.useCount)}`);
      if (typeof e.priority !== 'number' || !Number.isFinite(e.priority))
        throw new TypeError(`${at}.priority must be a finite number, got ${String(e.priority)}`);
      if (typeof e.cooldownMs !== 'number' || !(e.cooldownMs >= 0 && e.cooldownMs < Number.POSITIVE_INFINITY))
        throw new TypeError(`${at}.cooldownMs must be a finite number >= 0, got ${String(e.cooldownMs)}`);
      return { experience: x, seq: e.seq, useCount: e.useCount, priority: e.priority, availableAt: 0 };
    });
    const now = Date.now();
    entries.forEach((entry, i) => {
      entry.availableAt = now + (state.entries[i] as PriorityReplayStateEntry).cooldownMs;
    });
    // over capacity (a resume with a smaller one): the lowest priority leaves first, the older on ties, as on write
    entries.sort((a, b) => b.priority - a.priority || b.seq - a.seq);
    this.#entries = entries.slice(0, this.capacity).sort((a, b) => a.seq - b.seq);
    this.#seq = state.nextSeq;
    this.#noiseSeed = noise.seed;
    this.#random = seededRandom(noise.seed);
    for (let i = 0; i < noise.draws; i++) this.#random();
    this.#noiseDraws = noise.draws;
    this.#readers.notifyAll();
  }

  async write(experiences: readonly Experience[]): Promise<number> {
    if (this.#closed) throw new BufferClosedError(this.name, 'cannot write');
    if (this.#finished) throw new Error(`buffer '${this.name}': write after finishWriting()`);
    let kept = 0;
    for (const experience of experiences) {
      if (this.#insert(experience, experience.info.useCount ?? 0, Date.now())) kept++;
    }
    if (kept > 0) this.#readers.notifyAll();
    return kept;
  }

  async read(n: number, options: ReadOptions): Promise<Experience[]> {
    const minCount = checkReadArgs(this.name, n, options);
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      if (this.#closed) throw new BufferClosedError(this.name, `read of ${n} experiences`);
      const now = Date.now();
      const available = this.#entries.filter((e) => e.availableAt <= now);
      const cooling = this.#entries.length - available.length;
      if (available.length >= n || (this.#finished && cooling === 0)) return this.#take(available, n);
      if (now >= deadline) {
        if (available.length >= minCount) return this.#take(available, n);
        throw new BufferTimeoutError(
          this.name,
          `${n} experiences (${available.length} available, ${cooling} cooling down, at least ${minCount} accepted)`,
          options.timeoutMs,
        );
      }
      const nextCooled = Math.min(...this.#entries.filter((e) => e.availableAt > now).map((e) => e.availableAt));
      await this.#readers.wait(Math.min(deadline, nextCooled));
    }
  }

  async finishWriting(): Promise<void> {
    this.#finished = true;
    this.#reuseCooldownMs = null;
    this.#readers.notifyAll();
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#readers.fail(new BufferClosedError(this.name, 'closed while waiting'));
  }

  #take(available: Entry[], n: number): Experience[] {
    available.sort((a, b) => b.priority - a.priority || a.seq - b.seq);
    const chosen = available.slice(0, n);
    const chosenSet = new Set(chosen);
    this.#entries = this.#entries.filter((e) => !chosenSet.has(e));
    const now = Date.now();
    return chosen.map((entry) => {
      const useCount = entry.useCount + 1;
      const experience: Experience = { ...entry.experience, info: { ...entry.experience.info, useCount } };
      const spent = this.useCountLimit > 0 && useCount >= this.useCountLimit;
      if (!spent && this.#reuseCooldownMs !== null) this.#insert(entry.experience, useCount, now + this.#reuseCooldownMs);
      return experience;
    });
  }

  /** Inserts one entry, evicting the lowest-priority one when full; false when dropped. */
  #insert(experience: Experience, useCount: number, availableAt: number): boolean {
    let priority = this.priorityOf(experience.info.modelVersion ?? 0, useCount);
    if (this.sigma > 0)
      priority +=
        this.sigma *
        gaussian(() => {
          this.#noiseDraws++;
          return this.#random();
        });
    if (this.#entries.length >= this.capacity) {
      let lowest = 0;
      this.#entries.forEach((e, i) => {
        const l = this.#entries[lowest] as Entry;
        if (e.priority < l.priority || (e.priority === l.priority && e.seq < l.seq)) lowest = i;
      });
      if ((this.#entries[lowest] as Entry).priority > priority) return false;
      this.#entries.splice(lowest, 1);
    }
    this.#entries.push({ experience, seq: this.#seq++, useCount, priority, availableAt });
    return true;
  }
}
