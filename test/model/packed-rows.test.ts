// Packed rows (use_remove_padding, src/model/packed-rows.ts + packed-attention.ts): the rows of a batch concatenated
// without pads give the padded forward's log-probs, entropy, loss and gradients (1e-5 float32), with prompts shared
// per group or not, chunked or not, with checkpointing; bucketed varlen attention equals per-row attention.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CausalLM, forwardBackward, promptGroups, type TokenLogProbs, tokenLogProbs } from '../../src/model/index.js';
import { attention } from '../../src/model/attention.js';
import { packedAttention, packedPass } from '../../src/model/packed-attention.js';
import * as torch from '../../src/torch/index.js';
import { type FixtureModel, fixturesDir, maxAbsDiff, modelDir } from './helpers/fixtures.js';

/**
 * A GRPO-like batch: 3 prompts of different lengths × 3 responses of different lengths, one row alone, and one
 * one-token prompt (no prefix to share). Prompts left-padded to end at column promptWidth, responses right-padded.
 */
function groupedRows() {
  const prompts = [[5, 9, 14, 22, 31, 7], [40, 41, 42], [60, 61, 62, 63, 64], [70, 71], [80]];
  const rows: { prompt: number[]; response: number[] }[] = [];
  prompts.forEach((prompt, g) => {
    for (let r = 0; r < (g >= 3 ? 1 : 3); r++) {
      const n = 1 + ((g * 5 + r * 3) % 7);
      rows.push({ prompt, response: Array.from({ length: n }, (_, i) => 3 + ((g * 31 + r * 17 + i * 7) % 110)) });
    }
  });
  const promptWidth = 6;
  const L = promptWidth + Math.max(...rows.map((r) => r.response.length));
  const idData = new BigInt64Array(rows.length * L);
  const maskData = new BigInt64Array(rows.length * L);
  rows.forEach(({ prompt, response }, b) => {
    const start = promptWidth - prompt.length;
    [...prompt, ...response].forEach((t, i) => {
      idData[b * L + start + i] = BigInt(t);
      maskData[b * L + start + i] = 1n;
    });
  });
  return {
    ids: torch.tensor(idData, { shape: [rows.length, L] }),
    mask: torch.tensor(maskData, { shape: [rows.length, L] }),
    promptWidth,
    packedRows: { promptLengths: rows.map((r) => r.prompt.length), responseLengths: rows.map((r) => r.response.length) },
    groups: promptGroups([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4]),
    temperatures: rows.map((_, b) => 0.6 + 0.05 * b),
  };
}

for (const name of ['qwen2-tied', 'qwen3-untied', 'llama3-rope'] as FixtureModel[]) {
  test(`${name}: packed rows give the padded log-probs, entropy, loss and gradients`, () => {
    const model = CausalLM.load(modelDir(name), { requiresGrad: true });
    const params = [...model.parameters().entries()];
    torch.scope(() => {
      const { ids, mask, promptWidth, packedRows, groups, temperatures } = groupedRows();
      const responseMask = mask
        .slice(1, 1)
        .float()
        .mul(
          torch
            .arange(ids.size(1) - 1)
            .ge(promptWidth - 1)
            .float(),
        );
      const loss = ({ logProbs, entropy }: TokenLogProbs) => {
        const advantage = torch.linspace(-1, 1, logProbs.size(0)).unsqueeze(1);
        const count = responseMask.sum();
        const pg = logProbs.mul(advantage).mul(responseMask).sum().div(count).neg();
        return pg.sub((entropy as torch.Tensor).mul(responseMask).sum().div(count).mul(0.01));
      };
      const base = { attentionMask: mask, entropy: true, temperature: temperatures, promptWidth };
      const padded = tokenLogProbs(model, ids, { ...base, necs: true });
      for (const known of [{}, { promptGroups: groups }]) {
        const packed = tokenLogProbs(model, ids, { ...base, necs: true, packedRows, ...known });
        assert.deepEqual(packed.logProbs.shape, padded.logProbs.shape);
        for (const field of ['logProbs', 'entropy', 'necs'] as const) {
          const diff = maxAbsDiff(packed[field] as torch.Tensor, padded[field] as torch.Tensor, responseMask.bool());
          assert.ok(diff < 1e-5, `${field}: ${diff}`);
          const outside = (packed[field] as torch.Tensor).mul(responseMask.logicalNot().float()).abs().max().item();
          assert.equal(outside, 0, `${field}: 0 outside the responses`);
        }
      }
      const gradients = (options: Record<string, unknown>) => {
        for (const [, p] of params) p.grad = null;
        const result = forwardBackward(model, ids, loss, { ...base, ...options });
        return { loss: result.loss.item(), grads: new Map(params.map(([n, p]) => [n, (p.grad as torch.Tensor).clone()])) };
      };
      const reference = gradients({});
      for (const options of [
        { packedRows },
        { packedRows, promptGroups: groups, chunkSize: 3 },
        { packedRows, checkpoint: true },
      ]) {
        const got = gradients(options);
        const label = Object.keys(options).join('+');
        assert.ok(Math.abs(got.loss - reference.loss) < 1e-6, `${label}: loss ${got.loss} vs ${reference.loss}`);
        for (const [n, ref] of reference.grads) {
          const scale = Math.max(1e-3, ref.abs().max().item());
          const diff = maxAbsDiff(got.grads.get(n) as torch.Tensor, ref) / scale;
          assert.ok(diff < 1e-5, `${n} (${label}): ${diff}`);
        }
      }
      for (const [, p] of params) p.grad = null;
    });
    model.dispose();
  });
}

test('packed attention: causal and masked units in buckets equal attention row by row, values and gradients', () => {
  torch.manualSeed(3);
  // group 0: a prefix of 40 with short (masked) and long (causal) continuations; group 1: no prefix; group 2: a
  // prefix of 7 whose rows are all short (below SHORT_ATTENTION: the prefix on its own, its rows masked); group 3: a
  // prefix nobody continues (a causal unit of its own)
  const layout = {
    prefixLengths: [40, 0, 7, 5],
    continuationLengths: [1, 3, 90, 120, 5, 2, 64, 7],
    rowPrefix: [0, 0, 0, 1, 2, 2, 1, 2],
  };
  const prefixStart = [0, 40, 40, 47];
  const tokens = [...layout.prefixLengths, ...layout.continuationLengths].reduce((a, n) => a + n, 0);
  const [heads, kvHeads, d] = [4, 2, 8];
  const inputs = () =>
    [torch.randn([1, heads, tokens, d]), torch.randn([1, kvHeads, tokens, d]), torch.randn([1, kvHeads, tokens, d])].map((t) =>
      torch.keep(t.requiresGrad_()),
    ) as [torch.Tensor, torch.Tensor, torch.Tensor];
  const [q, k, v] = inputs();
  const upstream = torch.keep(torch.randn([1, tokens, heads * d]));
  /** The output and q, k, v's gradients of a weighted sum of it. */
  const run = (attend: () => torch.Tensor) =>
    torch.scope(() => {
      for (const t of [q, k, v]) t.grad = null;
      const out = attend();
      out.mul(upstream).sum().backward();
      return [out.detach(), ...[q, k, v].map((t) => (t.grad as torch.Tensor).clone())].map((t) => torch.keep(t));
    });
  // row by row: each prefix causal over itself, each continuation over its context (all of it), then causal
  const reference = run(() => {
    const expected = layout.prefixLengths.map((p, g) => {
      const own = (t: torch.Tensor) => t.narrow(2, prefixStart[g] as number, p);
      return p === 0 ? null : attention(own(q), own(k), own(v), null);
    });
    let at = 52;
    layout.continuationLengths.forEach((s, b) => {
      const g = layout.rowPrefix[b] as number;
      const c = layout.prefixLengths[g] as number;
      const keys = (t: torch.Tensor) => torch.cat([t.narrow(2, prefixStart[g] as number, c), t.narrow(2, at, s)], 2);
      const causal = torch.ones([s, s], { dtype: 'bool' }).tril(0);
      const mask = torch.cat([torch.ones([s, c], { dtype: 'bool' }), causal], 1).view([1, 1, s, c + s]);
      expected.push(attention(q.narrow(2, at, s), keys(k), keys(v), mask));
      at += s;
    });
    return torch.cat(
      expected.filter((t) => t !== null).map((t) => t.transpose(1, 2).reshape([1, -1, heads * d])),
      1,
    );
  });
  const rules = [
    { name: 'default', rule: undefined, calls: [2, 8] },
    { name: 'one call per unit', rule: { waste: 1, callArea: -1 }, calls: [10, 10] },
    { name: 'one call per kind', rule: { waste: 1e9, callArea: 1e18 }, calls: [2, 2] },
    { name: 'masked continuations only', rule: { waste: 1.25, callArea: 4096, causalUnits: false }, calls: [2, 11] },
    { name: 'rows moved by index', rule: { waste: 1, callArea: 4096, maxPlanPieces: 0 }, calls: [2, 8] },
    { name: 'masked, by index', rule: { waste: 1, callArea: -1, causalUnits: false, maxPlanPieces: 0 }, calls: [11, 11] },
  ];
  for (const { name, rule, calls } of rules) {
    const pass = packedPass(layout, tokens, 'cpu', rule);
    const n = pass.buckets.length;
    assert.ok(n >= (calls[0] as number) && n <= (calls[1] as number), `${name}: ${n} buckets`);
    assert.equal(pass.indices !== null, rule?.maxPlanPieces === 0, `${name}: rows moved by index or by plan`);
    const got = run(() => packedAttention(q, k, v, pass));
    ['output', 'q.grad', 'k.grad', 'v.grad'].forEach((what, i) => {
      const diff = maxAbsDiff(got[i] as torch.Tensor, reference[i] as torch.Tensor);
      assert.ok(diff < 1e-5, `${name}: ${what} differs by ${diff}`);
    });
    for (const t of got) t.dispose();
  }
  for (const t of [q, k, v, upstream, ...reference]) t.dispose();
});

test('packed rows: lengths that do not fit the batch are errors naming the row', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  torch.scope(() => {
    const { ids, mask, promptWidth, packedRows, groups } = groupedRows();
    const base = { attentionMask: mask, promptWidth, promptGroups: groups };
    const rows = (change: (r: { promptLengths: number[]; responseLengths: number[] }) => void) => {
      const r = { promptLengths: [...packedRows.promptLengths], responseLengths: [...packedRows.responseLengths] };
      change(r);
      return r;
    };
    assert.throws(
      () => tokenLogProbs(model, ids, { ...base, packedRows: rows((r) => r.responseLengths.pop()) }),
      /packedRows: 11 prompt and 10 response lengths for a batch of 11/,
    );
    assert.throws(
      () => tokenLogProbs(model, ids, { ...base, packedRows: rows((r) => (r.responseLengths[2] = 99)) }),
      /packedRows: row 2's response length 99 is not in \[1, 7\]/,
    );
    assert.throws(
      () => tokenLogProbs(model, ids, { ...base, packedRows: rows((r) => (r.promptLengths[4] = 2)) }),
      /packedRows: row 4 has a prompt of 2 tokens, its prompt group 1 one of 3/,
    );
    assert.throws(
      () => tokenLogProbs(model, ids, { ...base, packedRows, positionIds: ids }),
      /positions restart per row; give no positionIds/,
    );
  });
  model.dispose();
});

test('qwen3-moe with router replay: packed rows route each token through its recorded experts, as padded', () => {
  const model = CausalLM.load(`${fixturesDir}qwen3-moe`); // layers 0 and 2 sparse, 8 experts, top-2
  torch.scope(() => {
    torch.manualSeed(5);
    const { ids, mask, promptWidth, packedRows, groups } = groupedRows();
    const [B, L] = ids.shape as [number, number];
    const records = () => {
      const first = torch.randint(0, 4, [B, L, 1]);
      return torch.cat([first, first.add(4)], 2); // two distinct experts per token
    };
    const replay = [records(), null, records()];
    const base = { attentionMask: mask, promptWidth, promptGroups: groups, replayRouting: replay };
    const where = mask
      .slice(1, 1)
      .bool()
      .logicalAnd(torch.arange(L - 1).ge(promptWidth - 1));
    const padded = tokenLogProbs(model, ids, base).logProbs;
    const packed = tokenLogProbs(model, ids, { ...base, packedRows }).logProbs;
    assert.ok(maxAbsDiff(packed, padded, where) < 1e-5, `${maxAbsDiff(packed, padded, where)}`);
    const routed = tokenLogProbs(model, ids, { attentionMask: mask, promptWidth, promptGroups: groups, packedRows }).logProbs;
    assert.ok(maxAbsDiff(routed, packed, where) > 1e-4, 'the records are read');
  });
  model.dispose();
});
