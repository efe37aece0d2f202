// The worker side of WorkerRolloutEngine (./worker-engine.ts): one RolloutEngine on this thread.
import * as torch from '../torch/index.js';
import { GenerationError, RolloutEngine, type TokenEvent } from './rollout-engine.js';
import type { WorkerEngineOptions, WorkerGenerateRequest, WorkerReply } from './worker-engine.js';

let engine: RolloutEngine | null = null;
const inFlight = new Map<number, AbortController>();

function running(): RolloutEngine {
  if (engine === null) throw new Error('the engine worker has no model loaded');
  return engine;
}

torch.serveTensorWorker({
  load(dir: string, options: Omit<WorkerEngineOptions, 'numThreads' | 'startTimeoutMs'>) {
    engine = RolloutEngine.load(dir, options);
    return { slots: engine.slots, maxLength: engine.maxLength };
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
      if (error instanceof GenerationError) return { ok: false, reason: error.reason, message: error.message };
      throw error;
    } finally {
      inFlight.delete(id);
    }
  },
  abort(id: number) {
    inFlight.get(id)?.abort(new Error('aborted by the caller'));
  },
  syncWeights(weights: Record<string, torch.Tensor>) {
    const params = running().model.parameters();
    let copied = 0;
    try {
      torch.noGrad(() => {
        for (const [name, source] of Object.entries(weights)) {
          const target = params.get(name);
          if (target === undefined) throw new Error(`syncWeights: the engine's model has no parameter '${name}'`);
          if (source.shape.join(',') !== target.shape.join(',')) {
            throw new Error(
              `syncWeights: '${name}' has shape [${source.shape.join(', ')}], the engine's [${target.shape.join(', ')}]`,
            );
          }
          target.copy_(source);
          copied++;
        }
      });
    } finally {
      for (const t of Object.values(weights)) t.dispose();
    }
    return copied;
  },
  /** Loads the weights of a Hugging Face folder (sync_method checkpoint) into the engine's model. */
  syncWeightsFromDir(dir: string) {
    const params = running().model.parameters();
    const weights = torch.loadModelWeights(dir, { dtype: running().model.dtype });
    let copied = 0;
    try {
      torch.noGrad(() => {
        for (const [name, target] of params) {
          const source = weights.get(name);
          if (source === undefined) throw new Error(`syncWeightsFromDir: ${dir} has no tensor '${name}'`);
          target.copy_(source);
          copied++;
        }
      });
    } finally {
      for (const t of weights.values()) t.dispose();
    }
    return copied;
  },
  stats() {
    return running().stats;
  },
  async close(reason: string) {
    await engine?.close(reason);
    engine = null;
  },
});
