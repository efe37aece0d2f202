// The registries whose modules register themselves: a built-in's file ends with `POLICY_LOSS_FN.register(...)`, and
// one list file imports those files in order (policy-loss/index.ts). ES modules run once, in the order they are first
// imported, each after the files it imports; so the list is the registration order (names(), the names an error
// offers) only if no module file runs before the list reaches it. A module file may be imported by
//   - its list;
//   - a module file of the same list that comes after it (it runs first either way);
//   - any file, when it is the first of its list (running early, it still registers first);
//   - a file that imports the list before it (workflow/index.ts and the env/ and agents/ barrels import the workflow
//     list first).
// Checked on the real source; failures name the files.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { readImportGraph } from './import-graph.js';

const src = fileURLToPath(new URL('../../src/', import.meta.url));
const graph = readImportGraph(src);

/** The files that list self-registering modules, in registration order. */
const REGISTRATION_LISTS = [
  'rft/algorithm/policy-loss/index.ts',
  'rft/algorithm/advantage/index.ts',
  'rft/algorithm/sample-strategy.ts',
  'rft/data/task-pipeline/operators/index.ts',
  'rft/data/experience-pipeline/operators/index.ts',
  'rft/reward/registry.ts',
  'rft/workflow/registry.ts',
];

/** A file registers itself when a line starts with `NAME.register…(` or `registerSomething(` (a top-level statement). */
const SELF_REGISTERING = /^(?:[A-Z][A-Z0-9_]*\.register\w*|register[A-Z]\w*)\(/m;
const selfRegistering = [...graph.keys()].filter((file) => SELF_REGISTERING.test(readFileSync(join(src, file), 'utf8')));

/** Each self-registering file's list and its place in it. */
const listed = new Map<string, { list: string; position: number }>();
for (const list of REGISTRATION_LISTS) {
  const imports = graph.get(list);
  assert.ok(imports !== undefined, `${list}: no such file under src/`);
  const modules = [...new Set(imports)].filter((file) => selfRegistering.includes(file));
  for (const [position, file] of modules.entries()) listed.set(file, { list, position });
}

/** `importer` names `list` before `target`, so the list has run when `target` would. */
const importsListFirst = (importer: string, list: string, target: string): boolean => {
  const imports = graph.get(importer) ?? [];
  return imports.includes(list) && imports.indexOf(list) < imports.indexOf(target);
};

describe('self-registering modules', () => {
  test('are found in the source', () => {
    assert.ok(selfRegistering.includes('rft/algorithm/policy-loss/topr.ts'), 'topr.ts registers itself');
    assert.ok(selfRegistering.includes('rft/reward/builtin.ts'), 'builtin.ts registers its rewards');
  });

  test('each is imported by one registration list', () => {
    const unlisted = selfRegistering.filter((file) => !listed.has(file));
    assert.deepEqual(
      unlisted,
      [],
      `self-registering files that no list of REGISTRATION_LISTS imports:\n  ${unlisted.join('\n  ')}`,
    );
  });

  test('run only when their list reaches them', () => {
    const problems: string[] = [];
    for (const [importer, targets] of graph) {
      for (const target of new Set(targets)) {
        const place = listed.get(target);
        if (place === undefined || importer === place.list || place.position === 0) continue;
        const importerPlace = listed.get(importer);
        if (importerPlace !== undefined && importerPlace.list === place.list) {
          if (importerPlace.position < place.position)
            problems.push(`${importer} → ${target} (${place.list} lists the importer first: move it after ${target})`);
        } else if (!importsListFirst(importer, place.list, target)) {
          problems.push(`${importer} → ${target} (import it from ${place.list}, or import that list first)`);
        }
      }
    }
    assert.deepEqual(problems, [], `imports that change the registration order:\n  ${problems.join('\n  ')}`);
  });
});
