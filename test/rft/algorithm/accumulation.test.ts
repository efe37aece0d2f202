// The built-in policy losses' accumulation contracts (how the trainer weighs their micro-batches; see
// src/rft/algorithm/policy-loss/types.ts): DPO averages over pairs, the mix losses over their own rows' units, every
// other loss over the unit of its loss_agg_mode.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { policyLossAccumulation, resolveAlgorithm } from '../../../src/rft/algorithm/index.js';

const of = (config: Record<string, unknown>) => {
  const a = resolveAlgorithm(config);
  return policyLossAccumulation(a.policyLossFn.name, a.policyLossFn.args, a.lossAggMode);
};

describe('policy-loss accumulation contracts', () => {
  test('dpo: whole pairs; mix and mix_chord: an on-policy and an expert term; the rest: their loss_agg_mode', () => {
    assert.deepEqual(of({ algorithm_type: 'dpo' }), {
      rowsPerGroup: 2,
      terms: [{ name: 'loss', rows: 'all', unit: 'group' }],
    });
    assert.deepEqual(of({ algorithm_type: 'mix' }).terms, [
      { name: 'usual', rows: 'usual', unit: 'token' },
      { name: 'expert', rows: 'expert', unit: 'row' }, // sft_loss_agg_mode seq-mean-token-mean
    ]);
    assert.deepEqual(of({ algorithm_type: 'mix_chord' }).terms[1], { name: 'expert', rows: 'expert', unit: 'token' });
    assert.deepEqual(of({ algorithm_type: 'grpo' }).terms, [{ name: 'loss', rows: 'all', unit: 'token' }]);
    assert.deepEqual(of({ algorithm_type: 'gspo' }).terms[0]?.unit, 'row');
    assert.deepEqual(of({ algorithm_type: 'dr_grpo' }).terms[0]?.unit, 'constant');
    assert.deepEqual(of({ algorithm_type: 'grpo', loss_agg_mode: 'seq-mean-token-sum' }).terms[0]?.unit, 'row');
  });
});
