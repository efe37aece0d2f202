// A command run as a child process by a test: its stdout and stderr collected together, its exit code and signal.
// Settles on 'close' (the process ended and its output was read to the end, so an assertion on the output sees all of
// it). `onOutput` sees the output so far after each chunk, with the child, to act on an event the command reports.
// `guard` is a harness guard, not part of what is tested: a command still running after it is killed and the promise
// rejects with its output, instead of the test hanging.
import { type ChildProcess, spawn } from 'node:child_process';

export interface ProcessExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** stdout and stderr together, in the order they arrived */
  output: string;
}

export interface RunProcessOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  onOutput?: (output: string, child: ChildProcess) => void;
  guard?: { seconds: number; what: string };
}

export function runProcess(command: string, args: string[], options: RunProcessOptions = {}): Promise<ProcessExit> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const take = (d: Buffer) => {
      output += d;
      options.onOutput?.(output, child);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    const guard =
      options.guard === undefined
        ? undefined
        : setTimeout(() => {
            child.kill('SIGKILL');
            reject(new Error(`${options.guard?.what} did not finish within ${options.guard?.seconds} s:\n${output}`));
          }, options.guard.seconds * 1000);
    child.once('error', (error) => {
      clearTimeout(guard);
      reject(error);
    });
    child.once('close', (code, signal) => {
      clearTimeout(guard);
      resolve({ code, signal, output });
    });
  });
}
