// Experience operators by name (Trinity-RFT's EXPERIENCE_OPERATORS) or by module path (`path/to/file.ts#export`, an
// ExperienceOperatorModule: `{ defaults, create(options), feedsSelectors?, description? }`).
import { Registry } from '../../../util/registry.js';
import { dapoDynamicSampling } from './operators/dapo-dynamic-sampling.js';
import { invalidRewardFilter } from './operators/invalid-reward-filter.js';
import { overlongRewardShaping } from './operators/overlong-reward-shaping.js';
import { passRateCalculator } from './operators/pass-rate-calculator.js';
import { rewardFilter } from './operators/reward-filter.js';
import { rewardShapingMapper } from './operators/reward-shaping-mapper.js';
import { rewardStdFilter } from './operators/reward-std-filter.js';
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

/** A module's options are checked against its defaults (resolveArgs) before create() sees them. */
function registerBuiltIn<Options extends object>(name: string, module: ExperienceOperatorModule<Options>): void {
  EXPERIENCE_OPERATORS.register(name, module as unknown as ExperienceOperatorModule, module.description ?? '');
}

registerBuiltIn('reward_filter', rewardFilter);
registerBuiltIn('reward_std_filter', rewardStdFilter);
registerBuiltIn('invalid_reward_filter', invalidRewardFilter);
registerBuiltIn('reward_shaping_mapper', rewardShapingMapper);
registerBuiltIn('pass_rate_calculator', passRateCalculator);
registerBuiltIn('dapo_dynamic_sampling', dapoDynamicSampling);
registerBuiltIn('overlong_reward_shaping', overlongRewardShaping);
