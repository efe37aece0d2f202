// Multi-node launch without a cluster: Slurm's compressed host lists and tasks-per-node lists expanded, a Slurm
// task's environment read as the torchrun one (torchrun's variables winning), `trinity run --nnodes N --node-rank K
// --master-addr A` starting its node's share of the ranks with their global ranks, and the launch flags' bad
// combinations refused with errors naming the flags. Rank programs are small stand-ins (`node -e`); no clock.
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { launchPlanFromFlags, launchRanks } from '../../../src/cli/launch.js';
import { distributedLaunchFromEnv } from '../../../src/rft/run/distributed.js';
import { expandSlurmHostList, expandSlurmTasksPerNode } from '../../../src/rft/run/slurm.js';
import { runProcess } from '../../helpers/run-process.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

test("Slurm's compressed host list: ranges, zero padding, several brackets, plain names; malformed lists named", () => {
  assert.deepEqual(expandSlurmHostList('node[01-03,07]'), ['node01', 'node02', 'node03', 'node07']);
  assert.deepEqual(expandSlurmHostList('gpu5'), ['gpu5']);
  assert.deepEqual(expandSlurmHostList('a[8-10],login,b7'), ['a8', 'a9', 'a10', 'login', 'b7']);
  assert.deepEqual(expandSlurmHostList('n[098-101]'), ['n098', 'n099', 'n100', 'n101']);
  assert.deepEqual(expandSlurmHostList('rack[1-2]-n[1,3]-ib'), ['rack1-n1-ib', 'rack1-n3-ib', 'rack2-n1-ib', 'rack2-n3-ib']);
  assert.deepEqual(expandSlurmHostList('x[3]'), ['x3']);
  assert.throws(
    () => expandSlurmHostList('node[01-03', 'SLURM_JOB_NODELIST'),
    /SLURM_JOB_NODELIST="node\[01-03": '\[' without its '\]'/,
  );
  assert.throws(() => expandSlurmHostList('node01]'), /'\]' at character 7 closes no '\['/);
  assert.throws(() => expandSlurmHostList('node[05-03]'), /the range 05-03 in node\[05-03\] ends before it starts/);
  assert.throws(() => expandSlurmHostList('node[a-b]'), /'a-b' in node\[a-b\] is not a number or a range a-b/);
  assert.throws(() => expandSlurmHostList('a,,b'), /an empty host name at character 3/);
  assert.throws(() => expandSlurmHostList('a[1-[2]]'), /nested '\[' at character 5/);
});

test("Slurm's tasks per node: n(xk) repeats", () => {
  assert.deepEqual(expandSlurmTasksPerNode('2(x3),1'), [2, 2, 2, 1]);
  assert.deepEqual(expandSlurmTasksPerNode('4'), [4]);
  assert.throws(() => expandSlurmTasksPerNode('2(3)'), /SLURM_TASKS_PER_NODE="2\(3\)": '2\(3\)' is not a task count/);
});

test("a Slurm task is a rank: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, its node's task count, the list's first host", () => {
  const task = {
    SLURM_PROCID: '5',
    SLURM_NTASKS: '7',
    SLURM_LOCALID: '1',
    SLURM_NODEID: '2',
    SLURM_TASKS_PER_NODE: '2(x3),1',
    SLURM_JOB_NODELIST: 'node[07-10]',
  };
  assert.deepEqual(distributedLaunchFromEnv(task), {
    rank: 5,
    worldSize: 7,
    localRank: 1,
    localWorldSize: 2,
    masterAddr: 'node07',
    masterPort: 29500,
  });
  // the step's own list and tasks per node come first; MASTER_ADDR / MASTER_PORT when set win
  assert.deepEqual(
    distributedLaunchFromEnv({
      ...task,
      SLURM_STEP_NODELIST: 'gpu[3-4]',
      SLURM_STEP_TASKS_PER_NODE: '3,3,1',
      MASTER_PORT: '1234',
    }),
    { rank: 5, worldSize: 7, localRank: 1, localWorldSize: 1, masterAddr: 'gpu3', masterPort: 1234 },
  );
  assert.equal(distributedLaunchFromEnv({ ...task, MASTER_ADDR: 'head' })?.masterAddr, 'head');
  // a torchrun launch under Slurm (torchrun or trinity run --nnodes inside srun): torchrun's variables win
  assert.deepEqual(distributedLaunchFromEnv({ ...task, RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '0', MASTER_PORT: '99' }), {
    rank: 0,
    worldSize: 2,
    localRank: 0,
    localWorldSize: 1,
    masterAddr: '127.0.0.1',
    masterPort: 99,
  });
  // one task is one process
  assert.equal(distributedLaunchFromEnv({ SLURM_PROCID: '0', SLURM_NTASKS: '1' }), null);
  assert.throws(() => distributedLaunchFromEnv({ ...task, SLURM_PROCID: 'x' }), /SLURM_PROCID="x" is not an integer >= 0/);
  assert.throws(() => distributedLaunchFromEnv({ ...task, SLURM_JOB_NODELIST: 'node[1-' }), /SLURM_JOB_NODELIST="node\[1-"/);
  assert.throws(
    () => distributedLaunchFromEnv({ ...task, SLURM_NODEID: '4' }),
    /SLURM_NODEID=4 but SLURM_TASKS_PER_NODE="2\(x3\),1" lists 4 nodes/,
  );
  const { SLURM_JOB_NODELIST: _, ...noList } = task;
  assert.throws(() => distributedLaunchFromEnv(noList), /Slurm task 5 of 7: neither MASTER_ADDR nor SLURM_STEP_NODELIST/);
  assert.throws(() => distributedLaunchFromEnv({ ...task, SLURM_PROCID: '7' }), /RANK=7 is out of range for WORLD_SIZE=7/);
});

test('launch flags: a plan for several nodes; bad values and combinations name the flag', () => {
  assert.equal(launchPlanFromFlags({}), null);
  assert.equal(launchPlanFromFlags({ 'nproc-per-node': '1' }), null);
  assert.deepEqual(launchPlanFromFlags({ nnodes: '2', 'node-rank': '1', 'master-addr': '10.0.0.1' }, {}), {
    nproc: 1,
    nnodes: 2,
    nodeRank: 1,
    masterAddr: '10.0.0.1',
  });
  assert.deepEqual(
    launchPlanFromFlags({ 'nproc-per-node': '4', nnodes: '3', 'node-rank': '0', 'master-addr': 'n0', 'master-port': '2000' }, {}),
    { nproc: 4, nnodes: 3, nodeRank: 0, masterAddr: 'n0', masterPort: 2000 },
  );
  const refused: [Parameters<typeof launchPlanFromFlags>[0], NodeJS.ProcessEnv, RegExp][] = [
    [{ nnodes: '2', 'master-addr': 'n0' }, {}, /--nnodes 2 needs --node-rank K: this machine's index, 0\.\.1/],
    [{ nnodes: '2', 'node-rank': '0' }, {}, /--nnodes 2 needs --master-addr A: the address of node 0/],
    [
      { nnodes: '2', 'node-rank': '2', 'master-addr': 'n0' },
      {},
      /--node-rank 2 is out of range for --nnodes 2 \(nodes are 0\.\.1\)/,
    ],
    [{ nnodes: '0' }, {}, /--nnodes must be an integer in \[1, 65536\], got '0'/],
    [{ 'node-rank': '-1' }, {}, /--node-rank must be an integer in \[0, 65535\], got '-1'/],
    [
      { nnodes: '2', 'node-rank': '0', 'master-addr': 'n0', 'master-port': '70000' },
      {},
      /--master-port must be an integer in \[1, 65535\]/,
    ],
    [{ nnodes: '2', 'node-rank': '0', 'master-addr': ' ' }, {}, /--master-addr is empty/],
    [{ 'master-addr': 'n0' }, {}, /--master-addr with one rank in all \(--nproc-per-node 1 --nnodes 1\): nothing to launch/],
    [
      { nnodes: '2', 'node-rank': '0', 'master-addr': 'n0' },
      { WORLD_SIZE: '2' },
      /--nnodes, --node-rank, --master-addr start the ranks itself, but this process is already one \(WORLD_SIZE=2\)/,
    ],
  ];
  for (const [flags, env, message] of refused) assert.throws(() => launchPlanFromFlags(flags, env), message);
});

test('--nnodes 2 --node-rank 1 --nproc-per-node 2: this node starts ranks 2 and 3 of 4 with the torchrun variables', async () => {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d) => {
    out += d;
  });
  stderr.on('data', (d) => {
    err += d;
  });
  const names = ['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'MASTER_ADDR', 'MASTER_PORT'];
  const code = await launchRanks({
    nproc: 2,
    nnodes: 2,
    nodeRank: 1,
    masterAddr: '10.9.8.7',
    command: [process.execPath, '-e', `console.log(${JSON.stringify(names)}.map((k) => k + '=' + process.env[k]).join(' '))`],
    env: { PATH: process.env.PATH },
    graceMs: 60_000,
    stdout,
    stderr,
  });
  assert.equal(code, 0, err);
  assert.deepEqual(out.trim().split('\n').sort(), [
    '[rank2]: RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER_ADDR=10.9.8.7 MASTER_PORT=29500',
    '[rank3]: RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER_ADDR=10.9.8.7 MASTER_PORT=29500',
  ]);
  assert.match(err, /\[launcher\] node 1 of 2: starting ranks 2\.\.3 of 4 \(rendezvous at 10\.9\.8\.7:29500\)/);
});

test('trinity run: launch flag misuse is refused before anything runs; --help documents the flags', async () => {
  const { configFile } = makeJob({ totalSteps: 1, saveInterval: 1 });
  const cli = (args: string[]) => runProcess(process.execPath, [trinity, ...args], { env: process.env });
  const missing = await cli(['run', '--config', configFile, '--nnodes', '2', '--master-addr', 'n0']);
  assert.equal(missing.code, 1, missing.output);
  assert.match(missing.output, /run: --nnodes 2 needs --node-rank K/);
  const bench = await cli(['bench', '--config', configFile, '--nnodes', '2']);
  assert.equal(bench.code, 1, bench.output);
  assert.match(bench.output, /bench: --nnodes is for training \(trinity run\)/);
  const help = await cli(['run', '--help']);
  for (const text of ['--nnodes N', '--node-rank K', '--master-addr A', '--master-port P', 'SLURM_PROCID'])
    assert.ok(help.output.includes(text), `--help lacks '${text}':\n${help.output}`);
});
