// Metrics sinks. Every step's metrics go to JSONL always (the source of truth for reports), and to TensorBoard,
// MLflow and Weights & Biases when configured (monitor.monitor_type). Remote sinks send in the background with a
// timeout per request; a failing sink warns once and never stops the run.
import { appendFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { writingFile } from '../../util/file-write.js';
import { TensorBoardWriter } from './tensorboard.js';

export type Metrics = Record<string, number>;

export interface Monitor {
  /** Records the metrics of one step (the trainer's or explorer's step counter). */
  log(step: number, metrics: Metrics): void;
  /** Sends what is queued; resolves when done or when the timeout passes. */
  flush(timeoutMs?: number): Promise<void>;
  close(timeoutMs?: number): Promise<void>;
}

/**
 * One JSON object per line: {"step": n, "time": unix_s, ...metrics}. Appended synchronously (survives a kill); a failed
 * append names the step and the file.
 */
export class JsonlMonitor implements Monitor {
  constructor(readonly file: string) {
    mkdirSync(dirname(file), { recursive: true });
  }
  log(step: number, metrics: Metrics): void {
    const finite = Object.fromEntries(Object.entries(metrics).filter(([, v]) => Number.isFinite(v)));
    const line = `${JSON.stringify({ step, time: Date.now() / 1000, ...finite })}\n`;
    writingFile(`step ${step}'s metrics`, this.file, () => appendFileSync(this.file, line));
  }
  async flush(): Promise<void> {}
  async close(): Promise<void> {}
}

export class TensorBoardMonitor implements Monitor {
  readonly #writer: TensorBoardWriter;
  constructor(dir: string) {
    this.#writer = new TensorBoardWriter(dir);
  }
  get file(): string {
    return this.#writer.file;
  }
  log(step: number, metrics: Metrics): void {
    this.#writer.write(step, metrics);
  }
  async flush(): Promise<void> {
    this.#writer.flush();
  }
  async close(): Promise<void> {
    this.#writer.close();
  }
}

/** Sends requests one after another in the background; a failure warns once and drops that request. */
abstract class HttpMonitor implements Monitor {
  #chain: Promise<void> = Promise.resolve();
  #warned = false;
  #started: Promise<void> | null = null;
  protected readonly requestTimeoutMs: number;

  constructor(
    protected readonly name: string,
    requestTimeoutMs = 10_000,
    protected readonly warn: (message: string) => void = (m) => console.warn(m),
  ) {
    this.requestTimeoutMs = requestTimeoutMs;
  }

  protected abstract start(): Promise<void>;
  protected abstract send(step: number, metrics: Metrics): Promise<void>;
  protected abstract finish(): Promise<void>;

  protected async request(url: string, init: RequestInit): Promise<unknown> {
    const response = await fetch(url, { ...init, signal: AbortSignal.timeout(this.requestTimeoutMs) });
    const text = await response.text();
    if (!response.ok) throw new Error(`${init.method ?? 'GET'} ${url} answered ${response.status}: ${text.slice(0, 200)}`);
    return text.length > 0 ? JSON.parse(text) : {};
  }

  #enqueue(work: () => Promise<void>): void {
    this.#chain = this.#chain.then(work).catch((error: unknown) => {
      if (!this.#warned) {
        this.#warned = true;
        this.warn(
          `[monitor] ${this.name}: ${(error as Error).message} (further ${this.name} errors are not shown; the run goes on)`,
        );
      }
    });
  }

  log(step: number, metrics: Metrics): void {
    if (this.#started === null) {
      this.#started = Promise.resolve();
      this.#enqueue(() => this.start());
    }
    const finite = Object.fromEntries(Object.entries(metrics).filter(([, v]) => Number.isFinite(v)));
    this.#enqueue(() => this.send(step, finite));
  }

  async flush(timeoutMs = 30_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.warn(`[monitor] ${this.name}: gave up waiting for pending requests after ${timeoutMs} ms`);
        resolve();
      }, timeoutMs);
    });
    await Promise.race([this.#chain, timeout]);
    clearTimeout(timer);
  }

  async close(timeoutMs = 30_000): Promise<void> {
    if (this.#started !== null) this.#enqueue(() => this.finish());
    await this.flush(timeoutMs);
  }
}

export interface MlflowOptions {
  /** Tracking server, e.g. http://127.0.0.1:5000 (MLFLOW_TRACKING_URI). */
  trackingUri: string;
  experimentName: string;
  runName: string;
  /** MLFLOW_TRACKING_TOKEN (bearer) or MLFLOW_TRACKING_USERNAME/PASSWORD (basic). */
  token?: string;
  username?: string;
  password?: string;
  params?: Record<string, string | number | boolean>;
  warn?: (message: string) => void;
}

/** MLflow through its REST API (/api/2.0/mlflow/...): experiment by name, a run, log-batch per step. */
export class MlflowMonitor extends HttpMonitor {
  #runId: string | null = null;
  readonly #base: string;
  readonly #headers: Record<string, string>;

  constructor(readonly options: MlflowOptions) {
    super('mlflow', 10_000, options.warn);
    this.#base = `${options.trackingUri.replace(/\/$/, '')}/api/2.0/mlflow`;
    this.#headers = { 'content-type': 'application/json' };
    if (options.token) this.#headers.authorization = `Bearer ${options.token}`;
    else if (options.username) {
      this.#headers.authorization = `Basic ${Buffer.from(`${options.username}:${options.password ?? ''}`).toString('base64')}`;
    }
  }

  get runId(): string | null {
    return this.#runId;
  }

  #post(path: string, body: unknown): Promise<unknown> {
    return this.request(`${this.#base}/${path}`, { method: 'POST', headers: this.#headers, body: JSON.stringify(body) });
  }

  protected async start(): Promise<void> {
    const name = encodeURIComponent(this.options.experimentName);
    let experimentId: string;
    try {
      const found = (await this.request(`${this.#base}/experiments/get-by-name?experiment_name=${name}`, {
        headers: this.#headers,
      })) as { experiment: { experiment_id: string } };
      experimentId = found.experiment.experiment_id;
    } catch {
      const created = (await this.#post('experiments/create', { name: this.options.experimentName })) as {
        experiment_id: string;
      };
      experimentId = created.experiment_id;
    }
    const run = (await this.#post('runs/create', {
      experiment_id: experimentId,
      run_name: this.options.runName,
      start_time: Date.now(),
    })) as { run: { info: { run_id: string } } };
    this.#runId = run.run.info.run_id;
    const params = Object.entries(this.options.params ?? {}).map(([key, value]) => ({ key, value: String(value) }));
    if (params.length > 0) await this.#post('runs/log-batch', { run_id: this.#runId, params });
  }

  protected async send(step: number, metrics: Metrics): Promise<void> {
    if (this.#runId === null) return;
    const timestamp = Date.now();
    const entries = Object.entries(metrics).map(([key, value]) => ({ key, value, timestamp, step }));
    for (let i = 0; i < entries.length; i += 1000) {
      await this.#post('runs/log-batch', { run_id: this.#runId, metrics: entries.slice(i, i + 1000) });
    }
  }

  protected async finish(): Promise<void> {
    if (this.#runId === null) return;
    await this.#post('runs/update', { run_id: this.#runId, status: 'FINISHED', end_time: Date.now() });
  }
}

export interface WandbOptions {
  /** WANDB_BASE_URL (default https://api.wandb.ai). */
  baseUrl?: string;
  /** WANDB_API_KEY. */
  apiKey: string;
  entity: string;
  project: string;
  runName: string;
  config?: Record<string, unknown>;
  warn?: (message: string) => void;
}

/**
 * Weights & Biases through its HTTP API: the run is created with the GraphQL `upsertBucket` mutation and history
 * rows are appended to `wandb-history.jsonl` through the run's file stream, as the wandb client does.
 */
export class WandbMonitor extends HttpMonitor {
  readonly #base: string;
  readonly #auth: string;
  #offset = 0;
  readonly #started = Date.now() / 1000;

  constructor(readonly options: WandbOptions) {
    super('wandb', 10_000, options.warn);
    this.#base = (options.baseUrl ?? 'https://api.wandb.ai').replace(/\/$/, '');
    this.#auth = `Basic ${Buffer.from(`api:${options.apiKey}`).toString('base64')}`;
  }

  #streamUrl(): string {
    const { entity, project, runName } = this.options;
    return `${this.#base}/files/${encodeURIComponent(entity)}/${encodeURIComponent(project)}/${encodeURIComponent(runName)}/file_stream`;
  }

  protected async start(): Promise<void> {
    const query = `mutation UpsertBucket($name: String, $project: String, $entity: String, $config: JSONString) {
  upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, config: $config}) { bucket { id name } }
}`;
    const config = Object.fromEntries(Object.entries(this.options.config ?? {}).map(([k, v]) => [k, { value: v }]));
    await this.request(`${this.#base}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: this.#auth },
      body: JSON.stringify({
        query,
        variables: {
          name: this.options.runName,
          project: this.options.project,
          entity: this.options.entity,
          config: JSON.stringify(config),
        },
      }),
    });
  }

  protected async send(step: number, metrics: Metrics): Promise<void> {
    const row = { ...metrics, _step: step, _runtime: Date.now() / 1000 - this.#started, _timestamp: Date.now() / 1000 };
    await this.request(this.#streamUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: this.#auth },
      body: JSON.stringify({ files: { 'wandb-history.jsonl': { offset: this.#offset, content: [JSON.stringify(row)] } } }),
    });
    this.#offset += 1;
  }

  protected async finish(): Promise<void> {
    await this.request(this.#streamUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: this.#auth },
      body: JSON.stringify({ complete: true, exitcode: 0 }),
    });
  }
}

/** Fans out to several monitors. */
export class MonitorGroup implements Monitor {
  constructor(readonly monitors: Monitor[]) {}
  log(step: number, metrics: Metrics): void {
    for (const m of this.monitors) m.log(step, metrics);
  }
  async flush(timeoutMs?: number): Promise<void> {
    await Promise.all(this.monitors.map((m) => m.flush(timeoutMs)));
  }
  async close(timeoutMs?: number): Promise<void> {
    await Promise.all(this.monitors.map((m) => m.close(timeoutMs)));
  }
}

export type MonitorType = 'jsonl' | 'tensorboard' | 'mlflow' | 'wandb';

/**
 * The backends' arguments (Trinity's monitor.monitor_args): each, when set, is used instead of its environment
 * variable. W&B: baseUrl (WANDB_BASE_URL), apiKey (WANDB_API_KEY); MLflow: uri (MLFLOW_TRACKING_URI), username and
 * password (MLFLOW_TRACKING_USERNAME / _PASSWORD).
 */
export interface MonitorArgs {
  baseUrl?: string;
  apiKey?: string;
  uri?: string;
  username?: string;
  password?: string;
}

export interface CreateMonitorsOptions {
  /** The job folder: metrics.jsonl and tensorboard/ go there. */
  jobDir: string;
  types: readonly MonitorType[];
  project: string;
  name: string;
  config?: Record<string, unknown>;
  /** monitor.monitor_args; what they leave unset comes from the environment. */
  args?: MonitorArgs;
  env?: NodeJS.ProcessEnv;
  warn?: (message: string) => void;
}

/** A setting a remote sink cannot start without: the monitor_args key, else the environment variable, that gives it. */
export interface MissingMonitorSetting {
  readonly type: 'mlflow' | 'wandb';
  /** The monitor_args key, as written in YAML (snake_case). */
  readonly key: string;
  readonly envVar: string;
  /** `monitor_type wandb needs monitor_args.api_key or WANDB_API_KEY` (what createMonitors throws). */
  readonly message: string;
}

/** Each remote sink's required setting, and where it comes from (monitor_args first, as createMonitors reads it). */
const REQUIRED_SETTINGS: readonly (Omit<MissingMonitorSetting, 'message'> & {
  readonly why: string;
  readonly value: (args: MonitorArgs, env: NodeJS.ProcessEnv) => string | undefined;
})[] = [
  {
    type: 'mlflow',
    key: 'uri',
    envVar: 'MLFLOW_TRACKING_URI',
    why: ' (the tracking server address)',
    value: (args, env) => args.uri ?? env.MLFLOW_TRACKING_URI,
  },
  { type: 'wandb', key: 'api_key', envVar: 'WANDB_API_KEY', why: '', value: (args, env) => args.apiKey ?? env.WANDB_API_KEY },
];

/**
 * The settings the sinks of `types` lack, given monitor_args and the environment: createMonitors refuses to start
 * on the first, and `trinity config check` (src/rft/run/config/preflight.ts) reports all of them.
 */
export function missingMonitorSettings(
  types: readonly MonitorType[],
  args: MonitorArgs,
  env: NodeJS.ProcessEnv,
): MissingMonitorSetting[] {
  return REQUIRED_SETTINGS.filter((setting) => types.includes(setting.type) && !setting.value(args, env)).map(
    ({ type, key, envVar, why }) => ({
      type,
      key,
      envVar,
      message: `monitor_type ${type} needs monitor_args.${key} or ${envVar}${why}`,
    }),
  );
}

/**
 * JSONL always; the others as listed. Remote sinks take their settings from monitor_args, else from the environment
 * as their clients do.
 */
export function createMonitors(options: CreateMonitorsOptions): MonitorGroup {
  const env = options.env ?? process.env;
  const args = options.args ?? {};
  const [missing] = missingMonitorSettings(options.types, args, env);
  if (missing !== undefined) throw new Error(missing.message);
  const monitors: Monitor[] = [new JsonlMonitor(join(options.jobDir, 'metrics.jsonl'))];
  for (const type of new Set(options.types)) {
    if (type === 'jsonl') continue;
    if (type === 'tensorboard') monitors.push(new TensorBoardMonitor(join(options.jobDir, 'tensorboard')));
    if (type === 'mlflow') {
      const trackingUri = args.uri ?? env.MLFLOW_TRACKING_URI ?? ''; // set: missingMonitorSettings found none missing
      const username = args.username ?? env.MLFLOW_TRACKING_USERNAME;
      const password = args.password ?? env.MLFLOW_TRACKING_PASSWORD ?? '';
      monitors.push(
        new MlflowMonitor({
          trackingUri,
          experimentName: options.project,
          runName: options.name,
          // a username given in monitor_args is meant over a token from the environment
          ...(env.MLFLOW_TRACKING_TOKEN && args.username === undefined ? { token: env.MLFLOW_TRACKING_TOKEN } : {}),
          ...(username ? { username, password } : {}),
          ...(options.warn ? { warn: options.warn } : {}),
        }),
      );
    }
    if (type === 'wandb') {
      const apiKey = args.apiKey ?? env.WANDB_API_KEY ?? ''; // set: missingMonitorSettings found none missing
      const baseUrl = args.baseUrl ?? env.WANDB_BASE_URL;
      monitors.push(
        new WandbMonitor({
          apiKey,
          entity: env.WANDB_ENTITY ?? 'default',
          project: options.project,
          runName: options.name,
          ...(baseUrl ? { baseUrl } : {}),
          ...(options.config ? { config: options.config } : {}),
          ...(options.warn ? { warn: options.warn } : {}),
        }),
      );
    }
  }
  return new MonitorGroup(monitors);
}
