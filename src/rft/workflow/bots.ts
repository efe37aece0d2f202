// bots_math_boxed_workflow (Trinity-RFT's BOTS example, BOTSMathBoxedWorkflow): math_boxed_workflow over BOTS' rows,
// whose prompt column already holds the conversation and whose answer is nested:
//
//   {"prompt": [{"role": "user", "content": "… put the answer in \\boxed{}"}], "reward_model": {"ground_truth": "3"}}
//   with format {prompt_key: prompt, response_key: reward_model.ground_truth}
//
//   messages = the row's turns as they are (no system prompt is added: BOTS' prompts carry their own instructions)
//   reward   = bots_math_boxed_reward (../reward/bots.ts), workflow_args with_think and format_score_coef passed on
//
// The taskset reader makes such a prompt column the task's messages and reads the dotted response key
// (../buffer/taskset.ts); the selector BOTS pairs it with is difficulty_based with two feature_keys. The example's other
// config (bots/random.yaml) names the workflow by its Python class path, registered here as the same workflow.
import { singleTurnWorkflow } from './single-turn.js';
import { WORKFLOWS } from './workflow-registry.js';

export const botsMathBoxedWorkflow = singleTurnWorkflow('bots_math_boxed_workflow', {
  defaultRewardFn: 'bots_math_boxed_reward',
  rewardArgsFromWorkflowArgs: ['with_think', 'format_score_coef'],
});

WORKFLOWS.register('bots_math_boxed_workflow', botsMathBoxedWorkflow);
WORKFLOWS.register(
  'examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow',
  botsMathBoxedWorkflow,
  "the BOTS example's class path of bots_math_boxed_workflow (bots/random.yaml names it so)",
);
