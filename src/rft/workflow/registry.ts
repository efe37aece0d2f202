// Workflows by name (Trinity-RFT's WORKFLOWS registry) or by module path (`path/to/file.ts#name`: a Workflow
// function, taken as repeatable, or a WorkflowSpec object).
//
//   const spec = await WORKFLOWS.resolve(task.workflow ?? 'math_workflow');
//
// The built-ins, in registration order (WORKFLOWS.names()): each file registers its workflows at its bottom, so a new
// built-in workflow is one file plus one line here. Import the built-ins' files through this list or ./index.ts (which
// imports it first): a file imported before this list would register first and reorder the names. single-turn.ts comes
// first, so the other workflows and env/environment.ts may import its helpers directly.
import './single-turn.js'; // simple_workflow, math_workflow, math_boxed_workflow
import './agents/tool-agent.js'; // tool_agent_workflow
import './agents/agentscope-react.js'; // as_react_workflow and Trinity's other AgentScope ReAct math workflows
import './env/frozen-lake.js'; // frozen_lake_workflow
import './env/sokoban.js'; // sokoban_workflow
import './env/household/household.js'; // household_workflow
import './on-policy-distill.js'; // on_policy_distill_workflow
import './judge-workflows.js'; // medicine_ruler_workflow, rubric_judge_workflow
import './trainable-ruler.js'; // math_trainable_ruler_workflow
import './bots.js'; // bots_math_boxed_workflow
import './toolcall.js'; // toolcall_workflow (tool_call_workflow)
import './learn2ask.js'; // learn2ask_workflow
import './simple-mm.js'; // simple_mm_workflow, async_simple_mm_workflow
import './math-eval.js'; // math_eval_workflow
import './r3l-raft.js'; // RAFT_baseline_countdown_workflow, RAFT_baseline_dapo_workflow (and lower-case)
import './agents/email-search.js'; // email_search_workflow
import './agents/agentscope-search.js'; // agentscope_v1_react_search_workflow (a web search service)
import './agents/gomoku.js'; // examples.agentscope_gomoku.workflow.GomokuWorkflow (its class path only, as upstream)
import './trinity-names.js'; // Trinity's async twins of the above; its names that are refused here, with why

export { WORKFLOWS, WorkflowRegistry } from './workflow-registry.js';
