// email_search_workflow (src/rft/workflow/agents/email-search.ts) and its email database (email-db.ts, written by
// email-db-write.ts as upstream's prepare_data.py writes it): the preparation's filters, the search's filters (keywords,
// inbox, sender, recipient, dates, order, limit), reading an email and a missing one, the tools' text as the agent
// sees it, the reward rubric computed by hand, and whole episodes through the OpenAI client on a scripted policy with
// a scripted judge.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';
import { openSqliteFile } from '../../../src/rft/store/sqlite.js';
import type { Task } from '../../../src/rft/task.js';
import {
  EmailDatabase,
  EmailSearchError,
  emailDatabasePath,
  emailJudgeOptions,
  emailSearchReward,
  EngineModelHandle,
  GENERATE_RESPONSE_HINT,
  parseAcceptVerdict,
  runEmailTool,
  WORKFLOWS,
  writeEmailDatabase,
} from '../../../src/rft/workflow/index.js';
import type { WorkflowContext } from '../../../src/rft/workflow/types.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { fakeJudge, judgePrompt } from './fake-judge.js';
import { ScriptedBackend } from './scripted-backend.js';

const VARIANCES = '<1.JavaMail.evans@thyme>';
const FOLLOW_UP = '<2.JavaMail.evans@thyme>';
const OFFSITE = '<3.JavaMail.evans@thyme>';
const email = (over: Record<string, unknown>) => ({
  subject: 'Note',
  from: 'someone@enron.com',
  to: [],
  cc: [],
  bcc: [],
  body: 'nothing here',
  file_name: 'x/1.',
  ...over,
});
const ROWS = [
  email({
    message_id: VARIANCES,
    subject: 'Schedule variances',
    from: 'pete.davis@enron.com',
    to: ['ops@enron.com'],
    date: '2001-03-09 06:10:00',
    body: 'Variances detected for hour 6 in the "import" schedule.',
  }),
  email({
    message_id: FOLLOW_UP,
    subject: 'Variances follow-up',
    from: 'alice@enron.com',
    to: ['pete.davis@enron.com'],
    cc: ['bob@enron.com', ''],
    bcc: ['carol@enron.com'],
    date: '2001-03-20T09:30:00.000Z', // a parquet timestamp as the reader gives it
    body: 'No variances for hour 6 today.',
  }),
  email({
    message_id: OFFSITE,
    from: 'kean@enron.com',
    bcc: ['pete.davis@enron.com'],
    date: '2001-01-15 08:00:00',
    body: 'Offsite in Houston.',
  }),
  // left out: a duplicate of the first (subject, body, sender), a body over 5000 characters, 31 recipients
  email({
    message_id: '<4>',
    subject: 'Schedule variances',
    from: 'pete.davis@enron.com',
    date: '2001-03-09 06:11:00',
    body: 'Variances detected for hour 6 in the "import" schedule.',
  }),
  email({ message_id: '<5>', from: 'pete.davis@enron.com', date: '2001-03-01 00:00:00', body: `variances ${'é'.repeat(4991)}` }),
  email({
    message_id: '<6>',
    from: 'pete.davis@enron.com',
    date: '2001-03-01 00:00:00',
    body: 'variances',
    to: Array.from({ length: 31 }, (_, i) => `u${i}@enron.com`),
  }),
];

let folder: string;
let dbPath: string;
let db: EmailDatabase;

before(async () => {
  folder = mkdtempSync(join(tmpdir(), 'email-search-'));
  writeFileSync(join(folder, 'train.jsonl'), `${ROWS.map((row) => JSON.stringify(row)).join('\n')}\n`);
  dbPath = join(folder, 'enron_emails.db');
  assert.deepEqual(await writeEmailDatabase(folder, dbPath), { inserted: 3, skippedByFilters: 2, duplicates: 1 });
  db = EmailDatabase.open(dbPath);
});
after(() => db?.close());

describe('the email database', () => {
  test("is upstream's layout: emails, recipients by emails.id, an FTS5 table over subject and body", () => {
    const file = openSqliteFile(dbPath, { readonly: true });
    try {
      const columns = (table: string) => (file.pragma(`table_info(${table})`) as { name: string }[]).map((c) => c.name);
      assert.deepEqual(columns('emails'), ['id', 'message_id', 'subject', 'from_address', 'date', 'body', 'file_name']);
      assert.deepEqual(columns('recipients'), ['email_id', 'recipient_address', 'recipient_type']);
      assert.deepEqual(file.prepare('SELECT id, message_id, date FROM emails ORDER BY id').all(), [
        { id: 1, message_id: VARIANCES, date: '2001-03-09 06:10:00' },
        { id: 2, message_id: FOLLOW_UP, date: '2001-03-20 09:30:00' },
        { id: 3, message_id: OFFSITE, date: '2001-01-15 08:00:00' },
      ]);
      const sql = (file.prepare("SELECT sql FROM sqlite_master WHERE name = 'emails_fts'").get() as { sql: string }).sql;
      assert.match(sql, /fts5\(subject, body, content='emails', content_rowid='id'\)/);
    } finally {
      file.close();
    }
  });

  test('a row that is not an email is an error naming the row and the column', async () => {
    const bad = mkdtempSync(join(tmpdir(), 'email-bad-'));
    writeFileSync(join(bad, 'train.jsonl'), `${JSON.stringify(ROWS[0])}\n${JSON.stringify({ ...ROWS[1], date: 'soon' })}\n`);
    await assert.rejects(writeEmailDatabase(bad, join(bad, 'out.db')), /train\.jsonl:2: column 'date' must be a timestamp/);
  });

  test('a file without the tables is refused naming them; a missing file names its path', () => {
    const other = join(folder, 'other.db');
    const file = openSqliteFile(other);
    file.exec('CREATE TABLE emails (id INTEGER)');
    file.close();
    assert.throws(() => EmailDatabase.open(other), /other\.db: no table recipients, emails_fts: not a database written/);
    assert.throws(() => EmailDatabase.open(join(folder, 'absent.db')), /absent\.db/);
  });
});

describe('search and read', () => {
  const ids = (results: { message_id: string }[]) => results.map((r) => r.message_id);

  test('every keyword must match; the inbox is the sender or any recipient (to, cc, bcc); newest first', () => {
    const inbox = 'pete.davis@enron.com';
    assert.deepEqual(ids(db.search({ inbox, keywords: ['variances'] })), [FOLLOW_UP, VARIANCES]);
    assert.deepEqual(ids(db.search({ inbox, keywords: ['variances', 'today'] })), [FOLLOW_UP]);
    assert.deepEqual(ids(db.search({ inbox, keywords: ['houston'] })), [OFFSITE], 'bcc counts');
    assert.deepEqual(ids(db.search({ inbox: 'bob@enron.com', keywords: ['variances'] })), [FOLLOW_UP], 'cc counts');
    assert.deepEqual(ids(db.search({ inbox: 'nobody@enron.com', keywords: ['variances'] })), []);
    assert.deepEqual(ids(db.search({ inbox, keywords: ['"import"'] })), [VARIANCES], 'a quote inside a keyword');
  });

  test('sender, recipient and date filters (sent_after inclusive, sent_before exclusive), max_results', () => {
    const inbox = 'pete.davis@enron.com';
    assert.deepEqual(ids(db.search({ inbox, keywords: ['variances'], fromAddress: 'alice@enron.com' })), [FOLLOW_UP]);
    assert.deepEqual(ids(db.search({ inbox, keywords: ['variances'], toAddress: 'ops@enron.com' })), [VARIANCES]);
    assert.deepEqual(ids(db.search({ inbox, keywords: ['variances'], sentBefore: '2001-03-20' })), [VARIANCES]);
    assert.deepEqual(ids(db.search({ inbox, keywords: ['variances'], sentAfter: '2001-03-20' })), [FOLLOW_UP]);
    assert.deepEqual(ids(db.search({ inbox, keywords: ['variances'], maxResults: 1 })), [FOLLOW_UP]);
    assert.throws(() => db.search({ inbox, keywords: ['variances'], maxResults: 11 }), EmailSearchError);
    assert.throws(() => db.search({ inbox, keywords: [] }), /No keywords provided/);
    assert.throws(() => db.search({ inbox, keywords: ['x'], sentAfter: '3/9/01' }), /sent_after must be 'YYYY-MM-DD'/);
  });

  test("snippets mark the match as FTS5's snippet() does", () => {
    const [result] = db.search({ inbox: 'pete.davis@enron.com', keywords: ['today'] });
    assert.equal(result?.snippet, 'No variances for hour 6 <b>today</b>.');
  });

  test('read returns the email with its recipients by kind; an unknown id is null', () => {
    assert.deepEqual(db.read(FOLLOW_UP), {
      message_id: FOLLOW_UP,
      date: '2001-03-20 09:30:00',
      subject: 'Variances follow-up',
      from_address: 'alice@enron.com',
      to_addresses: ['pete.davis@enron.com'],
      cc_addresses: ['bob@enron.com'],
      bcc_addresses: ['carol@enron.com'],
      body: 'No variances for hour 6 today.',
      file_name: 'x/1.',
    });
    assert.equal(db.read('<nope>'), null);
  });
});

describe('the tools as the agent sees them', () => {
  const trace = () => ({ found: new Set<string>(), read: new Set<string>() });

  test('search_emails searches up to query_date inclusive and answers JSON as Python writes it', () => {
    const seen = trace();
    const call = (date: string) =>
      runEmailTool(
        {
          name: 'search_emails',
          arguments: JSON.stringify({ inbox_address: 'pete.davis@enron.com', query_date: date, keywords: ['variances'] }),
        },
        db,
        seen,
      );
    assert.deepEqual(call('2001-03-19'), {
      valid: true,
      content: `[{"message_id": "${VARIANCES}", "snippet": "Schedule <b>variances</b>"}]`,
    });
    assert.equal(JSON.parse(call('2001-03-20').content).length, 2, 'sent on query_date itself is found');
    assert.deepEqual([...seen.found], [VARIANCES, FOLLOW_UP]);
    const bad = call('2001-02-30');
    assert.equal(bad.valid, false);
    assert.match(bad.content, /^Error: Failed to search emails\.\nError message: query_date must be a date/);
  });

  test('read_email: the email as JSON, or "not found"; either way the id counts as read', () => {
    const seen = trace();
    const found = runEmailTool({ name: 'read_email', arguments: JSON.stringify({ message_id: OFFSITE }) }, db, seen);
    assert.match(
      found.content,
      /^\{"message_id": "<3\.JavaMail\.evans@thyme>", "date": "2001-01-15 08:00:00", "subject": "Note"/,
    );
    assert.match(
      found.content,
      /"bcc_addresses": \["pete\.davis@enron\.com"\], "body": "Offsite in Houston\.", "file_name": "x\/1\."\}$/,
    );
    const missing = runEmailTool({ name: 'read_email', arguments: '{"message_id": "<9>"}' }, db, seen);
    assert.equal(missing.content, 'Error: Email (message_id = <9>) not found.');
    assert.deepEqual([...seen.read], [OFFSITE, '<9>']);
    assert.equal(runEmailTool({ name: 'delete_email', arguments: '{}' }, db, seen).valid, false);
    assert.equal(runEmailTool({ name: 'read_email', arguments: 'not json' }, db, seen).valid, false);
  });
});

describe('the reward (upstream rubric: accuracy + format)', () => {
  const episode = (answer: string | null, sources: string[], over: Partial<{ found: string[]; read: string[] }> = {}) => ({
    final: answer === null ? null : { answer, sources },
    turns: 3,
    found: new Set(over.found ?? [VARIANCES]),
    read: new Set(over.read ?? [VARIANCES]),
  });
  const score = (e: ReturnType<typeof episode>, verdict: boolean | null, llmAsAJudge = true) =>
    emailSearchReward({
      episode: e,
      maxTurns: 10,
      messageIds: [VARIANCES],
      reference: 'Yes, hour 6.',
      llmAsAJudge,
      judge: async () => verdict,
    });

  test('right: 1 + 1 + 0.3 (right source) + 0.1/1 (one source) + 0.1·(1 − 3/10)', async () => {
    const scores = await score(episode('Yes', [VARIANCES]), true);
    assert.equal(scores.accuracy, 1);
    assert.ok(Math.abs((scores.format as number) - 1.47) < 1e-12, String(scores.format));
    const two = await score(episode('Yes', ['<x>', '<y>'], { found: [], read: [] }), true);
    assert.ok(Math.abs((two.format as number) - (1 + 0.05 + 0.07)) < 1e-12, String(two.format));
  });

  test('wrong: −1 plus 0.1 each for found, read and cited the right email; a judge failure counts as wrong', async () => {
    assert.deepEqual(await score(episode('No', [VARIANCES]), false), {
      accuracy: -1,
      format: 0.30000000000000004, // 0.1 · (1 + 1 + 1)
      found_right_email: 1,
      read_right_email: 1,
      sources_correct: 1,
      judge_failure: 0,
    });
    const failed = await score(episode('No', [], { read: [] }), null);
    assert.equal(failed.accuracy, -1);
    assert.equal(failed.format, 0.1);
    assert.equal(failed.judge_failure, 1);
  });

  test('no answer: −1; "I don\'t know" judged right: 0 + partial; without the judge: lower(answer) ⊆ lower(reference)', async () => {
    assert.deepEqual(await score(episode(null, []), true), { accuracy: 0, format: -1 });
    const unknown = await score(episode("I don't know", [], { found: [], read: [] }), true);
    assert.deepEqual([unknown.accuracy, unknown.format], [0, 0]);
    assert.deepEqual(await score(episode('HOUR 6', []), null, false), { accuracy: 1, format: 0 });
    assert.deepEqual(await score(episode('hour 7', []), null, false), { accuracy: 0, format: 0 });
  });

  test('the verdict is the one word true or false; neither or both is a failure (null)', () => {
    assert.equal(parseAcceptVerdict('true'), true);
    assert.equal(parseAcceptVerdict('**False**'), false);
    assert.equal(parseAcceptVerdict('accept: TRUE.'), true);
    assert.equal(parseAcceptVerdict(''), null);
    assert.equal(parseAcceptVerdict('untrue'), null);
    assert.equal(parseAcceptVerdict('true or false'), null);
  });

  test('reward_fn_args and the database path are checked, naming the key', () => {
    assert.deepEqual(emailJudgeOptions({ llm_as_a_judge: false }), {
      llmAsAJudge: false,
      judgeModel: '',
      maxTokens: 128,
      temperature: 0,
    });
    assert.throws(() => emailJudgeOptions({ llm_as_judge: true }), /reward_fn_args: unknown key 'llm_as_judge'/);
    assert.throws(() => emailJudgeOptions({ llm_as_a_judge: 'yes' }), /reward_fn_args\.llm_as_a_judge must be a boolean/);
    assert.throws(() => emailJudgeOptions({ max_tokens: 0 }), /'max_tokens' must be a positive integer/);
    const saved = process.env.DEFAULT_EMAIL_DB_PATH;
    try {
      delete process.env.DEFAULT_EMAIL_DB_PATH;
      assert.throws(
        () => emailDatabasePath({}, '/cfg'),
        /set DEFAULT_EMAIL_DB_PATH \(as upstream\) or workflow_args\.email_db_path/,
      );
      assert.throws(
        () => WORKFLOWS.get('email_search_workflow').checkArgs?.({ max_turns: 10 }),
        /needs the email database: set DEFAULT_EMAIL_DB_PATH/,
        'the pre-run check refuses a run that names no database',
      );
      process.env.DEFAULT_EMAIL_DB_PATH = 'data/e.db';
      assert.equal(emailDatabasePath({}, '/cfg'), join(process.cwd(), 'data/e.db'), 'as upstream: the working directory');
      assert.equal(emailDatabasePath({ email_db_path: 'e.db' }, '/cfg'), '/cfg/e.db', "workflow_args: the config's folder");
      assert.equal(emailDatabasePath({ email_db_path: '/abs/e.db' }, '/cfg'), '/abs/e.db');
    } finally {
      if (saved === undefined) delete process.env.DEFAULT_EMAIL_DB_PATH;
      else process.env.DEFAULT_EMAIL_DB_PATH = saved;
    }
    assert.throws(
      () => WORKFLOWS.get('email_search_workflow').checkArgs?.({ max_turns: 0 }),
      /workflow_args\.max_turns must be a positive integer/,
    );
  });
});

describe('email_search_workflow episodes', () => {
  const call = (name: string, args: unknown) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
  const SEARCH = call('search_emails', {
    inbox_address: 'pete.davis@enron.com',
    query_date: '2001-03-16',
    keywords: ['variances', 'hour'],
  });
  const READ = call('read_email', { message_id: VARIANCES });
  const ANSWER = call('generate_response', { answer: 'Yes, for hour 6.', sources: [VARIANCES] });
  const assistantTurns = (prompt: string) => prompt.split('<|im_start|>assistant\n').length - 2;

  /** An auxiliary judge answering `verdict`; `asked` holds the prompts it was asked, each asked for at most 128 tokens. */
  function judge(verdict: string): { models: AuxiliaryModels; readonly asked: string[] } {
    const { models, calls } = fakeJudge(() => verdict);
    return {
      models,
      get asked() {
        for (const call of calls) assert.equal(call.max_tokens, 128);
        return calls.map(judgePrompt);
      },
    };
  }

  async function play(policy: (prompt: string) => string, auxiliaryModels: AuxiliaryModels, maxTurns = 10) {
    const backend = new ScriptedBackend(fixtureTokenizer(), policy);
    const handle = new EngineModelHandle(backend, { modelVersion: 1 });
    const task: Task = {
      id: 'q0',
      taskset: 'enron',
      index: 0,
      prompt: 'Were there any variances detected for hour 6 on 3/9/01?',
      response: 'Yes, variances were detected for hour 6.',
      raw: { message_ids: [VARIANCES], inbox_address: 'pete.davis@enron.com', query_date: '2001-03-16T00:00:00.000Z' },
      workflowArgs: { max_turns: maxTurns, email_db_path: dbPath },
      rewardFnArgs: { llm_as_a_judge: true },
      rolloutArgs: { temperature: 1, max_tokens: 300 },
    };
    const context: WorkflowContext = {
      task,
      model: handle,
      repeatTimes: 1,
      runIdBase: 0,
      seed: 3,
      signal: new AbortController().signal,
      isEval: false,
      auxiliaryModels,
    };
    try {
      const experiences = await WORKFLOWS.get('email_search_workflow').run(context);
      return { experiences, prompts: backend.prompts };
    } finally {
      await handle.close();
    }
  }

  test('search, read, answer with the right source, judged right: reward 2.47, one experience', async () => {
    const accepting = judge('true');
    const { experiences, prompts } = await play(
      (prompt) => [SEARCH, READ, ANSWER][assistantTurns(prompt)] ?? 'oops',
      accepting.models,
    );
    assert.equal(experiences.length, 1);
    const [experience] = experiences;
    assert.ok(Math.abs((experience?.reward as number) - 2.47) < 1e-12, String(experience?.reward));
    assert.deepEqual(experience?.metrics, {
      accuracy: 1,
      format: experience?.metrics?.format,
      found_right_email: 1,
      read_right_email: 1,
      sources_correct: 1,
      judge_failure: 0,
      actual_turns: 3,
      tool_calls: 3,
      invalid_tool_calls: 0,
    });
    assert.match(prompts[0] as string, /You have up to 10 turns/);
    assert.match(prompts[0] as string, /The user's email address is pete\.davis@enron\.com\nToday's date is 2001-03-16\n/);
    assert.match(prompts[1] as string, /\[\{"message_id": "<1\.JavaMail\.evans@thyme>", "snippet": /, 'the search result');
    assert.match(prompts[2] as string, /"body": "Variances detected for hour 6/, 'the email read');
    assert.equal(accepting.asked.length, 1);
    assert.match(
      accepting.asked[0] as string,
      /user: Question: Were there any variances detected for hour 6 on 3\/9\/01\?\nReference answer: Yes, variances were detected for hour 6\.\nAI answer: Yes, for hour 6\.$/,
    );
  });

  test('a judge answer without a verdict: counted as a failure, the answer as wrong (−1 + 0.3)', async () => {
    const unsure = judge('maybe');
    const { experiences } = await play((prompt) => [SEARCH, READ, ANSWER][assistantTurns(prompt)] ?? 'oops', unsure.models);
    assert.ok(Math.abs((experiences[0]?.reward as number) + 0.7) < 1e-12, String(experiences[0]?.reward));
    assert.equal(experiences[0]?.metrics?.judge_failure, 1);
  });

  test('text without a tool call is answered by a hint; no answer in max_turns: reward −1, the judge not asked', async () => {
    const accepting = judge('true');
    const { experiences, prompts } = await play(() => 'Let me think.', accepting.models, 2);
    assert.equal(prompts.length, 2);
    assert.match(prompts[1] as string, new RegExp(`<\\|im_start\\|>user\\n${GENERATE_RESPONSE_HINT}`));
    assert.equal(experiences[0]?.reward, -1);
    assert.deepEqual(experiences[0]?.metrics, { accuracy: 0, format: -1, actual_turns: 2, tool_calls: 0, invalid_tool_calls: 0 });
    assert.equal(accepting.asked.length, 0);
  });
});
