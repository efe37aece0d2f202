// On-policy distillation (Trinity-RFT's on_policy_distill_workflow; Agarwal et al., arXiv 2306.13649; Thinking
// Machines' recipe): the student samples, a teacher auxiliary model scores the student's own tokens, and the trainer's
// on_policy_distill (or jsd) advantage pulls the student toward the teacher.
//
//   prompt ids        = chat_template([system?, user]) ++ encode(reply_prefix)              (as simple_workflow)
//   responses         = student.generate(prompt ids, n = repeatTimes, seed, task.rolloutArgs)
//   teacherLogprobs   = teacher.logprobs(prompt ids, response ids, τ = workflow_args.temperature ?? 1)
//   metrics           kl_divergence = Σ_t (log π_student(y_t) − log π_teacher(y_t))          (Trinity's, per response)
//   reward            the task's reward function when it names one (accuracy for monitoring), else 0 (Trinity's)
//
// The teacher: workflow_args.teacher (an auxiliary model's name), else explorer.auxiliary_models[0] (Trinity's).
import { REWARD_FUNCTIONS, scoreResponse } from '../reward/registry.js';
import { promptMessages, rolloutOptions } from './single-turn.js';
import type { WorkflowContext, WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

const NAME = 'on_policy_distill_workflow';

export const onPolicyDistillWorkflow: WorkflowSpec = {
  repeatable: true,
  workflowArgs: ['teacher', 'temperature'],
  description: 'on-policy distillation: student samples, a teacher auxiliary model scores them (teacher_logprobs)',
  run: async ({ task, model, repeatTimes, seed, auxiliaryModels, signal, baseDir }: WorkflowContext) => {
    const tokenizer = model.tokenizer;
    if (tokenizer === null) throw new Error(`${NAME}: the rollout model has no tokenizer (chat template needed)`);
    const args = task.workflowArgs ?? {};
    const teacherName = args.teacher;
    if (teacherName !== undefined && typeof teacherName !== 'string')
      throw new Error(`${NAME}: workflow_args.teacher must be an auxiliary model's name, got ${JSON.stringify(teacherName)}`);
    const teacher = teacherName !== undefined ? auxiliaryModels.get(teacherName) : auxiliaryModels.list[0];
    if (teacher === undefined)
      throw new Error(`${NAME}: needs a teacher in explorer.auxiliary_models (the first one, or workflow_args.teacher)`);
    const temperature = args.temperature ?? 1;
    if (typeof temperature !== 'number' || !(temperature > 0))
      throw new Error(`${NAME}: workflow_args.temperature must be a number > 0, got ${JSON.stringify(temperature)}`);
    const rewardFn = task.rewardFn === undefined ? null : await REWARD_FUNCTIONS.resolve(task.rewardFn, baseDir);

    const messages = promptMessages(task, undefined, NAME);
    const prefix = task.replyPrefix ?? '';
    const promptIds = [
      ...tokenizer.encodeChat(messages, { addGenerationPrompt: true }),
      ...(prefix ? tokenizer.encode(prefix) : []),
    ];
    const result = await model.generate({ ...rolloutOptions(task.rolloutArgs ?? {}, NAME), promptIds, n: repeatTimes, seed });
    return Promise.all(
      result.completions.map(async (completion) => {
        const teacherLogprobs = await teacher.logprobs(result.promptIds, completion.tokenIds, { temperature, signal });
        const klDivergence = completion.logprobs.reduce((sum, lp, t) => sum + lp - (teacherLogprobs[t] as number), 0);
        const response = prefix + (completion.text ?? tokenizer.decode(completion.tokenIds, { skipSpecialTokens: true }));
        const scored =
          rewardFn === null
            ? { reward: 0, metrics: {} }
            : await scoreResponse(
                rewardFn,
                { response, responseTokens: completion.tokenIds.length, task, args: { ...task.rewardFnArgs }, auxiliaryModels },
                `reward function '${task.rewardFn}'`,
              );
        const experience = model.toExperience(completion, {
          reward: scored.reward,
          metrics: { ...scored.metrics, kl_divergence: klDivergence },
          responseText: response,
        });
        experience.teacherLogprobs = teacherLogprobs;
        return experience;
      }),
    );
  },
};

WORKFLOWS.register(NAME, onPolicyDistillWorkflow);
