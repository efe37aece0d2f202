// `trinity buffer view PATH`: prints the experiences of a shared buffer (an SQLite file or a PostgreSQL database) or
// a JSONL dump as a table.
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { Experience } from '../rft/experience.js';
import { readExperiencesJsonl } from '../rft/buffer/jsonl.js';
import { isPostgresUrl } from '../rft/buffer/postgres.js';
import { displayBufferPath, openSharedBuffer } from '../rft/buffer/shared.js';
import { formatExperiences, type ViewerTokenizer } from '../rft/buffer/viewer.js';
import { checkRegularFile } from '../util/index.js';

export const BUFFER_HELP = `trinity buffer view PATH [options]
  Prints the experiences in a buffer as a table: eid, task, reward, mean advantage, response length, the decoded
  response (with --tokenizer) and the token ids (prompt | response). Reading does not move any reader's cursor.

  PATH                 a SQLite buffer (.db, .sqlite), a PostgreSQL buffer (postgresql://user:pass@host:port/db),
                       or an experience dump (.jsonl)
  --limit N            experiences shown, from the start (default 20)
  --offset N           skip the first N experiences (default 0)
  --table NAME         the buffer's table: its experience_buffer.name (default: the only buffer in PATH)
  --tokenizer DIR      model folder with tokenizer.json, to decode responses
`;

export interface CommandOutput {
  write(text: string): unknown;
}

/** Runs `trinity buffer ...`; output goes to `out` (default stdout), usage errors to stderr. Returns the exit code. */
export async function bufferCommand(args: string[], out: CommandOutput = process.stdout): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === '--help' || sub === '-h' || sub === 'help') {
    out.write(BUFFER_HELP);
    return sub === undefined ? 1 : 0;
  }
  if (sub !== 'view') {
    process.stderr.write(`trinity buffer: unknown subcommand '${sub}'\n\n${BUFFER_HELP}`);
    return 2;
  }
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      limit: { type: 'string', default: '20' },
      offset: { type: 'string', default: '0' },
      table: { type: 'string' },
      tokenizer: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    out.write(BUFFER_HELP);
    return 0;
  }
  const [path] = positionals;
  if (path === undefined || positionals.length > 1) throw new Error('buffer view: give exactly one PATH (see --help)');
  const limit = count('limit', values.limit, 1);
  const offset = count('offset', values.offset, 0);
  let tokenizer: ViewerTokenizer | undefined;
  if (values.tokenizer !== undefined) {
    const { Tokenizer } = await import('../tokenizer/index.js');
    tokenizer = Tokenizer.load(values.tokenizer);
  }
  let experiences: Experience[];
  let total: number;
  if (path.endsWith('.jsonl')) {
    experiences = [];
    total = 0;
    for await (const e of readExperiencesJsonl(path)) {
      if (total >= offset && experiences.length < limit) experiences.push(e);
      total++;
    }
  } else if (/\.(db|sqlite3?)$/.test(path) || isPostgresUrl(path)) {
    if (!isPostgresUrl(path) && existsSync(path)) checkRegularFile(path); // SQLite's open of a FIFO blocks for ever
    const buffer = await openSharedBuffer({
      path,
      ...(values.table !== undefined ? { table: values.table } : {}),
      readonly: true,
    });
    try {
      total = await buffer.total;
      experiences = (await buffer.peek({ offset, limit })).map((row) => row.experience);
    } finally {
      await buffer.close();
    }
  } else {
    throw new Error(`buffer view: '${path}' is neither a .db/.sqlite buffer nor a .jsonl dump (nor a postgresql:// URL)`);
  }
  const first = Math.min(offset + 1, total);
  out.write(`${displayBufferPath(path)}: ${total} experiences; showing ${first}-${offset + experiences.length}\n`);
  out.write(formatExperiences(experiences, tokenizer === undefined ? {} : { tokenizer }));
  return 0;
}

function count(flag: string, value: string, min: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${flag} must be an integer >= ${min}, got '${value}'`);
  return n;
}
