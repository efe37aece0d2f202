// Writes the email_search database (./email-db.ts) from the Enron email dataset on disk, as upstream's
// prepare_data.py writes it from the hub's corbt/enron-emails: the same tables, rows, filters and indexes, so a
// database from either serves the workflow alike. Nothing is downloaded: the dataset is a folder or file the
// buffer's readers take (parquet as the hub serves it, JSONL, JSON; a hub id found in the local hub cache;
// ../../buffer/rows.ts, ../../buffer/split.ts), its split 'train'.
//
//   row     {message_id, subject, from, to: [..], cc: [..], bcc: [..], date, body, file_name}
//   date    a parquet timestamp (read as ISO 8601 text) or text 'YYYY-MM-DD HH:MM:SS' / 'YYYY-MM-DDTHH:MM:SS...'
//           → 'YYYY-MM-DD HH:MM:SS' (the wall-clock time as stored; no time zone is applied)
//   kept    body ≤ 5000 characters (Unicode code points, as Python's len), to + cc + bcc ≤ 30 addresses after empty
//           ones are dropped, and the first email of each (subject, body, from) (later duplicates skipped)
//   order   rows in dataset order, so emails.id is the row's rank among the kept ones (as upstream's)
//
// A row that is not an email (a missing column, a non-text field) is an error naming the row; the file is written
// to a temporary name and renamed when complete, so a failed preparation leaves no half database behind.
import { createHash } from 'node:crypto';
import { existsSync, renameSync, rmSync } from 'node:fs';
import { readDatasetRows } from '../../buffer/rows.js';
import { inSqliteFile, openSqliteFile } from '../../store/sqlite.js';
import { EMAIL_INDEXES_DDL, EMAIL_TABLES_DDL } from './email-db.js';

export const MAX_BODY_CHARS = 5000;
export const MAX_RECIPIENTS = 30;

export interface EmailDatabaseCounts {
  inserted: number;
  /** Body over MAX_BODY_CHARS or more than MAX_RECIPIENTS recipients. */
  skippedByFilters: number;
  duplicates: number;
}

/** One dataset row as an email to insert; throws naming `where` when it is not one. */
function emailRow(value: unknown, where: string) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${where}: a row must be an object`);
  const row = value as Record<string, unknown>;
  const text = (key: string, nullable: boolean): string | null => {
    const field = row[key];
    if (typeof field === 'string') return field;
    if (nullable && (field === null || field === undefined)) return null;
    throw new Error(`${where}: column '${key}' must be text, got ${JSON.stringify(field) ?? 'nothing'}`);
  };
  const addresses = (key: string): string[] => {
    const field = row[key] ?? [];
    if (!Array.isArray(field)) throw new Error(`${where}: column '${key}' must be a list of addresses`);
    return field.filter((address) => address !== null && address !== '').map(String);
  };
  const date = emailDate(row.date, where);
  return {
    messageId: text('message_id', false) as string,
    subject: text('subject', true),
    from: text('from', true),
    date,
    body: text('body', false) as string,
    fileName: text('file_name', true),
    to: addresses('to'),
    cc: addresses('cc'),
    bcc: addresses('bcc'),
  };
}

/** Python's len(text): Unicode code points (a UTF-16 string is at least that long, so short ones are not counted). */
function codePointsOver(text: string, limit: number): boolean {
  if (text.length <= limit) return false;
  let count = 0;
  for (const _ of text) if (++count > limit) return true;
  return false;
}

/** The email's date as 'YYYY-MM-DD HH:MM:SS' (see the header). */
export function emailDate(value: unknown, where: string): string {
  const text = value instanceof Date ? value.toISOString() : value;
  const match = typeof text === 'string' ? /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})/.exec(text) : null;
  if (match === null) throw new Error(`${where}: column 'date' must be a timestamp, got ${JSON.stringify(value)}`);
  return `${match[1]} ${match[2]}`;
}

/** Writes the database at `outPath` from the rows of the dataset at `datasetPath` (split 'train'); see the header. */
export async function writeEmailDatabase(datasetPath: string, outPath: string): Promise<EmailDatabaseCounts> {
  const partial = `${outPath}.partial`;
  rmSync(partial, { force: true });
  const db = inSqliteFile(partial, 'email database', () => openSqliteFile(partial));
  const counts: EmailDatabaseCounts = { inserted: 0, skippedByFilters: 0, duplicates: 0 };
  try {
    db.exec(EMAIL_TABLES_DDL);
    const insertEmail = db.prepare(
      'INSERT INTO emails (message_id, subject, from_address, date, body, file_name) VALUES (?, ?, ?, ?, ?, ?)',
    );
    const insertRecipient = db.prepare('INSERT INTO recipients (email_id, recipient_address, recipient_type) VALUES (?, ?, ?)');
    const seen = new Set<string>();
    db.exec('BEGIN');
    for await (const { where, value } of readDatasetRows(datasetPath, { split: 'train' })) {
      const email = emailRow(value, where);
      if (codePointsOver(email.body, MAX_BODY_CHARS) || email.to.length + email.cc.length + email.bcc.length > MAX_RECIPIENTS) {
        counts.skippedByFilters++;
        continue;
      }
      // a digest of (subject, body, from) rather than the text: the dataset's half a million bodies stay out of memory
      const key = createHash('sha256')
        .update(JSON.stringify([email.subject, email.body, email.from]))
        .digest('base64');
      if (seen.has(key)) {
        counts.duplicates++;
        continue;
      }
      seen.add(key);
      const id = inSqliteFile(partial, where, () =>
        insertEmail.run(email.messageId, email.subject, email.from, email.date, email.body, email.fileName),
      ).lastInsertRowid;
      for (const type of ['to', 'cc', 'bcc'] as const) {
        for (const address of email[type]) insertRecipient.run(id, address, type);
      }
      counts.inserted++;
    }
    db.exec('COMMIT');
    db.exec(EMAIL_INDEXES_DDL);
    db.close();
  } catch (error) {
    db.close();
    rmSync(partial, { force: true });
    throw error;
  }
  if (existsSync(outPath)) rmSync(outPath);
  renameSync(partial, outPath);
  return counts;
}
