// Each task operator against expectations computed by hand (written beside each test).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { after, test } from 'node:test';
import {
  documentDeduplicator,
  documentMinhashDeduplicator,
  difficultyScorer,
  fieldFormatFilter,
  fieldMapper,
  jaccard,
  llmDifficultyScoreFilter,
  llmQualityScoreFilter,
  llmRewriteMapper,
  type ModelSampler,
  optimalBands,
  PASS_RATE_FIELD,
  parseScoreAnswer,
  type SampledRun,
  shingles,
  type TaskOperatorContext,
  type TaskOperatorModule,
  type TaskRow,
  TASK_OPERATORS,
  textLengthFilter,
} from '../../../src/rft/data/task-pipeline/index.js';
import { resolveArgs } from '../../../src/util/index.js';

/** A context for one operator; `counts` collects what it counted. */
function contextFor(
  name: string,
  extra: Partial<TaskOperatorContext> = {},
): TaskOperatorContext & { counts: Record<string, number> } {
  const counts: Record<string, number> = {};
  return {
    name,
    position: 1,
    taskset: { name: 'tasks', path: '/dev/null', format: { promptKey: 'prompt', responseKey: 'response' } },
    textKey: 'prompt',
    workDir: tmpdir(),
    seed: 42,
    numProcess: 2,
    baseDir: process.cwd(),
    model: () => Promise.reject(new Error('no model in this test')),
    auxiliaryModels: null,
    log: () => {},
    progress: () => {},
    count: (key, amount = 1) => {
      counts[key] = (counts[key] ?? 0) + amount;
    },
    emit: () => {},
    ...extra,
    counts,
  };
}

/** Runs a module with YAML-style (snake_case) arguments, as the pipeline does. */
async function run<O extends object>(
  module: TaskOperatorModule<O>,
  rows: TaskRow[],
  args: Record<string, unknown> = {},
  context = contextFor('op'),
): Promise<TaskRow[]> {
  return module.run(rows, resolveArgs('op', module.defaults, args), context);
}

const prompts = (rows: TaskRow[]) => rows.map((r) => r.prompt);

test('document_deduplicator keeps the first of each exact text; lowercase and ignore_non_character widen "exact"', async () => {
  const rows = ['a b', 'A B', 'a b', 'a-b!'].map((prompt) => ({ prompt }));
  // as written: 'a b' repeats at 2 → [a b, A B, a-b!]
  assert.deepEqual(prompts(await run(documentDeduplicator, rows)), ['a b', 'A B', 'a-b!']);
  // lowercase: 'A B' → 'a b' repeats too → [a b, a-b!]
  assert.deepEqual(prompts(await run(documentDeduplicator, rows, { lowercase: true })), ['a b', 'a-b!']);
  // lowercase + only letters/digits: every row is 'ab' → [a b]
  assert.deepEqual(prompts(await run(documentDeduplicator, rows, { lowercase: true, ignore_non_character: true })), ['a b']);
  // another field, by text_key
  const byAnswer = [
    { prompt: 'x', response: '1' },
    { prompt: 'y', response: '1' },
  ];
  assert.deepEqual(prompts(await run(documentDeduplicator, byAnswer, { text_key: 'response' })), ['x']);
  await assert.rejects(run(documentDeduplicator, [{ question: 'q' }]), /row 0 has no text in 'prompt'/);
});

test('shingles and Jaccard similarity by hand', () => {
  // 'a b c d e' in word 2-grams: {a b, b c, c d, d e}; 'a b c d f': {a b, b c, c d, d f} → |∩| 3, |∪| 5 → 0.6
  const a = shingles('a b c d e', 'space', 2);
  const b = shingles('a b c d f', 'space', 2);
  assert.deepEqual([...a], ['a b', 'b c', 'c d', 'd e']);
  assert.equal(jaccard(a, b), 3 / 5);
  // character 3-grams of 'abcd': {abc, bcd}; a text shorter than the window is one shingle
  assert.deepEqual([...shingles('abcd', 'character', 3)], ['abc', 'bcd']);
  assert.deepEqual([...shingles('ab', 'character', 3)], ['ab']);
  const { bands, rows } = optimalBands(0.7, 256);
  assert.ok(bands * rows <= 256 && bands >= 1 && rows >= 1);
});

test('document_minhash_deduplicator drops near-duplicates at the Jaccard threshold, keeps pairs below it, deterministically', async () => {
  const words =
    'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty';
  const base = words.split(' ');
  const rows = [
    { prompt: words }, // 0
    { prompt: [...base.slice(0, 19), 'zebra'].join(' ') }, // 1: last word changed
    { prompt: 'alpha beta gamma delta epsilon zeta eta theta iota kappa' }, // 2: unrelated
    { prompt: 'a b c d e' }, // 3
    { prompt: 'a b c d f' }, // 4: J(3, 4) = 0.6 in word 2-grams
  ];
  // row 1 vs row 0, word 3-grams: 18 each, 17 shared → J = 17 / 19 = 0.895 ≥ 0.7 → dropped.
  // 64 bands × 4 rows: P[candidate] = 1 − (1 − J⁴)^64 = 1 − (1 − 0.641)^64 > 0.9999 (and the seed fixes the outcome).
  const args = { window_size: 3, jaccard_threshold: 0.7, num_bands: 64, num_rows_per_band: 4 };
  const kept = await run(documentMinhashDeduplicator, rows, args);
  assert.deepEqual(
    prompts(kept),
    [0, 2, 3, 4].map((i) => rows[i]?.prompt),
  );
  // rows 3 and 4 (J = 0.6 in word 2-grams) survive a 0.7 threshold and fall to 0.5:
  // P[candidate] = 1 − (1 − 0.6⁴)^64 = 1 − 0.8704^64 = 0.99986
  const pair = [rows[3] as TaskRow, rows[4] as TaskRow];
  const two = { window_size: 2, num_bands: 64, num_rows_per_band: 4 };
  assert.equal((await run(documentMinhashDeduplicator, pair, { ...two, jaccard_threshold: 0.7 })).length, 2);
  assert.deepEqual(prompts(await run(documentMinhashDeduplicator, pair, { ...two, jaccard_threshold: 0.5 })), ['a b c d e']);
  // the same seed gives the same output with the chosen bands too
  const first = await run(documentMinhashDeduplicator, rows, { window_size: 3 });
  const second = await run(documentMinhashDeduplicator, rows, { window_size: 3 });
  assert.deepEqual(first, second);
  await assert.rejects(
    run(documentMinhashDeduplicator, rows, { num_bands: 100, num_rows_per_band: 4 }),
    /num_bands × num_rows_per_band \(400\) exceeds num_permutations \(256\)/,
  );
});

test('text_length_filter counts characters (code points) in [min_len, max_len]', async () => {
  const context = contextFor('text_length_filter');
  const rows = ['ab', 'abc', 'abcde', 'abcdef', '日本語'].map((prompt) => ({ prompt }));
  // lengths 2, 3, 5, 6, 3 → keep 3, 5, 3; one too short, one too long
  const kept = await run(textLengthFilter, rows, { min_len: 3, max_len: 5 }, context);
  assert.deepEqual(prompts(kept), ['abc', 'abcde', '日本語']);
  assert.deepEqual(context.counts, { too_short: 1, too_long: 1 });
});

test('field_format_filter keeps rows with the required fields matching their patterns', async () => {
  const context = contextFor('field_format_filter');
  const rows = [
    { prompt: 'p0', answer: '42' }, // kept
    { prompt: 'p1', answer: '' }, // empty: missing
    { prompt: 'p2' }, // missing
    { prompt: 'p3', answer: '4x' }, // pattern mismatch
    { prompt: 'p4', answer: 7 }, // a number is its text '7': kept
  ];
  const kept = await run(fieldFormatFilter, rows, { required_fields: ['answer'], patterns: { answer: '^-?\\d+$' } }, context);
  assert.deepEqual(prompts(kept), ['p0', 'p4']);
  assert.deepEqual(context.counts, { missing_field: 2, pattern_mismatch: 1 });
  // allow_empty: '' counts as present (and fails the pattern instead)
  const lenient = contextFor('field_format_filter');
  await run(
    fieldFormatFilter,
    rows,
    { required_fields: ['answer'], patterns: { answer: '^-?\\d+$' }, allow_empty: true },
    lenient,
  );
  assert.deepEqual(lenient.counts, { missing_field: 1, pattern_mismatch: 2 });
  await assert.rejects(run(fieldFormatFilter, rows, { patterns: { answer: '(' } }), /patterns\.answer:/);
});

test('field_mapper renames and copies fields, nested ones by dotted path', async () => {
  const rows = [{ question: 'q', reward_model: { ground_truth: '2' } }];
  const mapped = await run(fieldMapper, rows, {
    rename: { question: 'prompt' },
    copy: { 'reward_model.ground_truth': 'response' },
  });
  assert.deepEqual(mapped, [{ prompt: 'q', reward_model: { ground_truth: '2' }, response: '2' }]);
  assert.deepEqual(rows[0], { question: 'q', reward_model: { ground_truth: '2' } }, 'the input row is not changed');
  const moved = await run(fieldMapper, rows, { rename: { 'reward_model.ground_truth': 'answer' } });
  assert.deepEqual(moved, [{ question: 'q', reward_model: {}, answer: '2' }]);
  await assert.rejects(run(fieldMapper, [{ prompt: 'x' }], { rename: { question: 'prompt' } }), /row 0 has no field 'question'/);
  const context = contextFor('field_mapper');
  const dropped = await run(
    fieldMapper,
    [{ prompt: 'x' }, { question: 'y' }],
    { rename: { question: 'prompt' }, on_missing: 'drop' },
    context,
  );
  assert.deepEqual(dropped, [{ prompt: 'y' }]);
  assert.deepEqual(context.counts, { missing_field: 1 });
});

test('difficulty_scorer writes each task’s pass rate (accuracy, else reward, ≥ pass_threshold) and drops what is out of range', async () => {
  const asked: { ids: string[]; repeatTimes: number }[] = [];
  const outcomes: Record<string, SampledRun[]> = {
    // 3 of 4 rewards ≥ 1 → 0.75
    'task_pipeline:0': [{ reward: 1 }, { reward: 0 }, { reward: 1 }, { reward: 1 }],
    // every run failed: no score (dropped, counted)
    'task_pipeline:1': [],
    // accuracy decides where given: accuracies 1, 0 and reward 1 → 2 of 3 = 0.667
    'task_pipeline:2': [{ reward: 0.1, accuracy: 1 }, { reward: 1, accuracy: 0 }, { reward: 1 }],
    // 0 of 2 → 0
    'task_pipeline:3': [{ reward: 0 }, { reward: -1 }],
  };
  const sampler: ModelSampler = {
    model: 'fake',
    async sample(tasks, repeatTimes) {
      asked.push({ ids: tasks.map((t) => t.id), repeatTimes });
      return new Map(tasks.map((t) => [t.id, outcomes[t.id] ?? []]));
    },
  };
  const context = contextFor('difficulty_scorer', { model: async () => sampler, numProcess: 3 });
  const rows = [0, 1, 2, 3].map((i) => ({ prompt: `p${i}`, response: 'r' }));
  const scored = await run(difficultyScorer, rows, { repeat_times: 4 }, context);
  assert.deepEqual(
    scored.map((r) => [r.prompt, r[PASS_RATE_FIELD]]),
    [
      ['p0', 0.75],
      ['p2', 2 / 3],
      ['p3', 0],
    ],
  );
  assert.equal(PASS_RATE_FIELD, 'pass_rate');
  // chunks of num_process tasks, each asked repeat_times samples
  assert.deepEqual(asked, [
    { ids: ['task_pipeline:0', 'task_pipeline:1', 'task_pipeline:2'], repeatTimes: 4 },
    { ids: ['task_pipeline:3'], repeatTimes: 4 },
  ]);
  assert.deepEqual(context.counts, { runs: 9, unscored: 1 });
  // a range drops the never-solved task; another field name (as BOTS names one per model)
  const ranged = contextFor('difficulty_scorer', { model: async () => sampler });
  const kept = await run(difficultyScorer, rows, { repeat_times: 4, min_pass_rate: 0.01, field: 'qwen_pass_rate' }, ranged);
  assert.deepEqual(
    kept.map((r) => r.qwen_pass_rate),
    [0.75, 2 / 3],
  );
  assert.equal(ranged.counts.out_of_range, 1);
  await assert.rejects(
    run(difficultyScorer, rows, { on_unscored: 'error' }, contextFor('difficulty_scorer', { model: async () => sampler })),
    /row 1: every one of its 8 runs failed/,
  );
});

// --- LLM-scored operators against a scripted OpenAI-compatible endpoint ---------------------------------------------

/** Answers chat completions from a script keyed by the user message: each key's answers in turn. */
async function scriptedEndpoint(script: Record<string, string[]>): Promise<{ url: string; asked: string[]; server: Server }> {
  const asked: string[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { messages: { role: string; content: string }[] };
    const user = body.messages.find((m) => m.role === 'user')?.content ?? '';
    asked.push(user);
    const content = script[user]?.shift() ?? 'no script';
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        id: 'x',
        object: 'chat.completion',
        created: 0,
        model: 'judge',
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
      }),
    );
  });
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  after(() => server.close());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, asked, server };
}

test('llm score filters: on_unscored keep keeps a row the model gave no score; field_names label the input_keys', async () => {
  const { url, asked } = await scriptedEndpoint({
    'Question: q1\nAnswer: a1': ['{"score": 0.2}'],
    'Question: q2\nAnswer: a2': ['no'],
  });
  const context = contextFor('llm_quality_score_filter');
  const rows = [
    { prompt: 'q1', response: 'a1' },
    { prompt: 'q2', response: 'a2' },
  ];
  const args = {
    base_url: url,
    model: 'judge',
    try_num: 1,
    input_keys: ['prompt', 'response'],
    field_names: ['Question', 'Answer'],
  };
  const kept = await run(llmQualityScoreFilter, rows, { ...args, on_unscored: 'keep' }, context);
  assert.deepEqual(kept, [
    { prompt: 'q1', response: 'a1', llm_quality_score: 0.2 },
    { prompt: 'q2', response: 'a2' },
  ]);
  assert.deepEqual(asked, ['Question: q1\nAnswer: a1', 'Question: q2\nAnswer: a2']);
  assert.equal(context.counts.unscored, 1);
  await assert.rejects(
    run(llmQualityScoreFilter, rows, { ...args, on_unscored: 'maybe' }, context),
    /on_unscored must be drop or keep/,
  );
  await assert.rejects(
    run(llmQualityScoreFilter, rows, { ...args, field_names: ['Question'] }, context),
    /field_names names the input_keys in order: 1 name\(s\) for 2 key\(s\)/,
  );
});

test('parseScoreAnswer is strict: one JSON object, score in [0, 1], only score and rationale', () => {
  assert.deepEqual(parseScoreAnswer('{"score": 0.5, "rationale": "ok"}'), { score: 0.5, rationale: 'ok' });
  assert.deepEqual(parseScoreAnswer('```json\n{"score": 1}\n```'), { score: 1, rationale: null });
  assert.throws(() => parseScoreAnswer('Score: 0.5'), /not a JSON object/);
  assert.throws(() => parseScoreAnswer('{"score": 1.5}'), /score must be a number in \[0, 1\], got 1.5/);
  assert.throws(() => parseScoreAnswer('{"score": "0.5"}'), /got "0.5"/);
  assert.throws(() => parseScoreAnswer('{"score": 0.5, "extra": 1}'), /unexpected keys extra/);
  assert.throws(() => parseScoreAnswer('[0.5]'), /not a JSON object/);
});

test('llm_quality_score_filter: scores from the endpoint, retries bad answers, counts failures, keeps min_score..max_score', async () => {
  const { url, asked } = await scriptedEndpoint({
    good: ['{"score": 0.9, "rationale": "clear"}'],
    bad: ['{"score": 0.2}'],
    fenced: ['```json\n{"score": 0.5}\n```'],
    garbage: ['I would say 0.7', 'still not JSON'],
    retried: ['{"score": 7}', '{"score": 0.6}'],
  });
  const context = contextFor('llm_quality_score_filter');
  const rows = ['good', 'bad', 'fenced', 'garbage', 'retried'].map((prompt) => ({ prompt }));
  const kept = await run(llmQualityScoreFilter, rows, { base_url: url, model: 'judge', min_score: 0.5, try_num: 2 }, context);
  // good 0.9 and fenced 0.5 and retried 0.6 are in [0.5, 1]; bad 0.2 is not; garbage never parsed
  assert.deepEqual(
    kept.map((r) => [r.prompt, r.llm_quality_score]),
    [
      ['good', 0.9],
      ['fenced', 0.5],
      ['retried', 0.6],
    ],
  );
  assert.equal(kept[0]?.llm_quality_record, 'clear');
  // parse failures: garbage twice, retried once; one row unscored; one out of range
  assert.deepEqual(context.counts, { parse_failures: 3, unscored: 1, out_of_range: 1 });
  assert.equal(asked.length, 7); // 5 rows, 2 retries
});

test('llm_rewrite_mapper replaces the text; an unreachable endpoint is an error naming it', async () => {
  const { url } = await scriptedEndpoint({ 'what 1+1': ['{"rewritten": "What is 1 + 1?"}'], other: ['{"rewrite": "x"}'] });
  const context = contextFor('llm_rewrite_mapper');
  const out = await run(
    llmRewriteMapper,
    [
      { prompt: 'what 1+1', response: '2' },
      { prompt: 'other', response: '3' },
    ],
    { base_url: url, model: 'm', try_num: 1 },
    context,
  );
  // the second answer has the wrong key: the row stays as it was, counted
  assert.deepEqual(out, [
    { prompt: 'What is 1 + 1?', response: '2' },
    { prompt: 'other', response: '3' },
  ]);
  assert.deepEqual(context.counts, { parse_failures: 1, unscored: 1 });
  await assert.rejects(
    run(llmRewriteMapper, [{ prompt: 'x' }], { base_url: 'http://127.0.0.1:9/v1', model: 'm', try_num: 2 }),
    /row 0: 2 requests to http:\/\/127\.0\.0\.1:9\/v1 failed/,
  );
  await assert.rejects(run(llmRewriteMapper, [{ prompt: 'x' }], { auxiliary_model: 'judge' }), /no explorer\.auxiliary_models/);
  await assert.rejects(
    run(llmRewriteMapper, [{ prompt: 'x' }], {}),
    /name the model: base_url \(or \$OPENAI_BASE_URL\) and model/,
  );
});

test('the registry names every built-in operator and suggests the closest for a typo', () => {
  assert.deepEqual(TASK_OPERATORS.names(), [
    'document_deduplicator',
    'document_minhash_deduplicator',
    'text_length_filter',
    'field_format_filter',
    'field_mapper',
    'difficulty_scorer',
    'llm_quality_score_filter',
    'llm_difficulty_score_filter',
    'llm_rewrite_mapper',
    'human_preference_annotation_mapper',
  ]);
  assert.throws(
    () => TASK_OPERATORS.get('document_deduplicatr'),
    /unknown task operator 'document_deduplicatr'; did you mean 'document_deduplicator'/,
  );
});

test('llm_difficulty_score_filter through an auxiliary model by name (its OpenAI client and model name)', async () => {
  const { url, asked } = await scriptedEndpoint({ hard: ['{"score": 0.8}'], easy: ['{"score": 0.1, "rationale": "trivial"}'] });
  const { default: OpenAI } = await import('openai');
  const judge = {
    name: 'judge',
    modelName: 'judge-model',
    tokenizer: null,
    openai: async () => new OpenAI({ baseURL: url, apiKey: 'none' }),
    baseUrl: async () => url,
    logprobs: async () => [],
  };
  const auxiliaryModels = {
    list: [judge],
    get: (name: string) => {
      if (name !== 'judge') throw new Error(`no auxiliary model '${name}'`);
      return judge;
    },
  };
  const context = contextFor('llm_difficulty_score_filter', { auxiliaryModels });
  const out = await run(
    llmDifficultyScoreFilter,
    [{ prompt: 'hard' }, { prompt: 'easy' }],
    { auxiliary_model: 'judge' },
    context,
  );
  // the default range [0, 1] keeps both, with Data-Juicer's field names
  assert.deepEqual(out, [
    { prompt: 'hard', llm_difficulty_score: 0.8 },
    { prompt: 'easy', llm_difficulty_score: 0.1, llm_difficulty_record: 'trivial' },
  ]);
  assert.deepEqual(asked, ['hard', 'easy']);
  await assert.rejects(
    run(llmDifficultyScoreFilter, [{ prompt: 'x' }], { auxiliary_model: 'judge', base_url: url }, context),
    /set either auxiliary_model or base_url \+ model, not both/,
  );
});
