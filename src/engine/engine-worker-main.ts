// The worker side of WorkerRolloutEngine (./worker-engine.ts): one RolloutEngine on this thread.
import * as torch from '../torch/index.js';
import { RolloutEngine } from './rollout-engine.js';
import { GenerationError, type ScoreOptions, type TokenEvent } from './types.js';
import type { EngineShape, WorkerEngineOptions, WorkerGenerateRequest, WorkerReply } from './worker-engine.js';

let engine: RolloutEngine | null = null;
/** WorkerEngineOptions.weightSyncBufferBytes: folder syncs stream buckets of this size (undefined: whole). */
let streamBufferBytes: number | undefined;
const inFlight = new Map<number, AbortController>();

function running(): RolloutEngine {
  if (engine === null) throw new Error('the engine worker has no model loaded');
  return engine;
}

torch.serveTensorWorker({
  load(dir: string, options: Omit<WorkerEngineOptions, 'numThreads' | 'startTimeoutMs'>): EngineShape {
    const { weightSyncBufferBytes, ...engineOptions } = options;
    if (weightSyncBufferBytes !== undefined && !(Number.isInteger(weightSyncBufferBytes) && weightSyncBufferBytes > 0))
      throw new RangeError(`weightSyncBufferBytes must be a positive integer, got ${weightSyncBufferBytes}`);
    streamBufferBytes = weightSyncBufferBytes;
    engine = RolloutEngine.load(dir, engineOptions);
    return { slots: engine.slots, maxLength: engine.maxLength, vocabSize: engine.vocabSize };
  },
  async generate(id: number, { streamEvent, ...request }: WorkerGenerateRequest): Promise<WorkerReply<unknown>> {
    const controller = new AbortController();
    inFlight.set(id, controller);
    const onToken = streamEvent ? (event: TokenEvent) => torch.postWorkerEvent(streamEvent, event) : undefined;
    try {
      return {
        ok: true,
        value: await running().generate({ ...request, signal: controller.signal, ...(onToken ? { onToken } : {}) }),
      };
    } catch (error) {
      // as data, so the reason ('invalid': the caller's mistake, answered 400 over HTTP) survives the boundary; an
      // Error re-thrown here would reach the caller as a plain Error
      if (error instanceof GenerationError) return { ok: false, reason: error.reason, message: error.message };
      throw error;
    } finally {
      inFlight.delete(id);
    }
  },
  async score(tokenIds: number[], options: Omit<ScoreOptions, 'signal'>): Promise<WorkerReply<unknown>> {
    try {
      return { ok: true, value: await running().score(tokenIds, options) };
    } catch (error) {
      if (error instanceof GenerationError) return { ok: false, reason: error.reason, message: error.message };
      throw error;
    }
  },
  abort(id: number) {
    inFlight.get(id)?.abort(new Error('aborted by the caller'));
  },
  syncWeights(weights: Record<string, torch.Tensor>) {
    try {
      return running().syncWeights(new Map(Object.entries(weights)));
    } finally {
      for (const t of Object.values(weights)) t.dispose();
    }
  },
  /** Loads the weights of a Hugging Face folder (sync_method checkpoint, a reload) into the engine's model. */
  syncWeightsFromDir(dir: string) {
    return running().syncWeightsFromDir(dir, streamBufferBytes);
  },
  stats() {
    return running().stats;
  },
  async close(reason: string) {
    await engine?.close(reason);
    engine = null;
  },
});
