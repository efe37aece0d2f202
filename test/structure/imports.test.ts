// The architecture's import rules (docs/architecture.md, "Layers"), checked on the real source: every relative import
// of src/**/*.ts goes down (or sideways within its layer) the order util < torch < model, tokenizer < engine < openai <
// rft < serve, studio < cli; src has no import cycle between files; and src/rft none between its parts either (its
// folders and top-level files: algorithm/, reward/, workflow/, experience.ts, ...). Failures name the files.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { collapse, findCycles, type ImportGraph, readImportGraph, upwardImports } from './import-graph.js';

const src = fileURLToPath(new URL('../../src/', import.meta.url));
const graph = readImportGraph(src);

/** The part of src/rft a file belongs to (`rft/algorithm/advantage/grpo.ts` → `algorithm`), null outside src/rft. */
const rftPart = (file: string): string | null => (file.startsWith('rft/') ? (file.split('/')[1] as string) : null);
const withinRft = (g: ImportGraph): ImportGraph =>
  new Map([...g].filter(([f]) => f.startsWith('rft/')).map(([f, t]) => [f, t.filter((x) => x.startsWith('rft/'))]));

describe('the import graph of src', () => {
  test('is read from the real tree: known imports are there', () => {
    assert.ok(graph.size > 100, `only ${graph.size} source files under ${src}`);
    assert.ok(graph.get('rft/workflow/workflow-registry.ts')?.includes('util/registry.ts'));
    assert.ok(graph.get('index.ts')?.includes('torch/index.ts'));
  });

  test('no import goes up the layer order', () => {
    const problems = upwardImports(graph);
    assert.deepEqual(problems, [], `imports that go up the layers:\n  ${problems.join('\n  ')}`);
  });

  test('the layers themselves form no cycle (siblings of one rank import one way only)', () => {
    const cycles = findCycles(collapse(graph, (f) => (f.includes('/') ? (f.split('/')[0] as string) : null)));
    assert.deepEqual(cycles, [], `layer cycles:\n  ${cycles.join('\n  ')}`);
  });

  test('src has no import cycle between files', () => {
    const cycles = findCycles(graph);
    assert.deepEqual(cycles, [], `import cycles in src:\n  ${cycles.join('\n  ')}`);
  });

  test('src/rft has no import cycle between files', () => {
    const cycles = findCycles(withinRft(graph));
    assert.deepEqual(cycles, [], `import cycles in src/rft:\n  ${cycles.join('\n  ')}`);
  });

  test("src/rft's parts (folders and top-level files) import each other without a cycle", () => {
    const parts = collapse(graph, rftPart);
    const cycles = findCycles(parts);
    // Name the files behind each edge of a cycle, so the failure says which import to move.
    const edges = cycles.flatMap((cycle) => {
      const nodes = cycle.split(' → ');
      return nodes.slice(1).map((to, i) => {
        const from = nodes[i] as string;
        const files = [...withinRft(graph)]
          .flatMap(([f, targets]) => targets.filter((t) => rftPart(f) === from && rftPart(t) === to).map((t) => `${f} → ${t}`))
          .join(', ');
        return `${from} → ${to}: ${files}`;
      });
    });
    assert.deepEqual(cycles, [], `cycles between the parts of src/rft:\n  ${cycles.join('\n  ')}\n  ${edges.join('\n  ')}`);
  });
});

describe('the checks find what they look for', () => {
  test('readImportGraph reads every form of import, and only imports', () => {
    const root = mkdtempSync(join(tmpdir(), 'import-graph-'));
    const write = (file: string, text: string) => {
      mkdirSync(dirname(join(root, file)), { recursive: true });
      writeFileSync(join(root, file), text);
    };
    for (const leaf of ['a', 'b', 'c', 'd', 'e', 'f', 'g']) write(`lib/${leaf}.ts`, 'export const x = 1;\n');
    write('lib/h.mts', 'export const x = 1;\n');
    write(
      'app/main.ts',
      [
        "import type { x } from '../lib/a.js';",
        "export * as b from '../lib/b.js';",
        "export { x as y } from '../lib/c.js';",
        "const later = () => import('../lib/d.js');",
        "type T = typeof import('../lib/e.js');",
        "import '../lib/f.js';",
        "import { x as z } from '../lib/h.mjs';",
        "import { readFileSync } from 'node:fs';",
        "// import '../lib/g.js';",
        'const text = "import \'../lib/g.js\'";',
      ].join('\n'),
    );
    assert.deepEqual(readImportGraph(root).get('app/main.ts'), [
      'lib/a.ts',
      'lib/b.ts',
      'lib/c.ts',
      'lib/d.ts',
      'lib/e.ts',
      'lib/f.ts',
      'lib/h.mts',
    ]);
    write('app/broken.ts', "import '../lib/missing.js';\n");
    assert.throws(() => readImportGraph(root), /app\/broken.ts: import '..\/lib\/missing.js' names no file/);
  });

  test('findCycles reports each cycle once, as a path, and nothing for a DAG', () => {
    const g = new Map([
      ['a', ['b']],
      ['b', ['c', 'd']],
      ['c', ['a']],
      ['d', ['e']],
      ['e', ['d']],
      ['f', ['f']],
      ['g', ['a']],
    ]);
    assert.deepEqual(findCycles(g), ['a → b → c → a', 'd → e → d', 'f → f']);
    assert.deepEqual(
      findCycles(
        new Map([
          ['a', ['b', 'c']],
          ['b', ['c']],
          ['c', []],
        ]),
      ),
      [],
    );
  });

  test('upwardImports names an upward import, an import of the package root, and a folder outside the order', () => {
    const g = new Map([
      ['torch/tensor.ts', ['util/registry.ts']],
      ['model/init.ts', ['tokenizer/tokenizer.ts']],
      ['engine/chat.ts', ['rft/task.ts']],
      ['openai/server.ts', ['index.ts']],
      ['dashboard/app.ts', ['rft/task.ts']],
      ['index.ts', ['cli/main.ts']],
    ]);
    assert.deepEqual(upwardImports(g), [
      'engine/chat.ts (engine) imports rft/task.ts (rft)',
      'openai/server.ts (openai) imports index.ts (root)',
      "dashboard/app.ts: folder 'dashboard' has no place in the layer order (add it to docs/architecture.md)",
    ]);
  });

  test('collapse merges files into parts and drops edges inside a part', () => {
    const g = new Map([
      ['rft/workflow/a.ts', ['rft/workflow/b.ts', 'rft/reward/r.ts', 'util/x.ts']],
      ['rft/reward/r.ts', ['rft/task.ts']],
    ]);
    assert.deepEqual(
      collapse(g, rftPart),
      new Map([
        ['workflow', ['reward']],
        ['reward', ['task.ts']],
      ]),
    );
  });
});
