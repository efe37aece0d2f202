// Chunked prefill (chunkedPrefill, maxPrefillTokens as the step's token budget; src/engine/prefill-batch.ts): the same
// tokens as prefilling each prompt whole, log-probs within 1e-5, on the slot layout and the paged cache with its
// prefix cache (preemption included), bit for bit when batch-invariant; a running sequence keeps decoding, one token
// per chunk step, while a long prompt is prefilled; a request aborted part-way through its prompt leaves no slot or
// block held.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  engineMetrics,
  type GenerateRequest,
  GenerationError,
  RolloutEngine,
  type RolloutEngineOptions,
} from '../../src/engine/index.js';
import { CausalLM, initModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { charTokenIds, withEngineOver } from './helpers.js';

let root: string;
let model: CausalLM;

before(() => {
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'chunked-prefill-'));
  initModel(join(root, 'm'), { hiddenSize: 32, numHeads: 4, numLayers: 2, maxPositionEmbeddings: 512, seed: 8 });
  model = CausalLM.load(join(root, 'm'), { layout: 'inference' });
});
after(() => {
  model.dispose();
  rmSync(root, { recursive: true, force: true });
});

const ids = charTokenIds;
const SYSTEM = ids(37, 1);
const GREEDY = { temperature: 0 } as const;

const withEngine = <T>(options: RolloutEngineOptions, fn: (engine: RolloutEngine) => Promise<T>): Promise<T> =>
  withEngineOver(model, { maxLength: 256, ...options }, fn);

type Runs = { tokens: number[][][]; logprobs: number[][][] };

/** The requests one after another, then all at once. */
async function run(engine: RolloutEngine, requests: GenerateRequest[]): Promise<Runs> {
  const results = [];
  for (const request of requests) results.push(await engine.generate(request));
  results.push(...(await Promise.all(requests.map((r) => engine.generate(r)))));
  return {
    tokens: results.map((r) => r.completions.map((c) => c.tokenIds)),
    logprobs: results.map((r) => r.completions.map((c) => c.logprobs)),
  };
}

function assertSameRuns(actual: Runs, expected: Runs): void {
  assert.deepEqual(actual.tokens, expected.tokens);
  const flat = expected.logprobs.flat(2);
  const gap = Math.max(...actual.logprobs.flat(2).map((l, i) => Math.abs(l - (flat[i] as number))));
  assert.ok(gap < 1e-5, `log-probs differ by ${gap}`);
}

const REQUESTS: GenerateRequest[] = [
  { promptIds: [...SYSTEM, ...ids(120, 2)], maxTokens: 12, ...GREEDY },
  { promptIds: ids(5, 3), maxTokens: 20, n: 3, ...GREEDY },
  { promptIds: [...SYSTEM, ...ids(60, 4)], maxTokens: 10, n: 2, temperature: 0.9, seed: 7 },
  { promptIds: ids(9, 5), maxTokens: 15, temperature: 0.7, topP: 0.9, seed: 3 },
  { promptIds: [...SYSTEM, ...ids(120, 2), ...ids(30, 6)], maxTokens: 8, n: 2, ...GREEDY },
];

describe('chunked prefill', () => {
  test('greedy and seeded outputs equal whole-prompt prefill token for token, log-probs within 1e-5', async () => {
    const reference = await withEngine({ slots: 4 }, async (engine) => {
      const result = await run(engine, REQUESTS);
      assert.equal(engine.stats.prefillChunks, 0);
      return result;
    });
    for (const layout of [{}, { enablePrefixCaching: true, kvBlockSize: 4 }] satisfies RolloutEngineOptions[]) {
      await withEngine({ slots: 4, chunkedPrefill: true, maxPrefillTokens: 24, ...layout }, async (engine) => {
        assertSameRuns(await run(engine, REQUESTS), reference);
        // the longest prompt alone needs ⌈187 / 24⌉ = 8 chunks
        assert.ok(engine.stats.prefillChunks >= 8, `${engine.stats.prefillChunks} chunks`);
        assert.equal(engine.stats.freeSlots, 4);
        if (engine.stats.kvCache) assert.equal(engine.stats.kvCache.heldBlocks, 0);
      });
    }
  });

  test('batch-invariant (trainer.bitwise_on_policy): chunked prefill gives the same log-probs bit for bit', async (t) => {
    if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
    const request: GenerateRequest = { promptIds: [...SYSTEM, ...ids(113, 24)], maxTokens: 10, n: 2, ...GREEDY };
    const logprobs = (options: RolloutEngineOptions) =>
      withEngine({ slots: 4, batchInvariant: true, ...options }, async (engine) =>
        (await engine.generate(request)).completions.map((c) => c.logprobs),
      );
    try {
      const whole = await logprobs({});
      const chunked = await logprobs({ chunkedPrefill: true, maxPrefillTokens: 24 });
      assert.deepEqual(chunked, whole);
    } finally {
      model.setBatchInvariant(false); // the model is shared by the other tests
    }
  });

  test('a partial prefill preempted for the decoding sequences starts again; the tokens stay the same', async () => {
    // A and B decode 100 tokens each; C's 150-token prompt gets the 1 token of a step's budget of 3 they leave, so it is
    // still part-way when A and B outgrow the 64 blocks beside its 38: C, the last started, is preempted
    const requests: GenerateRequest[] = [
      { promptIds: ids(8, 21), maxTokens: 100, ...GREEDY },
      { promptIds: ids(8, 22), maxTokens: 100, temperature: 0.8, seed: 4 },
      { promptIds: [...SYSTEM, ...ids(113, 23)], maxTokens: 20, ...GREEDY },
    ];
    const concurrently = async (engine: RolloutEngine) => {
      const results = await Promise.all(requests.map((r) => engine.generate(r)));
      return {
        tokens: results.map((r) => r.completions.map((c) => c.tokenIds)),
        logprobs: results.map((r) => r.completions.map((c) => c.logprobs)),
      };
    };
    const reference = await withEngine({ slots: 3 }, concurrently);
    const options = {
      slots: 3,
      enablePrefixCaching: true,
      kvBlockSize: 4,
      kvBlocks: 65,
      chunkedPrefill: true,
      maxPrefillTokens: 3,
    };
    await withEngine(options, async (engine) => {
      assertSameRuns(await concurrently(engine), reference);
      const { kvCache, preemptions, prefillChunks, freeSlots } = engine.stats;
      assert.ok(preemptions >= 1, 'nothing was preempted');
      // more than the ⌈150 / 3⌉ = 50 chunks of a step's whole budget: C ran 1-token chunks while A and B decoded
      assert.ok(prefillChunks > 50, `${prefillChunks} chunks`);
      assert.equal(kvCache?.heldBlocks, 0);
      assert.equal(freeSlots, 3);
    });
  });

  test('a running sequence decodes one token per chunk step while a long prompt is prefilled', async () => {
    const LONG = [...SYSTEM, ...ids(163, 12)]; // 200 tokens
    // A decodes; B (the long prompt) is sent when A has its first token. Counted: A's tokens when B gets its first.
    const interleave = (options: RolloutEngineOptions) =>
      withEngine({ slots: 2, maxPrefillTokens: 32, ...options }, async (engine) => {
        let aTokens = 0;
        let aTokensAtB: number | null = null;
        let b: Promise<unknown> | null = null;
        const a = engine.generate({
          promptIds: ids(5, 11),
          maxTokens: 40,
          ...GREEDY,
          onToken: () => {
            aTokens++;
            b ??= engine.generate({
              promptIds: LONG,
              maxTokens: 3,
              ...GREEDY,
              onToken: () => {
                aTokensAtB ??= aTokens;
              },
            });
          },
        });
        const [resultA, resultB] = await Promise.all([a, a.then(() => b)]);
        return { aTokensAtB, chunks: engine.stats.prefillChunks, resultA, resultB, metrics: engineMetrics([engine.stats]) };
      });
    const whole = await interleave({});
    const chunked = await interleave({ chunkedPrefill: true });
    // whole: B's prompt runs in the step after A's first token's, before A's second decode step
    assert.equal(whole.aTokensAtB, 2);
    assert.equal(whole.chunks, 0);
    // chunked: A decoding takes 1 token of the 32 of each step, so B's 200 tokens run in ⌈200 / 31⌉ = 7 chunks, and A
    // decodes after each: its 2 tokens as above, and one more after each of the 6 chunks before B's last
    assert.equal(chunked.chunks, 7);
    assert.equal(chunked.metrics['engine/prefill_chunks_total'], 7);
    assert.equal(chunked.aTokensAtB, 2 + 6);
    const tokens = (r: unknown) => (r as { completions: { tokenIds: number[] }[] }).completions.map((c) => c.tokenIds);
    assert.deepEqual(tokens(chunked.resultA), tokens(whole.resultA));
    assert.deepEqual(tokens(chunked.resultB), tokens(whole.resultB));
  });

  test('a request aborted part-way through its prompt leaves no slot or block held', async () => {
    await withEngine(
      { slots: 2, chunkedPrefill: true, maxPrefillTokens: 8, enablePrefixCaching: true, kvBlockSize: 4 },
      async (engine) => {
        const controller = new AbortController();
        // the short request starts first and decodes while the long prompt runs in chunks of 8 − 1 tokens
        const short = engine.generate({
          promptIds: ids(6, 14),
          maxTokens: 10,
          ...GREEDY,
          onToken: () => {
            if (engine.stats.prefillChunks === 3) controller.abort(); // the long prompt is part-way
          },
        });
        const long = engine.generate({
          promptIds: [...SYSTEM, ...ids(80, 13)],
          maxTokens: 4,
          ...GREEDY,
          signal: controller.signal,
        });
        await assert.rejects(long, (error: unknown) => error instanceof GenerationError && error.reason === 'aborted');
        assert.equal((await short).completions[0]?.tokenIds.length, 10);
        assert.equal(engine.stats.prefillChunks, 3);
        const { requests, running, waiting, freeSlots, kvCache } = engine.stats;
        assert.deepEqual({ requests, running, waiting, freeSlots }, { requests: 0, running: 0, waiting: 0, freeSlots: 2 });
        assert.equal(kvCache?.heldBlocks, 0);
        // the engine goes on: the same prompt now runs to the end
        const again = await engine.generate({ promptIds: [...SYSTEM, ...ids(80, 13)], maxTokens: 4, ...GREEDY });
        assert.equal(again.completions[0]?.tokenIds.length, 4);
      },
    );
  });

  test('option errors name the option', () => {
    assert.throws(
      () => new RolloutEngine(model, { slots: 8, chunkedPrefill: true, maxPrefillTokens: 4 }),
      /with chunkedPrefill, maxPrefillTokens \(4\) must be at least slots \(8\)/,
    );
    assert.throws(
      () => new RolloutEngine(model, { chunkedPrefill: true, recordRoutedExperts: true }),
      /recordRoutedExperts cannot be used with chunkedPrefill/,
    );
  });
});
