// Algorithm presets: every one resolves to registered modules with consistent flags, Trinity-RFT's defaults where the
// algorithm exists there, YAML overrides win, and bad names/arguments are errors that name the key path and the
// closest valid name.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ADVANTAGE_COMPUTE_IN_TRAINER,
  ALGORITHM_PRESETS,
  ALGORITHM_TYPES,
  algorithmPreset,
  resolveAlgorithm,
} from '../../src/rft/algorithm/index.js';

describe('presets', () => {
  test('every preset resolves, and its flags agree with its modules', () => {
    for (const type of ALGORITHM_TYPES) {
      const preset = ALGORITHM_PRESETS[type];
      const r = resolveAlgorithm({ algorithm_type: type });
      assert.equal(r.algorithmType, type);
      assert.equal(r.useReference, preset.useReference, `${type}: use_reference`);
      assert.equal(r.useCritic, preset.useCritic, `${type}: use_critic`);
      assert.equal(r.computeAdvantageInTrainer, preset.computeAdvantageInTrainer, `${type}: compute_advantage_in_trainer`);
      if (preset.advantageFn !== null) {
        assert.equal(ADVANTAGE_COMPUTE_IN_TRAINER[preset.advantageFn.name], preset.computeAdvantageInTrainer, type);
      }
      // every argument of every module is filled in
      assert.ok('loss_agg_mode' in r.entropyLossFn.args && 'entropy_coef' in r.entropyLossFn.args, type);
      assert.ok('kl_coef' in r.klLossFn.args, type);
    }
  });

  test("repeat_times defaults: Trinity-RFT's, written out", () => {
    // Trinity-RFT trinity/algorithm/algorithm.py default_config() repeat_times, per algorithm_type (the table "default
    // repeat_times" of its ALGORITHM_TYPE registry). Where Trinity-RFT sets none the value is this project's own:
    //   sft and cpt 1 (their rows are not sampled), raft 4 (RAFT's best-of-n needs a group), dr_grpo 2 (grpo's: not a Trinity
    //   type).
    const expected: Record<string, number> = {
      ppo: 1,
      grpo: 2,
      dr_grpo: 2,
      dapo: 16,
      gspo: 2,
      cispo: 2,
      sapo: 2,
      rloo: 2,
      reinforceplusplus: 2,
      opmd: 2,
      asymre: 2,
      topr: 2,
      sppo: 2,
      rec: 2,
      multi_step_grpo: 8,
      sft: 1,
      cpt: 1,
      dpo: 2,
      mix: 8,
      mix_chord: 8,
      raft: 4,
      on_policy_distill: 8,
      grpo_verl: 2,
      gigpo: 8,
      m2po: 8,
      jsd: 8,
    };
    assert.deepEqual([...ALGORITHM_TYPES].sort(), Object.keys(expected).sort(), 'a preset was added or removed');
    for (const type of ALGORITHM_TYPES) {
      assert.equal(resolveAlgorithm({ algorithm_type: type }).repeatTimes, expected[type], type);
    }
  });

  test("Trinity-RFT's table: flags, modules and repeat_times", () => {
    const ppo = resolveAlgorithm({ algorithm_type: 'ppo' });
    assert.deepEqual(
      [ppo.useCritic, ppo.useReference, ppo.computeAdvantageInTrainer, ppo.repeatTimes, ppo.advantageFn?.name, ppo.klLossFn.name],
      [true, true, true, 1, 'ppo', 'k2'],
    );
    const grpo = resolveAlgorithm({ algorithm_type: 'grpo' });
    assert.deepEqual(
      [grpo.useCritic, grpo.computeAdvantageInTrainer, grpo.repeatTimes, grpo.advantageFn?.name, grpo.policyLossFn.name],
      [false, false, 2, 'grpo', 'ppo'],
    );
    assert.equal(grpo.klLossFn.args.kl_coef, 0.001);
    const dapo = resolveAlgorithm({ algorithm_type: 'dapo' });
    assert.deepEqual(
      [dapo.policyLossFn.args.clip_range_low, dapo.policyLossFn.args.clip_range_high, dapo.lossAggMode, dapo.klLossFn.name],
      [0.2, 0.28, 'token-mean', 'none'],
    );
    assert.equal(dapo.sampleStrategy.name, 'dynamic_sampling');
    assert.equal(dapo.repeatTimes, 16);
    assert.equal(resolveAlgorithm({ algorithm_type: 'gspo' }).policyLossFn.args.loss_agg_mode, 'seq-mean-token-mean');
    assert.equal(resolveAlgorithm({ algorithm_type: 'dr_grpo' }).policyLossFn.args.loss_agg_mode, 'seq-mean-token-sum-norm');
    const asymre = resolveAlgorithm({ algorithm_type: 'asymre' });
    assert.deepEqual([asymre.policyLossFn.name, asymre.useReference, asymre.entropyLossFn.name], ['opmd', false, 'none']);
    const mix = resolveAlgorithm({ algorithm_type: 'mix' });
    assert.deepEqual([mix.sampleStrategy.name, mix.entropyLossFn.name, mix.repeatTimes], ['mix', 'mix', 8]);
    assert.equal(mix.sampleStrategy.args.expert_data_ratio, 0.5);
    const sft = resolveAlgorithm({ algorithm_type: 'sft' });
    assert.deepEqual([sft.schema, sft.advantageFn, sft.useReference], ['sft', null, false]);
    const dpo = resolveAlgorithm({ algorithm_type: 'dpo' });
    assert.deepEqual([dpo.schema, dpo.useReference, dpo.repeatTimes], ['dpo', true, 2]);
    assert.equal(resolveAlgorithm({ algorithm_type: 'on_policy_distill' }).advantageFn?.args.kl_coef, 1.0);
    assert.equal(resolveAlgorithm().algorithmType, 'ppo', "Trinity-RFT's default algorithm_type");
    assert.equal(resolveAlgorithm({ algorithm_type: 'chord' }).policyLossFn.name, 'mix_chord');
    assert.equal(resolveAlgorithm({ algorithm_type: 'reinforce_plus_plus' }).algorithmType, 'reinforceplusplus');
    // Trinity-RFT v0.6's rows: grpo_verl (advantage in the trainer), gigpo, m2po (no reference, no KL, no entropy), jsd
    const grpoVerl = resolveAlgorithm({ algorithm_type: 'grpo_verl' });
    assert.deepEqual(
      [grpoVerl.advantageFn?.name, grpoVerl.computeAdvantageInTrainer, grpoVerl.useReference, grpoVerl.klLossFn.name],
      ['grpo_verl', true, true, 'k2'],
    );
    assert.deepEqual(grpoVerl.advantageFn?.args, { epsilon: 1e-6 });
    const gigpo = resolveAlgorithm({ algorithm_type: 'gigpo' });
    assert.deepEqual(
      [gigpo.advantageFn?.name, gigpo.computeAdvantageInTrainer, gigpo.useReference, gigpo.policyLossFn.name],
      ['gigpo', false, true, 'ppo'],
    );
    assert.deepEqual(gigpo.advantageFn?.args, {
      omega: 1,
      gamma: 1,
      fnorm: 'none',
      epsilon: 1e-6,
      step_reward_key: 'step_reward',
      env_state_hash_key: 'env_state_hash',
    });
    assert.deepEqual([gigpo.policyLossFn.args.clip_range, gigpo.lossAggMode], [0.2, 'token-mean']);
    const m2po = resolveAlgorithm({ algorithm_type: 'm2po' });
    assert.deepEqual(
      [m2po.advantageFn?.name, m2po.policyLossFn.name, m2po.useReference, m2po.klLossFn.name, m2po.entropyLossFn.name],
      ['grpo', 'm2po', false, 'none', 'none'],
    );
    assert.deepEqual(m2po.policyLossFn.args, { m2_threshold: 0.04, loss_agg_mode: 'token-mean', log_ratio_clip: 20 });
    const jsd = resolveAlgorithm({ algorithm_type: 'jsd' });
    assert.deepEqual(
      [jsd.advantageFn?.name, jsd.computeAdvantageInTrainer, jsd.useReference, jsd.policyLossFn.name, jsd.klLossFn.name],
      ['jsd', true, false, 'ppo', 'none'],
    );
    assert.deepEqual(jsd.advantageFn?.args, { lambda_coef: 0.5, kl_coef: 1, temperature: 1 });
  });

  test('old log-probs and rollout correction: defaults, overrides and refusals', () => {
    const grpo = resolveAlgorithm({ algorithm_type: 'grpo' });
    assert.equal(grpo.bypassOldLogprobs, true, "Trinity-RFT's default: the rollout's log-probs are the old ones");
    assert.deepEqual(grpo.rolloutCorrection, { rolloutIs: null, rolloutIsThreshold: 2 });
    const tis = resolveAlgorithm({
      algorithm_type: 'grpo',
      bypass_old_logprobs: false,
      rollout_correction: { rollout_is: 'token', rollout_is_threshold: 3 },
    });
    assert.equal(tis.bypassOldLogprobs, false);
    assert.deepEqual(tis.rolloutCorrection, { rolloutIs: 'token', rolloutIsThreshold: 3 });
    assert.throws(
      () => resolveAlgorithm({ algorithm_type: 'opmd', rollout_correction: { rollout_is: 'token' } }),
      /algorithm\.rollout_correction\.rollout_is: policy_loss_fn 'opmd' does not take per-token IS weights/,
    );
    assert.throws(
      () => resolveAlgorithm({ rollout_correction: { rollout_is: 'geometric' } }),
      /rollout_correction\.rollout_is: expected token, sequence or null/,
    );
    assert.throws(() => resolveAlgorithm({ rollout_correction: { rollout_rs: 'token' } }), /unknown argument 'rollout_rs'/);
    assert.throws(() => resolveAlgorithm({ rollout_correction: { rollout_is_threshold: 0 } }), /must be > 0/);
    assert.throws(() => resolveAlgorithm({ bypass_old_logprobs: 'no' }), /bypass_old_logprobs: expected true or false/);
    assert.throws(
      () => resolveAlgorithm({ algorithm_type: 'm2po', bypass_old_logprobs: false }),
      /'m2po' measures the log-ratio to the rollout policy/,
    );
  });

  test('overrides: modules, arguments, loss_agg_mode, repeat_times, optimizer', () => {
    const r = resolveAlgorithm({
      algorithm_type: 'grpo',
      repeat_times: 8,
      advantage_fn_args: { std_threshold: 0.0, epsilon: 1e-5 },
      policy_loss_fn: 'cispo',
      kl_loss_fn: 'low_var_kl',
      kl_loss_fn_args: { kl_coef: 0.01 },
      entropy_loss_fn_args: { entropy_coef: 1e-3 },
      loss_agg_mode: 'seq-mean-token-mean',
      optimizer: { lr: 2e-6, clip_grad: 0.5 },
    });
    assert.equal(r.repeatTimes, 8);
    assert.deepEqual(r.advantageFn, {
      name: 'grpo',
      args: { epsilon: 1e-5, std_threshold: 0, std_cal_level: 'group', duplicate_experiences: false, rank_penalty: null },
    });
    assert.equal(r.policyLossFn.name, 'cispo');
    assert.equal(r.policyLossFn.args.clip_range_high, 0.28, 'the module default');
    assert.equal(r.policyLossFn.args.loss_agg_mode, 'seq-mean-token-mean', 'loss_agg_mode is passed to the policy loss');
    assert.equal(r.entropyLossFn.args.loss_agg_mode, 'seq-mean-token-mean', 'and to the entropy loss');
    assert.deepEqual([r.klLossFn.name, r.klLossFn.args.kl_coef], ['low_var_kl', 0.01]);
    assert.equal(r.entropyLossFn.args.entropy_coef, 1e-3);
    assert.deepEqual([r.optimizer.lr, r.optimizer.clipGrad, r.optimizer.weightDecay], [2e-6, 0.5, 0.01]);
    // explicit policy args win over the injected loss_agg_mode
    const explicit = resolveAlgorithm({ algorithm_type: 'grpo', policy_loss_fn_args: { loss_agg_mode: 'seq-mean-token-sum' } });
    assert.equal(explicit.policyLossFn.args.loss_agg_mode, 'seq-mean-token-sum');
    assert.equal(explicit.lossAggMode, 'token-mean');
    // a preset's arguments belong to its module: choosing another module drops them
    const dapo = resolveAlgorithm({ algorithm_type: 'dapo', policy_loss_fn: 'gspo' });
    assert.equal(dapo.policyLossFn.args.clip_range_high, null);
    const dapoWider = resolveAlgorithm({ algorithm_type: 'dapo', policy_loss_fn_args: { clip_range_high: 0.3 } });
    assert.deepEqual([dapoWider.policyLossFn.args.clip_range_low, dapoWider.policyLossFn.args.clip_range_high], [0.2, 0.3]);
    // turning the KL off drops the reference; a critic follows the ppo advantage
    assert.equal(resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none' }).useReference, false);
    const gae = resolveAlgorithm({ algorithm_type: 'grpo', advantage_fn: 'ppo' });
    assert.deepEqual([gae.useCritic, gae.computeAdvantageInTrainer], [true, true]);
    assert.equal(resolveAlgorithm({ algorithm_type: 'sft', kl_loss_fn: 'k3' }).useReference, true);
  });

  test('bad names and arguments name the key path and suggest the closest name', () => {
    const cases: [unknown, RegExp][] = [
      [{ algorithm_type: 'grpoo' }, /Error: algorithm\.algorithm_type: unknown algorithm 'grpoo'; did you mean 'grpo'\?/],
      [
        { algorithm_type: 'grpo', advantage_fn_arg: {} },
        /Error: algorithm\.advantage_fn_arg: unknown key; did you mean 'advantage_fn_args'\?/,
      ],
      [
        { algorithm_type: 'grpo', policy_loss_fn: 'gpso' },
        /Error: algorithm\.policy_loss_fn: unknown policy_loss_fn 'gpso'; did you mean 'gspo'\?/,
      ],
      [{ algorithm_type: 'grpo', kl_loss_fn: 'k4' }, /Error: algorithm\.kl_loss_fn: unknown kl_loss_fn 'k4'; did you mean/],
      [
        { algorithm_type: 'grpo', sample_strategy: 'mixx' },
        /Error: algorithm\.sample_strategy: unknown sample_strategy 'mixx'; did you mean 'mix'\?/,
      ],
      [{ algorithm_type: 'grpo', entropy_loss_fn: 'defualt' }, /did you mean 'default'\?/],
      [
        { algorithm_type: 'grpo', policy_loss_fn_args: { clip_rang: 0.3 } },
        /Error: algorithm\.policy_loss_fn_args\.clip_rang: unknown argument of policy_loss_fn 'ppo'; did you mean 'clip_range'\?; expected one of clip_range,/,
      ],
      [
        { algorithm_type: 'grpo', advantage_fn_args: { std_treshold: 0 } },
        /Error: algorithm\.advantage_fn_args\.std_treshold: .*did you mean 'std_threshold'\?/,
      ],
      [
        { algorithm_type: 'grpo', policy_loss_fn_args: { clip_range: 'wide' } },
        /Error: algorithm\.policy_loss_fn_args\.clip_range: must be a number, got "wide" \(policy_loss_fn 'ppo'\)/,
      ],
      [{ algorithm_type: 'grpo', loss_agg_mode: 'token_mean' }, /Error: algorithm\.loss_agg_mode: .*did you mean 'token-mean'\?/],
      [{ algorithm_type: 'grpo', repeat_times: 0 }, /Error: algorithm\.repeat_times: expected a positive integer/],
      [{ algorithm_type: 'dpo', repeat_times: 4 }, /Error: algorithm\.repeat_times: dpo needs 2/],
      [
        { algorithm_type: 'dpo', policy_loss_fn: 'sft' },
        /Error: algorithm\.policy_loss_fn: dpo trains on chosen\/rejected pairs/,
      ],
      [
        { algorithm_type: 'sft', advantage_fn_args: { epsilon: 1 } },
        /Error: algorithm\.advantage_fn_args: given, but sft has no advantage_fn/,
      ],
      [{ algorithm_type: 'grpo', policy_loss_fn_args: 3 }, /Error: algorithm\.policy_loss_fn_args: expected a mapping/],
      [
        { algorithm_type: 'grpo', optimizer: { lrr: 1 } },
        /Error: algorithm\.optimizer: unknown argument 'lrr'; did you mean 'lr'\?/,
      ],
      ['grpo', /Error: algorithm: expected a mapping/],
    ];
    for (const [config, message] of cases) assert.throws(() => resolveAlgorithm(config), message, JSON.stringify(config));
    assert.throws(() => algorithmPreset('ppo2'), /did you mean 'ppo'\?/);
  });
});
