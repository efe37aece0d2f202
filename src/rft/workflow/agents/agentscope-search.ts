// agentscope_v1_react_search_workflow: Trinity-RFT's web search agent (examples/agentscope_websearch, WebWalkerQA).
// AgentScope's v1 ReAct agent (./react-agent.ts) answers the task's question with a web search tool (./web-search.ts:
// Tavily or SearXNG, workflow_args.search_client_type) through the rollout model's OpenAI endpoint, and finishes with
// generate_response(result). An auxiliary judge (explorer.auxiliary_models[0]) compares the answer with the reference:
//
//   answer  = generate_response's `result`, else the final reply's text (upstream's extract_final_answer)
//   verdict = judge([system "You evaluate correctness.", user JUDGE_PROMPT(question, answer, reference)])
//   reward  = 1 if the verdict matches /Correctness.*?YES/i on one line (upstream's regex), else 0
//
// Every model call is one experience (Trinity's enable_history records each chat.completions call), each with the
// episode's reward and its run id; a call whose prompt + response is over workflow_args.max_model_tokens (default
// 24000) is dropped, as upstream drops it. Metrics: react_turns (⌊messages in the agent's memory / 2⌋), max_turns, and
// ours: model_calls, tool_calls, invalid_tool_calls, summarized (1 when max_turns ran out).
//
// Workflow arguments: max_turns (the agent's max_iters, default 10), search_client_type (tavily or searxng, default
// searxng as upstream: a taskset that does not name one needs SEARXNG_URL), max_model_tokens. The service's settings
// come from the environment as upstream reads them (TAVILY_API_KEY, SEARXNG_URL): the run's pre-run checks and
// `config check` refuse a taskset whose service is not set, so no task starts without it.
//
// Where this differs from upstream: the search tool calls the service's HTTP API directly rather than through an MCP
// server started with npx (only the search tool, ./web-search.ts); the system prompt and the judge's instructions are
// in this backend's wording (the judge prompt's slots and verdict format are upstream's); an agent or judge call that
// fails, or a run without auxiliary models, fails the attempt (../../reward/judge-call.ts) where upstream scored it 0;
// the judge's reply is at most JUDGE_MAX_TOKENS tokens at temperature 1 (upstream sends neither, so the server's
// defaults applied).
import { mixSeed } from '../../buffer/random.js';
import { askJudge, judgeMessages, judgeModel } from '../../reward/judge-call.js';
import type { Task } from '../../task.js';
import type { WorkflowContext, WorkflowSpec } from '../types.js';
import { WORKFLOWS } from '../workflow-registry.js';
import { requestFields } from './openai-request.js';
import { type AnswerSchema, runReActAgent } from './react-agent.js';
import { type SearchToolOptions, searchClientType, webSearchEndpoint, webSearchTool } from './web-search.js';

const NAME = 'agentscope_v1_react_search_workflow';
export const JUDGE_MAX_TOKENS = 1024;

/** The agent's system prompt (upstream's, in this backend's wording). */
export const WEB_SEARCH_SYSTEM_PROMPT =
  'You are an expert at seeking information on the web. Search the internet thoroughly for what the question needs ' +
  'and answer it accurately.';

/** Upstream's FinalResult. */
export const WEB_SEARCH_ANSWER_SCHEMA: AnswerSchema = {
  fields: { result: 'The final result to the initial user query' },
};

export const WEB_SEARCH_JUDGE_SYSTEM_PROMPT = 'You evaluate correctness.';

/**
 * The judge's question: upstream's judge prompt in this backend's wording, with its slots ([question], [response],
 * [correct_answer]) and the verdict format the reward reads (a **Correctness** line holding YES or NO).
 */
export function webSearchJudgePrompt(question: string, response: string, correctAnswer: string): string {
  return `Decide whether the [response] below answers the [question] correctly, judged only against the [correct_answer].

[question]: ${question}

[response]: ${response}

[correct_answer]: ${correctAnswer}

Write your judgement in two parts:

1. **Reasoning**: Say why the [response] does or does not match the [correct_answer]. Look only for meaningful differences between the two; do not solve the problem yourself, do not discuss its background, and do not argue for an answer other than the [correct_answer].

2. **Correctness**: Write exactly "YES" if the [response] matches the [correct_answer], allowing a small margin of error for numbers and small differences of form for text (a hyphen more or less counts as the same). Write exactly "NO" otherwise: if the [response] is wrong, ambiguous, inconsistent or not equivalent to the [correct_answer].
`;
}

/** True when the judge's reply says the answer is correct (upstream's regex; `.` stops at a line break). */
export const judgedCorrect = (reply: string): boolean => /Correctness.*?YES/i.test(reply);

function positiveInteger(args: Readonly<Record<string, unknown>>, key: string, fallback: number): number {
  const value = args[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    throw new Error(`${NAME}: workflow_args.${key} must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

/** The arguments' values, and that the search service is set (before the first task: else every attempt would fail). */
function checkWorkflowArgs(args: Readonly<Record<string, unknown>>, env: NodeJS.ProcessEnv): void {
  positiveInteger(args, 'max_turns', 10);
  positiveInteger(args, 'max_model_tokens', 24000);
  webSearchEndpoint(searchClientType(args, NAME), env, NAME);
}

function questionAndAnswer(task: Task): { question: string; reference: string } {
  if (typeof task.prompt !== 'string') throw new Error(`${NAME}: task ${task.id} has no prompt (the taskset's prompt_key)`);
  if (typeof task.response !== 'string')
    throw new Error(`${NAME}: task ${task.id} has no reference answer (the taskset's response_key)`);
  return { question: task.prompt, reference: task.response };
}

/** The workflow; `env` and `searchOptions` are where tests point it at a local search service. */
export function webSearchWorkflow(env: NodeJS.ProcessEnv = process.env, searchOptions: SearchToolOptions = {}): WorkflowSpec {
  return {
    repeatable: false,
    workflowArgs: ['max_turns', 'search_client_type', 'max_model_tokens'],
    checkArgs: (args) => checkWorkflowArgs(args, env),
    description: 'AgentScope ReAct agent (v1) with a web search tool (Tavily or SearXNG), reward: an auxiliary judge',
    run: async ({ task, model, runIdBase, seed, signal, auxiliaryModels }: WorkflowContext) => {
      const args = { ...task.workflowArgs };
      const maxTurns = positiveInteger(args, 'max_turns', 10);
      const maxModelTokens = positiveInteger(args, 'max_model_tokens', 24000);
      const endpoint = webSearchEndpoint(searchClientType(args, NAME), env, NAME);
      const { question, reference } = questionAndAnswer(task);
      const judge = judgeModel(auxiliaryModels, '', NAME);
      const result = await runReActAgent(await model.openai(), {
        style: 'v1',
        systemPrompt: WEB_SEARCH_SYSTEM_PROMPT,
        query: question,
        tools: [webSearchTool(endpoint, searchOptions)],
        answerSchema: WEB_SEARCH_ANSWER_SCHEMA,
        maxIters: maxTurns,
        request: requestFields(task, NAME),
        seed: (call) => mixSeed(seed, call),
        signal,
      });
      const answer = result.structured?.result ?? result.text;
      const messages = judgeMessages(WEB_SEARCH_JUDGE_SYSTEM_PROMPT, webSearchJudgePrompt(question, answer, reference));
      const verdict = await askJudge(judge, messages, { maxTokens: JUDGE_MAX_TOKENS, temperature: 1, signal }, NAME);
      const experiences = model.recordedExperiences({
        scope: 'turn',
        reward: judgedCorrect(verdict) ? 1 : 0,
        runId: runIdBase,
        metrics: {
          react_turns: Math.floor(result.memoryLength / 2),
          max_turns: maxTurns,
          model_calls: result.modelCalls,
          tool_calls: result.toolCalls,
          invalid_tool_calls: result.invalidToolCalls,
          summarized: result.summarized ? 1 : 0,
        },
      });
      return experiences.filter((experience) => experience.tokens.length <= maxModelTokens);
    },
  };
}

WORKFLOWS.register(NAME, webSearchWorkflow());
