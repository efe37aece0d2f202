// Operators that ask a language model about each row, through the OpenAI chat API: an external endpoint (`base_url`
// + `model`, key from `api_key` or $OPENAI_API_KEY) or one of the run's auxiliary models by name
// (`auxiliary_model`, explorer.auxiliary_models). Names and output fields are Data-Juicer's:
//
//   llm_quality_score_filter     writes llm_quality_score (0 bad … 1 good) and llm_quality_record (the rationale)
//   llm_difficulty_score_filter  writes llm_difficulty_score (0 trivial … 1 very hard) and llm_difficulty_record
//                                both keep rows with min_score ≤ score ≤ max_score (default: all); a row left
//                                unscored is dropped, or kept without a score with on_unscored: keep
//   llm_rewrite_mapper           replaces the text field with the model's rewrite
//
// The answer is parsed strictly: one JSON object (a ```json fence around it is allowed) with exactly the expected
// keys — {"score": number in [0, 1], "rationale"?: string} or {"rewritten": non-empty string}. Anything else is a
// parse failure, counted (parse_failures) and asked again, up to try_num times; a row still without an answer is
// counted (unscored) and dropped by the filters, left as it was by the rewriter. A request that fails (HTTP error,
// refused connection) is counted (request_failures) and retried the same way; a row whose every try failed so is
// an error: the endpoint, not the row, is broken.
import OpenAI from 'openai';
import { TASK_OPERATORS } from '../registry.js';
import { getField, setField, textOf } from '../rows.js';
import type { TaskOperatorContext, TaskOperatorModule, TaskRow } from '../types.js';

export const LLM_QUALITY_SCORE_FIELD = 'llm_quality_score';
export const LLM_DIFFICULTY_SCORE_FIELD = 'llm_difficulty_score';

export interface LlmOperatorOptions {
  /** External endpoint: its base URL (…/v1; '': $OPENAI_BASE_URL) and model name. */
  baseUrl: string;
  model: string;
  /** Data-Juicer's name for `model` (an API model; Data-Juicer's Hugging Face models do not run here). */
  apiOrHfModel: string;
  /** '' : $OPENAI_API_KEY (else no key). */
  apiKey: string;
  /** Instead of an endpoint: an auxiliary model of the run by name. */
  auxiliaryModel: string;
  /** Fields shown to the model, as `field: value` lines (empty: the text field). */
  inputKeys: string[];
  /** The names those lines show for input_keys, in order (Data-Juicer's field_names; empty: the keys themselves). */
  fieldNames: string[];
  textKey: string;
  /** '' : the operator's own instruction. */
  systemPrompt: string;
  tryNum: number;
  temperature: number;
  maxTokens: number;
  minScore: number;
  maxScore: number;
  /** Score filters: a row the model gave no valid score is dropped ('drop') or kept without a score ('keep'). */
  onUnscored: string;
}

const DEFAULTS: LlmOperatorOptions = {
  baseUrl: '',
  model: '',
  apiOrHfModel: '',
  apiKey: '',
  auxiliaryModel: '',
  inputKeys: [],
  fieldNames: [],
  textKey: '',
  systemPrompt: '',
  tryNum: 3,
  temperature: 0,
  maxTokens: 512,
  minScore: 0,
  maxScore: 1,
  onUnscored: 'drop',
};

type Kind = 'quality' | 'difficulty' | 'rewrite';

const INSTRUCTIONS: Record<Kind, string> = {
  quality:
    'You rate the quality of a task used to train a language model: is it clear, self-contained, solvable, and is ' +
    'its reference answer (if shown) correct? Answer with one JSON object and nothing else: ' +
    '{"score": <a number from 0 (unusable) to 1 (excellent)>, "rationale": "<one sentence>"}',
  difficulty:
    'You rate how difficult a task is for a capable language model to solve. Answer with one JSON object and nothing ' +
    'else: {"score": <a number from 0 (trivial) to 1 (very hard)>, "rationale": "<one sentence>"}',
  rewrite:
    'You rewrite a task used to train a language model so that it is clear and self-contained, keeping its meaning ' +
    'and its answer unchanged. Answer with one JSON object and nothing else: {"rewritten": "<the rewritten task>"}',
};

/** Why an answer was not accepted (the message says what was expected). */
export class LlmAnswerError extends Error {
  override name = 'LlmAnswerError';
}

/** The JSON object of an answer, optionally inside one ```json fence; anything around it is an error. */
function answerObject(text: string): Record<string, unknown> {
  const trimmed = text.trim();
  const fenced = /^```(?:json)?\s*\n([\s\S]*?)\n?```$/.exec(trimmed);
  const body = fenced ? (fenced[1] as string) : trimmed;
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw new LlmAnswerError(`not a JSON object: ${JSON.stringify(trimmed.slice(0, 120))}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new LlmAnswerError(`not a JSON object: ${JSON.stringify(trimmed.slice(0, 120))}`);
  return value as Record<string, unknown>;
}

/** {"score": number in [0, 1], "rationale"?: string}, exactly. */
export function parseScoreAnswer(text: string): { score: number; rationale: string | null } {
  const object = answerObject(text);
  const extra = Object.keys(object).filter((k) => k !== 'score' && k !== 'rationale');
  if (extra.length > 0) throw new LlmAnswerError(`unexpected keys ${extra.join(', ')} (expected score and rationale)`);
  const { score, rationale } = object;
  if (typeof score !== 'number' || !Number.isFinite(score) || score < 0 || score > 1)
    throw new LlmAnswerError(`score must be a number in [0, 1], got ${JSON.stringify(score)}`);
  if (rationale !== undefined && typeof rationale !== 'string')
    throw new LlmAnswerError(`rationale must be a string, got ${JSON.stringify(rationale)}`);
  return { score, rationale: rationale ?? null };
}

/** {"rewritten": non-empty string}, exactly. */
export function parseRewriteAnswer(text: string): string {
  const object = answerObject(text);
  const keys = Object.keys(object);
  if (keys.length !== 1 || keys[0] !== 'rewritten')
    throw new LlmAnswerError(`expected exactly the key rewritten, got ${keys.join(', ') || 'none'}`);
  const { rewritten } = object;
  if (typeof rewritten !== 'string' || rewritten.trim() === '')
    throw new LlmAnswerError(`rewritten must be a non-empty string, got ${JSON.stringify(rewritten)}`);
  return rewritten;
}

/** The chat client and model name the options name (an endpoint, or an auxiliary model). */
async function chatClient(
  o: LlmOperatorOptions,
  context: TaskOperatorContext,
): Promise<{ client: OpenAI; model: string; where: string }> {
  const where = context.name;
  if (o.model !== '' && o.apiOrHfModel !== '')
    throw new Error(`${where}: model and api_or_hf_model (Data-Juicer's name for it) are both set: keep one`);
  const modelName = o.model || o.apiOrHfModel;
  if (o.auxiliaryModel !== '') {
    if (o.baseUrl !== '' || modelName !== '')
      throw new Error(`${where}: set either auxiliary_model or base_url + model, not both`);
    if (context.auxiliaryModels === null)
      throw new Error(`${where}: auxiliary_model '${o.auxiliaryModel}' is named, but the run has no explorer.auxiliary_models`);
    const model = context.auxiliaryModels.get(o.auxiliaryModel);
    return { client: await model.openai(), model: model.modelName, where: `auxiliary model '${model.name}'` };
  }
  // a model without base_url is served at $OPENAI_BASE_URL (as Data-Juicer's api_or_hf_model API models are)
  const baseUrl = o.baseUrl || (modelName !== '' ? (process.env.OPENAI_BASE_URL ?? '') : '');
  if (baseUrl === '' || modelName === '')
    throw new Error(
      `${where}: name the model: base_url (or $OPENAI_BASE_URL) and model (an OpenAI-compatible endpoint), or auxiliary_model`,
    );
  const apiKey = o.apiKey || process.env.OPENAI_API_KEY || 'none';
  return { client: new OpenAI({ baseURL: baseUrl, apiKey, maxRetries: 0 }), model: modelName, where: baseUrl };
}

/** Runs `work` over 0..n-1 with at most `limit` at once, in any order; the first error rejects. */
async function forEachLimited(n: number, limit: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < n) {
      const i = next++;
      await work(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, limit), n) }, worker));
}

function llmOperator(kind: Kind, field: string | null): TaskOperatorModule<LlmOperatorOptions> {
  return {
    description:
      kind === 'rewrite'
        ? 'rewrites the text field with a model (OpenAI API)'
        : `scores each row's ${kind} with a model (OpenAI API) into ${field}, keeps min_score <= score <= max_score`,
    defaults: DEFAULTS,
    async run(rows, o, context) {
      const where = context.name;
      if (!Number.isInteger(o.tryNum) || o.tryNum < 1) throw new Error(`${where}: try_num must be an integer >= 1`);
      if (!(o.minScore >= 0 && o.minScore <= o.maxScore && o.maxScore <= 1))
        throw new Error(`${where}: need 0 <= min_score <= max_score <= 1`);
      if (o.onUnscored !== 'drop' && o.onUnscored !== 'keep')
        throw new Error(`${where}: on_unscored must be drop or keep, got '${o.onUnscored}'`);
      if (o.fieldNames.length > 0 && o.fieldNames.length !== o.inputKeys.length)
        throw new Error(
          `${where}: field_names names the input_keys in order: ${o.fieldNames.length} name(s) for ${o.inputKeys.length} key(s)`,
        );
      const { client, model, where: endpoint } = await chatClient(o, context);
      const textKey = o.textKey || context.textKey;
      const inputKeys = o.inputKeys.length > 0 ? o.inputKeys : [textKey];
      const system = o.systemPrompt || INSTRUCTIONS[kind];
      const results = new Array<TaskRow | null>(rows.length).fill(null);
      let done = 0;
      await forEachLimited(rows.length, context.numProcess, async (i) => {
        const row = rows[i] as TaskRow;
        const user = inputKeys
          .map((key, k) => {
            const text = textOf(row, key) ?? JSON.stringify(getField(row, key) ?? null);
            return inputKeys.length === 1 ? text : `${o.fieldNames[k] ?? key}: ${text}`;
          })
          .join('\n');
        let lastRequestError: unknown = null;
        let badAnswers = 0;
        let answered = false;
        for (let attempt = 0; attempt < o.tryNum && !answered; attempt++) {
          context.signal?.throwIfAborted();
          let text: string;
          try {
            const completion = await client.chat.completions.create(
              {
                model,
                messages: [
                  { role: 'system', content: system },
                  { role: 'user', content: user },
                ],
                temperature: o.temperature,
                max_tokens: o.maxTokens,
              },
              context.signal ? { signal: context.signal } : {},
            );
            text = completion.choices[0]?.message?.content ?? '';
          } catch (error) {
            if (context.signal?.aborted) throw error;
            context.count('request_failures');
            lastRequestError = error;
            continue;
          }
          try {
            if (kind === 'rewrite') {
              results[i] = setField(row, textKey, parseRewriteAnswer(text));
            } else {
              const { score, rationale } = parseScoreAnswer(text);
              const recordField = `${(field as string).replace(/_score$/, '')}_record`;
              results[i] = { ...row, [field as string]: score, ...(rationale !== null ? { [recordField]: rationale } : {}) };
            }
            answered = true;
          } catch (error) {
            if (!(error instanceof LlmAnswerError)) throw error;
            context.count('parse_failures');
            badAnswers++;
            context.log(`${where}: row ${i}, try ${attempt + 1}/${o.tryNum}: ${error.message}`);
          }
        }
        if (!answered && badAnswers === 0) {
          // every try failed at the request, none at the answer: the endpoint is the problem, not the row
          throw new Error(
            `${where}: row ${i}: ${o.tryNum} requests to ${endpoint} failed; last: ${(lastRequestError as Error).message}`,
            { cause: lastRequestError },
          );
        }
        if (!answered) context.count('unscored');
        done++;
        context.progress(done, rows.length);
      });
      const out: TaskRow[] = [];
      results.forEach((result, i) => {
        if (result === null) {
          // kept as it was (counted: unscored): the rewriter always, a score filter with on_unscored: keep
          if (kind === 'rewrite' || o.onUnscored === 'keep') out.push(rows[i] as TaskRow);
          return;
        }
        if (kind !== 'rewrite') {
          const score = result[field as string] as number;
          if (score < o.minScore || score > o.maxScore) {
            context.count('out_of_range');
            return;
          }
        }
        out.push(result);
      });
      return out;
    },
  };
}

export const llmQualityScoreFilter = llmOperator('quality', LLM_QUALITY_SCORE_FIELD);
export const llmDifficultyScoreFilter = llmOperator('difficulty', LLM_DIFFICULTY_SCORE_FIELD);
export const llmRewriteMapper = llmOperator('rewrite', null);

TASK_OPERATORS.register('llm_quality_score_filter', llmQualityScoreFilter, llmQualityScoreFilter.description);
TASK_OPERATORS.register('llm_difficulty_score_filter', llmDifficultyScoreFilter, llmDifficultyScoreFilter.description);
TASK_OPERATORS.register('llm_rewrite_mapper', llmRewriteMapper, llmRewriteMapper.description);
