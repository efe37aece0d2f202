// Child processes for multi-process tests (data-parallel ranks): a script forked under tsx with an IPC channel. A test
// waits on the messages a child sends (`next`), never on time; a child that exits first rejects the wait, with what it
// wrote to stderr. `killForkedChildren` (in the test file's `after`) ends any child a failed test left behind.
import { type ChildProcess, fork } from 'node:child_process';

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ForkedChild<M> {
  child: ChildProcess;
  exited: Promise<ChildExit>;
  /** Messages received and not yet taken by `next`. */
  received: M[];
  stderr: () => string;
  /** Takes the first message (received or to come) that `match` accepts; `what` names it if the child exits first. */
  next: (match: (message: M) => boolean, what: string) => Promise<M>;
}

const children: ChildProcess[] = [];

export function killForkedChildren(): void {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}

export function forkChild<M>(
  script: string,
  options: { env: NodeJS.ProcessEnv; label: string; serialization?: 'json' | 'advanced' },
): ForkedChild<M> {
  const child = fork(script, [], {
    execArgv: ['--import', 'tsx'],
    env: options.env,
    serialization: options.serialization ?? 'json',
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  children.push(child);
  let stderr = '';
  child.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  const received: M[] = [];
  const waiters: { match: (m: M) => boolean; what: string; resolve: (m: M) => void; reject: (e: Error) => void }[] = [];
  let exit: ChildExit | null = null;
  const settle = () => {
    for (const waiter of [...waiters]) {
      const index = received.findIndex(waiter.match);
      if (index >= 0) waiter.resolve(received.splice(index, 1)[0] as M);
      else if (exit !== null)
        waiter.reject(
          new Error(
            `${options.label} exited (code ${exit.code}, signal ${exit.signal}) before sending ${waiter.what}:\n${stderr}`,
          ),
        );
      else continue;
      waiters.splice(waiters.indexOf(waiter), 1);
    }
  };
  child.on('message', (m: M) => {
    received.push(m);
    settle();
  });
  const exited = new Promise<ChildExit>((resolve) => {
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      settle();
      resolve(exit);
    });
  });
  return {
    child,
    exited,
    received,
    stderr: () => stderr,
    next: (match, what) =>
      new Promise((resolve, reject) => {
        waiters.push({ match, what, resolve, reject });
        settle();
      }),
  };
}
