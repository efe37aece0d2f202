// User modules by path load as a user's project has them: a .ts workflow/reward/loss file written with import/export
// loads as an ES module even where the project's package.json has no "type" or "type": "commonjs" (no
// "type": "module" needed), and so do the .ts files it imports; a .cts file stays CommonJS.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { loadModuleExport } from '../../src/util/index.js';

// An ES module of this repository (its package.json says "type": "module"), as a user's file imports trinity-rft/rft.
const esModule = pathToFileURL(join(import.meta.dirname, '../../src/util/did-you-mean.ts')).href;

/** A project folder with `packageJson` and a workflow-like module that imports a sibling .ts file and an ES module. */
function project(packageJson: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'module-path-'));
  writeFileSync(join(dir, 'package.json'), packageJson);
  writeFileSync(join(dir, 'helper.ts'), 'export const offset: number = 2;\n');
  writeFileSync(
    join(dir, 'reward.ts'),
    `import { closestName } from ${JSON.stringify(esModule)};
import { offset } from './helper.ts';
export const score = (response: string): number => response.length + offset;
export const suggestion = closestName('lenght', ['length', 'width']);
export const isModule = typeof require === 'undefined';
`,
  );
  writeFileSync(join(dir, 'legacy.cts'), 'module.exports = { kind: typeof require };\n');
  return dir;
}

describe('loadModuleExport: .ts files load as ES modules whatever the package type', () => {
  for (const [what, packageJson] of [
    ['no "type"', '{ "name": "my-project", "private": true }\n'],
    ['"type": "commonjs"', '{ "name": "my-project", "type": "commonjs" }\n'],
  ] as const) {
    test(`a project whose package.json has ${what}`, async () => {
      const dir = project(packageJson);
      const score = (await loadModuleExport('./reward.ts#score', 'reward function', dir)) as (r: string) => number;
      assert.equal(score('abc'), 5, 'the sibling .ts import resolved');
      assert.equal(await loadModuleExport('./reward.ts#suggestion', 'reward function', dir), 'length');
      assert.equal(await loadModuleExport('./reward.ts#isModule', 'reward function', dir), true, 'loaded as an ES module');
      assert.equal(await loadModuleExport('./legacy.cts#kind', 'reward function', dir), 'function', '.cts stays CommonJS');
    });
  }
});
