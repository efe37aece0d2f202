// Router replay end to end (algorithm.enable_router_replay): a GRPO run on a tiny random qwen3_moe whose engine records
// each token's experts, the experiences carry them, and the trainer routes every row through them
// (router_replay/rows = 1). The same run without replay is the baseline: the rollout-correction metrics of both (the
// gap between the trainer's and the engine's log-probs) are printed for the record.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

/** The run's metric lines with `replay` on or off (2 steps, same seeds). */
function grpoRun(replay: boolean): Record<string, unknown>[] {
  const algorithm = `algorithm:
  algorithm_type: grpo
  repeat_times: 4
  enable_router_replay: ${replay}
  optimizer:
    lr: 0.01`;
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 2,
    saveInterval: 2,
    algorithm,
    model: { architecture: 'qwen3_moe', numLayers: 2, numExperts: 8, numExpertsPerTok: 2 },
  });
  try {
    const run = spawnSync(process.execPath, [trinity, 'run', '--config', configFile], { encoding: 'utf8', timeout: 540_000 });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    return readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const pick = (lines: Record<string, unknown>[], suffix: string) =>
  lines.flatMap((l) =>
    Object.entries(l)
      .filter(([k]) => k.endsWith(suffix))
      .map(([, v]) => v as number),
  );

test('grpo with enable_router_replay on a qwen3_moe: every row trains through its recorded experts', { timeout: 600_000 }, () => {
  const replayed = grpoRun(true);
  const rows = pick(replayed, 'router_replay/rows');
  assert.deepEqual(rows, [1, 1], `router_replay/rows per step: ${JSON.stringify(rows)}`);
  const plain = grpoRun(false);
  assert.deepEqual(pick(plain, 'router_replay/rows'), [], 'no replay metric without the key');
  for (const [name, lines] of [
    ['replay on ', replayed],
    ['replay off', plain],
  ] as const) {
    const gap = pick(lines, 'rollout_corr/abs_logprob_diff');
    const kl = pick(lines, 'rollout_corr/kl');
    console.log(
      `# ${name}: rollout_corr/abs_logprob_diff per step ${JSON.stringify(gap)}, rollout_corr/kl ${JSON.stringify(kl)}`,
    );
    assert.equal(gap.length, 2);
  }
});
