// The task-operator registry (data_processor.task_pipeline.operators[].name), created empty. Each built-in's file
// registers it at its bottom (`TASK_OPERATORS.register('field_mapper', fieldMapper, ...)`), and ./operators/index.ts
// imports those files in registration order: import TASK_OPERATORS from there, where every built-in is registered,
// not from here. A name not registered may be a module path, `path/to/op.ts#export` relative to the config file,
// whose export is a TaskOperatorModule (`{ defaults, run(rows, options, context) }`); it then behaves like a built-in.
import { Registry } from '../../../util/index.js';
import type { TaskOperatorModule } from './types.js';

// biome-ignore lint/suspicious/noExplicitAny: each module has its own options type; the pipeline resolves them by its defaults
type AnyTaskOperator = TaskOperatorModule<any>;

function fromExport(value: unknown, spec: string): AnyTaskOperator {
  const module = value as Partial<AnyTaskOperator> | null;
  if (
    module === null ||
    typeof module !== 'object' ||
    typeof module.run !== 'function' ||
    module.defaults === null ||
    typeof module.defaults !== 'object'
  ) {
    throw new Error(`task operator '${spec}': expected an export { defaults: {...}, run(rows, options, context) }`);
  }
  return module as AnyTaskOperator;
}

export const TASK_OPERATORS = new Registry<AnyTaskOperator>('task operator', { fromExport });
