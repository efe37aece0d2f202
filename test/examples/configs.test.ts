// Every example config validates (keys, cross-field rules, algorithm presets) and names workflows that resolve, so
// `trinity run --config examples/<name>/config.yaml` (or its other .yaml) does not fail on its config after a model
// is created.
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { WORKFLOWS } from '../../src/rft/workflow/index.js';

const examples = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples');

// config.yaml, or the configs of an example's processes (agent_traffic: serve.yaml and train.yaml)
// (the example folders; a file beside them, e.g. examples/seeds.ts, is shared code)
const exampleConfigs = readdirSync(examples, { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name)
  .flatMap((name) => {
    const yaml = readdirSync(join(examples, name)).filter((f) => f.endsWith('.yaml'));
    return (yaml.length > 0 ? yaml : ['config.yaml']).map((file) => [name, file] as const);
  });

for (const [name, configName] of exampleConfigs) {
  test(`examples/${name}/${configName} is valid and its workflows resolve`, async () => {
    const file = join(examples, name, configName);
    const config = loadConfig(file, { resolveAlgorithm });
    const stages = resolveStages(config);
    assert.ok(stages.length >= 1);
    for (const stage of stages) {
      const input = stage.buffer.explorer_input;
      const names = [
        input.default_workflow_type,
        ...input.tasksets.map((t) => t.default_workflow_type),
        ...input.eval_tasksets.map((t) => t.default_workflow_type),
      ].filter((w): w is string => typeof w === 'string');
      for (const workflow of names) {
        const spec = await WORKFLOWS.resolve(workflow, join(examples, name));
        assert.equal(typeof spec.run, 'function', `${name}: workflow ${workflow}`);
      }
    }
  });
}

test('examples/quickstart/data is what make-data.ts writes: fixed-width problems, exact sums, disjoint sets', async () => {
  const { makeAdditionData } = await import('../../examples/quickstart/make-data.js');
  const { mkdtempSync, readFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { writeJsonlSets } = await import('../../src/rft/buffer/index.js');
  const data = makeAdditionData();
  const written = mkdtempSync(join(tmpdir(), 'quickstart-data-'));
  writeJsonlSets(written, data); // what make-data.ts writes
  const seen = new Set<string>();
  for (const [set, rows] of Object.entries(data) as [string, { prompt: string; response: string }[]][]) {
    const file = readFileSync(join(examples, 'quickstart', 'data', `${set}.jsonl`), 'utf8');
    assert.equal(file, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`, `${set}.jsonl is stale: rerun make-data.ts`);
    assert.equal(readFileSync(join(written, `${set}.jsonl`), 'utf8'), file, `writeJsonlSets wrote ${set}.jsonl otherwise`);
    for (const { prompt, response } of rows) {
      const match = /^(\d\d)\+(\d\d)=$/.exec(prompt);
      assert.ok(match, `${set}: prompt ${prompt}`);
      assert.equal(response, String(Number(match[1]) + Number(match[2])).padStart(3, '0'));
      assert.ok(!seen.has(prompt), `${prompt} is in two sets`);
      seen.add(prompt);
    }
  }
  assert.deepEqual([data.eval.length, data.sft.length, data.train.length], [500, 2000, 7500]);
});
