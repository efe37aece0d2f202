// The Enron email database of Trinity-RFT's email_search example (grpo_email_search), as its preparation script
// writes it (OpenPipe ART's art-e layout), and the two lookups its agent's tools make. A file written by upstream's
// prepare_data.py is read as it is; ./email-db-write.ts writes the same file from the dataset on disk.
//
//   emails      (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT UNIQUE, subject, from_address,
//                date TEXT 'YYYY-MM-DD HH:MM:SS', body, file_name)
//   recipients  (email_id → emails.id, recipient_address, recipient_type 'to' | 'cc' | 'bcc')
//   emails_fts  FTS5 over (subject, body), external content = emails, content_rowid = id
//
//   search(inbox, keywords, from?, to?, sent_after?, sent_before?, max_results ≤ 10)
//     = emails whose subject or body holds every keyword (each an FTS5 phrase: "k1" "k2" ..., implicit AND),
//       sent from the inbox or to it (to, cc or bcc), from `from`, to `to`, dated sent_after 00:00:00 ≤ date <
//       sent_before 00:00:00; newest first, at most max_results; each {message_id, snippet}, the snippet FTS5's
//       snippet(emails_fts, -1, '<b>', '</b>', ' ... ', 15)
//   read(message_id) = the email with its to / cc / bcc lists (recipients by emails.id), or null
//
// The file is opened read-only (as upstream opens it: mode=ro), once per path per process.
import { resolve } from 'node:path';
import type Database from 'better-sqlite3';
import { inSqliteFile, openSqliteFile } from '../../store/sqlite.js';

/** The tables, as upstream's preparation creates them (the indexes and the FTS table come after the rows). */
export const EMAIL_TABLES_DDL = `
CREATE TABLE emails (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id TEXT UNIQUE,
  subject TEXT,
  from_address TEXT,
  date TEXT,
  body TEXT,
  file_name TEXT
);
CREATE TABLE recipients (
  email_id INTEGER,
  recipient_address TEXT,
  recipient_type TEXT,
  FOREIGN KEY(email_id) REFERENCES emails(id) ON DELETE CASCADE
);`;

/** The indexes, the full-text table (filled from the rows) and the triggers that keep it in step. */
export const EMAIL_INDEXES_DDL = `
CREATE INDEX idx_emails_from ON emails(from_address);
CREATE INDEX idx_emails_date ON emails(date);
CREATE INDEX idx_emails_message_id ON emails(message_id);
CREATE INDEX idx_recipients_address ON recipients(recipient_address);
CREATE INDEX idx_recipients_type ON recipients(recipient_type);
CREATE INDEX idx_recipients_email_id ON recipients(email_id);
CREATE INDEX idx_recipients_address_email ON recipients(recipient_address, email_id);
CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, content='emails', content_rowid='id');
CREATE TRIGGER emails_ai AFTER INSERT ON emails BEGIN
  INSERT INTO emails_fts (rowid, subject, body) VALUES (new.id, new.subject, new.body);
END;
CREATE TRIGGER emails_ad AFTER DELETE ON emails BEGIN
  DELETE FROM emails_fts WHERE rowid = old.id;
END;
CREATE TRIGGER emails_au AFTER UPDATE ON emails BEGIN
  UPDATE emails_fts SET subject = new.subject, body = new.body WHERE rowid = old.id;
END;
INSERT INTO emails_fts (rowid, subject, body) SELECT id, subject, body FROM emails;`;

export interface EmailSearch {
  /** The user's address: results are sent from it or to it (to, cc or bcc). */
  inbox: string;
  /** Every keyword must appear in the subject or the body. */
  keywords: readonly string[];
  fromAddress?: string;
  /** To, cc or bcc. */
  toAddress?: string;
  /** 'YYYY-MM-DD': sent on or after that day. */
  sentAfter?: string;
  /** 'YYYY-MM-DD': sent before that day. */
  sentBefore?: string;
  /** At most 10 (default 10). */
  maxResults?: number;
}

export interface EmailSearchResult {
  message_id: string;
  snippet: string;
}

/** An email as the read tool returns it (upstream's Email model, its fields in its order). */
export interface Email {
  message_id: string;
  date: string;
  subject: string | null;
  from_address: string | null;
  to_addresses: string[];
  cc_addresses: string[];
  bcc_addresses: string[];
  body: string | null;
  file_name: string | null;
}

/** A search the tool refuses (no keywords, too many results): its message goes back to the agent. */
export class EmailSearchError extends Error {
  override name = 'EmailSearchError';
}

export const MAX_SEARCH_RESULTS = 10;

const DATE = /^\d{4}-\d{2}-\d{2}$/;

export class EmailDatabase {
  private constructor(
    readonly path: string,
    private readonly db: Database.Database,
  ) {}

  /** Opens the file read-only; an error names the file when it is missing or is not an email database. */
  static open(path: string): EmailDatabase {
    const db = inSqliteFile(path, 'email database', () => openSqliteFile(path, { readonly: true }));
    const tables = new Set(
      (db.prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").all() as { name: string }[]).map(
        (row) => row.name,
      ),
    );
    const missing = ['emails', 'recipients', 'emails_fts'].filter((table) => !tables.has(table));
    if (missing.length > 0) {
      db.close();
      throw new Error(
        `email database ${path}: no table ${missing.join(', ')}: not a database written by the email_search preparation ` +
          '(`trinity email-db`, or upstream prepare_data.py)',
      );
    }
    return new EmailDatabase(path, db);
  }

  search(query: EmailSearch): EmailSearchResult[] {
    const keywords = query.keywords.filter((keyword) => keyword.trim() !== '');
    if (keywords.length === 0) throw new EmailSearchError('No keywords provided for search.');
    const maxResults = query.maxResults ?? MAX_SEARCH_RESULTS;
    if (!Number.isInteger(maxResults) || maxResults < 1 || maxResults > MAX_SEARCH_RESULTS)
      throw new EmailSearchError(`max_results must be an integer from 1 to ${MAX_SEARCH_RESULTS}, got ${maxResults}`);
    for (const [name, day] of [
      ['sent_after', query.sentAfter],
      ['sent_before', query.sentBefore],
    ] as const) {
      if (day !== undefined && !DATE.test(day)) throw new EmailSearchError(`${name} must be 'YYYY-MM-DD', got '${day}'`);
    }
    // each keyword one FTS5 phrase (a double quote inside doubled); phrases side by side must all match
    const conditions = ['emails_fts MATCH ?'];
    const params: (string | number)[] = [keywords.map((k) => `"${k.replaceAll('"', '""')}"`).join(' ')];
    conditions.push(
      '(e.from_address = ? OR EXISTS (SELECT 1 FROM recipients r WHERE r.recipient_address = ? AND r.email_id = e.id))',
    );
    params.push(query.inbox, query.inbox);
    if (query.fromAddress) {
      conditions.push('e.from_address = ?');
      params.push(query.fromAddress);
    }
    if (query.toAddress) {
      conditions.push('EXISTS (SELECT 1 FROM recipients r WHERE r.recipient_address = ? AND r.email_id = e.id)');
      params.push(query.toAddress);
    }
    if (query.sentAfter) {
      conditions.push('e.date >= ?');
      params.push(`${query.sentAfter} 00:00:00`);
    }
    if (query.sentBefore) {
      conditions.push('e.date < ?');
      params.push(`${query.sentBefore} 00:00:00`);
    }
    const sql =
      "SELECT e.message_id AS message_id, snippet(emails_fts, -1, '<b>', '</b>', ' ... ', 15) AS snippet " +
      `FROM emails e JOIN emails_fts ON e.id = emails_fts.rowid WHERE ${conditions.join(' AND ')} ` +
      'ORDER BY e.date DESC LIMIT ?';
    params.push(maxResults);
    try {
      return inSqliteFile(this.path, 'email search', () => this.db.prepare(sql).all(...params) as EmailSearchResult[]);
    } catch (error) {
      // FTS5 refuses some phrases (a keyword of only punctuation is fine, a lone NUL is not): the agent is told
      if ((error as { code?: unknown }).code === 'SQLITE_ERROR') throw new EmailSearchError((error as Error).message);
      throw error;
    }
  }

  read(messageId: string): Email | null {
    return inSqliteFile(this.path, 'email read', () => {
      const row = this.db
        .prepare('SELECT id, message_id, date, subject, from_address, body, file_name FROM emails WHERE message_id = ?')
        .get(messageId) as (Omit<Email, `${string}_addresses`> & { id: number }) | undefined;
      if (row === undefined) return null;
      const email: Email = {
        message_id: row.message_id,
        date: row.date,
        subject: row.subject,
        from_address: row.from_address,
        to_addresses: [],
        cc_addresses: [],
        bcc_addresses: [],
        body: row.body,
        file_name: row.file_name,
      };
      const recipients = this.db
        .prepare('SELECT recipient_address, recipient_type FROM recipients WHERE email_id = ?')
        .all(row.id) as { recipient_address: string; recipient_type: string }[];
      for (const { recipient_address: address, recipient_type: type } of recipients) {
        const kind = type.toLowerCase();
        if (kind === 'to' || kind === 'cc' || kind === 'bcc') email[`${kind}_addresses`].push(address);
      }
      return email;
    });
  }

  close(): void {
    this.db.close();
  }
}

const opened = new Map<string, EmailDatabase>();

/** The database at `path` (resolved against the working directory), opened once per process. */
export function emailDatabase(path: string): EmailDatabase {
  const absolute = resolve(path);
  let database = opened.get(absolute);
  if (database === undefined) {
    database = EmailDatabase.open(absolute);
    opened.set(absolute, database);
  }
  return database;
}
