// The size rules of the house style (STYLE.md; docs/architecture.md): no source file of src/ over 600 lines and no
// function over 120 lines, so that a file reads as one subject and a function as one step. Checked on the real tree
// with TypeScript's parser; failures name the file (and the function with its first line).
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import ts from 'typescript';

const src = fileURLToPath(new URL('../../src/', import.meta.url));
const MAX_FILE_LINES = 600;
const MAX_FUNCTION_LINES = 120;
/**
 * Files allowed over MAX_FILE_LINES, each with its own bound and the reason. src/torch/tensor.ts: the Tensor class
 * holds one short method per libtorch op (about 170); spreading one class over files would hide its API.
 */
const LARGER_FILES: Record<string, number> = { 'torch/tensor.ts': 760 };

const walk = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
const files = walk(src).map((file) => ({ name: relative(src, file), text: readFileSync(file, 'utf8') }));
const lineCount = (text: string): number => text.split('\n').length - (text.endsWith('\n') ? 1 : 0);

/** Functions (declarations, methods, arrows, accessors, constructors) of a file longer than `limit` lines. */
function longFunctions(name: string, text: string, limit: number): string[] {
  const file = ts.createSourceFile(name, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    const isFunction =
      ts.isFunctionDeclaration(node) ||
      ts.isMethodDeclaration(node) ||
      ts.isArrowFunction(node) ||
      ts.isFunctionExpression(node) ||
      ts.isConstructorDeclaration(node) ||
      ts.isGetAccessor(node) ||
      ts.isSetAccessor(node);
    if (isFunction && node.body !== undefined) {
      const first = file.getLineAndCharacterOfPosition(node.getStart()).line;
      const lines = file.getLineAndCharacterOfPosition(node.end).line - first + 1;
      if (lines > limit) found.push(`${name}:${first + 1} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe('sizes of src', () => {
  test('is read from the real tree', () => {
    assert.ok(files.length > 100, `only ${files.length} files under ${src}`);
    assert.ok(files.some((f) => f.name === 'torch/tensor.ts'));
  });

  test(`no file over ${MAX_FILE_LINES} lines (the listed exceptions under their own bound)`, () => {
    const over = files
      .filter((f) => lineCount(f.text) > (LARGER_FILES[f.name] ?? MAX_FILE_LINES))
      .map((f) => `${f.name}: ${lineCount(f.text)} lines`);
    assert.deepEqual(over, [], `files to split:\n  ${over.join('\n  ')}`);
  });

  test(`no function over ${MAX_FUNCTION_LINES} lines`, () => {
    const over = files.flatMap((f) => longFunctions(f.name, f.text, MAX_FUNCTION_LINES));
    assert.deepEqual(over, [], `functions to split:\n  ${over.join('\n  ')}`);
  });

  test('the checks find what they look for', () => {
    const body = Array.from({ length: MAX_FUNCTION_LINES }, (_, i) => `  const v${i} = ${i};`).join('\n');
    assert.deepEqual(longFunctions('x.ts', `function f() {\n${body}\n}\n`, MAX_FUNCTION_LINES), ['x.ts:1 (122 lines)']);
    assert.deepEqual(
      longFunctions('x.ts', `const g = () => {\n${body.split('\n').slice(2).join('\n')}\n};\n`, MAX_FUNCTION_LINES),
      [],
    );
    assert.equal(lineCount('a\nb\n'), 2);
  });
});
