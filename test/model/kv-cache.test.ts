// The KV cache: incremental decoding equals one full forward (and transformers' own cached decoding), rows in
// different slots at different lengths, padded prefills, slot reset and reuse, and precise errors.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CausalLM, checkKVCacheFits, KVCache, kvCacheSize } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, FIXTURE_MODELS, get, loadReference, maxAbsDiff, modelDir } from './helpers/fixtures.js';

const TOLERANCE = 1e-4;

/** Token ids [1, n] from a row of a reference id tensor. */
const row = (ids: torch.Tensor, b: number, start: number, length: number) =>
  ids.select(0, b).narrow(0, start, length).unsqueeze(0);

for (const [name, layout] of FIXTURE_MODELS.flatMap((n) => [[n, 'training'] as const, [n, 'inference'] as const])) {
  test(`${name} (${layout} layout): prefill then one token at a time equals the full forward and transformers' cached decoding`, () => {
    const model = CausalLM.load(modelDir(name), { layout });
    const ref = loadReference(name);
    const cache = model.createKVCache({ slots: 2, maxLength: 12 });
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          const ids = get(ref, 'decode.ids'); // [2, 10]
          const steps = [model.forward(ids.narrow(1, 0, 4), { cache })];
          for (let t = 4; t < 10; t++) steps.push(model.forward(ids.narrow(1, t, 1), { cache }));
          const incremental = torch.cat(steps, 1);
          const full = model.forward(ids);
          assert.ok(maxAbsDiff(incremental, full) < TOLERANCE, `incremental vs full: ${maxAbsDiff(incremental, full)}`);
          assert.ok(maxAbsDiff(incremental, get(ref, 'decode.logits')) < TOLERANCE);
          assert.equal(cache.length(0), 10);
          assert.equal(cache.tokenCount(1), 10);
        }),
      );
    } finally {
      cache.dispose();
      model.dispose();
      disposeAll(ref.values());
    }
  });
}

describe('slots', () => {
  let model: CausalLM;
  let ref: Map<string, torch.Tensor>;
  let ids: torch.Tensor;
  let full: torch.Tensor; // full-forward logits of both decode rows [2, 10, V]
  before(() => {
    model = CausalLM.load(modelDir('qwen3-untied'));
    ref = loadReference('qwen3-untied');
    ids = get(ref, 'decode.ids');
    full = torch.keep(model.forward(ids));
  });
  after(() => {
    model.dispose();
    disposeAll(ref.values());
    full.dispose();
  });

  test('rows at different lengths in their own slots decode together correctly (slots in any order)', () => {
    for (const [slotA, slotB] of [
      [0, 1],
      [2, 0],
    ] as const) {
      const cache = model.createKVCache({ slots: 3, maxLength: 16 });
      try {
        torch.scope(() => {
          // row 0 prefilled with 6 tokens in slotA, row 1 with 3 tokens in slotB, each in its own forward
          const a = model.forward(row(ids, 0, 0, 6), { cache, slots: [slotA] });
          const b = model.forward(row(ids, 1, 0, 3), { cache, slots: [slotB] });
          assert.ok(maxAbsDiff(a.squeeze(0), full.select(0, 0).narrow(0, 0, 6)) < TOLERANCE);
          assert.ok(maxAbsDiff(b.squeeze(0), full.select(0, 1).narrow(0, 0, 3)) < TOLERANCE);
          assert.deepEqual([cache.length(slotA), cache.length(slotB)], [6, 3]);
          // then both decode in one batch, each at its own position
          for (let step = 0; step < 4; step++) {
            const next = torch.cat([row(ids, 0, 6 + step, 1), row(ids, 1, 3 + step, 1)], 0);
            const logits = model.forward(next, { cache, slots: [slotA, slotB] });
            const d0 = maxAbsDiff(logits.select(0, 0).squeeze(0), full.select(0, 0).select(0, 6 + step));
            const d1 = maxAbsDiff(logits.select(0, 1).squeeze(0), full.select(0, 1).select(0, 3 + step));
            assert.ok(d0 < TOLERANCE && d1 < TOLERANCE, `slots [${slotA}, ${slotB}] step ${step}: ${d0}, ${d1}`);
          }
          assert.deepEqual([cache.length(slotA), cache.length(slotB)], [10, 7]);
        });
      } finally {
        cache.dispose();
      }
    }
  });

  test('a reset slot is reused by a new sequence while the other slot keeps decoding', () => {
    const cache = model.createKVCache({ slots: 2, maxLength: 12 });
    try {
      torch.scope(() => {
        model.forward(row(ids, 0, 0, 8), { cache, slots: [0] });
        model.forward(row(ids, 0, 0, 5), { cache, slots: [1] }); // some other request, then it leaves
        cache.reset(1);
        assert.equal(cache.length(1), 0);
        const b = model.forward(row(ids, 1, 0, 4), { cache, slots: [1] });
        assert.ok(maxAbsDiff(b.squeeze(0), full.select(0, 1).narrow(0, 0, 4)) < TOLERANCE);
        const next = torch.cat([row(ids, 0, 8, 1), row(ids, 1, 4, 1)], 0);
        const logits = model.forward(next, { cache, slots: [0, 1] });
        assert.ok(maxAbsDiff(logits.select(0, 0).squeeze(0), full.select(0, 0).select(0, 8)) < TOLERANCE);
        assert.ok(maxAbsDiff(logits.select(0, 1).squeeze(0), full.select(0, 1).select(0, 4)) < TOLERANCE);
      });
    } finally {
      cache.dispose();
    }
  });

  test('copySlot: slots copied from a prefilled one (left-padded, over a longer old sequence) decode like it', () => {
    const cache = model.createKVCache({ slots: 3, maxLength: 12 });
    try {
      torch.scope(() => {
        model.forward(row(ids, 1, 0, 9), { cache, slots: [2] }); // an old, longer sequence: must not leak into the copy
        cache.reset(2);
        const padded = torch.cat([torch.zeros([1, 2], { dtype: 'int64' }), row(ids, 0, 0, 5)], 1);
        const mask = torch.tensor([0, 0, 1, 1, 1, 1, 1], { dtype: 'int64', shape: [1, 7] });
        model.forward(padded, { cache, slots: [0], attentionMask: mask });
        cache.copySlot(0, [1, 2]);
        assert.deepEqual([cache.length(2), cache.tokenCount(2)], [7, 5]);
        const next = torch.cat([row(ids, 0, 5, 1), row(ids, 0, 5, 1), row(ids, 0, 5, 1)], 0);
        const logits = model.forward(next, { cache, slots: [0, 1, 2] });
        for (let b = 0; b < 3; b++) {
          assert.ok(maxAbsDiff(logits.select(0, b).squeeze(0), full.select(0, 0).select(0, 5)) < TOLERANCE, `slot ${b}`);
        }
        assert.throws(() => cache.copySlot(0, [0]), /onto itself/);
        assert.throws(() => cache.copySlot(0, [3]), /slot 3 out of range/);
      });
    } finally {
      cache.dispose();
    }
  });

  test('planCopy: planned before the prefill (targets uploaded then), committed after it, copies what the slot holds then', () => {
    const cache = model.createKVCache({ slots: 3, maxLength: 12 });
    try {
      torch.scope(() => {
        const copy = cache.planCopy(0, [2, 1]);
        model.forward(row(ids, 0, 0, 5), { cache, slots: [0] });
        assert.equal(cache.length(1), 0, 'nothing copied before commit');
        copy.commit();
        copy.commit(); // once
        assert.deepEqual([cache.length(1), cache.tokenCount(1), cache.length(2)], [5, 5, 5]);
        const next = torch.cat([row(ids, 0, 5, 1), row(ids, 0, 5, 1), row(ids, 0, 5, 1)], 0);
        const logits = model.forward(next, { cache, slots: [0, 1, 2] });
        for (let b = 0; b < 3; b++) {
          assert.ok(maxAbsDiff(logits.select(0, b).squeeze(0), full.select(0, 0).select(0, 5)) < TOLERANCE, `slot ${b}`);
        }
        assert.throws(() => cache.planCopy(1, [1]), /onto itself/, 'checked when planned');
        cache.planCopy(0, []).commit(); // no targets: nothing to do
      });
    } finally {
      cache.dispose();
    }
  });

  test('a padded prefill (left and right padding) in the cache, then decoding, equals the unpadded rows', () => {
    const cache = model.createKVCache({ slots: 3, maxLength: 12 });
    try {
      torch.scope(() => {
        const padded = get(ref, 'padded.ids'); // row 0 full, row 1 left-padded by 3, row 2 right-padded by 2
        const mask = get(ref, 'padded.mask');
        const prefill = model.forward(padded, { attentionMask: mask, cache });
        assert.deepEqual([cache.length(0), cache.length(1), cache.length(2)], [8, 8, 6], 'right padding is trimmed');
        assert.deepEqual([cache.tokenCount(0), cache.tokenCount(1), cache.tokenCount(2)], [8, 5, 6]);
        const next = torch.tensor([[5n], [6n], [7n]]);
        const decoded = model.forward(next, { cache });
        const realRows = mask.toArray() as number[][];
        realRows.forEach((m, b) => {
          const realIndex = m.flatMap((v, t) => (v === 1 ? [t] : []));
          const index = torch.tensor(BigInt64Array.from(realIndex, BigInt));
          const alone = model
            .forward(torch.cat([padded.select(0, b).indexSelect(0, index), next.select(0, b)], 0).unsqueeze(0))
            .squeeze(0);
          const n = realIndex.length;
          assert.ok(
            maxAbsDiff(prefill.select(0, b).indexSelect(0, index), alone.narrow(0, 0, n)) < TOLERANCE,
            `row ${b} prefill`,
          );
          assert.ok(maxAbsDiff(decoded.select(0, b).squeeze(0), alone.select(0, n)) < TOLERANCE, `row ${b} decode`);
        });
      });
    } finally {
      cache.dispose();
    }
  });

  test('a full slot, an unknown slot and repeated slots give precise errors', () => {
    const cache = model.createKVCache({ slots: 2, maxLength: 5 });
    try {
      torch.scope(() => {
        model.forward(row(ids, 0, 0, 4), { cache, slots: [1] });
        assert.throws(
          () => model.forward(row(ids, 0, 4, 2), { cache, slots: [1] }),
          /KV cache slot 1 is full: 4 positions used \+ 2 new > maxLength 5/,
        );
        assert.equal(cache.length(1), 4, 'a rejected forward leaves the slot as it was');
        assert.throws(
          () => model.forward(row(ids, 0, 0, 1), { cache, slots: [2] }),
          /slot 2 out of range: the cache has 2 slots/,
        );
        assert.throws(() => model.forward(ids.narrow(1, 0, 1), { cache, slots: [0, 0] }), /slots must be distinct/);
        assert.throws(() => model.forward(ids.narrow(1, 0, 1), { cache, slots: [0] }), /1 slots for 2 batch rows/);
        // a plan is for the cache state it was made in: used again after its forward, or after a reset, it is refused
        const plan = cache.plan([0], 1, null);
        model.forward(row(ids, 0, 0, 1), { cache, slots: [0], cachePlan: plan });
        assert.equal(cache.length(0), 1);
        assert.throws(
          () => model.forward(row(ids, 0, 1, 1), { cache, slots: [0], cachePlan: plan }),
          /this plan was made by another cache, or the slots changed since/,
        );
        const stale = cache.plan([0], 1, null);
        cache.reset(0);
        assert.throws(() => model.forward(row(ids, 0, 0, 1), { cache, slots: [0], cachePlan: stale }), /the slots changed since/);
        assert.throws(() => cache.plan([0], 1, null, { keyBucket: 0 }), /keyBucket must be a positive integer, got 0/);
      });
    } finally {
      cache.dispose();
    }
    assert.throws(
      () => new KVCache({ numLayers: 2, numKeyValueHeads: 2, headDim: 0, slots: 1, maxLength: 4 }),
      /headDim must be a positive integer/,
    );
  });

  test('the cache is preallocated: decode steps write in place and allocate no new long-lived tensors', () => {
    const cache = model.createKVCache({ slots: 2, maxLength: 12 });
    try {
      const live = torch.liveTensorCount();
      torch.noGrad(() => {
        for (let t = 0; t < 6; t++) torch.scope(() => void model.forward(ids.narrow(1, t, 1), { cache }));
      });
      assert.equal(torch.liveTensorCount(), live);
      assert.equal(cache.length(0), 6);
    } finally {
      cache.dispose();
    }
  });
});

describe('the cache is sized before it is allocated', () => {
  // 28 layers × 8 KV heads × 128 dims, float32: 2 × 28 × 8 × 128 × 4 = 229,376 bytes per cached position
  const shape = { numLayers: 28, numKeyValueHeads: 8, headDim: 128 };

  test('kvCacheSize: 2 × layers × slots × kvHeads × maxLength × headDim × bytes(dtype) + slots × maxLength', () => {
    const { bytes, formula } = kvCacheSize({ ...shape, slots: 4, maxLength: 1024, dtype: 'bfloat16' });
    assert.equal(bytes, 2 * 28 * 4 * 8 * 1024 * 128 * 2 + 4 * 1024);
    assert.equal(
      formula,
      '4 slots × 1024 positions (maxLength) × 28 layers × 2 (keys, values) × 8 KV heads × 128 head dims × 2 bytes (bfloat16)',
    );
  });

  test('a cache larger than the memory is refused naming the settings, before any allocation', () => {
    // 100,000 slots × 32,768 positions: 751 TB, beyond any machine (the allocator's own text named no setting)
    assert.throws(
      () => new KVCache({ ...shape, slots: 100_000, maxLength: 32_768 }),
      (error: unknown) => {
        assert.ok(error instanceof RangeError, String(error));
        assert.match(error.message, /^the KV cache needs 700003 GiB \(100000 slots × 32768 positions \(maxLength\) × 28 layers/);
        assert.match(error.message, /4 bytes \(float32\)\), more than this machine's memory \([\d.]+ GiB\)/);
        assert.match(error.message, /lower the slots \(serve --slots, explorer\.rollout_model\.slots\)/);
        assert.match(error.message, /\(serve --max-length, model\.max_model_len\), or use a smaller dtype$/);
        return true;
      },
    );
    const oneGiB = { ...shape, slots: 1, maxLength: 8192, dtype: 'bfloat16' as const }; // 2 × 28 × 8192 × 8 × 128 × 2 B = 0.88 GiB
    const machine = (bytes: number) => (device: string) => (device === 'cpu' ? { bytes, what: "this machine's memory" } : null);
    assert.throws(
      () => checkKVCacheFits(oneGiB, machine(2 ** 29)),
      /needs 0\.88 GiB .*more than this machine's memory \(0\.50 GiB\)/,
    );
    checkKVCacheFits(oneGiB, machine(2 ** 30));
    // a GPU's memory as nvidia-smi reports it (src/util/device-memory.ts); where it cannot be known, the allocation checks
    const gpu = (device: string) => (device === 'cuda:0' ? { bytes: 2 ** 29, what: "cuda:0's memory (H100)" } : null);
    assert.throws(
      () => checkKVCacheFits({ ...oneGiB, device: 'cuda:0' }, gpu),
      /needs 0\.88 GiB .*more than cuda:0's memory \(H100\) \(0\.50 GiB\)/,
    );
    checkKVCacheFits({ ...oneGiB, device: 'cuda:1' }, gpu);
  });
});
