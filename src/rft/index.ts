// trinity-rft/rft: the RFT core as a user's code imports it.
//
//   import { type WorkflowSpec, REWARD_FUNCTIONS, scoreResponse } from 'trinity-rft/rft';
//   export const myWorkflow: WorkflowSpec = { run: async ({ task, model, repeatTimes, seed }) => ... };
//
// A workflow is named in YAML by module path (`default_workflow_type: ./my-workflow.ts#myWorkflow`) or registered by
// name (`WORKFLOWS.register('my_workflow', myWorkflow)`); a reward function or an algorithm module likewise.
//
// Top level: what workflows, rewards, algorithm plug-ins and data scripts use — the Workflow API and model handle,
// Task and Experience, the WORKFLOWS / REWARD_FUNCTIONS / ADVANTAGE_FN / POLICY_LOSS_FN / SAMPLE_STRATEGY
// registries with their built-ins, reward helpers, algorithm modules, buffers and tasksets, checkpoints.
// Namespaces: what runs a job — `config` (loadConfig, the schema), `run`, `trainer`, `monitor`, `report`.
export * from './algorithm/index.js';
export * from './buffer/index.js';
export { seededRandom } from './buffer/random.js';
export * from './checkpoint.js';
export * from './experience.js';
export * from './reward/index.js';
export * from './task.js';
export * from './workflow/index.js';
// Both reward/ and workflow/agents/ define one: the top level's is the reward's answer check (math-answer.ts).
export { answersMatch } from './reward/index.js';

export * as config from './run/config/index.js';
export * as taskPipeline from './data/task-pipeline/index.js';
export * as monitor from './monitor/index.js';
export * as report from './report/index.js';
export * as run from './run/index.js';
export * as trainer from './trainer/trainer.js';
