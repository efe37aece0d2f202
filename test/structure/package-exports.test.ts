// The package's entry points as a user's code sees them: every `exports` subpath of package.json resolves (by the
// package's own name, as an example or a user's workflow imports it) to the file it names, `trinity-rft/rft` is the
// same module instance the runner uses (so a workflow registered through it is the one a run looks up), the example
// workflows load through the package name, and no example reaches into ../../src.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { readImportGraph } from './import-graph.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { name: string; exports: Record<string, string> };

describe('package.json exports', () => {
  test('include ./rft and ./serve next to the lower layers', () => {
    for (const subpath of ['.', './torch', './model', './tokenizer', './engine', './openai', './rft', './serve'])
      assert.ok(Object.hasOwn(pkg.exports, subpath), `package.json exports lacks '${subpath}'`);
  });

  for (const [subpath, target] of Object.entries(pkg.exports)) {
    const specifier = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
    test(`'${specifier}' resolves to ${target} and loads`, async () => {
      assert.equal(import.meta.resolve(specifier), pathToFileURL(join(root, target)).href);
      const module = (await import(specifier)) as Record<string, unknown>;
      assert.ok(Object.keys(module).length > 0, `${specifier} exports nothing`);
    });
  }

  test("'trinity-rft/rft' is the module instance src/ uses: one WORKFLOWS registry, not a copy", async () => {
    const viaPackage = await import('trinity-rft/rft');
    const viaSource = await import('../../src/rft/workflow/index.js');
    assert.equal(viaPackage.WORKFLOWS, viaSource.WORKFLOWS);
    assert.equal(viaPackage.WorkflowRunner, viaSource.WorkflowRunner);
  });

  test("'trinity-rft/rft' has what a workflow, a reward or an algorithm plug-in needs", async () => {
    const rft = (await import('trinity-rft/rft')) as Record<string, unknown>;
    const needed = [
      // workflows: the registry, the runner, experiences from model outputs, the built-in workflows and environments
      ['WORKFLOWS', 'object'],
      ['WorkflowRegistry', 'function'],
      ['WorkflowRunner', 'function'],
      ['validateExperience', 'function'],
      ['mathWorkflow', 'object'],
      ['FrozenLakeEnv', 'function'],
      // rewards: the registry, scoring with checks, answer verification
      ['REWARD_FUNCTIONS', 'object'],
      ['RewardRegistry', 'function'],
      ['scoreResponse', 'function'],
      ['mathAccuracy', 'function'],
      ['answersMatch', 'function'],
      // algorithm plug-ins: the module registries and masked reductions
      ['ADVANTAGE_FN', 'object'],
      ['POLICY_LOSS_FN', 'object'],
      ['SAMPLE_STRATEGY', 'object'],
      ['maskedMean', 'function'],
      // data: tasksets and experience files, seeded randomness
      ['writeJsonlSets', 'function'],
      ['seededRandom', 'function'],
      // running a job
      ['config', 'object'],
      ['run', 'object'],
    ] as const;
    for (const [name, type] of needed) assert.equal(typeof rft[name], type, `trinity-rft/rft: ${name}`);
    assert.equal(typeof (rft.config as Record<string, unknown>).loadConfig, 'function');
    // The top-level answersMatch is the reward's (answers compared as exact rationals), not the tool agent's (text).
    assert.equal((rft.answersMatch as (a: string, b: string) => boolean)('0.5', '1/2'), true);
  });

  test("'trinity-rft/serve' has the serving entry points", async () => {
    const serve = (await import('trinity-rft/serve')) as Record<string, unknown>;
    for (const name of ['serveModel', 'startServeStage', 'runServeStage'])
      assert.equal(typeof serve[name], 'function', `trinity-rft/serve: ${name}`);
  });
});

describe('the examples use the package', () => {
  test('the openai_agent workflow module loads through the package name and resolves as its config names it', async () => {
    const source = readFileSync(join(root, 'examples/openai_agent/workflow.ts'), 'utf8');
    assert.match(source, /from 'trinity-rft\/rft'/);
    const { agentWorkflow } = await import('../../examples/openai_agent/workflow.js');
    assert.equal(typeof agentWorkflow.run, 'function');
    const { WORKFLOWS } = await import('trinity-rft/rft');
    const spec = await WORKFLOWS.resolve('./workflow.ts#agentWorkflow', join(root, 'examples/openai_agent'));
    assert.equal(spec.run, agentWorkflow.run);
    assert.equal(spec.repeatable, false);
  });

  test('no example imports ../../src: they import trinity-rft/...', () => {
    const graph = readImportGraph(join(root, 'examples'));
    const intoSource = [...graph].flatMap(([file, targets]) =>
      targets.filter((t) => t.startsWith('../')).map((t) => `examples/${file} imports ${t}`),
    );
    assert.deepEqual(intoSource, []);
    const names = readdirSync(join(root, 'examples'), { recursive: true, encoding: 'utf8' }).filter((f) => /\.m?ts$/.test(f));
    assert.ok(names.length >= 6, `only ${names.length} example sources`);
    for (const name of names) {
      const text = readFileSync(join(root, 'examples', name), 'utf8');
      assert.doesNotMatch(text, /from '(\.\.\/)+src\//, `examples/${relative('.', name)} imports from src/ by path`);
    }
  });
});
