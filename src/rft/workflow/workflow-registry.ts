// The workflow registry (Trinity-RFT's WORKFLOWS), created empty, and its class. Each built-in workflow's file
// registers it at its bottom (`WORKFLOWS.register('math_workflow', mathWorkflow)`), and ./registry.ts imports those
// files in registration order: import WORKFLOWS from ./registry.ts (or ./index.ts, the package), where every built-in
// is registered, not from here. A worker thread that imports one workflow file gets a registry with that file's
// workflows only, which nothing there reads (isolation/worker-main.ts checks a module's export with workflowSpecOf).
import { Registry } from '../../util/registry.js';
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

/** The workflows by name: the built-ins register here (see the header). */
export const WORKFLOWS = new WorkflowRegistry();
