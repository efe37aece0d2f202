// A taskset's workflow_args that its workflow does not read, where Trinity's workflow of the same name took and
// dropped them: configs written for Trinity carry them (mix_vlm's `workflow_args: {with_think: true}` for
// simple_mm_workflow, copied from a math_boxed_workflow config), so they are taken out of the tree and reported in the
// "ignored on this backend" block with the workflow's reason (WorkflowSpec.ignoredWorkflowArgs), instead of being
// refused as unknown arguments (as they are for a workflow that reads others: ./preflight.ts).
//
//   buffer.explorer_input.{taskset, tasksets.*, eval_tasksets.*}.workflow_args.<key>
//     when the taskset's workflow (its default_workflow_type, else explorer_input's default_eval_workflow_type for an
//     eval taskset, else explorer_input's default_workflow_type) is registered with
//     ignoredWorkflowArgs and its rows name no workflow of their own (format.workflow_key)
import type { IgnoredSetting } from '../../config/ignored-keys.js';
import { isMapping, type Segment, type Tree } from '../../config/source.js';
import { WORKFLOWS } from '../../workflow/registry.js';

/** Takes out (in place) the workflow_args that the tasksets' workflows drop; returns them as ignored settings. */
export function takeDroppedWorkflowArgs(node: Tree, at: (path: readonly Segment[]) => string): IgnoredSetting[] {
  const buffer = node.buffer;
  const input = isMapping(buffer) ? buffer.explorer_input : undefined;
  if (!isMapping(input)) return [];
  const sections: [Segment[], unknown][] = [[['taskset'], input.taskset]];
  for (const list of ['tasksets', 'eval_tasksets'] as const) {
    const items = input[list];
    if (Array.isArray(items)) for (const [i, item] of items.entries()) sections.push([[list, i], item]);
  }
  const ignored: IgnoredSetting[] = [];
  for (const [path, taskset] of sections) {
    if (!isMapping(taskset) || !isMapping(taskset.workflow_args)) continue;
    if (isMapping(taskset.format) && typeof taskset.format.workflow_key === 'string') continue; // rows pick theirs
    const evalDefault = path[0] === 'eval_tasksets' ? input.default_eval_workflow_type : undefined;
    const workflow = taskset.default_workflow_type ?? evalDefault ?? input.default_workflow_type;
    if (typeof workflow !== 'string' || !WORKFLOWS.has(workflow)) continue;
    const why = WORKFLOWS.get(workflow).ignoredWorkflowArgs;
    if (why === undefined) continue;
    for (const [key, value] of Object.entries(taskset.workflow_args)) {
      ignored.push({ path: at(['buffer', 'explorer_input', ...path, 'workflow_args', key]), value, why });
    }
    delete taskset.workflow_args;
  }
  return ignored;
}
