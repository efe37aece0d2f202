// Runs the Studio starts and controls: `trinity run --config FILE` as a child process, for a config file inside the
// runs folder whose job folder is inside it too (so the run appears on the Runs page). Stop is Ctrl-C's signal,
// SIGINT: `trinity run` finishes the step in flight, writes what it has, and exits 130. Resume is what resuming is for
// `trinity run`: the same command again (it continues from the latest checkpoint and skips finished stages).
//
// Only runs this Studio process started can be stopped or resumed from it: a run started in a terminal is another
// user's process, and the Studio never signals a process it did not start.
//
// For its runs the Studio writes <job>/run_status.json ({state, pid, host}; src/studio/runs.ts reads it): running
// while the process lives, then finished (exit 0), interrupted (SIGINT/SIGTERM: 130/143) or failed.
import { type ChildProcess, spawn } from 'node:child_process';
import { realpathSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { ConfigError } from '../rft/run/config/index.js';
import { checkConfigFile } from '../rft/run/config/check.js';
import { runningStatus, writeRunStatus } from '../rft/run/run-status.js';
import { readJson, relativeToRoot } from './body.js';
import type { StudioContext } from './context.js';
import { pathPresent } from '../util/confined-path.js';
import { isInside, resolveInside, writeUnderRoot } from './paths.js';
import { HttpError, type Route } from './router.js';

/** The `trinity` command of this package (run with this Node, as `trinity run --nproc-per-node` starts its ranks). */
const TRINITY_BIN = fileURLToPath(new URL('../../bin/trinity.js', import.meta.url));
/** Lines of a run's output kept for the page (the whole output is in <runs>/.studio/logs/). */
const LOG_LINES = 200;

export type LaunchState = 'running' | 'stopping' | 'finished' | 'interrupted' | 'failed';

export interface LaunchInfo {
  /** 1, 2, ... in start order. */
  id: number;
  /** The config file, relative to the runs folder. */
  config: string;
  /** The run id (job folder relative to the runs folder) on the Runs page. */
  run: string;
  state: LaunchState;
  pid: number | null;
  exitCode: number | null;
  /** How many times it was started (resumes + 1). */
  starts: number;
  startedAt: number;
  endedAt: number | null;
  /** The last lines of its output. */
  log: string[];
  /** The log file, relative to the runs folder. */
  logFile: string;
}

interface Launch {
  info: LaunchInfo;
  configPath: string;
  jobDir: string;
  child: ChildProcess | null;
  exited: Promise<void>;
}

/** The launches of one Studio server. */
export class LaunchManager {
  readonly #launches: Launch[] = [];
  readonly #watchers = new Set<ServerResponse>();

  constructor(readonly root: string) {}

  list(): LaunchInfo[] {
    return this.#launches.map((l) => structuredClone(l.info));
  }

  /** Starts `trinity run` on a config inside the runs folder; refused (400 with the config's problems) when invalid. */
  async start(configFile: string): Promise<LaunchInfo> {
    const configPath = await resolveInside(this.root, configFile);
    if (!/\.ya?ml$/.test(configPath)) throw new HttpError(403, `'${configFile}' is not a YAML config (.yaml, .yml)`);
    const jobDir = await this.#checkedJobDir(configPath);
    const busy = this.#launches.find((l) => l.jobDir === jobDir && l.child !== null);
    if (busy !== undefined)
      throw new HttpError(409, `run '${busy.info.run}' is already running (launch ${busy.info.id}): stop it first`);
    const known = this.#launches.find((l) => l.jobDir === jobDir);
    const launch: Launch = known ?? {
      info: {
        id: this.#launches.length + 1,
        config: relativeToRoot(this.root, configPath),
        run: relativeToRoot(this.root, jobDir) || '.',
        state: 'running',
        pid: null,
        exitCode: null,
        starts: 0,
        startedAt: 0,
        endedAt: null,
        log: [],
        logFile: '',
      },
      configPath,
      jobDir,
      child: null,
      exited: Promise.resolve(),
    };
    if (known === undefined) this.#launches.push(launch);
    launch.configPath = configPath;
    launch.info.config = relativeToRoot(this.root, configPath);
    this.#spawn(launch);
    return structuredClone(launch.info);
  }

  /** Ctrl-C for a run this Studio started: SIGINT, the run stops after its current step. */
  stop(id: number): LaunchInfo {
    const launch = this.#get(id);
    if (launch.child === null) throw new HttpError(409, `launch ${id} (${launch.info.run}) is not running`);
    launch.child.kill('SIGINT');
    launch.info.state = 'stopping';
    this.#line(launch, '[studio] stop: SIGINT sent (the run stops after its current step)');
    this.#changed();
    return structuredClone(launch.info);
  }

  /** Runs the same config again: `trinity run` resumes from the latest checkpoint and skips finished stages. */
  async resume(id: number): Promise<LaunchInfo> {
    const launch = this.#get(id);
    return this.start(relativeToRoot(this.root, launch.configPath));
  }

  /** Resolves when launch `id`'s current process has exited. */
  exited(id: number): Promise<void> {
    return this.#get(id).exited;
  }

  /** Server-sent events: the launches list now and after every change. */
  subscribe(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    this.#watchers.add(res);
    res.on('close', () => this.#watchers.delete(res));
    res.write(`event: launches\ndata: ${JSON.stringify(this.list())}\n\n`);
  }

  close(): void {
    for (const res of this.#watchers) res.end();
    this.#watchers.clear();
  }

  #get(id: number): Launch {
    const launch = this.#launches.find((l) => l.info.id === id);
    if (launch === undefined)
      throw new HttpError(
        404,
        `no launch ${id}: only runs started from this Studio (since it started) can be stopped or resumed here`,
      );
    return launch;
  }

  /** The config's job folder, after the checks `trinity config check` makes; it must lie inside the runs folder. */
  async #checkedJobDir(configPath: string): Promise<string> {
    const { resolveAlgorithm } = await import('../rft/algorithm/presets.js');
    let jobDir: string;
    try {
      const { config } = await checkConfigFile(configPath, { resolveAlgorithm });
      jobDir = config.checkpoint_job_dir;
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      throw new HttpError(400, `not started: ${error.message}`);
    }
    // the nearest part of the path that exists, a dangling link included: its real path must be inside the runs folder
    // (a dangling link has none: refused), and what does not exist yet is made below it by the run
    let existing = jobDir;
    while (!pathPresent(existing)) existing = dirname(existing);
    let real: string | null;
    try {
      real = join(realpathSync(existing), jobDir.slice(existing.length));
    } catch {
      real = null;
    }
    if (real === null || !isInside(this.root, real) || real === this.root)
      throw new HttpError(
        403,
        `not started: its job folder ${jobDir} (checkpoint_root_dir/project/name) is not inside the runs folder ${this.root}, ` +
          'so this Studio could not show it: set checkpoint_root_dir to the runs folder',
      );
    return real;
  }

  #spawn(launch: Launch): void {
    const logFile = join(this.root, '.studio', 'logs', `launch-${launch.info.id}.log`);
    // made (or refused: a link out of the runs folder) before the run starts
    writeUnderRoot(this.root, logFile, '', { append: true });
    const child = spawn(process.execPath, [TRINITY_BIN, 'run', '--config', launch.configPath], {
      cwd: dirname(launch.configPath),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    launch.child = child;
    Object.assign(launch.info, {
      state: 'running',
      pid: child.pid ?? null,
      exitCode: null,
      starts: launch.info.starts + 1,
      startedAt: Date.now() / 1000,
      endedAt: null,
      logFile: relativeToRoot(this.root, logFile),
    } satisfies Partial<LaunchInfo>);
    this.#line(launch, `[studio] start ${launch.info.starts}: trinity run --config ${launch.info.config} (pid ${child.pid})`);
    this.#writeStatus(launch, 'running');
    let pending = '';
    const take = (chunk: Buffer) => {
      try {
        writeUnderRoot(this.root, logFile, chunk, { append: true });
      } catch {
        // the log file was replaced (by a link out of the runs folder?) meanwhile: not followed; the page keeps the lines
      }
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) this.#line(launch, line);
      if (lines.length > 0) this.#changed();
    };
    child.stdout?.on('data', take);
    child.stderr?.on('data', take);
    launch.exited = new Promise<void>((resolveExit) => {
      child.on('error', (error) => {
        this.#line(launch, `[studio] could not start: ${error.message}`);
      });
      child.on('close', (code, signal) => {
        if (pending !== '') this.#line(launch, pending);
        launch.child = null;
        const exitCode = code ?? (signal === 'SIGINT' ? 130 : signal === 'SIGTERM' ? 143 : 1);
        const state: LaunchState = exitCode === 0 ? 'finished' : exitCode === 130 || exitCode === 143 ? 'interrupted' : 'failed';
        Object.assign(launch.info, { state, exitCode, endedAt: Date.now() / 1000, pid: null });
        this.#line(launch, `[studio] exited with code ${exitCode} (${state})`);
        this.#writeStatus(launch, state);
        this.#changed();
        resolveExit();
      });
    });
    this.#changed();
  }

  #writeStatus(launch: Launch, state: Exclude<LaunchState, 'stopping'>): void {
    // `trinity run` records its own status (src/rft/run/run-status.ts); this covers a child killed before it could
    const pid = launch.child?.pid;
    writeRunStatus(launch.jobDir, state === 'running' && pid !== undefined ? runningStatus(pid) : { state });
  }

  #line(launch: Launch, line: string): void {
    launch.info.log.push(line);
    if (launch.info.log.length > LOG_LINES) launch.info.log.splice(0, launch.info.log.length - LOG_LINES);
  }

  #changed(): void {
    const data = `event: launches\ndata: ${JSON.stringify(this.list())}\n\n`;
    for (const res of this.#watchers) res.write(data);
  }
}

const managers = new WeakMap<StudioContext, LaunchManager>();

/** The launch manager of a Studio server (made on first use). */
export function launchesOf(studio: StudioContext): LaunchManager {
  let manager = managers.get(studio);
  if (manager === undefined) {
    manager = new LaunchManager(studio.root);
    managers.set(studio, manager);
  }
  return manager;
}

const StartBody = z.strictObject({ config: z.string().min(1).max(500) });
const launchId = (text: string | undefined): number => {
  const id = Number(text);
  if (!Number.isInteger(id) || id < 1) throw new HttpError(400, `launch id must be a positive integer, got '${text}'`);
  return id;
};

export const launchRoutes: Route[] = [
  {
    method: 'GET',
    path: '/api/launches',
    description: 'the runs this Studio started: state, pid, exit code, the last lines of their output',
    handle: ({ studio }) => launchesOf(studio).list(),
  },
  {
    method: 'GET',
    path: '/api/launches/events',
    description: 'server-sent events: the launches list after every change (start, output, stop, exit)',
    handle: ({ res, studio }) => {
      launchesOf(studio).subscribe(res);
      return undefined;
    },
  },
  {
    method: 'POST',
    path: '/api/launches',
    description: '{config}: starts trinity run on a config file inside the runs folder (its job folder inside it too)',
    handle: async ({ req, studio }) => {
      const { config } = await readJson(req, StartBody);
      return launchesOf(studio).start(config);
    },
  },
  {
    method: 'POST',
    path: '/api/launches/:id/stop',
    description: 'SIGINT (Ctrl-C) to a run this Studio started: it stops after its current step',
    handle: ({ params, studio }) => launchesOf(studio).stop(launchId(params.id)),
  },
  {
    method: 'POST',
    path: '/api/launches/:id/resume',
    description: 'runs the same config again: trinity run resumes from the latest checkpoint',
    handle: ({ params, studio }) => launchesOf(studio).resume(launchId(params.id)),
  },
];
