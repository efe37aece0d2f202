// The quickstart on a mixture of experts, shortened (examples/quickstart/moe-short-run.ts: the example's config over a
// tiny random qwen3_moe and one-digit addition), with router replay on. GRPO must raise the reward of the rollouts it
// trains on: the mean of the last 6 of 24 steps at least 0.05 above the first 6's (measured: 0.66 → 0.79; a step's
// mean varies by about ±0.05). Every row trains through the experts its rollout chose (router_replay/rows = 1), and
// with the trainer routing as the engine did, its log-probs equal the engine's (rollout_corr/abs_logprob_diff, float32:
// below 1e-4; measured ~2e-7). The test fixes the intra-op threads at 1.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { prepareShortMoeRun, SHORT_MOE_GRPO_STEPS, shortMoeRunOverrides } from '../../examples/quickstart/moe-short-run.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import * as torch from '../../src/torch/index.js';

const example = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'quickstart');
let root: string;
let threads: number;

before(() => {
  threads = torch.getNumThreads();
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'quickstart-moe-'));
  prepareShortMoeRun(root);
});
after(() => {
  torch.setNumThreads(threads);
  rmSync(root, { recursive: true, force: true });
});

/** The values of the metric whose name is or ends with `/key`, per line that has it. */
const series = (rows: Record<string, number>[], key: string) =>
  rows.flatMap((r) =>
    Object.entries(r)
      .filter(([name, value]) => (name === key || name.endsWith(`/${key}`)) && typeof value === 'number')
      .map(([, value]) => value),
  );

test('examples/quickstart on a tiny qwen3_moe with router replay: GRPO raises the reward', async () => {
  const overrides = shortMoeRunOverrides(root, { name: 'addition', dtype: 'float32', replay: true });
  const config = loadConfig(join(example, 'config.yaml'), { resolveAlgorithm, overrides });
  const result = await runConfig(config, { log: () => {} });
  assert.ok(result.finalModelDir);
  const grpo = readFileSync(join(root, 'runs', 'quickstart', 'addition', 'grpo', 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>);
  const reward = series(grpo, 'rollout/reward/mean');
  assert.equal(reward.length, SHORT_MOE_GRPO_STEPS);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const [first, last] = [mean(reward.slice(0, 6)), mean(reward.slice(-6))];
  assert.ok(last >= first + 0.05, `rollout reward: first 6 steps ${first}, last 6 steps ${last}`);
  assert.deepEqual(series(grpo, 'router_replay/rows'), Array(SHORT_MOE_GRPO_STEPS).fill(1));
  const gap = series(grpo, 'rollout_corr/abs_logprob_diff');
  assert.equal(gap.length, SHORT_MOE_GRPO_STEPS);
  assert.ok(Math.max(...gap) < 1e-4, `train/rollout log-prob gap with replay: ${gap.join(', ')}`);
});
