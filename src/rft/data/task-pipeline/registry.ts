// The task operators by name (data_processor.task_pipeline.operators[].name). A name not registered here may be a
// module path, `path/to/op.ts#export` relative to the config file, whose export is a TaskOperatorModule
// (`{ defaults, run(rows, options, context) }`); it then behaves like a built-in.
import { Registry } from '../../../util/index.js';
import { humanPreferenceAnnotationMapper } from './operators/annotation.js';
import { documentDeduplicator, documentMinhashDeduplicator } from './operators/dedup.js';
import { difficultyScorer } from './operators/difficulty.js';
import { fieldFormatFilter, fieldMapper, textLengthFilter } from './operators/filters.js';
import { llmDifficultyScoreFilter, llmQualityScoreFilter, llmRewriteMapper } from './operators/llm.js';
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

for (const [name, module] of [
  ['document_deduplicator', documentDeduplicator],
  ['document_minhash_deduplicator', documentMinhashDeduplicator],
  ['text_length_filter', textLengthFilter],
  ['field_format_filter', fieldFormatFilter],
  ['field_mapper', fieldMapper],
  ['difficulty_scorer', difficultyScorer],
  ['llm_quality_score_filter', llmQualityScoreFilter],
  ['llm_difficulty_score_filter', llmDifficultyScoreFilter],
  ['llm_rewrite_mapper', llmRewriteMapper],
  ['human_preference_annotation_mapper', humanPreferenceAnnotationMapper],
] as const) {
  TASK_OPERATORS.register(name, module as AnyTaskOperator, module.description ?? '');
}
