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
//
// The rules live in ReplayEntries, storage-free: the same class runs the replay over the shared sql buffer
// (./sql-replay.ts), whose state lives in the database instead of a checkpoint.
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

/** What the replay does, resolved from PriorityReplayOptions (defaults applied, values checked). */
export interface ReplayPolicy {
  name: string;
  capacity: number;
  priorityFn: PriorityFnName;
  decay: number;
  useCountLimit: number;
  sigma: number;
  reuseCooldownMs: number | null;
  seed: number;
}

/** PriorityReplayOptions with their defaults, checked (errors name the buffer). */
export function resolveReplayPolicy(options: PriorityReplayOptions = {}): ReplayPolicy {
  const name = options.name ?? 'replay';
  const priorityFn = options.priorityFn ?? 'linear_decay';
  if (priorityFn !== 'linear_decay' && priorityFn !== 'decay_limit_randomization') {
    throw new Error(`buffer '${name}': unknown priority_fn '${String(priorityFn)}' (linear_decay, decay_limit_randomization)`);
  }
  const policy: ReplayPolicy = {
    name,
    capacity: options.capacity ?? 10000,
    priorityFn,
    decay: options.decay ?? 2.0,
    useCountLimit: options.useCountLimit ?? (priorityFn === 'decay_limit_randomization' ? 3 : 0),
    sigma: priorityFn === 'decay_limit_randomization' ? (options.sigma ?? 0) : 0,
    reuseCooldownMs: options.reuseCooldownMs ?? null,
    seed: options.seed ?? 0,
  };
  if (!Number.isInteger(policy.capacity) || policy.capacity < 1) {
    throw new RangeError(`buffer '${name}': capacity must be a positive integer, got ${policy.capacity}`);
  }
  if (!Number.isInteger(policy.useCountLimit) || policy.useCountLimit < 0) {
    throw new RangeError(`buffer '${name}': useCountLimit must be an integer >= 0, got ${policy.useCountLimit}`);
  }
  if (policy.reuseCooldownMs !== null && !(policy.reuseCooldownMs >= 0)) {
    throw new RangeError(`buffer '${name}': reuseCooldownMs must be >= 0 or null, got ${policy.reuseCooldownMs}`);
  }
  return policy;
}

/** One experience in the replay; `payload` is the experience itself (in memory) or its row id (./sql-replay.ts). */
export interface ReplayEntry<P> {
  payload: P;
  /** The experience's info.modelVersion (0 when absent): its priority's base. */
  modelVersion: number;
  /** Insertion order: among equal priorities the lower (older) one is read first and evicted first. */
  seq: number;
  useCount: number;
  /** As computed when the entry went in (noise included). */
  priority: number;
  /** Date.now() from which it can be read (cooldown). */
  availableAt: number;
}

/** Told every entry that goes in (insert, re-insert after a use) and every one that leaves (taken, evicted). */
export interface ReplayListener<P> {
  put(entry: ReplayEntry<P>): void;
  drop(entry: ReplayEntry<P>): void;
}

/**
 * The replay's rules over its entries, synchronous and storage-free: the in-memory PriorityReplayBuffer and the SQL
 * replay (./sql-replay.ts) both run these, so they hand out the same experiences in the same order.
 */
export class ReplayEntries<P> {
  readonly policy: ReplayPolicy;
  #entries: ReplayEntry<P>[] = [];
  #seq = 0;
  #noiseSeed: number;
  #noiseDraws = 0;
  #random: () => number;
  listener: ReplayListener<P> | null = null;

  constructor(policy: ReplayPolicy) {
    this.policy = policy;
    this.#noiseSeed = policy.seed;
    this.#random = seededRandom(policy.seed);
  }

  get entries(): readonly ReplayEntry<P>[] {
    return this.#entries;
  }

  /** The sequence number the next entry gets. */
  get nextSeq(): number {
    return this.#seq;
  }

  /** The priority-noise generator: seededRandom(seed) after `draws` draws. */
  get noise(): { seed: number; draws: number } {
    return { seed: this.#noiseSeed, draws: this.#noiseDraws };
  }

  priorityOf(modelVersion: number, useCount: number): number {
    return modelVersion - this.policy.decay * useCount;
  }

  availableCount(now: number): number {
    return this.#entries.filter((e) => e.availableAt <= now).length;
  }

  /** When the next cooling entry can be read (Infinity: none cools). */
  nextAvailableAt(now: number): number {
    return Math.min(...this.#entries.filter((e) => e.availableAt > now).map((e) => e.availableAt));
  }

  /**
   * Inserts one entry (priority from its model version and use count, plus noise), evicting the lowest-priority one
   * when full; false when it is dropped instead (lower than everything held).
   */
  insert(payload: P, modelVersion: number, useCount: number, availableAt: number): boolean {
    let priority = this.priorityOf(modelVersion, useCount);
    if (this.policy.sigma > 0)
      priority +=
        this.policy.sigma *
        gaussian(() => {
          this.#noiseDraws++;
          return this.#random();
        });
    if (this.#entries.length >= this.policy.capacity) {
      let lowest = 0;
      this.#entries.forEach((e, i) => {
        const l = this.#entries[lowest] as ReplayEntry<P>;
        if (e.priority < l.priority || (e.priority === l.priority && e.seq < l.seq)) lowest = i;
      });
      if ((this.#entries[lowest] as ReplayEntry<P>).priority > priority) return false;
      const [evicted] = this.#entries.splice(lowest, 1);
      this.listener?.drop(evicted as ReplayEntry<P>);
    }
    const entry = { payload, modelVersion, seq: this.#seq++, useCount, priority, availableAt };
    this.#entries.push(entry);
    this.listener?.put(entry);
    return true;
  }

  /**
   * Takes the `n` highest-priority readable entries (oldest first on ties) and counts one use each; one not spent
   * (useCountLimit) comes back after `reuseCooldownMs` (null: it leaves). Returns the taken entries with their new
   * use counts.
   */
  take(n: number, now: number, reuseCooldownMs: number | null): ReplayEntry<P>[] {
    const available = this.#entries.filter((e) => e.availableAt <= now);
    available.sort((a, b) => b.priority - a.priority || a.seq - b.seq);
    const chosen = available.slice(0, n);
    const chosenSet = new Set(chosen);
    this.#entries = this.#entries.filter((e) => !chosenSet.has(e));
    return chosen.map((entry) => {
      this.listener?.drop(entry);
      const useCount = entry.useCount + 1;
      const spent = this.policy.useCountLimit > 0 && useCount >= this.policy.useCountLimit;
      if (!spent && reuseCooldownMs !== null) this.insert(entry.payload, entry.modelVersion, useCount, now + reuseCooldownMs);
      return { ...entry, useCount };
    });
  }

  /**
   * Replaces the contents (a restored state): entries beyond the capacity leave lowest priority first, as on write;
   * the noise generator continues after `noise.draws` draws. The listener is not told.
   */
  replace(entries: ReplayEntry<P>[], nextSeq: number, noise: { seed: number; draws: number }): void {
    const sorted = [...entries].sort((a, b) => b.priority - a.priority || b.seq - a.seq);
    this.#entries = sorted.slice(0, this.policy.capacity).sort((a, b) => a.seq - b.seq);
    this.#seq = nextSeq;
    this.#noiseSeed = noise.seed;
    this.#random = seededRandom(noise.seed);
    for (let i = 0; i < noise.draws; i++) this.#random();
    this.#noiseDraws = noise.draws;
  }
}

export class PriorityReplayBuffer implements ExperienceBuffer {
  readonly name: string;
  readonly capacity: number;
  readonly priorityFn: PriorityFnName;
  readonly decay: number;
  readonly useCountLimit: number;
  readonly sigma: number;
  #reuseCooldownMs: number | null;
  readonly #entries: ReplayEntries<Experience>;
  #finished = false;
  #closed = false;
  readonly #readers = new Waiters();

  constructor(options: PriorityReplayOptions = {}) {
    const policy = resolveReplayPolicy(options);
    this.name = policy.name;
    this.capacity = policy.capacity;
    this.priorityFn = policy.priorityFn;
    this.decay = policy.decay;
    this.useCountLimit = policy.useCountLimit;
    this.sigma = policy.sigma;
    this.#reuseCooldownMs = policy.reuseCooldownMs;
    this.#entries = new ReplayEntries(policy);
  }

  /** Experiences held, including those cooling down. */
  get size(): number {
    return this.#entries.entries.length;
  }

  /** Experiences a read could take right now. */
  get availableCount(): number {
    return this.#entries.availableCount(Date.now());
  }

  /** The priority an experience with this model version and use count gets (noise excluded). */
  priorityOf(modelVersion: number, useCount: number): number {
    return this.#entries.priorityOf(modelVersion, useCount);
  }

  /**
   * The contents as plain data; `throughStep`: only experiences of explored steps <= it (info.step; one without a step
   * counts as later), the ones a checkpoint at that step keeps (later steps are explored again after a resume).
   */
  state(options: { throughStep?: number } = {}): PriorityReplayState {
    const through = options.throughStep ?? Number.POSITIVE_INFINITY;
    const now = Date.now();
    return {
      nextSeq: this.#entries.nextSeq,
      noise: this.#entries.noise,
      entries: this.#entries.entries
        .filter((e) => (e.payload.info.step ?? Number.POSITIVE_INFINITY) <= through)
        .map((e) => ({
          experience: e.payload,
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
    const now = Date.now();
    const entries = state.entries.map((e, i): ReplayEntry<Experience> => {
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
      return {
        payload: x,
        modelVersion: x.info.modelVersion ?? 0,
        seq: e.seq,
        useCount: e.useCount,
        priority: e.priority,
        availableAt: now + e.cooldownMs,
      };
    });
    this.#entries.replace(entries, state.nextSeq, { seed: noise.seed, draws: noise.draws });
    this.#readers.notifyAll();
  }

  async write(experiences: readonly Experience[]): Promise<number> {
    if (this.#closed) throw new BufferClosedError(this.name, 'cannot write');
    if (this.#finished) throw new Error(`buffer '${this.name}': write after finishWriting()`);
    let kept = 0;
    for (const experience of experiences) {
      if (this.#entries.insert(experience, experience.info.modelVersion ?? 0, experience.info.useCount ?? 0, Date.now())) kept++;
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
      const available = this.#entries.availableCount(now);
      const cooling = this.#entries.entries.length - available;
      if (available >= n || (this.#finished && cooling === 0)) return this.#take(n, now);
      if (now >= deadline) {
        if (available >= minCount) return this.#take(n, now);
        throw new BufferTimeoutError(
          this.name,
          `${n} experiences (${available} available, ${cooling} cooling down, at least ${minCount} accepted)`,
          options.timeoutMs,
        );
      }
      await this.#readers.wait(Math.min(deadline, this.#entries.nextAvailableAt(now)));
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

  #take(n: number, now: number): Experience[] {
    return this.#entries
      .take(n, now, this.#reuseCooldownMs)
      .map((entry) => ({ ...entry.payload, info: { ...entry.payload.info, useCount: entry.useCount } }));
  }
}
