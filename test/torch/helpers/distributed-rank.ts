// One rank of a test process group (test/torch/distributed.test.ts forks one of these per rank, under tsx).
// Rank 0 serves the store on a port the OS picks and reports it ({ type: 'port' }); the test then starts the other
// ranks with MASTER_PORT set, and they join through the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) as a launched trainer would. Each rank runs the scenario named by SCENARIO and reports
// { type: 'result', value } or { type: 'error', ... } over the IPC channel, then leaves the group and exits.
import * as torch from '../../../src/torch/index.js';

type Message =
  | { type: 'port'; port: number }
  | { type: 'joined' }
  | { type: 'result'; value: unknown }
  | { type: 'error'; name: string; message: string; collective?: string; rank?: number; timedOut?: boolean; later?: string };

const send = (message: Message) =>
  new Promise<void>((resolve, reject) => process.send?.(message, (error: Error | null) => (error ? reject(error) : resolve())));

// The test tells a rank when to go on (the 'hang' scenario's rank 1 waits for it).
const released = new Promise<void>((resolve) => process.on('message', (m) => m === 'release' && resolve()));

// Generous and finite: collectives here complete as soon as every rank arrives; this only bounds a broken run.
const TIMEOUT_MS = 120_000;

const rank = Number(process.env.RANK);
const worldSize = Number(process.env.WORLD_SIZE);
const scenario = process.env.SCENARIO ?? '';
const checkCollectives = scenario === 'mismatch';

function describeError(error: unknown): Extract<Message, { type: 'error' }> {
  if (error instanceof torch.DistributedError)
    return {
      type: 'error',
      name: error.name,
      message: error.message,
      collective: error.collective,
      rank: error.rank,
      timedOut: error.timedOut,
    };
  return { type: 'error', name: (error as Error).name, message: (error as Error).message };
}

async function join(): Promise<torch.ProcessGroup> {
  if (rank === 0) {
    const store = await torch.Store.create({ host: '127.0.0.1', port: 0, worldSize, isMaster: true, timeoutMs: TIMEOUT_MS });
    await send({ type: 'port', port: store.port });
    return torch.initProcessGroup({ store, rank, worldSize, timeoutMs: TIMEOUT_MS, checkCollectives });
  }
  return torch.initProcessGroup({ timeoutMs: TIMEOUT_MS, checkCollectives });
}

// The values each collective returns on this rank; the test compares them with hand computations.
async function collectives(group: torch.ProcessGroup): Promise<Record<string, unknown>> {
  const r = group.rank;
  const out: Record<string, unknown> = {};
  const x = () => torch.tensor([r + 1, -2 * (r + 1), 0.5 * r]);
  for (const op of ['sum', 'avg'] as const) {
    const t = x();
    await group.allReduce(t, { op });
    out[op] = t.toArray();
    t.dispose();
  }
  const y = torch.tensor([r, 5 - r, r === 1 ? 10 : 0]);
  await group.allReduce(y, { op: 'max' });
  out.max = y.toArray();
  const m = torch.tensor([r, -r]);
  await group.allReduce(m, { op: 'min' });
  out.min = m.toArray();
  const p = torch.tensor([r + 1], { dtype: 'int64' });
  await group.allReduce(p, { op: 'product' });
  out.product = p.toArray();

  // two tensors in one call: each is reduced
  const a = torch.tensor([r]);
  const b = torch.tensor([[r, 1]], { dtype: 'float64' });
  await group.allReduce([a, b]);
  out.pair = [a.toArray(), b.toArray()];

  const z = torch.tensor([r * 10, r * 10 + 1]);
  const w = torch.tensor([r], { dtype: 'int32' });
  await group.broadcast([z, w], { root: 1 });
  out.broadcast = [z.toArray(), w.toArray()];

  const gathered = await group.allGather(torch.tensor([r, r * r]));
  out.allGather = gathered.map((t) => t.toArray());

  const flat = torch.arange(0, 2 * worldSize).add(100 * r);
  out.reduceScatter = (await group.reduceScatter(flat)).toArray();
  const rows = torch
    .arange(0, 3 * worldSize)
    .reshape([worldSize, 3])
    .mul(r + 1);
  out.reduceScatterRows = (await group.reduceScatter(rows, { op: 'max' })).toArray();

  // many odd-sized tensors of three dtypes, interleaved; element j of tensor k on rank r is (j % 13) + 3r + k
  const sizes = [1, 3, 7, 1000, 5, 2, 33, 4096, 1, 17];
  const dtypes = [
    'float32',
    'float64',
    'float32',
    'float32',
    'int64',
    'float32',
    'float64',
    'float32',
    'int64',
    'float32',
  ] as const;
  const make = () =>
    sizes.map((n, k) =>
      torch.tensor(
        Array.from({ length: n }, (_, j) => (j % 13) + 3 * r + k),
        { dtype: dtypes[k] },
      ),
    );
  const bucketed = make();
  const perTensor = make();
  const bucketBytes = 256;
  out.bucketCount = torch.planBuckets(bucketed, bucketBytes).length;
  await group.allReduceBuckets(bucketed, { bucketBytes });
  await group.allReduce(perTensor);
  out.buckets = bucketed.map((t) => t.toArray());
  out.bucketsEqualPerTensor = bucketed.every((t, k) => JSON.stringify(t.toArray()) === JSON.stringify(perTensor[k]?.toArray()));
  out.bucketDtypes = bucketed.map((t) => t.dtype);

  // avg of buckets: the mean of every rank's values
  const means = make().filter((t) => t.dtype !== 'int64');
  await group.allReduceBuckets(means, { op: 'avg', bucketBytes });
  out.bucketMeans = means.map((t) => t.toArray());

  await group.barrier();
  out.barrier = true;
  return out;
}

// Gradient buckets summed while the backward runs (ProcessGroup.overlappedGradients). Four leaves p0..p3 of 64 float32
// (256 bytes), buckets of 512 bytes, p0 unhooked: buckets [p3, p2], [p1] (hooked, reverse order), then [p0]. The loss
// on rank r is sum_k (r + 1)(k + 1) sum(p_k), so d loss / d p_k = (r + 1)(k + 1) everywhere.
async function overlap(group: torch.ProcessGroup): Promise<Record<string, unknown>> {
  const r = group.rank;
  const out: Record<string, unknown> = {};
  const leaves = (dtype: 'float32' | 'bfloat16') => [0, 1, 2, 3].map(() => torch.zeros([64], { dtype, requiresGrad: true }));
  const backward = (params: torch.Tensor[]) =>
    torch.scope(() => {
      let loss = torch.zeros([]);
      params.forEach((p, k) => {
        loss = loss.add(
          p
            .float()
            .sum()
            .mul((r + 1) * (k + 1)),
        );
      });
      loss.backward();
    });
  const firstOf = (ts: readonly torch.Tensor[]) =>
    torch.scope(() => ts.map((t) => (t.grad === null ? null : (t.grad.float().toArray() as number[])[0])));

  // float32, summed in place in the parameters' .grad
  const params = leaves('float32');
  const sums = group.overlappedGradients(params, { bucketBytes: 512, unhooked: new Set([params[0] as torch.Tensor]) });
  out.buckets = sums.buckets;
  sums.arm();
  backward(params);
  out.earlyInPlace = await sums.finish();
  out.inPlace = firstOf(params);

  // a rank that runs no backward (rank 1) still takes part: zeros from it
  for (const p of params) p.grad = null;
  if (r === 0) {
    sums.arm();
    backward(params);
  }
  await sums.finish();
  out.onlyRank0 = firstOf(params);

  // a hooked parameter that receives a gradient after its bucket went: the backward throws naming it
  for (const p of params) p.grad = null;
  sums.arm();
  backward(params);
  try {
    backward(params);
    out.secondBackward = 'accepted';
  } catch (error) {
    out.secondBackward = (error as Error).message;
  }
  await sums.finish();
  sums.dispose();

  // bf16 parameters, float32 targets (master weights): the targets get the sums, the parameters no gradient
  const compute = leaves('bfloat16');
  const master = leaves('float32');
  const mixed = group.overlappedGradients(compute, {
    bucketBytes: 512,
    targets: master,
    unhooked: new Set([compute[0] as torch.Tensor]),
  });
  mixed.arm();
  backward(compute);
  // the unhooked parameter's gradient moves at finish (a trainer moves it itself after each micro-batch)
  out.earlyMaster = await mixed.finish();
  out.master = firstOf(master);
  out.masterDtype = torch.scope(() => master[0]?.grad?.dtype);
  out.compute = firstOf(compute);
  mixed.dispose();
  for (const t of [...params, ...compute, ...master]) t.dispose();
  return out;
}

async function main(): Promise<void> {
  const group = await join();
  await send({ type: 'joined' });
  try {
    if (scenario === 'collectives') {
      await send({ type: 'result', value: await collectives(group) });
    } else if (scenario === 'overlap') {
      await send({ type: 'result', value: await overlap(group) });
    } else if (scenario === 'die') {
      await group.barrier();
      if (rank === 1) process.kill(process.pid, 'SIGKILL');
      try {
        await group.allReduce(torch.ones([4]));
        await send({ type: 'result', value: 'allReduce completed without rank 1' });
      } catch (error) {
        const first = describeError(error);
        const later = await group.barrier().then(
          () => 'barrier completed',
          (e: Error) => e.message,
        );
        await send({ ...first, later });
      }
    } else if (scenario === 'hang') {
      // rank 1 is alive and connected but never enters the barrier until the test releases it
      if (rank === 1) await released;
      else
        await group.barrier({ timeoutMs: 1500 }).then(
          () => send({ type: 'result', value: 'barrier completed without rank 1' }),
          (error) => send(describeError(error)),
        );
    } else if (scenario === 'mismatch') {
      // the ranks disagree on the shape, which no rank can see alone: checkCollectives compares them first
      await group.allReduce(torch.ones([3]));
      await group.allReduce(torch.ones([4 + rank])).then(
        () => send({ type: 'result', value: 'allReduce accepted mismatched shapes' }),
        (error) => send(describeError(error)),
      );
    } else if (scenario === 'bad-shape') {
      // both ranks make the same mistake: rejected before anything is sent
      await group.reduceScatter(torch.zeros([2 * worldSize + 1, 2])).then(
        () => send({ type: 'result', value: 'reduceScatter accepted a bad shape' }),
        async (error) => {
          const later = await group.barrier().then(
            () => 'barrier completed',
            (e: Error) => e.message,
          );
          await send({ ...describeError(error), later });
        },
      );
    } else {
      throw new Error(`unknown SCENARIO ${JSON.stringify(scenario)}`);
    }
  } finally {
    await group.destroy();
  }
}

main().then(
  () => process.disconnect?.(),
  async (error) => {
    await send(describeError(error)).catch(() => {});
    process.exitCode = 1;
    process.disconnect?.();
  },
);
