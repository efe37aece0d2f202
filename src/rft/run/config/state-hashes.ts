// A run whose advantage function groups steps by the environment state they acted from (advantage_fn gigpo: anchor
// states, info.env_state_hash) refuses, before it starts, training tasks whose workflow writes no state: without
// states every step-level advantage is 0 and gigpo silently trains as episode-level GRPO. What a workflow writes is
// its WorkflowSpec.stateHashes(args) (the environment workflows, in both experience modes); a registered workflow
// without it writes none (tool_agent_workflow, the single-turn ones). A module-path workflow is not known until it
// runs: the trainer warns at the first step whose batch has no state (../stage-parts.ts, missingStateKeyWarning).
// preflight.ts calls this for each training taskset (eval tasksets train nothing), so `trinity config check` and
// `trinity run` refuse alike.
import { advantageStateKey } from '../../algorithm/advantage/index.js';
import { resolveAlgorithm } from '../../algorithm/presets.js';
import type { Task } from '../../task.js';
import { WORKFLOWS } from '../../workflow/registry.js';

/** The key every state-writing workflow here writes (ExperienceInfo.env_state_hash). */
const WRITTEN_KEY = 'env_state_hash';

/** The advantage function of `algorithmSection` and the info key it groups steps by; null when it groups by none. */
export function stateKeyOf(algorithmSection: unknown): { advantage: string; key: string } | null {
  try {
    const { advantageFn } = resolveAlgorithm(algorithmSection);
    const key = advantageFn === null ? null : advantageStateKey(advantageFn);
    return advantageFn === null || key === null ? null : { advantage: advantageFn.name, key };
  } catch {
    return null; // an algorithm section that does not resolve is reported by the config's own checks
  }
}

/** One task as the check sees it: the workflow it runs and its arguments (workflow_args overridden by the row). */
export interface TaskWorkflow {
  workflow: string;
  args: Readonly<Record<string, unknown>>;
  /** The row that names it, for the message (null: the taskset as configured, rows unread). */
  row: string | null;
}

/** A task's workflow and arguments, as the environment workflows read them ({...workflow_args, ...row}). */
export function taskWorkflow(task: Task, defaultWorkflow: string, row: string): TaskWorkflow {
  return { workflow: task.workflow ?? defaultWorkflow, args: { ...task.workflowArgs, ...task.raw }, row };
}

/**
 * Why the first of `tasks` whose workflow gives no state to `stateKey` cannot train with it, or null when each does
 * (or is a module-path workflow, known only when it runs).
 */
export function missingStateHashes(stateKey: { advantage: string; key: string }, tasks: Iterable<TaskWorkflow>): string | null {
  const { advantage, key } = stateKey;
  const needs = `advantage_fn '${advantage}' groups steps by the state they acted from (info.${key})`;
  for (const { workflow, args, row } of tasks) {
    if (!WORKFLOWS.has(workflow)) continue;
    const spec = WORKFLOWS.get(workflow);
    const where = row === null ? `workflow '${workflow}'` : `workflow '${workflow}' (${row})`;
    if (spec.stateHashes === undefined)
      return (
        `${needs}, but ${where} writes no state, so every step-level advantage would be 0 ` +
        '(use an environment workflow, or another algorithm)'
      );
    const written = spec.stateHashes(args);
    if (written !== true) return `${needs}, but ${where} writes none: ${written}`;
    if (key !== WRITTEN_KEY) return `${needs}, but ${where} writes info.${WRITTEN_KEY}, not info.${key}`;
  }
  return null;
}
