// Weight sync through the PostgreSQL buffer's database between real processes: a trainer process (mode train) and
// explorer processes (mode explore) that run in folders of their own, with job folders of their own
// (checkpoint_root_dir), as on other machines. The only thing they share with the trainer besides the database is the
// path of the trainer's weights folders. Nothing of the sync protocol is a file: the trainer's sync folder holds only
// version_<N>/ folders, and the explorers' job folders have no sync folder at all.
//
// 1. sync_style explorer_driven, 2 explorers (a, b) with save_input: every explore step after the first asks the
//    trainer for weights through the database and gets an answer (counted in the sync row); each explorer's raw input
//    is in a file of its own name, holding exactly the steps it explored.
// 2. sync_style fixed, one explorer, a trainer that stops after step 1: the explorer loads weights version 1 from the
//    database's pointer for step 2, and the trainer's finished marker stops its wait for version 2 (step 3) with an
//    error naming the database.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

let server: PostgresServer;
const children: ChildProcess[] = [];
before(async () => {
  server = await startPostgres();
});
after(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await server?.stop();
});

interface Exit {
  code: number | null;
  output: string;
}

/** `trinity run` in `cwd` with the test's overrides; resolves when it exits. */
function run(configFile: string, cwd: string, sets: string[]): Promise<Exit> {
  const args = [trinity, 'run', '--config', configFile, ...sets.flatMap((s) => ['--set', s])];
  const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let output = '';
  child.stdout?.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    output += chunk;
  });
  // a failure guard only: a hung process fails the test instead of hanging it
  const guard = setTimeout(() => child.kill('SIGKILL'), 400_000);
  return new Promise((resolve) => {
    child.on('exit', (code) => {
      clearTimeout(guard);
      resolve({ code, output });
    });
  });
}

/** All of `runs`; the first to fail stops the others (they would wait for it until their sync timeout). */
async function allSucceed<T extends Promise<Exit>[]>(runs: [...T]): Promise<{ [K in keyof T]: Exit }> {
  const started = children.slice(-runs.length);
  return Promise.all(
    runs.map((r) =>
      r.then((exit) => {
        if (exit.code !== 0) for (const child of started) if (child.exitCode === null) child.kill('SIGKILL');
        return exit;
      }),
    ),
  ) as Promise<{ [K in keyof T]: Exit }>;
}

/** An explorer's own folder (its working directory and checkpoint_root_dir): not the trainer's job folder. */
function explorerHome(root: string, name: string): string {
  const home = join(root, `machine-${name}`);
  mkdirSync(home, { recursive: true });
  return home;
}

const jsonl = <T>(file: string): T[] =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as T);

/** The sync row of the buffer whose table is `table` (the sync table is `<table>_sync`). */
async function syncRow(url: string, table: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{
      version: number;
      dir: string;
      requested: string;
      answered: string;
      finished_step: number | null;
    }>(`SELECT version, dir, requested, answered, finished_step FROM ${table}_sync`);
    return rows;
  } finally {
    await client.end();
  }
}

/** The trainer's sync folder holds weights folders only: no pointer, request or finished files. */
function assertOnlyWeightFolders(jobDir: string): void {
  const names = readdirSync(join(jobDir, 'sync'));
  assert.ok(names.length > 0, 'the trainer wrote weights');
  assert.deepEqual(
    names.filter((n) => !/^version_\d+$/.test(n)),
    [],
    `only version folders in ${join(jobDir, 'sync')}`,
  );
}

test('explorer_driven across processes: requests and answers through the database, no sync files; save_input per explorer', {
  timeout: 600_000,
}, async () => {
  const url = await server.createDatabase('driven');
  const TOTAL_STEPS = 4;
  const { root, configFile, jobDir } = makeJob({
    totalSteps: TOTAL_STEPS,
    saveInterval: TOTAL_STEPS,
    extra: 'synchronizer:\n  sync_style: explorer_driven\n  sync_interval: 1\n  sync_timeout: 300\n',
  });
  // the explorers' config adds the experience pipeline (refused in mode train: it explores nothing)
  const rawSpec = join(root, 'raw.jsonl');
  const explorerConfig = join(root, 'explore.yaml');
  writeFileSync(
    explorerConfig,
    `${readFileSync(configFile, 'utf8')}data_processor:\n  experience_pipeline:\n    save_input: true\n    input_save_path: ${rawSpec}\n`,
  );
  const shared = [
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    `buffer.trainer_input.experience_buffer.path=${url}`,
    // a named buffer: the sync row follows its table (PostgreSQL folds the name to lower case)
    'buffer.trainer_input.experience_buffer.name=DrivenRun',
    'buffer.train_batch_size=8',
  ];
  const homes = { a: explorerHome(root, 'a'), b: explorerHome(root, 'b') };
  const explorer = (name: 'a' | 'b') =>
    run(explorerConfig, homes[name], ['mode=explore', `explorer.name=${name}`, `checkpoint_root_dir=${homes[name]}`, ...shared]);
  const [t, a, b] = await allSucceed([run(configFile, root, ['mode=train', ...shared]), explorer('a'), explorer('b')]);
  assert.equal(t.code, 0, `trainer:\n${t.output}`);
  assert.equal(a.code, 0, `explorer a:\n${a.output}`);
  assert.equal(b.code, 0, `explorer b:\n${b.output}`);

  // explore steps 2..4 each asked once (sync_interval 1, offset 0), and the trainer answered every request
  const rows = await syncRow(url, 'drivenrun');
  assert.equal(rows.length, 1);
  const row = rows[0] as (typeof rows)[number];
  assert.equal(Number(row.requested), TOTAL_STEPS - 1, 'one request per explore step after the first');
  assert.equal(Number(row.answered), Number(row.requested), 'every request answered');
  assert.equal(row.finished_step, TOTAL_STEPS);
  assert.deepEqual([row.version, row.dir], [TOTAL_STEPS, join(jobDir, 'sync', `version_${TOTAL_STEPS}`)]);
  assertOnlyWeightFolders(jobDir);

  // the explorers never had a sync folder; their metrics are in their own job folders; together every step once
  const explored: Record<string, number[]> = {};
  for (const name of ['a', 'b'] as const) {
    const ownJob = join(homes[name], 'test', 'e2e');
    assert.equal(existsSync(join(ownJob, 'sync')), false, `explorer ${name} made no sync folder`);
    assert.equal(existsSync(join(homes[name], 'sync')), false);
    const metricsFile = join(ownJob, name, 'metrics.jsonl');
    explored[name] = existsSync(metricsFile) ? jsonl<{ step: number }>(metricsFile).map((m) => m.step) : [];
  }
  assert.deepEqual(
    [...(explored.a ?? []), ...(explored.b ?? [])].sort((x, y) => x - y),
    [1, 2, 3, 4],
  );

  // save_input: one file per explorer, with exactly the steps it explored (2 tasks × 4 repeats each); none shared
  assert.equal(existsSync(rawSpec), false, 'no explorer wrote the shared file');
  for (const name of ['a', 'b'] as const) {
    const file = join(root, `raw.${name}.jsonl`);
    const steps = existsSync(file) ? jsonl<{ info: { step: number } }>(file).map((e) => e.info.step) : [];
    const mine = explored[name] ?? [];
    assert.deepEqual([...new Set(steps)].sort(), [...mine].sort(), `raw.${name}.jsonl holds explorer ${name}'s steps`);
    assert.equal(steps.length, mine.length * 8);
  }
});

test("weights through the database's pointer, and the trainer's finished marker reaches a waiting explorer", {
  timeout: 600_000,
}, async () => {
  const url = await server.createDatabase('finished');
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 3,
    saveInterval: 3,
    extra: 'synchronizer:\n  sync_interval: 1\n  sync_timeout: 300\n',
  });
  const shared = [
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    `buffer.trainer_input.experience_buffer.path=${url}`,
    'buffer.train_batch_size=8',
  ];
  const home = explorerHome(root, 'solo');
  const [t, e] = await Promise.all([
    // the trainer stops after step 1 (its last: it publishes version 1 and marks itself finished)
    run(configFile, root, ['mode=train', 'buffer.total_steps=1', ...shared]),
    run(configFile, home, ['mode=explore', 'explorer.name=solo', `checkpoint_root_dir=${home}`, ...shared]),
  ]);
  assert.equal(t.code, 0, `trainer:\n${t.output}`);
  assert.notEqual(e.code, 0, `the explorer cannot get version 2:\n${e.output}`);
  assert.match(
    e.output,
    /the trainer process finished \(its last step 1, in postgresql:\/\/trinity@127\.0\.0\.1:\d+\/finished table experience_buffer_sync\) without publishing weights version 2 for explore step 3/,
  );
  // step 2 was explored with version 1, loaded from the folder the database pointed at
  const metrics = jsonl<{ step: number; 'explorer/model_version'?: number }>(join(home, 'test', 'e2e', 'solo', 'metrics.jsonl'));
  assert.deepEqual(
    metrics.map((m) => [m.step, m['explorer/model_version']]),
    [
      [1, 0],
      [2, 1],
    ],
  );
  // the default buffer name (experience_buffer) names the sync table
  const [row] = await syncRow(url, 'experience_buffer');
  assert.deepEqual([row?.version, row?.dir, row?.finished_step], [1, join(jobDir, 'sync', 'version_1'), 1]);
  assertOnlyWeightFolders(jobDir);
  assert.equal(existsSync(join(home, 'test', 'e2e', 'sync')), false, 'the explorer made no sync folder');
});
