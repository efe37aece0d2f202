// Trinity-RFT's workflow names (its WORKFLOWS registry and its examples' default_workflow_type) that have no
// workflow of their own here: an async twin is the same workflow under its other name (Trinity registers both for
// one class), math_ruler_workflow is math_workflow's prompt with the RULER reward (as Trinity's MathRULERWorkflow:
// there math_reward only adds a "golden reward" metric, which is not computed here), math_rm_workflow is
// simple_workflow (below), and the rest are refused with why and what to use instead, not as an unknown name:
//
//   default_workflow_type: alfworld_workflow
//   → workflow 'alfworld_workflow' is not available here: needs ALFWorld (TextWorld's game engine), a Python ...
//
// Imported last by ./registry.ts: the aliases look up the built-ins registered before them.
import { MATH_SYSTEM_PROMPT, singleTurnWorkflow } from './single-turn.js';
import { WORKFLOWS } from './workflow-registry.js';

/** Trinity's async twins: the same workflow (this runner awaits every workflow), under the other name. */
const ASYNC_TWINS = [
  ['async_simple_workflow', 'simple_workflow'],
  ['async_math_workflow', 'math_workflow'],
  ['async_math_boxed_workflow', 'math_boxed_workflow'],
  ['async_math_eval_workflow', 'math_eval_workflow'],
] as const;

for (const [twin, name] of ASYNC_TWINS) {
  WORKFLOWS.register(twin, WORKFLOWS.get(name), `Trinity-RFT's async form of ${name} (the same workflow)`);
}

for (const name of ['math_ruler_workflow', 'async_math_ruler_workflow']) {
  WORKFLOWS.register(name, singleTurnWorkflow(name, { systemPrompt: MATH_SYSTEM_PROMPT, defaultRewardFn: 'ruler_reward' }));
}

// math_rm_workflow (v0.6: MathOpenJudgeWorkflow): the task's prompt as it is (no system prompt of its own), scored
// by the taskset's reward function, which an OpenJudge grader (trajectory_accuracy_grader_reward) reads with the
// prompt messages; that is simple_workflow, under Trinity's name.
for (const name of ['math_rm_workflow', 'async_math_rm_workflow']) WORKFLOWS.register(name, singleTurnWorkflow(name));

/** Keeping a Python environment and its agent: what records the agent's calls here. */
const RECORD_THE_AGENT =
  "or keep the Python environment and its agent and train on the agent's calls: a workflowWithRecording workflow " +
  "hands the agent the rollout model's OpenAI endpoint with a key per run (examples/blackbox_agent), or mode serve " +
  'serves the model to it (README, "Train on your agent\'s traffic")';

const PYTHON_SIMULATOR = (simulator: string): string =>
  `needs ${simulator}, a Python simulator this backend cannot run: write the environment as a workflow file named by ` +
  'its module path (`env.ts#workflow`: an Environment, as src/rft/workflow/env/frozen-lake.ts does), ' +
  RECORD_THE_AGENT;

const ALFWORLD =
  "needs ALFWorld (TextWorld's game engine), a Python simulator this backend cannot run: household_workflow is an " +
  "ALFWorld-style household built in (rooms, receptacles, ALFWorld's six task types and its admissible-action " +
  'commands; examples/household), ' +
  RECORD_THE_AGENT;

/** What runs an agent here instead: the ported AgentScope ReAct workflows, an agent file, or a served model. */
const AGENT_HERE =
  "as_react_workflow and the agentscope_react*_math workflows are AgentScope's ReAct agent ported, an agent is a " +
  'workflow file that calls model.openai() (examples/openai_agent) or tool_agent_workflow, or a Python agent talks to ' +
  'the model served in mode serve';

const AGENTSCOPE_FUNCTION = `runs a Python AgentScope workflow function (workflow_args.workflow_func) inside the workflow: ${AGENT_HERE}`;

const RUBRIC_API =
  "the judge behind an external API is an auxiliary model here: rubric_judge_workflow with explorer.auxiliary_models' " +
  'first entry engine_type: openai, base_url and model_name (the key: api_key, else $OPENAI_API_KEY)';

export const UNAVAILABLE_WORKFLOWS: readonly (readonly [string, string])[] = [
  ['alfworld_workflow', ALFWORLD],
  ['step_wise_alfworld_workflow', ALFWORLD],
  ['RAFT_alfworld_workflow', ALFWORLD],
  ['RAFT_reflect_alfworld_workflow', ALFWORLD],
  ['alfworld_workflow_v2', ALFWORLD],
  ['RAFT_baseline_alfworld_workflow', ALFWORLD],
  ['RAFT_baseline_scienceworld_workflow', PYTHON_SIMULATOR('ScienceWorld (a Python package over a Java simulator)')],
  ['RAFT_baseline_webshop_workflow', PYTHON_SIMULATOR('WebShop (a web-shop simulator with a Pyserini search index)')],
  ['sciworld_workflow', PYTHON_SIMULATOR('ScienceWorld (a Python package over a Java simulator)')],
  ['webshop_workflow', PYTHON_SIMULATOR('WebShop (a web-shop simulator with a Pyserini search index)')],
  ['intercode_sql_workflow', PYTHON_SIMULATOR("InterCode's SQL environment (queries run in a Docker database)")],
  ['agentscope_workflow_adapter', AGENTSCOPE_FUNCTION],
  ['agentscope_workflow_adapter_v1', AGENTSCOPE_FUNCTION],
  [
    'agentopia_workflow',
    `takes its tasks and environments from an environment service (taskset storage_type env_service): ${AGENT_HERE}`,
  ],
  ['rubric_judge_openai_workflow', RUBRIC_API],
  [
    'bcp_simple_react_workflow',
    "needs BrowseComp-Plus's search index (Pyserini BM25 or a dense index, built in Python) behind its search tools: " +
      'tool_agent_workflow runs a multi-turn agent over tools that a workflow file defines (a search over your own ' +
      `index among them), ${RECORD_THE_AGENT}`,
  ],
];

for (const [name, reason] of UNAVAILABLE_WORKFLOWS) WORKFLOWS.unavailable(name, reason);
