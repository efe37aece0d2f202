// The registries whose modules register themselves: a built-in's file ends with `POLICY_LOSS_FN.register(...)`, and
// one list file imports those files in order (policy-loss/index.ts). ES modules run once, in the order they are first
// imported, each after the files it imports; so the list is the registration order (names(), the names an error
// offers) only if nothing else imports a module file first, and a module file that imports another comes after it in
// the list. Checked on the real source; failures name the files.
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
];

/** A file registers itself when a line starts with `NAME.register(` or `registerSomething(` (a top-level statement). */
const SELF_REGISTERING = /^(?:[A-Z][A-Z0-9_]*\.register|register[A-Z]\w*)\(/m;
const selfRegistering = [...graph.keys()].filter((file) => SELF_REGISTERING.test(readFileSync(join(src, file), 'utf8')));

/** Each self-registering file's list and its place in it. */
const listed = new Map<string, { list: string; position: number }>();
for (const list of REGISTRATION_LISTS) {
  const imports = graph.get(list);
  assert.ok(imports !== undefined, `${list}: no such file under src/`);
  const modules = [...new Set(imports)].filter((file) => selfRegistering.includes(file));
  for (const [position, file] of modules.entries()) listed.set(file, { list, position });
}

describe('self-registering modules', () => {
  test('are found in the source', () => {
    assert.ok(selfRegistering.includes('rft/algorithm/policy-loss/topr.ts'), 'topr.ts registers itself');
  });

  test('each is imported by one registration list', () => {
    const unlisted = selfRegistering.filter((file) => !listed.has(file));
    assert.deepEqual(
      unlisted,
      [],
      `self-registering files that no list of REGISTRATION_LISTS imports:\n  ${unlisted.join('\n  ')}`,
    );
  });

  test('are imported only by their list and by modules of the same list after them', () => {
    const problems: string[] = [];
    for (const [importer, targets] of graph) {
      for (const target of targets) {
        const place = listed.get(target);
        if (place === undefined || importer === place.list) continue;
        const importerPlace = listed.get(importer);
        if (importerPlace === undefined || importerPlace.list !== place.list) {
          problems.push(`${importer} → ${target} (import it from ${place.list})`);
        } else if (importerPlace.position < place.position) {
          problems.push(`${importer} → ${target} (${place.list} lists the importer first: move it after ${target})`);
        }
      }
    }
    assert.deepEqual(problems, [], `imports that change the registration order:\n  ${problems.join('\n  ')}`);
  });
});
