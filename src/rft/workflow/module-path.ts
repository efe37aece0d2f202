// Moved to src/util/module-path.ts (rewards, workflows and algorithm plug-ins all load user code by module path);
// re-exported here for the files that import it from the workflow layer.
export { isModulePath, loadModuleExport } from '../../util/module-path.js';
