// Policy loss functions (`algorithm.policy_loss_fn`), by Trinity-RFT name. POLICY_LOSS_FN.create('ppo',
// { clip_range_high: 0.28 }) gives input → { loss, metrics }.
import { Registry } from '../registry.js';
import { chordPolicyLoss } from './chord.js';
import { cispoPolicyLoss } from './cispo.js';
import { dpoLoss } from './dpo.js';
import { gspoPolicyLoss } from './gspo.js';
import { importanceSamplingPolicyLoss } from './importance-sampling.js';
import { mixPolicyLoss } from './mix.js';
import { opmdPolicyLoss } from './opmd.js';
import { ppoPolicyLoss } from './ppo.js';
import { recPolicyLoss } from './rec.js';
import { sapoPolicyLoss } from './sapo.js';
import { sftIsLoss, sftLoss, sftPhiLoss } from './sft.js';
import { sppoPolicyLoss } from './sppo.js';
import { toprPolicyLoss } from './topr.js';
import type { PolicyLossInput, PolicyLossResult } from './types.js';

export const POLICY_LOSS_FN = new Registry<PolicyLossInput, PolicyLossResult>('policy_loss_fn')
  .register(ppoPolicyLoss)
  .register(gspoPolicyLoss)
  .register(cispoPolicyLoss)
  .register(sapoPolicyLoss)
  .register(toprPolicyLoss)
  .register(opmdPolicyLoss)
  .register(sppoPolicyLoss)
  .register(recPolicyLoss)
  .register(importanceSamplingPolicyLoss)
  .register(sftLoss)
  .register(sftIsLoss)
  .register(sftPhiLoss)
  .register(dpoLoss)
  .register(mixPolicyLoss)
  .register(chordPolicyLoss);

export * from './chord.js';
export * from './cispo.js';
export * from './dpo.js';
export * from './gspo.js';
export * from './importance-sampling.js';
export * from './mix.js';
export * from './opmd.js';
export * from './ppo.js';
export * from './rec.js';
export * from './sapo.js';
export * from './sft.js';
export * from './sppo.js';
export * from './topr.js';
export * from './types.js';
