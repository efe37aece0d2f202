// JSON Lines for datasets and experience dumps: one JSON value per line.
//   - Reads stream the file line by line (large files never sit in memory whole); a bad line is an error that
//     names file:line and, for experiences, the field (validateExperience's words).
//   - Writes append whole lines with one write() per batch on a file opened for appending, so several writers and
//     restarts only ever add lines. A file whose last line was cut off by a crash gets a newline first, so the torn
//     line stays alone (and is reported, by line number, when read).
import { mkdirSync, writeFileSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { openRegularFileHandle } from '../../util/index.js';
import { type Experience, validateExperience } from '../experience.js';

export class JsonlError extends Error {
  constructor(
    readonly file: string,
    readonly line: number,
    detail: string,
  ) {
    super(`${file}:${line}: ${detail}`);
    this.name = 'JsonlError';
  }
}

export interface JsonlLine {
  /** 1-based line number in the file. */
  line: number;
  value: unknown;
}

/** A UTF-8 byte order mark (as Windows editors write one), decoded: not part of the data. */
export const BOM = '\uFEFF';

/** `text` without a leading byte order mark. */
export const stripBom = (text: string): string => (text.startsWith(BOM) ? text.slice(1) : text);

/**
 * Streams the JSON values of a JSONL file with their line numbers; blank lines and a leading BOM are skipped.
 * Anything but a regular file (a FIFO would block the read for ever) is a FileOpenError naming it.
 */
export async function* readJsonl(file: string): AsyncGenerator<JsonlLine> {
  const stream = (await openRegularFileHandle(file)).createReadStream({ encoding: 'utf8' });
  const lines = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY });
  let line = 0;
  try {
    for await (const raw of lines) {
      line++;
      const text = line === 1 ? stripBom(raw) : raw;
      if (text.trim() === '') continue;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (error) {
        throw new JsonlError(file, line, `invalid JSON: ${(error as Error).message}`);
      }
      yield { line, value };
    }
  } finally {
    lines.close();
    stream.destroy();
  }
}

/** Checks one parsed line as an Experience; throws JsonlError naming file:line and the field. */
export function parseExperienceLine(file: string, line: number, value: unknown): Experience {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new JsonlError(
      file,
      line,
      `an experience must be a JSON object, got ${Array.isArray(value) ? 'an array' : typeof value}`,
    );
  }
  const experience = value as Experience;
  const problems = validateExperience(experience);
  if (problems.length > 0) throw new JsonlError(file, line, problems.join('; '));
  return experience;
}

/** Streams the experiences of a JSONL dump, validating each. */
export async function* readExperiencesJsonl(file: string): AsyncGenerator<Experience> {
  for await (const { line, value } of readJsonl(file)) yield parseExperienceLine(file, line, value);
}

/** Writes each named set of rows as DIR/<name>.jsonl, replacing the file (a dataset's splits: sft, train, eval …). */
export function writeJsonlSets<Sets extends { [K in keyof Sets]: readonly unknown[] }>(dir: string, sets: Sets): void {
  mkdirSync(dir, { recursive: true });
  for (const [name, rows] of Object.entries(sets) as [string, readonly unknown[]][]) {
    writeFileSync(join(dir, `${name}.jsonl`), `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  }
}

/** Appends JSON values as lines to a file (created if missing). */
export class JsonlWriter {
  readonly file: string;
  #handle: FileHandle | null = null;
  #opening: Promise<FileHandle> | null = null;
  #needsNewline = false;

  constructor(file: string) {
    this.file = file;
  }

  /** Appends the values, one line each, in one write; resolves when the OS has the bytes. */
  async write(values: readonly unknown[]): Promise<void> {
    if (values.length === 0) return;
    const handle = await this.#open();
    let text = values.map((v) => JSON.stringify(v)).join('\n');
    text = `${this.#needsNewline ? '\n' : ''}${text}\n`;
    this.#needsNewline = false;
    await handle.write(text);
  }

  /** Flushes to disk (fsync). */
  async sync(): Promise<void> {
    if (this.#handle !== null) await this.#handle.sync();
  }

  async close(): Promise<void> {
    const handle = this.#handle ?? (this.#opening === null ? null : await this.#opening);
    this.#handle = null;
    this.#opening = null;
    if (handle !== null) await handle.close();
  }

  #open(): Promise<FileHandle> {
    if (this.#handle !== null) return Promise.resolve(this.#handle);
    this.#opening ??= (async () => {
      const handle = await open(this.file, 'a+');
      const { size } = await handle.stat();
      if (size > 0) {
        const last = Buffer.alloc(1);
        await handle.read(last, 0, 1, size - 1);
        this.#needsNewline = last[0] !== 0x0a;
      }
      this.#handle = handle;
      return handle;
    })();
    return this.#opening;
  }
}

/** Appends experiences to a JSONL dump after validating them (a bad record is refused, naming its eid and field). */
export class JsonlExperienceWriter {
  readonly #writer: JsonlWriter;

  constructor(file: string) {
    this.#writer = new JsonlWriter(file);
  }

  get file(): string {
    return this.#writer.file;
  }

  async write(experiences: readonly Experience[]): Promise<number> {
    for (const e of experiences) {
      const problems = validateExperience(e);
      if (problems.length > 0) throw new Error(`${this.file}: experience '${String(e.eid)}': ${problems.join('; ')}`);
    }
    await this.#writer.write(experiences);
    return experiences.length;
  }

  close(): Promise<void> {
    return this.#writer.close();
  }
}
