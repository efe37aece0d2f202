// The import graph of src/: every relative import (static, dynamic, type-only, re-export) of every source file,
// read with TypeScript's own parser (comments and strings are not imports), and the two rules
// docs/architecture.md states: layers import only downward, and src/rft has no import cycles.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

/** File → the files it imports, all as paths relative to the source root with '/' separators. */
export type ImportGraph = ReadonlyMap<string, readonly string[]>;

/** The layers, lowest first; a layer may import its own rank and below. src/index.ts (the package root) is above all. */
export const LAYER_RANK: Readonly<Record<string, number>> = {
  util: 0,
  torch: 1,
  model: 2,
  tokenizer: 2,
  engine: 3,
  openai: 4,
  rft: 5,
  serve: 6,
  studio: 6,
  cli: 7,
};

const SOURCE = /\.(ts|mts|mjs|js)$/;

/** Reads the relative imports of every source file under `root`; an import that names no file is an error. */
export function readImportGraph(rootDir: string): ImportGraph {
  const root = resolve(rootDir);
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) files.push(path);
    }
  };
  walk(root);
  const known = new Set(files);
  const name = (file: string) => relative(root, file).split(sep).join('/');
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets: string[] = [];
    for (const spec of moduleSpecifiers(file)) {
      if (!spec.startsWith('.')) continue;
      const base = resolve(dirname(file), spec);
      // NodeNext: a TypeScript file is imported by its emitted name (x.js for x.ts, x.mjs for x.mts).
      const target = [base, base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts')].find((f) => known.has(f));
      if (target === undefined) throw new Error(`${name(file)}: import '${spec}' names no file under ${root}`);
      targets.push(name(target));
    }
    graph.set(name(file), targets);
  }
  return graph;
}

/** Every module a file names: import/export … from, import x = require(), import(), import('…') types. */
function moduleSpecifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false);
  const specs: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined) {
      if (ts.isStringLiteral(node.moduleSpecifier)) specs.push(node.moduleSpecifier.text);
    } else if (ts.isExternalModuleReference(node) && ts.isStringLiteral(node.expression)) {
      specs.push(node.expression.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [argument] = node.arguments;
      if (argument !== undefined && ts.isStringLiteralLike(argument)) specs.push(argument.text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      const literal = node.argument.literal;
      if (ts.isStringLiteral(literal)) specs.push(literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return specs;
}

/** The layer of a file: its top folder under src, or 'root' for a file directly in src. */
export function layerOf(file: string): string {
  const slash = file.indexOf('/');
  return slash < 0 ? 'root' : file.slice(0, slash);
}

/** Imports that go up the layer order (or into the package root, or from a folder missing from LAYER_RANK). */
export function upwardImports(graph: ImportGraph, rank: Readonly<Record<string, number>> = LAYER_RANK): string[] {
  const problems: string[] = [];
  for (const [from, targets] of graph) {
    const fromLayer = layerOf(from);
    if (fromLayer === 'root') continue;
    const fromRank = rank[fromLayer];
    if (fromRank === undefined) {
      problems.push(`${from}: folder '${fromLayer}' has no place in the layer order (add it to docs/architecture.md)`);
      continue;
    }
    for (const to of targets) {
      const toLayer = layerOf(to);
      const toRank = toLayer === 'root' ? Number.POSITIVE_INFINITY : rank[toLayer];
      if (toRank === undefined || toRank > fromRank) problems.push(`${from} (${fromLayer}) imports ${to} (${toLayer})`);
    }
  }
  return problems;
}

/** The graph with each file replaced by `unitOf(file)` (files for which it gives null are left out). */
export function collapse(graph: ImportGraph, unitOf: (file: string) => string | null): Map<string, string[]> {
  const units = new Map<string, Set<string>>();
  for (const [from, targets] of graph) {
    const a = unitOf(from);
    if (a === null) continue;
    const out = units.get(a) ?? new Set<string>();
    units.set(a, out);
    for (const to of targets) {
      const b = unitOf(to);
      if (b !== null && b !== a) out.add(b);
    }
  }
  return new Map([...units].map(([unit, targets]) => [unit, [...targets].sort()]));
}

/**
 * Every import cycle as the nodes of one strongly connected component, each written as a path through it
 * (a → b → … → a), sorted; [] when the graph is acyclic.
 */
export function findCycles(graph: ImportGraph): string[] {
  // Tarjan's strongly connected components; any component with two or more nodes (or a self-import) is a cycle.
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter);
    counter++;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node) as number, low.get(next) as number));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node) as number, index.get(next) as number));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop() as string;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1 || (graph.get(node) ?? []).includes(node)) components.push(component);
    }
  };
  for (const node of [...graph.keys()].sort()) if (!index.has(node)) visit(node);
  return components.map((component) => cyclePath(graph, new Set(component))).sort();
}

/** One cycle through a strongly connected component, from its first node by name: "a → b → a". */
function cyclePath(graph: ImportGraph, component: ReadonlySet<string>): string {
  const start = [...component].sort()[0] as string;
  // Breadth-first search for the shortest way back to `start` inside the component.
  const previous = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift() as string;
    for (const next of graph.get(node) ?? []) {
      if (!component.has(next)) continue;
      if (next === start) {
        const path = [start];
        for (let at = node; at !== start; at = previous.get(at) as string) path.splice(1, 0, at);
        return [...path, start].join(' → ');
      }
      if (!previous.has(next)) {
        previous.set(next, node);
        queue.push(next);
      }
    }
  }
  return [...component].join(' → ');
}
