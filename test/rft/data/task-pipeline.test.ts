// The task pipeline: per-operator counts, reuse of its output when inputs and operators are unchanged (no operator
// runs again), a new run when an argument or an input changes, and the human-annotation flow over real HTTP POSTs.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  AnnotationTimeoutError,
  runTaskPipeline,
  type TaskPipelineEvent,
  type TaskPipelineOptions,
} from '../../../src/rft/data/task-pipeline/index.js';

const dir = mkdtempSync(join(tmpdir(), 'task-pipeline-'));
const counter = join(dir, 'calls.txt');
// a plug-in operator by module path: appends a line to a file each time it runs (so a reuse shows as no new line)
writeFileSync(
  join(dir, 'count-op.mjs'),
  `import { appendFileSync } from 'node:fs';
export const countingOp = {
  defaults: { tag: '' },
  run(rows, options) {
    appendFileSync(${JSON.stringify(counter)}, options.tag + '\\n');
    return rows.map((row) => ({ ...row, tag: options.tag }));
  },
};
`,
);
const calls = (): number => (existsSync(counter) ? readFileSync(counter, 'utf8').split('\n').filter(Boolean).length : 0);

const rows = ['1+1=', '2+2=', '1+1=', 'x', '3+3='].map((prompt, i) => JSON.stringify({ prompt, response: String(i) }));
const input = join(dir, 'in.jsonl');
writeFileSync(input, `${rows.join('\n')}\n`);

function options(tag: string, jobDir = join(dir, 'job')): TaskPipelineOptions & { lines: string[] } {
  const lines: string[] = [];
  return {
    settings: {
      operators: [
        { name: 'document_deduplicator', args: {} },
        { name: 'text_length_filter', args: { min_len: 2 } },
        { name: './count-op.mjs#countingOp', args: { tag } },
      ],
      inputs: [input],
      output: null,
      targetFields: [],
      numProcess: 2,
    },
    taskset: { name: 'math', path: input },
    jobDir,
    baseDir: dir,
    seed: 1,
    modelId: 'none',
    log: (line) => lines.push(line),
    lines,
  };
}

test('the pipeline runs its operators in order, logs each one’s counts, and writes the output taskset in the job folder', async () => {
  const o = options('a');
  const result = await runTaskPipeline(o);
  assert.equal(result.reused, false);
  assert.equal(result.outputPath, join(dir, 'job', 'task_pipeline', 'math.jsonl'));
  // 5 rows → dedupe drops the second '1+1=' → 4 → length ≥ 2 drops 'x' → 3
  const out = readFileSync(result.outputPath, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(
    out.map((r) => [r.prompt, r.response, r.tag]),
    [
      ['1+1=', '0', 'a'],
      ['2+2=', '1', 'a'],
      ['3+3=', '4', 'a'],
    ],
  );
  assert.deepEqual(
    result.operators.map((r) => [r.name, r.rowsIn, r.rowsOut, r.counts]),
    [
      ['document_deduplicator', 5, 4, {}],
      ['text_length_filter', 4, 3, { too_short: 1 }],
      ['./count-op.mjs#countingOp', 3, 3, {}],
    ],
  );
  assert.ok(
    o.lines.some((l) => /\[2\/3\] text_length_filter: 4 → 3 rows \(1 dropped; too_short 1\)/.test(l)),
    o.lines.join('\n'),
  );
  assert.equal(calls(), 1);
});

test('a second run with the same inputs and operators reuses the output without running an operator; a changed argument or input runs again', async () => {
  const before = calls();
  const again = options('a');
  const reused = await runTaskPipeline(again);
  assert.equal(reused.reused, true);
  assert.equal(reused.rows, 3);
  assert.equal(calls(), before, 'no operator ran');
  assert.ok(again.lines.some((l) => /inputs and operators unchanged; reusing/.test(l)));

  const changedArgs = await runTaskPipeline(options('b'));
  assert.equal(changedArgs.reused, false);
  assert.equal(calls(), before + 1);

  // the same arguments as the last run: reused again
  assert.equal((await runTaskPipeline(options('b'))).reused, true);
  assert.equal(calls(), before + 1);

  // one input byte changed: runs again
  writeFileSync(input, `${rows.join('\n')}\n${JSON.stringify({ prompt: '4+4=', response: '8' })}\n`);
  const changedInput = await runTaskPipeline(options('b'));
  assert.equal(changedInput.reused, false);
  assert.equal(changedInput.rows, 4);
  assert.equal(calls(), before + 2);

  // an output edited by hand is not trusted: runs again
  writeFileSync(changedInput.outputPath, '{"prompt": "edited"}\n');
  assert.equal((await runTaskPipeline(options('b'))).reused, false);
});

test('a misspelt operator or argument fails before anything runs, naming the operator', async () => {
  const o = options('a', join(dir, 'job-typo'));
  o.settings.operators = [{ name: 'text_length_filtr', args: {} }];
  await assert.rejects(
    runTaskPipeline(o),
    /operators\[0\] \(text_length_filtr\): unknown task operator 'text_length_filtr'; did you mean 'text_length_filter'/,
  );
  o.settings.operators = [{ name: 'text_length_filter', args: { min_length: 2 } }];
  await assert.rejects(runTaskPipeline(o), /unknown argument 'min_length'; did you mean 'min_len'/);
  o.settings.operators = [{ name: 'text_length_filter', args: { min_len: 100 } }];
  await assert.rejects(runTaskPipeline(o), /the operators left no rows/);
});

test('human preference annotation: pairs are rated by HTTP POSTs, then the rows carry chosen/rejected and a DPO file is written', async () => {
  const pairsFile = join(dir, 'pairs.jsonl');
  writeFileSync(
    pairsFile,
    [
      { prompt: 'Say hi', answer1: 'hi', answer2: 'go away' },
      { prompt: 'Add 1+1', answer1: '3', answer2: '2' },
    ]
      .map((r) => JSON.stringify(r))
      .join('\n'),
  );
  const events: TaskPipelineEvent[] = [];
  const statuses: number[] = [];
  const post = async (url: string, body: unknown): Promise<Response> => {
    const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
    statuses.push(res.status);
    return res;
  };
  let rated: Promise<void> = Promise.resolve();
  const result = await runTaskPipeline({
    settings: {
      operators: [{ name: 'human_preference_annotation_mapper', args: { timeout: 120 } }],
      inputs: [pairsFile],
      output: null,
      targetFields: [],
      numProcess: 1,
    },
    taskset: { name: 'prefs', path: pairsFile },
    jobDir: join(dir, 'job-hitl'),
    baseDir: dir,
    seed: 1,
    modelId: 'none',
    log: () => {},
    onEvent: (event) => {
      events.push(event);
      if (event.type !== 'annotation_server') return;
      // what a person (or the Studio page) does once the server is up: read the queue, rate each pair
      rated = (async () => {
        const queue = (await (await fetch(`${event.url}/annotations`)).json()) as { pending: { id: string }[]; total: number };
        assert.deepEqual(
          queue.pending.map((p) => p.id),
          ['0', '1'],
        );
        assert.equal((await post(`${event.url}/annotations/0`, { preferred: 'answer3' })).status, 400);
        assert.equal((await post(`${event.url}/annotations/7`, { preferred: 'answer1' })).status, 404);
        const first = await post(`${event.url}/annotations/0`, { preferred: 'answer1' });
        assert.deepEqual(await first.json(), { id: '0', remaining: 1 });
        assert.equal((await post(`${event.url}/annotations/0`, { preferred: 'answer2' })).status, 409);
        await post(`${event.url}/annotations/1`, { preferred: 'answer2' });
      })();
    },
  });
  await rated;
  assert.deepEqual(statuses, [400, 404, 200, 409, 200]);
  assert.deepEqual(
    events.filter((e) => e.type === 'annotation_rated').map((e) => (e.type === 'annotation_rated' ? e.remaining : -1)),
    [1, 0],
  );
  const out = readFileSync(result.outputPath, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(
    out.map((r) => [r.chosen, r.rejected]),
    [
      ['hi', 'go away'],
      ['2', '3'],
    ],
  );
  const dpo = readFileSync(join(dir, 'job-hitl', 'task_pipeline', 'preference_dpo.jsonl'), 'utf8')
    .trim()
    .split('\n');
  assert.deepEqual(
    dpo.map((l) => JSON.parse(l)),
    [
      { prompt: 'Say hi', chosen: 'hi', rejected: 'go away' },
      { prompt: 'Add 1+1', chosen: '2', rejected: '3' },
    ],
  );
  assert.deepEqual(result.operators[0]?.counts, { preferred_answer1: 1, preferred_answer2: 1 });
});

test('human preference annotation: pairs left unrated past the timeout fail with AnnotationTimeoutError naming them', async () => {
  const pairsFile = join(dir, 'pairs-timeout.jsonl');
  writeFileSync(pairsFile, `${JSON.stringify({ prompt: 'p', answer1: 'a', answer2: 'b' })}\n`);
  await assert.rejects(
    runTaskPipeline({
      settings: {
        operators: [{ name: 'human_preference_annotation_mapper', args: { timeout: 0.2 } }],
        inputs: [pairsFile],
        output: null,
        targetFields: [],
        numProcess: 1,
      },
      taskset: { name: 'prefs', path: pairsFile },
      jobDir: join(dir, 'job-timeout'),
      baseDir: dir,
      seed: 1,
      modelId: 'none',
      log: () => {},
    }),
    (error: Error) => {
      const cause = error.cause as AnnotationTimeoutError;
      assert.ok(cause instanceof AnnotationTimeoutError);
      assert.deepEqual(cause.pending, ['0']);
      assert.match(
        error.message,
        /1 preference pair\(s\) not rated within 0.2 s \(ids 0\); rate them with POST http:\/\/127\.0\.0\.1:\d+\/annotations\/<id>/,
      );
      return true;
    },
  );
});
