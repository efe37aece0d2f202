// The advantage-function registry (`algorithm.advantage_fn`), created empty. Each function's file registers its
// module at its bottom (`ADVANTAGE_FN.register(grpoAdvantage)`), and ./index.ts imports those files in registration
// order: import ADVANTAGE_FN from ./index.ts, where every built-in is registered, not from here.
import { Registry } from '../registry.js';
import type { AdvantageInput, AdvantageResult } from './types.js';

export const ADVANTAGE_FN = new Registry<AdvantageInput, AdvantageResult>('advantage_fn');
