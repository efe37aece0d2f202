// Each experience's log-probs are taken at its own sampling temperature: the model handle records the temperature a
// rollout was sampled at (greedy and unset: 1, as the engine records logprobs), and the train step computes every
// row's log-probs at that row's temperature — the policy's (with gradient), and the recomputed π_old of rows that
// carry no rollout log-probs. Checked against an independent float64 log-softmax of the model's logits / T.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { GenerateRequest, GenerateResult } from '../../../src/engine/index.js';
import { type CausalLM, tokenLogProbs } from '../../../src/model/index.js';
import { POLICY_LOSS_FN, resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import { EngineModelHandle, type RolloutBackend } from '../../../src/rft/workflow/model-handle.js';
import * as torch from '../../../src/torch/index.js';
import { loadPolicy, tinyModelDir } from './toy.js';

torch.setNumThreads(1);

let toy: { dir: string; remove: () => void };
before(() => {
  toy = tinyModelDir();
});
after(() => toy.remove());

/** log softmax(logits / T)[next token] of each response token of one row, from the model's logits, in float64. */
function independentLogprobs(model: CausalLM, e: Experience, temperature: number): number[] {
  const logits = torch.scope(() =>
    torch.noGrad(
      () =>
        model
          .forward(torch.tensor([e.tokens.map(BigInt)]))
          .float()
          .toArray() as number[][][],
    ),
  )[0] as number[][];
  const out: number[] = [];
  for (let t = e.promptLength; t < e.tokens.length; t++) {
    const z = (logits[t - 1] as number[]).map((x) => x / temperature);
    const max = Math.max(...z);
    const logSum = max + Math.log(z.reduce((a, x) => a + Math.exp(x - max), 0));
    out.push((z[e.tokens[t] as number] as number) - logSum);
  }
  return out;
}

/** Captures what the policy loss is given (registered here: the trainer treats it as any plug-in). */
const captured: { logprob: number[][]; oldLogprob: number[][] } = { logprob: [], oldLogprob: [] };
POLICY_LOSS_FN.register({
  name: 'test_capture',
  description: 'test plug-in: records logprob and oldLogprob, loss −mean log π',
  defaults: {},
  run(input) {
    captured.logprob = input.logprob.detach().toArray() as number[][];
    captured.oldLogprob = (input.oldLogprob as torch.Tensor).toArray() as number[][];
    return { loss: input.logprob.mul(input.actionMask.float()).sum().neg(), metrics: {} };
  },
});

describe('per-experience sampling temperature', () => {
  test('rows sampled at 0.5 and 1.3 (and unsampled rows at 1) in one batch get the log-probs of their own temperature', () => {
    const model = loadPolicy(toy.dir);
    // rows 0 and 1 share a prompt (the packed shared-prefix path); rows 1 and 2 carry no rollout log-probs, so π_old
    // is recomputed for them at their temperatures
    const rows: Experience[] = [
      { eid: 'a', tokens: [5, 11, 12, 40, 41, 7], promptLength: 3, temperature: 0.5, logprobs: [-1, -1, -1] },
      { eid: 'b', tokens: [5, 11, 12, 9, 8], promptLength: 3, temperature: 1.3 },
      { eid: 'c', tokens: [6, 13, 2, 3, 4, 30], promptLength: 2 },
    ].map((e) => ({ ...e, advantages: new Array<number>(e.tokens.length - e.promptLength).fill(1), info: {} }));
    const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', policy_loss_fn: 'test_capture', kl_loss_fn: 'none' });
    const optimizer = new torch.SGD([...model.parameters().values()], { lr: 0 });
    new TrainStep({ model, optimizer, algorithm }).run(rows);
    const temperatures = [0.5, 1.3, 1];
    rows.forEach((e, b) => {
      const expected = independentLogprobs(model, e, temperatures[b] as number);
      const atOne = independentLogprobs(model, e, 1);
      expected.forEach((x, j) => {
        const got = (captured.logprob[b] as number[])[j] as number;
        assert.ok(Math.abs(got - x) < 1e-5, `row ${b} token ${j}: log π ${got}, expected ${x} at T = ${temperatures[b]}`);
        if (b > 0) {
          const old = (captured.oldLogprob[b] as number[])[j] as number;
          assert.ok(Math.abs(old - x) < 1e-5, `row ${b} token ${j}: π_old ${old}, expected ${x}`);
        }
        // the temperatures differ enough from 1 for a wrong one to show
        if (b < 2)
          assert.ok(Math.abs(x - (atOne[j] as number)) > 1e-4, `row ${b}: T makes no difference (${x - (atOne[j] as number)})`);
      });
    });
    model.dispose();
  });

  test('tokenLogProbs with one temperature per row equals each row at its own temperature', () => {
    const model = loadPolicy(toy.dir);
    torch.scope(() =>
      torch.noGrad(() => {
        const ids = torch.tensor([
          [5n, 11n, 40n, 41n],
          [6n, 13n, 2n, 3n],
        ]);
        const both = tokenLogProbs(model, ids, { temperature: [0.5, 1.3] }).logProbs;
        const first = tokenLogProbs(model, ids.narrow(0, 0, 1), { temperature: 0.5 }).logProbs;
        const second = tokenLogProbs(model, ids.narrow(0, 1, 1), { temperature: 1.3 }).logProbs;
        const diff = both
          .sub(torch.cat([first, second], 0))
          .abs()
          .max()
          .item();
        assert.ok(diff < 1e-6, `per-row temperatures differ from separate calls by ${diff}`);
        assert.throws(() => tokenLogProbs(model, ids, { temperature: [0.5] }), /1 per-row temperatures for 2 rows/);
        assert.throws(() => tokenLogProbs(model, ids, { temperature: [0.5, 0] }), /temperature\[1\] must be a finite number > 0/);
      }),
    );
    model.dispose();
  });

  test('the model handle records the temperature the engine took logprobs at', async () => {
    const requests: GenerateRequest[] = [];
    const backend: RolloutBackend = {
      tokenizer: null,
      async generate(request): Promise<GenerateResult> {
        requests.push(request);
        return {
          promptIds: [1, 2],
          completions: [{ index: 0, tokenIds: [3], logprobs: [-0.5], text: null, finishReason: 'stop', stopReason: 3 }],
        };
      },
      chat: () => Promise.reject(new Error('not used')),
    };
    const handle = new EngineModelHandle(backend);
    const temperatureOf = async (request: GenerateRequest) => {
      const result = await handle.generate(request);
      return handle.toExperience(result.completions[0] as GenerateResult['completions'][number]).temperature;
    };
    assert.equal(await temperatureOf({ promptIds: [1, 2], temperature: 0.7, topK: 5, topP: 0.9 }), 0.7);
    assert.equal(await temperatureOf({ promptIds: [1, 2], temperature: 1.3 }), 1.3);
    // greedy: the engine records log_softmax(logits) (τ = 1); unset: the default temperature 1
    assert.equal(await temperatureOf({ promptIds: [1, 2], temperature: 0 }), 1);
    assert.equal(await temperatureOf({ promptIds: [1, 2] }), 1);
    assert.equal(requests.length, 4);
  });
});
