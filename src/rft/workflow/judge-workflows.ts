// Trinity-RFT's LLM-judge workflows for answers no rule can check (its grpo_medicine_ruler and grpo_rubric examples,
// over RaR-Medicine rows: question, reference_answer, rubric = [{ title, description, weight }, ...]). Each is the
// single-turn workflow (./single-turn.ts) with a judge reward and that reward's arguments as upstream's workflow
// asks its judge, explorer.auxiliary_models[0] (reward_fn_args override any of them: judge_model, max_tokens, ...):
//
//   medicine_ruler_workflow  the <think>/<answer> system prompt (math_workflow's); ruler_reward: ONE judge call
//                            compares the task's n responses against the row's rubric and ends with a list of n
//                            scores in [0, 1] (verdict_format last_list):   reward_i = s_i
//   rubric_judge_workflow    a plain assistant system prompt; rubric_judge_reward: one judge call per response rates
//                            it against the row's rubric, 1 to 10, in a ```json {"rating": N}``` block (verdict_format
//                            json_rating); scale 0..10, so   reward = N / 10   (upstream's rating · 0.1)
//
// The rubric is the row's `rubric` column (rubric_key), each criterion a line "(weight W) description"
// (../reward/judge-prompt.ts). A judge answer that does not parse gives fallback_reward 0, as upstream's did, and
// counts in judge_failure (upstream's judge_success is 1 − judge_failure); out-of-range scores are failures here
// where upstream clipped RULER's into [0, 1]. A row without a rubric fails its task naming the column (upstream
// judged it with "Rubrics are not provided.").
import { MATH_SYSTEM_PROMPT, singleTurnWorkflow } from './single-turn.js';
import { WORKFLOWS } from './workflow-registry.js';

export const MEDICINE_RULER_SYSTEM_PROMPT =
  'You are a fair judge. You are given a question, several candidate responses to it and a weighted rubric. Compare ' +
  'the responses with each other, decide how well each one answers the question by the rubric, and give each a ' +
  'score from 0 to 1.';

export const MEDICINE_RULER_TEMPLATE = `Here are a question, {count} candidate responses to it, and a rubric with weights.

Question: {question}

Each response was asked to reason inside <think> </think> and to give its final answer inside <answer> </answer>.

{responses}

Rubric (criteria and their weights):
{rubric}

Score each response from 0 to 1 by how well it answers the question according to the rubric. You may compare the \
responses and reason briefly first. End your answer with the list of the {count} scores, in order: [score of \
response 1, ..., score of response {count}]`;

export const RUBRIC_RATING_SYSTEM_PROMPT = `You are an expert evaluator. You are given a prompt, a response to it and \
a list of quality rubrics. Rate the overall quality of the response from 1 to 10 by how well it satisfies the \
rubrics, weighing them together: a response that breaks several rubrics rates lower, one that meets them all rates \
higher. Begin your answer with a JSON object inside a \`\`\`json block, with the single key "rating" and an integer \
from 1 to 10 as its value, e.g.
\`\`\`json
{"rating": 7}
\`\`\``;

export const RUBRIC_RATING_TEMPLATE = `Rate the response below from 1 to 10 by how well it satisfies the rubrics.
<prompt>
{question}
</prompt>
<response>
{response}
</response>
<rubrics>
{rubric}
</rubrics>
Your JSON evaluation:`;

export const ASSISTANT_SYSTEM_PROMPT =
  'A conversation between a user and an assistant. The user asks a question and the assistant answers it, thinking ' +
  'the reasoning through first.';

WORKFLOWS.register(
  'medicine_ruler_workflow',
  singleTurnWorkflow('medicine_ruler_workflow', {
    systemPrompt: MATH_SYSTEM_PROMPT,
    defaultRewardFn: 'ruler_reward',
    defaultRewardArgs: {
      rubric_key: 'rubric',
      system_prompt: MEDICINE_RULER_SYSTEM_PROMPT,
      prompt_template: MEDICINE_RULER_TEMPLATE,
      verdict_format: 'last_list',
    },
  }),
);

WORKFLOWS.register(
  'rubric_judge_workflow',
  singleTurnWorkflow('rubric_judge_workflow', {
    systemPrompt: ASSISTANT_SYSTEM_PROMPT,
    defaultRewardFn: 'rubric_judge_reward',
    defaultRewardArgs: {
      rubric_key: 'rubric',
      min_score: 0,
      max_score: 10,
      system_prompt: RUBRIC_RATING_SYSTEM_PROMPT,
      prompt_template: RUBRIC_RATING_TEMPLATE,
      verdict_format: 'json_rating',
    },
  }),
);
