// explorer.rollout_model.enable_prefix_caching in a run: a multi-turn workflow resends its conversation each turn, the
// embedded engine finds the earlier turns' blocks, and the explore step's metrics count the hits
// (rollout/prefix_cache/*, rollout/engine/prefill_tokens). explorer.rollout_model.enable_chunked_prefill with a small
// max_num_batched_tokens: the prompts run in chunks (rollout/engine/prefill_chunks).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

/** Three turns of one conversation per task, the whole history resent each turn. */
const MULTI_TURN = `export const run = async ({ task, model, repeatTimes, seed }) => {
  const messages = [{ role: 'user', content: \`\${task.prompt} 1+1= 2+2= 3+3= 4+4= \${task.prompt}\` }];
  let result;
  for (let turn = 0; turn < 3; turn++) {
    result = await model.chat(messages, { n: repeatTimes, seed: seed + turn, maxTokens: 4 });
    messages.push({ role: 'assistant', content: result.choices[0].message.content });
    messages.push({ role: 'user', content: '5+5= 6+6= 7+7=' });
  }
  return result.choices.map((c) => model.toExperience(c, { reward: c.index % 2 }));
};
`;

/** The explore step's metrics of a run whose rollout_model section gets `rolloutKeys` (YAML lines). */
async function exploreMetrics(rolloutKeys: string[]): Promise<Record<string, number>> {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 1, saveInterval: 1 });
  writeFileSync(join(root, 'chat.ts'), MULTI_TURN);
  const config = readFileSync(configFile, 'utf8')
    .replace('default_workflow_type: simple_workflow', `default_workflow_type: ${join(root, 'chat.ts')}#run`)
    .replace('max_prompt_tokens: 24', 'max_prompt_tokens: 400')
    .replace('    slots: 8', ['    slots: 8', ...rolloutKeys.map((line) => `    ${line}`)].join('\n'));
  writeFileSync(configFile, config);
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: () => {} });
  const rows = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  const explored = rows
    .map((line) => JSON.parse(line) as Record<string, number>)
    .find((row) => 'rollout/engine/prefill_tokens' in row);
  assert.ok(explored, `no row with the engine's counters in ${rows.join('\n')}`);
  return explored;
}

test('a multi-turn workflow hits the prefix cache: the explore step reports hits and prefills less', async () => {
  const off = await exploreMetrics(['enable_prefix_caching: false']);
  const on = await exploreMetrics(['enable_prefix_caching: true']);
  assert.equal(off['rollout/prefix_cache/hits'], undefined); // the slot layout has no prefix cache
  assert.ok((on['rollout/prefix_cache/hits'] ?? 0) > 0, JSON.stringify(on));
  assert.ok((on['rollout/prefix_cache/hit_rate'] ?? 0) > 0);
  assert.ok(
    (on['rollout/engine/prefill_tokens'] as number) < (off['rollout/engine/prefill_tokens'] as number),
    `prefilled ${on['rollout/engine/prefill_tokens']} with the cache, ${off['rollout/engine/prefill_tokens']} without`,
  );
});

test('enable_chunked_prefill with max_num_batched_tokens 16: the explore step reports the prompt chunks', async () => {
  const metrics = await exploreMetrics(['enable_chunked_prefill: true', 'max_num_batched_tokens: 16']);
  assert.ok((metrics['rollout/engine/prefill_chunks'] ?? 0) > 0, JSON.stringify(metrics));
});
