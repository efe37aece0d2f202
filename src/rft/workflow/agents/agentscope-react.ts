// Trinity-RFT's AgentScope ReAct workflows, ported: an AgentScope ReAct agent (./react-agent.ts) solves the task's
// question through the rollout model's OpenAI endpoint, its answer is scored like Trinity's MathBoxedRewardFn
// (accuracy of the last \boxed{} against the reference, GSM8K's "#### 42" read as 42; with_think off, so
// format_score is 0), and every model call is one experience (Trinity's enable_history records each
// chat.completions call), all with the episode's reward and its run id (step_wise_grpo groups them by run):
//
//   name(s)                                          agent  tools                        answer read from      max_iters
//   as_react_workflow, agentscope_react_workflow     v1     none                         generate_response's   10
//                                                                                        `result`
//   agentscope_react_math_workflow                   v1     execute_python_code          `result`, else text   10
//   agentscope_reactv2_math_workflow,                v0     execute_python_code          `response`, else      5
//     agentscopev0_react_math_workflow                                                   the reply's text
//   agentscope_reactv2_gsm8k_workflow                v0     execute_python_code          as above              5
//
// as_react_workflow picks its template by workflow_args.type (default gsm8k): the system prompt, the answer schema
// ({result: string}) and the reward. Trinity's other template, email_search, needs the Enron email index: it is
// refused naming email_search_workflow. The v0 gsm8k workflow's prompt leaves out the Python sentence, as upstream's.
//
// Workflow arguments: type (as_react_workflow), max_iters (default as above), python_executable (the interpreter of
// execute_python_code, default python3: ./python-tool.ts, which runs the model's code unsandboxed, as upstream).
// Rollout args temperature, top_p, top_k, min_p and max_tokens go on every call (each reply is at most
// model.max_response_tokens; upstream sends max_tokens 4096 when unset). Metrics: accuracy, format_score
// (as_react_workflow, as upstream's reward dict), react_memory_length (v1) or agent_turns (v0: messages in the
// agent's memory), model_calls, tool_calls, invalid_tool_calls, summarized (1 when max_iters ran out).
import { mixSeed } from '../../buffer/random.js';
import { extractBoxed, mathAccuracy } from '../../reward/math-answer.js';
import type { Task } from '../../task.js';
import type { WorkflowContext, WorkflowSpec } from '../types.js';
import { WORKFLOWS } from '../workflow-registry.js';
import { pythonTool } from './python-tool.js';
import { type AnswerSchema, type ReActAgentResult, type ReActTool, runReActAgent } from './react-agent.js';
import { requestFields } from './openai-request.js';

const SOLVE = 'You are an agent that solves math problems with tools. Solve the math problem you are given.';
const RUN_PYTHON = ' You can write and run Python code to calculate or to check your answer.';
const BOXED = ' Give your final answer inside \\boxed{}.';

/** Upstream's GSM8K prompt (as_react_workflow's template, the v1 and v0 math workflows), in our words. */
export const MATH_TOOLS_SYSTEM_PROMPT = SOLVE + RUN_PYTHON + BOXED;
/** agentscope_reactv2_gsm8k_workflow's prompt: the same without the Python sentence. */
export const GSM8K_TOOLS_SYSTEM_PROMPT = SOLVE + BOXED;

/** The structured answer of the GSM8K template (upstream's GSM8KResponseStructure / FinalResult, exactly). */
export const GSM8K_ANSWER_SCHEMA: AnswerSchema = {
  fields: {
    result: 'Your solution of the given math problem. Put your final answer in boxed format, e.g., \\boxed{42}',
  },
};

interface AgentScopeVariant {
  name: string;
  style: 'v0' | 'v1';
  systemPrompt: string;
  pythonTool: boolean;
  maxIters: number;
  /** The text the reward reads from the agent's result. */
  answerText(result: ReActAgentResult): string;
  /** The metric that counts the agent's memory (upstream's name for it). */
  memoryMetric: 'react_memory_length' | 'agent_turns';
  /** Report the reward's parts (accuracy, format_score) as metrics, as as_react_workflow's reward dict does. */
  rewardMetrics: boolean;
}

const structuredResult = (result: ReActAgentResult): string => result.structured?.result ?? '';

/** as_react_workflow's templates by workflow_args.type. */
function asReactTemplate(args: Readonly<Record<string, unknown>>, who: string): void {
  const type = args.type ?? 'gsm8k';
  if (type === 'gsm8k') return;
  if (type === 'email_search')
    throw new Error(
      `${who}: workflow_args.type email_search needs the Enron email index behind its search tools: use ` +
        "email_search_workflow (Trinity-RFT's email search example) instead",
    );
  throw new Error(`${who}: unsupported workflow_args.type ${JSON.stringify(type)} (templates here: gsm8k)`);
}

function positiveInteger(args: Readonly<Record<string, unknown>>, key: string, fallback: number, who: string): number {
  const value = args[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    throw new Error(`${who}: workflow_args.${key} must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

function pythonExecutable(args: Readonly<Record<string, unknown>>, who: string): string {
  const value = args.python_executable ?? 'python3';
  if (typeof value !== 'string' || value.trim() === '')
    throw new Error(`${who}: workflow_args.python_executable must be a command (a string), got ${JSON.stringify(value)}`);
  return value;
}

function checkArgs(variant: AgentScopeVariant, args: Readonly<Record<string, unknown>>): void {
  if (variant.name === 'as_react_workflow') asReactTemplate(args, variant.name);
  positiveInteger(args, 'max_iters', variant.maxIters, variant.name);
  if (variant.pythonTool) pythonExecutable(args, variant.name);
}

function questionAndAnswer(task: Task, who: string): { query: string; reference: string } {
  if (typeof task.prompt !== 'string') throw new Error(`${who}: task ${task.id} has no prompt (the taskset's prompt_key)`);
  if (typeof task.response !== 'string' || task.response.trim() === '')
    throw new Error(`${who}: task ${task.id} has no reference answer (the taskset's response_key)`);
  return { query: task.prompt, reference: task.response };
}

function agentscopeWorkflow(variant: AgentScopeVariant): WorkflowSpec {
  const who = variant.name;
  return {
    repeatable: false,
    workflowArgs: variant.name === 'as_react_workflow' ? ['type', 'max_iters'] : ['max_iters', 'python_executable'],
    checkArgs: (args) => checkArgs(variant, args),
    description:
      `AgentScope ReAct agent (${variant.style}) on a math question` +
      `${variant.pythonTool ? ' with execute_python_code' : ''}, reward: accuracy of \\boxed{} (max_iters ${variant.maxIters})`,
    run: async ({ task, model, runIdBase, seed, signal }: WorkflowContext) => {
      const args = { ...task.workflowArgs };
      checkArgs(variant, args);
      const { query, reference } = questionAndAnswer(task, who);
      const tools: ReActTool[] = variant.pythonTool ? [pythonTool(pythonExecutable(args, who))] : [];
      const result = await runReActAgent(await model.openai(), {
        style: variant.style,
        systemPrompt: variant.systemPrompt,
        query,
        tools,
        ...(variant.style === 'v1' ? { answerSchema: GSM8K_ANSWER_SCHEMA } : {}),
        maxIters: positiveInteger(args, 'max_iters', variant.maxIters, who),
        request: requestFields(task, who),
        seed: (call) => mixSeed(seed, call),
        signal,
      });
      const accuracy = mathAccuracy(variant.answerText(result), reference, extractBoxed);
      return model.recordedExperiences({
        scope: 'turn',
        reward: accuracy,
        runId: runIdBase,
        metrics: {
          ...(variant.rewardMetrics ? { accuracy, format_score: 0 } : {}),
          [variant.memoryMetric]: result.memoryLength,
          model_calls: result.modelCalls,
          tool_calls: result.toolCalls,
          invalid_tool_calls: result.invalidToolCalls,
          summarized: result.summarized ? 1 : 0,
        },
      });
    },
  };
}

const asReact = agentscopeWorkflow({
  name: 'as_react_workflow',
  style: 'v1',
  systemPrompt: MATH_TOOLS_SYSTEM_PROMPT,
  pythonTool: false,
  maxIters: 10,
  answerText: structuredResult,
  memoryMetric: 'react_memory_length',
  rewardMetrics: true,
});

const reactMath = agentscopeWorkflow({
  name: 'agentscope_react_math_workflow',
  style: 'v1',
  systemPrompt: MATH_TOOLS_SYSTEM_PROMPT,
  pythonTool: true,
  maxIters: 10,
  // upstream's extract_final_answer: metadata.result, else the reply's content
  answerText: (result) => result.structured?.result ?? result.text,
  memoryMetric: 'react_memory_length',
  rewardMetrics: false,
});

const v0Variant = (name: string, systemPrompt: string): AgentScopeVariant => ({
  name,
  style: 'v0',
  systemPrompt,
  pythonTool: true,
  maxIters: 5,
  answerText: (result) => result.text,
  memoryMetric: 'agent_turns',
  rewardMetrics: false,
});

const reactV2Math = agentscopeWorkflow(v0Variant('agentscope_reactv2_math_workflow', MATH_TOOLS_SYSTEM_PROMPT));

WORKFLOWS.register('as_react_workflow', asReact);
WORKFLOWS.register('agentscope_react_workflow', asReact, "Trinity-RFT's other name of as_react_workflow");
WORKFLOWS.register('agentscope_react_math_workflow', reactMath);
WORKFLOWS.register('agentscope_reactv2_math_workflow', reactV2Math);
WORKFLOWS.register(
  'agentscopev0_react_math_workflow',
  reactV2Math,
  "Trinity-RFT's later name of agentscope_reactv2_math_workflow",
);
WORKFLOWS.register(
  'agentscope_reactv2_gsm8k_workflow',
  agentscopeWorkflow(v0Variant('agentscope_reactv2_gsm8k_workflow', GSM8K_TOOLS_SYSTEM_PROMPT)),
);
