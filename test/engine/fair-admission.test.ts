// The engine shares its slots fairly: waiting sequences are admitted round-robin over fair-share keys, so a small
// request behind a big one waits for one turn, not for the whole big request. Checked by the order requests settle in
// and by the engine's step counter when they settle (every prefill and decode is one step), never by elapsed time.
//
// The engine here has 2 slots; every request decodes greedily with ignoreEos, so a sample of maxTokens t takes t
// steps in a slot (1 prefill + t - 1 decodes) and the step counts below are exact.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type GenerateRequest, RolloutEngine } from '../../src/engine/index.js';
import { CausalLM } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { modelDir } from './helpers.js';

let model: CausalLM;
let engine: RolloutEngine;
before(() => {
  torch.setNumThreads(1);
  model = CausalLM.load(modelDir('qwen2-tied'), { layout: 'inference' });
  engine = new RolloutEngine(model, { slots: 2, maxLength: 64 });
});
after(async () => {
  await engine.close();
  model.dispose();
});

const greedy = { temperature: 0, ignoreEos: true } as const;

/** Starts `request`; the returned promise resolves to the engine's step count when it settled, and logs its name. */
function tracked(name: string, request: GenerateRequest, settled: string[]): Promise<number> {
  return engine.generate({ ...greedy, ...request }).then(() => {
    settled.push(name);
    return engine.stats.steps;
  });
}

describe('round-robin admission', () => {
  it('a small request submitted right after a big one is admitted in the first turn and finishes first', async () => {
    const start = engine.stats.steps;
    const settled: string[] = [];
    // big: 6 samples of 8 tokens, 3 rounds of 2 slots (first come first served: the small one would wait for all 3)
    const big = tracked('big', { promptIds: [5, 9], n: 6, maxTokens: 8 }, settled);
    const small = tracked('small', { promptIds: [40], maxTokens: 2 }, settled);
    const [bigDone, smallDone] = await Promise.all([big, small]);
    assert.deepEqual(settled, ['small', 'big']);
    // the first prefill admits big's sample 0 and small; small's second token is the first decode
    assert.equal(smallDone - start, 2);
    assert.ok(bigDone > smallDone);
  });

  it('a small request that arrives while a big one holds every slot gets the next free slot', async () => {
    const start = engine.stats.steps;
    const settled: string[] = [];
    let smallDone: Promise<number> | null = null;
    const big = tracked(
      'big',
      {
        promptIds: [5, 9],
        n: 6,
        maxTokens: 8,
        // once big's first samples are decoding (both slots taken, 4 samples waiting), the small request arrives
        onToken: (event) => {
          if (smallDone === null && event.index === 1) smallDone = tracked('small', { promptIds: [40], maxTokens: 2 }, settled);
        },
      },
      settled,
    );
    const bigDone = await big;
    assert.ok(smallDone !== null);
    const smallStep = await (smallDone as Promise<number>);
    assert.deepEqual(settled, ['small', 'big']);
    // big's samples 0 and 1 hold the slots for 8 steps; the next prefill admits big's sample 2 and small (its turn),
    // which ends one decode later: step 8 + 2. First come first served would have put it after all 6 samples.
    assert.equal(smallStep - start, 10);
    assert.ok(bigDone > smallStep);
  });

  it('requests under one fairShareKey share one turn: a later request is not held behind all of them', async () => {
    const settled: string[] = [];
    const run = async (key: string | undefined) => {
      const start = engine.stats.steps;
      const batch = [0, 1, 2, 3].map((i) =>
        tracked(`prompt ${i}`, { promptIds: [5 + i], n: 2, maxTokens: 8, ...(key ? { fairShareKey: key } : {}) }, []),
      );
      const small = tracked('small', { promptIds: [40], maxTokens: 2 }, settled);
      const [smallStep] = await Promise.all([small, ...batch]);
      return smallStep - start;
    };
    // one key for the 4 prompts (one HTTP request): the line is [key, small]; small is admitted in the first prefill
    assert.equal(await run('completion-1'), 2);
    // 4 keys of their own: small is 5th in line, admitted in the third prefill (after 2 rounds of 8 steps)
    assert.equal(await run(undefined), 16 + 2);
  });

  it('refuses a fairShareKey that is not a string', async () => {
    await assert.rejects(
      engine.generate({ promptIds: [5], maxTokens: 1, fairShareKey: 7 as unknown as string }),
      /fairShareKey must be a string, got number/,
    );
  });
});
