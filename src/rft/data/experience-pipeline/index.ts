export { ExperiencePipeline, type ExperiencePipelineSettings, type PipelineResult } from './pipeline.js';
export { explorerSavePath, openInputRecorder, saveInputFile, type InputRecorder } from './save-input.js';
export type { ExperienceOperator, ExperienceOperatorModule, OperatorContext, OperatorOutput, OperatorSpec } from './types.js';
export {
  EXPERIENCE_OPERATORS,
  overlongRewardShaping,
  parseShapingConfigs,
  type RewardShapingConfig,
  shapeReward,
} from './operators/index.js';
