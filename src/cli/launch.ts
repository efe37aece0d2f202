// `trinity run --nproc-per-node N`: starts the N ranks of a data-parallel run on this machine, as torchrun's
// standalone mode does: each rank is the same `trinity run` command in a child process with the torchrun
// environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; a free port unless
// MASTER_PORT is set), its output lines prefixed with "[rankR]: ".
//
// Faults: when a rank fails (non-zero exit, or killed by a signal), the others learn it in their next collective
// (a dead peer breaks it at once; a hung one makes it time out after trainer.distributed_timeout) and exit with an
// error naming the collective and the rank; a rank still running `graceMs` after the first failure gets SIGTERM,
// and SIGKILL 30 s later. The launcher exits with the first failure's code (128 + signal number for a signal).
// SIGINT and SIGTERM are passed on to every rank (each stops after the current step); its exit code is 130 / 143.
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { constants } from 'node:os';
import { createInterface } from 'node:readline';

export interface LaunchOptions {
  /** Ranks to start (>= 2). */
  nproc: number;
  /** The program and arguments every rank runs. */
  command: readonly [string, ...string[]];
  /** The environment the ranks inherit (default process.env); MASTER_ADDR and MASTER_PORT are kept when set. */
  env?: NodeJS.ProcessEnv;
  /** How long the other ranks get to stop by themselves after one failed, before SIGTERM. */
  graceMs: number;
  /** Where the launcher's own lines and the ranks' prefixed output go (default: process.stdout / process.stderr). */
  stdout?: NodeJS.WritableStream;
  stderr?: NodeJS.WritableStream;
}

/** A free TCP port on this machine (the OS picks it; the store binds it moments later, as torchrun does). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? resolve(port) : reject(new Error(`no free port on ${host}`))));
    });
  });
}

const exitCodeOf = (code: number | null, signal: NodeJS.Signals | null): number =>
  code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0);

const describeExit = (code: number | null, signal: NodeJS.Signals | null): string =>
  signal ? `killed by ${signal}` : `exit code ${code}`;

/** Starts the ranks and waits for all of them; returns the exit code for the launcher. */
export async function launchRanks(options: LaunchOptions): Promise<number> {
  const { nproc, graceMs } = options;
  if (!Number.isInteger(nproc) || nproc < 2) throw new RangeError(`launchRanks: nproc must be an integer >= 2, got ${nproc}`);
  const stdout = options.stdout ?? process.stdout;
  const stderr = options.stderr ?? process.stderr;
  const say = (line: string) => stderr.write(`[launcher] ${line}\n`);
  const env = options.env ?? process.env;
  const masterAddr = env.MASTER_ADDR || '127.0.0.1';
  const masterPort = env.MASTER_PORT ? Number(env.MASTER_PORT) : await freePort(masterAddr);
  say(`starting ${nproc} ranks on this machine (rendezvous at ${masterAddr}:${masterPort})`);

  const [program, ...args] = options.command;
  const children: ChildProcess[] = [];
  const exited: Promise<void>[] = [];
  let failure: { rank: number; code: number } | null = null;
  let stoppedBy: NodeJS.Signals | null = null;
  const timers: NodeJS.Timeout[] = [];
  const live = () => children.filter((c) => c.exitCode === null && c.signalCode === null);
  const signalAll = (signal: NodeJS.Signals) => {
    for (const child of live()) child.kill(signal);
  };

  const onSignal = (signal: NodeJS.Signals) => {
    stoppedBy ??= signal;
    say(`${signal}: passed on to every rank (each stops after its current step; again to quit at once)`);
    signalAll(signal);
  };
  const onInt = () => onSignal('SIGINT');
  const onTerm = () => onSignal('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);

  try {
    for (let rank = 0; rank < nproc; rank++) {
      const child = spawn(program, args, {
        env: {
          ...env,
          RANK: String(rank),
          LOCAL_RANK: String(rank),
          WORLD_SIZE: String(nproc),
          LOCAL_WORLD_SIZE: String(nproc),
          GROUP_RANK: '0',
          MASTER_ADDR: masterAddr,
          MASTER_PORT: String(masterPort),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
        // its own process group: a Ctrl-C in the terminal reaches the ranks once, through the launcher
        detached: true,
      });
      children.push(child);
      const prefix = `[rank${rank}]: `;
      const streams = [
        [child.stdout, stdout],
        [child.stderr, stderr],
      ] as const;
      const drained = streams.map(
        ([from, to]) =>
          new Promise<void>((resolve) => {
            if (from === null) return resolve();
            const lines = createInterface({ input: from, crlfDelay: Number.POSITIVE_INFINITY });
            lines.on('line', (line) => to.write(`${prefix}${line}\n`));
            lines.on('close', resolve);
          }),
      );
      const ended = new Promise<void>((resolve) => {
        child.once('error', (error) => {
          say(`rank ${rank} could not start: ${error.message}`);
          failure ??= { rank, code: 1 };
          resolve();
        });
        child.once('exit', (code, signal) => {
          const failed = code !== 0;
          say(`rank ${rank} (pid ${child.pid}) exited: ${describeExit(code, signal)}`);
          if (failed && failure === null && stoppedBy === null) {
            failure = { rank, code: exitCodeOf(code, signal) };
            if (live().length > 0) {
              say(
                `rank ${rank} failed: the other ranks stop when their next collective fails; ` +
                  `any still running in ${Math.round(graceMs / 1000)} s get SIGTERM`,
              );
              timers.push(
                setTimeout(() => {
                  signalAll('SIGTERM');
                  timers.push(setTimeout(() => signalAll('SIGKILL'), 30_000));
                }, graceMs),
              );
            }
          }
          resolve();
        });
      });
      exited.push(Promise.all([ended, ...drained]).then(() => undefined));
      if (child.pid !== undefined) say(`rank ${rank}: pid ${child.pid}`);
    }
    await Promise.all(exited);
  } finally {
    for (const timer of timers) clearTimeout(timer);
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
  }
  const failed = failure as { rank: number; code: number } | null;
  if (failed !== null) {
    say(`the run failed: rank ${failed.rank} first (exit code ${failed.code})`);
    return failed.code;
  }
  if (stoppedBy !== null) return exitCodeOf(null, stoppedBy);
  return 0;
}
