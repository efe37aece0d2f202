// GRPO's advantages are computed in the trainer, so the experiences in the buffer carry none; the trainer records the
// advantage each rollout was trained with (<stage>/trainer_advantages.jsonl, src/rft/monitor/advantage-record.ts) and
// the Studio's rollout API joins it by experience id. Checked on a real two-step GRPO run against a hand computation
// over the buffer's rewards: per train step and task, A_i = (r_i − mean(r)) / (std(r) + 1e-6), std unbiased.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { ADVANTAGES_FILE, appendAdvantages } from '../../src/rft/monitor/advantage-record.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import { startStudio } from '../../src/studio/index.js';
import { makeJob } from '../rft/run/helpers.js';

/** (r − mean) / (std + ε) over one group, std with Bessel's correction (torch.std), as written in grpo.ts. */
function grpoByHand(rewards: number[]): number[] {
  const n = rewards.length;
  const mean = rewards.reduce((a, b) => a + b, 0) / n;
  const std = Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / (n - 1));
  return rewards.map((r) => (r - mean) / (std + 1e-6));
}

test('a GRPO run records the advantage of every trained rollout, and the Studio shows it', { timeout: 240_000 }, async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 2 });
  // rewards that differ within a group: the sum of the response's character codes, mod 7
  writeFileSync(
    join(root, 'reward.ts'),
    'export const spread = ({ response }) => [...response].reduce((a, c) => a + c.charCodeAt(0), 0) % 7;\n',
  );
  const text = readFileSync(configFile, 'utf8')
    .replace('default_reward_fn_type: accuracy_reward', 'default_reward_fn_type: ./reward.ts#spread')
    .replace(
      'buffer:\n  batch_size: 2',
      'buffer:\n  batch_size: 2\n  trainer_input:\n    experience_buffer: {storage_type: sql}',
    );
  writeFileSync(configFile, text);
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: () => {}, baseDir: root });

  const db = new Database(join(jobDir, 'buffer', 'experience_buffer.db'), { readonly: true });
  const experiences = (db.prepare('SELECT data FROM experience_buffer').all() as { data: string }[]).map(
    (row) => JSON.parse(row.data) as { eid: string; reward: number; advantages?: number[]; info: { taskId: string } },
  );
  db.close();
  assert.equal(experiences.length, 2 * 2 * 4, 'two steps of two tasks × four repeats');
  assert.ok(
    experiences.every((e) => e.advantages === undefined),
    'GRPO computes advantages in the trainer: the buffer holds none',
  );
  const byEid = new Map(experiences.map((e) => [e.eid, e]));

  const lines = readFileSync(join(jobDir, ADVANTAGES_FILE), 'utf8').trim().split('\n');
  const expected = new Map<string, number>();
  const recorded = lines.map((line) => JSON.parse(line) as { step: number; advantages: Record<string, number> });
  assert.deepEqual(
    recorded.map((r) => r.step),
    [1, 2],
  );
  for (const { advantages } of recorded) {
    assert.equal(Object.keys(advantages).length, 8, 'every experience of the train batch');
    const groups = new Map<string, string[]>();
    for (const eid of Object.keys(advantages)) {
      const taskId = byEid.get(eid)?.info.taskId;
      assert.ok(taskId !== undefined, `recorded id ${eid} is a rollout in the buffer`);
      groups.set(taskId, [...(groups.get(taskId) ?? []), eid]);
    }
    for (const eids of groups.values()) {
      const hand = grpoByHand(eids.map((eid) => byEid.get(eid)?.reward as number));
      eids.forEach((eid, i) => {
        expected.set(eid, hand[i] as number);
      });
    }
  }
  assert.ok(
    [...expected.values()].some((a) => Math.abs(a) > 0.1),
    'some group has rewards that differ (else every advantage is 0 and the check is weak)',
  );
  for (const { advantages } of recorded)
    for (const [eid, advantage] of Object.entries(advantages))
      assert.ok(Math.abs(advantage - (expected.get(eid) as number)) < 1e-4, `${eid}: ${advantage} vs ${expected.get(eid)}`);

  const studio = await startStudio({ runsDir: join(root, 'out'), port: 0 });
  try {
    const file = encodeURIComponent('test/e2e/buffer/experience_buffer.db');
    const response = await fetch(`${studio.url}/api/rollouts?file=${file}&table=experience_buffer&limit=100`);
    assert.equal(response.status, 200);
    const page = (await response.json()) as { rows: { id: number; eid: string; advantage: number | null }[] };
    assert.equal(page.rows.length, 16);
    for (const row of page.rows) {
      assert.equal(typeof row.advantage, 'number', `rollout ${row.eid} shows an advantage, not –`);
      assert.ok(Math.abs((row.advantage as number) - (expected.get(row.eid) as number)) < 1e-4);
    }
    const first = page.rows[0] as { id: number; eid: string };
    const detail = await fetch(`${studio.url}/api/rollouts/detail?file=${file}&table=experience_buffer&id=${first.id}`);
    const shown = (await detail.json()) as { advantage: number | null };
    assert.ok(Math.abs((shown.advantage as number) - (expected.get(first.eid) as number)) < 1e-4);
  } finally {
    await studio.close();
  }
});

test('the Studio looks for trainer_advantages.jsonl inside the runs folder only', async () => {
  const base = mkdtempSync(join(tmpdir(), 'studio-advantages-'));
  const runs = join(base, 'runs');
  mkdirSync(join(runs, 'job', 'buffer'), { recursive: true });
  const line = (eid: string) =>
    `${JSON.stringify({ eid, tokens: [1, 2], promptLength: 1, reward: 1, info: { taskId: 't', step: 1 } })}\n`;
  writeFileSync(join(runs, 'top.jsonl'), line('top'));
  writeFileSync(join(runs, 'job', 'buffer', 'dump.jsonl'), line('inner'));
  // above the runs folder: a top-level dump's parent folder, which the Studio must not read
  appendAdvantages(join(base, ADVANTAGES_FILE), 1, new Map([['top', 0.25]]));
  appendAdvantages(join(runs, 'job', ADVANTAGES_FILE), 1, new Map([['inner', -0.5]]));
  const studio = await startStudio({ runsDir: runs, port: 0 });
  try {
    const advantageOf = async (file: string) => {
      const response = await fetch(`${studio.url}/api/rollouts?file=${encodeURIComponent(file)}`);
      assert.equal(response.status, 200);
      return ((await response.json()) as { rows: { advantage: number | null }[] }).rows[0]?.advantage;
    };
    assert.equal(await advantageOf('job/buffer/dump.jsonl'), -0.5);
    assert.equal(await advantageOf('top.jsonl'), null);
  } finally {
    await studio.close();
  }
});
