// simple_mm_workflow (and async_simple_mm_workflow, the same workflow): Trinity-RFT's SimpleMMWorkflow, the
// single-turn workflow of its vision-language examples (grpo_vlm, mix_vlm). One prompt holding the task's images,
// repeatTimes answers sampled in one call, each scored; a single-turn workflow (./single-turn.ts) with these defaults:
//
//   messages     [system: MM_SYSTEM_PROMPT, user: the task's images + its prompt text]. The taskset's format.image_key
//                puts the images into the user turn as image content parts (../buffer/dataset-images.ts: at the
//                prompt's <image> markers, the rest before the text, as Trinity's build_mm_message orders them). A
//                task's own system prompt (format.system_prompt or system_prompt_key) replaces MM_SYSTEM_PROMPT
//                (Trinity's class always used its own); a task without images is a plain text prompt.
//   generation   each image's placeholder expanded to its token count and the images sent to the engine with the
//                prompt ids; every experience keeps the images (data URLs), so the trainer recomputes the log-probs
//                over the same pixels (../trainer/vision-rows.ts).
//   reward       reward = the task's reward function (default_reward_fn_type / reward_fn_key), else math_boxed_reward
//                (accuracy of the last \boxed{} answer): Trinity's newest SimpleMMWorkflow needs the taskset to name
//                one (its examples name math_boxed_reward) and its older one scored \boxed{} accuracy itself.
//   workflow_args  none are read (Trinity's class read none and dropped them, e.g. mix_vlm's with_think): a config's
//                are reported in the "ignored on this backend" block (ignoredWorkflowArgs), not refused; math_boxed_reward's
//                with_think goes in reward_fn_args.
//   videos       format.video_key is refused by name (../config/unsupported-keys.ts): images only.
import { singleTurnWorkflow } from './single-turn.js';
import type { WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

/** The system prompt of simple_mm_workflow (this backend's wording of Trinity's): reason in <think>, answer boxed. */
export const MM_SYSTEM_PROMPT =
  'You are a helpful assistant that solves math problems. First think the reasoning through and write it as ' +
  '<think>\n your reasoning </think>\n, then always give the final answer as a closed-form result in \\boxed{}.';

export const simpleMMWorkflow: WorkflowSpec = {
  ...singleTurnWorkflow('simple_mm_workflow', { systemPrompt: MM_SYSTEM_PROMPT, defaultRewardFn: 'math_boxed_reward' }),
  description: "single-turn with the task's images (format.image_key); boxed-answer system prompt; reward math_boxed_reward",
  workflowArgs: [],
  ignoredWorkflowArgs:
    "simple_mm_workflow reads no workflow_args, as Trinity's SimpleMMWorkflow, which dropped them (math_boxed_reward's " +
    "with_think / format_score_coef go in the taskset's reward_fn_args)",
};

WORKFLOWS.register('simple_mm_workflow', simpleMMWorkflow);
WORKFLOWS.register(
  'async_simple_mm_workflow',
  simpleMMWorkflow,
  "Trinity-RFT's async form of simple_mm_workflow (the same workflow)",
);
