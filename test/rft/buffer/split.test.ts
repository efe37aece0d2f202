// Dataset splits (Trinity's `split`: a folder of split files read as Hugging Face's load_dataset reads a local folder)
// and the tools of a row (Trinity's `tools_key`) reaching the chat template, for tasksets and SFT datasets.
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { GenerateRequest } from '../../../src/engine/index.js';
import { loadSftDataset, loadTaskset } from '../../../src/rft/buffer/index.js';
import { splitFiles } from '../../../src/rft/buffer/split.js';
import type { Task } from '../../../src/rft/task.js';
import { singleTurnWorkflow } from '../../../src/rft/workflow/single-turn.js';
import type { ModelHandle } from '../../../src/rft/workflow/types.js';
import { Tokenizer, type ToolDefinition, writeCharTokenizer } from '../../../src/tokenizer/index.js';

const jsonl = (rows: object[]) => `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`;
const folder = (files: Record<string, object[] | string>): string => {
  const dir = mkdtempSync(join(tmpdir(), 'trinity-split-'));
  for (const [name, rows] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), typeof rows === 'string' ? rows : jsonl(rows));
  }
  return dir;
};

describe('split', () => {
  test('a folder with train/test files: each split reads its own', async () => {
    const dir = folder({ 'train.jsonl': [{ prompt: 'tr' }], 'test.jsonl': [{ prompt: 'te1' }, { prompt: 'te2' }] });
    const train = await loadTaskset({ name: 't', path: dir });
    assert.deepEqual(
      train.tasks.map((t) => t.prompt),
      ['tr'],
    );
    const test_ = await loadTaskset({ name: 't', path: dir, split: 'test' });
    assert.deepEqual(
      test_.tasks.map((t) => t.prompt),
      ['te1', 'te2'],
    );
  });

  test('Hugging Face Hub layout data/<split>-00000-of-0000N.jsonl: the shards in order, ids across them', async () => {
    const dir = folder({
      'data/train-00001-of-00002.jsonl': [{ prompt: 'c' }],
      'data/train-00000-of-00002.jsonl': [{ prompt: 'a' }, { prompt: 'b' }],
      'data/test-00000-of-00001.jsonl': [{ prompt: 'x' }],
      'README.md': 'a dataset card',
    });
    const { tasks } = await loadTaskset({ name: 'hub', path: dir });
    assert.deepEqual(
      tasks.map((t) => [t.id, t.prompt]),
      [
        ['hub:0', 'a'],
        ['hub:1', 'b'],
        ['hub:2', 'c'],
      ],
    );
    assert.deepEqual(splitFiles(dir, 'test'), [join(dir, 'data/test-00000-of-00001.jsonl')]);
  });

  test('a folder of unnamed files is the train split; a file is the train split only', async () => {
    const dir = folder({ 'part-a.jsonl': [{ prompt: 'a' }], 'part-b.json': '[{"prompt": "b"}]' });
    assert.deepEqual(
      (await loadTaskset({ name: 't', path: dir })).tasks.map((t) => t.prompt),
      ['a', 'b'],
    );
    const file = join(dir, 'part-a.jsonl');
    assert.deepEqual(splitFiles(file, 'train'), [file]);
    assert.throws(() => splitFiles(file, 'test'), /a single file is the 'train' split, not 'test'/);
  });

  test('a missing split lists the splits found; a file that is no parquet says so', async () => {
    const dir = folder({ 'train.jsonl': [{ prompt: 'a' }] });
    await assert.rejects(
      loadTaskset({ name: 't', path: dir, split: 'validation' }),
      /taskset 't': no split 'validation': the dataset has train \(1 file\)/,
    );
    const parquet = folder({ 'data/train-00000-of-00001.parquet': 'PAR1' });
    await assert.rejects(
      loadTaskset({ name: 't', path: parquet }),
      /train-00000-of-00001\.parquet: taskset 't': not a parquet file \(4 bytes/,
    );
  });

  test('an SFT dataset folder reads the split of its format', async () => {
    const tokDir = mkdtempSync(join(tmpdir(), 'trinity-split-tok-'));
    writeCharTokenizer(tokDir);
    const tokenizer = Tokenizer.load(tokDir);
    const dir = folder({
      'train.jsonl': [{ prompt: 'p', response: 'train' }],
      'test.jsonl': [{ prompt: 'p', response: 'test' }],
    });
    const [row] = await loadSftDataset(dir, tokenizer, { split: 'test' });
    assert.equal(row?.responseText, 'test');
  });
});

describe('tools_key', () => {
  const tokDir = mkdtempSync(join(tmpdir(), 'trinity-tools-tok-'));
  writeCharTokenizer(tokDir);
  const tokenizer = Tokenizer.load(tokDir);
  const weather: ToolDefinition = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } };

  test("a row's tools become task.tools (a list, JSON text, or bare functions); a bad entry names the row", async () => {
    const dir = folder({
      'train.jsonl': [
        { prompt: 'a', functions: [weather] },
        { prompt: 'b', functions: JSON.stringify([{ name: 'get_time' }]) },
        { prompt: 'c' },
      ],
    });
    const { tasks } = await loadTaskset({ name: 't', path: dir, format: { toolsKey: 'functions' } });
    assert.deepEqual(tasks[0]?.tools, [weather]);
    assert.deepEqual(tasks[1]?.tools, [{ type: 'function', function: { name: 'get_time' } }]);
    assert.equal(tasks[2]?.tools, undefined);
    const bad = folder({ 'train.jsonl': [{ prompt: 'a', tools: [{ description: 'no name' }] }] });
    await assert.rejects(
      loadTaskset({ name: 't', path: bad }),
      /train\.jsonl:1: key 'tools'\[0\] must be \{type: 'function', function: \{name, \.\.\.\}\}/,
    );
  });

  test("single-turn workflows render the task's tools with the chat template", async () => {
    let request: GenerateRequest | undefined;
    const model = {
      tokenizer,
      generate: async (r: GenerateRequest) => {
        request = r;
        return { completions: [{ tokenIds: [], text: 'x', logprobs: [], finishReason: 'stop' }] };
      },
      toExperience: () => ({ eid: 'e', tokens: [], promptLength: 0 }),
    } as unknown as ModelHandle;
    const task: Task = {
      id: 't:0',
      taskset: 't',
      index: 0,
      raw: {},
      prompt: 'weather?',
      tools: [weather],
      rewardFn: 'accuracy_reward',
    };
    const rewards = { resolve: async () => () => 0 };
    const workflow = singleTurnWorkflow('simple_workflow', { rewards: rewards as never });
    await workflow.run({
      task,
      model,
      repeatTimes: 1,
      runIdBase: 0,
      seed: 0,
      signal: new AbortController().signal,
      isEval: false,
      auxiliaryModels: NO_AUXILIARY_MODELS,
    });
    const expected = tokenizer.encodeChat([{ role: 'user', content: 'weather?' }], {
      addGenerationPrompt: true,
      tools: [weather],
    });
    assert.deepEqual(request?.promptIds, expected);
    assert.ok(tokenizer.decode(expected).includes('get_weather'), 'the template renders the tool');
  });

  test("SFT rows: the prompt ids are rendered with the row's tools", async () => {
    const dir = folder({ 'train.jsonl': [{ prompt: 'p', response: 'r', tools: [weather] }] });
    const [row] = await loadSftDataset(dir, tokenizer, {});
    const prompt = tokenizer.encodeChat([{ role: 'user', content: 'p' }], { addGenerationPrompt: true, tools: [weather] });
    assert.deepEqual(row?.tokens.slice(0, row.promptLength), prompt);
  });
});
