// The addon compiles as a CUDA build on a machine without CUDA: native/src/cuda_graph.cpp with CUDA graphs and
// native/src/distributed.cpp with NCCL are built only against a CUDA libtorch, so the CPU build (and every other
// test here) never compiles them, and the GPU run (bench/gpu-run.sh) builds against another torch version than the
// CPU one. `node native/build.mjs --check-cuda-sources DIR` compiles every source (g++ -fsyntax-only) with a CUDA
// build's flags against the headers of that CUDA torch wheel and of CUDA's libraries, from pip's mirror
// (scripts/cuda-headers.sh), and says which CUDA-only header each CUDA file opened. Skipped only where the mirror
// has not these wheels (exit code 3).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runProcess } from '../helpers/run-process.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const headers = join(root, '.cache', 'cuda-headers');

/** Runs a command in the repository root (stdout and stderr together in `output`). */
const run = (command: string, args: string[]) => runProcess(command, args, { cwd: root });

test('every source compiles as a CUDA build: cuda_graph.cpp with CUDA graphs, distributed.cpp with NCCL', async (t) => {
  const fetched = await run('bash', [join(root, 'scripts', 'cuda-headers.sh'), headers]);
  if (fetched.code === 3) {
    t.skip(`CUDA's headers are not in pip's local mirror: ${fetched.output.trim()}`);
    return;
  }
  assert.equal(fetched.code, 0, fetched.output);
  const checked = await run(process.execPath, [join(root, 'native', 'build.mjs'), '--check-cuda-sources', headers]);
  assert.equal(checked.code, 0, checked.output);
  assert.match(checked.output, /gloo yes .*nccl yes\)/);
  assert.match(checked.output, /cuda_graph\.cpp compiles with its CUDA code \(ATen\/cuda\/CUDAGraph\.h\)/);
  assert.match(checked.output, /distributed\.cpp compiles with its CUDA code \(c10d\/ProcessGroupNCCL\.hpp\)/);
  const sources = readdirSync(join(root, 'native', 'src')).filter((f) => f.endsWith('.cpp'));
  const compiled = [...checked.output.matchAll(/\[native\] (\S+\.cpp) compiles/g)].map((m) => m[1]);
  assert.deepEqual(compiled.sort(), sources.sort());
});

test('--check-cuda-sources names what is missing: no folder, no torch headers', async () => {
  const noFolder = await run(process.execPath, [join(root, 'native', 'build.mjs'), '--check-cuda-sources']);
  assert.equal(noFolder.code, 1);
  assert.match(noFolder.output, /--check-cuda-sources needs a folder/);
  const empty = mkdtempSync(join(tmpdir(), 'cuda-check-'));
  const noTorch = await run(process.execPath, [join(root, 'native', 'build.mjs'), '--check-cuda-sources', empty]);
  assert.equal(noTorch.code, 1);
  assert.match(noTorch.output, /cuda-check-\w+\/torch\/include has no CUDA torch headers \(bash scripts\/cuda-headers\.sh/);
  rmSync(empty, { recursive: true });
});

test("--check-cuda-sources with torch's headers but not CUDA's names the headers it did not find", async (t) => {
  // the first test fetched them, unless the mirror has not the wheels
  if (!existsSync(join(headers, 'complete'))) {
    t.skip(`no CUDA torch headers in ${headers} (see the first test)`);
    return;
  }
  const empty = mkdtempSync(join(tmpdir(), 'cuda-check-'));
  symlinkSync(join(headers, 'torch'), join(empty, 'torch'));
  const noCuda = await run(process.execPath, [join(root, 'native', 'build.mjs'), '--check-cuda-sources', empty]);
  assert.equal(noCuda.code, 1);
  assert.match(
    noCuda.output,
    /CUDA graphs would not be built: no \(cuda_runtime_api\.h and crt\/host_config\.h not found in any CUDA folder\)/,
  );
  rmSync(empty, { recursive: true });
});
