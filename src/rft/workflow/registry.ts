// Workflows by name (Trinity-RFT's WORKFLOWS registry) or by module path (`path/to/file.ts#name`: a Workflow
// function, taken as repeatable, or a WorkflowSpec object).
//
//   const spec = await WORKFLOWS.resolve(task.workflow ?? 'math_workflow');
import { didYouMean } from '../algorithm/registry.js';
import { toolAgentWorkflow } from './agents/tool-agent.js';
import { frozenLakeWorkflow } from './env/frozen-lake.js';
import { sokobanWorkflow } from './env/sokoban.js';
import { isModulePath, loadModuleExport } from './module-path.js';
import { mathBoxedWorkflow, mathWorkflow, simpleWorkflow } from './single-turn.js';
import type { Workflow, WorkflowSpec } from './types.js';

export class WorkflowRegistry {
  readonly #workflows = new Map<string, WorkflowSpec>();
  readonly #loaded = new Map<string, Promise<WorkflowSpec>>();

  /** Registers a workflow (a bare function is repeatable: it gets repeatTimes and returns them all). */
  register(name: string, workflow: WorkflowSpec | Workflow): this {
    if (this.#workflows.has(name)) throw new Error(`workflow '${name}' is already registered`);
    this.#workflows.set(name, toSpec(workflow, `workflow '${name}'`));
    return this;
  }

  has(name: string): boolean {
    return this.#workflows.has(name);
  }

  names(): string[] {
    return [...this.#workflows.keys()];
  }

  get(name: string): WorkflowSpec {
    const spec = this.#workflows.get(name);
    if (spec === undefined)
      throw new Error(`unknown workflow '${name}'${didYouMean(name, this.names())}; registered: ${this.names().join(', ')}`);
    return spec;
  }

  /** A registered name, or a module path (`file.ts#export`, relative to baseDir) imported once and cached. */
  resolve(spec: string, baseDir?: string): Promise<WorkflowSpec> {
    if (this.#workflows.has(spec) || !isModulePath(spec)) {
      try {
        return Promise.resolve(this.get(spec));
      } catch (error) {
        return Promise.reject(error);
      }
    }
    const key = `${baseDir ?? ''}\0${spec}`;
    let loaded = this.#loaded.get(key);
    if (loaded === undefined) {
      loaded = loadModuleExport(spec, 'workflow', baseDir).then((value) => toSpec(value, `workflow '${spec}'`));
      loaded.catch(() => this.#loaded.delete(key));
      this.#loaded.set(key, loaded);
    }
    return loaded;
  }
}

/** A function, or an object with a `run` function; anything else is an error naming `where`. */
function toSpec(value: unknown, where: string): WorkflowSpec {
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

/** The built-in workflows; register your own here or name them by module path. */
export const WORKFLOWS = new WorkflowRegistry()
  .register('simple_workflow', simpleWorkflow)
  .register('math_workflow', mathWorkflow)
  .register('math_boxed_workflow', mathBoxedWorkflow)
  .register('tool_agent_workflow', toolAgentWorkflow)
  .register('frozen_lake_workflow', frozenLakeWorkflow)
  .register('sokoban_workflow', sokobanWorkflow);
