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

/**
 * Trinity-RFT's monitor types that this backend has no client for, each with why and what to use instead: the schema
 * takes the name so that checkMonitor can refuse it with this message (not as an unknown value).
 */
export const REFUSED_MONITOR_TYPES = {
  swanlab:
    'SwanLab is not supported here: it has no JavaScript client (npm has no swanlab package) and its logging API is ' +
    "the Python SDK's own; use wandb or mlflow for a remote dashboard (both through their REST APIs), or tensorboard " +
    'and the JSONL metrics (trinity report, trinity studio) locally',
} as const;

const isMonitorType = (type: string): type is MonitorType => (MONITOR_TYPES as readonly string[]).includes(type);

export const MonitorSchema = z.strictObject({
  monitor_type: z
    .preprocess(
      (v) => (typeof v === 'string' ? [v] : v),
      z.array(z.enum([...MONITOR_TYPES, ...(Object.keys(REFUSED_MONITOR_TYPES) as (keyof typeof REFUSED_MONITOR_TYPES)[])])),
    )
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

/** monitor_type: no refused backend (REFUSED_MONITOR_TYPES); monitor_args: the keys the chosen backends take, each a string. */
export function checkMonitor(monitor: MonitorConfig, problem: ReportProblem): void {
  for (const [type, message] of Object.entries(REFUSED_MONITOR_TYPES)) {
    if ((monitor.monitor_type as readonly string[]).includes(type)) problem('monitor.monitor_type', `got '${type}': ${message}`);
  }
  const backends = monitor.monitor_type.filter(isMonitorType);
  const monitorKeys = [...new Set(backends.flatMap((type) => MONITOR_ARGS[type]))];
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
    monitorTypes: monitor.monitor_type.filter(isMonitorType), // a refused type never gets here: checkMonitor refuses it
    monitorArgs: omitNulls({
      baseUrl: text('base_url') ?? null,
      apiKey: text('api_key') ?? null,
      uri: text('uri') ?? null,
      username: text('username') ?? null,
      password: text('password') ?? null,
    }),
  };
}
