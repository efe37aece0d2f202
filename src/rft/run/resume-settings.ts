// The settings a checkpoint records so that a resumed run can say what changed. A stage resumed with another batch
// size or learning rate trains on from the checkpoint's weights and optimizer moments under the new values: legal
// (a user may mean it), but never silent. Each checkpoint's state.json keeps these settings (`settings`); a stage
// resuming from it logs one warning line naming each one that differs, old → new. A checkpoint written before they
// were recorded has none to compare, and nothing is said.
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import type { StageSettings } from '../settings.js';

/** Config key → value, as state.json records them. */
export type RecordedSettings = Record<string, number | string | null>;

/** The settings a checkpoint records: those whose change makes a resumed run train differently from the saved one. */
export function recordedSettings(
  settings: Pick<StageSettings, 'batchSize' | 'trainBatchSize'>,
  algorithm: Pick<ResolvedAlgorithm, 'algorithmType' | 'repeatTimes' | 'optimizer'>,
): RecordedSettings {
  return {
    'algorithm.algorithm_type': algorithm.algorithmType,
    'algorithm.repeat_times': algorithm.repeatTimes,
    'algorithm.optimizer.lr': algorithm.optimizer.lr,
    'buffer.batch_size': settings.batchSize,
    'buffer.train_batch_size': settings.trainBatchSize,
  };
}

/**
 * One warning line naming each recorded setting (`recorded`, state.json's `settings`) that `current` changes, `key
 * old → new`; null when none changed or the checkpoint recorded none.
 */
export function changedSettingsWarning(recorded: unknown, current: RecordedSettings, checkpointDir: string): string | null {
  if (typeof recorded !== 'object' || recorded === null || Array.isArray(recorded)) return null;
  const saved = recorded as Record<string, unknown>;
  const changes = Object.entries(current)
    .filter(([key, value]) => Object.hasOwn(saved, key) && saved[key] !== value)
    .map(([key, value]) => `${key} ${JSON.stringify(saved[key])} → ${JSON.stringify(value)}`);
  if (changes.length === 0) return null;
  return `warning: resuming from ${checkpointDir} with changed settings: ${changes.join(', ')}`;
}
