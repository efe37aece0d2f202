// Where a RolloutEngine step moves data between JavaScript and the device. On a GPU an upload or a read-back waits
// for all work queued before it, so a step that uploaded after queueing its forward (a sampler column, a prefill's
// index, a KV-cache copy's slot list) would stop there until the forward finished. Checked on the CPU by the order of
// the addon calls: within every step, all uploads come before the forward's first op, and the step's one read-back
// (tokens and log-probs) comes last, with no op in between whose result's size depends on the values (SIZE_READS).
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import * as torch from '../../src/torch/index.js';
import { HOST_TRANSFERS, recordNativeCalls, SIZE_READS } from '../helpers/native-calls.js';
import { fixtureModelWithTokenizer } from './helpers.js';

before(() => torch.setNumThreads(1));

// prompts of different lengths (a padded prefill), n > 1 (the prompt's cache copied to the other samples), and every
// truncation: top-p alone, top-k with top-p, min-p, plain and greedy rows
const requests = [
  { promptIds: [5, 9, 14, 20], maxTokens: 12, n: 3, temperature: 0.8, topP: 0.9, seed: 1 },
  { promptIds: [40], maxTokens: 9, temperature: 0 },
  { promptIds: [7, 8, 9, 10, 11, 12], maxTokens: 10, n: 2, temperature: 1.2, topK: 20, topP: 0.7, seed: 2 },
  { promptIds: [60, 61], maxTokens: 11, temperature: 1, minP: 0.05, seed: 3 },
  { promptIds: [30, 31, 32], maxTokens: 8, temperature: 1, seed: 4 },
];

for (const captureDecode of [true, false]) {
  test(`engine steps (${captureDecode ? 'captured' : 'eager'} decode): uploads before the forward, one read-back after it`, async () => {
    const engine = RolloutEngine.load(fixtureModelWithTokenizer('qwen2-tied'), {
      slots: 8,
      decodeKeyBucket: 16,
      captureDecode,
    });
    try {
      const generateAll = () => Promise.all(requests.map((r) => engine.generate({ ...r, ignoreEos: true })));
      await generateAll(); // captures the decode steps' shapes
      const recording = recordNativeCalls([...HOST_TRANSFERS, ...SIZE_READS, 'embedding', 'replayCapture']);
      try {
        await generateAll();
      } finally {
        recording.stop();
      }
      // one segment per step, ending at its read-back
      const steps: string[][] = [[]];
      for (const call of recording.calls) {
        (steps[steps.length - 1] as string[]).push(call);
        if (call === 'toBytes') steps.push([]);
      }
      assert.deepEqual(steps.pop(), [], 'nothing after the last step');
      assert.ok(steps.length >= 12, `${steps.length} steps`);
      let replays = 0;
      steps.forEach((calls, i) => {
        const forward = calls.findIndex((c) => c === 'embedding' || c === 'replayCapture');
        assert.ok(forward > 0, `step ${i}: uploads, then the forward: ${calls.join(' ')}`);
        assert.deepEqual(
          calls.slice(forward + 1),
          ['toBytes'],
          `step ${i}: after the forward's first op only its read-back: ${calls.join(' ')}`,
        );
        if (calls[forward] === 'replayCapture') replays++;
      });
      assert.ok(captureDecode ? replays > 0 : replays === 0, `${replays} replayed steps`);
    } finally {
      await engine.close();
    }
  });
}
