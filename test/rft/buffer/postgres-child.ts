// A second process for the shared-buffer tests (spawned with `node --import tsx`), on either backend (the path is
// a PostgreSQL URL or an SQLite file: openSharedBuffer chooses):
//   write PATH COUNT CHUNK [PREFIX]   explorer: for each line on stdin writes the next CHUNK of COUNT experiences
//                                     (each chunk twice: duplicates must be ignored) and prints "wrote N"; after the
//                                     last chunk, finishWriting()
//   write-all PATH COUNT CHUNK PREFIX writer: writes COUNT experiences PREFIX0.. in chunks at once (each chunk
//                                     twice), no finishWriting (several of these run together)
//   read-crash PATH BATCH             trainer: reads and commits one batch, reads a second, prints its eids as a
//                                     JSON line, then dies by SIGKILL before committing it
import { createInterface } from 'node:readline';
import { openSharedBuffer } from '../../../src/rft/buffer/shared.js';
import { makeExperience } from './helpers.js';

const [role, path, ...rest] = process.argv.slice(2);
if (path === undefined) throw new Error('usage: postgres-child.ts write|write-all|read-crash PATH ...');
const buffer = await openSharedBuffer({ path });

if (role === 'write') {
  const [count, chunk] = rest.map(Number) as [number, number];
  const input = createInterface({ input: process.stdin });
  const asked = input[Symbol.asyncIterator]();
  for (let start = 0; start < count; start += chunk) {
    if ((await asked.next()).done) throw new Error(`stdin closed after ${start} of ${count} experiences`);
    const experiences = Array.from({ length: Math.min(chunk, count - start) }, (_, i) => makeExperience(`e${start + i}`));
    await buffer.write(experiences);
    await buffer.write(experiences.slice(0, 1));
    process.stdout.write(`wrote ${start + experiences.length}\n`);
  }
  input.close();
  await buffer.finishWriting();
} else if (role === 'write-all') {
  const [count, chunk] = rest.map(Number) as [number, number];
  const prefix = rest[2] ?? 'e';
  let inserted = 0;
  for (let start = 0; start < count; start += chunk) {
    const experiences = Array.from({ length: Math.min(chunk, count - start) }, (_, i) => makeExperience(`${prefix}${start + i}`));
    inserted += await buffer.write(experiences);
    inserted += await buffer.write(experiences.slice(0, 2));
  }
  process.stdout.write(`${JSON.stringify({ inserted })}\n`);
} else if (role === 'read-crash') {
  const n = Number(rest[0]);
  const first = await buffer.readBatch(n, { timeoutMs: 5000 });
  await buffer.commit(first.cursor);
  const second = await buffer.readBatch(n, { timeoutMs: 5000 });
  process.stdout.write(`${JSON.stringify(second.experiences.map((e) => e.eid))}\n`);
  process.kill(process.pid, 'SIGKILL');
} else {
  throw new Error(`unknown role '${role}'`);
}
await buffer.close();
