// User code by module path, as Trinity-RFT's dotted paths in YAML: `path/to/file.ts#exportName` (default export
// when no `#name`). Relative paths resolve against `baseDir` (the config file's folder, else the working directory).
// TypeScript files load when the process runs with a TS loader (`node --import tsx`), as the `trinity` command does,
// and as ES modules wherever they are: a project whose package.json has no "type": "module" needs none
// (./typescript-module-hooks.mjs, registered on the importing thread before its first user module).
import { existsSync } from 'node:fs';
import { register } from 'node:module';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** True when `spec` names a module rather than a registered name: it has a `#`, a `/`, or a script extension. */
export function isModulePath(spec: string): boolean {
  return spec.includes('#') || spec.includes('/') || /\.(ts|mts|js|mjs|cjs)$/.test(spec);
}

/** Whether this thread has registered ./typescript-module-hooks.mjs (module state is per thread). */
let typescriptModuleHooksRegistered = false;

/** Loads the project's .ts files as ES modules from now on, on this thread (see ./typescript-module-hooks.mjs). */
function registerTypeScriptModuleHooks(): void {
  if (typescriptModuleHooksRegistered) return;
  register(new URL('./typescript-module-hooks.mjs', import.meta.url));
  typescriptModuleHooksRegistered = true;
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
  registerTypeScriptModuleHooks();
  try {
    module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    const message = (error as Error).message;
    // A .js file outside an ES-module package is loaded as CommonJS, and its `import`s then fail obscurely.
    const hint =
      file.endsWith('.js') && /require\(\) ES Module|outside a module|ERR_REQUIRE/.test(message)
        ? ' (a .js file is CommonJS unless its package.json has "type": "module": name it .mjs, or write it in .ts)'
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
