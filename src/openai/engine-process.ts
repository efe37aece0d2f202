// Embedded engines in processes of their own (explorer.rollout_model.engine_process: true): each child process runs a
// WorkerRolloutEngine behind the OpenAI API on a loopback port (./engine-process-main.ts, with a key only this
// process knows), and the explorer reaches them as a RemoteEnginePool (./remote-pool.ts): least-loaded routing,
// prefix affinity, weights by checkpoint-folder reload, and a child that dies leaves the pool instead of ending the
// run. Compared with engines on worker threads, a process has its own heap, allocator and OpenMP pool.
//
//   const pool = await startEngineProcesses({ modelDir, engineNum: 2, numThreads: 2, reloadRoot: jobDir, ... });
//   await pool.generate({ promptIds, n: 4, seed: 1 });
//   await pool.close();                                     // ends the children
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { imagePromptsOf, type WorkerEngineOptions } from '../engine/index.js';
import type { Tokenizer } from '../tokenizer/index.js';
import { RemoteEnginePool, type RemotePoolOptions } from './remote-pool.js';

/** What a child is started with (JSON in its environment). */
export interface EngineProcessSpec {
  modelDir: string;
  modelName: string;
  apiKey: string;
  /** Weight reloads may read folders inside this one (the job folder: its sync/ versions and checkpoints). */
  reloadRoot: string;
  engine: WorkerEngineOptions;
}

export interface EngineProcessOptions
  extends Pick<RemotePoolOptions, 'requestTimeoutMs' | 'healthIntervalMs' | 'downGraceMs' | 'log'> {
  modelDir: string;
  engineNum: number;
  /** Intra-op threads of all engines together: each gets floor(numThreads / engineNum), at least 1. */
  numThreads: number;
  reloadRoot: string;
  tokenizer: Tokenizer | null;
  engine?: Omit<WorkerEngineOptions, 'numThreads'>;
  /** How long a child may take to load its model (default 10 minutes). */
  startTimeoutMs?: number;
}

/** Starts `engineNum` engine processes (all or none) and a RemoteEnginePool over them that ends them on close(). */
export async function startEngineProcesses(options: EngineProcessOptions): Promise<RemoteEnginePool> {
  const apiKey = randomBytes(16).toString('hex');
  const modelName = 'rollout-model';
  const numThreads = Math.max(1, Math.floor(options.numThreads / options.engineNum));
  const children: ChildProcess[] = [];
  const stopAll = async () => {
    await Promise.all(children.map(stopChild));
  };
  try {
    const urls = await Promise.all(
      Array.from({ length: options.engineNum }, (_, i) => {
        const spec: EngineProcessSpec = {
          modelDir: resolve(options.modelDir),
          modelName,
          apiKey,
          reloadRoot: resolve(options.reloadRoot),
          engine: { ...options.engine, numThreads, startTimeoutMs: options.startTimeoutMs ?? 600_000 },
        };
        const child = fork(fileURLToPath(new URL('./engine-process-main.ts', import.meta.url)), [], {
          // tsx as this package resolves it: `--import tsx` alone is resolved from the working directory, which
          // need not see this package's dependencies (a user's folder with trinity installed under node_modules)
          execArgv: ['--import', import.meta.resolve('tsx')],
          env: { ...process.env, TRINITY_ENGINE_PROCESS: JSON.stringify(spec) },
          stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
        });
        children.push(child);
        return waitForReady(child, i, options.startTimeoutMs ?? 600_000);
      }),
    );
    return await RemoteEnginePool.connect({
      baseURLs: urls,
      model: modelName,
      apiKey,
      tokenizer: options.tokenizer,
      vision: imagePromptsOf(options.modelDir), // a vision-language folder: image requests go as chats
      ...(options.requestTimeoutMs !== undefined ? { requestTimeoutMs: options.requestTimeoutMs } : {}),
      ...(options.healthIntervalMs !== undefined ? { healthIntervalMs: options.healthIntervalMs } : {}),
      ...(options.downGraceMs !== undefined ? { downGraceMs: options.downGraceMs } : {}),
      ...(options.log ? { log: options.log } : {}),
      onClose: stopAll,
    });
  } catch (error) {
    await stopAll();
    throw error;
  }
}

/** Resolves with the child's base URL once it is serving; rejects naming the child if it exits or takes too long. */
function waitForReady(child: ChildProcess, index: number, timeoutMs: number): Promise<string> {
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
    process.stderr.write(chunk); // the child's errors stay visible after it started
  });
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`engine process ${index} did not start serving within ${timeoutMs} ms:\n${stderr}`));
    }, timeoutMs);
    const onMessage = (message: { type?: string; baseURL?: string }) => {
      if (message?.type !== 'ready' || typeof message.baseURL !== 'string') return;
      cleanup();
      resolvePromise(message.baseURL);
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
      cleanup();
      reject(new Error(`engine process ${index} exited (code ${code}, signal ${signal}) before serving:\n${stderr}`));
    };
    const cleanup = () => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolvePromise) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000); // a child stuck in a forward: do not wait forever
    child.once('exit', () => {
      clearTimeout(timer);
      resolvePromise();
    });
    child.kill('SIGTERM');
  });
}
