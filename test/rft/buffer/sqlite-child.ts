// A second process for the SQLite buffer tests (spawned with `node --import tsx`):
//   write PATH COUNT CHUNK DELAY_MS   explorer: writes COUNT experiences in chunks (each chunk twice: duplicates
//                                     must be ignored), sleeping between chunks, then finishWriting()
//   read-crash PATH BATCH             trainer: reads and commits one batch, reads a second, prints its eids as a
//                                     JSON line, then dies by SIGKILL before committing it
import { SqliteBuffer } from '../../../src/rft/buffer/sqlite.js';
import { makeExperience } from './helpers.js';

const [role, path, ...rest] = process.argv.slice(2);
if (path === undefined) throw new Error('usage: sqlite-child.ts write|read-crash PATH ...');
const buffer = new SqliteBuffer({ path, pollIntervalMs: 5 });

if (role === 'write') {
  const [count, chunk, delayMs] = rest.map(Number) as [number, number, number];
  for (let start = 0; start < count; start += chunk) {
    const experiences = Array.from({ length: Math.min(chunk, count - start) }, (_, i) => makeExperience(`e${start + i}`));
    await buffer.write(experiences);
    await buffer.write(experiences.slice(0, 1));
    await new Promise((r) => setTimeout(r, delayMs));
  }
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
