// A large config (a long YAML list, under the size bound) is parsed once: `trinity config check` locates the pre-run
// checks' problems in the document it loaded, instead of parsing the text a second time (which cost as much again in
// time and memory). A config over MAX_CONFIG_BYTES (1 MiB) is refused before it is parsed at all (the parse of a few
// MB takes seconds and hundreds of MB). Counted, not timed: YAML.parseDocument calls.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import YAML from 'yaml';
import { checkConfigFile, checkConfigText } from '../../../src/rft/run/config/check.js';
import { ConfigError, loadConfig, MAX_CONFIG_BYTES, parseConfig } from '../../../src/rft/run/config/index.js';
import { modelFolder } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-large-config-'));
const model = modelFolder(join(dir, 'model'));

/** Runs `body` with YAML.parseDocument counted; returns the count. */
async function countParses(body: () => Promise<unknown>): Promise<number> {
  const parseDocument = YAML.parseDocument;
  let calls = 0;
  YAML.parseDocument = ((...args: Parameters<typeof parseDocument>) => {
    calls++;
    return parseDocument(...args);
  }) as typeof parseDocument;
  try {
    await body();
  } finally {
    YAML.parseDocument = parseDocument;
  }
  return calls;
}

describe('a large config', () => {
  it('config check parses the YAML once, and still locates the pre-run problems in it', async () => {
    const stops = Array.from({ length: 20_000 }, (_, i) => `          - stop string ${i}\n`).join('');
    const text = `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  explorer_input:
    taskset:
      path: ${dir}/missing.jsonl
      rollout_args:
        stop:
${stops}`;
    const file = join(dir, 'large.yaml');
    let error: unknown;
    const parses = await countParses(() => checkConfigText(text, file).catch((e: unknown) => (error = e)));
    assert.ok(error instanceof ConfigError, String(error));
    assert.equal(error.problems.length, 1, error.message);
    assert.equal(error.problems[0]?.path, 'buffer.explorer_input.taskset.path');
    assert.equal(error.problems[0]?.source, `${file}:7:7`);
    assert.equal(parses, 1);
  });

  it('a config over MAX_CONFIG_BYTES is refused before it is parsed, naming the limit and where the data goes', async () => {
    const head = `model: {model_path: ${model}}\ncheckpoint_root_dir: ${dir}/runs\nbuffer:\n  batch_size: 2\n  stop:\n`;
    const line = '    - a stop string that belongs in a data file\n';
    const text = head + line.repeat(Math.ceil((MAX_CONFIG_BYTES + 1 - head.length) / line.length));
    assert.ok(text.length > MAX_CONFIG_BYTES);
    const file = join(dir, 'huge.yaml');
    writeFileSync(file, text);
    const refused = (error: unknown) => {
      assert.ok(error instanceof ConfigError, String(error));
      assert.equal(error.problems.length, 1, error.message);
      assert.equal(error.problems[0]?.path, '');
      assert.equal(error.file, file);
      assert.match(error.message, /the config is 1\.0 MB, over the 1\.0 MB a config may be \(MAX_CONFIG_BYTES\)/);
      assert.match(error.message, /dataset file .* by path \(buffer\.explorer_input\.taskset\.path/);
      return true;
    };
    const parses = await countParses(async () => {
      await assert.rejects(checkConfigFile(file), refused);
      await assert.rejects(checkConfigText(text, file), refused);
      assert.throws(() => loadConfig(file), refused);
      assert.throws(() => parseConfig(text, { file }), refused);
    });
    assert.equal(parses, 0);
  });

  it('a config of exactly MAX_CONFIG_BYTES is parsed', async () => {
    const head = `model: {model_path: ${model}, max_model_len: 64}\ncheckpoint_root_dir: ${dir}/runs
buffer: {batch_size: 2, explorer_input: {taskset: {path: ${dir}/tasks.jsonl}}}\n`;
    const text = head + '#'.repeat(MAX_CONFIG_BYTES - head.length - 1) + '\n';
    assert.equal(Buffer.byteLength(text), MAX_CONFIG_BYTES);
    const file = join(dir, 'at-limit.yaml');
    writeFileSync(file, text);
    assert.equal(loadConfig(file).model.max_model_len, 64);
  });
});
