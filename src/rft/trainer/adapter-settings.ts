// The LoRA adapter a run trains (./trainer-worker-main.ts): loaded from model.lora.path or the checkpoint, or new; an
// adapter folder's rank, alpha and target modules must match the run's settings where they are set, a new adapter
// needs all three, and a resumed run takes its dropout state back from the checkpoint.
import { join } from 'node:path';
import { ADAPTER_CONFIG_FILE, type CausalLM, LoraModel, readAdapterConfig, targetedModules } from '../../model/index.js';
import type { LoadedCheckpoint } from '../checkpoint.js';
import type { SavedTrainerState } from './saved-trainer-state.js';
import type { TrainerInit } from './trainer.js';

/** The run's adapter on `model`: the checkpoint's, model.lora.path's, or a new one; its dropout state as saved. */
export function trainerAdapter(
  model: CausalLM,
  init: TrainerInit,
  settings: NonNullable<TrainerInit['lora']>,
  checkpoint: LoadedCheckpoint | null,
  saved: SavedTrainerState | null,
): LoraModel {
  const adapterDir = checkpoint?.adapterDir ?? init.loraPath;
  if (adapterDir) checkAdapterSettings(model, settings, adapterDir, checkpoint?.adapterDir ? 'checkpoint' : 'path');
  const lora = adapterDir
    ? LoraModel.load(model, adapterDir, { trainable: true, loraDropout: settings.dropout, dropoutSeed: init.seed })
    : LoraModel.attach(model, {
        ...newAdapterShape(settings),
        loraDropout: settings.dropout,
        baseModelNameOrPath: init.modelPath,
        seed: init.seed,
        dropoutSeed: init.seed,
      });
  if (checkpoint && saved) {
    if (saved.loraDropout !== undefined) lora.setRandomState(saved.loraDropout, `${checkpoint.dir}/trainer.json loraDropout`);
    else if (settings.dropout > 0) {
      throw new Error(
        `${checkpoint.dir}/trainer.json: no LoRA dropout state (loraDropout: seed and draws), and model.lora.dropout is ` +
          `${settings.dropout}: the checkpoint was written without dropout state and cannot resume as the same run`,
      );
    }
  }
  return lora;
}

/**
 * The rank, alpha and target modules of the run's LoRA settings against an adapter folder's adapter_config.json
 * (model.lora.path, or the checkpoint a run resumes from): the adapter's weights fix them, so a difference is an error
 * that names both values.
 */
export function checkAdapterSettings(
  model: CausalLM,
  settings: NonNullable<TrainerInit['lora']>,
  dir: string,
  source: 'path' | 'checkpoint',
): void {
  const adapter = readAdapterConfig(dir, model);
  const problems: string[] = [];
  if (settings.rank !== null && adapter.r !== settings.rank)
    problems.push(`model.lora.rank is ${settings.rank}, the adapter's r is ${adapter.r}`);
  if (settings.alpha !== null && adapter.loraAlpha !== settings.alpha)
    problems.push(`model.lora.alpha is ${settings.alpha}, the adapter's lora_alpha is ${adapter.loraAlpha}`);
  const has = new Set(targetedModules(model, adapter.targetModules));
  const wanted = settings.targetModules === null ? [...has] : targetedModules(model, settings.targetModules);
  const onlyWanted = wanted.filter((m) => !has.has(m));
  const onlyAdapter = [...has].filter((m) => !wanted.includes(m));
  if (onlyWanted.length > 0 || onlyAdapter.length > 0) {
    const list = (modules: string[]) =>
      modules.length === 0
        ? 'none'
        : `${modules.slice(0, 3).join(', ')}${modules.length > 3 ? ` and ${modules.length - 3} more` : ''}`;
    problems.push(
      `model.lora.target_modules is ${JSON.stringify(settings.targetModules)}, the adapter's target_modules is ` +
        `${JSON.stringify(adapter.targetModules)} (only the setting selects ${list(onlyWanted)}; only the adapter ` +
        `selects ${list(onlyAdapter)})`,
    );
  }
  if (problems.length === 0) return;
  const remedy =
    source === 'path'
      ? "set them to the adapter's values, or leave model.lora.path unset to start a new adapter"
      : 'a resumed run keeps the adapter it started with: set them back to the values the run started with';
  throw new Error(
    `${join(dir, ADAPTER_CONFIG_FILE)}${source === 'checkpoint' ? " (the checkpoint's adapter)" : ''} does not match the ` +
      `LoRA settings: ${problems.join('; ')}; ${remedy}`,
  );
}

/** A new adapter's rank, alpha and target modules: each must be set (null stands for an adapter folder's value). */
export function newAdapterShape(settings: NonNullable<TrainerInit['lora']>): {
  r: number;
  loraAlpha: number;
  targetModules: string[] | 'all-linear';
} {
  const { rank, alpha, targetModules } = settings;
  const unset = [
    ...(rank === null ? ['rank'] : []),
    ...(alpha === null ? ['alpha'] : []),
    ...(targetModules === null ? ['target_modules'] : []),
  ];
  if (rank === null || alpha === null || targetModules === null) {
    throw new Error(
      `model.lora: ${unset.join(', ')} not set, and there is no adapter folder (model.lora.path) to take ` +
        `${unset.length > 1 ? 'them' : 'it'} from: a new adapter needs them`,
    );
  }
  return { r: rank, loraAlpha: alpha, targetModules };
}
