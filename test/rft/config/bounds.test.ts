// Every numeric key of the config has a range: a slip such as `repeat_times: 1e9` is a problem naming the key, not an
// out-of-memory abort once the run has started. A walk over the schema keeps every numeric key bounded on both sides.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ConfigError,
  ConfigSchema,
  MAX_EXPERIENCES_PER_STEP,
  parseConfig,
  schemaLeafPaths,
} from '../../../src/rft/run/config/index.js';
import { numbersIn, schemaAt } from './helpers.js';

/** The schema at a leaf path of schemaLeafPaths (`*`: any item or key). */
const at = (path: string) => {
  const schema = schemaAt(path.split('.'));
  assert.ok(schema, `${path}: no schema`);
  return schema;
};

const BASE = 'model: {model_path: /m, max_model_len: 64}\nbuffer: {explorer_input: {taskset: {path: /t}}}\n';
function problems(overrides: string[], text = BASE): string[] {
  try {
    parseConfig(text, { env: {}, cwd: '/tmp', overrides });
    return [];
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems.map((p) => `${p.path}: ${p.message}`);
  }
}

describe('numeric ranges', () => {
  it('every numeric key of the schema has a finite minimum and maximum', () => {
    const numeric = schemaLeafPaths(ConfigSchema).filter((path) => numbersIn(at(path)).length > 0);
    // the walk reaches the keys (a schema change that hid them from it would make this test vacuous)
    assert.ok(numeric.length >= 50, `${numeric.length} numeric keys`);
    assert.ok(
      numeric.includes('algorithm.repeat_times') &&
        numeric.includes('buffer.explorer_input.tasksets.*.rollout_args.stop_token_ids'),
    );
    const unbounded = numeric.filter((path) =>
      numbersIn(at(path)).some((n) => !Number.isFinite(n.minValue ?? Number.NaN) || !Number.isFinite(n.maxValue ?? Number.NaN)),
    );
    assert.deepEqual(unbounded, []);
  });

  it('repeat_times: 1e9 (the probe that ran out of memory) is a problem naming the key', () => {
    assert.deepEqual(problems(['algorithm.repeat_times=1e9']), ['algorithm.repeat_times: must be <= 1024, got 1000000000']);
    assert.deepEqual(problems([], `${BASE}algorithm: {repeat_times: "1e9"}\n`), [
      'algorithm.repeat_times: must be <= 1024, got the string "1e9"',
    ]);
  });

  it('huge, negative, fractional, NaN and infinite values are refused, each naming its key', () => {
    const cases: [string, RegExp][] = [
      ['buffer.batch_size=1000000', /^buffer\.batch_size: must be <= 65536, got 1000000$/],
      ['buffer.train_batch_size=1e8', /^buffer\.train_batch_size: must be <= 65536/],
      ['model.max_model_len=1e12', /^model\.max_model_len: must be <= 1048576/],
      ['explorer.rollout_model.slots=100000', /^explorer\.rollout_model\.slots: must be <= 4096/],
      ['explorer.runner_per_model=0', /^explorer\.runner_per_model: must be >= 1, got 0/],
      ['explorer.max_timeout=1e10', /^explorer\.max_timeout: must be <= 2147483, got 10000000000/],
      ['synchronizer.sync_timeout=-1', /^synchronizer\.sync_timeout: must be > 0, got -1/],
      ['buffer.trainer_input.experience_buffer.max_read_timeout=0', /max_read_timeout: must be > 0, got 0/],
      ['algorithm.optimizer.lr=5', /^algorithm\.optimizer\.lr: must be <= 1, got 5/],
      ['algorithm.optimizer.lr=.nan', /^algorithm\.optimizer\.lr: expected a number, got NaN/],
      ['buffer.explorer_input.taskset.rollout_args.temperature=.inf', /temperature: expected a number, got Infinity/],
      ['buffer.explorer_input.taskset.rollout_args.seed=-3', /rollout_args\.seed: must be >= 0, got -3/],
      ['buffer.explorer_input.taskset.rollout_args.stop_token_ids=[1, 2e9]', /stop_token_ids\.1: must be <= 1048575/],
      ['buffer.total_epochs=2.5', /^buffer\.total_epochs: expected an integer, got 2\.5/],
      ['synchronizer.sync_offset=100000', /^synchronizer\.sync_offset: must be <= 1024/],
      ['explorer.max_retry_times=1e6', /^explorer\.max_retry_times: must be <= 100/],
      ['explorer.proxy_port=70000', /^explorer\.proxy_port: must be <= 65535/],
      ['buffer.trainer_input.experience_buffer.capacity=1e12', /capacity: must be <= 16777216/],
      ['model.lora={rank: 100000}', /^model\.lora\.rank: must be <= 4096/],
    ];
    for (const [override, expected] of cases) {
      const found = problems([override]);
      assert.equal(found.length, 1, `${override}: ${found.join('\n')}`);
      assert.match(found[0] as string, expected, override);
    }
  });

  it('numbers written as text (from an environment variable) are held to the same ranges', () => {
    const text = `model: {model_path: /m, max_model_len: 64}\nbuffer: {batch_size: "\${BATCH}", explorer_input: {taskset: {path: /t}}}\n`;
    assert.deepEqual(parseConfig(text, { env: { BATCH: '16' }, cwd: '/tmp' }).buffer.batch_size, 16);
    assert.throws(() => parseConfig(text, { env: { BATCH: '1e7' }, cwd: '/tmp' }), /buffer\.batch_size: must be <= 65536/);
  });

  it('batch_size × repeat_times beyond the experiences one step may hold is a problem naming both', () => {
    assert.equal(MAX_EXPERIENCES_PER_STEP, 65_536);
    assert.deepEqual(problems(['buffer.batch_size=1024', 'algorithm.repeat_times=64']), []);
    assert.deepEqual(problems(['buffer.batch_size=1024', 'algorithm.repeat_times=65']), [
      'buffer.batch_size: × algorithm.repeat_times (1024 × 65 = 66560) experiences per explore step exceeds 65536: lower one of them',
    ]);
    // mode train explores nothing: no product to bound
    assert.deepEqual(
      problems([
        'mode=train',
        'buffer.batch_size=65536',
        'algorithm.repeat_times=1024',
        'buffer.train_batch_size=64',
        'buffer.trainer_input.experience_buffer.storage_type=sql',
        'synchronizer.sync_method=checkpoint',
      ]),
      [],
    );
  });
});
