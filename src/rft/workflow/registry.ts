// Workflows by name (Trinity-RFT's WORKFLOWS registry) or by module path (`path/to/file.ts#name`: a Workflow
// function, taken as repeatable, or a WorkflowSpec object).
//
//   const spec = await WORKFLOWS.resolve(task.workflow ?? 'math_workflow');
import { Registry } from '../../util/registry.js';
import { toolAgentWorkflow } from './agents/tool-agent.js';
import { frozenLakeWorkflow } from './env/frozen-lake.js';
import { sokobanWorkflow } from './env/sokoban.js';
import { onPolicyDistillWorkflow } from './on-policy-distill.js';
import { mathBoxedWorkflow, mathWorkflow, simpleWorkflow } from './single-turn.js';
import { workflowSpecOf } from './isolation/spec.js';
import type { Workflow, WorkflowSpec } from './types.js';

/** The generic registry (src/util/registry.ts) of workflow specs; a bare function registers as a repeatable spec. */
export class WorkflowRegistry extends Registry<WorkflowSpec> {
  constructor() {
    super('workflow', { fromExport: (value, spec) => workflowSpecOf(value, `workflow '${spec}'`) });
  }

  /** Registers a workflow (a bare function is repeatable: it gets repeatTimes and returns them all). */
  override register(name: string, workflow: WorkflowSpec | Workflow, description?: string): this {
    const spec = workflowSpecOf(workflow, `workflow '${name}'`);
    return super.register(name, spec, description ?? spec.description ?? '');
  }
}

/** The built-in workflows; register your own here or name them by module path. */
export const WORKFLOWS = new WorkflowRegistry()
  .register('simple_workflow', simpleWorkflow)
  .register('math_workflow', mathWorkflow)
  .register('math_boxed_workflow', mathBoxedWorkflow)
  .register('tool_agent_workflow', toolAgentWorkflow)
  .register('frozen_lake_workflow', frozenLakeWorkflow)
  .register('sokoban_workflow', sokobanWorkflow)
  .register('on_policy_distill_workflow', onPolicyDistillWorkflow);
