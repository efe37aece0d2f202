// Auxiliary models of a run (explorer.auxiliary_models): judges, reward models, teachers next to the rollout model.
//
//   const auxiliary = await startAuxiliaryModels(settings.auxiliaryModels);   // embedded engines or endpoints
//   const teacher = auxiliary.get('teacher');
//   const usage = new AuxiliaryUsage();
//   const metered = auxiliary.forAttempt({ signal, usage });   // what one workflow attempt sees: calls counted, aborted
//   ...                                                       // with the attempt
//   usage.metrics()   // auxiliary/teacher/{calls,failed,tokens,seconds}
//   await auxiliary.close();
//
// Calls through openai() clients and logprobs() are counted; calls made with another SDK on baseUrl() are not.
import { Tokenizer } from '../../tokenizer/index.js';
import { type EmbeddedAuxiliarySettings, EmbeddedAuxiliaryModel } from './embedded.js';
import { RemoteAuxiliaryModel } from './remote.js';
import { type AttemptAuxiliaryOptions, meteredModel, NamedModels, type ServedAuxiliaryModel } from './metered.js';
import type { AuxiliaryModels } from './types.js';

export type { EmbeddedAuxiliarySettings } from './embedded.js';
export { EmbeddedAuxiliaryModel } from './embedded.js';
export type { RemoteAuxiliarySettings } from './remote.js';
export { RemoteAuxiliaryModel } from './remote.js';
export {
  type AttemptAuxiliaryOptions,
  type AuxiliaryUsageSink,
  meteredModel,
  NamedModels,
  type ServedAuxiliaryModel,
} from './metered.js';
export type { AuxiliaryModel, AuxiliaryModels, AuxiliaryScoreOptions } from './types.js';
export { type AuxiliaryCall, AuxiliaryUsage, meteredFetch } from './usage.js';

/** One auxiliary model as the stage settings describe it (src/rft/auxiliary/config.ts auxiliaryModelSettings). */
export type AuxiliaryModelSettings =
  | ({ type: 'embedded' } & EmbeddedAuxiliarySettings)
  | {
      type: 'openai';
      name: string;
      baseUrl: string;
      apiKey: string | null;
      modelName: string;
      /** Its folder (tokenizer), when model_path is set; null: no tokenizer. */
      modelPath: string | null;
    };

/** The run's auxiliary models, started. */
export class AuxiliaryModelSet extends NamedModels<ServedAuxiliaryModel> {
  /** The models one workflow attempt sees (see AttemptAuxiliaryOptions). */
  forAttempt(options: AttemptAuxiliaryOptions): AuxiliaryModels {
    return new NamedModels(this.list.map((m) => meteredModel(m, options)));
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.list.map((m) => m.close()));
  }
}

/** No auxiliary models (a run without explorer.auxiliary_models). */
export const NO_AUXILIARY_MODELS = new AuxiliaryModelSet([]);

/** Starts every model (all or none: when one fails, the started ones are closed and the error names the failed one). */
export async function startAuxiliaryModels(settings: readonly AuxiliaryModelSettings[]): Promise<AuxiliaryModelSet> {
  const started = await Promise.allSettled(settings.map((s) => startOne(s)));
  const models = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed !== undefined) {
    await Promise.allSettled(models.map((m) => m.close()));
    throw failed.reason;
  }
  return new AuxiliaryModelSet(models);
}

function startOne(s: AuxiliaryModelSettings): Promise<ServedAuxiliaryModel> {
  if (s.type === 'embedded') return EmbeddedAuxiliaryModel.start(s);
  let tokenizer: Tokenizer | null = null;
  if (s.modelPath !== null) {
    try {
      tokenizer = Tokenizer.load(s.modelPath);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      return Promise.reject(new Error(`auxiliary model '${s.name}': model_path ${s.modelPath}: ${reason}`));
    }
  }
  return RemoteAuxiliaryModel.connect({
    name: s.name,
    baseUrl: s.baseUrl,
    apiKey: s.apiKey,
    modelName: s.modelName,
    tokenizer,
  });
}
