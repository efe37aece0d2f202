// Paths a user gives that are not regular files (src/util/regular-file.ts): a FIFO where a model's config.json,
// tokenizer.json, model.safetensors or a dataset file should be is refused at once, naming the file and what it is.
// Before, the open blocked for ever waiting for a writer (issue 49: `trinity run` then ignored SIGTERM), a FIFO given
// as a dataset path read as a folder with 'no data files', and a folder as config.json failed with an EISDIR that
// named no file. Each FIFO here has no writer, so a blocking open would hang this test file (run it under a timeout).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { bufferCommand } from '../../src/cli/buffer-command.js';
import { initModel, loadModelConfig } from '../../src/model/index.js';
import { readDatasetRows } from '../../src/rft/buffer/rows.js';
import { checkConfigFile } from '../../src/rft/run/config/check.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { Tokenizer, writeCharTokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';
import { readRegularFile } from '../../src/util/index.js';

const FIFO = /is a FIFO \(named pipe\), not a regular file/;

function mkfifo(path: string): string {
  execFileSync('mkfifo', [path]);
  return path;
}

const tmp = () => mkdtempSync(join(tmpdir(), 'special-files-'));

async function drain(rows: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of rows);
}

test('a FIFO as a model folder file: config.json, tokenizer.json, model.safetensors', () => {
  const dir = tmp();
  mkfifo(join(dir, 'config.json'));
  assert.throws(
    () => loadModelConfig(dir),
    (error: Error) => {
      assert.match(error.message, /config\.json: cannot read the model config: is a FIFO \(named pipe\), not a regular file$/);
      return true;
    },
  );
  mkfifo(join(dir, 'tokenizer.json'));
  assert.throws(() => Tokenizer.load(dir), /tokenizer\.json: cannot read: is a FIFO \(named pipe\)/);
  mkfifo(join(dir, 'model.safetensors'));
  assert.throws(() => torch.loadModelWeights(dir), /model\.safetensors: cannot open: is a FIFO \(named pipe\)/);
  mkfifo(join(dir, 'model.safetensors.index.json'));
  assert.throws(() => torch.loadModelWeights(dir), /index\.json: cannot read the shard index: is a FIFO/);
});

test('`trinity model init --tokenizer DIR` with a FIFO among the tokenizer files refuses to copy it', () => {
  const source = tmp();
  writeCharTokenizer(source);
  mkfifo(join(source, 'special_tokens_map.json'));
  assert.throws(() => initModel(join(tmp(), 'model'), { tokenizer: source }), /special_tokens_map\.json: is a FIFO/);
});

test('a folder where a file should be names the file (not a bare EISDIR)', () => {
  const dir = tmp();
  mkdirSync(join(dir, 'config.json'));
  assert.throws(() => loadModelConfig(dir), /config\.json: cannot read the model config: is a folder, not a regular file/);
});

test('a symbolic link loop is called one', () => {
  const dir = tmp();
  symlinkSync(join(dir, 'b.json'), join(dir, 'a.json'));
  symlinkSync(join(dir, 'a.json'), join(dir, 'b.json'));
  assert.throws(() => readRegularFile(join(dir, 'a.json')), /a\.json: a symbolic link loop \(ELOOP/);
  // in a model folder: not 'missing'
  symlinkSync(join(dir, 'tokenizer.json'), join(dir, 'tokenizer.json.link'));
  symlinkSync(join(dir, 'tokenizer.json.link'), join(dir, 'tokenizer.json'));
  assert.throws(() => Tokenizer.load(dir), /tokenizer\.json: a symbolic link loop \(ELOOP/);
  symlinkSync(join(dir, 'model.safetensors'), join(dir, 'model.safetensors.link'));
  symlinkSync(join(dir, 'model.safetensors.link'), join(dir, 'model.safetensors'));
  assert.throws(() => torch.loadModelWeights(dir), /model\.safetensors: a symbolic link loop \(ELOOP/);
});

test('a FIFO as a dataset path, or as a dataset file (.jsonl, .json, .parquet) inside a dataset folder', async () => {
  const dir = tmp();
  const card = join(dir, 'with-card');
  mkdirSync(card);
  mkfifo(join(card, 'README.md'));
  await assert.rejects(drain(readDatasetRows(card)), /README\.md: cannot read the dataset card: is a FIFO \(named pipe\)/);
  const path = mkfifo(join(dir, 'tasks.jsonl'));
  await assert.rejects(drain(readDatasetRows(path)), /tasks\.jsonl: is a FIFO \(named pipe\), not a data file or a folder/);
  for (const name of ['train.jsonl', 'train.json', 'train.parquet']) {
    const folder = join(dir, name.replace('.', '-'));
    mkdirSync(folder);
    mkfifo(join(folder, name));
    await assert.rejects(drain(readDatasetRows(folder)), (error: Error) => {
      assert.match(error.message, new RegExp(`${name.replace('.', '\\.')}: cannot read: is a FIFO \\(named pipe\\)`));
      return true;
    });
  }
});

test('`trinity buffer view` of a FIFO (.jsonl dump or .db buffer) is refused, not a blocked read', async () => {
  const dir = tmp();
  const out = { write: () => true };
  await assert.rejects(bufferCommand(['view', mkfifo(join(dir, 'dump.jsonl'))], out), FIFO);
  await assert.rejects(bufferCommand(['view', mkfifo(join(dir, 'buffer.db'))], out), FIFO);
});

test('a FIFO as the run config file (trinity run / trinity config check)', async () => {
  const file = mkfifo(join(tmp(), 'run.yaml'));
  assert.throws(() => loadConfig(file), /cannot read the config file: is a FIFO \(named pipe\)/);
  await assert.rejects(checkConfigFile(file), /cannot read the config file: is a FIFO \(named pipe\)/);
});
