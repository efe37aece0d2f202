// The algorithm library: advantage functions, policy losses, KL estimators, entropy regularisation and loss
// aggregation as small pure functions over tensors, selectable by Trinity-RFT's names:
//   ADVANTAGE_FN.create('grpo', { epsilon: 1e-6 })(input)       → { advantages, returns, keep, metrics }
//   POLICY_LOSS_FN.create('ppo', { clip_range_high: 0.28 })(in) → { loss, metrics }
//   createKlFn('k3', { kl_coef: 0.01 }).calculateLoss(...)     createEntropyLossFn('default', { entropy_coef: 1e-3 })
//   aggregateLoss(values, mask, 'seq-mean-token-sum-norm')
export * from './advantage/index.js';
export * from './entropy.js';
export * from './kl.js';
export * from './loss-agg.js';
export * from './policy-loss/index.js';
export * from './registry.js';
export * from './utils.js';
