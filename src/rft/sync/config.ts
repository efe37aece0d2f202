// The `synchronizer` section of the run config (Trinity's SynchronizerConfig): how and how often the trainer's
// weights reach the explorer — the schema with its defaults, sync_method derived from the mode and the rollout
// engine with the rules that tie them (Trinity's SynchronizerConfigValidator), and the settings the weight channels
// (./weight-channel.ts) read. Written in the config language of src/rft/config/.
import { z } from 'zod';
import type { ReportProblem } from '../config/errors.js';
import { intIn, MAX_STEPS, MAX_TIMEOUT_SECONDS, numIn } from '../config/value-schemas.js';
import type { StageMode, StageSettings } from '../settings.js';

export const SYNC_METHODS = ['memory', 'checkpoint'] as const;
export const SYNC_STYLES = ['fixed', 'trainer_driven', 'explorer_driven', 'fully_async'] as const;
export type SyncMethod = (typeof SYNC_METHODS)[number];
export type SyncStyle = (typeof SYNC_STYLES)[number];

/**
 * Trinity's other spellings of a sync style: its enum is case-insensitive (`FIXED`, `Explorer_Driven`), and the names
 * of v0.3-v0.4 (`dynamic_by_trainer`, `dynamic_by_explorer`) are aliases of trainer_driven / explorer_driven since
 * v0.5 (trinity/common/constants.py SyncStyleEnumMeta). The resolved config shows the name it became.
 */
const SYNC_STYLE_ALIASES: Readonly<Record<string, SyncStyle>> = {
  dynamic_by_trainer: 'trainer_driven',
  dynamic_by_explorer: 'explorer_driven',
};

/** A sync_style as written, in this project's name: lower-cased, an alias replaced; anything else as it was. */
export function canonicalSyncStyle(value: unknown): unknown {
  if (typeof value !== 'string') return value;
  const lower = value.toLowerCase();
  return SYNC_STYLE_ALIASES[lower] ?? ((SYNC_STYLES as readonly string[]).includes(lower) ? lower : value);
}

export const SynchronizerSchema = z.strictObject({
  sync_method: z.enum(SYNC_METHODS).nullable().default(null), // Trinity nccl; derived: memory in mode both, else checkpoint
  sync_interval: intIn(1, MAX_STEPS).default(1), // [1, 1e9]
  sync_offset: intIn(0, 1024).default(0), // [0, 1024]; 1: one-step off-policy
  sync_timeout: numIn(0, MAX_TIMEOUT_SECONDS, true).default(3600), // (0, 2147483] seconds
  sync_style: z.preprocess(canonicalSyncStyle, z.enum(SYNC_STYLES)).default('fixed'), // Trinity's aliases and any case
  max_staleness: intIn(0, MAX_STEPS).nullable().default(null), // [0, 1e9]; most model versions an experience may lag; null: no bound
});

export type SynchronizerConfig = Omit<z.output<typeof SynchronizerSchema>, 'sync_method'> & { sync_method: SyncMethod };

/** What the synchronizer's rules read from other sections. */
export interface SynchronizerContext {
  mode: StageMode;
  /** explorer.rollout_model.engine_type openai: an external server, which can only take weights from disk. */
  remoteEngine: boolean;
  /** explorer.rollout_model.engine_process: engines in processes of their own load weights from disk too. */
  engineProcess: boolean;
}

/** sync_method derived (memory in mode both with engines in this process, else checkpoint) and the section's rules. */
export function resolveSynchronizer(
  sync: z.output<typeof SynchronizerSchema>,
  { mode, remoteEngine, engineProcess }: SynchronizerContext,
  problem: ReportProblem,
): SynchronizerConfig {
  const syncMethod = sync.sync_method ?? (mode === 'both' && !remoteEngine && !engineProcess ? 'memory' : 'checkpoint');
  if (syncMethod === 'memory' && remoteEngine) {
    problem(
      'synchronizer.sync_method',
      "'memory' cannot reach an external server (engine_type openai): use 'checkpoint' (the server reloads from disk)",
    );
  }
  if (syncMethod === 'memory' && engineProcess && !remoteEngine) {
    problem(
      'synchronizer.sync_method',
      "'memory' cannot reach engines in other processes (explorer.rollout_model.engine_process): use 'checkpoint' " +
        '(each engine process reloads from disk)',
    );
  }
  if (syncMethod === 'memory' && mode !== 'both') {
    problem(
      'synchronizer.sync_method',
      `'memory' hands weights over inside one process (mode both); mode ${mode} needs 'checkpoint'`,
    );
  }
  if (sync.sync_style === 'fully_async' && sync.sync_offset !== 0) {
    problem(
      'synchronizer.sync_offset',
      `(${sync.sync_offset}) has no meaning with sync_style fully_async: the explorer never waits for weights, it ` +
        'swaps in each version as soon as the trainer publishes it (every sync_interval steps); remove it',
    );
  }
  if (sync.max_staleness !== null && sync.max_staleness < sync.sync_offset) {
    problem(
      'synchronizer.max_staleness',
      `(${sync.max_staleness}) is less than sync_offset (${sync.sync_offset}): every experience would be too stale`,
    );
  }
  return { ...sync, sync_method: syncMethod };
}

/** The stage's sync settings (seconds become milliseconds). */
export function syncSettings(sync: SynchronizerConfig): StageSettings['sync'] {
  return {
    style: sync.sync_style,
    interval: sync.sync_interval,
    offset: sync.sync_offset,
    timeoutMs: sync.sync_timeout * 1000,
    maxStaleness: sync.max_staleness,
  };
}

/**
 * True when the explorer and the trainer of a mode-both stage never run at once: explore step s waits for the
 * weights of train step s − 1, which waits for the experiences of explore step s − 1.
 */
export function takesTurns(sync: SynchronizerConfig): boolean {
  return sync.sync_style === 'fixed' && sync.sync_interval === 1 && sync.sync_offset === 0;
}
