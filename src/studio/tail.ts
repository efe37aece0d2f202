// A JSONL file read incrementally: each refresh reads only the bytes appended since the last one and parses the
// complete lines among them (a line still being written waits for its newline). A file that shrank or was replaced
// (a resumed run truncates metrics.jsonl by writing a new file and renaming it over the old one) is read afresh.
// Opens are read-only and closed at once, so the run that writes the file never waits for us. The file is opened
// inside the runs folder only (./paths.ts: no link out of it is followed) and read in bounded chunks
// (src/rft/report/jsonl-chunks.ts); a file over the size limit is not read: refresh() throws RunFileTooLargeError,
// which the run index shows on the run.
import {
  type ChunkLimits,
  checkRunFileSize,
  LineAssembler,
  type LineParser,
  readChunkedLines,
} from '../rft/report/jsonl-chunks.js';
import { openUnderRoot } from './paths.js';

export type { LineParser } from '../rft/report/jsonl-chunks.js';

export type TailChange = 'unchanged' | 'appended' | 'reset';

export class JsonlTail<T> {
  #rows: T[] = [];
  #offset = 0;
  #inode = -1;
  /** Bytes after the last newline wait there: the start of a line not yet complete. */
  #lines: LineAssembler;
  /** Problems met while parsing (bad lines), newest last; at most 100 kept. */
  readonly warnings: string[] = [];

  /** `file` is an absolute path below the runs folder `root` (a real path). */
  constructor(
    readonly root: string,
    readonly file: string,
    readonly parse: LineParser<T>,
    readonly limits: ChunkLimits = {},
  ) {
    this.#lines = new LineAssembler(file, limits.maxLineBytes);
  }

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
    let handle: Awaited<ReturnType<typeof openUnderRoot>>;
    try {
      handle = await openUnderRoot(this.root, this.file);
    } catch {
      // not there (yet, or removed), or refused: nothing to show
      if (this.#rows.length === 0 && this.#offset === 0) return { change: 'unchanged', added: [] };
      this.#reset(-1);
      return { change: 'reset', added: [] };
    }
    try {
      const info = await handle.stat();
      let change: TailChange = 'unchanged';
      if (info.ino !== this.#inode || info.size < this.#offset) {
        if (this.#inode !== -1) change = 'reset';
        this.#reset(info.ino);
      }
      checkRunFileSize(this.file, info.size, this.limits);
      if (info.size === this.#offset) return { change, added: [] };
      const warnings: string[] = [];
      const { rows: added, bytesRead } = await readChunkedLines(
        handle,
        this.#offset,
        info.size,
        this.#lines,
        this.parse,
        warnings,
        this.limits,
      );
      this.#offset += bytesRead;
      this.warnings.push(...warnings);
      if (this.warnings.length > 100) this.warnings.splice(0, this.warnings.length - 100);
      for (const row of added) this.#rows.push(row);
      return { change: change === 'reset' ? 'reset' : added.length ? 'appended' : 'unchanged', added };
    } finally {
      await handle.close();
    }
  }

  #reset(inode: number): void {
    this.#rows = [];
    this.#offset = 0;
    this.#lines = new LineAssembler(this.file, this.limits.maxLineBytes);
    this.#inode = inode;
  }
}
