// Datasets as they sit on disk: parquet files written by Python's `datasets` and pyarrow, split and subset_name
// resolved as `datasets.load_dataset` resolves them, the Hugging Face hub cache, and SFT/DPO rows in their plain and
// messages forms. The reference rows and splits come from test/fixtures/datasets/make-fixtures.py (expected.json):
// each file's rows as pyarrow reads them, each split as load_dataset returns it.
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as zlib from 'node:zlib';
import { loadDpoDataset, loadSftDataset } from '../../../src/rft/buffer/dataset.js';
import { readDatasetRows, readFileRows } from '../../../src/rft/buffer/rows.js';
import { datasetFiles } from '../../../src/rft/buffer/split.js';
import { loadTaskset } from '../../../src/rft/buffer/taskset.js';
import type { ChatTurn } from '../../../src/rft/experience.js';
import { Tokenizer, writeCharTokenizer } from '../../../src/tokenizer/index.js';

const FIXTURES = join(import.meta.dirname, '..', '..', 'fixtures', 'datasets');
const fixture = (...parts: string[]) => join(FIXTURES, ...parts);
const expected = JSON.parse(readFileSync(fixture('expected.json'), 'utf8')) as {
  files: Record<string, Record<string, unknown>[]>;
  splits: { path: string; subset: string | null; split: string; rows: Record<string, unknown>[] }[];
};
const SNAPSHOT = 'hub/datasets--acme--tiny-math/snapshots/3f1c2a9d8e7b6a5c4d3e2f1a0b9c8d7e6f5a4b3c';
const hasZstd = 'zstdDecompressSync' in zlib;

async function values(rows: AsyncIterable<{ value: unknown }>): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const { value } of rows) out.push(value);
  return out;
}

const tokDir = mkdtempSync(join(tmpdir(), 'dataset-files-tok-'));
writeCharTokenizer(tokDir);
const tokenizer = Tokenizer.load(tokDir);
const eos = tokenizer.eosTokenIds[0] as number;

describe('parquet files written by datasets and pyarrow', () => {
  for (const [path, rows] of Object.entries(expected.files)) {
    if (path === 'big-int.parquet' || (path === 'codecs/zstd.parquet' && !hasZstd)) continue;
    test(`${path}: the rows pyarrow reads`, async () => {
      assert.deepEqual(await values(readFileRows(fixture(path))), rows);
    });
  }

  test('zstd without node:zlib zstd: the columns and the codec are named before a row is read', async (t) => {
    if (hasZstd) return t.skip('this Node decompresses zstd (the rows are compared above)');
    await assert.rejects(
      values(readFileRows(fixture('codecs/zstd.parquet'))),
      /zstd\.parquet: columns 'id', 'question', 'answer', 'difficulty', 'level', 'tags\.list\.element' are compressed with ZSTD \(zstd needs Node 22\.15 or newer.*this reader decompresses UNCOMPRESSED, SNAPPY, GZIP, BROTLI, LZ4_RAW/,
    );
  });

  test('an INT64 beyond 2^53 - 1: the file, row and column are named', async () => {
    await assert.rejects(
      values(readFileRows(fixture('big-int.parquet'))),
      /big-int\.parquet: row 2: column 'n': the integer 9007199254740993 is beyond ±\(2\^53 − 1\)/,
    );
  });

  test('a cut-off file and a file that is no parquet say so', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'dataset-files-bad-'));
    const bytes = readFileSync(fixture('plain.parquet'));
    writeFileSync(join(dir, 'cut.parquet'), bytes.subarray(0, bytes.length - 100));
    writeFileSync(join(dir, 'text.parquet'), 'prompt,response\n1+1,2\n');
    await assert.rejects(
      values(readFileRows(join(dir, 'cut.parquet'))),
      /cut\.parquet: cannot read the parquet footer \(a damaged or cut-off file\?\)/,
    );
    await assert.rejects(values(readFileRows(join(dir, 'text.parquet'))), /text\.parquet: not a parquet file \(22 bytes/);
  });
});

describe('split and subset_name resolved as datasets.load_dataset resolves them', () => {
  for (const { path, subset, split, rows } of expected.splits) {
    test(`${path} subset ${subset ?? '(default)'} split ${split}: load_dataset's rows`, async () => {
      assert.deepEqual(await values(readDatasetRows(fixture(path), { split, subset })), rows);
    });
  }

  test('shards are read in order; a split asked by a keyword alias reads its canonical split', () => {
    assert.deepEqual(datasetFiles(fixture('math'), 'train').files, [
      fixture('math/data/train-00000-of-00002.parquet'),
      fixture('math/data/train-00001-of-00002.parquet'),
    ]);
    // datasets' keywords: eval / evaluation / testing are the test split
    assert.deepEqual(datasetFiles(fixture('subset-dirs'), 'eval', 'main').files, [
      fixture('subset-dirs/main/test-00000-of-00001.parquet'),
    ]);
  });

  test('a missing split lists the splits found; a missing subset lists the subsets', () => {
    assert.throws(
      () => datasetFiles(fixture('math'), 'validation'),
      /math: no split 'validation': the dataset has train \(2 files\), test \(1 file\)/,
    );
    assert.throws(
      () => datasetFiles(fixture('subsets'), 'validation', 'main'),
      /subsets \(subset 'main'\): no split 'validation': the dataset has train \(1 file\), test \(1 file\)/,
    );
    assert.throws(
      () => datasetFiles(fixture('subsets'), 'train', 'nope'),
      /README\.md: no subset 'nope' \(subset_name\): the dataset has main, socratic/,
    );
    assert.throws(
      () => datasetFiles(fixture('subsets'), 'train'),
      /README\.md: the dataset has subsets main, socratic: choose one with subset_name/,
    );
    assert.throws(
      () => datasetFiles(fixture('subset-dirs'), 'train', 'nope'),
      /no subset 'nope' \(subset_name\): the folder has no README\.md 'configs:' metadata and no subfolder 'nope' \(subfolders: main, socratic\)/,
    );
    assert.throws(() => datasetFiles(fixture('plain.parquet'), 'train', 'main'), /a single file has no subsets/);
  });

  test('a split mixing JSON and parquet, and csv files, are refused with what to do', () => {
    const dir = mkdtempSync(join(tmpdir(), 'dataset-files-mixed-'));
    copyFileSync(fixture('plain.parquet'), join(dir, 'train.parquet'));
    writeFileSync(join(dir, 'train.jsonl'), '{"prompt": "a"}\n');
    writeFileSync(join(dir, 'test.csv'), 'prompt\na\n');
    assert.throws(
      () => datasetFiles(dir, 'train'),
      /split 'train' mixes JSON and parquet files \(train\.jsonl, train\.parquet\)/,
    );
    assert.throws(
      () => datasetFiles(dir, 'test'),
      /split 'test' has csv files \(test\.csv\), which are not read here: convert the rows to JSONL or parquet/,
    );
  });
});

describe('the Hugging Face hub cache, offline', () => {
  const saved = { HF_HUB_CACHE: process.env.HF_HUB_CACHE };
  before(() => {
    process.env.HF_HUB_CACHE = fixture('hub');
  });
  after(() => {
    if (saved.HF_HUB_CACHE === undefined) delete process.env.HF_HUB_CACHE;
    else process.env.HF_HUB_CACHE = saved.HF_HUB_CACHE;
  });
  const reference = (subset: string | null) =>
    expected.splits.find((s) => s.path === SNAPSHOT && s.subset === subset && s.split === 'train')?.rows;

  test('a hub id reads the snapshot refs/main names, through its symlinks into blobs/', async () => {
    assert.deepEqual(datasetFiles('acme/tiny-math').root, fixture(SNAPSHOT));
    assert.deepEqual(await values(readDatasetRows('acme/tiny-math')), reference(null));
    assert.deepEqual(await values(readDatasetRows('acme/tiny-math', { subset: 'hard' })), reference('hard'));
  });

  test('the repo folder itself (datasets--org--name) reads its snapshot', async () => {
    assert.deepEqual(await values(readDatasetRows(fixture('hub/datasets--acme--tiny-math'))), reference(null));
  });

  test('a hub id that is not cached names the cache folders looked in; nothing is downloaded', () => {
    assert.throws(
      () => datasetFiles('acme/not-cached'),
      new RegExp(
        `acme/not-cached: cannot read: .*no such file.*as a Hugging Face hub id: no cache entry datasets--acme--not-cached in ${fixture('hub').replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}`,
      ),
    );
  });
});

describe('tasksets from parquet', () => {
  const format = { promptKey: 'question', responseKey: 'answer', systemPromptKey: 'system' };

  test('a plain taskset in one file of several row groups: tasks with ids, answers and features', async () => {
    const { tasks } = await loadTaskset({
      name: 'math',
      path: fixture('plain.parquet'),
      format: { ...format, featureKeys: ['difficulty', 'level'] },
    });
    const rows = expected.files['plain.parquet'] as {
      id: string;
      question: string;
      answer: string;
      difficulty: number;
      level: number;
    }[];
    assert.deepEqual(
      tasks.map((t) => [t.id, t.prompt, t.response, t.features]),
      rows.map((r) => [r.id, r.question, r.answer, { difficulty: r.difficulty, level: r.level }]),
    );
  });

  test('nulls in optional columns are absent values', async () => {
    const { tasks } = await loadTaskset({ name: 'n', path: fixture('nulls.parquet'), format });
    assert.deepEqual(
      tasks.map((t) => [t.id, t.response, t.systemPrompt]),
      [
        ['n-0', '5', 'Be brief.'],
        ['n-1', undefined, undefined],
        ['n-2', '3', undefined],
      ],
    );
    assert.equal(tasks[1]?.raw.tags, null);
    assert.deepEqual(tasks[2]?.raw.meta, { source: null, score: null });
  });

  test('a subset and split of a folder; a bad row names the file, row number and key', async () => {
    const { tasks } = await loadTaskset({ name: 'gsm', path: fixture('subsets'), subset: 'socratic', format });
    assert.deepEqual(
      tasks.map((t) => t.response),
      ['Step by step: 42', 'Step by step: 42', 'Step by step: 3'],
    );
    await assert.rejects(
      loadTaskset({ name: 't', path: fixture('math'), split: 'test' }),
      /math\/data\/test-00000-of-00001\.parquet row 1: missing key 'prompt'/,
    );
    await assert.rejects(
      loadTaskset({ name: 't', path: fixture('math'), split: 'dev' }),
      /taskset 't': no split 'dev': the dataset has train \(2 files\), test \(1 file\)/,
    );
  });
});

describe('SFT and DPO datasets from parquet', () => {
  const chat = (turns: ChatTurn[]) => tokenizer.encodeChat(turns as never, { addGenerationPrompt: true });
  const answer = (text: string) => [...tokenizer.encode(text), eos];

  test('SFT messages form: the null fields datasets fills in are dropped; the last assistant turn is the response', async () => {
    const rows = await loadSftDataset(fixture('sft-messages'), tokenizer, { messagesKey: 'messages' });
    const first: ChatTurn[] = [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: 'What is 2 + 3?', name: 'ana' } as ChatTurn,
    ];
    assert.deepEqual(rows[0]?.tokens, [...chat(first), ...answer('5')]);
    assert.equal(rows[0]?.promptLength, chat(first).length);
    const second: ChatTurn[] = [
      { role: 'user', content: 'What is 7 * 6?' },
      { role: 'assistant', content: '42' },
      { role: 'user', content: 'And 6 * 7?' },
    ];
    assert.deepEqual(rows[1]?.tokens, [...chat(second), ...answer('Also 42.')]);
  });

  test('SFT messages form, concatenated: the conversation without its null fields', async () => {
    const [row] = await loadSftDataset(fixture('sft-messages'), tokenizer, {
      messagesKey: 'messages',
      enableConcatenatedMultiTurn: true,
    });
    assert.deepEqual(row?.messages, [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: 'What is 2 + 3?', name: 'ana' },
      { role: 'assistant', content: '5' },
    ]);
  });

  test('SFT plain form: a null system column means no system turn', async () => {
    const rows = await loadSftDataset(fixture('sft-plain'), tokenizer, { systemPromptKey: 'system' });
    assert.deepEqual(rows[0]?.tokens, [
      ...chat([
        { role: 'system', content: 'Answer briefly.' },
        { role: 'user', content: 'What is 2 + 3?' },
      ]),
      ...answer('5'),
    ]);
    assert.deepEqual(rows[1]?.tokens, [...chat([{ role: 'user', content: 'What is 7 * 6?' }]), ...answer('42')]);
  });

  // the same preference pairs in three forms: row 0 has a system turn in the messages forms
  const pairs = [
    {
      prompt: [
        { role: 'system', content: 'Answer briefly.' },
        { role: 'user', content: 'What is 2 + 3?' },
      ],
      chosen: '5',
      rejected: '6',
    },
    { prompt: [{ role: 'user', content: 'What is 7 * 6?' }], chosen: '42', rejected: '48' },
  ] as const;
  const expectedPairs = (withSystem: boolean) =>
    pairs.map((p, i) => {
      const prompt = chat((i === 0 && !withSystem ? p.prompt.slice(1) : p.prompt) as unknown as ChatTurn[]);
      return { tokens: prompt, promptLength: prompt.length, chosen: answer(p.chosen), rejected: answer(p.rejected) };
    });
  const pick = (rows: Awaited<ReturnType<typeof loadDpoDataset>>) =>
    rows.map(({ tokens, promptLength, chosen, rejected }) => ({ tokens, promptLength, chosen, rejected }));

  test('DPO plain form {prompt, chosen, rejected}', async () => {
    assert.deepEqual(pick(await loadDpoDataset(fixture('dpo-plain'), tokenizer)), expectedPairs(false));
  });

  test("DPO messages form (Trinity's): prompt turns under messages_key, chosen/rejected assistant turns", async () => {
    assert.deepEqual(
      pick(await loadDpoDataset(fixture('dpo-messages'), tokenizer, { messagesKey: 'messages' })),
      expectedPairs(true),
    );
  });

  test('DPO whole conversations: chosen_messages / rejected_messages, the prompt is the turns both share', async () => {
    assert.deepEqual(pick(await loadDpoDataset(fixture('dpo-conversations'), tokenizer)), expectedPairs(true));
    // the same columns named explicitly
    assert.deepEqual(
      pick(
        await loadDpoDataset(fixture('dpo-conversations'), tokenizer, {
          chosenKey: 'chosen_messages',
          rejectedKey: 'rejected_messages',
        }),
      ),
      expectedPairs(true),
    );
  });

  test('DPO bad rows name the file, row number and field', async () => {
    await assert.rejects(
      loadDpoDataset(fixture('dpo-plain'), tokenizer, { chosenKey: 'better' }),
      /dpo-plain\/train\.parquet row 1: missing 'better' \(the chosen answer\)/,
    );
    await assert.rejects(
      loadDpoDataset(fixture('dpo-messages'), tokenizer),
      /dpo-messages\/train\.parquet row 1: missing 'prompt' \(the prompt\)/,
    );
    const dir = mkdtempSync(join(tmpdir(), 'dataset-files-dpo-'));
    mkdirSync(join(dir, 'data'));
    const turn = (role: string, content: string) => ({ role, content });
    writeFileSync(
      join(dir, 'data', 'train.jsonl'),
      `${[
        { chosen: [turn('user', 'q'), turn('assistant', 'a')], rejected: [turn('user', 'q'), turn('assistant', 'b')] },
        { chosen: [turn('user', 'q'), turn('assistant', 'a')], rejected: [turn('user', 'other')] },
      ]
        .map((r) => JSON.stringify(r))
        .join('\n')}\n`,
    );
    await assert.rejects(
      loadDpoDataset(dir, tokenizer),
      /data\/train\.jsonl:2: 'chosen' must continue the shared prompt \(0 turns\) with an assistant turn, got a 'user' turn/,
    );
  });
});

test('a messages taskset from parquet: the turns without the null fields datasets fills in', async () => {
  const { tasks } = await loadTaskset({ name: 'chat', path: fixture('sft-messages'), format: { messagesKey: 'messages' } });
  assert.deepEqual(tasks[0]?.messages, [
    { role: 'system', content: 'Answer briefly.' },
    { role: 'user', content: 'What is 2 + 3?', name: 'ana' },
    { role: 'assistant', content: '5' },
  ]);
});
