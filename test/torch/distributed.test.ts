// Collectives between real processes over c10d's Gloo backend (src/torch/distributed.ts). Each test forks one
// process per rank (test/torch/helpers/distributed-rank.ts); rank 0 serves the store on a port the OS picked and the
// others join through the torchrun environment. Values are checked against hand computations written beside them.
// Nothing here waits on the clock: the ranks report over IPC, and the one timeout that must fire (a rank that never
// arrives) fires because that rank is held back until the test has the error.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import * as torch from '../../src/torch/index.js';
import { type ChildExit, forkChild, killForkedChildren } from '../helpers/forked-child.js';

const HELPER = fileURLToPath(new URL('./helpers/distributed-rank.ts', import.meta.url));

interface Message {
  type: 'port' | 'joined' | 'result' | 'error';
  port?: number;
  value?: unknown;
  name?: string;
  message?: string;
  collective?: string;
  rank?: number;
  timedOut?: boolean;
  later?: string;
}

interface RankProcess {
  child: ChildProcess;
  /** The first message of one of these types; rejects (with the rank's stderr) if the rank exits first. */
  next(...types: Message['type'][]): Promise<Message>;
  exited: Promise<ChildExit>;
}

after(killForkedChildren);

function startRank(rank: number, worldSize: number, scenario: string, masterPort?: number): RankProcess {
  const env: NodeJS.ProcessEnv = { ...process.env, RANK: String(rank), WORLD_SIZE: String(worldSize), SCENARIO: scenario };
  env.MASTER_ADDR = '127.0.0.1';
  if (masterPort !== undefined) env.MASTER_PORT = String(masterPort);
  else delete env.MASTER_PORT;
  const forked = forkChild<Message>(HELPER, { env, label: `rank ${rank}`, serialization: 'advanced' });
  return {
    child: forked.child,
    exited: forked.exited,
    next: (...types) => forked.next((m) => types.includes(m.type), types.join('/')),
  };
}

/** Starts `worldSize` ranks of `scenario`: rank 0 first, the others once it reported the store's port. */
async function startGroup(worldSize: number, scenario: string): Promise<RankProcess[]> {
  const first = startRank(0, worldSize, scenario);
  const { port } = await first.next('port');
  const ranks = [first];
  for (let r = 1; r < worldSize; r++) ranks.push(startRank(r, worldSize, scenario, port));
  return ranks;
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i);
const sumOver = (n: number, f: (r: number) => number) => range(n).reduce((acc, r) => acc + f(r), 0);

for (const W of [2, 3]) {
  test(`${W} ranks: each collective's values match hand computations`, async () => {
    const ranks = await startGroup(W, 'collectives');
    const results = await Promise.all(ranks.map((p) => p.next('result', 'error')));
    for (const [r, m] of results.entries()) assert.equal(m.type, 'result', `rank ${r}: ${m.message}`);
    const exits = await Promise.all(ranks.map((p) => p.exited));
    assert.deepEqual(
      exits.map((e) => e.code),
      range(W).map(() => 0),
    );

    // x_r = [r+1, -2(r+1), r/2]: sum over r = [W(W+1)/2, -W(W+1), W(W-1)/4]; avg = sum / W
    const sum = [(W * (W + 1)) / 2, -W * (W + 1), (W * (W - 1)) / 4];
    // y_r = [r, 5-r, r == 1 ? 10 : 0]: max = [W-1, 5, 10]; m_r = [r, -r]: min = [0, -(W-1)]; product of r+1 = W!
    const factorial = range(W).reduce((acc, r) => acc * (r + 1), 1);
    // reduceScatter of arange(2W) + 100r: rank s gets sum_r (2s+i + 100r) = W(2s+i) + 100 W(W-1)/2, i = 0, 1
    // reduceScatter max of (r+1) * arange(3W).reshape(W, 3): rank s gets row s times W
    // buckets: element j of tensor k on rank r is (j % 13) + 3r + k; summed over r: W((j % 13) + k) + 3 W(W-1)/2,
    // and the mean is that divided by W
    const sizes = [1, 3, 7, 1000, 5, 2, 33, 4096, 1, 17];
    const bucketSums = sizes.map((n, k) => range(n).map((j) => W * ((j % 13) + k) + (3 * W * (W - 1)) / 2));
    const floatK = [0, 1, 2, 3, 5, 6, 7, 9];
    for (const [s, m] of results.entries()) {
      const v = m.value as Record<string, unknown>;
      assert.deepEqual(v.sum, sum, `rank ${s} sum`);
      assert.deepEqual(
        v.avg,
        sum.map((x) => x / W),
        `rank ${s} avg`,
      );
      assert.deepEqual(v.max, [W - 1, 5, 10], `rank ${s} max`);
      assert.deepEqual(v.min, [0, -(W - 1)], `rank ${s} min`);
      assert.deepEqual(v.product, [factorial], `rank ${s} product`);
      assert.deepEqual(v.pair, [[sumOver(W, (r) => r)], [[sumOver(W, (r) => r), W]]], `rank ${s} two tensors`);
      assert.deepEqual(v.broadcast, [[10, 11], [1]], `rank ${s} broadcast from rank 1`);
      assert.deepEqual(
        v.allGather,
        range(W).map((r) => [r, r * r]),
        `rank ${s} allGather in rank order`,
      );
      assert.deepEqual(v.reduceScatter, [W * 2 * s + 50 * W * (W - 1), W * (2 * s + 1) + 50 * W * (W - 1)], `rank ${s}`);
      assert.deepEqual(v.reduceScatterRows, [[3 * s * W, (3 * s + 1) * W, (3 * s + 2) * W]], `rank ${s} rows`);
      assert.deepEqual(v.buckets, bucketSums, `rank ${s} bucketed sums`);
      assert.equal(v.bucketsEqualPerTensor, true, `rank ${s}: buckets give what per-tensor allReduce gives`);
      assert.deepEqual(v.bucketDtypes, [
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
      ]);
      // 256-byte buckets: float32 [1,3,7] | [1000] | [2] ... the count only has to show several tensors per bucket
      // and more than one bucket
      assert.ok((v.bucketCount as number) > 1 && (v.bucketCount as number) < sizes.length, `bucketCount ${v.bucketCount}`);
      assert.deepEqual(
        v.bucketMeans,
        floatK.map((k) => (bucketSums[k] as number[]).map((x) => x / W)),
        `rank ${s} bucketed means`,
      );
      assert.equal(v.barrier, true);
    }
  });
}

test('overlapped gradient buckets: issued from the backward in bucket order, summed into the parameters or master weights', async () => {
  const ranks = await startGroup(2, 'overlap');
  const results = await Promise.all(ranks.map((p) => p.next('result', 'error')));
  for (const [r, m] of results.entries()) assert.equal(m.type, 'result', `rank ${r}: ${m.message}`);
  await Promise.all(ranks.map((p) => p.exited));
  // d loss / d p_k = (r + 1)(k + 1) on rank r: the sum over ranks 0, 1 is 3(k + 1); rank 0 alone gives k + 1
  for (const m of results) {
    const v = m.value as Record<string, unknown>;
    // 256-byte leaves, 512-byte buckets, reverse order, unhooked p0 last
    assert.deepEqual(v.buckets, [[3, 2], [1], [0]]);
    // the two hooked buckets went out during the backward; p0's at finish
    assert.equal(v.earlyInPlace, 2);
    assert.deepEqual(v.inPlace, [3, 6, 9, 12]);
    assert.deepEqual(v.onlyRank0, [1, 2, 3, 4]);
    assert.match(String(v.secondBackward), /parameter 3 received a gradient after its bucket 0 was all-reduced/);
    assert.equal(v.earlyMaster, 2);
    assert.deepEqual(v.master, [3, 6, 9, 12]);
    assert.equal(v.masterDtype, 'float32');
    assert.deepEqual(v.compute, [null, null, null, null], 'the bf16 gradients moved into the master weights');
  }
});

test('a rank killed with SIGKILL: the survivor’s collective fails naming the collective and its rank', async () => {
  const ranks = await startGroup(2, 'die');
  const [survivor, victim] = ranks as [RankProcess, RankProcess];
  const killed = await victim.exited;
  assert.equal(killed.signal, 'SIGKILL');
  const m = await survivor.next('result', 'error');
  assert.equal(m.type, 'error', `rank 0 reported ${JSON.stringify(m.value)}`);
  assert.equal(m.name, 'DistributedError');
  assert.equal(m.collective, 'allReduce');
  assert.equal(m.rank, 0);
  assert.equal(m.timedOut, false);
  assert.match(m.message ?? '', /^allReduce on rank 0 of 2 \(gloo\) failed: /);
  // the group is out of step after that: the next collective fails at once and says why
  assert.match(
    m.later ?? '',
    /^barrier on rank 0 of 2: the process group is unusable since an earlier collective failed \(allReduce/,
  );
  assert.equal((await survivor.exited).code, 0);
});

test('a rank that never arrives: the barrier times out and says which collective, rank and timeout', async () => {
  const ranks = await startGroup(2, 'hang');
  const [waiting, absent] = ranks as [RankProcess, RankProcess];
  const m = await waiting.next('result', 'error');
  absent.child.send('release');
  assert.equal(m.type, 'error', `rank 0 reported ${JSON.stringify(m.value)}`);
  assert.equal(m.collective, 'barrier');
  assert.equal(m.timedOut, true);
  assert.match(m.message ?? '', /^barrier on rank 0 of 2 \(gloo\) timed out after 1500 ms waiting for the other ranks: /);
  await Promise.all(ranks.map((p) => p.exited));
});

test('a bad shape is refused before anything is sent, and the group says it is out of step', async () => {
  const ranks = await startGroup(2, 'bad-shape');
  const results = await Promise.all(ranks.map((p) => p.next('result', 'error')));
  for (const [r, m] of results.entries()) {
    assert.equal(m.type, 'error');
    assert.equal(
      m.message,
      `reduceScatter on rank ${r} of 2 (gloo) failed: reduceScatter: input's first dimension (5, shape [5, 2]) is not a multiple of the world size (2)`,
    );
    assert.match(m.later ?? '', /the process group is unusable since an earlier collective failed \(reduceScatter/);
  }
  await Promise.all(ranks.map((p) => p.exited));
});

test('checkCollectives: ranks that disagree on a shape get an error saying so, not an aborted process', async () => {
  const ranks = await startGroup(2, 'mismatch');
  const results = await Promise.all(ranks.map((p) => p.next('result', 'error')));
  for (const [r, m] of results.entries()) {
    assert.equal(m.type, 'error', `rank ${r} reported ${JSON.stringify(m.value)}`);
    assert.equal(m.collective, 'allReduce');
    assert.match(
      m.message ?? '',
      new RegExp(`^allReduce on rank ${r} of 2 \\(gloo\\) failed: .*Detected mismatch between collectives`, 's'),
    );
    // c10d's fingerprint names the shapes each rank brought
    assert.match(m.message ?? '', /TensorShape=\[4\]/);
    assert.match(m.message ?? '', /TensorShape=\[5\]/);
  }
  assert.deepEqual(
    (await Promise.all(ranks.map((p) => p.exited))).map((e) => e.code),
    [0, 0],
  );
});

describe('arguments', () => {
  const env = {};
  test('world size, rank, port and backend are checked before anything connects', async () => {
    await assert.rejects(torch.initProcessGroup({ worldSize: 0, rank: 0, masterPort: 1234, env }), {
      name: 'RangeError',
      message: 'initProcessGroup: worldSize must be an integer >= 1, got 0',
    });
    await assert.rejects(torch.initProcessGroup({ worldSize: 2, rank: 2, masterPort: 1234, env }), {
      message: 'initProcessGroup: rank 2 is out of range for world size 2 (ranks are 0..1)',
    });
    await assert.rejects(torch.initProcessGroup({ worldSize: 2, rank: -1, masterPort: 1234, env }), {
      message: 'initProcessGroup: rank must be an integer >= 0, got -1',
    });
    await assert.rejects(torch.initProcessGroup({ worldSize: 2, env }), {
      message: 'initProcessGroup: rank is not set: pass { rank } or set RANK',
    });
    await assert.rejects(torch.initProcessGroup({ env: { RANK: '0' } }), {
      message: 'initProcessGroup: worldSize is not set: pass { worldSize } or set WORLD_SIZE',
    });
    await assert.rejects(torch.initProcessGroup({ env: { RANK: 'one', WORLD_SIZE: '2' } }), {
      message: 'RANK="one" is not an integer >= 0',
    });
    await assert.rejects(torch.initProcessGroup({ env: { RANK: '0', WORLD_SIZE: '2', MASTER_PORT: '70000' } }), {
      message: 'MASTER_PORT="70000" is not an integer in [1, 65535]',
    });
    await assert.rejects(torch.initProcessGroup({ env: { RANK: '0', WORLD_SIZE: '2' } }), {
      message: 'initProcessGroup: masterPort is not set: pass { masterPort } or set MASTER_PORT',
    });
    await assert.rejects(
      torch.initProcessGroup({ rank: 0, worldSize: 1, masterPort: 1234, backend: 'mpi' as torch.DistributedBackend, env }),
      { name: 'TypeError', message: `initProcessGroup: backend must be 'gloo' or 'nccl', got "mpi"` },
    );
    await assert.rejects(torch.initProcessGroup({ rank: 0, worldSize: 1, masterPort: 1234, timeoutMs: 0, env }), {
      message: 'initProcessGroup: timeoutMs must be an integer >= 1, got 0',
    });
    await assert.rejects(torch.Store.create({ host: '127.0.0.1', port: 0, worldSize: 2, isMaster: false }), {
      message: "Store.create: port 0 (any free port) only works on the master; other ranks need the master's port",
    });
  });

  test('NCCL is refused with the reason when this build has none', { skip: torch.availableBackends().nccl }, async () => {
    await assert.rejects(torch.initProcessGroup({ rank: 0, worldSize: 1, masterPort: 1234, backend: 'nccl', env }), {
      message: /this build of the addon has no NCCL/,
    });
  });

  test('a one-rank group: collectives are the identity; a bad op is named, then the group is out of step', async () => {
    const store = await torch.Store.create({ host: '127.0.0.1', port: 0, worldSize: 1, isMaster: true, timeoutMs: 60_000 });
    const group = await torch.initProcessGroup({ store, rank: 0, worldSize: 1, env });
    try {
      const t = torch.tensor([1, 2]);
      await group.allReduce(t, { op: 'avg' });
      assert.deepEqual(t.toArray(), [1, 2]);
      await assert.rejects(group.allReduce(t, { op: 'mean' as torch.DistributedReduceOp }), {
        name: 'DistributedError',
        message: 'allReduce on rank 0 of 1 (gloo) failed: allReduce: op must be one of sum, avg, max, min, product, got "mean"',
      });
      await assert.rejects(group.barrier(), { message: /^barrier on rank 0 of 1: the process group is unusable/ });
    } finally {
      await group.destroy();
      await store.close();
    }
    await assert.rejects(group.barrier(), { message: 'barrier: the process group was destroyed' });
  });

  test('the store: values cross, counters add, and a missing key times out naming the key', async () => {
    const store = await torch.Store.create({ host: '127.0.0.1', port: 0, worldSize: 1, isMaster: true, timeoutMs: 60_000 });
    try {
      await store.set('greeting', 'hello');
      assert.equal(new TextDecoder().decode(await store.get('greeting')), 'hello');
      assert.equal(await store.add('count', 2), 2);
      assert.equal(await store.add('count', 3), 5);
      await assert.rejects(store.get('never-set', { timeoutMs: 200 }), {
        message: /^Store\.get: waiting for key "never-set" failed \(timeout 200 ms\): /,
      });
    } finally {
      await store.close();
    }
  });

  test('planBuckets groups by dtype, keeps order and caps bucket bytes', () => {
    const t = (n: number, dtype: torch.DType) => torch.zeros([n], { dtype });
    const tensors = [t(2, 'float32'), t(3, 'float64'), t(1, 'float32'), t(10, 'float32'), t(1, 'float32'), t(1, 'float64')];
    // float32 bytes 8, 4, 40, 4 with a 16-byte cap: [8+4] [40] [4]; float64 bytes 24, 8: [24] [8]
    const buckets = torch.planBuckets(tensors, 16);
    const index = (x: torch.Tensor) => tensors.indexOf(x);
    assert.deepEqual(
      buckets.map((b) => b.map(index)),
      [[0, 2], [3], [4], [1], [5]],
    );
    for (const x of tensors) x.dispose();
  });
});
