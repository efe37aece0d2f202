// Mode both's trainer reads a step's experiences from the buffer (src/rft/trainer/experience-source.ts). When the
// explorer writes the explore steps that feed a train step (all their rollouts failed: nothing) and then finishes
// while the read waits, the step is short — the trainer loop counts it as a step with nothing to train on — not the
// end of the source, which would end the run a step early as if it had finished.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { QueueBuffer } from '../../../src/rft/buffer/index.js';
import { BufferExperienceSource } from '../../../src/rft/trainer/experience-source.js';

test('the explorer fills the step (with nothing) and finishes while the read waits: a short step, not an exhausted source', async () => {
  const buffer = new QueueBuffer({ name: 'queue' });
  let filled = false;
  const source = new BufferExperienceSource({ buffer, maxStaleness: null, answerRequests: null, stepFilled: () => filled });
  source.startStep(0);
  const reading = source.read(8, { timeoutMs: 600_000, minCount: 1 });
  // after the read's microtasks: it waits in the buffer now, having seen the step not filled yet
  await new Promise((resolve) => setImmediate(resolve));
  filled = true;
  await buffer.finishWriting();
  assert.deepEqual(await reading, []);
  assert.equal(source.shortStep, true);
  assert.match(source.shortBecause ?? '', /the explore steps that feed it are written/);
});
