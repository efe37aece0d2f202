// A pool of OpenAI-compatible rollout servers (vLLM, SGLang, `trinity serve`; explorer.rollout_model.engine_type
// openai with a list of base_url): one engine to the explorer, several servers behind it.
//
//   routing    EngineRouter (../engine/engine-pool.ts): prefix affinity, then the server with the fewest sequences
//              in flight, among the servers in the pool
//   failover   a request whose server fails (unreachable, the connection dropped, HTTP 5xx, no answer: a
//              RemoteServerError) or leaves the pool while it runs (its attempt is aborted) is sent again to another
//              server in the pool, within the request's own timeout; a 4xx is the request's fault and is not retried
//   health     every server in the pool answers GET /health every `healthIntervalMs` (at most `healthTimeoutMs`
//              each); one that fails a check or a request leaves the pool, and its requests in flight move on
//   coming back a server out of the pool is probed (GET /health) after 250 ms, then at doubling intervals up to
//              `probeMaxMs`; once it answers it loads the newest weights folder the pool has synced (it missed those
//              reloads) and rejoins
//   none left  requests wait for a server to rejoin; when none has for `downGraceMs`, the pool fails with
//              NoRolloutServerError (every request, and the onFailure listeners: the run stops with it)
//   weights    syncWeightsFromDir(dir): every server in the pool reloads the folder (POST /update_weights_from_disk);
//              a server that fails it leaves the pool (and reloads on its way back); a folder every server refuses
//              with a 4xx is an error
//   LoRA       syncLoraAdapter(name, dir): every server in the pool (re)loads the PEFT adapter through vLLM's dynamic
//              adapter API (POST /v1/unload_lora_adapter, then /v1/load_lora_adapter {lora_name, lora_path}; `trinity
//              serve --allow-reload-from ROOT` answers it too) and requests name the adapter as their model; a server
//              rejoining loads it as well
//
// Requests are idempotent: a sample's seed is the request's, so a retried request samples what the failed one would
// have.
//
//   const pool = await RemoteEnginePool.connect({ baseURLs: ['http://a:8000/v1', 'http://b:8000/v1'], model, tokenizer });
//   const result = await pool.generate({ promptIds, n: 8, seed: 1 });
//   await pool.syncWeightsFromDir(dir);
//   await pool.close();
import {
  type ChatEngine,
  type ChatOptions,
  type ChatResult,
  chat,
  EngineRouter,
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type ImagePrompts,
  type ScoreOptions,
  type ScoreResult,
} from '../engine/index.js';
import type { ChatInputMessage, Tokenizer } from '../tokenizer/index.js';
import { OpenAIRemoteEngine, RemoteServerError } from './remote-engine.js';

export interface RemotePoolOptions {
  /** The servers' base URLs, each including /v1. */
  baseURLs: readonly string[];
  model: string;
  apiKey?: string | null;
  tokenizer: Tokenizer | null;
  /** A vision-language model folder's image token and processor: requests with images go as chats (OpenAIRemoteEngine). */
  vision?: ImagePrompts | null;
  /** Per-request timeout, retries included (default 30 minutes). */
  requestTimeoutMs?: number;
  /** Between health checks of a server in the pool (default 5 s). */
  healthIntervalMs?: number;
  /** How long a health check may take (default 5 s). */
  healthTimeoutMs?: number;
  /** Longest wait between probes of a server out of the pool (default 5 s). */
  probeMaxMs?: number;
  /** How long the pool goes on with no server in it before it fails (default 60 s). */
  downGraceMs?: number;
  /** How long a reload may take (default 10 minutes). */
  reloadTimeoutMs?: number;
  /** Sequences remembered for prefix affinity. */
  affinityEntries?: number;
  /** Servers leaving and rejoining the pool. */
  log?: (line: string) => void;
  /** Runs on close(), after the pool stopped: frees what the pool owns (./engine-process.ts ends its children). */
  onClose?: () => Promise<void>;
}

/** No server of the pool has answered for downGraceMs: the run cannot go on. */
export class NoRolloutServerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NoRolloutServerError';
  }
}

/** One server's state, as members() reports it. */
export interface PoolMemberStatus {
  baseURL: string;
  inPool: boolean;
  /** Why it left the pool (the last failure), or null. */
  reason: string | null;
  /** Requests routed to it, reloads it completed, times it left the pool. */
  routed: number;
  reloads: number;
  departures: number;
}

interface Member {
  engine: OpenAIRemoteEngine;
  inPool: boolean;
  reason: string | null;
  /** Aborted when the server leaves the pool: its attempts in flight move to another server. */
  leave: AbortController;
  timer: NodeJS.Timeout | null;
  probeDelayMs: number;
  reloads: number;
  departures: number;
  /** Times it joined the pool. */
  joins: number;
}

const DEFAULT_TIMEOUT_MS = 30 * 60 * 1000;
const FIRST_PROBE_MS = 250;

export class RemoteEnginePool implements ChatEngine {
  readonly model: string;
  readonly tokenizer: Tokenizer | null;
  readonly vision: ImagePrompts | null;
  readonly router: EngineRouter;
  readonly #members: Member[];
  readonly #options: Required<
    Omit<RemotePoolOptions, 'apiKey' | 'tokenizer' | 'vision' | 'affinityEntries' | 'log' | 'baseURLs' | 'onClose'>
  >;
  readonly #onClose: (() => Promise<void>) | null;
  readonly #log: (line: string) => void;
  /** Wake requests waiting for a server to rejoin. */
  readonly #waiters = new Set<() => void>();
  readonly #failureListeners = new Set<(error: NoRolloutServerError) => void>();
  /** The newest folder synced: a server rejoining loads it first. */
  #weightsDir: string | null = null;
  /** The LoRA adapter requests name (syncLoraAdapter): a server rejoining loads it first. */
  #adapter: { name: string; path: string } | null = null;
  #graceTimer: NodeJS.Timeout | null = null;
  #failure: NoRolloutServerError | null = null;
  #closed = false;

  private constructor(options: RemotePoolOptions) {
    if (options.baseURLs.length === 0) throw new RangeError('RemoteEnginePool: no base URLs');
    this.model = options.model;
    this.tokenizer = options.tokenizer;
    this.vision = options.vision ?? null;
    this.router = new EngineRouter(
      options.baseURLs.length,
      options.affinityEntries !== undefined ? { affinityEntries: options.affinityEntries } : {},
    );
    this.#options = {
      model: options.model,
      requestTimeoutMs: options.requestTimeoutMs ?? DEFAULT_TIMEOUT_MS,
      healthIntervalMs: options.healthIntervalMs ?? 5_000,
      healthTimeoutMs: options.healthTimeoutMs ?? 5_000,
      probeMaxMs: options.probeMaxMs ?? 5_000,
      downGraceMs: options.downGraceMs ?? 60_000,
      reloadTimeoutMs: options.reloadTimeoutMs ?? 600_000,
    };
    this.#log = options.log ?? (() => {});
    this.#onClose = options.onClose ?? null;
    this.#members = options.baseURLs.map((baseURL) => ({
      engine: new OpenAIRemoteEngine({
        baseURL,
        model: options.model,
        apiKey: options.apiKey ?? null,
        tokenizer: options.tokenizer,
        vision: this.vision,
        requestTimeoutMs: this.#options.requestTimeoutMs,
      }),
      inPool: false,
      reason: 'not checked yet',
      leave: new AbortController(),
      timer: null,
      probeDelayMs: FIRST_PROBE_MS,
      reloads: 0,
      departures: 0,
      joins: 0,
    }));
  }

  /**
   * Checks every server (/v1/models serves `model`); those that answer form the pool, the others are probed until
   * they do. At least one must answer: otherwise the error names each server and what went wrong.
   */
  static async connect(options: RemotePoolOptions): Promise<RemoteEnginePool> {
    const pool = new RemoteEnginePool(options);
    const checks = await Promise.allSettled(
      pool.#members.map((m) =>
        OpenAIRemoteEngine.connect({
          baseURL: m.engine.baseURL,
          model: options.model,
          apiKey: options.apiKey ?? null,
          tokenizer: options.tokenizer,
        }),
      ),
    );
    if (checks.every((c) => c.status === 'rejected')) {
      const reasons = checks.map(
        (c, i) => `${pool.#members[i]?.engine.baseURL}: ${(c as PromiseRejectedResult).reason?.message}`,
      );
      throw new NoRolloutServerError(`none of the ${checks.length} rollout servers answers: ${reasons.join('; ')}`);
    }
    checks.forEach((check, i) => {
      if (check.status === 'fulfilled') pool.#join(i);
      else pool.#leave(i, (check.reason as Error).message);
    });
    return pool;
  }

  get baseURLs(): string[] {
    return this.#members.map((m) => m.engine.baseURL);
  }

  /** Each server's state. */
  members(): PoolMemberStatus[] {
    return this.#members.map((m, i) => ({
      baseURL: m.engine.baseURL,
      inPool: m.inPool,
      reason: m.reason,
      routed: this.router.routed(i),
      reloads: m.reloads,
      departures: m.departures,
    }));
  }

  /** Called once if the pool fails (no server for downGraceMs); returns a function that removes the listener. */
  onFailure(listener: (error: NoRolloutServerError) => void): () => void {
    if (this.#failure) listener(this.#failure);
    else this.#failureListeners.add(listener);
    return () => this.#failureListeners.delete(listener);
  }

  generate(request: GenerateRequest): Promise<GenerateResult> {
    const promptIds =
      request.promptIds ?? (request.prompt !== undefined && this.tokenizer ? this.tokenizer.encode(request.prompt) : undefined);
    return this.#routed(
      promptIds,
      request.n ?? 1,
      request.timeoutMs ?? this.#options.requestTimeoutMs,
      request.signal,
      async (engine, i, signal, timeoutMs) => {
        const result = await engine.generate({ ...request, ...(promptIds ? { promptIds } : {}), signal, timeoutMs });
        this.router.rememberResult(i, result);
        return result;
      },
    );
  }

  chat(messages: readonly ChatInputMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }

  score(tokenIds: readonly number[], options: ScoreOptions = {}): Promise<ScoreResult> {
    return this.#routed(tokenIds, 1, this.#options.requestTimeoutMs, options.signal, (engine, _i, signal) =>
      engine.score(tokenIds, { ...options, signal }),
    );
  }

  /** Every server in the pool reloads `dir`; servers out of the pool load it when they rejoin (see the header). */
  async syncWeightsFromDir(dir: string, options: { timeoutMs?: number } = {}): Promise<void> {
    this.#weightsDir = dir;
    const timeoutMs = options.timeoutMs ?? this.#options.reloadTimeoutMs;
    const inPool = this.#members.flatMap((m, i) => (m.inPool ? [i] : []));
    const refused: string[] = [];
    const outcomes = await Promise.all(
      inPool.map(async (i) => {
        const member = this.#members[i] as Member;
        try {
          await member.engine.syncWeightsFromDir(dir, { timeoutMs });
          member.reloads++;
          return true;
        } catch (error) {
          if (error instanceof RemoteServerError) this.#leave(i, `weight reload from ${dir} failed: ${error.message}`);
          else refused.push((error as Error).message);
          return false;
        }
      }),
    );
    if (refused.length > 0) throw new Error(`weight reload from ${dir} was refused: ${refused.join('; ')}`);
    if (!outcomes.some(Boolean)) {
      // every server left the pool: the first to rejoin loads `dir` before it takes requests
      await this.#waitForMember(Date.now() + this.#options.downGraceMs, () => false, undefined, `a server to load ${dir}`);
    }
  }

  /**
   * A LoRA run's weights: every server in the pool (re)loads the PEFT adapter folder `path` as `name` (vLLM's
   * /v1/unload_lora_adapter then /v1/load_lora_adapter), and requests name the adapter from then on; a server that
   * rejoins loads it too. A server that fails it leaves the pool; an adapter every server refuses (4xx) is an error.
   */
  async syncLoraAdapter(name: string, path: string, options: { timeoutMs?: number } = {}): Promise<void> {
    this.#adapter = { name, path };
    const timeoutMs = options.timeoutMs ?? this.#options.reloadTimeoutMs;
    const refused: string[] = [];
    const outcomes = await Promise.all(
      this.#members.flatMap((member, i) =>
        member.inPool
          ? [
              this.#loadAdapter(member, name, path, timeoutMs).then(
                () => true,
                (error: Error) => {
                  if (error instanceof RemoteServerError) this.#leave(i, `loading LoRA adapter ${path} failed: ${error.message}`);
                  else refused.push(error.message);
                  return false;
                },
              ),
            ]
          : [],
      ),
    );
    if (refused.length > 0) throw new Error(`LoRA adapter ${path} was refused: ${refused.join('; ')}`);
    if (!outcomes.some(Boolean))
      await this.#waitForMember(Date.now() + this.#options.downGraceMs, () => false, undefined, `a server to load ${path}`);
  }

  async #loadAdapter(member: Member, name: string, path: string, timeoutMs: number): Promise<void> {
    await member.engine.unloadLoraAdapter(name, { timeoutMs });
    await member.engine.loadLoraAdapter(name, path, { timeoutMs });
    member.engine.useModel(name);
    member.reloads++;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const m of this.#members) {
      if (m.timer) clearTimeout(m.timer);
      m.timer = null;
      m.leave.abort(new Error('the pool was closed'));
    }
    if (this.#graceTimer) clearTimeout(this.#graceTimer);
    for (const wake of [...this.#waiters]) wake();
    await this.#onClose?.();
  }

  /** Runs `attempt` on a server of the pool, moving to another one when a server fails (see the header). */
  async #routed<T>(
    promptIds: readonly number[] | undefined,
    sequences: number,
    timeoutMs: number,
    signal: AbortSignal | undefined,
    attempt: (engine: OpenAIRemoteEngine, i: number, signal: AbortSignal, timeoutMs: number) => Promise<T>,
  ): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    // member → its join count when this request failed on it: it is tried again only after it rejoined
    const failedOn = new Map<number, number>();
    const excluded = (k: number) => failedOn.get(k) === (this.#members[k] as Member).joins;
    const maxAttempts = 3 * this.#members.length; // a server that fails every request but answers /health
    let lastError: Error | null = null;
    for (let attempts = 0; ; ) {
      if (this.#failure) throw this.#failure;
      if (this.#closed) throw new GenerationError('closed', 'the rollout server pool is closed');
      if (signal?.aborted) throw new GenerationError('aborted', 'the request was aborted');
      if (attempts >= maxAttempts && lastError) throw lastError;
      const i = this.router.pick(promptIds, (k) => (this.#members[k] as Member).inPool && !excluded(k));
      if (i < 0) {
        await this.#waitForMember(deadline, excluded, signal, 'a rollout server to rejoin the pool', lastError);
        continue;
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw lastError ?? new GenerationError('timeout', `the request did not finish within ${timeoutMs} ms`);
      const member = this.#members[i] as Member;
      const leave = member.leave.signal;
      const end = this.router.begin(i, sequences);
      attempts++;
      try {
        return await attempt(member.engine, i, signal ? AbortSignal.any([signal, leave]) : leave, remaining);
      } catch (error) {
        if (signal?.aborted || this.#closed) throw error;
        const serverFault = error instanceof RemoteServerError || leave.aborted;
        if (!serverFault) throw error;
        lastError = error as Error;
        if (!leave.aborted) this.#leave(i, (error as Error).message);
        failedOn.set(i, member.joins);
      } finally {
        end();
      }
    }
  }

  /** Resolves when a server not `excluded` is in the pool; rejects at `deadline`, on abort, or when the pool fails. */
  #waitForMember(
    deadline: number,
    excluded: (i: number) => boolean,
    signal: AbortSignal | undefined,
    what: string,
    lastError: Error | null = null,
  ): Promise<void> {
    const ready = () => this.#members.some((m, k) => m.inPool && !excluded(k));
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
        if (this.#failure) finish(this.#failure);
        else if (this.#closed) finish(new GenerationError('closed', 'the rollout server pool is closed'));
        else if (ready()) finish();
      };
      const onAbort = () => finish(new GenerationError('aborted', `aborted while waiting for ${what}`));
      const timer = setTimeout(
        () => finish(lastError ?? new GenerationError('timeout', `timed out waiting for ${what} (${this.#describeServers()})`)),
        Math.max(0, deadline - Date.now()),
      );
      this.#waiters.add(check);
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #describeServers(): string {
    return this.#members.map((m) => `${m.engine.baseURL}: ${m.inPool ? 'in the pool' : `out (${m.reason})`}`).join('; ');
  }

  #wake(): void {
    for (const wake of [...this.#waiters]) wake();
  }

  #join(i: number): void {
    const member = this.#members[i] as Member;
    if (this.#closed || this.#failure) return;
    const rejoined = member.reason !== 'not checked yet';
    member.inPool = true;
    member.joins++;
    member.reason = null;
    member.probeDelayMs = FIRST_PROBE_MS;
    member.leave = new AbortController();
    if (this.#graceTimer) clearTimeout(this.#graceTimer);
    this.#graceTimer = null;
    if (rejoined) this.#log(`rollout server ${member.engine.baseURL} is back in the pool`);
    this.#schedule(i, this.#options.healthIntervalMs, () => this.#healthCheck(i));
    this.#wake();
  }

  #leave(i: number, reason: string): void {
    const member = this.#members[i] as Member;
    if (this.#closed) return;
    const wasIn = member.inPool;
    member.inPool = false;
    member.reason = reason;
    if (wasIn) {
      member.departures++;
      member.leave.abort(new Error(`${member.engine.baseURL} left the pool: ${reason}`));
      this.router.forget(i);
      this.#log(`rollout server ${member.engine.baseURL} left the pool: ${reason}`);
    }
    this.#schedule(i, member.probeDelayMs, () => this.#probe(i));
    if (!this.#members.some((m) => m.inPool) && this.#graceTimer === null && this.#failure === null) {
      this.#graceTimer = setTimeout(() => this.#fail(), this.#options.downGraceMs);
      this.#graceTimer.unref();
    }
    this.#wake();
  }

  #fail(): void {
    this.#failure = new NoRolloutServerError(
      `no rollout server has answered for ${this.#options.downGraceMs} ms: ${this.#describeServers()}`,
    );
    this.#log(this.#failure.message);
    for (const listener of [...this.#failureListeners]) listener(this.#failure);
    this.#failureListeners.clear();
    this.#wake();
  }

  #schedule(i: number, delayMs: number, run: () => Promise<void>): void {
    const member = this.#members[i] as Member;
    if (member.timer) clearTimeout(member.timer);
    if (this.#closed || this.#failure) return;
    member.timer = setTimeout(() => {
      member.timer = null;
      void run();
    }, delayMs);
    member.timer.unref(); // health checks never keep the process alive
  }

  async #healthCheck(i: number): Promise<void> {
    const member = this.#members[i] as Member;
    const problem = await this.#checkHealth(member);
    if (this.#closed || !member.inPool) return;
    if (problem !== null) this.#leave(i, `health check failed: ${problem}`);
    else this.#schedule(i, this.#options.healthIntervalMs, () => this.#healthCheck(i));
  }

  /** A server out of the pool: back in once it answers and holds the newest weights; else probe again later. */
  async #probe(i: number): Promise<void> {
    const member = this.#members[i] as Member;
    let problem = await this.#checkHealth(member);
    // it missed the reloads while it was out: load the newest folder, again if a newer one came meanwhile
    while (problem === null && !this.#closed && this.#weightsDir !== null) {
      const dir = this.#weightsDir;
      try {
        await member.engine.syncWeightsFromDir(dir, { timeoutMs: this.#options.reloadTimeoutMs });
        member.reloads++;
      } catch (error) {
        problem = `reloading ${dir} on rejoining failed: ${(error as Error).message}`;
      }
      if (dir === this.#weightsDir) break;
    }
    while (problem === null && !this.#closed && this.#adapter !== null) {
      const adapter = this.#adapter;
      try {
        await this.#loadAdapter(member, adapter.name, adapter.path, this.#options.reloadTimeoutMs);
      } catch (error) {
        problem = `loading LoRA adapter ${adapter.path} on rejoining failed: ${(error as Error).message}`;
      }
      if (adapter === this.#adapter) break;
    }
    if (this.#closed || this.#failure) return;
    if (problem === null) this.#join(i);
    else {
      member.reason = problem;
      member.probeDelayMs = Math.min(member.probeDelayMs * 2, this.#options.probeMaxMs);
      this.#schedule(i, member.probeDelayMs, () => this.#probe(i));
    }
  }

  /** GET <root>/health: null when it answers 2xx in time, else what went wrong. */
  async #checkHealth(member: Member): Promise<string | null> {
    const url = `${member.engine.baseURL.replace(/\/v1$/, '')}/health`;
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(this.#options.healthTimeoutMs) });
      await res.arrayBuffer();
      return res.ok ? null : `GET ${url}: HTTP ${res.status}`;
    } catch (error) {
      const cause = (error as { cause?: { code?: string } }).cause?.code;
      return `GET ${url}: ${(error as Error).message}${cause ? ` (${cause})` : ''}`;
    }
  }
}
