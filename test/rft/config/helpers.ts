// Files a config's pre-run checks (src/rft/config/preflight.ts) look for: a model folder (they read only its
// config.json) and tasksets.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** A folder with the config.json of a (weightless) model of `vocabSize` tokens; returns its path. */
export function modelFolder(dir: string, vocabSize = 100): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify({ model_type: 'qwen2', vocab_size: vocabSize })}\n`);
  return dir;
}

/** A JSONL taskset of `rows` (default: two prompt/response rows); returns its path. */
export function tasksetFile(
  file: string,
  rows: readonly unknown[] = [
    { prompt: '1+1=', response: '2' },
    { prompt: '2+2=', response: '4' },
  ],
): string {
  writeFileSync(file, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  return file;
}
