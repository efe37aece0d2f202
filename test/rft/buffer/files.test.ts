// JSONL files, tasksets with format keys, and the `trinity buffer view` command.
import assert from 'node:assert/strict';
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { bufferCommand } from '../../../src/cli/buffer-command.js';
import {
  formatExperiences,
  JsonlExperienceWriter,
  JsonlWriter,
  loadTaskset,
  readExperiencesJsonl,
  readJsonl,
  SqliteBuffer,
} from '../../../src/rft/buffer/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { writeCharTokenizer } from '../../../src/tokenizer/index.js';
import { makeExperience, tempDir } from './helpers.js';

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

describe('JSONL', () => {
  test('appends survive reopening and a torn last line; reads stream every experience back', async () => {
    const file = join(tempDir('jsonl'), 'dump.jsonl');
    const first = new JsonlExperienceWriter(file);
    await first.write([makeExperience('a'), makeExperience('b')]);
    await first.close();
    const second = new JsonlExperienceWriter(file);
    await second.write([makeExperience('c')]);
    await second.close();
    assert.deepEqual(
      (await collect(readExperiencesJsonl(file))).map((e) => e.eid),
      ['a', 'b', 'c'],
    );
    appendFileSync(file, '{"eid": "torn", "tok');
    const third = new JsonlWriter(file);
    await third.write([makeExperience('d')]);
    await third.close();
    const lines = readFileSync(file, 'utf8').split('\n');
    assert.equal(lines[3], '{"eid": "torn", "tok', 'the torn line stays alone');
    await assert.rejects(collect(readJsonl(file)), /dump\.jsonl:4: invalid JSON/);
  });

  test('a bad experience line names file:line and the field', async () => {
    const file = join(tempDir('jsonl'), 'bad.jsonl');
    const bad: Experience = { ...makeExperience('x'), logprobs: [-1] };
    writeFileSync(file, `${JSON.stringify(makeExperience('ok'))}\n\n${JSON.stringify(bad)}\n`);
    await assert.rejects(
      collect(readExperiencesJsonl(file)),
      /bad\.jsonl:3: logprobs must have one entry per response token \(2\), got 1/,
    );
    writeFileSync(file, '[1, 2]\n');
    await assert.rejects(collect(readExperiencesJsonl(file)), /bad\.jsonl:1: an experience must be a JSON object, got an array/);
    await assert.rejects(
      new JsonlExperienceWriter(file).write([{ ...makeExperience('y'), tokens: [-1] }]),
      /experience 'y': tokens must/,
    );
  });
});

describe('tasksets', () => {
  test('format keys map columns to task fields; defaults are prompt/response', async () => {
    const dir = tempDir('taskset');
    const math = join(dir, 'math.jsonl');
    writeFileSync(
      math,
      [
        { question: '1+1=', answer: 2, level: 1, wf: 'math_workflow' },
        { id: 'q-b', question: '2+3=', answer: '5', level: 3, system: 'Be terse.' },
      ]
        .map((r) => JSON.stringify(r))
        .join('\n'),
    );
    const taskset = await loadTaskset({
      name: 'math',
      path: math,
      format: {
        promptKey: 'question',
        responseKey: 'answer',
        systemPromptKey: 'system',
        systemPrompt: 'default system',
        replyPrefix: '<think>',
        workflowKey: 'wf',
        featureKeys: ['level'],
      },
      defaultWorkflowType: 'simple_workflow',
      defaultRewardFnType: 'math_reward',
      workflowArgs: { k: 1 },
    });
    const [a, b] = taskset.tasks;
    assert.deepEqual(
      {
        id: a?.id,
        prompt: a?.prompt,
        response: a?.response,
        system: a?.systemPrompt,
        workflow: a?.workflow,
        features: a?.features,
      },
      {
        id: 'math:0',
        prompt: '1+1=',
        response: '2',
        system: 'default system',
        workflow: 'math_workflow',
        features: { level: 1 },
      },
    );
    assert.deepEqual(
      {
        id: b?.id,
        system: b?.systemPrompt,
        workflow: b?.workflow,
        reward: b?.rewardFn,
        prefix: b?.replyPrefix,
        args: b?.workflowArgs,
      },
      { id: 'q-b', system: 'Be terse.', workflow: 'simple_workflow', reward: 'math_reward', prefix: '<think>', args: { k: 1 } },
    );

    const chat = join(dir, 'chat.json');
    writeFileSync(chat, JSON.stringify([{ prompt: 'hi', response: 'hello' }, { msgs: [{ role: 'user', content: 'x' }] }]));
    await assert.rejects(loadTaskset({ name: 'chat', path: chat }), /chat\.json\[1\]: missing key 'prompt'/);
    await assert.rejects(
      loadTaskset({ name: 'chat', path: chat, format: { messagesKey: 'msgs' } }),
      /chat\.json\[0\]: missing key 'msgs'/,
    );
    writeFileSync(chat, JSON.stringify([{ msgs: [{ role: 'user', content: 'x' }], response: 'y' }]));
    const conversation = await loadTaskset({ name: 'chat', path: chat, format: { messagesKey: 'msgs' } });
    assert.deepEqual(conversation.tasks[0]?.messages, [{ role: 'user', content: 'x' }]);
    assert.equal(conversation.tasks[0]?.prompt, undefined);

    // BOTS' rows: the prompt column holds the conversation, the answer is nested under reward_model
    writeFileSync(chat, JSON.stringify([{ prompt: [{ role: 'user', content: '1+2?' }], reward_model: { ground_truth: '3' } }]));
    const bots = await loadTaskset({ name: 'bots', path: chat, format: { responseKey: 'reward_model.ground_truth' } });
    assert.deepEqual(bots.tasks[0]?.messages, [{ role: 'user', content: '1+2?' }]);
    assert.equal(bots.tasks[0]?.prompt, undefined);
    assert.equal(bots.tasks[0]?.response, '3');
  });

  test('bad rows name file:line and the key', async () => {
    const file = join(tempDir('taskset'), 't.jsonl');
    writeFileSync(file, '{"prompt": "a"}\n{"question": "b"}\n');
    await assert.rejects(loadTaskset({ name: 't', path: file }), /t\.jsonl:2: missing key 'prompt'/);
    writeFileSync(file, '{"prompt": ["a"]}\n');
    await assert.rejects(loadTaskset({ name: 't', path: file }), /t\.jsonl:1: key 'prompt' must be a string, got an array/);
    writeFileSync(file, '{"prompt": "a"}\n{"prompt": "b", "level": "hard"}\n');
    await assert.rejects(
      loadTaskset({ name: 't', path: file, format: { featureKeys: ['level'] } }),
      /t\.jsonl:1: feature key 'level' must be a finite number, got nothing/,
    );
    writeFileSync(file, '{"m": [{"role": "user"}]}\n');
    await assert.rejects(
      loadTaskset({ name: 't', path: file, format: { messagesKey: 'm' } }),
      /t\.jsonl:1: key 'm'\[0\]\.content must be a string/,
    );
    writeFileSync(file, '{"id": "x", "prompt": "a"}\n{"id": "x", "prompt": "b"}\n');
    await assert.rejects(loadTaskset({ name: 't', path: file }), /t\.jsonl:2: duplicate task id 'x' \(also at .*t\.jsonl:1\)/);
    await assert.rejects(loadTaskset({ name: 't', path: join(file, '..', 'missing.jsonl') }), /cannot read taskset 't'/);
  });
});

describe('viewer', () => {
  const experiences = [
    makeExperience('e1', { advantages: [0.5, -0.25], info: { taskId: 'math:0' } }),
    makeExperience('e2', { reward: 0.25, info: {} }),
  ];

  test('formatExperiences: a row per experience with ids, task, reward, advantage mean, length, text and tokens', () => {
    const text = formatExperiences(experiences, {
      tokenizer: { decode: (ids) => ids.map((i) => String.fromCharCode(96 + i)).join('') },
    });
    const lines = text.trimEnd().split('\n');
    assert.match(lines[0] ?? '', /^eid\s+task\s+reward\s+adv_mean\s+resp_len\s+response\s+tokens \(prompt \| response\)$/);
    assert.match(lines[2] ?? '', /^e1\s+math:0\s+1\s+0\.1250\s+2\s+hi\s+5 6 7 \| 8 9$/);
    assert.match(lines[3] ?? '', /^e2\s+-\s+0\.2500\s+-\s+2\s+hi\s+5 6 7 \| 8 9$/);
    const limited = formatExperiences(experiences, { limit: 1 });
    assert.match(limited, /… 1 more/);
    assert.doesNotMatch(limited, /response {2}/);
  });

  test('trinity buffer view prints a SQLite buffer and a JSONL dump, decoding with --tokenizer', async () => {
    const dir = tempDir('view');
    const db = join(dir, 'buf.db');
    const buffer = new SqliteBuffer({ path: db });
    await buffer.write(experiences);
    await buffer.close();
    writeCharTokenizer(join(dir, 'tok'));
    const jsonl = join(dir, 'dump.jsonl');
    writeFileSync(jsonl, experiences.map((e) => JSON.stringify(e)).join('\n'));

    const captured: string[] = [];
    const sink = { write: (text: string) => captured.push(text) };
    assert.equal(await bufferCommand(['view', db, '--limit', '1', '--tokenizer', join(dir, 'tok')], sink), 0);
    assert.equal(await bufferCommand(['view', jsonl, '--offset', '1'], sink), 0);
    assert.equal(await bufferCommand(['view', '--help'], sink), 0);
    const out = captured.join('');
    assert.match(out, /buf\.db: 2 experiences; showing 1-1\n/);
    assert.match(out, /\ne1\s+math:0\s+1\s+0\.1250\s+2\s+\S+\s+5 6 7 \| 8 9\n/);
    assert.match(out, /dump\.jsonl: 2 experiences; showing 2-2\n/);
    assert.match(out, /\ne2\s+-\s+0\.2500/);
    assert.match(out, /trinity buffer view PATH \[options\]/);
    await assert.rejects(bufferCommand(['view', join(dir, 'x.txt')]), /neither a \.db\/\.sqlite buffer nor a \.jsonl dump/);
    await assert.rejects(bufferCommand(['view', db, '--limit', '0']), /--limit must be an integer >= 1/);
  });
});
