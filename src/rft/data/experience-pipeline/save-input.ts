// data_processor.experience_pipeline.save_input: every explore step's experiences as they came from the workflows,
// before any operator, in a JSONL file (one experience per line) or a SQLite file (`sqlite:///path`, or a path ending
// in .db / .sqlite; table experience_pipeline_input: id, step, eid, task_id, reward, data = the experience as JSON).
// A resumed run explores the steps after its checkpoint again, so opening drops what was saved for steps > startStep;
// an explorer process (mode explore) keeps exactly the steps it finished (its claims), the others are explored again.
// Several explorer processes each write their own file: explorer `a` writes `raw.a.jsonl` for `raw.jsonl` (the
// default-named explorer keeps the file's own name), so no two processes write one file.
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import type Database from 'better-sqlite3';
import type { Experience } from '../../experience.js';
import { openSqliteFile } from '../../store/sqlite.js';

export interface InputRecorder {
  readonly path: string;
  record(step: number, experiences: readonly Experience[]): void;
  close(): void;
}

/** The file a save path names: `sqlite:///<file>` → <file> (as the SQLite buffers read it), else the path itself. */
export function saveInputFile(spec: string): { path: string; format: 'jsonl' | 'sqlite' } {
  if (spec.startsWith('sqlite:///')) return { path: spec.slice('sqlite:///'.length), format: 'sqlite' };
  const ext = extname(spec).toLowerCase();
  if (ext === '.jsonl') return { path: spec, format: 'jsonl' };
  if (ext === '.db' || ext === '.sqlite') return { path: spec, format: 'sqlite' };
  throw new Error(
    `data_processor.experience_pipeline.input_save_path '${spec}': expected a .jsonl file, a .db/.sqlite file or a sqlite:/// URL`,
  );
}

/**
 * The save path of explorer `explorer` among several explorer processes: its name before the file's extension
 * (`raw.jsonl` → `raw.a.jsonl`, `sqlite:///x/out.db` → `sqlite:///x/out.a.db`).
 */
export function explorerSavePath(spec: string, explorer: string): string {
  const { path } = saveInputFile(spec); // checks the spec
  const ext = extname(path);
  const named = join(dirname(path), `${basename(path, ext)}.${explorer}${ext}`);
  return spec.startsWith('sqlite:///') ? `sqlite:///${named}` : named;
}

/**
 * Opens the save file; `keep` says which saved steps stay: a number keeps steps <= it (a run resumed at that step),
 * a set exactly those steps (an explorer process's finished steps).
 */
export function openInputRecorder(spec: string, keep: number | ReadonlySet<number>): InputRecorder {
  const { path, format } = saveInputFile(spec);
  mkdirSync(dirname(path), { recursive: true });
  const kept = typeof keep === 'number' ? (step: number) => step <= keep : (step: number) => keep.has(step);
  return format === 'jsonl' ? new JsonlRecorder(path, kept) : new SqliteRecorder(path, kept);
}

const withStep = (step: number, e: Experience): Experience => (e.info.step === step ? e : { ...e, info: { ...e.info, step } });

class JsonlRecorder implements InputRecorder {
  constructor(
    readonly path: string,
    keepStep: (step: number) => boolean,
  ) {
    if (!existsSync(path)) return;
    const kept = readFileSync(path, 'utf8')
      .split('\n')
      .filter((line) => {
        if (line.trim() === '') return false;
        try {
          const step = (JSON.parse(line) as Experience).info?.step;
          return typeof step === 'number' && keepStep(step);
        } catch {
          return false; // a line cut short by a kill
        }
      });
    writeFileSync(`${path}.tmp`, kept.length ? `${kept.join('\n')}\n` : '');
    renameSync(`${path}.tmp`, path);
  }

  record(step: number, experiences: readonly Experience[]): void {
    if (experiences.length === 0) return;
    appendFileSync(this.path, `${experiences.map((e) => JSON.stringify(withStep(step, e))).join('\n')}\n`);
  }

  close(): void {}
}

class SqliteRecorder implements InputRecorder {
  readonly #db: Database.Database;
  readonly #insert: Database.Statement;

  constructor(
    readonly path: string,
    keepStep: (step: number) => boolean,
  ) {
    this.#db = openSqliteFile(path, { wal: true });
    this.#db.exec(
      'CREATE TABLE IF NOT EXISTS experience_pipeline_input (id INTEGER PRIMARY KEY AUTOINCREMENT, step INTEGER NOT NULL, ' +
        'eid TEXT, task_id TEXT, reward REAL, data TEXT NOT NULL)',
    );
    const steps = this.#db.prepare('SELECT DISTINCT step FROM experience_pipeline_input').all() as { step: number }[];
    const drop = this.#db.prepare('DELETE FROM experience_pipeline_input WHERE step = ?');
    this.#db.transaction(() => {
      for (const { step } of steps) if (!keepStep(step)) drop.run(step);
    })();
    this.#insert = this.#db.prepare(
      'INSERT INTO experience_pipeline_input (step, eid, task_id, reward, data) VALUES (?, ?, ?, ?, ?)',
    );
  }

  record(step: number, experiences: readonly Experience[]): void {
    this.#db.transaction(() => {
      for (const e of experiences)
        this.#insert.run(step, e.eid, e.info.taskId ?? null, e.reward ?? null, JSON.stringify(withStep(step, e)));
    })();
  }

  close(): void {
    this.#db.close();
  }
}
