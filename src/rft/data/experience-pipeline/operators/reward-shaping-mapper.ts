// `reward_shaping_mapper` (Trinity-RFT's RewardShapingMapper): reshapes each reward with statistics the experience
// carries. For each entry {stats_key: k, op_type, weight: w} in order, with s = info[k] (else metrics[k]):
//   ADD  r ← r + w·s      SUB  r ← r − w·s      MUL  r ← r · (w·s)      DIV  r ← r / (w·s)   (unchanged when w·s = 0)
// As Trinity: an experience without the statistic keeps its reward for that entry (counted: missing_stats), and an
// experience without a reward is dropped (counted: no_reward). A statistic that is not a finite number is an error.
import type { Experience } from '../../../experience.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export const OP_TYPES = ['ADD', 'SUB', 'MUL', 'DIV'] as const;
export type OpType = (typeof OP_TYPES)[number];

export interface RewardShapingConfig {
  statsKey: string;
  opType: OpType;
  weight: number;
}

export interface RewardShapingMapperOptions {
  /** [{stats_key, op_type (default ADD), weight (default 1.0)}] */
  rewardShapingConfigs: unknown[];
}

const NAME = 'reward_shaping_mapper';

/** The configs as written (snake_case, Trinity's) checked and typed; errors name the entry and key. */
export function parseShapingConfigs(configs: unknown): RewardShapingConfig[] {
  if (!Array.isArray(configs)) throw new Error(`experience operator '${NAME}': reward_shaping_configs must be a list`);
  return configs.map((raw, i) => {
    const where = `experience operator '${NAME}': reward_shaping_configs[${i}]`;
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`${where} must be a mapping`);
    const entry = raw as Record<string, unknown>;
    for (const key of Object.keys(entry))
      if (!['stats_key', 'op_type', 'weight'].includes(key))
        throw new Error(`${where}: unknown key '${key}' (expected stats_key, op_type, weight)`);
    const { stats_key: statsKey, op_type: opType = 'ADD', weight = 1 } = entry;
    if (typeof statsKey !== 'string' || statsKey === '') throw new Error(`${where}.stats_key must be a non-empty string`);
    if (typeof opType !== 'string' || !(OP_TYPES as readonly string[]).includes(opType))
      throw new Error(`${where}.op_type must be one of ${OP_TYPES.join(', ')}, got ${JSON.stringify(opType)}`);
    if (typeof weight !== 'number' || !Number.isFinite(weight))
      throw new Error(`${where}.weight must be a finite number, got ${JSON.stringify(weight)}`);
    return { statsKey, opType: opType as OpType, weight };
  });
}

function statOf(e: Experience, key: string): number | undefined {
  const value = Object.hasOwn(e.info, key) ? e.info[key] : e.metrics?.[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value))
    throw new Error(
      `experience operator '${NAME}': experience '${e.eid}' has ${key} = ${JSON.stringify(value)}, not a finite number`,
    );
  return value;
}

export function shapeReward(reward: number, stat: number, { opType, weight }: RewardShapingConfig): number {
  switch (opType) {
    case 'ADD':
      return reward + weight * stat;
    case 'SUB':
      return reward - weight * stat;
    case 'MUL':
      return reward * (weight * stat);
    case 'DIV':
      return weight * stat === 0 ? reward : reward / (weight * stat);
  }
}

export const rewardShapingMapper: ExperienceOperatorModule<RewardShapingMapperOptions> = {
  description: 'reshapes rewards with statistics from info/metrics (ADD, SUB, MUL, DIV with a weight)',
  defaults: { rewardShapingConfigs: [] },
  create: (options) => {
    const configs = parseShapingConfigs(options.rewardShapingConfigs);
    return {
      process: (experiences) => {
        const out: Experience[] = [];
        const diffs: number[] = [];
        let missing = 0;
        for (const e of experiences) {
          if (typeof e.reward !== 'number') continue;
          let reward = e.reward;
          for (const config of configs) {
            const stat = statOf(e, config.statsKey);
            if (stat === undefined) missing++;
            else reward = shapeReward(reward, stat, config);
          }
          diffs.push(reward - e.reward);
          out.push(reward === e.reward ? e : { ...e, reward });
        }
        const metrics: Record<string, number> = { no_reward: experiences.length - out.length, missing_stats: missing };
        if (diffs.length > 0) {
          metrics['reward_diff/mean'] = diffs.reduce((a, b) => a + b, 0) / diffs.length;
          metrics['reward_diff/min'] = Math.min(...diffs);
          metrics['reward_diff/max'] = Math.max(...diffs);
        }
        return { experiences: out, metrics };
      },
    };
  },
};

registerExperienceOperator('reward_shaping_mapper', rewardShapingMapper);
