// Shared test helpers: small valid experiences and temporary folders.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Experience } from '../../../src/rft/experience.js';

export function makeExperience(eid: string, extra: Partial<Experience> = {}): Experience {
  return {
    eid,
    tokens: [5, 6, 7, 8, 9],
    promptLength: 3,
    logprobs: [-0.5, -1.25],
    reward: 1,
    info: { taskId: `task-${eid}`, modelVersion: 0, useCount: 0 },
    ...extra,
  };
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `trinity-${prefix}-`));
}
