// Module-loading hooks (node:module register) that load a project's TypeScript files as ES modules, whatever the
// "type" of their package.json. A user's workflow, reward or loss module (`./my-workflow.ts#myWorkflow`) is written
// with import/export and imports 'trinity-rft/rft', an ES module; in a folder whose package.json has no "type" (or
// "type": "commonjs") tsx would load it as CommonJS, and its `import` of the package then fails (Node refuses
// require() of an ES module in a cycle). With these hooks a `.ts`/`.tsx` file that resolves as CommonJS loads as an
// ES module instead (tsx then compiles it as one), and so do the `.ts` files it imports. Unchanged: `.cts` files (CommonJS
// by name), `.js` files (Node's own rules), anything in a node_modules folder (a dependency keeps its package's
// format), and require() calls. src/util/module-path.ts registers them on each thread before it imports user code.
// Plain JavaScript: the hooks run on Node's loader thread, where no TypeScript loader may be registered yet.

const TYPESCRIPT_FILE = /\.tsx?$/;

/** True for a file of the user's own project written in TypeScript (not .cts, not a dependency's). */
function isProjectTypeScript(url) {
  if (!url.startsWith('file:')) return false;
  const { pathname } = new URL(url);
  return TYPESCRIPT_FILE.test(pathname) && !pathname.includes('/node_modules/');
}

/** Node's resolve hook: the next hooks (tsx's) resolve; a project .ts file they call CommonJS becomes an ES module. */
export async function resolve(specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context);
  const commonJs = resolved.format === 'commonjs' || resolved.format === 'commonjs-typescript';
  return commonJs && isProjectTypeScript(resolved.url) ? { ...resolved, format: 'module' } : resolved;
}
