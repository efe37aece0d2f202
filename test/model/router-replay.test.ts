// Router replay (../../src/model/moe.ts, R3): a forward handed the experts recorded for its tokens routes them
// through those experts, weighted by the current router. On the weights that recorded them it reproduces the
// forward exactly; after a router change that flips routing decisions the replayed forward still goes through the
// recorded experts (and its log-probs differ from routing anew), and the gradient reaches only those experts.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CausalLM } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { fixturesDir, maxAbsDiff } from './helpers/fixtures.js';

const dir = `${fixturesDir}qwen3-moe`; // layers 0 and 2 sparse, 8 experts, top-2
const ids = () => torch.tensor([[3, 17, 5, 42, 9, 11, 2, 30]], { dtype: 'int64' });

let model: CausalLM;
before(() => {
  model = CausalLM.load(dir, { requiresGrad: true });
});
after(() => model.dispose());

/** The forward's log-probs [1, T, V] and each sparse layer's chosen experts [T, k], optionally replaying `replay`. */
function run(replay?: (torch.Tensor | null)[]): { logProbs: torch.Tensor; experts: (torch.Tensor | null)[] } {
  const experts: (torch.Tensor | null)[] = [];
  const logits = model.forward(ids(), {
    onRouting: (layer, routing) => {
      experts[layer] = torch.keep(routing.experts);
    },
    ...(replay ? { replayRouting: replay } : {}),
  });
  return { logProbs: logits.logSoftmax(-1), experts };
}

test('replaying the routing on the weights that recorded it gives the same log-probs; -1 rows route themselves', () => {
  torch.noGrad(() =>
    torch.scope(() => {
      const recorded = run();
      assert.deepEqual(
        Array.from({ length: 3 }, (_, layer) => recorded.experts[layer] !== undefined),
        [true, false, true],
      );
      const replayed = run(recorded.experts);
      assert.equal(maxAbsDiff(replayed.logProbs, recorded.logProbs), 0);
      // half the tokens without a record: they pick the same experts themselves
      const partial = recorded.experts.map((e) => (e ? e.clone() : null));
      for (const e of partial) e?.narrow(0, 0, 4).fill_(-1);
      const mixed = run(partial);
      assert.ok(maxAbsDiff(mixed.logProbs, recorded.logProbs) < 1e-6);
      assert.deepEqual(mixed.experts[0]?.toArray(), recorded.experts[0]?.toArray());
    }),
  );
});

test('after a router change that flips routing, replay keeps the recorded experts and the gradient reaches only them', () => {
  const router = model.parameters().get('model.layers.0.mlp.gate.weight') as torch.Tensor;
  const original = torch.keep(torch.noGrad(() => router.clone()));
  try {
    torch.scope(() => {
      const recorded = torch.noGrad(() => run());
      torch.noGrad(() => router.mul_(-1)); // the least likely experts become the most likely
      const anew = torch.noGrad(() => run());
      assert.notDeepEqual(anew.experts[0]?.toArray(), recorded.experts[0]?.toArray(), 'the change flips layer 0');
      const replayed = run(recorded.experts);
      assert.deepEqual(replayed.experts[0]?.toArray(), recorded.experts[0]?.toArray());
      assert.deepEqual(replayed.experts[2]?.toArray(), recorded.experts[2]?.toArray());
      const gap = maxAbsDiff(replayed.logProbs, anew.logProbs);
      assert.ok(gap > 1e-3, `replayed and re-routed log-probs differ (by ${gap})`);
      // the gradient of the replayed forward: the router's, and only the recorded experts' of layer 0
      replayed.logProbs.select(-1, 7).sum().backward();
      assert.ok((router.grad as torch.Tensor).abs().max().item() > 0, 'the router gets a gradient through the weights');
      const used = new Set(((recorded.experts[0] as torch.Tensor).toArray() as number[][]).flat());
      for (let e = 0; e < 8; e++) {
        const grad = model.parameters().get(`model.layers.0.mlp.experts.${e}.up_proj.weight`)?.grad ?? null;
        const moved = grad !== null && grad.abs().max().item() > 0;
        assert.equal(moved, used.has(e), `expert ${e}: ${used.has(e) ? 'recorded' : 'not recorded'}`);
      }
    });
  } finally {
    torch.noGrad(() => router.copy_(original));
    original.dispose();
    for (const p of model.parameters().values()) p.grad = null;
  }
});

test('a replay of the wrong shape is refused, naming the shapes', () => {
  torch.noGrad(() =>
    torch.scope(() => {
      const bad = torch.zeros([3, 2], { dtype: 'int64' });
      assert.throws(() => run([bad, null, null]), /router replay: \[3, 2\] recorded experts for 8 tokens of top-2 routing/);
    }),
  );
});
