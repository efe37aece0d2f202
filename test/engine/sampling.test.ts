// The sampling functions on crafted logits: which tokens top-k / top-p / min-p allow (hand-computed sets), that
// draws never leave them, greedy and top-k = 1, the recorded log-probabilities, seeds, and parameter checks.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import {
  prepareSampling,
  resolveSamplingParams,
  type SamplerRow,
  type SamplingParams,
  SamplingParamsError,
  sampleTokens,
  truncationInputs,
  truncationMask,
} from '../../src/engine/index.js';
import * as torch from '../../src/torch/index.js';
import { HOST_TRANSFERS, recordNativeCalls } from '../helpers/native-calls.js';

// probabilities of one crafted row, descending by construction except for the shuffled order below
//   token:  0     1     2     3     4     5
//   prob:  0.05  0.40  0.02  0.25  0.20  0.08
const PROBS = [0.05, 0.4, 0.02, 0.25, 0.2, 0.08];
const logitsOf = (probs: number[]) => torch.tensor([probs.map(Math.log)]); // [1, V], softmax gives probs back

before(() => torch.setNumThreads(1)); // tiny tensors: OpenMP threads only add contention

const params = (p: Partial<SamplingParams>): SamplingParams => resolveSamplingParams({ temperature: 1, ...p });

/** The tokens a single-row mask keeps. */
function kept(probs: number[], p: Partial<SamplingParams>): number[] {
  return torch.scope(() => {
    const removed = truncationMask(logitsOf(probs), [params(p)]).toArray() as boolean[][];
    return (removed[0] as boolean[]).flatMap((r, i) => (r ? [] : [i]));
  });
}

/** `draws` tokens drawn from copies of one row, each copy with its own seeded generator. */
function draw(probs: number[], p: Partial<SamplingParams>, draws: number, seed = 0): number[] {
  return torch.scope(() => {
    const logits = logitsOf(probs).expand([draws, probs.length]);
    const rows = Array.from({ length: draws }, (_, i) => ({ params: params(p), generator: new torch.Generator(seed + i) }));
    return sampleTokens(logits, rows).tokens.toArray() as number[];
  });
}

test('top-k keeps the k most likely tokens', () => {
  assert.deepEqual(kept(PROBS, { topK: 1 }), [1]);
  assert.deepEqual(kept(PROBS, { topK: 3 }), [1, 3, 4]);
  assert.deepEqual(kept(PROBS, { topK: 0 }), [0, 1, 2, 3, 4, 5]);
  assert.deepEqual(kept(PROBS, { topK: 100 }), [0, 1, 2, 3, 4, 5]);
});

test('top-p keeps the smallest set of most likely tokens whose mass reaches p', () => {
  // sorted: 1 (0.40), 3 (0.25 → 0.65), 4 (0.20 → 0.85), 5 (0.08 → 0.93), 0 (0.05 → 0.98), 2 (0.02 → 1.00)
  assert.deepEqual(kept(PROBS, { topP: 0.3 }), [1]);
  assert.deepEqual(kept(PROBS, { topP: 0.6 }), [1, 3]);
  assert.deepEqual(kept(PROBS, { topP: 0.8 }), [1, 3, 4]);
  assert.deepEqual(kept(PROBS, { topP: 0.9 }), [1, 3, 4, 5]);
  assert.deepEqual(kept(PROBS, { topP: 1 }), [0, 1, 2, 3, 4, 5]);
  // after top-k = 2 the mass renormalises to 0.40/0.65 = 0.615, 0.25/0.65 = 0.385: p = 0.6 now keeps token 1 alone
  assert.deepEqual(kept(PROBS, { topK: 2, topP: 0.6 }), [1]);
  assert.deepEqual(kept(PROBS, { topK: 2, topP: 0.62 }), [1, 3]);
});

test('min-p keeps tokens at least minP times as likely as the most likely one', () => {
  // p_max = 0.40: minP 0.45 → threshold 0.18 keeps 0.40, 0.25, 0.20; minP 0.15 → 0.06 keeps 0.08 too
  assert.deepEqual(kept(PROBS, { minP: 0.45 }), [1, 3, 4]);
  assert.deepEqual(kept(PROBS, { minP: 0.15 }), [1, 3, 4, 5]);
  assert.deepEqual(kept(PROBS, { minP: 1 }), [1]);
  assert.deepEqual(kept(PROBS, { minP: 0.45, topK: 2 }), [1, 3]);
});

/** The kept set by the definition, in float64 JavaScript: sort, top-k, renormalise, top-p, min-p. */
function referenceKept(logits: number[], p: SamplingParams): Set<number> {
  const order = logits.map((z, i) => ({ z, i })).sort((a, b) => b.z - a.z);
  const top = p.topK > 0 ? order.slice(0, p.topK) : order;
  const max = top[0]?.z ?? 0;
  const weights = top.map(({ z }) => Math.exp(z - max));
  const total = weights.reduce((a, b) => a + b, 0);
  const keep = new Set<number>();
  let before = 0;
  top.forEach(({ i }, r) => {
    const q = (weights[r] as number) / total;
    if ((p.topP >= 1 || before < p.topP) && q >= p.minP * ((weights[0] as number) / total)) keep.add(i);
    before += q;
  });
  return keep;
}

test('a large vocabulary: the candidate shortcut (and its fallback to more candidates) and the full sort give the defined sets', () => {
  // V = 5000 > 1024 candidates; spread 1 needs more than 1024 tokens for top-p 0.9 (fallback), spreads 3 and 6 fewer
  const vocab = 5000;
  const settings: Partial<SamplingParams>[] = [
    { topP: 0.9 },
    { topP: 0.5, topK: 3000 },
    { topK: 40 },
    { minP: 0.05 },
    { topP: 0.95, minP: 0.01 },
    {},
  ];
  for (const spread of [1, 3, 6]) {
    torch.scope(() => {
      const logits = torch.randn([settings.length, vocab], { generator: new torch.Generator(spread) }).mul(spread);
      const rows = logits.toArray() as number[][];
      const all = settings.map(params);
      const byCandidates = truncationMask(logits, all);
      assert.deepEqual(
        truncationMask(logits, truncationInputs(all, 'cpu', 'candidates')).toArray(),
        byCandidates.toArray(),
        'the CPU default',
      );
      // the same sets, bit for bit: both keep a token by the same float32 sums over the same descending order
      assert.deepEqual(truncationMask(logits, truncationInputs(all, 'cpu', 'sort')).toArray(), byCandidates.toArray());
      const removed = byCandidates.toArray() as boolean[][];
      all.forEach((p, b) => {
        const expected = referenceKept(rows[b] as number[], p);
        const got = new Set((removed[b] as boolean[]).flatMap((r, i) => (r ? [] : [i])));
        const differ = [...expected].filter((i) => !got.has(i)).length + [...got].filter((i) => !expected.has(i)).length;
        // float32 vs float64 rounding may move a token sitting on a boundary; nothing more
        assert.ok(
          differ <= 1,
          `spread ${spread}, ${JSON.stringify(p)}: kept ${got.size}, expected ${expected.size}, ${differ} differ`,
        );
        if (p.topP === 0.9) assert.ok(spread !== 1 || expected.size > 1024, 'the flat row needs the fallback');
      });
    });
  }
});

test('draws never leave the allowed set, and cover it', () => {
  for (const [p, allowed] of [
    [{ topP: 0.8 }, [1, 3, 4]],
    [{ minP: 0.15 }, [1, 3, 4, 5]],
    [{ topK: 2, temperature: 3 }, [1, 3]],
    [{ topP: 0.9, minP: 0.45 }, [1, 3, 4]],
  ] as const) {
    const seen = new Set(draw(PROBS, p, 400));
    assert.deepEqual([...seen].sort(), [...allowed], `${JSON.stringify(p)}: drew ${[...seen].sort()}`);
  }
});

test('draws follow the (truncated, renormalised) distribution', () => {
  // 4000 draws: the standard error of a share is at most 0.008, the bound 0.03 is ~4 of them
  for (const [p, expected] of [
    [{}, PROBS],
    [{ topK: 2 }, [0, 0.4 / 0.65, 0, 0.25 / 0.65, 0, 0]],
    [{ temperature: 0.5 }, PROBS.map((q) => q ** 2 / PROBS.reduce((sum, r) => sum + r ** 2, 0))],
  ] as const) {
    const draws = draw(PROBS, p, 4000, 7);
    expected.forEach((q, token) => {
      const share = draws.filter((t) => t === token).length / draws.length;
      assert.ok(Math.abs(share - q) < 0.03, `${JSON.stringify(p)}: token ${token} drawn ${share}, expected ${q}`);
    });
  }
});

test('temperature 0 and top-k = 1 both pick the argmax; rows are independent', () => {
  torch.scope(() => {
    const logits = torch.randn([5, 50], { generator: new torch.Generator(3) });
    const argmax = logits.argmax(-1).toArray();
    const greedy = sampleTokens(
      logits,
      Array.from({ length: 5 }, () => ({ params: params({ temperature: 0 }), generator: null })),
    );
    assert.deepEqual(greedy.tokens.toArray(), argmax);
    const topOne = sampleTokens(
      logits,
      Array.from({ length: 5 }, (_, i) => ({
        params: params({ topK: 1, temperature: 0.5 + i }),
        generator: new torch.Generator(i),
      })),
    );
    assert.deepEqual(topOne.tokens.toArray(), argmax);
  });
});

test('recorded log-probs are log_softmax(logits / temperature) before truncation (temperature 0: at 1)', () => {
  torch.scope(() => {
    const logits = torch.randn([3, 40], { generator: new torch.Generator(11) });
    const rows: SamplerRow[] = [
      { params: params({ temperature: 0 }), generator: null },
      { params: params({ temperature: 0.7, topK: 3 }), generator: new torch.Generator(1) },
      { params: params({ temperature: 1.3, topP: 0.5, minP: 0.1 }), generator: new torch.Generator(2) },
    ];
    const { tokens, logprobs } = sampleTokens(logits, rows);
    const ids = tokens.toArray() as number[];
    const got = logprobs.toArray() as number[];
    [1, 0.7, 1.3].forEach((temperature, b) => {
      const row = logits.select(0, b).div(temperature).logSoftmax(-1).toArray() as number[];
      assert.ok(Math.abs((got[b] as number) - (row[ids[b] as number] as number)) < 1e-6, `row ${b}`);
    });
  });
});

test('bf16 logits are sampled in float32', () => {
  torch.scope(() => {
    const logits = torch.randn([2, 30], { generator: new torch.Generator(5) }).bfloat16();
    const { logprobs } = sampleTokens(logits, [
      { params: params({ temperature: 0 }), generator: null },
      { params: params({ temperature: 0.9 }), generator: new torch.Generator(0) },
    ]);
    assert.equal(logprobs.dtype, 'float32');
  });
});

test("a seed fixes a row's draws, whatever the other rows are", () => {
  const run = (seed: number, others: number) =>
    torch.scope(() => {
      const logits = torch.randn([1 + others, 64], { generator: new torch.Generator(9) });
      const rows: SamplerRow[] = [
        { params: params({ temperature: 1, topP: 0.95 }), generator: new torch.Generator(seed) },
        ...Array.from({ length: others }, (_, i) => ({
          params: params({ temperature: 0.5 + i }),
          generator: new torch.Generator(i),
        })),
      ];
      return Array.from({ length: 20 }, () => (sampleTokens(logits, rows).tokens.toArray() as number[])[0]);
    });
  assert.deepEqual(run(42, 0), run(42, 3));
  assert.notDeepEqual(run(42, 0), run(43, 0));
});

test('sampling parameters are checked', () => {
  assert.deepEqual(resolveSamplingParams({}), { temperature: 1, topK: 0, topP: 1, minP: 0 });
  assert.equal(resolveSamplingParams({ topK: -1 }).topK, 0);
  for (const bad of [
    { temperature: -1 },
    { temperature: Number.NaN },
    { topK: 1.5 },
    { topK: -2 },
    { topP: 0 },
    { topP: 1.1 },
    { minP: -0.1 },
  ]) {
    assert.throws(() => resolveSamplingParams(bad), SamplingParamsError, JSON.stringify(bad));
  }
  assert.throws(() => resolveSamplingParams({ topP: 2 }), /topP must be in \(0, 1\], got 2/);
});

test('a sampler batch prepared ahead (as the engine does, before the forward) samples what the rows give', () => {
  torch.scope(() => {
    const logits = torch.randn([4, 30], { generator: new torch.Generator(31) });
    const rows = (): SamplerRow[] => [
      { params: params({ temperature: 0 }), generator: null },
      { params: params({ temperature: 0.8 }), generator: new torch.Generator(7) },
      { params: params({ temperature: 1.2, topK: 5 }), generator: new torch.Generator(8) },
      { params: params({ temperature: 1 }), generator: new torch.Generator(9) },
    ];
    const direct = sampleTokens(logits, rows());
    const ahead = rows();
    const batch = prepareSampling(ahead, 'cpu');
    assert.deepEqual(batch.sampled, [1, 2, 3]);
    // the uniforms are drawn at once: each drawing row's generator has moved on by one draw
    const fresh = new torch.Generator(7);
    torch.uniformPerGenerator([fresh]);
    assert.deepEqual(
      torch.uniformPerGenerator([ahead[1]?.generator ?? null]).toArray(),
      torch.uniformPerGenerator([fresh]).toArray(),
    );
    const later = sampleTokens(logits, batch);
    assert.deepEqual(later.tokens.toArray(), direct.tokens.toArray());
    assert.deepEqual(later.logprobs.toArray(), direct.logprobs.toArray());
    // every row greedy: nothing drawn, no temperatures
    const greedy = prepareSampling([{ params: params({ temperature: 0 }), generator: null }], 'cpu');
    assert.equal(greedy.uniforms, null);
    assert.equal(greedy.temperatures, null);
    assert.throws(() => sampleTokens(logits.narrow(0, 0, 2), batch), /4 rows of parameters for 2 logit rows/);
  });
});

test('a truncating batch prepared ahead uploads nothing when sampled; the full-sort search reads nothing back either', () => {
  torch.scope(() => {
    // V = 5000 > 1024 candidates, flat logits: the top-p 0.9 row's nucleus needs more than 1024 of them
    const logits = torch.randn([5, 5000], { generator: new torch.Generator(4) });
    const rows = (): SamplerRow[] =>
      [{ topP: 0.9 }, { temperature: 0 }, { topK: 50, topP: 0.8 }, { minP: 0.02, temperature: 0.7 }, {}].map((p, i) => ({
        params: params(p),
        generator: new torch.Generator(60 + i),
      }));
    const direct = sampleTokens(logits, rows());
    for (const nucleus of ['candidates', 'sort'] as const) {
      const batch = prepareSampling(rows(), 'cpu', { nucleus });
      assert.equal(batch.truncation?.nucleus, nucleus);
      const recording = recordNativeCalls(HOST_TRANSFERS);
      let result: ReturnType<typeof sampleTokens>;
      try {
        result = sampleTokens(logits, batch);
      } finally {
        recording.stop();
      }
      const { calls } = recording;
      assert.deepEqual(result.tokens.toArray(), direct.tokens.toArray(), nucleus);
      assert.deepEqual(result.logprobs.toArray(), direct.logprobs.toArray(), nucleus);
      // candidates: one flag read per try (1024, then 8192 > V: the whole vocabulary, no read)
      assert.deepEqual(calls, nucleus === 'sort' ? [] : ['item'], nucleus);
    }
    assert.equal(truncationInputs([params({})], 'cpu').nucleus, 'candidates');
    // off the CPU the nucleus is found by sorting (no host read); rows without truncation make no columns (so no
    // tensor is made on that device here)
    const elsewhere = truncationInputs([params({})], 'cuda:0');
    assert.deepEqual([elsewhere.nucleus, elsewhere.cut, elsewhere.logMinP], ['sort', null, null]);
    assert.equal(prepareSampling(rows().slice(1, 2), 'cpu').truncation, null, 'a greedy row truncates nothing');
    const onOther = {
      ...prepareSampling(rows(), 'cpu'),
      truncation: { ...truncationInputs([params({ topK: 2 })], 'cpu'), device: 'cuda:0' },
    };
    assert.throws(() => sampleTokens(logits, onOther), /sampler batch is on cuda:0, the logits on cpu/);
  });
});

test('on a GPU, rows drawn with CPU generators (the engine gives each row one) draw what they draw on the CPU', {
  skip: torch.cuda.deviceCount() === 0 ? 'no CUDA device visible' : false,
}, () => {
  torch.scope(() => {
    // well-separated probabilities, so that the GPU's float rounding cannot move a draw across a boundary
    const logits = torch.randn([8, 12], { generator: new torch.Generator(21) }).mul(3);
    const rows = (): SamplerRow[] =>
      Array.from({ length: 8 }, (_, i) => ({ params: params({ temperature: 0.9 }), generator: new torch.Generator(100 + i) }));
    const onCpu = sampleTokens(logits, rows()).tokens.toArray();
    const onGpu = sampleTokens(logits.to({ device: 'cuda:0' }), rows());
    assert.equal(onGpu.tokens.device, 'cuda:0');
    assert.deepEqual(onGpu.tokens.to({ device: 'cpu' }).toArray(), onCpu);
    // a generator of the GPU itself still draws on the GPU
    const gpuRows = rows().map((r, i) => ({ ...r, generator: new torch.Generator(100 + i, 'cuda:0') }));
    assert.equal(sampleTokens(logits.to({ device: 'cuda:0' }), gpuRows).tokens.numel, 8);
  });
});
