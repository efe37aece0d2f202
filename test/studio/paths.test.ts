// The Studio's paths (src/studio/paths.ts over src/util/confined-path.ts) and `trinity serve`'s reload folder
// (resolveReloadFolder): nothing is read or written outside the root, through any link layout.
//
//   - each writing endpoint (config save, DPO preference) refuses a dangling link out of the runs folder (the
//     check once asked whether the target existed, then wrote through the link and created the file outside);
//   - a read through a link out of the root answers the same 403 whether the file out there exists or not;
//   - a fuzz over generated layouts (links inside/outside, absolute/relative, dangling, loops, '..' chains) and
//     request paths ('..', '.', encoded separators) asserts that every resolved path is a real path inside the
//     root, that nothing outside changed after every write, and that no answer carries a file from outside.
import assert from 'node:assert/strict';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { resolveReloadFolder } from '../../src/serve/serve-model.js';
import { writeTarget } from '../../src/studio/body.js';
import { type StudioServer, startStudio } from '../../src/studio/index.js';
import { isInside, resolveInside, StudioPathError, writeUnderRoot } from '../../src/studio/paths.js';
import { pathPresent } from '../../src/util/confined-path.js';

const SECRET = 'SECRET-OUTSIDE-THE-ROOT';

let base: string;
let root: string;
let outside: string;
let studio: StudioServer;

before(async () => {
  base = realpathSync(mkdtempSync(join(tmpdir(), 'studio-paths-')));
  root = join(base, 'runs');
  outside = join(base, 'outside');
  mkdirSync(root);
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.yaml'), `${SECRET}: 1\n`);
  writeFileSync(join(outside, 'secret.jsonl'), `{"${SECRET}":1}\n`);
  studio = await startStudio({ runsDir: root, port: 0 });
});

after(async () => {
  await studio?.close();
  rmSync(base, { recursive: true, force: true });
});

async function post(path: string, body: unknown): Promise<{ status: number; text: string }> {
  const response = await fetch(`${studio.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, text: await response.text() };
}

async function get(path: string): Promise<{ status: number; text: string }> {
  const response = await fetch(`${studio.url}${path}`);
  return { status: response.status, text: await response.text() };
}

describe('writing endpoints and a dangling link out of the runs folder', () => {
  const writers: [string, (file: string) => Promise<{ status: number; text: string }>, string][] = [
    ['config save', (file) => post('/api/config/save', { file, yaml: 'mode: train\n' }), '.yaml'],
    ['DPO preference', (file) => post('/api/feedback/preference', { file, prompt: 'p', chosen: 'a', rejected: 'b' }), '.jsonl'],
  ];
  for (const [name, write, extension] of writers) {
    it(`${name}: a link named as the file, to a file outside that does not exist, is refused (403), nothing created`, async () => {
      const target = join(outside, `made-by-${name.replace(/ /g, '-')}${extension}`);
      symlinkSync(target, join(root, `dangling-${name.replace(/ /g, '-')}${extension}`));
      const answer = await write(`dangling-${name.replace(/ /g, '-')}${extension}`);
      assert.equal(answer.status, 403, answer.text);
      assert.equal(existsSync(target), false, `${target} was created through the link`);
    });

    it(`${name}: a folder link to a folder outside that does not exist is refused (403), nothing created`, async () => {
      const folder = join(outside, `folder-by-${name.replace(/ /g, '-')}`);
      symlinkSync(folder, join(root, `dir-${name.replace(/ /g, '-')}`));
      const answer = await write(`dir-${name.replace(/ /g, '-')}/sub/file${extension}`);
      assert.equal(answer.status, 403, answer.text);
      assert.equal(existsSync(folder), false, `${folder} was created through the link`);
    });

    it(`${name}: a relative link that climbs out ('../outside/…') is refused the same way`, async () => {
      const link = `climb-${name.replace(/ /g, '-')}${extension}`;
      symlinkSync(`../outside/climbed-${link}`, join(root, link));
      const answer = await write(link);
      assert.equal(answer.status, 403, answer.text);
      assert.equal(existsSync(join(outside, `climbed-${link}`)), false);
    });
  }

  it('a plain new file inside the runs folder is still written (with its folders)', async () => {
    const saved = await post('/api/config/save', { file: 'configs/new/run.yaml', yaml: 'mode: train\n' });
    assert.equal(saved.status, 200, saved.text);
    assert.equal(readFileSync(join(root, 'configs', 'new', 'run.yaml'), 'utf8'), 'mode: train\n');
    for (let i = 1; i <= 2; i++) {
      const pair = await post('/api/feedback/preference', {
        file: 'dpo/pairs.jsonl',
        prompt: 'p',
        chosen: 'a',
        rejected: `b${i}`,
      });
      assert.equal(pair.status, 200, pair.text);
      assert.equal(JSON.parse(pair.text).pairs, i);
    }
  });
});

describe('reads through a link out of the root say nothing about what is outside', () => {
  it('an existing and a missing target outside answer the same 403', async () => {
    symlinkSync(join(outside, 'secret.yaml'), join(root, 'to-existing.yaml'));
    symlinkSync(join(outside, 'no-such.yaml'), join(root, 'to-missing.yaml'));
    const existing = await get('/api/config/file?file=to-existing.yaml');
    const missing = await get('/api/config/file?file=to-missing.yaml');
    assert.equal(existing.status, 403, existing.text);
    assert.equal(missing.status, 403, missing.text);
    assert.equal(existing.text.replace('to-existing', 'X'), missing.text.replace('to-missing', 'X'));
    assert.ok(!existing.text.includes(SECRET));
  });

  it('a run id through a folder link out of the root: 403 for an existing and a missing folder alike', async () => {
    mkdirSync(join(outside, 'job'));
    writeFileSync(join(outside, 'job', 'metrics.jsonl'), `{"step":1,"${SECRET}":1}\n`);
    symlinkSync(join(outside, 'job'), join(root, 'job-link'));
    symlinkSync(join(outside, 'no-job'), join(root, 'no-job-link'));
    const a = await get('/api/runs/job-link');
    const b = await get('/api/runs/no-job-link');
    assert.equal(a.status, 403, a.text);
    assert.equal(b.status, 403, b.text);
    assert.ok(!a.text.includes(SECRET));
  });

  it('a stages.json that is a link out of the root is not read (its names would show as pending stages)', async () => {
    writeFileSync(join(outside, 'stages.json'), `["${SECRET}"]\n`);
    const job = join(root, 'linked-stages');
    mkdirSync(job);
    writeFileSync(join(job, 'metrics.jsonl'), '{"step":1,"loss":1}\n');
    symlinkSync(join(outside, 'stages.json'), join(job, 'stages.json'));
    const answer = await get('/api/runs/linked-stages');
    assert.equal(answer.status, 200, answer.text);
    assert.ok(!answer.text.includes(SECRET), answer.text);
  });

  it('a metrics.jsonl that is a link out of the root is not read', async () => {
    const job = join(root, 'linked-metrics');
    mkdirSync(job);
    writeFileSync(join(job, 'stages.json'), '["."]\n');
    symlinkSync(join(outside, 'job', 'metrics.jsonl'), join(job, 'metrics.jsonl'));
    const answer = await get('/api/runs/linked-metrics');
    assert.ok(!answer.text.includes(SECRET), answer.text);
  });
});

/** A small deterministic generator (mulberry32), so a failing layout can be rebuilt from its seed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Every file below `dir` with its content (links listed by target, not followed). */
function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const visit = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) {
        out.set(path, '<dir>');
        visit(path);
      } else if (entry.isSymbolicLink()) out.set(path, '<link>');
      else out.set(path, readFileSync(path, 'utf8'));
    }
  };
  visit(dir);
  return out;
}

describe('fuzz: generated link layouts and request paths', () => {
  const NAMES = ['a', 'b', 'c.yaml', 'd.jsonl', 'e'];

  /** A layout under `fuzzRoot`: folders, files and links of every kind; returns the names used. */
  function layout(next: () => number, fuzzRoot: string, fuzzOutside: string): void {
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
    const folders = [fuzzRoot];
    for (let i = 0; i < 12; i++) {
      const parent = pick(folders);
      const path = join(parent, pick(NAMES));
      if (pathPresent(path)) continue;
      const kind = next();
      if (kind < 0.25) {
        mkdirSync(path);
        folders.push(path);
      } else if (kind < 0.4) writeFileSync(path, 'inside\n');
      else {
        const targets = [
          join(fuzzOutside, 'secret.yaml'), // outside, existing file
          fuzzOutside, // outside, existing folder
          join(fuzzOutside, pick(NAMES)), // outside, maybe missing
          join(fuzzRoot, pick(NAMES)), // inside, absolute
          pick(NAMES), // inside, relative (maybe itself: a loop)
          `../${pick(NAMES)}`, // up one (outside from the root)
          `../../outside/${pick(NAMES)}`,
          `./${pick(NAMES)}/../${pick(NAMES)}`,
          relative(parent, fuzzRoot), // the root itself
          `${relative(parent, fuzzRoot) || '.'}/../outside`,
        ];
        symlinkSync(pick(targets) || '.', path);
      }
    }
  }

  /** Request paths over the layout's names: plain, with '.', '..', doubled and backslash separators. */
  function requests(next: () => number): string[] {
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
    const out: string[] = [];
    for (let i = 0; i < 30; i++) {
      const depth = 1 + Math.floor(next() * 4);
      const parts = Array.from({ length: depth }, () => pick([...NAMES, ...NAMES, '.', '..', '']));
      out.push(parts.join(pick(['/', '/', '//', '\\'])));
    }
    return out;
  }

  it('over 40 layouts: resolved paths are real and inside, writes change nothing outside, no answer leaks', async () => {
    for (let seed = 1; seed <= 40; seed++) {
      const next = random(seed);
      const fuzzBase = realpathSync(mkdtempSync(join(tmpdir(), `studio-fuzz-${seed}-`)));
      const fuzzRoot = join(fuzzBase, 'runs');
      const fuzzOutside = join(fuzzBase, 'outside');
      mkdirSync(fuzzRoot);
      mkdirSync(fuzzOutside);
      writeFileSync(join(fuzzOutside, 'secret.yaml'), `${SECRET}: 1\n`);
      try {
        layout(next, fuzzRoot, fuzzOutside);
        const before = snapshot(fuzzOutside);
        const fuzzStudio = await startStudio({ runsDir: fuzzRoot, port: 0 });
        try {
          for (const request of requests(next)) {
            const where = `seed ${seed}, path '${request}'`;
            // reads: a resolved path is a real path inside the root
            try {
              const path = await resolveInside(fuzzRoot, request);
              assert.ok(isInside(fuzzRoot, path), `${where}: resolved outside: ${path}`);
              assert.equal(realpathSync(path), path, `${where}: ${path} is not a real path`);
            } catch (error) {
              if (!(error instanceof StudioPathError)) throw error;
            }
            // serve's reload folder: the same
            try {
              const folder = resolveReloadFolder(fuzzRoot, join(fuzzRoot, request));
              assert.ok(isInside(fuzzRoot, folder), `${where}: reload folder outside: ${folder}`);
            } catch (error) {
              assert.match((error as Error).message, /outside|no such file|not a directory|ENOTDIR/, where);
            }
            // writes: through writeTarget + writeUnderRoot, as the endpoints do
            for (const extension of ['.yaml', '.jsonl']) {
              const file = request.endsWith(extension) ? request : `${request}${extension}`;
              try {
                const target = writeTarget(fuzzRoot, file, [extension]);
                assert.ok(isInside(fuzzRoot, target), `${where}: write target outside: ${target}`);
                writeUnderRoot(fuzzRoot, target, 'written\n', { append: true });
              } catch (error) {
                if (
                  !(error instanceof StudioPathError) &&
                  !['EISDIR', 'ENOTDIR', 'EEXIST'].includes(String((error as NodeJS.ErrnoException).code))
                )
                  throw error;
              }
            }
            // over HTTP, with the separators and dots percent-encoded too
            const encoded = request.replace(/\//g, '%2F').replace(/\./g, '%2E').replace(/\\/g, '%5C');
            for (const url of [
              `/api/config/file?file=${encodeURIComponent(`${request}.yaml`)}`,
              `/api/runs/${encoded}`,
              `/api/rollouts?file=${encodeURIComponent(request)}`,
            ]) {
              const response = await fetch(`${fuzzStudio.url}${url}`);
              const text = await response.text();
              assert.ok(!text.includes(SECRET), `${where}: ${url} answered with a file from outside: ${text}`);
              assert.ok(response.status < 500, `${where}: ${url} answered ${response.status}: ${text}`);
            }
          }
        } finally {
          await fuzzStudio.close();
        }
        assert.deepEqual(snapshot(fuzzOutside), before, `seed ${seed}: the folder outside the root changed`);
      } finally {
        rmSync(fuzzBase, { recursive: true, force: true });
      }
    }
  });
});
