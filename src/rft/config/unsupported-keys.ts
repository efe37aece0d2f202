// Keys of Trinity-RFT's schema whose feature this backend does not have, and why: the hint an unknown key gets
// (./parse.ts), before "did you mean", so a config written for Trinity is told what is missing rather than only
// "unknown key". Unlike ./ignored-keys.ts these are not accepted: dropping them would change what the run does (a
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

/** The hint for an unknown key at `path` (concrete, dotted) that Trinity has and this backend does not, or null. */
export function unsupportedKeyHint(path: string): string | null {
  const key = UNSUPPORTED_KEYS.find((k) => matchesPath(k.path, path));
  return key === undefined ? null : `Trinity-RFT's key, not supported here: ${key.why}`;
}
