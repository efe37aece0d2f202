// Router replay from the engine to the trainer's forward (algorithm.enable_router_replay): the engine records each
// fed token's experts (RolloutEngineOptions.recordRoutedExperts) exactly as a forward over the finished sequence routes
// them; the experience carries the record (base64 int16) through the SQLite buffer unchanged; the train batch lays it
// out at the tokens' columns; and the trainer's log-probs with the record replayed equal the engine's. Dense models are
// refused with the key's name.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { CausalLM, tokenLogProbs } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { SqliteBuffer } from '../../src/rft/buffer/index.js';
import { type Experience, validateExperience } from '../../src/rft/experience.js';
import { decodeRoutedExperts } from '../../src/rft/routed-experts.js';
import { replayRecords } from '../../src/rft/trainer/router-replay.js';
import { frozenCopyReference } from '../../src/rft/trainer/reference-policy.js';
import { TrainStep, type TrainStepSetup } from '../../src/rft/trainer/train-step.js';
import { buildBatch } from '../../src/rft/trainer/train-batch.js';
import { buildExperience } from '../../src/rft/workflow/model-handle.js';
import * as torch from '../../src/torch/index.js';
import { tempDir } from './buffer/helpers.js';
import { fixturesDir } from '../model/helpers/fixtures.js';

const dir = `${fixturesDir}qwen3-moe`; // sparse layers 0 and 2, 8 experts, top-2
const prompt = [3, 17, 5, 42];
let engine: RolloutEngine;
let trained: CausalLM;
before(() => {
  engine = new RolloutEngine(CausalLM.load(dir, { layout: 'inference' }), { recordRoutedExperts: true, ownsModel: true });
  trained = CausalLM.load(dir); // the trainer's layout
});
after(async () => {
  await engine.close();
  trained.dispose();
});

const generate = () => engine.generate({ promptIds: prompt, n: 2, maxTokens: 5, ignoreEos: true, temperature: 1, seed: 7 });

test("the engine records each fed token's experts as a forward over the sequence routes them", async () => {
  const { completions } = await generate();
  for (const c of completions) {
    const routed = c.routedExperts;
    assert.ok(routed !== undefined, 'a completion of a recording engine carries routedExperts');
    assert.deepEqual([routed.layers, routed.k], [[0, 2], 2]);
    const fed = [...prompt, ...c.tokenIds.slice(0, -1)];
    assert.equal(routed.ids.length, fed.length * 2 * 2);
    const expected: number[][][] = [];
    torch.noGrad(() =>
      torch.scope(() => {
        trained.forward(torch.tensor([fed], { dtype: 'int64' }), {
          onRouting: (layer, routing) => {
            expected[layer] = routing.experts.toArray() as number[][];
          },
        });
      }),
    );
    const got = (l: number) => fed.map((_, t) => [...routed.ids.subarray((t * 2 + l) * 2, (t * 2 + l + 1) * 2)]);
    assert.deepEqual(got(0), expected[0]);
    assert.deepEqual(got(1), expected[2]);
  }
});

test('the record rides the experience through SQLite; replayed in the batch, the log-probs equal the engine’s', async () => {
  const { completions } = await generate();
  const experiences = completions.map((c, i) =>
    buildExperience(c, { promptIds: prompt, modelVersion: 0, temperature: 1, eid: `e${i}`, reward: i }),
  );
  for (const e of experiences) assert.deepEqual(validateExperience(e), []);
  const path = join(tempDir('replay'), 'buffer.db');
  const buffer = new SqliteBuffer({ path });
  await buffer.write(experiences);
  await buffer.finishWriting();
  const read = await buffer.read(2, { timeoutMs: 1000 });
  await buffer.close();
  assert.deepEqual(
    read.map((e) => e.routedExperts),
    experiences.map((e) => e.routedExperts),
  );
  assert.deepEqual([...decodeRoutedExperts(read[0]?.routedExperts as never)], [...(completions[0]?.routedExperts?.ids ?? [])]);
  // a second row with a shorter prompt: left-padded, its record shifts with it
  const shorter = {
    ...(read[1] as (typeof read)[number]),
    eid: 'short',
    tokens: (read[1]?.tokens ?? []).slice(1),
    promptLength: 3,
  };
  delete shorter.routedExperts;
  torch.noGrad(() =>
    torch.scope(() => {
      const batch = buildBatch([...read, shorter]);
      const records = replayRecords(batch, trained.config);
      assert.deepEqual(
        records.map((r) => r?.shape ?? null),
        [[3, 9, 2], null, [3, 9, 2]],
      );
      assert.equal((records[0] as torch.Tensor).select(0, 2).eq(-1).all().item(), 1, 'a row without a record: -1');
      assert.equal((records[0] as torch.Tensor).select(0, 0).select(0, 8).eq(-1).all().item(), 1, 'the last token: none');
      const replayed = tokenLogProbs(trained, batch.inputIds, {
        attentionMask: batch.attentionMask,
        promptWidth: batch.promptWidth,
        replayRouting: records,
      });
      const response = replayed.logProbs.narrow(1, batch.promptWidth - 1, batch.responseWidth);
      for (const [b, c] of completions.entries()) {
        const ours = response.select(0, b).toArray() as number[];
        for (const [j, lp] of ours.entries())
          assert.ok(Math.abs(lp - (c.logprobs[j] as number)) < 1e-4, `row ${b} token ${j}: ${lp} vs ${c.logprobs[j]}`);
      }
    }),
  );
});

test('enable_router_replay and recordRoutedExperts are refused on a dense model, naming the key', () => {
  const dense = CausalLM.load(`${fixturesDir}qwen3-untied`, { requiresGrad: true });
  try {
    assert.throws(
      () => new RolloutEngine(dense, { recordRoutedExperts: true }),
      /recordRoutedExperts needs a mixture-of-experts model, not Qwen3ForCausalLM/,
    );
    const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', enable_router_replay: true });
    assert.equal(algorithm.routerReplay, true);
    const refusal = /algorithm\.enable_router_replay: the policy \(Qwen3ForCausalLM\) is a dense model with no router to replay/;
    const optimizer = new torch.AdamW([...dense.parameters().values()], { lr: 1e-3 });
    assert.throws(() => new TrainStep({ model: dense, optimizer, algorithm, reference: null, critic: null }), refusal);
    assert.throws(
      () => replayRecords(buildBatch([{ eid: 'x', tokens: [1, 2, 3], promptLength: 2, info: {} }]), dense.config),
      refusal,
    );
    assert.throws(
      () => resolveAlgorithm({ algorithm_type: 'grpo', enable_router_replay: 'yes' }),
      /algorithm\.enable_router_replay: expected true or false, got "yes"/,
    );
  } finally {
    dense.dispose();
  }
});

/** An SGD whose step() records the accumulated gradients instead of moving the weights. */
class GradientRecorder extends torch.SGD {
  grads: (Float32Array | undefined)[] = [];
  override step(): void {
    this.grads = this.groups.flatMap((g) => g.params).map((p) => p.grad?.float().toTypedArray() as Float32Array | undefined);
  }
}

/** One GRPO step's gradient on the fixture with layer 0's router negated (its routing flips), split by `split`. */
function gradient(rows: Experience[], replay: boolean, split: Pick<TrainStepSetup, 'microBatchSize' | 'microBatchTokens'>) {
  const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', enable_router_replay: replay });
  const model = CausalLM.load(dir, { requiresGrad: true });
  torch.noGrad(() => (model.parameters().get('model.layers.0.mlp.gate.weight') as torch.Tensor).mul_(-1));
  const optimizer = new GradientRecorder([...model.parameters().values()], { lr: 1 });
  const reference = algorithm.useReference ? frozenCopyReference(model) : null;
  try {
    new TrainStep({ model, optimizer, algorithm, reference, maxGradNorm: 1e9, ...split }).run(rows);
    return optimizer.grads;
  } finally {
    reference?.dispose();
    model.dispose();
  }
}

/** max |a - b| over every parameter's gradient (an expert no token reached has none: zeros). */
const largestDiff = (a: (Float32Array | undefined)[], b: (Float32Array | undefined)[]) =>
  Math.max(
    ...a.map((ga, i) => {
      const gb = b[i];
      const n = Math.max(ga?.length ?? 0, gb?.length ?? 0);
      let largest = 0;
      for (let j = 0; j < n; j++) largest = Math.max(largest, Math.abs((ga?.[j] ?? 0) - (gb?.[j] ?? 0)));
      return largest;
    }),
  );

test('after a router change, the replayed gradient differs from routing anew and is the same however the batch is split', async () => {
  const other = [9, 2, 4]; // a second prompt of another length: prompts left-padded, micro-batches of their own widths
  const results = [await generate(), await engine.generate({ promptIds: other, n: 2, maxTokens: 3, ignoreEos: true, seed: 3 })];
  const rows = results.flatMap((r, p) =>
    r.completions.map((c, i) =>
      buildExperience(c, {
        promptIds: r.promptIds,
        modelVersion: 0,
        temperature: 1,
        eid: `p${p}-${i}`,
        reward: i,
        taskId: `t${p}`,
      }),
    ),
  );
  assert.ok(rows.every((e) => e.routedExperts !== undefined));
  const whole = gradient(rows, true, {});
  const anew = gradient(rows, false, {});
  assert.ok(largestDiff(whole, anew) > 1e-4, `replay changes the gradient (${largestDiff(whole, anew)})`);
  for (const split of [{ microBatchSize: 1 }, { microBatchTokens: 12 }]) {
    const diff = largestDiff(gradient(rows, true, split), whole);
    assert.ok(diff < 1e-5, `${JSON.stringify(split)}: max |gradient - whole batch's| = ${diff}`);
  }
});
