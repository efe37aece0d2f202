// Every weight sync's cost in the trainer's metrics, whatever the channel: a mode-both run of the tiny model with
// synchronizer.sync_method memory (weights by reference into the engine) and checkpoint (a folder the engine loads)
// logs sync/seconds and sync/peak_bytes at each step that published (sync_interval 2: steps 2 and 4), and neither at
// the steps that did not. (Mode train's folder channel: test/rft/run/multinode-netns.test.ts.)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

const linux = process.platform === 'linux';

for (const method of ['memory', 'checkpoint'] as const) {
  test(`sync_method ${method}: sync/seconds and sync/peak_bytes at each step that published`, async () => {
    const { configFile, jobDir } = makeJob({
      totalSteps: 4,
      saveInterval: 4,
      extra: `synchronizer:\n  sync_method: ${method}\n  sync_interval: 2\n`,
    });
    await runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: () => {} });
    const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    assert.deepEqual(
      metrics.map((m) => [m.step, 'sync/seconds' in m, 'sync/peak_bytes' in m]),
      [
        [1, false, false],
        [2, true, linux],
        [3, false, false],
        [4, true, linux],
      ],
    );
    for (const m of metrics.filter((m) => 'sync/seconds' in m)) {
      assert.ok((m['sync/seconds'] as number) > 0, `step ${m.step}: ${m['sync/seconds']}`);
      if (linux) assert.ok(Number.isInteger(m['sync/peak_bytes']) && (m['sync/peak_bytes'] as number) >= 0);
    }
  });
}
