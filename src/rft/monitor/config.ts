// The `monitor` section of the run config: which metric backends a run logs to (JSONL is always written) and their
// arguments — the schema with its defaults, the rule on monitor_args, and the settings the stage hands to
// createMonitor (./monitor.ts). Written in the config language of src/rft/config/.
import { z } from 'zod';
import type { ReportProblem } from '../config/errors.js';
import { omitNulls } from '../config/mapping.js';
import { describeValue } from '../config/source.js';
import { args, bool } from '../config/value-schemas.js';
import type { MonitorArgs } from './monitor.js';

export const MONITOR_TYPES = ['tensorboard', 'wandb', 'mlflow', 'jsonl'] as const;
export type MonitorType = (typeof MONITOR_TYPES)[number];

export const MonitorSchema = z.strictObject({
  monitor_type: z
    .preprocess((v) => (typeof v === 'string' ? [v] : v), z.array(z.enum(MONITOR_TYPES)))
    .default((): MonitorType[] => ['tensorboard']), // JSONL metrics are always written
  monitor_args: args().default(() => ({})),
  detailed_stats: bool().default(false),
});

export type MonitorConfig = z.output<typeof MonitorSchema>;

/** monitor_args by monitor type (Trinity's WandbMonitor / MlflowMonitor default_args). */
const MONITOR_ARGS: Readonly<Record<MonitorType, readonly string[]>> = {
  jsonl: [],
  tensorboard: [],
  wandb: ['base_url', 'api_key'],
  mlflow: ['uri', 'username', 'password'],
};

/** monitor_args: the keys the chosen backends take, each a string. */
export function checkMonitor(monitor: MonitorConfig, problem: ReportProblem): void {
  const monitorKeys = [...new Set(monitor.monitor_type.flatMap((type) => MONITOR_ARGS[type]))];
  for (const [key, value] of Object.entries(monitor.monitor_args)) {
    if (!monitorKeys.includes(key)) {
      const types = monitor.monitor_type.join(', ');
      const hint = monitorKeys.length > 0 ? `expected one of: ${monitorKeys.join(', ')}` : 'they take none';
      problem(`monitor.monitor_args.${key}`, `is not an argument of monitor_type ${types}; ${hint}`);
    } else if (typeof value !== 'string') {
      problem(`monitor.monitor_args.${key}`, `expected a string, got ${describeValue(value)}`);
    }
  }
}

/** The stage's monitor settings: the backends, and monitor_args (checked above) in the monitors' names. */
export function monitorSettings(monitor: MonitorConfig): { monitorTypes: MonitorType[]; monitorArgs: MonitorArgs } {
  const text = (key: string): string | undefined =>
    typeof monitor.monitor_args[key] === 'string' ? monitor.monitor_args[key] : undefined;
  return {
    monitorTypes: monitor.monitor_type,
    monitorArgs: omitNulls({
      baseUrl: text('base_url') ?? null,
      apiKey: text('api_key') ?? null,
      uri: text('uri') ?? null,
      username: text('username') ?? null,
      password: text('password') ?? null,
    }),
  };
}
