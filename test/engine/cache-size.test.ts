// An engine's KV cache is sized from config.json and the settings before the model's weights are read: a cache that
// cannot fit the machine is refused naming slots, maxLength and the dtype, not with the allocator's text after loading.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { fixtureModelWithTokenizer } from './helpers.js';

test('RolloutEngine.load refuses a cache larger than the memory before loading the model', () => {
  const dir = fixtureModelWithTokenizer('qwen2-tied');
  assert.throws(
    () => RolloutEngine.load(dir, { slots: 1_000_000_000, maxLength: 64 }),
    (error: unknown) => {
      assert.ok(error instanceof RangeError, String(error));
      assert.match(
        error.message,
        /^the KV cache needs \d+ GiB \(1000000000 slots × 64 positions \(maxLength\) × .* \(float32\)\)/,
      );
      assert.match(error.message, /more than this machine's memory/);
      return true;
    },
  );
  assert.throws(() => RolloutEngine.load(dir, { slots: 0 }), /RolloutEngine: slots must be a positive integer, got 0/);
});
