// The built-in task operators. Each file registers its operators at its bottom; this list imports the files in
// registration order, which is the order of TASK_OPERATORS.names() (and of docs/data-pipelines.md's table): a new
// operator is one file plus one line here. Import TASK_OPERATORS from here (every built-in registered) and the
// operators' files only through here: a file imported before this list would register first and reorder the names.
export * from './dedup.js'; // document_deduplicator, document_minhash_deduplicator
export * from './filters.js'; // text_length_filter, field_format_filter, field_mapper
export * from './difficulty.js'; // difficulty_scorer
export * from './llm.js'; // llm_quality_score_filter, llm_difficulty_score_filter, llm_rewrite_mapper
export * from './annotation.js'; // human_preference_annotation_mapper
export { TASK_OPERATORS } from '../registry.js';
