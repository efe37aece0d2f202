// An external rollout pool of two real `trinity serve` processes (explorer.rollout_model.engine_type openai with a
// list of base_url) under a GRPO run (mode both, weights by checkpoint reload). When server A logs that it reloaded
// weights version 1, the test kills it with SIGKILL. The run must finish every step on server B: A leaves the pool
// (the run's log says so), B reloads every version the trainer published, A exactly those it got while it was up.
// Nothing waits on time: the kill follows A's own log line, and the servers announce their URLs on stdout.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { NoRolloutServerError } from '../../../src/openai/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

interface Server {
  child: ChildProcess;
  baseURL: string;
  /** Its stderr lines so far. */
  lines: string[];
  /** Calls `fn` on every stderr line from now on. */
  onLine(fn: (line: string) => void): void;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const servers: Server[] = [];
after(() => {
  for (const s of servers) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
});

/** Starts `trinity serve` on a free port; resolves once it prints the URL it serves at. */
function startServer(modelDir: string, reloadRoot: string, label: string): Promise<Server> {
  const child = spawn(
    process.execPath,
    [
      trinity,
      'serve',
      '--model',
      modelDir,
      '--port',
      '0',
      '--model-name',
      'tiny',
      '--allow-reload-from',
      reloadRoot,
      '--slots',
      '8',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TRINITY_API_KEY: undefined } },
  );
  const lines: string[] = [];
  const listeners: ((line: string) => void)[] = [];
  createInterface({ input: child.stderr as NodeJS.ReadableStream }).on('line', (line) => {
    lines.push(line);
    for (const fn of listeners) fn(line);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      const match = /^serving 'tiny' at (http\S+\/v1)/.exec(line);
      if (!match) return;
      const server: Server = { child, baseURL: match[1] as string, lines, onLine: (fn) => listeners.push(fn), exited };
      servers.push(server);
      resolve(server);
    });
    void exited.then(({ code, signal }) =>
      reject(new Error(`server ${label} exited (code ${code}, signal ${signal}) before serving:\n${lines.join('\n')}`)),
    );
  });
}

/** The weights versions a server's log says it reloaded, in order. */
function reloadedVersions(server: Server): number[] {
  return server.lines.flatMap((line) => {
    const match = /^reloaded weights from \S*version_(\d+) /.exec(line);
    return match ? [Number(match[1])] : [];
  });
}

test('a pool of two trinity serve processes: one is killed mid-run, the run finishes on the other', {
  timeout: 300_000,
}, async () => {
  const steps = 4;
  const { root, configFile, jobDir } = makeJob({ totalSteps: steps, saveInterval: 100 });
  const modelDir = join(root, 'model');
  const [a, b] = await Promise.all([startServer(modelDir, root, 'A'), startServer(modelDir, root, 'B')]);
  writeFileSync(
    configFile,
    readFileSync(configFile, 'utf8').replace(
      '  rollout_model:\n    slots: 8\n',
      `  rollout_model:\n    engine_type: openai\n    model_name: tiny\n    base_url: [${a.baseURL}, ${b.baseURL}]\n`,
    ),
  );
  const config = loadConfig(configFile, { resolveAlgorithm });
  assert.deepEqual(config.explorer.rollout_model.base_url, [a.baseURL, b.baseURL]);
  assert.equal(config.synchronizer.sync_method, 'checkpoint');

  // SIGKILL A as soon as it has reloaded version 1 (the trainer's first published weights)
  let killedAfter: number[] | null = null;
  a.onLine((line) => {
    if (killedAfter === null && /^reloaded weights from \S*version_1 /.test(line)) {
      killedAfter = reloadedVersions(a);
      a.child.kill('SIGKILL');
    }
  });
  // the run's progress lines (the pool's departures among them) go to stderr: keep a copy
  const log: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
    log.push(String(chunk));
    return write(chunk, ...rest);
  }) as typeof process.stderr.write;
  let result: Awaited<ReturnType<typeof runConfig>>;
  try {
    result = await runConfig(config, { log: (line) => log.push(line) });
  } finally {
    process.stderr.write = write;
  }
  assert.ok(result.finalModelDir, 'the run finished');

  assert.equal((await a.exited).signal, 'SIGKILL', 'server A was killed');
  assert.deepEqual(killedAfter, [1], 'A was killed right after it reloaded version 1');
  assert.ok(
    log.some((line) => line.includes(`rollout server ${a.baseURL} left the pool`)),
    `the run's log says A left the pool:\n${log.join('\n')}`,
  );
  // every step explored and trained, with the weights of the version before it (sync every step)
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  assert.deepEqual(
    metrics.map((m) => m['explorer/model_version']),
    [0, 1, 2, 3],
  );
  // steps 2..4 sampled after A died: from B, the only server left. B reloaded every published version; A the one it
  // was up for
  // the trainer publishes after each of its steps (sync_interval 1), the last one included
  assert.deepEqual(reloadedVersions(b), [1, 2, 3, 4], 'B reloaded every version');
  assert.deepEqual(reloadedVersions(a), [1], 'A reloaded the version published while it was up');
  assert.ok(b.child.exitCode === null && b.child.signalCode === null, 'B is still serving');
});

test('when every server of the pool is gone the run stops with NoRolloutServerError', { timeout: 300_000 }, async () => {
  const { root, configFile } = makeJob({ totalSteps: 4, saveInterval: 100 });
  const modelDir = join(root, 'model');
  const [a, b] = await Promise.all([startServer(modelDir, root, 'A'), startServer(modelDir, root, 'B')]);
  // max_timeout 10: the pool waits that long (the longest a workflow attempt may take) for a server to come back
  writeFileSync(
    configFile,
    readFileSync(configFile, 'utf8').replace(
      '  rollout_model:\n    slots: 8\n',
      `  max_timeout: 10\n  rollout_model:\n    engine_type: openai\n    model_name: tiny\n    base_url: [${a.baseURL}, ${b.baseURL}]\n`,
    ),
  );
  // both die once both have reloaded version 1
  const reloaded = new Set<Server>();
  for (const server of [a, b])
    server.onLine((line) => {
      if (!/^reloaded weights from \S*version_1 /.test(line)) return;
      reloaded.add(server);
      if (reloaded.size === 2) for (const s of [a, b]) s.child.kill('SIGKILL');
    });
  await assert.rejects(runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: () => {} }), (error: Error) => {
    assert.ok(error instanceof NoRolloutServerError, `${error.name}: ${error.message}`);
    assert.match(error.message, /no rollout server has answered for 10000 ms/);
    assert.ok(error.message.includes(a.baseURL) && error.message.includes(b.baseURL), error.message);
    return true;
  });
  assert.equal((await a.exited).signal, 'SIGKILL');
  assert.equal((await b.exited).signal, 'SIGKILL');
});
