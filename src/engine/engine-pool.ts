// Several rollout engines behind one engine: the router that picks a member per request, and the pool of embedded
// engines (explorer.rollout_model.engine_num, each a WorkerRolloutEngine on its own thread with its share of the
// intra-op threads). The pool of OpenAI-compatible servers (../openai/remote-pool.ts) routes with the same router
// and adds health checks and failover.
//
// Routing, per request:
//   1. prefix affinity  the member that produced the longest earlier sequence (prompt ids, or prompt ++ completion
//                       ids of one sample) that this prompt starts with: a conversation's follow-up call continues
//                       that sequence (./conversation.ts), and the member that decoded it is the one that can hold
//                       its prefix in a cache (vLLM's and SGLang's prefix caches; the embedded engine prefills anew)
//   2. least loaded     otherwise the available member with the fewest sequences in flight (a request of n samples
//                       counts n), the lowest index on a tie
// The member a request goes to never changes what it samples: a seed belongs to the request (sample i of seed s
// draws from sampleSeed(s, i) on whichever engine), so N engines give the rollouts one engine gives.
//
// The affinity index remembers the newest `affinityEntries` sequences (oldest forgotten first); a lookup hashes
// every prefix of the prompt once (FNV-1a, incrementally) and checks the ids of a hit, so a collision never routes.
//
//   const pool = await EmbeddedEnginePool.start(modelDir, { engineNum: 2, numThreads: 2, slots: 8 });
//   const reply = await pool.chat([{ role: 'user', content: 'Hi' }], { seed: 1 });   // as one WorkerRolloutEngine
//   await pool.syncWeights(trainer.model.parameters());                              // reaches every engine
//   await pool.close();
import type { ChatInputMessage, Tokenizer } from '../tokenizer/index.js';
import type { ImagePrompts } from './vision-chat.js';
import type { Tensor } from '../torch/index.js';
import { type ChatEngine, type ChatOptions, type ChatResult, chat } from './chat.js';
import type { GenerateRequest, GenerateResult, RolloutEngineStats, ScoreOptions, ScoreResult } from './types.js';
import { WorkerRolloutEngine, type WorkerEngineOptions } from './worker-engine.js';

export interface EngineRouterOptions {
  /** Sequences remembered for prefix affinity (default 4096). */
  affinityEntries?: number;
}

interface Remembered {
  member: number;
  /** Token ids are < 2^31 (vocabularies are far smaller): 4 bytes each. */
  ids: Int32Array;
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** Picks a member per request (see the header) and counts what each has in flight. */
export class EngineRouter {
  readonly size: number;
  readonly #inFlight: number[];
  readonly #requests: number[];
  readonly #capacity: number;
  /** `${length}:${hash}` → the member that produced that sequence; Map order is age (oldest first). */
  readonly #sequences = new Map<string, Remembered>();

  constructor(size: number, options: EngineRouterOptions = {}) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`EngineRouter: size must be an integer >= 1, got ${size}`);
    this.size = size;
    this.#inFlight = new Array<number>(size).fill(0);
    this.#requests = new Array<number>(size).fill(0);
    this.#capacity = options.affinityEntries ?? 4096;
  }

  /** Sequences in flight on member `i`. */
  load(i: number): number {
    return this.#inFlight[i] ?? 0;
  }

  /** Requests member `i` has been given so far. */
  routed(i: number): number {
    return this.#requests[i] ?? 0;
  }

  /**
   * The member for a request with `promptIds` among those `available` accepts (default: all), or -1 when none is
   * available. `exclude` holds members this request already failed on.
   */
  pick(
    promptIds: readonly number[] | undefined,
    available: (i: number) => boolean = () => true,
    exclude: ReadonlySet<number> = new Set(),
  ): number {
    const usable = (i: number) => !exclude.has(i) && available(i);
    const affine = promptIds ? this.affinity(promptIds) : -1;
    if (affine >= 0 && usable(affine)) return affine;
    let best = -1;
    for (let i = 0; i < this.size; i++) {
      if (!usable(i)) continue;
      if (best < 0 || (this.#inFlight[i] as number) < (this.#inFlight[best] as number)) best = i;
    }
    return best;
  }

  /** The member that produced the longest remembered sequence `promptIds` starts with, else -1. */
  affinity(promptIds: readonly number[]): number {
    if (this.#sequences.size === 0) return -1;
    const hashes = prefixHashes(promptIds);
    for (let length = promptIds.length; length >= 1; length--) {
      const hit = this.#sequences.get(`${length}:${hashes[length - 1]}`);
      if (hit !== undefined && startsWith(promptIds, hit.ids)) return hit.member;
    }
    return -1;
  }

  /** Member `i` holds `ids` (a prompt, or a prompt and one of its completions): later prompts that extend it go there. */
  remember(i: number, ids: readonly number[]): void {
    if (ids.length === 0 || this.#capacity === 0) return;
    const hashes = prefixHashes(ids);
    const key = `${ids.length}:${hashes[ids.length - 1]}`;
    this.#sequences.delete(key);
    this.#sequences.set(key, { member: i, ids: Int32Array.from(ids) });
    while (this.#sequences.size > this.#capacity) {
      const oldest = this.#sequences.keys().next().value as string;
      this.#sequences.delete(oldest);
    }
  }

  /** Forgets what member `i` holds (it restarted, or left the pool: its caches are gone). */
  forget(i: number): void {
    for (const [key, entry] of this.#sequences) if (entry.member === i) this.#sequences.delete(key);
  }

  /** Counts `sequences` in flight on member `i` until the returned function is called. */
  begin(i: number, sequences: number): () => void {
    this.#inFlight[i] = (this.#inFlight[i] as number) + sequences;
    this.#requests[i] = (this.#requests[i] as number) + 1;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#inFlight[i] = (this.#inFlight[i] as number) - sequences;
    };
  }

  /** Remembers the prompt and each completion of a finished request on member `i`. */
  rememberResult(i: number, result: GenerateResult): void {
    this.remember(i, result.promptIds);
    for (const completion of result.completions) this.remember(i, [...result.promptIds, ...completion.tokenIds]);
  }
}

/** FNV-1a of every prefix: hashes[k - 1] is the hash of ids[0..k). */
function prefixHashes(ids: readonly number[]): number[] {
  const out = new Array<number>(ids.length);
  let h = FNV_OFFSET;
  for (let i = 0; i < ids.length; i++) {
    let id = ids[i] as number;
    for (let b = 0; b < 4; b++) {
      h = Math.imul(h ^ (id & 0xff), FNV_PRIME) >>> 0;
      id >>>= 8;
    }
    out[i] = h;
  }
  return out;
}

function startsWith(ids: readonly number[], prefix: Int32Array): boolean {
  if (prefix.length > ids.length) return false;
  for (let i = 0; i < prefix.length; i++) if (ids[i] !== prefix[i]) return false;
  return true;
}

/** What a pool needs of a member engine. */
export interface PoolEngine extends ChatEngine {
  generate(request: GenerateRequest): Promise<GenerateResult>;
  score(tokenIds: readonly number[], options?: ScoreOptions): Promise<ScoreResult>;
}

/** Runs `fn` on the member the router picks for `promptIds`, counting `sequences` in flight there. */
export async function onRoutedMember<E, T>(
  router: EngineRouter,
  members: readonly E[],
  promptIds: readonly number[] | undefined,
  sequences: number,
  fn: (member: E, index: number) => Promise<T>,
): Promise<T> {
  const i = router.pick(promptIds);
  const end = router.begin(i, sequences);
  try {
    return await fn(members[i] as E, i);
  } finally {
    end();
  }
}

export interface EmbeddedPoolOptions extends Omit<WorkerEngineOptions, 'numThreads'>, EngineRouterOptions {
  /** Engines to start (explorer.rollout_model.engine_num). */
  engineNum: number;
  /** Intra-op threads of all engines together: each gets floor(numThreads / engineNum), at least 1. */
  numThreads?: number;
}

/** What the embedded pool needs of each engine (WorkerRolloutEngine; a test's scripted engine). */
export type EmbeddedPoolMember = PoolEngine &
  Pick<WorkerRolloutEngine, 'vocabSize' | 'maxLength' | 'slots' | 'syncWeights' | 'syncWeightsFromDir' | 'stats' | 'close'>;

/** engine_num embedded engines as one (see the header). */
export class EmbeddedEnginePool implements PoolEngine {
  readonly engines: readonly EmbeddedPoolMember[];
  readonly router: EngineRouter;

  constructor(engines: readonly EmbeddedPoolMember[], options: EngineRouterOptions = {}) {
    if (engines.length === 0) throw new RangeError('EmbeddedEnginePool: no engines');
    this.engines = engines;
    this.router = new EngineRouter(engines.length, options);
  }

  /** Starts `engineNum` engines on `dir` (all or none: a failed start closes the ones that started). */
  static async start(dir: string, options: EmbeddedPoolOptions): Promise<EmbeddedEnginePool> {
    const { engineNum, numThreads, affinityEntries, ...engineOptions } = options;
    if (!Number.isInteger(engineNum) || engineNum < 1)
      throw new RangeError(`EmbeddedEnginePool: engineNum must be an integer >= 1, got ${engineNum}`);
    const perEngine = numThreads === undefined ? undefined : Math.max(1, Math.floor(numThreads / engineNum));
    const started = await Promise.allSettled(
      Array.from({ length: engineNum }, () =>
        WorkerRolloutEngine.start(dir, { ...engineOptions, ...(perEngine !== undefined ? { numThreads: perEngine } : {}) }),
      ),
    );
    const engines = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) {
      await Promise.all(engines.map((e) => e.close()));
      const reason = failed.reason instanceof Error ? failed.reason.message : String(failed.reason);
      throw new Error(`engine pool: starting ${engineNum} engines on ${dir} failed: ${reason}`, { cause: failed.reason });
    }
    return new EmbeddedEnginePool(engines, affinityEntries !== undefined ? { affinityEntries } : {});
  }

  get tokenizer(): Tokenizer | null {
    return (this.engines[0] as EmbeddedPoolMember).tokenizer;
  }

  get vocabSize(): number {
    return (this.engines[0] as EmbeddedPoolMember).vocabSize;
  }

  /** A vision-language model's image token and processor (chat with images; ./vision-chat.ts). */
  get vision(): ImagePrompts | null {
    return (this.engines[0] as EmbeddedPoolMember).vision ?? null;
  }

  get maxLength(): number {
    return (this.engines[0] as EmbeddedPoolMember).maxLength;
  }

  get slots(): number {
    return this.engines.reduce((sum, e) => sum + e.slots, 0);
  }

  generate(request: GenerateRequest): Promise<GenerateResult> {
    return onRoutedMember(this.router, this.engines, request.promptIds, request.n ?? 1, async (engine, i) => {
      const result = await engine.generate(request);
      this.router.rememberResult(i, result);
      return result;
    });
  }

  chat(messages: readonly ChatInputMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }

  score(tokenIds: readonly number[], options: ScoreOptions = {}): Promise<ScoreResult> {
    return onRoutedMember(this.router, this.engines, tokenIds, 1, (engine) => engine.score(tokenIds, options));
  }

  /** WorkerRolloutEngine.syncWeights on every engine (each takes its own reference to the tensors). */
  async syncWeights(weights: Map<string, Tensor>, options: { timeoutMs?: number } = {}): Promise<number> {
    const copied = await Promise.all(this.engines.map((engine) => engine.syncWeights(weights, options)));
    return copied[0] as number;
  }

  /** WorkerRolloutEngine.syncWeightsFromDir on every engine. */
  async syncWeightsFromDir(dir: string, options: { timeoutMs?: number } = {}): Promise<number> {
    const copied = await Promise.all(this.engines.map((engine) => engine.syncWeightsFromDir(dir, options)));
    return copied[0] as number;
  }

  /** Each engine's counters, plus the requests the router gave it. */
  async stats(): Promise<(RolloutEngineStats & { routed: number })[]> {
    const all = await Promise.all(this.engines.map((engine) => engine.stats()));
    return all.map((s, i) => ({ ...s, routed: this.router.routed(i) }));
  }

  async close(reason = 'the engine pool was closed'): Promise<void> {
    await Promise.all(this.engines.map((engine) => engine.close(reason)));
  }
}
