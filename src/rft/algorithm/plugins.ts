// Algorithm modules from user code: a module slot in YAML may name `path/to/file.ts#exportName` instead of a
// registered name (as Trinity-RFT accepts dotted module paths). The export is an algorithm module —
// { description?, defaults, run(input, options) } — and is registered under that spec, so the rest of the system
// (presets, argument checking, the train step) treats it like a built-in. Registries are per thread: the trainer
// worker loads the same plugins before it resolves the algorithm.
import { isModulePath, loadModuleExport } from '../../util/module-path.js';
import { ADVANTAGE_FN } from './advantage/index.js';
import { POLICY_LOSS_FN } from './policy-loss/index.js';
import type { Registry } from './registry.js';
import { SAMPLE_STRATEGY } from './sample-strategy.js';

const PLUGIN_SLOTS = {
  sample_strategy: SAMPLE_STRATEGY,
  advantage_fn: ADVANTAGE_FN,
  policy_loss_fn: POLICY_LOSS_FN,
} as const;

/** Registers the module-path modules an `algorithm:` section names; returns the specs it loaded. */
export async function loadAlgorithmPlugins(algorithm: Readonly<Record<string, unknown>>, baseDir: string): Promise<string[]> {
  const loaded: string[] = [];
  for (const [slot, registry] of Object.entries(PLUGIN_SLOTS) as [string, Registry<never, unknown>][]) {
    const spec = algorithm[slot];
    if (typeof spec !== 'string' || !isModulePath(spec) || registry.has(spec)) continue;
    const value = await loadModuleExport(spec, `algorithm.${slot}`, baseDir);
    const module = value as { description?: unknown; defaults?: unknown; run?: unknown };
    if (
      module === null ||
      typeof module !== 'object' ||
      typeof module.run !== 'function' ||
      typeof module.defaults !== 'object' ||
      module.defaults === null
    ) {
      throw new Error(`algorithm.${slot} '${spec}': the export must be an object { defaults: {...}, run(input, options) }`);
    }
    registry.register({
      name: spec,
      description: typeof module.description === 'string' ? module.description : `user module ${spec}`,
      defaults: module.defaults as object,
      run: module.run as (input: never, options?: object) => unknown,
    });
    loaded.push(spec);
  }
  return loaded;
}
