// A large config (a long YAML list) is parsed once: `trinity config check` locates the pre-run checks' problems in
// the document it loaded, instead of parsing the text a second time (which, for a 6 MB list, cost as much again in
// time and memory). Counted, not timed: YAML.parseDocument is called once per check.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import YAML from 'yaml';
import { checkConfigText } from '../../../src/rft/run/config/check.js';
import { ConfigError } from '../../../src/rft/run/config/index.js';
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
});
