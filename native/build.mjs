// Builds the native addon (native/build/trinity_torch.node) against libtorch.
//
// The addon is the only layer below src/torch (docs/architecture.md has the layers). libtorch is found in this order,
// and when neither is there the build stops with a message that says what to install:
//   1. LIBTORCH: a folder with include/ and lib/ (a libtorch zip or a torch wheel's torch/ folder);
//   2. the `torch` package of python3 (torch >= 2.5), including the copy scripts/setup.sh installs into .cache/torch-py.
// The result links with an rpath to that lib/ folder, so nothing needs LD_LIBRARY_PATH. With a CUDA build,
// libtorch_cuda is linked with --no-as-needed, or the linker would drop it and CUDA would silently vanish.
// Rebuilds only when a source, this script or the libtorch location changed.
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..');
const buildDir = join(here, 'build');
const require = createRequire(import.meta.url);

function fail(message) {
  console.error(`\n[native] ${message}\n`);
  process.exit(1);
}

// Runs `tasks` (functions that return promises) TRINITY_BUILD_JOBS at a time, default two: each translation unit that
// includes ATen takes ~20 s and ~1 GB to compile. Resolves with their results in order; rejects with the first error.
async function inParallel(tasks) {
  const jobs = Math.max(1, Math.min(Number(process.env.TRINITY_BUILD_JOBS ?? 2), tasks.length));
  const results = new Array(tasks.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: jobs }, async () => {
      while (next < tasks.length) {
        const i = next++;
        results[i] = await tasks[i]();
      }
    }),
  );
  return results;
}

function torchFromPython() {
  const candidates = [join(root, '.cache', 'torch-py')];
  const script =
    'import sys\nfor p in sys.argv[1:]: sys.path.insert(0, p)\nimport torch, os\nprint(os.path.dirname(torch.__file__)); print(torch.__version__)';
  try {
    const out = execFileSync('python3', ['-c', script, ...candidates.filter(existsSync)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const [dir, version] = out.trim().split('\n');
    return { dir, version };
  } catch {
    return null;
  }
}

function findLibtorch() {
  if (process.env.LIBTORCH) {
    const dir = resolve(process.env.LIBTORCH);
    if (!existsSync(join(dir, 'include')) || !existsSync(join(dir, 'lib')))
      fail(`LIBTORCH=${dir} has no include/ and lib/ folders: point it at an unpacked libtorch.`);
    return { dir, source: 'LIBTORCH' };
  }
  const py = torchFromPython();
  if (py) {
    const [major, minor] = py.version.split('.').map(Number);
    if (major < 2 || (major === 2 && minor < 5))
      fail(`python3's torch is ${py.version}; torch >= 2.5 is needed (pip install "torch==2.13.0+cpu").`);
    return { dir: py.dir, source: `python3 torch ${py.version}` };
  }
  fail(
    'libtorch was not found. Either set LIBTORCH to an unpacked libtorch folder (with include/ and lib/), or install ' +
      'the torch package for python3 (torch >= 2.5), e.g.\n  pip install --no-deps --target .cache/torch-py "torch==2.13.0+cpu"\n' +
      "(`bash scripts/setup.sh` does this from the machine's pip mirror).",
  );
}

// `node native/build.mjs --check-cuda-sources DIR` builds nothing: it compiles (g++ -fsyntax-only) every source as a
// CUDA build would, with CUDA graphs and NCCL, against a CUDA torch wheel's headers in DIR/torch/include and CUDA's in
// DIR/nvidia/*/include (the layout of site-packages; scripts/cuda-headers.sh puts the wheels' include/ folders there,
// by default those of the torch bench/gpu-run.sh builds with). A machine without CUDA so catches what would break the
// GPU build, where the CPU build never compiles the CUDA code (and errors in cuda_graph.cpp would only turn CUDA
// graphs off). test/torch/cuda-sources.test.ts runs it.
const checkArg = process.argv.indexOf('--check-cuda-sources');
const checkDir = checkArg === -1 ? undefined : process.argv[checkArg + 1];
if (checkArg !== -1 && checkDir === undefined)
  fail('--check-cuda-sources needs a folder (bash scripts/cuda-headers.sh DIR fills one)');
if (checkDir !== undefined && !existsSync(join(checkDir, 'torch', 'include', 'ATen', 'cuda', 'CUDAGraph.h')))
  fail(
    `--check-cuda-sources: ${resolve(checkDir)}/torch/include has no CUDA torch headers (bash scripts/cuda-headers.sh ${checkDir} puts them there)`,
  );
const torch = checkDir ? { dir: resolve(checkDir, 'torch'), source: `the CUDA torch headers in ${checkDir}` } : findLibtorch();
const libDir = join(torch.dir, 'lib');
const libs = checkDir ? [] : readdirSync(libDir);
const hasCuda = checkDir !== undefined || libs.some((f) => f.startsWith('libtorch_cuda'));
const nodeAddonApi = dirname(require.resolve('node-addon-api/package.json'));
const nodeApiHeaders = join(dirname(require.resolve('node-api-headers/package.json')), 'include');
const sources = [
  'addon.cpp',
  'blas.cpp',
  'core.cpp',
  'ops.cpp',
  'kernels.cpp',
  'distributed.cpp',
  'capture.cpp',
  'cuda_graph.cpp',
  'profiler.cpp',
].map((f) => join(here, 'src', f));

// distributed.cpp binds c10d (TCPStore, ProcessGroupGloo, ProcessGroupNCCL), whose headers reach into libtorch's C++
// API folder and into the communication libraries' own headers. The libraries' code is inside libtorch (gloo is
// compiled into libtorch_cpu; ProcessGroupNCCL into libtorch_cuda, which loads NCCL), but torch wheels ship neither
// gloo's nor NCCL's headers, so they are looked for here; a backend whose headers are missing is left out of the
// build, said so below, and creating a group with it is an error that says what to install.
const firstWith = (file, dirs) => dirs.find((d) => d && existsSync(join(d, file)));
// gloo's headers are only declarations here (every gloo symbol the addon uses is in libtorch_cpu); Debian's
// libgloo-dev provides them.
const glooInclude = firstWith('gloo/config.h', [
  process.env.GLOO_INCLUDE,
  join(torch.dir, 'include'),
  '/usr/local/include',
  '/usr/include',
]);
// Where CUDA's headers may be: CUDA_HOME, the toolkit's usual place, and the nvidia-* wheels next to a torch wheel
// (nvidia/<lib>/include, nvidia/cu13/include).
const nvidiaWheels = join(torch.dir, '..', 'nvidia');
// (--check-cuda-sources: only the wheels' headers in its folder, whatever CUDA this machine has)
const wheelIncludeDirs = existsSync(nvidiaWheels) ? readdirSync(nvidiaWheels).map((d) => join(nvidiaWheels, d, 'include')) : [];
const cudaIncludeDirs = (
  checkDir
    ? wheelIncludeDirs
    : [
        process.env.CUDA_HOME && join(process.env.CUDA_HOME, 'include'),
        '/usr/local/cuda/include',
        ...wheelIncludeDirs,
        '/usr/include',
      ]
).filter((d) => d && existsSync(d));
// CUDA graphs for captured steps (src/cuda_graph.cpp) need a CUDA libtorch and CUDA's runtime headers: the
// toolkit's, or the nvidia-cuda-runtime and nvidia-cuda-crt wheels (torch's own dependencies lack crt/).
const cudaHeaders = ['cuda_runtime_api.h', 'crt/host_config.h'];
const cudaHeaderDirs = hasCuda ? cudaHeaders.map((h) => firstWith(h, cudaIncludeDirs)) : [];
const cudaGraphs = hasCuda && cudaHeaderDirs.every((d) => d !== undefined);
const cudaGraphFlags = cudaGraphs
  ? ['-DTRT_CUDA_GRAPHS', ...[...new Set(cudaHeaderDirs)].filter((d) => d !== '/usr/include').map((d) => `-isystem${d}`)]
  : [];
const cudaGraphSummary = cudaGraphs
  ? 'yes'
  : `no (${
      hasCuda
        ? `${cudaHeaders.filter((_, i) => cudaHeaderDirs[i] === undefined).join(' and ')} not found in ${cudaIncludeDirs.join(', ') || 'any CUDA folder'}`
        : 'libtorch has no CUDA'
    })`;
function ncclSetup() {
  if (!hasCuda) return { reason: 'libtorch has no CUDA' };
  if (!existsSync(join(torch.dir, 'include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp')))
    return { reason: 'libtorch ships no ProcessGroupNCCL.hpp' };
  if (!checkDir) {
    // (a header-only check has no library to look into)
    const cudaLib = libs.find((f) => f.startsWith('libtorch_cuda.so'));
    let symbols = '';
    try {
      symbols = execFileSync('nm', ['-D', '--defined-only', join(libDir, cudaLib)], { maxBuffer: 1 << 30 }).toString();
    } catch {
      return { reason: `could not list the symbols of ${cudaLib} (nm)` };
    }
    if (!symbols.includes('_ZN4c10d16ProcessGroupNCCLC')) return { reason: `${cudaLib} has no ProcessGroupNCCL` };
  }
  const dirs = cudaIncludeDirs;
  for (const header of ['nccl.h', 'cuda_runtime_api.h'])
    if (!firstWith(header, dirs)) return { reason: `${header} was not found (in ${dirs.join(', ') || 'no CUDA folder'})` };
  return { dirs: dirs.filter((d) => d !== '/usr/include') };
}
const nccl = ncclSetup();
const distributedFlags = [
  `-isystem${join(torch.dir, 'include', 'torch', 'csrc', 'api', 'include')}`,
  ...(glooInclude ? ['-DUSE_C10D_GLOO', '-DTRT_HAVE_GLOO'] : []),
  ...(glooInclude && glooInclude !== '/usr/include' ? [`-isystem${glooInclude}`] : []),
  ...(nccl.dirs ? ['-DUSE_C10D_NCCL', '-DTRT_HAVE_NCCL', ...nccl.dirs.map((d) => `-isystem${d}`)] : []),
];
const distributedSummary =
  `gloo ${glooInclude ? `yes (gloo headers in ${glooInclude})` : 'no (gloo headers not found: apt-get install libgloo-dev, or set GLOO_INCLUDE)'}, ` +
  `nccl ${nccl.dirs ? 'yes' : `no (${nccl.reason})`}`;

const cxxflags = [
  '-std=c++20',
  '-O2',
  '-fPIC',
  '-fvisibility=hidden',
  '-DNAPI_CPP_EXCEPTIONS',
  '-DNODE_ADDON_API_DISABLE_DEPRECATED',
  // Our sources compile warning-free under -Wall -Wextra; libtorch's and Node-API's headers are included as system
  // headers, so their own warnings (not ours to fix) do not bury the addon's.
  '-Wall',
  '-Wextra',
  `-isystem${join(torch.dir, 'include')}`,
  `-isystem${nodeAddonApi}`,
  `-isystem${nodeApiHeaders}`,
];
const ldflags = [
  '-shared',
  `-L${libDir}`,
  `-Wl,-rpath,${libDir}`,
  '-Wl,--no-as-needed',
  '-ltorch_cpu',
  '-lc10',
  ...(hasCuda ? ['-ltorch_cuda', '-lc10_cuda'] : []),
  '-ltorch',
  '-Wl,--as-needed',
];

// kernels.cpp runs at::parallel_for, whose OpenMP body is inline: it needs -fopenmp to run on the intra-op threads
// (without it the pragma is ignored and the loop runs serially). GOMP's symbols resolve, when the addon loads, to the
// libgomp libtorch_cpu already loaded, so the process keeps one OpenMP runtime.
const flagsOf = (source) => {
  if (source.endsWith('kernels.cpp')) return [...cxxflags, '-O3', '-fopenmp'];
  if (source.endsWith('distributed.cpp')) return [...cxxflags, ...distributedFlags];
  if (source.endsWith('cuda_graph.cpp')) return [...cxxflags, ...cudaGraphFlags];
  return cxxflags;
};

if (checkDir !== undefined) {
  for (const [what, missing] of [
    ['CUDA graphs', cudaGraphs ? null : cudaGraphSummary],
    ['NCCL', nccl.dirs ? null : nccl.reason],
  ])
    if (missing) fail(`--check-cuda-sources: ${what} would not be built: ${missing}`);
  // -H lists every header a compile opens: the CUDA-only header of a file shows that its CUDA code was compiled
  const opens = { 'cuda_graph.cpp': 'ATen/cuda/CUDAGraph.h', 'distributed.cpp': 'c10d/ProcessGroupNCCL.hpp' };
  const check = (source) =>
    new Promise((done) => {
      const file = source.split('/').pop();
      const started = Date.now();
      const child = spawn('g++', [...flagsOf(source), '-fsyntax-only', '-H', source], { stdio: ['ignore', 'inherit', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d) => {
        stderr += d;
      });
      child.on('error', (error) => done(`${file}: g++ could not start (${error.message})`));
      child.on('exit', (code) => {
        // -H ends with a list of headers that lack include guards (libtorch's and the system's): not ours
        const lines = stderr.split('\nMultiple include guards may be useful for:\n')[0].split('\n');
        const diagnostics = lines.filter((l) => !/^\.+ /.test(l) && l !== '');
        if (diagnostics.length > 0) console.error(diagnostics.join('\n'));
        const needed = opens[file];
        if (code !== 0) return done(`${file}: g++ exit code ${code} (its messages are above)`);
        if (needed && !lines.some((l) => /^\.+ /.test(l) && l.endsWith(needed)))
          return done(`${file}: compiled without opening ${needed}, so its CUDA code was not compiled`);
        console.log(
          `[native] ${file} compiles${needed ? ` with its CUDA code (${needed})` : ''} (${((Date.now() - started) / 1000).toFixed(1)} s)`,
        );
        done(null);
      });
    });
  console.log(`[native] checking every source as a CUDA build against ${torch.source} (${distributedSummary})`);
  const failures = (await inParallel(sources.map((s) => () => check(s)))).filter((f) => f !== null);
  if (failures.length > 0) fail(`--check-cuda-sources: ${failures.join('; ')}`);
  process.exit(0);
}

const fingerprint = createHash('sha256')
  .update(JSON.stringify({ torch: torch.dir, cxxflags, ldflags, distributedFlags, cudaGraphFlags }))
  .update(readFileSync(fileURLToPath(import.meta.url)))
  .update(readFileSync(join(here, 'src', 'common.h')))
  .update(readFileSync(join(here, 'src', 'capture.h')));
for (const s of sources) fingerprint.update(readFileSync(s));
const stamp = fingerprint.digest('hex');
const stampFile = join(buildDir, 'build.json');
const output = join(buildDir, 'trinity_torch.node');
if (existsSync(output) && existsSync(stampFile) && JSON.parse(readFileSync(stampFile, 'utf8')).stamp === stamp) {
  console.log(`[native] up to date (${torch.source})`);
  process.exit(0);
}

mkdirSync(buildDir, { recursive: true });
console.log(`[native] building against ${torch.source} at ${torch.dir}${hasCuda ? ' (CUDA)' : ''}`);
console.log(`[native] distributed backends: ${distributedSummary}`);
console.log(`[native] CUDA graphs: ${cudaGraphSummary}`);

function run(cmd, args, label) {
  return new Promise((ok, ko) => {
    const started = Date.now();
    const child = spawn(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    child.on('exit', (code) => {
      if (code === 0) {
        console.log(`[native] ${label} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
        ok();
      } else ko(new Error(`${label} failed with exit code ${code}`));
    });
  });
}

// Other builds may run at the same time in this checkout (processes that load the addon keep running): each build
// compiles into its own folder and links to its own temporary name, and only the final rename (atomic on one file
// system) replaces trinity_torch.node, so no process ever loads a half-written addon or another build's objects.
const objectDir = join(buildDir, `obj-${process.pid}`);
mkdirSync(objectDir, { recursive: true });
const objects = sources.map((s) => join(objectDir, s.split('/').pop().replace('.cpp', '.o')));
// CUDA graphs are an addition, not a requirement: if cuda_graph.cpp does not compile against this libtorch's CUDA
// headers (another torch version), it is compiled without them and the addon says so (cudaGraphs in build.json).
let cudaGraphResult = cudaGraphSummary;
const compile = (s, i) => {
  const label = `compiled ${s.split('/').pop()}`;
  return run('g++', [...flagsOf(s), '-c', s, '-o', objects[i]], label).catch((error) => {
    if (!(s.endsWith('cuda_graph.cpp') && cudaGraphs)) throw error;
    cudaGraphResult = 'no (native/src/cuda_graph.cpp did not compile against this libtorch: its errors are above)';
    console.log(`[native] CUDA graphs: ${cudaGraphResult}; building it without them`);
    return run('g++', [...cxxflags, '-c', s, '-o', objects[i]], `${label} (without CUDA graphs)`);
  });
};
try {
  await inParallel(sources.map((s, i) => () => compile(s, i)));
  // Link to a temporary name and rename: processes that have the old addon loaded keep a valid mapping.
  const linked = `${output}.${process.pid}.tmp`;
  await run('g++', [...objects, ...ldflags, '-o', linked], 'linked trinity_torch.node');
  renameSync(linked, output);
} catch (error) {
  rmSync(objectDir, { recursive: true, force: true });
  fail(error.message);
}
rmSync(objectDir, { recursive: true, force: true });
writeFileSync(
  `${stampFile}.${process.pid}.tmp`,
  JSON.stringify(
    {
      stamp,
      libtorch: torch.dir,
      source: torch.source,
      cuda: hasCuda,
      cudaGraphs: cudaGraphResult,
      distributed: distributedSummary,
    },
    null,
    2,
  ),
);
renameSync(`${stampFile}.${process.pid}.tmp`, stampFile);
