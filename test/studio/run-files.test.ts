// What the Studio does with run files that are not as a run writes them: a metrics.jsonl too large to read (a sparse
// 4 GiB file: costs no disk), a corrupt experience database, and a run_status.json whose pid now belongs to another
// process. Each is an answer about that run; the Studio keeps serving the others.
import assert from 'node:assert/strict';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { writeRunStatus } from '../../src/rft/run/run-status.js';
import { processStartTime } from '../../src/util/index.js';
import { type StudioServer, startStudio } from '../../src/studio/index.js';
import { RunIndex } from '../../src/studio/runs.js';
import { writeRun } from './fixtures.js';

let root: string;
let studio: StudioServer;

before(async () => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'studio-run-files-')));
  await writeRun(root, 'p', 'good', [{ name: 'grpo', steps: 3 }]);
  const huge = await writeRun(root, 'p', 'huge', [{ name: 'grpo', steps: 1 }]);
  truncateSync(join(huge, 'grpo', 'metrics.jsonl'), 4 * 1024 ** 3);
  const corrupt = await writeRun(root, 'p', 'corrupt', [{ name: 'grpo', steps: 2 }]);
  writeFileSync(
    join(corrupt, 'grpo', 'buffer.db'),
    'this is not an SQLite database, just text that claims the name\n'.repeat(64),
  );
  studio = await startStudio({ runsDir: root, port: 0 });
});

after(async () => {
  await studio?.close();
  rmSync(root, { recursive: true, force: true });
});

async function get(path: string): Promise<{ status: number; body: unknown; text: string }> {
  const response = await fetch(`${studio.url}${path}`);
  const text = await response.text();
  return { status: response.status, body: JSON.parse(text) as unknown, text };
}

describe('a metrics.jsonl of 4 GiB (sparse)', () => {
  it('the runs list names the error on that run and lists the others', async () => {
    const before = process.memoryUsage().rss;
    const answer = await get('/api/runs');
    assert.equal(answer.status, 200, answer.text);
    const runs = answer.body as { id: string; error?: string; stages: unknown[] }[];
    const huge = runs.find((r) => r.id === 'p/huge');
    assert.match(huge?.error ?? '', /p\/huge\/grpo\/metrics\.jsonl is 4\.0 GiB, over the 512\.0 MiB a run file may have/);
    assert.equal(runs.find((r) => r.id === 'p/good')?.stages.length, 1);
    // the file was not read (a read of it would hold gigabytes)
    assert.ok(process.memoryUsage().rss - before < 256 * 1024 ** 2);
  });

  it('the run itself answers 413 naming the file', async () => {
    const answer = await get('/api/runs/p%2Fhuge');
    assert.equal(answer.status, 413, answer.text);
    assert.match(answer.text, /metrics\.jsonl is 4\.0 GiB/);
  });
});

describe('a corrupt buffer.db', () => {
  it("the run's sources and its rollouts answer 422 naming the file, not 500", async () => {
    const sources = await get('/api/runs/p%2Fcorrupt/sources');
    assert.equal(sources.status, 422, sources.text);
    assert.match(sources.text, /p\/corrupt\/grpo\/buffer\.db is not a readable SQLite database \(SQLITE_NOTADB/);
    const rollouts = await get(`/api/rollouts?file=${encodeURIComponent('p/corrupt/grpo/buffer.db')}`);
    assert.equal(rollouts.status, 422, rollouts.text);
    assert.equal((await get('/api/runs/p%2Fgood')).status, 200);
  });
});

describe('run_status.json of a running run and pid reuse', () => {
  it("is running while the pid's start time is the recorded one; failed when the pid is another process's", async () => {
    const jobDir = await writeRun(root, 'q', 'crashed', [{ name: 'grpo', steps: 2 }]);
    const runs = new RunIndex(root);
    const startTime = processStartTime(process.pid);
    if (startTime === null) return; // no /proc: the record has no start time and the pid is all there is
    writeRunStatus(jobDir, { state: 'running', pid: process.pid, host: hostname(), startTime });
    assert.equal((await runs.run('q/crashed')).status, 'running');
    // the crashed run's pid given to another process (here: this one) since: another start time
    writeRunStatus(jobDir, { state: 'running', pid: process.pid, host: hostname(), startTime: `${startTime}1` });
    assert.equal((await runs.run('q/crashed')).status, 'failed');
  });

  it('writeRunStatus does not write through a link put at its temp file name (dangling, out of the folder)', () => {
    const jobDir = join(root, 'q', 'temp-link');
    const outside = mkdtempSync(join(tmpdir(), 'studio-run-status-outside-'));
    try {
      mkdirSync(jobDir, { recursive: true });
      symlinkSync(join(outside, 'written'), join(jobDir, `run_status.json.${process.pid}.tmp`));
      writeRunStatus(jobDir, { state: 'finished' });
      assert.equal(existsSync(join(outside, 'written')), false);
      assert.equal(readFileSync(join(jobDir, 'run_status.json'), 'utf8'), '{"state":"finished"}\n');
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });
});
