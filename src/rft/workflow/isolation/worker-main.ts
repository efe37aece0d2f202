// The entry of a workflow worker thread (started by ./pool.ts): loads module-path workflows and runs one attempt at a
// time with a model handle whose generations happen on the main thread (./worker-backend.ts). The main thread
// enforces explorer.max_timeout by terminating this thread, which stops even a synchronous loop; an uncaught
// exception or unhandled rejection here ends the thread and fails the running attempt.
import { setMaxListeners } from 'node:events';
import { MessageChannel, parentPort } from 'node:worker_threads';
import { loadModuleExport } from '../../../util/module-path.js';
import { attemptModelHandle, EngineModelHandle } from '../model-handle.js';
import type { WorkflowSpec } from '../types.js';
import { type AttemptStart, type FromWorker, sendError, type ToWorker } from './protocol.js';
import { workflowSpecOf } from './spec.js';
import { WorkerBackend } from './worker-backend.js';

const port = parentPort as NonNullable<typeof parentPort>;
const post = (message: FromWorker): void => port.postMessage(message);

const { port1: syncPort, port2: mainSyncPort } = new MessageChannel();
const syncFlag = new SharedArrayBuffer(4);
const backend = new WorkerBackend(syncPort, syncFlag, (version) => {
  handle.modelVersion = version;
});
const handle = new EngineModelHandle(backend);

/** Loaded workflows by (baseDir, spec); a failed load is retried on the next request. */
const specs = new Map<string, Promise<WorkflowSpec>>();
function load(spec: string, baseDir: string | undefined): Promise<WorkflowSpec> {
  const key = `${baseDir ?? ''}\0${spec}`;
  let loaded = specs.get(key);
  if (loaded === undefined) {
    loaded = loadModuleExport(spec, 'workflow', baseDir).then((value) => workflowSpecOf(value, `workflow '${spec}'`));
    loaded.catch(() => specs.delete(key));
    specs.set(key, loaded);
  }
  return loaded;
}

let running: { attempt: number; controller: AbortController } | null = null;

async function runAttempt(start: AttemptStart): Promise<void> {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal); // every model call of a long episode listens to it
  running = { attempt: start.attempt, controller };
  backend.attempt = start.attempt;
  backend.useTokenizer(start.tokenizer);
  backend.vision = start.vision;
  handle.modelVersion = start.modelVersion;
  handle.promptLimit = start.promptLimit;
  try {
    const spec = await load(start.spec, start.baseDir);
    const model = attemptModelHandle(handle, { signal: controller.signal, taskId: start.task.id });
    const value: unknown = await spec.run({
      task: start.task,
      model,
      repeatTimes: start.repeatTimes,
      runIdBase: start.runIdBase,
      seed: start.seed,
      signal: controller.signal,
      isEval: start.isEval,
      ...(start.baseDir !== undefined ? { baseDir: start.baseDir } : {}),
      auxiliaryModels: backend.auxiliaryModels(start.auxiliary, controller.signal),
    });
    try {
      post({ type: 'result', attempt: start.attempt, ok: true, value });
    } catch (error) {
      // e.g. a function or a symbol in what the workflow returned (DataCloneError): malformed experiences
      post({ type: 'result', attempt: start.attempt, ok: false, error: sendError(error), unsendable: true });
    }
  } catch (error) {
    post({ type: 'result', attempt: start.attempt, ok: false, error: sendError(error) });
  } finally {
    // whatever the workflow left running is cut off from the model
    if (!controller.signal.aborted) controller.abort(new Error(`the attempt for task ${start.task.id} has ended`));
    running = null;
  }
}

port.on('message', (message: ToWorker) => {
  if (backend.receive(message)) return;
  switch (message.type) {
    case 'load':
      load(message.spec, message.baseDir).then(
        (spec) =>
          post({
            type: 'loaded',
            id: message.id,
            ok: true,
            repeatable: spec.repeatable !== false,
            description: spec.description ?? '',
          }),
        (error: unknown) => post({ type: 'loaded', id: message.id, ok: false, error: sendError(error) }),
      );
      return;
    case 'run':
      void runAttempt(message.start);
      return;
    case 'abort':
      if (running?.attempt === message.attempt) running.controller.abort(new Error(message.reason));
      return;
  }
});

port.postMessage({ type: 'ready', syncPort: mainSyncPort, syncFlag } satisfies FromWorker, [mainSyncPort]);
