// The JSONL files a stage writes one line per step into (metrics.jsonl, eval_samples.jsonl: {"step": N, ...}), cut
// back when a stage resumes: a resumed run keeps the lines of the steps it will not redo. Written to a temporary file
// and renamed, so a kill in the middle leaves the old file whole.
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';

/** Keeps the lines of `file` whose step `keep` accepts; lines without a numeric step (or not JSON) go. */
export function keepStepLines(file: string, keep: (step: number) => boolean): void {
  if (!existsSync(file)) return;
  const kept = readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => {
      if (line.trim() === '') return false;
      try {
        const step = (JSON.parse(line) as { step?: unknown }).step;
        return typeof step === 'number' && keep(step);
      } catch {
        return false;
      }
    });
  writeFileSync(`${file}.tmp`, kept.length ? `${kept.join('\n')}\n` : '');
  renameSync(`${file}.tmp`, file);
}
