// A second process for the SQLite buffer tests (spawned with `node --import tsx`):
//   write PATH COUNT CHUNK            explorer: for each line on stdin writes the next CHUNK of COUNT experiences
//                                     (each chunk twice: duplicates must be ignored) and prints "wrote N"; after the
//                                     last chunk, finishWriting()
//   read-crash PATH BATCH             trainer: reads and commits one batch, reads a second, prints its eids as a
//                                     JSON line, then dies by SIGKILL before committing it
import { createInterface } from 'node:readline';
import { SqliteBuffer } from '../../../src/rft/buffer/sqlite.js';
import { makeExperience } from './helpers.js';

const [role, path, ...rest] = process.argv.slice(2);
if (path === undefined) throw new Error('usage: sqlite-child.ts write|read-crash PATH ...');
const buffer = new SqliteBuffer({ path, pollIntervalMs: 5 });

if (role === 'write') {
  const [count, chunk] = rest.map(Number) as [number, number];
  // the parent asks for each chunk when its reader is waiting, so every chunk lands during a read
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
  await buffer.close();
} else if (role === 'read-crash') {
  const n = Number(rest[0]);
  const first = await buffer.readBatch(n, { timeoutMs: 5000 });
  buffer.commit(first.cursor);
  const second = await buffer.readBatch(n, { timeoutMs: 5000 });
  process.stdout.write(`${JSON.stringify(second.experiences.map((e) => e.eid))}\n`);
  process.kill(process.pid, 'SIGKILL');
} else {
  throw new Error(`unknown role '${role}'`);
}
