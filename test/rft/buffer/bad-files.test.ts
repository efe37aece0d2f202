// Data files as users bring them: a UTF-8 byte order mark (Windows editors, Excel exports) is not data and is skipped;
// an SQLite file that is not a database, or is damaged, is an error that names the file (better-sqlite3's own
// messages, "file is not a database", name none).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { loadSftDataset } from '../../../src/rft/buffer/dataset.js';
import { readJsonl } from '../../../src/rft/buffer/jsonl.js';
import { SqliteBuffer, SqliteFileError } from '../../../src/rft/buffer/sqlite.js';
import { loadTaskset } from '../../../src/rft/buffer/taskset.js';
import { Tokenizer, writeCharTokenizer } from '../../../src/tokenizer/index.js';
import { makeExperience, tempDir } from './helpers.js';

const dir = tempDir('bad-files');
const BOM = '\uFEFF';

async function values(file: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const { value } of readJsonl(file)) out.push(value);
  return out;
}

describe('a UTF-8 byte order mark', () => {
  test('is skipped at the start of JSONL files (LF, CRLF, a blank first line, a lone BOM)', async () => {
    const cases: [string, unknown[]][] = [
      [`${BOM}{"prompt": "a"}\n{"prompt": "b"}\n`, [{ prompt: 'a' }, { prompt: 'b' }]],
      [`${BOM}{"prompt": "a"}\r\n{"prompt": "b"}\r\n`, [{ prompt: 'a' }, { prompt: 'b' }]],
      [`${BOM}\n{"prompt": "a"}\n`, [{ prompt: 'a' }]],
      [`${BOM}[1, 2]\n`, [[1, 2]]],
      [BOM, []],
    ];
    for (const [i, [text, expected]] of cases.entries()) {
      const file = join(dir, `bom-${i}.jsonl`);
      writeFileSync(file, text);
      assert.deepEqual(await values(file), expected, JSON.stringify(text));
    }
  });

  test('only at the start: later on a line it is still an error naming file:line', async () => {
    const file = join(dir, 'bom-middle.jsonl');
    writeFileSync(file, `{"prompt": "a"}\n${BOM}{"prompt": "b"}\n`);
    await assert.rejects(values(file), /bom-middle\.jsonl:2: invalid JSON/);
  });

  test('in a JSONL and a JSON taskset: the first row keeps its keys', async () => {
    const jsonl = join(dir, 'tasks-bom.jsonl');
    writeFileSync(jsonl, `${BOM}{"prompt": "1+1=", "response": "2"}\n{"prompt": "2+2=", "response": "4"}\n`);
    const json = join(dir, 'tasks-bom.json');
    writeFileSync(json, `${BOM}[{"prompt": "1+1=", "response": "2"}]`);
    for (const path of [jsonl, json]) {
      const { tasks } = await loadTaskset({ name: 't', path });
      assert.equal(tasks[0]?.prompt, '1+1=', path);
      assert.equal(tasks[0]?.response, '2', path);
    }
  });

  test('in an SFT dataset', async () => {
    const tokenizerDir = join(dir, 'tokenizer');
    writeCharTokenizer(tokenizerDir);
    const file = join(dir, 'sft-bom.jsonl');
    writeFileSync(file, `${BOM}{"prompt": "ab", "response": "c"}\n`);
    const rows = await loadSftDataset(file, Tokenizer.load(tokenizerDir));
    assert.equal(rows.length, 1);
  });
});

describe('an SQLite file that is not a database or is damaged', () => {
  /** A database of `rows` experiences, then cut to its first half (a copy interrupted, a full disk). */
  function truncatedBuffer(name: string, rows: number): string {
    const file = join(dir, `${name}.db`);
    const db = new Database(file);
    db.exec('CREATE TABLE filler (id INTEGER PRIMARY KEY, data TEXT)');
    const insert = db.prepare('INSERT INTO filler (data) VALUES (?)');
    for (let i = 0; i < rows; i++) insert.run('x'.repeat(200));
    db.close();
    const bytes = readFileSync(file);
    writeFileSync(file, bytes.subarray(0, Math.floor(bytes.length / 2)));
    return file;
  }

  test('an experience buffer names the file (text, random bytes, a truncated database)', async () => {
    const text = join(dir, 'text.db');
    writeFileSync(text, 'these are notes, not a database\n'.repeat(20));
    const noise = join(dir, 'noise.db');
    writeFileSync(noise, Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 251)));
    for (const path of [text, noise]) {
      assert.throws(
        () => new SqliteBuffer({ path, name: 'exp' }),
        (error: Error) => {
          assert.ok(error instanceof SqliteFileError, String(error));
          assert.equal(error.code, 'SQLITE_NOTADB');
          assert.ok(error.message.startsWith(`buffer 'exp': ${path}: file is not a database`), error.message);
          assert.match(error.message, /not an SQLite database, or it is damaged/);
          return true;
        },
      );
    }
    // a truncated database opens; the damage shows on the first statement that reaches a lost page
    const truncated = truncatedBuffer('truncated-buffer', 2000);
    await assert.rejects(
      async () => {
        const buffer = new SqliteBuffer({ path: truncated, name: 'exp' });
        await buffer.write([makeExperience('a')]);
        buffer.commit(0);
      },
      (error: Error) => {
        assert.ok(error instanceof SqliteFileError, String(error));
        assert.ok(error.message.startsWith(`buffer 'exp': ${truncated}: `), error.message);
        return true;
      },
    );
    // a read-only viewer of a foreign file
    assert.throws(() => new SqliteBuffer({ path: text, readonly: true }), new RegExp(`${text}: file is not a database`));
  });

  test('an SQLite taskset names the file (text, a truncated database)', async () => {
    const text = join(dir, 'tasks-text.db');
    writeFileSync(text, 'id,prompt\n1,hello\n'.repeat(50));
    await assert.rejects(
      loadTaskset({ name: 'tasks', path: text, storageType: 'sql' }),
      new RegExp(`taskset 'tasks': ${text}: file is not a database`),
    );
    const file = join(dir, 'tasks-truncated.db');
    const db = new Database(file);
    db.exec('CREATE TABLE tasks (id INTEGER PRIMARY KEY, raw_task TEXT)');
    const insert = db.prepare('INSERT INTO tasks (raw_task) VALUES (?)');
    for (let i = 0; i < 3000; i++)
      insert.run(JSON.stringify({ prompt: `${i}+1=`, response: String(i + 1), pad: 'x'.repeat(100) }));
    db.close();
    const bytes = readFileSync(file);
    writeFileSync(file, bytes.subarray(0, Math.floor(bytes.length / 2)));
    await assert.rejects(loadTaskset({ name: 'tasks', path: file, storageType: 'sql' }), (error: Error) => {
      assert.ok(error.message.includes(file), error.message);
      assert.match(error.message, /malformed|not a database/);
      return true;
    });
  });
});
