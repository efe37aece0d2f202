// A stage resumed with a changed batch size or learning rate says so (src/rft/run/resume-settings.ts): the
// checkpoint's state.json records the settings, and the resuming stage logs one warning line naming each change.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { ResolvedAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { recordedSettings } from '../../../src/rft/run/resume-settings.js';
import { StageParts } from '../../../src/rft/run/stage-parts.js';
import type { StageSettings } from '../../../src/rft/settings.js';

const algorithm = (lr: number) => ({ algorithmType: 'grpo', repeatTimes: 4, optimizer: { lr } }) as unknown as ResolvedAlgorithm;
const settings = (jobDir: string, batchSize: number) =>
  ({
    jobDir,
    stageName: 's',
    batchSize,
    trainBatchSize: batchSize * 4,
    explorer: { name: 'explorer' },
  }) as unknown as StageSettings;

/** A job folder whose latest checkpoint (step 2) recorded `recorded` (none: a checkpoint from before they were kept). */
function jobWithCheckpoint(recorded?: Record<string, unknown>): string {
  const jobDir = mkdtempSync(join(tmpdir(), 'trinity-resume-settings-'));
  const dir = join(jobDir, 'checkpoints', 'global_step_2');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'state.json'), JSON.stringify({ step: 2, ...(recorded ? { settings: recorded } : {}) }));
  return jobDir;
}

/** The lines a stage logs when it is made over `jobDir` with batch size `batchSize` and learning rate `lr`. */
function resumeLog(jobDir: string, batchSize: number, lr: number): string[] {
  const lines: string[] = [];
  new StageParts(settings(jobDir, batchSize), algorithm(lr), {}, (line) => lines.push(line), { explorerProcess: false });
  return lines;
}

describe('resuming with changed settings', () => {
  it('one warning line names each changed key, old → new', () => {
    const recorded = recordedSettings(settings('', 4), algorithm(1e-6));
    const jobDir = jobWithCheckpoint(recorded);
    const lines = resumeLog(jobDir, 8, 2e-6);
    const warnings = lines.filter((l) => l.includes('warning'));
    assert.equal(warnings.length, 1, lines.join('\n'));
    assert.equal(
      warnings[0],
      `[s] warning: resuming from ${join(jobDir, 'checkpoints', 'global_step_2')} with changed settings: ` +
        'algorithm.optimizer.lr 0.000001 → 0.000002, buffer.batch_size 4 → 8, buffer.train_batch_size 16 → 32',
    );
  });

  it('says nothing when nothing changed, or when the checkpoint recorded no settings', () => {
    const recorded = recordedSettings(settings('', 4), algorithm(1e-6));
    assert.deepEqual(
      resumeLog(jobWithCheckpoint(recorded), 4, 1e-6).filter((l) => l.includes('warning')),
      [],
    );
    assert.deepEqual(
      resumeLog(jobWithCheckpoint(), 8, 2e-6).filter((l) => l.includes('warning')),
      [],
    );
  });
});
