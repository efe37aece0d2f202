// A train step's staleness metrics (src/rft/trainer/loop.ts stalenessMetrics), computed by hand: at train step 3 the
// trainer's weights are version 2; a batch of experiences generated with versions 0, 1, 1, 2 (one fully_async explore
// step can mix versions) gives
//   sample/model_version/mean = (0 + 1 + 1 + 2) / 4 = 1,  min 0,  max 2
//   trainer/staleness         = mean(2 − v) = (2 + 1 + 1 + 0) / 4 = 1
//   trainer/staleness/max     = 2 − 0 = 2
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stalenessMetrics } from '../../../src/rft/trainer/loop.js';
import { makeExperience } from '../buffer/helpers.js';

const versioned = (versions: (number | undefined)[]) =>
  versions.map((v, i) => makeExperience(`e${i}`, { info: v === undefined ? {} : { modelVersion: v } }));

test('staleness of a batch with versions 0, 1, 1, 2 at train step 3', () => {
  assert.deepEqual(stalenessMetrics(versioned([0, 1, 1, 2]), 3), {
    'trainer/staleness': 1,
    'trainer/staleness/max': 2,
    'sample/model_version/mean': 1,
    'sample/model_version/min': 0,
    'sample/model_version/max': 2,
  });
});

test('unversioned experiences count as fresh in trainer/staleness and are left out of sample/model_version/*', () => {
  // step 4 (trainer version 3): versions 1 and none → staleness mean((3 − 1), 0) = 1; versions seen: [1]
  assert.deepEqual(stalenessMetrics(versioned([1, undefined]), 4), {
    'trainer/staleness': 1,
    'trainer/staleness/max': 2,
    'sample/model_version/mean': 1,
    'sample/model_version/min': 1,
    'sample/model_version/max': 1,
  });
  assert.deepEqual(stalenessMetrics(versioned([undefined]), 2), { 'trainer/staleness': 0 });
});
