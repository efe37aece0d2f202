// Errors that escape a workflow attempt's promise chain on the main thread — a throw inside a setTimeout callback, a
// promise rejected with no handler — from workflows that run in-process (built-ins and registered functions; module
// paths run on worker threads, ./pool.ts). Node's default is to end the process; a run installs these handlers
// instead: an error raised in an attempt's async context (AsyncLocalStorage: timers, immediates and promises started
// by the attempt carry it) fails that attempt like a throw, and anything else goes to `onUnattributed`.
//
//   const uninstall = installWorkflowFaultHandlers({ onUnattributed: (error) => stopTheRun(error) });
import { AsyncLocalStorage } from 'node:async_hooks';

/** What the handlers know of the attempt an error belongs to. */
export interface AttemptScope {
  /** Fails the attempt with `error` (counted as errored, retried as configured). */
  fail(error: Error): void;
}

const attempts = new AsyncLocalStorage<AttemptScope>();

/** Runs `fn` (an in-process workflow attempt) so that errors escaping from its callbacks are attributed to it. */
export function runInAttemptScope<T>(scope: AttemptScope, fn: () => T): T {
  return attempts.run(scope, fn);
}

/** An error the workflow raised outside its attempt's promise chain. */
export class StrayWorkflowError extends Error {
  override name = 'StrayWorkflowError';
}

export interface WorkflowFaultHandlerOptions {
  /** An uncaught exception or unhandled rejection that no running attempt owns (Node's default would end the process). */
  onUnattributed: (error: Error, kind: 'uncaught exception' | 'unhandled rejection') => void;
}

/** Installs process-level handlers (see the header); returns the function that removes them. */
export function installWorkflowFaultHandlers(options: WorkflowFaultHandlerOptions): () => void {
  const handle = (reason: unknown, kind: 'uncaught exception' | 'unhandled rejection') => {
    const error = reason instanceof Error ? reason : new Error(String(reason));
    const scope = attempts.getStore();
    if (scope === undefined) return options.onUnattributed(error, kind);
    scope.fail(new StrayWorkflowError(`the workflow's code raised an ${kind} outside its attempt: ${error.message}`));
  };
  const onException = (error: Error) => handle(error, 'uncaught exception');
  const onRejection = (reason: unknown) => handle(reason, 'unhandled rejection');
  process.on('uncaughtException', onException);
  process.on('unhandledRejection', onRejection);
  return () => {
    process.off('uncaughtException', onException);
    process.off('unhandledRejection', onRejection);
  };
}
