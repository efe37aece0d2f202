// Captured decode steps (src/engine/decode-steps.ts): a RolloutEngine that replays its decode steps gives the same
// tokens and log-probs, bit for bit, as one that runs them eagerly over the same cache shapes; where no row truncates
// its sampling is replayed with the forward, with the same bits; captured steps stay valid across weight syncs (the
// packed weights they hold are repacked in place); a step that cannot be replayed runs eagerly.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import * as torch from '../../src/torch/index.js';
import { recordNativeCalls } from '../helpers/native-calls.js';
import { fixtureModelWithTokenizer } from './helpers.js';

const dir = fixtureModelWithTokenizer('qwen2-tied');
// prompts of different lengths, n > 1 and max tokens that end rows at different steps: the batch shrinks, rows leave
// gaps in the slots (gathered rows), and the key length crosses buckets
const requests = [
  { promptIds: [5, 9, 14, 20], maxTokens: 40, n: 3, temperature: 1, seed: 11 },
  { promptIds: [40], maxTokens: 12, temperature: 0 },
  { promptIds: [7, 8, 9, 10, 11, 12, 13, 14, 15], maxTokens: 25, n: 2, temperature: 0.7, topP: 0.9, seed: 3 },
  { promptIds: [60, 61], maxTokens: 33, temperature: 1.3, topK: 20, seed: 5 },
];

async function generateAll(engine: RolloutEngine): Promise<{ tokens: number[][]; logprobs: number[][] }> {
  const results = await Promise.all(requests.map((r) => engine.generate({ ...r, ignoreEos: true })));
  const completions = results.flatMap((r) => r.completions);
  return { tokens: completions.map((c) => c.tokenIds), logprobs: completions.map((c) => c.logprobs) };
}

before(() => {
  torch.setNumThreads(1);
});

describe('RolloutEngine: captured decode steps', () => {
  let captured: RolloutEngine;
  let eager: RolloutEngine;
  before(() => {
    captured = RolloutEngine.load(dir, { slots: 8, decodeKeyBucket: 16 });
    eager = RolloutEngine.load(dir, { slots: 8, decodeKeyBucket: 16, captureDecode: false });
  });
  after(async () => {
    await captured.close();
    await eager.close();
  });

  it('gives the eager engine’s tokens and log-probs bit for bit, replaying most steps', async () => {
    const reference = await generateAll(eager);
    const first = await generateAll(captured); // captures each shape once
    const second = await generateAll(captured); // replays them
    assert.deepEqual(first, reference);
    assert.deepEqual(second, reference);
    const stats = captured.decodeStepStats;
    assert.ok(stats !== null);
    assert.equal(stats.lastReason, null, 'every captured step was replayable');
    assert.ok(
      stats.replays > stats.captures + stats.eager,
      `${stats.replays} replays, ${stats.captures} captures, ${stats.eager} eager`,
    );
    assert.equal(eager.decodeStepStats, null);
  });

  it('replays the sampling with the forward where no row truncates: the same bits, no sampling op from JavaScript', async () => {
    // sampled rows (seeded), a greedy row and top log-probs; no top-k, top-p or min-p
    const plain = [
      { promptIds: [5, 9, 14, 20], maxTokens: 30, n: 2, temperature: 1, seed: 21, topLogprobs: 3 },
      { promptIds: [40, 41], maxTokens: 18, temperature: 0 },
      { promptIds: [7, 8, 9], maxTokens: 24, temperature: 0.8, seed: 4 },
    ];
    const run = async (engine: RolloutEngine) => {
      const results = await Promise.all(plain.map((r) => engine.generate({ ...r, ignoreEos: true })));
      return results.flatMap((r) => r.completions.map((c) => ({ ids: c.tokenIds, lp: c.logprobs, top: c.topLogprobs })));
    };
    const reference = await run(eager);
    assert.deepEqual(await run(captured), reference); // captures the shapes
    const steps = captured.stats.steps;
    const replays = captured.decodeStepStats?.replays ?? 0;
    const probe = recordNativeCalls(['logSoftmax']);
    let again: Awaited<ReturnType<typeof run>>;
    try {
      again = await run(captured);
    } finally {
      probe.stop();
    }
    assert.deepEqual(again, reference);
    const replayed = (captured.decodeStepStats?.replays ?? 0) - replays;
    assert.ok(replayed > 20, `${replayed} replayed steps`);
    // sampleTokens runs one log_softmax a step: from JavaScript only in the steps that were not replays
    assert.equal(probe.calls.length, captured.stats.steps - steps - replayed);
  });

  it('matches exact-length attention to float rounding (the bucket only adds masked positions)', async () => {
    const exact = RolloutEngine.load(dir, { slots: 8, captureDecode: false });
    try {
      assert.equal(exact.decodeKeyBucket, 1);
      const a = await generateAll(exact);
      const b = await generateAll(captured);
      assert.deepEqual(b.tokens, a.tokens);
      const diff = Math.max(
        ...a.logprobs.flatMap((row, i) => row.map((v, t) => Math.abs(v - (b.logprobs[i]?.[t] ?? Number.NaN)))),
      );
      assert.ok(diff < 1e-5, `max log-prob difference ${diff}`);
    } finally {
      await exact.close();
    }
  });

  it('keeps its captured steps across a weight sync, whose packed weights are rewritten in place', async () => {
    const weights = torch.loadModelWeights(dir);
    for (const [name, t] of weights) {
      weights.set(name, torch.keep(t.mul(1.5).add(0.01)));
      t.dispose();
    }
    try {
      await generateAll(captured);
      const before = captured.decodeStepStats;
      captured.syncWeights(weights);
      eager.syncWeights(weights);
      const reference = await generateAll(eager);
      assert.deepEqual(await generateAll(captured), reference);
      const after = captured.decodeStepStats;
      assert.ok(before !== null && after !== null);
      assert.equal(after.captures, before.captures, 'the steps captured before the sync were replayed');
      assert.ok(after.replays > before.replays);
    } finally {
      for (const t of weights.values()) t.dispose();
    }
  });
});

describe('RolloutEngine: a weight sync between decode steps', () => {
  it('reaches the captured steps that run next (their packed weights are rewritten in place)', async () => {
    const weights = torch.loadModelWeights(dir);
    for (const [name, t] of weights) {
      weights.set(name, torch.keep(t.mul(1.5).add(0.01)));
      t.dispose();
    }
    const captured = RolloutEngine.load(dir, { slots: 2, decodeKeyBucket: 16 });
    const eager = RolloutEngine.load(dir, { slots: 2, decodeKeyBucket: 16, captureDecode: false });
    try {
      // the sync happens inside the 6th token's callback: after that step, before the next, with no prefill between
      const generate = (engine: RolloutEngine, sync: boolean) => {
        let tokens = 0;
        return engine.generate({
          promptIds: [5, 9, 14],
          maxTokens: 24,
          temperature: 0,
          ignoreEos: true,
          onToken: () => {
            if (++tokens === 6 && sync) engine.syncWeights(weights);
          },
        });
      };
      await generate(captured, false); // captures the decode shapes
      await generate(captured, false);
      const replaysBefore = captured.decodeStepStats?.replays ?? 0;
      const reference = await generate(eager, true);
      const result = await generate(captured, true);
      assert.deepEqual(result.completions[0]?.logprobs, reference.completions[0]?.logprobs);
      assert.ok((captured.decodeStepStats?.replays ?? 0) > replaysBefore + 10, 'the steps after the sync were replays');
    } finally {
      for (const t of weights.values()) t.dispose();
      await captured.close();
      await eager.close();
    }
  });
});

const gpus = torch.cuda.deviceCount();

describe('RolloutEngine: CUDA graphs', () => {
  it('give the tokens and log-probs of op-by-op replays and of eager steps, bit for bit (on a GPU)', {
    skip: gpus === 0 ? 'no CUDA device visible' : false,
  }, async () => {
    const options = { slots: 8, decodeKeyBucket: 16, device: 'cuda' } as const;
    const graphs = RolloutEngine.load(dir, options);
    const replays = RolloutEngine.load(dir, { ...options, cudaGraphs: false });
    const eager = RolloutEngine.load(dir, { ...options, captureDecode: false });
    try {
      const reference = await generateAll(eager);
      assert.deepEqual(await generateAll(replays), reference);
      // a shape is captured the second time it runs and recorded as a graph at its first replay, so a shape that runs
      // once per call is captured in the second call and gets its graph in the third
      assert.deepEqual(await generateAll(graphs), reference); // captures the shapes that repeat within a call
      assert.deepEqual(await generateAll(graphs), reference); // records their graphs, captures the others
      assert.deepEqual(await generateAll(graphs), reference); // launches graphs, records the others'
      const stats = graphs.decodeStepStats;
      assert.ok(stats !== null);
      assert.equal(stats.lastGraphReason, null, 'every captured step became a graph');
      assert.equal(stats.graphFailures, 0);
      assert.ok(stats.graphs > 0 && stats.graphs === stats.held, `${stats.graphs} graphs, ${stats.held} steps held`);
      assert.equal(replays.decodeStepStats?.graphs, 0);
    } finally {
      await graphs.close();
      await replays.close();
      await eager.close();
    }
  });

  it('are on by default only on a CUDA device; asking for them elsewhere is an error', () => {
    assert.throws(
      () => RolloutEngine.load(dir, { slots: 2, cudaGraphs: true }),
      /^RangeError: RolloutEngine: cudaGraphs needs captureDecode and a model on a CUDA device \(captureDecode true, model on cpu\)$/,
    );
    assert.throws(
      () => RolloutEngine.load(dir, { slots: 2, cudaGraphs: true, captureDecode: false }),
      /cudaGraphs needs captureDecode and a model on a CUDA device \(captureDecode false, model on cpu\)/,
    );
  });
});

describe('DecodeSteps', () => {
  it('captures a shape the second time it runs; one whose capture cannot be replayed runs eagerly after two tries', async () => {
    const { DecodeSteps } = await import('../../src/engine/decode-steps.js');
    const steps = new DecodeSteps();
    const x = torch.tensor([1, 2, 3]);
    const readsBack = () => [x.mul(x.sum().item() as number)];
    for (let i = 0; i < 4; i++) assert.deepEqual(steps.run('k', [x], readsBack)[0]?.toArray(), [6, 12, 18]);
    assert.deepEqual(steps.stats, {
      replays: 0,
      captures: 2,
      eager: 2,
      held: 0,
      lastReason: 'item ran inside the captured step',
      graphs: 0,
      graphFailures: 0,
      lastGraphReason: null,
    });
    const y = torch.tensor([1, 2, 3]);
    const fine = () => [y.mul(2)];
    steps.run('other', [y], fine); // first seen: eager
    steps.run('other', [y], fine); // seen again: captured
    assert.equal(steps.stats.captures, 3);
    y.copy_(torch.tensor([4, 5, 6]));
    assert.deepEqual(steps.run('other', [y], fine)[0]?.toArray(), [8, 10, 12]);
    assert.equal(steps.stats.replays, 1);
    assert.equal(steps.stats.held, 1);
    steps.invalidate();
    assert.equal(steps.stats.held, 0);
  });

  it('with cudaGraphs, a step whose inputs are not all on CUDA is captured without a graph, and says why', async () => {
    const { DecodeSteps } = await import('../../src/engine/decode-steps.js');
    const steps = new DecodeSteps({ cudaGraphs: true });
    const x = torch.tensor([1, 2, 3]);
    const double = () => [x.mul(2)];
    for (let i = 0; i < 3; i++) steps.run('k', [x], double); // eager, captured, replayed
    x.copy_(torch.tensor([4, 5, 6]));
    assert.deepEqual(steps.run('k', [x], double)[0]?.toArray(), [8, 10, 12]);
    const { replays, captures, held, graphs, graphFailures, lastGraphReason } = steps.stats;
    assert.deepEqual(
      { replays, captures, held, graphs, graphFailures, lastGraphReason },
      {
        replays: 2,
        captures: 1,
        held: 1,
        graphs: 0,
        graphFailures: 1,
        lastGraphReason: 'input 0 of the step is on cpu, not CUDA',
      },
    );
  });
});
