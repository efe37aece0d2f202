// The sample-strategy registry (`algorithm.sample_strategy`), created empty. Each strategy's file registers its
// module at its bottom (`SAMPLE_STRATEGY.register(mixSampleStrategy)`), and ../sample-strategy.ts imports those files
// in registration order: import SAMPLE_STRATEGY from there, where every built-in is registered, not from here.
import { Registry } from '../registry.js';
import type { SampleStrategyInit, SampleStrategyInstance } from './contract.js';

export const SAMPLE_STRATEGY = new Registry<SampleStrategyInit, SampleStrategyInstance>('sample_strategy');
