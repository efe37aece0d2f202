// `trinity run --nproc-per-node M [--nnodes N --node-rank K --master-addr A --master-port P]`: starts the M ranks
// of a data-parallel run that live on this machine, as torchrun's static launch does: each rank is the same
// `trinity run` command in a child process with the torchrun environment, its output lines prefixed "[rankR]: ".
// On node K of N (nodes numbered from 0), local rank i is global rank
//
//   RANK = K * M + i,  LOCAL_RANK = i,  WORLD_SIZE = N * M,  LOCAL_WORLD_SIZE = M,  GROUP_RANK = K,
//   MASTER_ADDR = A,  MASTER_PORT = P
//
// so every node runs the same command but its --node-rank. One node (N = 1): A defaults to MASTER_ADDR, else
// 127.0.0.1, and P to MASTER_PORT, else a free port; several nodes: A is required (node 0's address, where rank 0
// serves the rendezvous) and P defaults to MASTER_PORT, else 29500, as torchrun's.
//
// Faults: when a rank fails (non-zero exit, or killed by a signal), the others learn it in their next collective
// (a dead peer breaks it at once; a hung one makes it time out after trainer.distributed_timeout) and exit with an
// error naming the collective and the rank; a rank still running `graceMs` after the first failure gets SIGTERM,
// and SIGKILL 30 s later. The launcher exits with the first failure's code (128 + signal number for a signal).
// SIGINT and SIGTERM are passed on to every rank (each stops after the current step); its exit code is 130 / 143.
// Each node's launcher watches its own ranks: a whole node that dies is seen by the other nodes' ranks in their
// next collective, as a dead rank is.
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { constants } from 'node:os';
import { createInterface } from 'node:readline';

export interface LaunchOptions {
  /** Ranks to start on this machine (nproc * nnodes >= 2). */
  nproc: number;
  /** Machines taking part, each starting `nproc` ranks (default 1). */
  nnodes?: number;
  /** This machine's index among them, 0..nnodes-1 (default 0). */
  nodeRank?: number;
  /** Where rank 0 serves the rendezvous (default MASTER_ADDR, else 127.0.0.1; required when nnodes > 1). */
  masterAddr?: string;
  /** Its port (default MASTER_PORT, else a free port on one node, 29500 on several). */
  masterPort?: number;
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

/** Checks the launch's sizes and settles where rank 0 serves the rendezvous (see the header). */
async function rendezvousOf(options: LaunchOptions, env: NodeJS.ProcessEnv): Promise<{ masterAddr: string; masterPort: number }> {
  const { nproc, nnodes = 1, nodeRank = 0 } = options;
  if (!Number.isInteger(nproc) || nproc < 1) throw new RangeError(`launchRanks: nproc must be an integer >= 1, got ${nproc}`);
  if (!Number.isInteger(nnodes) || nnodes < 1) throw new RangeError(`launchRanks: nnodes must be an integer >= 1, got ${nnodes}`);
  if (nproc * nnodes < 2) throw new RangeError(`launchRanks: nproc * nnodes must be >= 2, got ${nproc} * ${nnodes}`);
  if (!Number.isInteger(nodeRank) || nodeRank < 0 || nodeRank >= nnodes)
    throw new RangeError(`launchRanks: nodeRank must be an integer in [0, ${nnodes - 1}], got ${nodeRank}`);
  const masterAddr = options.masterAddr ?? (env.MASTER_ADDR || (nnodes === 1 ? '127.0.0.1' : undefined));
  if (masterAddr === undefined)
    throw new Error('launchRanks: nnodes > 1 needs masterAddr (node 0, where rank 0 serves the rendezvous)');
  const masterPort =
    options.masterPort ?? (env.MASTER_PORT ? Number(env.MASTER_PORT) : nnodes === 1 ? await freePort(masterAddr) : 29500);
  return { masterAddr, masterPort };
}

/** Starts the ranks and waits for all of them; returns the exit code for the launcher. */
export async function launchRanks(options: LaunchOptions): Promise<number> {
  const { nproc, graceMs, nnodes = 1, nodeRank = 0 } = options;
  const worldSize = nproc * nnodes;
  const stdout = options.stdout ?? process.stdout;
  const stderr = options.stderr ?? process.stderr;
  const say = (line: string) => stderr.write(`[launcher] ${line}\n`);
  const env = options.env ?? process.env;
  const { masterAddr, masterPort } = await rendezvousOf(options, env);
  const firstRank = nodeRank * nproc;
  say(
    nnodes === 1
      ? `starting ${nproc} ranks on this machine (rendezvous at ${masterAddr}:${masterPort})`
      : `node ${nodeRank} of ${nnodes}: starting ranks ${firstRank}..${firstRank + nproc - 1} of ${worldSize} (rendezvous at ${masterAddr}:${masterPort})`,
  );

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
    for (let localRank = 0; localRank < nproc; localRank++) {
      const rank = firstRank + localRank;
      const child = spawn(program, args, {
        env: {
          ...env,
          RANK: String(rank),
          LOCAL_RANK: String(localRank),
          WORLD_SIZE: String(worldSize),
          LOCAL_WORLD_SIZE: String(nproc),
          GROUP_RANK: String(nodeRank),
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

/** The launch flags of `trinity run`, as given (strings; undefined when absent). */
export interface LaunchFlags {
  'nproc-per-node'?: string | undefined;
  nnodes?: string | undefined;
  'node-rank'?: string | undefined;
  'master-addr'?: string | undefined;
  'master-port'?: string | undefined;
}

/** What `trinity run`'s launch flags ask for: the ranks this machine starts, or null (this process is the run). */
export type LaunchPlan = Pick<LaunchOptions, 'nproc' | 'nnodes' | 'nodeRank' | 'masterAddr' | 'masterPort'>;

/**
 * Checks the launch flags together; a bad value or combination is an error naming the flag. `env` is checked for a
 * process that is already a rank (WORLD_SIZE > 1: torchrun or a launcher started it).
 */
export function launchPlanFromFlags(flags: LaunchFlags, env: NodeJS.ProcessEnv = process.env): LaunchPlan | null {
  const given = (Object.keys(flags) as (keyof LaunchFlags)[]).filter((name) => flags[name] !== undefined);
  if (given.length === 0) return null;
  const integer = (name: keyof LaunchFlags, min: number, max: number): number | undefined => {
    const raw = flags[name];
    if (raw === undefined) return undefined;
    const value = /^\d+$/.test(raw.trim()) ? Number(raw) : Number.NaN;
    if (!Number.isSafeInteger(value) || value < min || value > max)
      throw new Error(`run: --${name} must be an integer in [${min}, ${max}], got '${raw}'`);
    return value;
  };
  const nproc = integer('nproc-per-node', 1, 1024) ?? 1;
  const nnodes = integer('nnodes', 1, 65536) ?? 1;
  const nodeRank = integer('node-rank', 0, 65535);
  const masterPort = integer('master-port', 1, 65535);
  const masterAddr = flags['master-addr'];
  if (masterAddr !== undefined && masterAddr.trim() === '') throw new Error('run: --master-addr is empty');
  if (nodeRank !== undefined && nodeRank >= nnodes)
    throw new Error(`run: --node-rank ${nodeRank} is out of range for --nnodes ${nnodes} (nodes are 0..${nnodes - 1})`);
  if (nnodes > 1) {
    if (nodeRank === undefined)
      throw new Error(`run: --nnodes ${nnodes} needs --node-rank K: this machine's index, 0..${nnodes - 1}, different on each`);
    if (masterAddr === undefined)
      throw new Error(`run: --nnodes ${nnodes} needs --master-addr A: the address of node 0, where rank 0 serves the rendezvous`);
  }
  const named = given.map((name) => `--${name}`).join(', ');
  if (nproc * nnodes === 1) {
    if (given.length === 1 && flags['nproc-per-node'] !== undefined) return null;
    throw new Error(
      `run: ${named} with one rank in all (--nproc-per-node ${nproc} --nnodes ${nnodes}): nothing to launch; drop the flags to run in this process`,
    );
  }
  if (Number(env.WORLD_SIZE ?? 1) > 1)
    throw new Error(
      `run: ${named} ${given.length === 1 ? 'starts' : 'start'} the ranks itself, but this process is already one (WORLD_SIZE=${env.WORLD_SIZE})`,
    );
  return {
    nproc,
    nnodes,
    nodeRank: nodeRank ?? 0,
    ...(masterAddr === undefined ? {} : { masterAddr }),
    ...(masterPort === undefined ? {} : { masterPort }),
  };
}
