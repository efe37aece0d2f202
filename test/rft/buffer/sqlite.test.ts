// The durable SQLite buffer: a writer process and a reader process, restart/resume, crash between read and commit.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { BufferTimeoutError, SqliteBuffer } from '../../../src/rft/buffer/index.js';
import { makeExperience, tempDir } from './helpers.js';

const run = promisify(execFile);
const CHILD = join(import.meta.dirname, 'sqlite-child.ts');
// Only stops a hang (a child that never exits, a read that never gets its rows) with an error instead of the test
// timeout: minutes, far beyond any machine's time for these steps, well under the suite's 600 s test timeout. A
// guard kill is SIGTERM, which read-crash tells apart from the SIGKILL the child sends itself.
const HANG_GUARD_MS = 300_000;
const child = (...args: string[]) => run(process.execPath, ['--import', 'tsx', CHILD, ...args], { timeout: HANG_GUARD_MS });
const eids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `e${from + i}`);

describe('SqliteBuffer', () => {
  test('a trainer reads everything an explorer process writes, in order, once (reader started first)', async () => {
    const path = join(tempDir('sqlite'), 'buffer.db');
    const reader = new SqliteBuffer({ path, pollIntervalMs: 5 });
    // 8 chunks of 5, each written when the parent asks (a line on the child's stdin)
    const writer = spawn(process.execPath, ['--import', 'tsx', CHILD, 'write', path, '40', '5'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    writer.stdout.on('data', (d) => {
      output += d;
    });
    writer.stderr.on('data', (d) => {
      output += d;
    });
    const exited = new Promise<number | null>((resolve) => writer.on('exit', (code) => resolve(code)));
    // a writer that dies ends the wait for its rows at once, with its output, rather than at the guard
    const writerDied = exited.then((code) =>
      code === 0 ? new Promise<never>(() => {}) : Promise.reject(new Error(`writer exited with code ${code}:\n${output}`)),
    );
    try {
      const got: string[] = [];
      let chunksAsked = 0;
      for (;;) {
        const ready = reader.size;
        // readBatch looks once before it returns: with fewer than 4 rows it is now waiting, and the chunk asked for
        // next is written by the other process while it waits
        const reading = reader.readBatch(4, { timeoutMs: HANG_GUARD_MS });
        if (ready < 4 && chunksAsked < 8) {
          chunksAsked++;
          writer.stdin.write('next\n');
        }
        const { experiences, cursor } = await Promise.race([reading, writerDied]);
        if (experiences.length === 0) break;
        got.push(...experiences.map((e) => e.eid));
        reader.commit(cursor);
      }
      writer.stdin.end();
      assert.equal(await exited, 0, `writer:\n${output}`);
      assert.deepEqual(got, eids(40), 'no loss, no duplicates, write order');
      assert.equal(reader.total, 40, 'duplicate eids were ignored');
    } finally {
      writer.stdin.end(); // on a failure: a writer still waiting for a chunk exits (stdin closed)
      await reader.close(); // a read still waiting (the writer died) rejects at its next look instead of at the guard
    }
  });

  test('a restarted reader resumes after its last commit; a kill -9 between read and commit re-delivers the batch', async () => {
    const path = join(tempDir('sqlite'), 'buffer.db');
    const writer = new SqliteBuffer({ path });
    assert.equal(await writer.write(eids(12).map((eid) => makeExperience(eid))), 12);
    assert.equal(await writer.write([makeExperience('e0')]), 0, 'duplicate ignored');
    await writer.finishWriting();

    const { stdout } = await child('read-crash', path, '3').catch((error: { stdout: string; signal: string }) => {
      assert.equal(error.signal, 'SIGKILL');
      return error;
    });
    assert.deepEqual(JSON.parse(stdout), ['e3', 'e4', 'e5'], 'the child saw the second batch');

    const trainer = new SqliteBuffer({ path });
    assert.equal(trainer.committedPosition, 3);
    const again = await trainer.readBatch(3, { timeoutMs: 1000 });
    assert.deepEqual(
      again.experiences.map((e) => e.eid),
      ['e3', 'e4', 'e5'],
      'the uncommitted batch comes again',
    );
    trainer.commit(again.cursor);
    const next = await trainer.read(3, { timeoutMs: 1000 });
    assert.deepEqual(
      next.map((e) => e.eid),
      ['e6', 'e7', 'e8'],
    );
    trainer.commit();
    await trainer.close();

    const restarted = new SqliteBuffer({ path });
    const rest = await restarted.read(10, { timeoutMs: 1000 });
    assert.deepEqual(
      rest.map((e) => e.eid),
      ['e9', 'e10', 'e11'],
      'clean restart continues after the commit; finished writer gives a short batch',
    );
    assert.deepEqual(rest[0], makeExperience('e9'), 'stored as JSON, read back equal');
    restarted.rewind();
    assert.equal((await restarted.read(3, { timeoutMs: 1000 })).length, 3, 'rewind goes back to the commit');
    await restarted.close();
  });

  test('readers wait with a timeout naming the buffer; readers have separate cursors; writes reopen a finished buffer', async () => {
    const path = join(tempDir('sqlite'), 'buffer.db');
    const buffer = new SqliteBuffer({ path, name: 'exp-db', pollIntervalMs: 5 });
    await buffer.write([makeExperience('a')]);
    await assert.rejects(buffer.read(2, { timeoutMs: 40 }), (error: unknown) => {
      assert.ok(error instanceof BufferTimeoutError);
      assert.match(
        error.message,
        /buffer 'exp-db': timed out after 40 ms waiting for 2 experiences from .*buffer\.db for reader 'trainer'/,
      );
      return true;
    });
    assert.equal((await buffer.read(2, { timeoutMs: 20, minCount: 1 })).length, 1);
    const other = new SqliteBuffer({ path, readerId: 'eval' });
    assert.equal(other.size, 1, 'another reader id has its own position');
    await buffer.finishWriting();
    assert.deepEqual(await buffer.read(2, { timeoutMs: 1000 }), []);
    await other.write([makeExperience('b')]);
    // read() looks once before it returns (1 of 2 rows): it waits, and sees the row another instance writes next
    const waiting = buffer.read(2, { timeoutMs: HANG_GUARD_MS });
    assert.equal(await other.write([makeExperience('c')]), 1);
    assert.deepEqual(
      (await waiting).map((e) => e.eid),
      ['b', 'c'],
    );
    assert.throws(() => buffer.commit(99), /commit cursor 99/);
    await buffer.close();
    await other.close();
  });
});
