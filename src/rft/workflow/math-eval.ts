// math_eval_workflow (and async_math_eval_workflow, the same workflow): Trinity-RFT's MathEvalWorkflow, math
// evaluation as Qwen2.5-Math evaluates ("qwen_boxed" prompting, its answer grader). One response per run; the runner
// runs it repeat_times times (Trinity's workflow cannot repeat inside one run either):
//
//   messages  = [system "You are a helpful assistant.",
//                user   question + "\nPlease reason step by step, and put your final answer within \\boxed{}."]
//   response  = chat(messages, temperature 0.6, top_p 0.8, n 1)       (Trinity's fixed evaluation sampling; the
//               taskset's rollout_args give the rest: max_tokens, stop, …)
//   accuracy  = verifyMathAnswer(response, reference)                 (../reward/math-equal.ts: 1.0 or 0.0)
//   reward    = accuracy; metrics { accuracy }
//
// Where it differs from Trinity's: the question is the taskset's prompt_key column (Trinity reads the row's
// `question` column whatever prompt_key says), and the reward is the accuracy (Trinity leaves the reward at 0 and
// reports the accuracy only as a metric; an eval reward of 0 would leave mean@k and pass@k meaningless here). The
// taskset's system_prompt, reply_prefix and reward_fn are not used, as in Trinity's.
import type { ChatMessage } from '../../tokenizer/index.js';
import type { ChatTurn } from '../experience.js';
import { verifyMathAnswer } from '../reward/math-equal.js';
import { sampleResponses } from './single-turn.js';
import type { WorkflowContext, WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

export const MATH_EVAL_SYSTEM_PROMPT = 'You are a helpful assistant.';
export const MATH_EVAL_INSTRUCTION = '\nPlease reason step by step, and put your final answer within \\boxed{}.';
/** Trinity's evaluation sampling (its GenerationConfig(temperature=0.6, top_p=0.8, n=1)). */
export const MATH_EVAL_SAMPLING = { temperature: 0.6, top_p: 0.8 } as const;

/** The Qwen2.5-Math prompt of a question (see the header). */
export function mathEvalMessages(question: string): ChatMessage[] {
  return [
    { role: 'system', content: MATH_EVAL_SYSTEM_PROMPT },
    { role: 'user', content: `${question}${MATH_EVAL_INSTRUCTION}` },
  ];
}

export const mathEvalWorkflow: WorkflowSpec = {
  repeatable: false,
  workflowArgs: [],
  ignoredWorkflowArgs: "Trinity's MathEvalWorkflow reads no workflow_args (its prompt and sampling are fixed)",
  description: "Qwen2.5-Math evaluation: \\boxed{} prompt, temperature 0.6, Qwen2.5-Math's grader (accuracy 1/0)",
  run: async (context: WorkflowContext) => {
    const { task, model } = context;
    const name = task.workflow ?? 'math_eval_workflow';
    if (typeof task.prompt !== 'string')
      throw new Error(`${name}: task ${task.id} has no question (the taskset's format.prompt_key column)`);
    if (typeof task.response !== 'string' || task.response.trim() === '')
      throw new Error(`${name}: task ${task.id} has no reference answer (the taskset's format.response_key column)`);
    const messages = mathEvalMessages(task.prompt);
    const evalTask = { ...task, rolloutArgs: { ...task.rolloutArgs, ...MATH_EVAL_SAMPLING } };
    const { completions, responses } = await sampleResponses({ ...context, task: evalTask }, messages, name, { prefix: '' });
    const reference = task.response;
    return completions.map((completion, i) => {
      const response = responses[i] as string;
      const { accuracy } = verifyMathAnswer(response, reference);
      const transcript: ChatTurn[] = [...messages.map((m) => ({ ...m })), { role: 'assistant', content: response }];
      return model.toExperience(completion, {
        reward: accuracy,
        metrics: { accuracy },
        responseText: response,
        messages: transcript,
      });
    });
  },
};

WORKFLOWS.register('math_eval_workflow', mathEvalWorkflow);
