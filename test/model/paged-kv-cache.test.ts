// The paged KV cache (src/model/paged-kv-cache.ts) and its block pool (src/model/kv-blocks.ts): attention over a
// sequence's blocks gives the logits of a forward without a cache; blocks are held, shared, cached, evicted least
// recently used first, and freed; a prefix is found by the hash of everything up to a block's end.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CausalLM, initModel, KVBlockPool, type PagedKVCache } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';

describe('KV block pool', () => {
  test('blocks are held, released into the prefix cache, reused by their key, and evicted least recently used first', () => {
    const pool = new KVBlockPool({ numBlocks: 4, blockSize: 2, prefixCaching: true }); // blocks 1..3 (0 is scratch)
    assert.equal(pool.available, 3);
    const keys = pool.blockKeys([1, 2, 3, 4, 5, 6], 3);
    const blocks = [pool.allocate(), pool.allocate(), pool.allocate()];
    for (const [i, b] of blocks.entries()) pool.register(b, keys[i] as string);
    assert.equal(pool.available, 0);
    assert.throws(() => pool.allocate(), /all 3 blocks are held/);
    pool.release([blocks[2] as number]); // released first: evicted first
    pool.release([blocks[0] as number, blocks[1] as number]);
    assert.deepEqual([pool.available, pool.cached, pool.held], [3, 3, 0]);
    // a prompt with the same first 4 tokens finds the first two blocks; the third key differs (other tokens)
    const other = pool.blockKeys([1, 2, 3, 4, 9, 9], 3);
    assert.deepEqual(other.slice(0, 2), keys.slice(0, 2));
    assert.deepEqual(pool.lookup(other), blocks.slice(0, 2));
    // the same block under another prefix is another key: a key covers everything before the block
    assert.notEqual(pool.blockKeys([9, 9, 3, 4], 2)[1], keys[1]);
    pool.take(pool.lookup(other), 3);
    assert.deepEqual(pool.stats, { hits: 2, misses: 1, evictions: 0, invalidations: 0 });
    assert.equal(pool.allocate(), blocks[2]); // the only cached block nobody holds
    assert.equal(pool.stats.evictions, 1);
    assert.deepEqual(pool.lookup(keys), blocks.slice(0, 2)); // the evicted block's key is gone
    assert.throws(() => pool.release([blocks[2] as number, blocks[2] as number]), /released more often than held/);
  });

  test('invalidate() forgets every key: cached blocks are freed now, held ones when released', () => {
    const pool = new KVBlockPool({ numBlocks: 3, blockSize: 2, prefixCaching: true });
    const keys = pool.blockKeys([1, 2, 3, 4], 2);
    const [a, b] = [pool.allocate(), pool.allocate()];
    pool.register(a, keys[0] as string);
    pool.register(b, keys[1] as string);
    pool.release([a]);
    pool.invalidate();
    assert.deepEqual(pool.lookup(keys), []);
    assert.deepEqual(pool.lookup(pool.blockKeys([1, 2, 3, 4], 2)), []); // the same tokens key differently now
    assert.deepEqual([pool.cached, pool.held], [0, 1]);
    pool.release([b]);
    assert.deepEqual([pool.cached, pool.held, pool.available], [0, 0, 2]);
  });

  test('without prefix caching nothing is found and released blocks are free at once', () => {
    const pool = new KVBlockPool({ numBlocks: 3, blockSize: 2, prefixCaching: false });
    const block = pool.allocate();
    pool.register(block, pool.blockKeys([1, 2], 1)[0] as string);
    pool.release([block]);
    assert.deepEqual([pool.cached, pool.available], [0, 2]);
    assert.deepEqual(pool.lookup(pool.blockKeys([1, 2], 1)), []);
  });
});

describe('paged KV cache forward', () => {
  let dir: string;
  let model: CausalLM;
  before(() => {
    torch.setNumThreads(1);
    dir = mkdtempSync(join(tmpdir(), 'paged-kv-'));
    initModel(dir, { hiddenSize: 32, numHeads: 4, numLayers: 2, maxPositionEmbeddings: 512, seed: 3 });
    model = CausalLM.load(dir);
  });
  after(() => {
    model.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  const tokens = (n: number, from: number) => Array.from({ length: n }, (_, i) => 3 + ((from + i * 7) % 20));
  /**
   * One forward of `rows` (right-padded to the longest) over `slots` of a paged cache, planned with key buckets of 8;
   * `afterPlan` sees the cache between its plan and the forward. The logits, kept.
   */
  const forwardRows = (
    cache: PagedKVCache,
    slots: number[],
    rows: number[][],
    afterPlan: (cache: PagedKVCache) => void = () => {},
  ): torch.Tensor =>
    torch.noGrad(() =>
      torch.scope(() => {
        const width = Math.max(...rows.map((r) => r.length));
        const padded = rows.map((r) => [...r, ...Array<number>(width - r.length).fill(0)]);
        const real = rows.some((r) => r.length !== width)
          ? padded.map((r, b) => r.map((_, t) => t < (rows[b] as number[]).length))
          : null;
        const plan = cache.plan(slots, width, real, { keyBucket: 8 });
        afterPlan(cache);
        return torch.keep(model.forward(torch.tensor(padded.map((r) => r.map(BigInt))), { cache, slots, cachePlan: plan }));
      }),
    );
  const logitsWithoutCache = (ids: number[]) =>
    torch.noGrad(() => torch.scope(() => torch.keep(model.forward(torch.tensor([ids.map(BigInt)])).select(0, 0))));

  test('a padded prefill, a prefix reused from the cache, and decode steps give the logits of the uncached forward', () => {
    const cache = model.createPagedKVCache({ slots: 3, maxLength: 32, numBlocks: 16, blockSize: 4, prefixCaching: true });
    const first = tokens(11, 0);
    const second = [...first.slice(0, 9), ...tokens(5, 40)]; // shares 2 full blocks (8 tokens) with `first`
    try {
      // `first` and a short prompt in one right-padded prefill
      const short = tokens(3, 90);
      assert.equal(cache.admit(0, first), 0);
      assert.equal(cache.admit(1, short), 0);
      const prefill = torch.noGrad(() =>
        torch.scope(() => {
          const ids = torch.tensor([first.map(BigInt), [...short, 0, 0, 0, 0, 0, 0, 0, 0].map(BigInt)]);
          const realTokens = [first.map(() => true), Array.from({ length: 11 }, (_, t) => t < 3)];
          const plan = cache.plan([0, 1], 11, realTokens, { tokenIds: [first, short] });
          return torch.keep(model.forward(ids, { cache, slots: [0, 1], cachePlan: plan }));
        }),
      );
      const reference = logitsWithoutCache(first);
      assert.ok(prefill.select(0, 0).sub(reference).abs().max().item() < 1e-5);
      assert.ok(prefill.select(0, 1).narrow(0, 0, 3).sub(logitsWithoutCache(short)).abs().max().item() < 1e-5);
      cache.reset(1);
      cache.reset(0); // its two full blocks stay cached
      assert.equal(cache.stats.cachedBlocks, 2);

      // `second` finds them and prefills only its last 6 tokens, then decodes 6 tokens one at a time
      assert.equal(cache.cachedLength(second), 8);
      assert.equal(cache.admit(2, second), 8);
      assert.equal(cache.stats.hits, 2);
      const sequence = [...second];
      const rest = torch.noGrad(() =>
        torch.scope(() => {
          const suffix = second.slice(8);
          const plan = cache.plan([2], suffix.length, null, { tokenIds: [suffix] });
          return torch.keep(
            model.forward(torch.tensor([suffix.map(BigInt)]), { cache, slots: [2], cachePlan: plan }).select(0, 0),
          );
        }),
      );
      const secondReference = logitsWithoutCache(second);
      assert.ok(
        rest
          .sub(secondReference.narrow(0, 8, 6))
          .abs()
          .max()
          .item() < 1e-5,
      );
      for (let step = 0; step < 6; step++) {
        const next = 3 + ((step * 5) % 20);
        sequence.push(next);
        assert.ok(cache.grow(2, 1));
        const logits = torch.noGrad(() =>
          torch.scope(() => {
            const plan = cache.plan([2], 1, null, { keyBucket: 8, tokenIds: [[next]] });
            return torch.keep(model.forward(torch.tensor([[BigInt(next)]]), { cache, slots: [2], cachePlan: plan }).select(0, 0));
          }),
        );
        const expected = logitsWithoutCache(sequence).select(0, sequence.length - 1);
        assert.ok(logits.select(0, 0).sub(expected).abs().max().item() < 1e-5, `decode step ${step}`);
      }
      assert.equal(cache.length(2), 20);
      assert.equal(cache.blocks(2).length, 5);
      cache.reset(2);
      assert.equal(cache.stats.heldBlocks, 0);
    } finally {
      cache.dispose();
    }
  });

  test("samples share a prompt's full blocks and copy its partial block; a full cache refuses, naming what is missing", () => {
    const cache = model.createPagedKVCache({ slots: 3, maxLength: 16, numBlocks: 6, blockSize: 4, prefixCaching: false });
    try {
      const prompt = tokens(6, 1); // one full block and a partial one
      assert.equal(cache.admit(0, prompt), 0);
      assert.ok(cache.admitSample(1, prompt.length));
      torch.noGrad(() =>
        torch.scope(() => {
          const plan = cache.plan([0], 6, null, { tokenIds: [prompt] });
          const copy = cache.planCopy(0, [1]);
          model.forward(torch.tensor([prompt.map(BigInt)]), { cache, slots: [0], cachePlan: plan });
          copy.commit();
        }),
      );
      const [leader, sample] = [cache.blocks(0), cache.blocks(1)];
      assert.equal(sample[0], leader[0]); // shared full block
      assert.notEqual(sample[1], leader[1]); // own copy of the partial block
      assert.equal(cache.stats.heldBlocks, 3);
      // both continue with different tokens: each sees its own history
      for (const [slot, next] of [
        [0, 9],
        [1, 12],
      ] as const) {
        const logits = torch.noGrad(() =>
          torch.scope(() => {
            const plan = cache.plan([slot], 1, null, { tokenIds: [[next]] });
            return torch.keep(
              model.forward(torch.tensor([[BigInt(next)]]), { cache, slots: [slot], cachePlan: plan }).select(0, 0),
            );
          }),
        );
        assert.ok(
          logits
            .sub(logitsWithoutCache([...prompt, next]).select(0, 6))
            .abs()
            .max()
            .item() < 1e-5,
        );
      }
      assert.equal(cache.admit(2, tokens(12, 5)), null); // 3 blocks needed, 2 available
      assert.equal(cache.stats.heldBlocks, 3);
      assert.throws(() => cache.plan([0], 2, [[false, true]]), /slot 0's tokens are padded on the left or inside/);
      assert.throws(() => cache.plan([0], 10, null), /slot 0 is full: 7 positions used \+ 10 new > maxLength 16/);
    } finally {
      cache.dispose();
    }
  });

  test('decode steps read a copy of the batch kept between steps: the logits of gathering every step, bit for bit', () => {
    // the same script on two caches, one gathering each step's rows from the blocks (decodeCopy false); the copy is
    // gathered again only when the batch's rows change: a row joins, a prefill chunk writes a decoding row, a row
    // leaves (its reset drops the copy), a row outgrows the copy (capacity: its length + 1 + 256, rounded up to 8)
    const options = { slots: 3, maxLength: 320, numBlocks: 240, blockSize: 4, prefixCaching: false };
    const [copying, gathering] = [model.createPagedKVCache(options), model.createPagedKVCache({ ...options, decodeCopy: false })];
    const forward = (cache: typeof copying, slots: number[], rows: number[][], decodeCopyPositions?: number) =>
      forwardRows(cache, slots, rows, (planned) => {
        if (decodeCopyPositions !== undefined) assert.equal(planned.stats.decodeCopyPositions, decodeCopyPositions);
      });
    const fed: number[][] = [[], [], []]; // each slot's tokens so far
    const both = (slots: number[], rows: number[][], copyPositions?: number) => {
      const [a, b] = [forward(copying, slots, rows, copyPositions), forward(gathering, slots, rows, 0)];
      assert.equal(a.sub(b).abs().max().item(), 0, `slots [${slots}], lengths [${slots.map((s) => copying.length(s))}]`);
      for (const [row, slot] of slots.entries()) fed[slot]?.push(...(rows[row] as number[]));
      return a;
    };
    const decode = (slots: number[], steps: number, copyPositions?: number) => {
      let logits: torch.Tensor | null = null;
      for (let step = 0; step < steps; step++)
        logits = both(
          slots,
          slots.map((slot) => [3 + ((copying.length(slot) * 7 + slot) % 20)]),
          copyPositions,
        );
      return logits as torch.Tensor;
    };
    try {
      const [a, b, c] = [tokens(20, 0), tokens(7, 30), tokens(5, 60)];
      for (const cache of [copying, gathering]) [cache.admit(0, a), cache.admit(1, b)];
      both([0, 1], [a, b]); // a padded prefill gathers (no copy)
      assert.equal(copying.stats.decodeCopyRebuilds, 0);
      decode([0, 1], 5, 2 * 280); // built at the first step: capacity ⌈(20 + 1 + 256) / 8⌉ · 8
      assert.equal(copying.stats.decodeCopyRebuilds, 1);
      for (const cache of [copying, gathering]) cache.admit(2, c);
      both([2], [c]);
      decode([0, 1, 2], 3); // c joins
      both([1], [tokens(3, 90)]); // a prefill chunk writes row 1
      decode([0, 1, 2], 3);
      assert.equal(copying.stats.decodeCopyRebuilds, 3);
      for (const cache of [copying, gathering]) cache.reset(0);
      assert.equal(copying.stats.decodeCopyPositions, 0); // dropped with the slot
      // rows 1 and 2 (lengths 21 and 11) from here: capacity 280, which row 1 outgrows at length 280 (keys: 288)
      const last = decode([1, 2], 262);
      assert.equal(copying.stats.decodeCopyRebuilds, 5);
      assert.deepEqual([copying.length(1), fed[1]?.length], [283, 283]);
      // the last step's logits are the uncached forward's over the whole sequence
      const gap = last
        .select(0, 0)
        .select(0, 0)
        .sub(logitsWithoutCache(fed[1] as number[]).select(0, 282))
        .abs()
        .max()
        .item();
      assert.ok(gap < 1e-5, `${gap}`);
      // a plan over a copy that was rebuilt since cannot start
      torch.noGrad(() =>
        torch.scope(() => {
          const stale = copying.plan([1, 2], 1, null);
          copying.reset(2);
          assert.throws(
            () => model.forward(torch.tensor([[3n], [4n]]), { cache: copying, slots: [1, 2], cachePlan: stale }),
            /the decode copy this plan reads was rebuilt or dropped since/,
          );
        }),
      );
      // dispose() frees the copy with the buffers: keys and values of 2 layers, each in the blocks and the copy
      decode([1], 1, 320); // one row of maxLength
      const live = torch.liveTensorCount();
      copying.dispose();
      assert.equal(live - torch.liveTensorCount(), 2 * 2 * 2);
    } finally {
      copying.dispose();
      gathering.dispose();
    }
  });

  test('a batch whose copy would exceed the block pool gathers each step instead; a smaller batch gets its copy', () => {
    // pool: 100 blocks of 4 = 400 positions; a copy holds capacity ⌈(20 + 1 + 256) / 8⌉ · 8 = 280 positions a row:
    // two rows (560) exceed the pool, one row (280) fits
    const options = { slots: 2, maxLength: 320, numBlocks: 100, blockSize: 4, prefixCaching: false };
    const [bounded, gathering] = [model.createPagedKVCache(options), model.createPagedKVCache({ ...options, decodeCopy: false })];
    const both = (slots: number[], rows: number[][]) => {
      const gap = forwardRows(bounded, slots, rows)
        .sub(forwardRows(gathering, slots, rows))
        .abs()
        .max()
        .item();
      assert.equal(gap, 0, `slots [${slots}]`);
    };
    try {
      const [a, b] = [tokens(20, 0), tokens(7, 30)];
      for (const cache of [bounded, gathering]) [cache.admit(0, a), cache.admit(1, b)];
      both([0, 1], [a, b]);
      for (let i = 0; i < 3; i++) both([0, 1], [[3 + i], [5 + i]]);
      assert.deepEqual([bounded.stats.decodeCopyPositions, bounded.stats.decodeCopyRebuilds], [0, 0]);
      for (const cache of [bounded, gathering]) cache.reset(1);
      for (let i = 0; i < 2; i++) both([0], [[7 + i]]);
      assert.deepEqual([bounded.stats.decodeCopyPositions, bounded.stats.decodeCopyRebuilds], [280, 1]);
    } finally {
      bounded.dispose();
      gathering.dispose();
    }
  });

  test('a cache smaller than one sequence of maxLength is refused', () => {
    assert.throws(
      () => model.createPagedKVCache({ slots: 1, maxLength: 64, numBlocks: 4, blockSize: 16, prefixCaching: false }),
      /numBlocks must hold one sequence of maxLength 64 \(4 blocks of 16 \+ the scratch block\), got 4/,
    );
  });
});
