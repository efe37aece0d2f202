// Data-Juicer recipes (src/rft/data/data-juicer.ts): `data_juicer` operators and task_pipeline.config_path run their
// recipe's operators through the built-in counterparts; `trinity config check` (the pre-run checks) refuses a recipe
// naming operators without one — naming exactly those — and a task pipeline whose inputs are missing, at the key that
// names them, where it used to pass and the run then failed.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { readDataJuicerRecipe } from '../../../src/rft/data/data-juicer.js';
import { ExperiencePipeline } from '../../../src/rft/data/experience-pipeline/index.js';
import { runTaskPipeline } from '../../../src/rft/data/task-pipeline/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { checkConfigFile } from '../../../src/rft/run/config/check.js';
import { ConfigError } from '../../../src/rft/run/config/index.js';
import { modelFolder, tasksetFile } from '../config/helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'data-juicer-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
mkdirSync(join(dir, 'recipes'));
const recipe = (name: string, text: string): string => {
  writeFileSync(join(dir, 'recipes', name), text);
  return join(dir, 'recipes', name);
};

const SCORING = recipe(
  'scoring.yaml',
  `project_name: scoring
process:
  - llm_quality_score_filter:
      api_or_hf_model: judge
      input_keys: [prompt, response]
      field_names: [Question, Answer]
      try_num: 1
`,
);
const FOREIGN = recipe(
  'foreign.yaml',
  `process:
  - document_deduplicator: {lowercase: true}
  - image_captioning_mapper: {}
  - text_length_filter: {min_len: 1}
  - language_id_score_filter: {lang: en}
`,
);

/** The problems `trinity config check` reports for a config (written to a file in `dir`), as `path: message`. */
async function checkProblems(name: string, text: string): Promise<string[]> {
  const file = join(dir, name);
  writeFileSync(file, text);
  try {
    await checkConfigFile(file);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems.map((p) => `${p.path}: ${p.message}`);
  }
  return [];
}

const BASE = `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  explorer_input:
    taskset: {name: math, path: ${tasks}}
`;

describe('a Data-Juicer recipe', () => {
  it("maps its operators to the built-ins, which take Data-Juicer's argument names", () => {
    const [op] = readDataJuicerRecipe(SCORING);
    assert.equal(op?.name, 'llm_quality_score_filter');
    assert.deepEqual(op?.args, {
      api_or_hf_model: 'judge',
      input_keys: ['prompt', 'response'],
      field_names: ['Question', 'Answer'],
      try_num: 1,
    });
    assert.equal((op?.options as { apiOrHfModel?: string } | undefined)?.apiOrHfModel, 'judge');
  });

  it("the trinity-examples fixture's recipe (upstream's dj_scoring_exp.yaml, our version) maps whole", () => {
    const file = fileURLToPath(new URL('../../fixtures/trinity-examples/recipes/dj_scoring_exp.yaml', import.meta.url));
    assert.deepEqual(
      readDataJuicerRecipe(file).map((op) => [op.name, op.options.auxiliaryModel, op.options.onUnscored]),
      [['llm_quality_score_filter', 'judge', 'keep']],
    );
  });

  it('naming operators without a counterpart is refused naming exactly those; so is an argument the built-in does not take', () => {
    assert.throws(
      () => readDataJuicerRecipe(FOREIGN),
      (error: Error) => {
        assert.match(
          error.message,
          /no counterpart here: process\[1\] image_captioning_mapper, process\[3\] language_id_score_filter \(/,
        );
        assert.doesNotMatch(error.message, /process\[0\]|process\[2\]/);
        return true;
      },
    );
    const badArg = recipe('bad-arg.yaml', 'process:\n  - text_length_filter: {min_length: 3}\n');
    assert.throws(
      () => readDataJuicerRecipe(badArg),
      /process\[0\] text_length_filter: unknown argument 'min_length'.*did you mean 'min_len'/,
    );
    assert.throws(() => readDataJuicerRecipe(recipe('empty.yaml', 'project_name: x\n')), /expected a 'process' list/);
    // a person cannot rate every explore step's experiences: the annotation operator runs in the task pipeline only
    const annotation = recipe('annotate.yaml', 'process:\n  - human_preference_annotation_mapper: {}\n');
    assert.equal(readDataJuicerRecipe(annotation, 'task')[0]?.name, 'human_preference_annotation_mapper');
    assert.throws(
      () => readDataJuicerRecipe(annotation, 'experience'),
      /process\[0\] human_preference_annotation_mapper does not run in the experience pipeline: it waits for a person/,
    );
  });

  it('config check refuses an experience pipeline data_juicer recipe with foreign operators, at its config_path', async () => {
    const problems = await checkProblems(
      'experience.yaml',
      `${BASE}data_processor:
  experience_pipeline:
    operators:
      - {name: reward_filter}
      - {name: data_juicer, args: {config_path: recipes/foreign.yaml}}
`,
    );
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(
      problems[0] ?? '',
      /^data_processor\.experience_pipeline\.operators\.1\.args\.config_path: Data-Juicer recipe .*foreign\.yaml: Data-Juicer operators with no counterpart here: process\[1\] image_captioning_mapper, process\[3\] language_id_score_filter/,
    );
    // a recipe whose operators all have counterparts passes (config_path resolves against the config's folder)
    const fine = await checkProblems(
      'experience-fine.yaml',
      `${BASE}data_processor:
  experience_pipeline:
    operators: [{name: data_juicer, args: {config_path: recipes/scoring.yaml, num_process: 2}}]
`,
    );
    assert.deepEqual(fine, []);
  });

  it('config check refuses a task pipeline recipe (config_path or a data_juicer operator) with foreign operators', async () => {
    const viaKey = await checkProblems(
      'task-key.yaml',
      `${BASE}data_processor:\n  task_pipeline: {config_path: recipes/foreign.yaml, inputs: [${tasks}]}\n`,
    );
    assert.equal(viaKey.length, 1, viaKey.join('\n'));
    assert.match(
      viaKey[0] ?? '',
      /^data_processor\.task_pipeline\.config_path: .*image_captioning_mapper, process\[3\] language_id/,
    );
    const viaOperator = await checkProblems(
      'task-op.yaml',
      `${BASE}data_processor:\n  task_pipeline:\n    inputs: [${tasks}]\n    operators: [{name: data_juicer, args: {config_path: recipes/foreign.yaml}}]\n`,
    );
    assert.match(
      viaOperator.join('\n'),
      /^data_processor\.task_pipeline\.operators\.0\.args\.config_path: .*image_captioning_mapper/,
    );
  });
});

describe("an LLM operator's auxiliary_model", () => {
  it('config check refuses one explorer.auxiliary_models does not have, in a recipe and as an operator', async () => {
    const judged = recipe('judged.yaml', 'process:\n  - llm_quality_score_filter: {auxiliary_model: judge}\n');
    const problems = await checkProblems(
      'aux.yaml',
      `${BASE}explorer:
  auxiliary_models: [{name: grader, model_path: ${model}}]
data_processor:
  experience_pipeline:
    operators: [{name: data_juicer, args: {config_path: ${judged}}}]
  task_pipeline:
    inputs: [${tasks}]
    operators: [{name: llm_difficulty_score_filter, args: {auxiliary_model: judge}}]
`,
    );
    assert.deepEqual(problems, [
      `data_processor.experience_pipeline.operators.0.args.config_path: Data-Juicer recipe ${judged} process[0] llm_quality_score_filter names auxiliary_model 'judge', which explorer.auxiliary_models does not have (grader)`,
      "data_processor.task_pipeline.operators.0.args.auxiliary_model: data_processor.task_pipeline.operators[0] (llm_difficulty_score_filter) names auxiliary_model 'judge', which explorer.auxiliary_models does not have (grader)",
    ]);
  });
});

describe('a task pipeline whose inputs are missing', () => {
  it('config check names the input key and the file', async () => {
    const problems = await checkProblems(
      'inputs.yaml',
      `${BASE}data_processor:\n  task_pipeline:\n    inputs: [${tasks}, raw/missing.jsonl, recipes]\n    operators: [{name: document_deduplicator}]\n`,
    );
    assert.deepEqual(problems, [
      `data_processor.task_pipeline.inputs.1: input file ${join(dir, 'raw', 'missing.jsonl')} does not exist (the pipeline reads it first)`,
      `data_processor.task_pipeline.inputs.2: ${join(dir, 'recipes')} is not a file (an input is a .jsonl, .json or .parquet file)`,
    ]);
  });

  it('without inputs, a taskset path only the pipeline was meant to write is named with what to do', async () => {
    const problems = await checkProblems(
      'assumed-output.yaml',
      `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  explorer_input:
    taskset: {name: math, path: outputs/task_pipeline_output/}
data_processor:
  task_pipeline:
    operators: [{name: document_deduplicator}]
`,
    );
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(
      problems[0] ?? '',
      /^data_processor\.task_pipeline\.inputs: is empty, so the pipeline reads the taskset's own files, and those cannot be read: .*outputs\/task_pipeline_output.*name the raw files in data_processor\.task_pipeline\.inputs/,
    );
  });
});

describe('recipes run', () => {
  it('a task pipeline recipe (config_path) runs through the built-ins', async () => {
    const rows = ['a b c', 'A B C', 'hi', 'a longer prompt'].map((prompt) => ({ prompt, response: '0' }));
    const input = tasksetFile(join(dir, 'raw.jsonl'), rows);
    const file = recipe(
      'clean.yaml',
      'process:\n  - document_deduplicator: {lowercase: true}\n  - text_length_filter: {min_len: 4}\n',
    );
    const result = await runTaskPipeline({
      settings: {
        operators: [{ name: 'data_juicer', args: { config_path: file } }],
        inputs: [input],
        output: join(dir, 'clean.jsonl'),
        targetFields: [],
        numProcess: 1,
      },
      taskset: { name: 'math', path: input },
      jobDir: join(dir, 'job'),
      baseDir: dir,
      seed: 1,
      modelId: model,
      log: () => {},
    });
    assert.deepEqual(
      result.operators.map((r) => [r.name, r.rowsIn, r.rowsOut]),
      [
        ['document_deduplicator', 4, 3],
        ['text_length_filter', 3, 2],
      ],
    );
    const written = readFileSync(result.outputPath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).prompt);
    assert.deepEqual(written, ['a b c', 'a longer prompt']);
  });

  it('an experience pipeline recipe scores each experience into its info, which reward_shaping_mapper adds', async () => {
    // the judge: its answer depends on the response shown (labelled with field_names)
    const asked: string[] = [];
    const server = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { model: string; messages: { content: string }[] };
      const user = body.messages.at(-1)?.content ?? '';
      asked.push(`${body.model}|${user}`);
      const content = user.includes('Answer: good') ? '{"score": 0.75}' : 'not JSON';
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
    const previous = process.env.OPENAI_BASE_URL;
    process.env.OPENAI_BASE_URL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    try {
      const pipeline = await ExperiencePipeline.create(
        {
          operators: [
            { name: 'data_juicer', args: { config_path: SCORING } },
            {
              name: 'reward_shaping_mapper',
              args: { reward_shaping_configs: [{ stats_key: 'llm_quality_score', op_type: 'ADD', weight: 1.0 }] },
            },
          ],
          inputSavePath: null,
        },
        { baseDir: dir },
      );
      const experience = (eid: string, response: string): Experience => ({
        eid,
        tokens: [1, 2, 3],
        promptLength: 1,
        reward: 1,
        promptText: 'Q?',
        responseText: response,
        info: { taskId: 't' },
      });
      const { experiences, metrics } = await pipeline.process([experience('a', 'good'), experience('b', 'bad')], {
        step: 1,
        repeatTimes: 2,
      });
      // the judge saw the fields under Data-Juicer's field_names, and the model named by api_or_hf_model
      assert.ok(asked.includes('judge|Question: Q?\nAnswer: good'), asked.join('\n'));
      // 'b' got no score: the filter drops it (on_unscored drop); 'a' carries its score and the shaped reward
      assert.deepEqual(
        experiences.map((e) => [e.eid, e.info.llm_quality_score, e.reward]),
        [['a', 0.75, 1.75]],
      );
      assert.equal(metrics['experience_pipeline/data_juicer/llm_quality_score_filter/unscored'], 1);
      await pipeline.close();
    } finally {
      if (previous === undefined) delete process.env.OPENAI_BASE_URL;
      else process.env.OPENAI_BASE_URL = previous;
    }
  });
});
