// A JSONL file read incrementally: each refresh reads only the bytes appended since the last one and parses the
// complete lines among them (a line still being written waits for its newline). A file that shrank or was replaced
// (a resumed run truncates metrics.jsonl by writing a new file and renaming it over the old one) is read afresh.
// Opens are read-only and closed at once, so the run that writes the file never waits for us.
import { open, stat } from 'node:fs/promises';

export type LineParser<T> = (text: string, file: string, warnings: string[]) => T[];

export type TailChange = 'unchanged' | 'appended' | 'reset';

export class JsonlTail<T> {
  #rows: T[] = [];
  #offset = 0;
  #inode = -1;
  /** Bytes after the last newline: the start of a line not yet complete. */
  #pending: Buffer = Buffer.alloc(0);
  /** Problems met while parsing (bad lines), newest last; at most 100 kept. */
  readonly warnings: string[] = [];

  constructor(
    readonly file: string,
    readonly parse: LineParser<T>,
  ) {}

  get rows(): readonly T[] {
    return this.#rows;
  }

  #reading: Promise<unknown> | null = null;
  #queued: Promise<{ change: TailChange; added: T[] }> | null = null;

  /**
   * Reads what was appended; `added` are the rows parsed now (all rows after a reset). Reads never overlap (two
   * reads from the same offset would add the same rows twice): a call during a read waits for it and then reads
   * once more, shared by every call that came meanwhile, so bytes appended during a read are not missed.
   */
  refresh(): Promise<{ change: TailChange; added: T[] }> {
    if (this.#reading === null) return this.#start();
    if (this.#queued === null)
      this.#queued = this.#reading.then(() => {
        this.#queued = null;
        return this.#start();
      });
    return this.#queued;
  }

  #start(): Promise<{ change: TailChange; added: T[] }> {
    const reading = this.#read().finally(() => {
      if (this.#reading === reading) this.#reading = null;
    });
    this.#reading = reading;
    return reading;
  }

  async #read(): Promise<{ change: TailChange; added: T[] }> {
    let info: Awaited<ReturnType<typeof stat>>;
    try {
      info = await stat(this.file);
    } catch {
      if (this.#rows.length === 0 && this.#offset === 0) return { change: 'unchanged', added: [] };
      this.#reset(-1);
      return { change: 'reset', added: [] };
    }
    let change: TailChange = 'unchanged';
    if (info.ino !== this.#inode || info.size < this.#offset) {
      if (this.#inode !== -1) change = 'reset';
      this.#reset(info.ino);
    }
    if (info.size === this.#offset) return { change, added: [] };
    const handle = await open(this.file, 'r');
    let chunk: Buffer;
    try {
      chunk = Buffer.alloc(info.size - this.#offset);
      const { bytesRead } = await handle.read(chunk, 0, chunk.length, this.#offset);
      chunk = chunk.subarray(0, bytesRead);
    } finally {
      await handle.close();
    }
    this.#offset += chunk.length;
    const bytes = this.#pending.length ? Buffer.concat([this.#pending, chunk]) : chunk;
    const end = bytes.lastIndexOf(0x0a);
    if (end < 0) {
      this.#pending = bytes;
      return { change, added: [] };
    }
    this.#pending = Buffer.from(bytes.subarray(end + 1));
    const warnings: string[] = [];
    const added = this.parse(bytes.subarray(0, end + 1).toString('utf8'), this.file, warnings);
    this.warnings.push(...warnings);
    if (this.warnings.length > 100) this.warnings.splice(0, this.warnings.length - 100);
    for (const row of added) this.#rows.push(row);
    return { change: change === 'reset' ? 'reset' : added.length ? 'appended' : 'unchanged', added };
  }

  #reset(inode: number): void {
    this.#rows = [];
    this.#offset = 0;
    this.#pending = Buffer.alloc(0);
    this.#inode = inode;
  }
}
