// The generic registry (src/util/registry.ts) and the name suggestions every registry's errors use.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { closestName, didYouMean, editDistance, Registry } from '../../src/util/index.js';

describe('name suggestions', () => {
  test('editDistance counts insertions, deletions, substitutions and adjacent transpositions as one each', () => {
    assert.equal(editDistance('grpo', 'grpo'), 0);
    assert.equal(editDistance('grpo', 'gpro'), 1); // transposition
    assert.equal(editDistance('grpo', 'grp'), 1); // deletion
    assert.equal(editDistance('ppo', 'dpo'), 1); // substitution
    assert.equal(editDistance('', 'abc'), 3);
    assert.equal(editDistance('kitten', 'sitting'), 3); // the textbook pair: k→s, e→i, +g
  });

  test('closestName suggests a plausible typo only: distance ≤ max(2, ⌊|name|/3⌋), case-insensitive', () => {
    assert.equal(closestName('math_workflw', ['math_workflow', 'simple_workflow']), 'math_workflow');
    assert.equal(closestName('GRPO', ['grpo', 'ppo']), 'grpo');
    assert.equal(closestName('xyz', ['math_workflow']), null);
    assert.equal(didYouMean('rloo', ['rloo_x', 'reinforce']), "; did you mean 'rloo_x'?");
    assert.equal(didYouMean('zzzz', ['reinforce']), '');
  });
});

describe('Registry', () => {
  const colors = () => new Registry<string>('color').register('red', '#f00', 'warm').register('blue', '#00f');

  test('register, has, get, names in registration order, describe', () => {
    const registry = colors();
    assert.equal(registry.get('red'), '#f00');
    assert.equal(registry.has('blue'), true);
    assert.equal(registry.has('green'), false);
    assert.deepEqual(registry.names(), ['red', 'blue']);
    assert.equal(registry.describe('red'), 'warm');
    assert.equal(registry.describe('blue'), '');
  });

  test('an unknown name is an error that names the kind, suggests the closest name and lists the registered', () => {
    assert.throws(() => colors().get('rde'), { message: "unknown color 'rde'; did you mean 'red'?; registered: red, blue" });
    assert.throws(() => colors().get('purple'), { message: "unknown color 'purple'; registered: red, blue" });
  });

  test('an unavailable name is refused with its reason, not as unknown; registering it takes over', async () => {
    const registry = colors().unavailable('teal', 'needs a wider palette: use blue');
    const message = "color 'teal' is not available here: needs a wider palette: use blue";
    assert.throws(() => registry.get('teal'), { message });
    await assert.rejects(registry.resolve('teal'), { message });
    assert.equal(registry.has('teal'), false);
    assert.deepEqual(registry.names(), ['red', 'blue'], 'an unavailable name is not listed as registered');
    registry.register('teal', '#088');
    assert.equal(registry.get('teal'), '#088');
    assert.equal(colors().unavailable('red', 'ignored: red is registered').get('red'), '#f00');
  });

  test("a Python class path (Trinity's plugin form) is told how modules are named here, when modules are accepted", () => {
    const withModules = new Registry<string>('workflow', { fromExport: (v) => String(v) });
    assert.throws(() => withModules.get('examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow'), {
      message:
        "workflow 'examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow' is a Python class path " +
        "(Trinity-RFT's plugin form): a workflow module here is a TypeScript or JavaScript file, named as path/to/file.ts#export",
    });
    assert.throws(() => colors().get('palette.Warm'), /^Error: unknown color 'palette.Warm'/, 'no modules: unknown');
    assert.throws(() => withModules.get('math.workflow'), /^Error: unknown workflow/, 'no class name: unknown');
  });

  test('a name is registered once', () => {
    assert.throws(() => colors().register('red', '#e00'), { message: "color 'red' is already registered" });
  });

  test('resolve: registered names; module paths only with fromExport, loaded once per folder, retried after a failure', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'registry-'));
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    writeFileSync(join(dir, 'colors.ts'), "export const green: string = '#0f0';\nexport const count = 3;\n");
    let conversions = 0;
    const registry = new Registry<string>('color', {
      fromExport: (value, spec) => {
        conversions++;
        if (typeof value !== 'string') throw new Error(`color '${spec}': the export is a ${typeof value}, not a string`);
        return value;
      },
    }).register('red', '#f00');
    assert.equal(await registry.resolve('red'), '#f00');
    assert.equal(await registry.resolve('colors.ts#green', dir), '#0f0');
    assert.equal(await registry.resolve('colors.ts#green', dir), '#0f0');
    assert.equal(conversions, 1, 'a module path is imported and converted once per (folder, spec)');
    assert.equal(registry.has('colors.ts#green'), false, 'a loaded module path is not registered under its spec');
    await assert.rejects(registry.resolve('colors.ts#count', dir), /color 'colors.ts#count': the export is a number/);
    await assert.rejects(registry.resolve('colors.ts#blue', dir), /has no export 'blue'; its exports: count, green/);
    await assert.rejects(registry.resolve('rde'), /unknown color 'rde'; did you mean 'red'/);

    // A spec whose file is missing fails, and loads once the file is there (the failure is not cached).
    await assert.rejects(registry.resolve('later.ts#teal', dir), /module file .*later\.ts does not exist/);
    writeFileSync(join(dir, 'later.ts'), "export const teal = '#088';\n");
    assert.equal(await registry.resolve('later.ts#teal', dir), '#088');

    // Without fromExport a module path is just a name that is not registered.
    const plain = new Registry<string>('color').register('red', '#f00');
    await assert.rejects(plain.resolve('colors.ts#green', dir), /unknown color 'colors.ts#green'/);
  });
});
