// Gloo all-reduce bandwidth between local ranks next to a plain memcpy of the same bytes:
// `node --import tsx bench/allreduce.bench.ts [--ranks 2] [--max-mb 64]` (npm run bench:allreduce).
//
// The script forks itself once per rank (rank 0 serves the store on a port the OS picks; the others join through the
// torchrun environment, as in test/torch/distributed.test.ts). For each size from 1 KB to --max-mb (float32, powers
// of 4) every rank all-reduces (sum) the same tensor `iterations` times; each sample is one awaited allReduce (issue,
// Gloo's ring over loopback TCP, the wait off the JS thread), after a barrier. Rank 0 then copies the same bytes with
// Tensor.copy_ (libtorch's memcpy, one intra-op thread) as many times, so both sides run in the same process on the
// same machine state. Reported per size: the median time of one all-reduce, its algorithm bandwidth (bytes / time)
// and bus bandwidth (algbw x 2(n-1)/n, the bytes each rank moves in a ring: nccl-tests' convention), the memcpy
// bandwidth, and bus bandwidth / memcpy bandwidth. Prints the CPU, its vector features and libtorch's CPU capability,
// a table, then one JSON line.
//
// Then the gradient sum of a training step, after the backward against overlapped with it: every rank runs the
// forward and backward of an MLP (--mlp-layers square float32 layers of --mlp-width, tanh between, a batch of 64
// rows; ~4 MB per layer at the default width 1024) and sums the gradients in 4 MB buckets either after the backward
// (ProcessGroup.allReduceBuckets) or while it runs (ProcessGroup.overlappedGradients: buckets issued from autograd
// hooks as they fill). Each sample is one whole step (forward, backward, sum complete); the two ways alternate ABBA,
// after a barrier each; also the step without any sum (the floor). Reported: medians, and the buckets the hooks
// issued before the backward returned.
import { fork } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as torch from '../src/torch/index.js';
import { clamp, cpuFeatures, fmt, median, now, r2, r3, secondsSince, table } from './harness.js';

const { values: flags } = parseArgs({
  options: {
    ranks: { type: 'string', default: '2' },
    'max-mb': { type: 'string', default: '64' },
    'mlp-layers': { type: 'string', default: '8' },
    'mlp-width': { type: 'string', default: '1024' },
    'step-iterations': { type: 'string', default: '20' },
    help: { type: 'boolean', default: false },
  },
});
if (flags.help) {
  console.log(`Gloo all-reduce vs memcpy bandwidth between local ranks.
  --ranks N      processes in the group (default 2)
  --max-mb N     largest message in MB (default 64; sizes are 1 KB x 4^k up to it)
  --mlp-layers N, --mlp-width N, --step-iterations N
                 the overlap comparison's MLP (default 8 layers of 1024) and samples per way (default 20)`);
  process.exit(0);
}

interface SizeResult {
  bytes: number;
  iterations: number;
  allReduceUs: number;
  algGBs: number;
  busGBs: number;
  memcpyGBs: number;
  busOverMemcpy: number;
}

const KB = 1024;
const sizes = (maxBytes: number): number[] => {
  const out: number[] = [];
  for (let bytes = KB; bytes <= maxBytes; bytes *= 4) out.push(bytes);
  return out;
};
// enough samples for a stable median at small sizes, a few at large ones: about 256 MB moved per size
const iterationsFor = (bytes: number): number => clamp(Math.round((256 * KB * KB) / bytes), 5, 200);

async function timeAsync(iterations: number, fn: () => Promise<void>): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = now();
    await fn();
    samples.push(secondsSince(t0));
  }
  return median(samples);
}

interface OverlapResult {
  layers: number;
  width: number;
  gradientMB: number;
  buckets: number;
  iterations: number;
  backwardOnlyMs: number;
  afterBackwardMs: number;
  overlappedMs: number;
  /** Buckets the hooks issued before the backward returned (median over samples). */
  issuedDuringBackward: number;
}

const OVERLAP_BUCKET_BYTES = 4 * KB * KB;

async function overlapComparison(group: torch.ProcessGroup): Promise<OverlapResult> {
  const layers = Number(flags['mlp-layers']);
  const width = Number(flags['mlp-width']);
  const iterations = Number(flags['step-iterations']);
  const generator = new torch.Generator(group.rank + 1);
  const weights = Array.from({ length: layers }, () =>
    torch.keep(
      torch.scope(() =>
        torch
          .randn([width, width], { generator })
          .mul(1 / Math.sqrt(width))
          .requiresGrad_(true),
      ),
    ),
  );
  const input = torch.keep(torch.randn([64, width], { generator }));
  const step = () =>
    torch.scope(() => {
      let x = input;
      for (const w of weights) x = x.matmul(w).tanh();
      x.mean().backward();
    });
  const clear = () => {
    for (const w of weights) w.grad = null;
  };
  const overlapped = group.overlappedGradients(weights, { op: 'sum', bucketBytes: OVERLAP_BUCKET_BYTES });
  const ways: Record<string, () => Promise<number>> = {
    backwardOnly: async () => {
      step();
      return 0;
    },
    afterBackward: async () => {
      step();
      await group.allReduceBuckets(
        weights.map((w) => w.grad as torch.Tensor),
        { op: 'sum', bucketBytes: OVERLAP_BUCKET_BYTES },
      );
      return 0;
    },
    overlapped: async () => {
      overlapped.arm();
      step();
      return overlapped.finish();
    },
  };
  const samples: Record<string, number[]> = { backwardOnly: [], afterBackward: [], overlapped: [] };
  const issued: number[] = [];
  const order = Object.keys(ways);
  for (let i = 0; i < iterations + 1; i++) {
    const round = i % 2 === 0 ? order : [...order].reverse();
    for (const way of round) {
      clear();
      await group.barrier();
      const t0 = now();
      const early = await (ways[way] as () => Promise<number>)();
      const seconds = secondsSince(t0);
      if (i === 0) continue; // warm-up
      (samples[way] as number[]).push(seconds);
      if (way === 'overlapped') issued.push(early);
    }
  }
  overlapped.dispose();
  for (const w of weights) w.dispose();
  input.dispose();
  return {
    layers,
    width,
    gradientMB: r2((layers * width * width * 4) / (KB * KB)),
    buckets: overlapped.buckets.length,
    iterations,
    backwardOnlyMs: r2(median(samples.backwardOnly as number[]) * 1e3),
    afterBackwardMs: r2(median(samples.afterBackward as number[]) * 1e3),
    overlappedMs: r2(median(samples.overlapped as number[]) * 1e3),
    issuedDuringBackward: median(issued),
  };
}

async function rankMain(): Promise<void> {
  torch.setNumThreads(1);
  const rank = Number(process.env.RANK);
  const worldSize = Number(process.env.WORLD_SIZE);
  let group: torch.ProcessGroup;
  if (rank === 0) {
    const store = await torch.Store.create({ host: '127.0.0.1', port: 0, worldSize, isMaster: true });
    process.send?.({ port: store.port });
    group = await torch.initProcessGroup({ store, rank, worldSize });
  } else {
    group = await torch.initProcessGroup();
  }
  const results: SizeResult[] = [];
  for (const bytes of sizes(Number(flags['max-mb']) * KB * KB)) {
    const iterations = iterationsFor(bytes);
    const t = torch.ones([bytes / 4]);
    await group.allReduce(t); // warm-up: first use of this size's buffers
    await group.barrier();
    const seconds = await timeAsync(iterations, () => group.allReduce(t));
    t.dispose();
    await group.barrier();
    if (rank === 0) {
      const src = torch.ones([bytes / 4]);
      const dst = torch.empty([bytes / 4]);
      dst.copy_(src);
      const copySeconds = await timeAsync(iterations, async () => {
        dst.copy_(src);
      });
      src.dispose();
      dst.dispose();
      const algGBs = bytes / seconds / 1e9;
      const busGBs = (algGBs * 2 * (worldSize - 1)) / worldSize;
      const memcpyGBs = bytes / copySeconds / 1e9;
      results.push({
        bytes,
        iterations,
        allReduceUs: r2(seconds * 1e6),
        algGBs: r3(algGBs),
        busGBs: r3(busGBs),
        memcpyGBs: r3(memcpyGBs),
        busOverMemcpy: r3(busGBs / memcpyGBs),
      });
    }
    await group.barrier();
  }
  const overlap = await overlapComparison(group);
  await group.destroy();
  if (rank === 0) await new Promise<void>((resolve) => process.send?.({ results, overlap }, () => resolve()));
  process.disconnect?.();
}

const humanBytes = (bytes: number): string => (bytes >= KB * KB ? `${bytes / (KB * KB)} MB` : `${bytes / KB} KB`);

async function parentMain(): Promise<void> {
  const worldSize = Number(flags.ranks);
  if (!Number.isInteger(worldSize) || worldSize < 2) throw new Error(`--ranks must be an integer >= 2, got ${flags.ranks}`);
  const script = fileURLToPath(import.meta.url);
  const start = (rank: number, port?: number) =>
    fork(script, process.argv.slice(2), {
      execArgv: ['--import', 'tsx'],
      env: {
        ...process.env,
        TRINITY_BENCH_RANK: String(rank),
        RANK: String(rank),
        WORLD_SIZE: String(worldSize),
        MASTER_ADDR: '127.0.0.1',
        MASTER_PORT: port === undefined ? '' : String(port),
      },
    });
  const first = start(0);
  const children = [first];
  const exited = (child: ReturnType<typeof start>, rank: number) =>
    new Promise<void>((resolve, reject) =>
      child.on('exit', (code, signal) =>
        code === 0 ? resolve() : reject(new Error(`rank ${rank} exited with code ${code}, signal ${signal}`)),
      ),
    );
  const exits = [exited(first, 0)];
  let overlap: OverlapResult | null = null;
  const results = new Promise<SizeResult[]>((resolve) => {
    first.on('message', (m: { port?: number; results?: SizeResult[]; overlap?: OverlapResult }) => {
      if (m.overlap !== undefined) overlap = m.overlap;
      if (m.port !== undefined)
        for (let r = 1; r < worldSize; r++) {
          const child = start(r, m.port);
          children.push(child);
          exits.push(exited(child, r));
        }
      if (m.results !== undefined) resolve(m.results);
    });
  });
  try {
    const rows = await Promise.race([results, Promise.all(exits).then(() => null)]);
    await Promise.all(exits);
    if (rows === null) throw new Error('rank 0 exited without results');
    const capability = torch.buildInfo().config.match(/CPU capability usage: (\S+)/)?.[1] ?? 'unknown';
    console.log(
      `allreduce bench: ${worldSize} ranks on one machine, Gloo over loopback TCP, float32 sum, 1 intra-op thread per rank; ` +
        `libtorch ${torch.buildInfo().torchVersion}; ${os.cpus()[0]?.model ?? 'cpu'} (${os.cpus().length} cores; ` +
        `features ${cpuFeatures().features.join(' ') || 'unknown'}; libtorch CPU capability ${capability}), load avg ${os.loadavg()[0]?.toFixed(2)}`,
    );
    table(
      'all-reduce (median of iterations) vs memcpy of the same bytes; bus/memcpy = bus bandwidth / memcpy bandwidth',
      ['size', 'iters', 'allreduce us', 'algbw GB/s', 'busbw GB/s', 'memcpy GB/s', 'bus/memcpy'],
      rows.map((r) => [
        humanBytes(r.bytes),
        String(r.iterations),
        fmt(r.allReduceUs, 1),
        fmt(r.algGBs, 3),
        fmt(r.busGBs, 3),
        fmt(r.memcpyGBs, 2),
        fmt(r.busOverMemcpy, 3),
      ]),
    );
    const o = overlap as OverlapResult | null;
    if (o !== null)
      table(
        `gradient sum of a step: ${o.layers}x${o.width} float32 MLP (${o.gradientMB} MB of gradients, ${o.buckets} buckets of 4 MB), median ms per step of ${o.iterations}`,
        ['forward+backward only', 'sum after backward', 'sum overlapped', 'overlapped/after', 'buckets issued in backward'],
        [
          [
            fmt(o.backwardOnlyMs, 1),
            fmt(o.afterBackwardMs, 1),
            fmt(o.overlappedMs, 1),
            fmt(o.overlappedMs / o.afterBackwardMs, 3),
            `${o.issuedDuringBackward} of ${o.buckets}`,
          ],
        ],
      );
    console.log(
      JSON.stringify({
        bench: 'allreduce',
        overlap: o,
        backend: 'gloo',
        ranks: worldSize,
        cpu: os.cpus()[0]?.model ?? 'unknown',
        features: cpuFeatures().features,
        sizes: rows,
      }),
    );
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

if (process.env.TRINITY_BENCH_RANK !== undefined) await rankMain();
else await parentMain();
