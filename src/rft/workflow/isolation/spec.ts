// A module's export as a WorkflowSpec: the registry (../workflow-registry.ts) and the worker thread both use it; the
// worker checks what a module path names without importing the registry's list (../registry.ts), which loads every
// built-in workflow.
import type { Workflow, WorkflowSpec } from '../types.js';

/** A function (repeatable), or an object with a `run` function; anything else is an error naming `where`. */
export function workflowSpecOf(value: unknown, where: string): WorkflowSpec {
  if (typeof value === 'function') return { run: value as Workflow, repeatable: true };
  if (value !== null && typeof value === 'object' && typeof (value as { run?: unknown }).run === 'function') {
    const spec = value as WorkflowSpec;
    if (spec.repeatable !== undefined && typeof spec.repeatable !== 'boolean')
      throw new Error(`${where}: 'repeatable' must be a boolean, got ${JSON.stringify(spec.repeatable)}`);
    return { ...spec, repeatable: spec.repeatable ?? true };
  }
  throw new Error(
    `${where}: expected a workflow function or an object with a run() function, got ${value === null ? 'null' : typeof value}`,
  );
}
