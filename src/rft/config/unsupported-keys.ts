// Keys of Trinity-RFT's schema whose feature this backend does not have, and why: the hint an unknown key gets
// (./parse.ts), before "did you mean", so a config written for Trinity is told what is missing rather than only
// "unknown key"; likewise Trinity's values of a key this backend has (UNSUPPORTED_VALUES: taskset storage_type
// env_service), whose problem says what to use instead of only listing the values accepted. Unlike ./ignored-keys.ts these are not accepted: dropping them would change what the run does (a
// vision-language task trained without its videos). Paths are key paths of a run in the notation of ./refusals.ts
// (`*`: any list item or mapping key).
import { STORAGE_PATHS } from './ignored-keys.js';
import { matchesPath } from './refusals.js';

export interface UnsupportedKey {
  /** The key path (with `*`). */
  readonly path: string;
  /** What the key does in Trinity and why it has no counterpart here. */
  readonly why: string;
}

const NO_VIDEO = 'videos for a vision-language model: images are supported here (format.image_key), videos are not';

export const UNSUPPORTED_KEYS: readonly UnsupportedKey[] = [
  ...STORAGE_PATHS.map((base): UnsupportedKey => ({ path: `${base}.format.video_key`, why: NO_VIDEO })),
];

/** A value of Trinity's for a key this backend has, whose feature is not here: the hint its problem gets. */
export interface UnsupportedValue {
  /** The key path (with `*`). */
  readonly path: string;
  readonly value: string;
  /** What the value does in Trinity and what to use here instead. */
  readonly why: string;
}

const ENV_SERVICE =
  "tasks served by an environment service over HTTP (Trinity's agentopia example, with its agent in Python): write " +
  'the tasks to a file (storage_type file) and the environment as a workflow file (`env.ts#workflow`), or keep the ' +
  "service and its agent and train on the agent's calls (workflowWithRecording, or mode serve)";

export const UNSUPPORTED_VALUES: readonly UnsupportedValue[] = [
  ...STORAGE_PATHS.slice(0, 3).map(
    (base): UnsupportedValue => ({ path: `${base}.storage_type`, value: 'env_service', why: ENV_SERVICE }),
  ),
];

/** The hint for `value` at `path` (concrete, dotted) that Trinity accepts and this backend does not, or null. */
export function unsupportedValueHint(path: string, value: unknown): string | null {
  const entry = UNSUPPORTED_VALUES.find((v) => v.value === value && matchesPath(v.path, path));
  return entry === undefined ? null : `Trinity-RFT's value, not supported here: ${entry.why}`;
}

/** The hint for an unknown key at `path` (concrete, dotted) that Trinity has and this backend does not, or null. */
export function unsupportedKeyHint(path: string): string | null {
  const key = UNSUPPORTED_KEYS.find((k) => matchesPath(k.path, path));
  return key === undefined ? null : `Trinity-RFT's key, not supported here: ${key.why}`;
}
