// The shared experience buffer on PostgreSQL next to SQLite: experiences written and read per second, with 1 and 4
// writer processes: `node --import tsx bench/buffer.bench.ts [--total 4000] [--batch 32] [--url postgresql://...]`
// (npm run bench:buffer).
//
// Each configuration gets a fresh buffer (a new SQLite file, a new PostgreSQL database). Writers are forked processes
// (an explorer each) that open the buffer, report ready, and on "go" write their share of --total experiences in
// batches of --batch (one transaction each, as one explore step writes); write throughput = total / (time from "go"
// to the last writer's end). Then one reader (a trainer) reads everything back in batches of --batch, committing its
// cursor after each: read throughput = total / time. An experience holds 512 tokens (128 prompt, 384 response) and
// 384 logprobs, about 4 KB of JSON. Without --url a PostgreSQL 15 server is started in a temporary folder
// (test/helpers/postgres.ts: fsync off, so both backends skip the disk flush: SQLite runs WAL with synchronous =
// NORMAL). Prints the machine, a table, then one JSON line.
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { openSharedBuffer } from '../src/rft/buffer/shared.js';
import type { Experience } from '../src/rft/experience.js';
import { type PostgresServer, startPostgres } from '../test/helpers/postgres.js';
import { fmt, now, r2, secondsSince, table } from './harness.js';

const SCRIPT = fileURLToPath(import.meta.url);

function experience(eid: string): Experience {
  const tokens = Array.from({ length: 512 }, (_, i) => (i * 7919 + eid.length) % 151_000);
  return {
    eid,
    tokens,
    promptLength: 128,
    logprobs: Array.from({ length: 384 }, (_, i) => -((i % 17) + 0.123456789) / 7),
    reward: 1,
    info: { taskId: `task-${eid}`, modelVersion: 0, useCount: 0 },
  };
}

type ToWriter = { go: true };
type FromWriter = { ready: true } | { done: true; inserted: number } | { error: string };

/** A writer process: opens the buffer, waits for "go", writes its share, reports. */
async function writerMain(path: string, prefix: string, count: number, batch: number): Promise<void> {
  const send = (m: FromWriter) => process.send?.(m);
  try {
    const buffer = await openSharedBuffer({ path });
    const batches: Experience[][] = [];
    for (let start = 0; start < count; start += batch)
      batches.push(Array.from({ length: Math.min(batch, count - start) }, (_, i) => experience(`${prefix}-${start + i}`)));
    await new Promise<void>((resolve) => {
      process.once('message', (m: ToWriter) => {
        if (m.go) resolve();
      });
      send({ ready: true });
    });
    let inserted = 0;
    for (const b of batches) inserted += await buffer.write(b);
    await buffer.close();
    send({ done: true, inserted });
  } catch (error) {
    send({ error: (error as Error).stack ?? String(error) });
  }
  process.disconnect?.();
}

interface Result {
  backend: 'sqlite' | 'postgresql';
  writers: number;
  total: number;
  writePerS: number;
  readPerS: number;
}

async function measure(backend: Result['backend'], path: string, writers: number, total: number, batch: number) {
  // the tables exist before the writers race for them
  const reader = await openSharedBuffer({ path });
  const children: ChildProcess[] = [];
  try {
    const share = Math.ceil(total / writers);
    const messages = Array.from({ length: writers }, (_, w) => {
      const child = fork(SCRIPT, ['--role', 'writer', path, `w${w}`, String(Math.min(share, total - w * share)), String(batch)], {
        execArgv: ['--import', 'tsx'],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      children.push(child);
      const next = (want: 'ready' | 'done') =>
        new Promise<FromWriter>((resolve, reject) => {
          const onMessage = (m: FromWriter) => {
            if ('error' in m) reject(new Error(`writer ${w}: ${m.error}`));
            else if (want in m) {
              child.off('message', onMessage);
              resolve(m);
            }
          };
          child.on('message', onMessage);
          child.once('exit', (code) => reject(new Error(`writer ${w} exited (code ${code}) before '${want}'`)));
        });
      return { child, ready: next('ready'), done: next('done') };
    });
    await Promise.all(messages.map((m) => m.ready));
    const t0 = now();
    for (const m of messages) m.child.send({ go: true } satisfies ToWriter);
    const done = await Promise.all(messages.map((m) => m.done));
    const writeS = secondsSince(t0);
    const inserted = done.reduce((s, m) => s + ('inserted' in m ? m.inserted : 0), 0);
    if (inserted !== total) throw new Error(`${backend}: ${inserted} of ${total} experiences inserted`);

    const t1 = now();
    let read = 0;
    for (;;) {
      const got = await reader.readBatch(batch, { timeoutMs: 0, minCount: 0 });
      if (got.experiences.length === 0) break;
      read += got.experiences.length;
      await reader.commit(got.cursor);
    }
    const readS = secondsSince(t1);
    if (read !== total) throw new Error(`${backend}: read ${read} of ${total} experiences`);
    return { backend, writers, total, writePerS: total / writeS, readPerS: total / readS } satisfies Result;
  } finally {
    await reader.close();
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

async function main(): Promise<void> {
  const { values: flags, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      role: { type: 'string' },
      total: { type: 'string', default: '4000' },
      batch: { type: 'string', default: '32' },
      url: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (flags.role === 'writer') {
    const [path, prefix, count, batch] = positionals as [string, string, string, string];
    return writerMain(path, prefix, Number(count), Number(batch));
  }
  if (flags.help) {
    console.log(`PostgreSQL vs SQLite shared buffer: experiences written and read per second, 1 and 4 writers.
  --total N      experiences per configuration (default 4000), split between the writers
  --batch N      experiences per write transaction and per read (default 32)
  --url URL      an existing PostgreSQL server (postgresql://user:pass@host:port/db; needs CREATEDB); default: a
                 temporary local server`);
    return;
  }
  const total = Number(flags.total);
  const batch = Number(flags.batch);
  if (!Number.isInteger(total) || total < 4) throw new Error(`--total must be an integer >= 4, got ${flags.total}`);
  if (!Number.isInteger(batch) || batch < 1) throw new Error(`--batch must be an integer >= 1, got ${flags.batch}`);

  const server: PostgresServer | null = flags.url === undefined ? await startPostgres() : null;
  const adminUrl = flags.url ?? (server as PostgresServer).url();
  const dir = mkdtempSync(join(os.tmpdir(), 'trinity-buffer-bench-'));
  const results: Result[] = [];
  let databases = 0;
  const freshPostgres = async (): Promise<string> => {
    const name = `trinity_buffer_bench_${process.pid}_${++databases}`;
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${name}`);
    } finally {
      await admin.end();
    }
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    return url.toString();
  };
  try {
    for (const writers of [1, 4]) {
      results.push(await measure('sqlite', join(dir, `w${writers}.db`), writers, total, batch));
      results.push(await measure('postgresql', await freshPostgres(), writers, total, batch));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server?.stop();
  }
  console.log(
    `buffer bench: ${total} experiences (512 tokens, 384 logprobs each) per row, batches of ${batch}; ` +
      `${os.cpus()[0]?.model ?? 'cpu'} (${os.cpus().length} cores), load avg ${os.loadavg()[0]?.toFixed(2)}; ` +
      `PostgreSQL ${flags.url === undefined ? 'local temporary server (fsync off)' : 'at --url'}, SQLite WAL (synchronous NORMAL)`,
  );
  const pick = (backend: Result['backend'], writers: number) =>
    results.find((r) => r.backend === backend && r.writers === writers) as Result;
  table(
    'experiences per second (write: all writers together, from go to the last commit; read: one reader, commit per batch)',
    ['writers', 'sqlite write/s', 'postgres write/s', 'pg/sqlite', 'sqlite read/s', 'postgres read/s', 'pg/sqlite'],
    [1, 4].map((w) => {
      const s = pick('sqlite', w);
      const p = pick('postgresql', w);
      return [
        String(w),
        fmt(s.writePerS, 0),
        fmt(p.writePerS, 0),
        fmt(p.writePerS / s.writePerS),
        fmt(s.readPerS, 0),
        fmt(p.readPerS, 0),
        fmt(p.readPerS / s.readPerS),
      ];
    }),
  );
  console.log(
    JSON.stringify({
      bench: 'buffer',
      total,
      batch,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      results: results.map((r) => ({ ...r, writePerS: r2(r.writePerS), readPerS: r2(r.readPerS) })),
    }),
  );
}

await main();
