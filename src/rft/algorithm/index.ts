// The algorithm library: advantage functions, policy losses, KL estimators, entropy regularisation and loss
// aggregation as small pure functions over tensors, selectable by Trinity-RFT's names:
//   ADVANTAGE_FN.create('grpo', { epsilon: 1e-6 })(input)       → { advantages, returns, keep, metrics }
//   POLICY_LOSS_FN.create('ppo', { clip_range_high: 0.28 })(in) → { loss, metrics }
//   createKlFn('k3', { kl_coef: 0.01 }).calculateLoss(...)     createEntropyLossFn('default', { entropy_coef: 1e-3 })
//   aggregateLoss(values, mask, 'seq-mean-token-sum-norm')
// Presets and resolution of the YAML `algorithm:` section, sample strategies, and the PPO critic:
//   resolveAlgorithm({ algorithm_type: 'grpo', policy_loss_fn_args: { clip_range_high: 0.28 } })
//   SAMPLE_STRATEGY.create('mix', { expert_data_ratio: 0.25 })({ read, batchSize, auxiliary })
//   Critic.fromPolicy(model), clippedValueLoss(...)
export * from './advantage/index.js';
export * from './critic.js';
export * from './entropy.js';
export * from './kl.js';
export * from './loss-agg.js';
export * from './metrics.js';
export * from './policy-loss/index.js';
export * from './presets.js';
export * from './registry.js';
export * from './rollout-correction.js';
export * from './sample-strategy.js';
export * from './utils.js';
export * from './plugins.js';
