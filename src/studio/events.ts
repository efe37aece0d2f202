// Live updates: server-sent events on GET /api/events. While at least one browser listens, the hub watches the runs
// folder's job folders and stage folders with fs.watch (inotify on Linux: the run's appends wake us, the run does
// nothing extra). A change is read after a short debounce and sent as
//
//   event: metrics   data: {"run", "stage", "rows": [MetricsRow...], "reset": bool}   rows appended (or all, on reset)
//   event: runs      data: [RunSummary...]                                           the runs list, when it changed
//
// Where fs.watch is refused (inotify limits, some network file systems) a folder falls back to fs.watchFile on its
// metrics.jsonl (one stat a second), and the runs list is re-read every STATUS_INTERVAL_MS in any case, because a
// run's status also changes with time alone (a quiet run stops counting as running).
import { type FSWatcher, type StatWatcher, unwatchFile, watch, watchFile } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { dirname, join } from 'node:path';
import type { MetricsRow } from '../rft/report/read.js';
import type { RunIndex, RunSummary } from './runs.js';

export const DEBOUNCE_MS = 30;
export const FALLBACK_POLL_MS = 1000;
export const STATUS_INTERVAL_MS = 15_000;
/** Rows sent in one metrics event at most (a reset of a long run sends a 'reset' for the page to re-fetch instead). */
const MAX_ROWS_PER_EVENT = 2000;

export interface MetricsEvent {
  run: string;
  stage: string;
  rows: MetricsRow[];
  reset: boolean;
}

export class EventHub {
  readonly #clients = new Set<ServerResponse>();
  readonly #watchers = new Map<string, FSWatcher | { fallback: string }>();
  /** Rows already announced per `${run}\0${stage}`. */
  readonly #sent = new Map<string, number>();
  #lastRuns = '';
  #timer: NodeJS.Timeout | null = null;
  #statusTimer: NodeJS.Timeout | null = null;
  #refreshing: Promise<void> | null = null;
  #again = false;

  constructor(readonly runs: RunIndex) {}

  get listeners(): number {
    return this.#clients.size;
  }

  /** Folders watched now (for tests: which fell back to polling). */
  get watched(): { dir: string; fallback: boolean }[] {
    return [...this.#watchers.entries()].map(([dir, w]) => ({ dir, fallback: 'fallback' in w }));
  }

  /** Takes over the response as an event stream until the browser goes away. */
  async subscribe(res: ServerResponse): Promise<void> {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write('retry: 1000\n\n');
    const first = this.#clients.size === 0;
    this.#clients.add(res);
    res.on('close', () => {
      this.#clients.delete(res);
      if (this.#clients.size === 0) this.stop();
    });
    if (first) {
      this.#statusTimer = setInterval(() => this.#schedule(), STATUS_INTERVAL_MS);
      this.#statusTimer.unref();
      // what exists now is the baseline: later rows are news
      await this.#refresh(true);
    }
    res.write(`event: ready\ndata: ${JSON.stringify({ watched: this.#watchers.size })}\n\n`);
  }

  /** Stops watching and ends every stream (server shutdown). */
  stop(): void {
    for (const [dir, w] of this.#watchers) {
      if ('fallback' in w) unwatchFile(w.fallback);
      else w.close();
      this.#watchers.delete(dir);
    }
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#statusTimer) clearInterval(this.#statusTimer);
    this.#timer = null;
    this.#statusTimer = null;
    this.#sent.clear();
    this.#lastRuns = '';
  }

  close(): void {
    for (const res of this.#clients) res.end();
    this.#clients.clear();
    this.stop();
  }

  #send(event: string, data: unknown): void {
    const text = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    for (const res of this.#clients) res.write(text);
  }

  #schedule(): void {
    if (this.#clients.size === 0 || this.#timer !== null) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.#refresh(false);
    }, DEBOUNCE_MS);
  }

  async #refresh(baseline: boolean): Promise<void> {
    if (this.#refreshing !== null) {
      this.#again = true;
      return this.#refreshing;
    }
    this.#refreshing = this.#read(baseline)
      .catch((error: unknown) => this.#send('problem', { message: (error as Error).message }))
      .finally(() => {
        this.#refreshing = null;
        if (this.#again) {
          this.#again = false;
          this.#schedule();
        }
      });
    return this.#refreshing;
  }

  async #read(baseline: boolean): Promise<void> {
    const dirs = await this.runs.findJobDirs();
    const runs: RunSummary[] = await this.runs.list();
    const watch = new Set<string>([this.runs.root]);
    for (const dir of dirs) for (let d = dir; d.startsWith(this.runs.root) && d !== this.runs.root; d = dirname(d)) watch.add(d);
    for (const run of runs) {
      if (run.error !== undefined) continue; // unreadable: the runs list names its error
      const stages = await this.runs.stages(run.id);
      for (const stage of stages) {
        watch.add(stage.dir);
        const key = `${run.id}\0${stage.path}`;
        const rows = stage.metrics.rows;
        const sent = this.#sent.get(key);
        this.#sent.set(key, rows.length);
        if (baseline || sent === rows.length) continue;
        if (sent === undefined || sent > rows.length || rows.length - sent > MAX_ROWS_PER_EVENT)
          this.#send('metrics', { run: run.id, stage: stage.path, rows: [], reset: true } satisfies MetricsEvent);
        else
          this.#send('metrics', { run: run.id, stage: stage.path, rows: rows.slice(sent), reset: false } satisfies MetricsEvent);
      }
    }
    const text = JSON.stringify(runs);
    if (!baseline && text !== this.#lastRuns) this.#send('runs', runs);
    this.#lastRuns = text;
    this.#watch(watch);
  }

  /** Watches exactly `dirs` (non-recursively: each job and stage folder, and the folders above the jobs). */
  #watch(dirs: Set<string>): void {
    for (const [dir, w] of this.#watchers)
      if (!dirs.has(dir)) {
        if ('fallback' in w) unwatchFile(w.fallback);
        else w.close();
        this.#watchers.delete(dir);
      }
    for (const dir of dirs) {
      if (this.#watchers.has(dir)) continue;
      try {
        const watcher = watch(dir, { persistent: false }, () => this.#schedule());
        watcher.on('error', () => this.#fallBack(dir, watcher));
        this.#watchers.set(dir, watcher);
      } catch {
        this.#fallBack(dir, null);
      }
    }
  }

  #fallBack(dir: string, watcher: FSWatcher | null): void {
    watcher?.close();
    const file = join(dir, 'metrics.jsonl');
    const poll: StatWatcher = watchFile(file, { persistent: false, interval: FALLBACK_POLL_MS }, () => this.#schedule());
    poll.unref();
    this.#watchers.set(dir, { fallback: file });
  }
}
