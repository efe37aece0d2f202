// `trinity email-db DATASET --out FILE` (src/cli/email-db-command.ts): writes the email_search database from a
// dataset folder, says how many emails it kept and left out and what to export; usage errors exit 2; a dataset row
// that is not an email fails naming the row and leaves no database behind.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { emailDbCommand } from '../../src/cli/email-db-command.js';
import { EmailDatabase } from '../../src/rft/workflow/index.js';

const row = (id: string, body: string) =>
  JSON.stringify({
    message_id: id,
    subject: 'Gas prices',
    from: 'a@enron.com',
    to: ['b@enron.com'],
    cc: [],
    bcc: [],
    date: '2001-05-01T10:00:00.000Z',
    body,
    file_name: 'a/1.',
  });

describe('trinity email-db', () => {
  test('writes the database the workflow opens, and prints the counts and the export line', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'email-db-cli-'));
    writeFileSync(
      join(dir, 'train.jsonl'),
      [
        row('<1>', 'prices rose'),
        row('<2>', 'prices rose'), // a duplicate of <1>
        row('<3>', 'x'.repeat(5001)), // over 5000 characters
        row('<4>', `prices fell ${'😀'.repeat(2600)}`), // 2612 characters as Python counts them (5212 UTF-16 units)
      ].join('\n'),
    );
    const out = join(dir, 'enron.db');
    let printed = '';
    assert.equal(await emailDbCommand([dir, '--out', out], { write: (text: string) => (printed += text) }), 0);
    assert.equal(
      printed,
      `wrote ${out}: 2 emails (left out: 1 by the length and recipient filters, 1 duplicates)\nexport DEFAULT_EMAIL_DB_PATH=${out}\n`,
    );
    const db = EmailDatabase.open(out);
    try {
      assert.deepEqual(
        ['rose', 'fell'].map((word) => db.search({ inbox: 'b@enron.com', keywords: [word] }).map((r) => r.message_id)),
        [['<1>'], ['<4>']],
      );
    } finally {
      db.close();
    }
  });

  test('usage errors exit 2; a bad row fails naming it and leaves no file', async () => {
    const saved = process.stderr.write;
    process.stderr.write = () => true;
    try {
      assert.equal(await emailDbCommand(['some-dir']), 2);
    } finally {
      process.stderr.write = saved;
    }
    const dir = mkdtempSync(join(tmpdir(), 'email-db-cli-'));
    writeFileSync(join(dir, 'train.jsonl'), `${row('<1>', 'ok')}\n{"message_id": "<2>"}\n`);
    const out = join(dir, 'enron.db');
    await assert.rejects(emailDbCommand([dir, '--out', out]), /train\.jsonl:2: column 'date' must be a timestamp/);
    assert.equal(existsSync(out), false);
    assert.equal(existsSync(`${out}.partial`), false);
  });
});
