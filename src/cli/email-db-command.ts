// `trinity email-db DATASET --out FILE`: writes the email database of the email_search example (Trinity-RFT's
// grpo_email_search) from the Enron email dataset on disk, the same file upstream's prepare_data.py writes from the
// hub (src/rft/workflow/agents/email-db-write.ts). The workflow finds it through DEFAULT_EMAIL_DB_PATH.
import { parseArgs } from 'node:util';
import type { CommandOutput } from './buffer-command.js';

export const EMAIL_DB_HELP = `trinity email-db DATASET --out FILE
  Writes the SQLite database (full-text search over subject and body) that email_search_workflow searches, from the
  Enron email dataset on disk: a folder or file with the columns of the hub's corbt/enron-emails (message_id,
  subject, from, to, cc, bcc, date, body, file_name), parquet as the hub serves it, JSONL or JSON; its 'train' split.
  The same tables, filters (body over 5000 characters, over 30 recipients, duplicates of subject + body + sender
  are left out) and indexes as upstream's prepare_data.py: a database either wrote serves the workflow. Nothing is
  downloaded. Then: export DEFAULT_EMAIL_DB_PATH=FILE.

  DATASET        the dataset: a folder or file, a hub cache folder, or the hub id corbt/enron-emails when it is in
                 the local Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)
  --out FILE     the database to write (replaced when complete)
`;

/** Runs `trinity email-db ...`; returns the exit code. */
export async function emailDbCommand(args: string[], out: CommandOutput = process.stdout): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { out: { type: 'string' }, help: { type: 'boolean' } },
  });
  if (values.help) {
    out.write(EMAIL_DB_HELP);
    return 0;
  }
  const [dataset] = positionals;
  if (dataset === undefined || positionals.length > 1 || values.out === undefined) {
    process.stderr.write(`trinity email-db: give one DATASET and --out FILE\n\n${EMAIL_DB_HELP}`);
    return 2;
  }
  const { writeEmailDatabase } = await import('../rft/workflow/agents/email-db-write.js');
  const counts = await writeEmailDatabase(dataset, values.out);
  out.write(
    `wrote ${values.out}: ${counts.inserted} emails (left out: ${counts.skippedByFilters} by the length and ` +
      `recipient filters, ${counts.duplicates} duplicates)\nexport DEFAULT_EMAIL_DB_PATH=${values.out}\n`,
  );
  return 0;
}
