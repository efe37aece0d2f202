// The experience-operator registry (Trinity-RFT's EXPERIENCE_OPERATORS), created empty. Each built-in's file
// registers it at its bottom (`registerExperienceOperator('reward_filter', rewardFilter)`), and ./operators/index.ts
// imports those files in registration order: import EXPERIENCE_OPERATORS from there, where every built-in is
// registered, not from here. A name may also be a module path (`path/to/file.ts#export`, an ExperienceOperatorModule:
// `{ defaults, create(options), feedsSelectors?, description? }`).
import { Registry } from '../../../util/registry.js';
import type { ExperienceOperatorModule } from './types.js';

function operatorFromExport(value: unknown, spec: string): ExperienceOperatorModule {
  const module = value as Partial<ExperienceOperatorModule> | null;
  if (
    module === null ||
    typeof module !== 'object' ||
    typeof module.create !== 'function' ||
    module.defaults === null ||
    typeof module.defaults !== 'object'
  ) {
    throw new Error(`experience operator '${spec}': the export must be an object { defaults: {...}, create(options) }`);
  }
  return module as ExperienceOperatorModule;
}

export const EXPERIENCE_OPERATORS = new Registry<ExperienceOperatorModule>('experience operator', {
  fromExport: operatorFromExport,
});

/**
 * Registers a built-in under `name` (the cast is sound: a module's options are checked against its defaults, by
 * resolveArgs, before create() sees them).
 */
export function registerExperienceOperator<Options extends object>(
  name: string,
  module: ExperienceOperatorModule<Options>,
): void {
  EXPERIENCE_OPERATORS.register(name, module as unknown as ExperienceOperatorModule, module.description ?? '');
}
