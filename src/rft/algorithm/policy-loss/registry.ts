// The policy-loss registry (`algorithm.policy_loss_fn`), created empty. Each loss's file registers its module at its
// bottom (`POLICY_LOSS_FN.register(toprPolicyLoss)`), and ./index.ts imports those files in registration order: import
// POLICY_LOSS_FN from ./index.ts, where every built-in is registered, not from here.
import { Registry } from '../registry.js';
import type { PolicyLossInput, PolicyLossResult } from './types.js';

export const POLICY_LOSS_FN = new Registry<PolicyLossInput, PolicyLossResult>('policy_loss_fn');
