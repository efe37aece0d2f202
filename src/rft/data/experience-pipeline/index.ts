export { ExperiencePipeline, type ExperiencePipelineSettings, type PipelineResult } from './pipeline.js';
export { EXPERIENCE_OPERATORS } from './registry.js';
export { explorerSavePath, openInputRecorder, saveInputFile, type InputRecorder } from './save-input.js';
export type { ExperienceOperator, ExperienceOperatorModule, OperatorContext, OperatorOutput, OperatorSpec } from './types.js';
export { overlongRewardShaping } from './operators/overlong-reward-shaping.js';
export { parseShapingConfigs, shapeReward, type RewardShapingConfig } from './operators/reward-shaping-mapper.js';
