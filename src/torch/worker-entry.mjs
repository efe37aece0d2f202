// Worker bootstrap for TypeScript worker modules: registers tsx's loader on this thread, then imports the module
// named in workerData. (Loader hooks of the parent thread do not reach workers on Node 20.)
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.trinityWorkerModule);
