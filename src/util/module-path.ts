// User code by module path, as Trinity-RFT's dotted paths in YAML: `path/to/file.ts#exportName` (default export
// when no `#name`). Relative paths resolve against `baseDir` (the config file's folder, else the working directory).
// TypeScript files load when the process runs with a TS loader (`node --import tsx`), as the `trinity` command does.
import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** True when `spec` names a module rather than a registered name: it has a `#`, a `/`, or a script extension. */
export function isModulePath(spec: string): boolean {
  return spec.includes('#') || spec.includes('/') || /\.(ts|mts|js|mjs|cjs)$/.test(spec);
}

/**
 * Imports the module and returns the named export. Errors name the path, the export, and what was there instead.
 * `kind` words the errors ("reward function", "workflow").
 */
export async function loadModuleExport(spec: string, kind: string, baseDir: string = process.cwd()): Promise<unknown> {
  const hash = spec.lastIndexOf('#');
  const path = hash >= 0 ? spec.slice(0, hash) : spec;
  const exportName = hash >= 0 ? spec.slice(hash + 1) : 'default';
  if (path.length === 0 || exportName.length === 0)
    throw new Error(`${kind} '${spec}': expected 'path/to/file.ts#exportName' (or a file with a default export)`);
  const file = isAbsolute(path) ? path : resolve(baseDir, path);
  if (!existsSync(file)) throw new Error(`${kind} '${spec}': module file ${file} does not exist`);
  let module: Record<string, unknown>;
  try {
    module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    const message = (error as Error).message;
    // A .ts file outside an ES-module package is loaded as CommonJS, and its `import`s then fail obscurely.
    const hint = /require\(\) ES Module|outside a module|ERR_REQUIRE/.test(message)
      ? ' (put the file in a package whose package.json has "type": "module", or name it .mts)'
      : '';
    throw new Error(`${kind} '${spec}': importing ${file} failed: ${message}${hint}`, { cause: error });
  }
  if (!Object.hasOwn(module, exportName)) {
    const names = Object.keys(module);
    throw new Error(
      `${kind} '${spec}': ${file} has no export '${exportName}'; its exports: ${names.length > 0 ? names.join(', ') : '(none)'}`,
    );
  }
  return module[exportName];
}
