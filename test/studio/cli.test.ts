// `trinity studio`: the command starts the server over --runs, prints the address to open, and stops on SIGTERM.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { studioCommand } from '../../src/cli/studio-command.js';
import { writeRun } from './fixtures.js';

const trinity = fileURLToPath(new URL('../../bin/trinity.js', import.meta.url));

test('trinity studio --runs DIR --port 0 serves the runs and exits 0 on SIGTERM', async () => {
  const root = mkdtempSync(join(tmpdir(), 'studio-cli-'));
  try {
    await writeRun(root, 'p', 'r', [{ name: 'grpo', steps: 3, done: true }]);
    const child = spawn(process.execPath, [trinity, 'studio', '--runs', root, '--port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const found = /open (http:\/\/127\.0\.0\.1:\d+)\//.exec(out)?.[1];
        if (found) resolve(found);
      });
      child.on('exit', (code) => reject(new Error(`trinity studio exited (${code}) before printing its address: ${out}`)));
    });
    const runs = (await (await fetch(`${url}/api/runs`)).json()) as { id: string; status: string }[];
    assert.deepEqual(
      runs.map((r) => [r.id, r.status]),
      [['p/r', 'finished']],
    );
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('bad options are a usage error naming them; a missing runs folder is an error naming it', async () => {
  const io = { out: '', err: '' };
  const streams = { stdout: { write: (t: string) => (io.out += t) }, stderr: { write: (t: string) => (io.err += t) } };
  assert.equal(await studioCommand(['--port', 'eighty'], streams), 2);
  assert.match(io.err, /--port must be an integer in \[0, 65535\], got 'eighty'/);
  assert.equal(await studioCommand(['--runs', '/no/such/runs', '--port', '0'], streams), 1);
  assert.match(io.err, /runs folder \/no\/such\/runs does not exist/);
  assert.equal(await studioCommand(['--help'], streams), 0);
  assert.match(io.out, /^trinity studio \[--runs DIR\]/);
});
