// A trainer process for the SQL replay crash test (spawned with `node --import tsx`):
//   PATH POLICY_JSON BATCH READS COMMIT_AFTER CHECKPOINT_AFTER
// opens the replay reader 'trainer' over PATH, reads READS batches of BATCH, commits the cursor of read COMMIT_AFTER
// (1-based) right after it, and notes the cursor of read CHECKPOINT_AFTER without committing it (a checkpoint written,
// the process killed before its commit); prints {batches, checkpoint} as one JSON line and dies by SIGKILL.
import { openSharedBuffer } from '../../../src/rft/buffer/shared.js';

const [path, policy, batch, reads, commitAfter, checkpointAfter] = process.argv.slice(2);
if (path === undefined || policy === undefined || checkpointAfter === undefined)
  throw new Error('usage: sql-replay-child.ts PATH POLICY_JSON BATCH READS COMMIT_AFTER CHECKPOINT_AFTER');
const buffer = await openSharedBuffer({ path, readerId: 'trainer', replay: JSON.parse(policy) });
const batches: string[][] = [];
let checkpoint = -1;
for (let i = 1; i <= Number(reads); i++) {
  const { experiences, cursor } = await buffer.readBatch(Number(batch), { timeoutMs: 0, minCount: 0 });
  batches.push(experiences.map((e) => `${e.eid}#${e.info.useCount}`));
  if (i === Number(commitAfter)) await buffer.commit(cursor);
  if (i === Number(checkpointAfter)) checkpoint = cursor;
}
process.stdout.write(`${JSON.stringify({ batches, checkpoint })}\n`);
process.kill(process.pid, 'SIGKILL');
