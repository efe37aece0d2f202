// The child side of startEngineProcesses (./engine-process.ts): one WorkerRolloutEngine behind the OpenAI API on a
// loopback port, with the parent's key and weight reloads from folders inside the job's folder. It tells the parent
// its URL over the IPC channel, and ends when the parent goes (the channel closes) or sends SIGTERM.
import { WorkerRolloutEngine } from '../engine/index.js';
import type { EngineProcessSpec } from './engine-process.js';
import { startOpenAIServer } from './server.js';
import { OpenAIService } from './service.js';

const spec = JSON.parse(process.env.TRINITY_ENGINE_PROCESS ?? 'null') as EngineProcessSpec | null;
if (spec === null || typeof process.send !== 'function') {
  console.error('engine-process-main: start it with startEngineProcesses (it needs its spec and an IPC channel)');
  process.exit(2);
}

const engine = await WorkerRolloutEngine.start(spec.modelDir, spec.engine);
const huge = 1 << 30; // the parent is the only client and sends the explorer's own requests: no request limits here
const service = new OpenAIService({
  modelName: spec.modelName,
  backend: engine,
  vocabSize: engine.vocabSize,
  maxTokens: engine.maxLength,
  maxN: huge,
  maxCompletions: huge,
  maxRequestTokens: huge,
});
const server = await startOpenAIServer({
  service,
  host: '127.0.0.1',
  port: 0,
  apiKey: spec.apiKey,
  maxBodyBytes: huge,
  reloadWeights: { root: spec.reloadRoot, load: (dir) => engine.syncWeightsFromDir(dir) },
});
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await server.close();
  await engine.close('the engine process is stopping');
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('disconnect', () => void stop());
process.send({ type: 'ready', baseURL: server.baseURL });
