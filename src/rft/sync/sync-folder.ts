// Weights between processes through the job folder (a trainer process in mode train, explorer processes in mode
// explore, `trinity serve` following a run):
//
//   <jobDir>/sync/version_<N>/     the weights of version N (a Hugging Face folder; written as .tmp, then renamed;
//                                  the newest two are kept, so a reader loading the previous one is not cut off)
//   <jobDir>/sync/adapter_<N>/     a LoRA run on an external pool: the adapter of version N (PEFT's format), which
//                                  every server loads by name (vLLM's /v1/load_lora_adapter); no pointer names it
//   <jobDir>/sync/latest.json      {version, dir}: the newest complete version (replaced atomically)
//   <jobDir>/sync/request.json     explorer_driven: an explorer asks for the trainer's newest weights; the trainer
//                                  removes it when it answered
//   <jobDir>/sync/finished         the trainer stopped (its last step): explorers stop waiting for more weights
//
// The explorer side polls these files (the only event two processes share here is the file system); every wait has
// the synchronizer's timeout. With a PostgreSQL buffer the pointer, the requests and the finished marker live in the
// database instead (./postgres-channel.ts); the version folders are written here either way.
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  type ProcessReceiverOptions,
  type ProcessWeightChannel,
  type SyncPointer,
  SyncTimeoutError,
  type WeightPublisher,
  type WeightReceiver,
  type WeightSaver,
  type WeightSource,
} from './weight-channel.js';

const POLL_MS = 200;

export function syncFolder(jobDir: string): string {
  return join(jobDir, 'sync');
}

export function readSyncPointer(jobDir: string): SyncPointer | null {
  const file = join(syncFolder(jobDir), 'latest.json');
  if (!existsSync(file)) return null;
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as SyncPointer;
  } catch {
    return null; // being replaced: read it next time
  }
}

function writeSyncPointer(jobDir: string, version: number, dir: string): void {
  const file = join(syncFolder(jobDir), 'latest.json');
  writeFileSync(`${file}.tmp`, JSON.stringify({ version, dir }));
  renameSync(`${file}.tmp`, file);
}

/**
 * Saves the trainer's weights as `<jobDir>/sync/version_<version>` (an absolute path, returned) and removes the
 * version folders other than it and `previous` (a reader may be loading that one as the pointer moves).
 */
export async function saveSyncVersion(
  trainer: WeightSaver,
  jobDir: string,
  version: number,
  previous: string | undefined,
): Promise<string> {
  return saveVersionFolder((dir) => trainer.saveWeights(dir), jobDir, 'version', version, previous);
}

/**
 * `save` writes `<jobDir>/sync/<prefix>_<version>` (as .tmp, then renamed; an absolute path, returned); the other
 * `<prefix>_<N>` folders but `previous` are removed.
 */
async function saveVersionFolder(
  save: (dir: string) => Promise<void>,
  jobDir: string,
  prefix: string,
  version: number,
  previous: string | undefined,
): Promise<string> {
  const folder = resolve(syncFolder(jobDir));
  const dir = join(folder, `${prefix}_${version}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(folder, { recursive: true });
  await save(`${dir}.tmp`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(`${dir}.tmp`, dir);
  const keep = new Set([dir, previous === undefined ? undefined : resolve(previous)]);
  const pattern = new RegExp(`^${prefix}_\\d+$`);
  for (const name of readdirSync(folder)) {
    const path = join(folder, name);
    if (pattern.test(name) && !keep.has(path)) rmSync(path, { recursive: true, force: true });
  }
  return dir;
}

/**
 * A LoRA run's weights for an external pool: the trainer's adapter alone (PEFT format) as
 * `<jobDir>/sync/adapter_<version>`, the previous adapter folder kept (a server may still be loading it). The sync
 * pointer (latest.json) is left alone: it names full-weight folders, which followers load as a model.
 */
export function publishAdapterToSyncFolder(
  trainer: Pick<WeightSource, 'saveAdapter'>,
  jobDir: string,
  version: number,
  previous: string | undefined,
): Promise<string> {
  return saveVersionFolder((dir) => trainer.saveAdapter(dir), jobDir, 'adapter', version, previous);
}

/** Saves the trainer's weights as version `version` and points latest.json at them; returns the folder. */
export async function publishToSyncFolder(trainer: WeightSaver, jobDir: string, version: number): Promise<string> {
  const dir = await saveSyncVersion(trainer, jobDir, version, readSyncPointer(jobDir)?.dir);
  writeSyncPointer(jobDir, version, dir);
  return dir;
}

const requestFile = (jobDir: string) => join(syncFolder(jobDir), 'request.json');
const finishedFile = (jobDir: string) => join(syncFolder(jobDir), 'finished');

/** Mode train: a trainer process publishing for explorer processes. */
export class FolderWeightPublisher implements WeightPublisher {
  readonly #trainer: WeightSaver;
  readonly #jobDir: string;

  constructor(trainer: WeightSaver, jobDir: string) {
    this.#trainer = trainer;
    this.#jobDir = jobDir;
    rmSync(finishedFile(jobDir), { force: true }); // a restarted trainer: explorers wait for it again
  }

  async publish(version: number): Promise<void> {
    await publishToSyncFolder(this.#trainer, this.#jobDir, version);
  }

  requestPending(): boolean {
    return existsSync(requestFile(this.#jobDir));
  }

  answerRequest(): void {
    rmSync(requestFile(this.#jobDir), { force: true });
  }

  finish(lastStep: number): void {
    mkdirSync(syncFolder(this.#jobDir), { recursive: true });
    writeFileSync(finishedFile(this.#jobDir), `${lastStep}\n`);
  }
}

/** Mode train fed by a dataset (SFT, DPO): nobody explores, nothing is published. */
export const NO_PUBLISHER: WeightPublisher = {
  publish: async () => {},
  requestPending: () => false,
  answerRequest: () => {},
  finish: () => {},
};

export interface FolderReceiverOptions extends ProcessReceiverOptions {
  jobDir: string;
}

/** Mode explore: an explorer process loading what the trainer process published. */
export class FolderWeightReceiver implements WeightReceiver {
  readonly #options: FolderReceiverOptions;
  #version: number;

  constructor(options: FolderReceiverOptions) {
    this.#options = options;
    this.#version = options.startVersion;
  }

  get version(): number {
    return this.#version;
  }

  /** The trainer process wrote its finished marker since this explorer started (an older one is a stopped run's). */
  get trainerFinished(): boolean {
    const file = finishedFile(this.#options.jobDir);
    return existsSync(file) && statSync(file).mtimeMs >= this.#startedAt;
  }
  readonly #startedAt = Date.now();

  /** Loads the newest published weights when they are newer than the engine's. */
  async #follow(): Promise<void> {
    const pointer = readSyncPointer(this.#options.jobDir);
    if (pointer === null || pointer.version <= this.#version) return;
    const load = async () => {
      if (pointer.version <= this.#version) return; // a swap asked earlier loaded it meanwhile
      await this.#options.engine.syncWeightsFromDir(pointer.dir, { timeoutMs: this.#options.timeoutMs });
      this.#version = pointer.version;
      this.#options.onVersion?.(pointer.version);
    };
    // fully_async: between two model calls, mid-step; otherwise the explorer is between steps here
    await (this.#options.swapGate ? this.#options.swapGate.swap(load) : load());
  }

  async #poll(done: () => boolean, what: string): Promise<void> {
    const { timeoutMs, signal } = this.#options;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      await this.#follow();
      if (done()) return;
      if (signal?.aborted) throw new Error(`stopped while waiting for ${what}`);
      if (Date.now() > deadline)
        throw new SyncTimeoutError(`timed out after ${timeoutMs} ms waiting for ${what} in ${syncFolder(this.#options.jobDir)}`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  waitForVersion(version: number, what: string): Promise<void> {
    const finished = finishedFile(this.#options.jobDir);
    return this.#poll(() => {
      if (this.#version >= version) return true;
      if (this.trainerFinished)
        throw new Error(
          `the trainer process finished (${readFileSync(finished, 'utf8').trim() || 'its last step'} ` +
            `in ${syncFolder(this.#options.jobDir)}) without publishing ${what}`,
        );
      return false;
    }, `${what} (have weights version ${this.#version})`);
  }

  async requestWeights(what: string): Promise<void> {
    const { jobDir } = this.#options;
    await this.#follow();
    mkdirSync(syncFolder(jobDir), { recursive: true });
    writeFileSync(requestFile(jobDir), JSON.stringify({ after: this.#version }));
    await this.#poll(() => !existsSync(requestFile(jobDir)) || this.trainerFinished, what);
    await this.#follow();
  }

  withWeights<T>(work: () => Promise<T>): Promise<T> {
    // this process updates its weights between steps, in waitForVersion / requestWeights (fully_async: through the
    // gate, from followPublishedWeights)
    return work();
  }
}

/** The job folder as the meeting point of a trainer process and its explorer processes (an SQLite buffer). */
export class SyncFolderChannel implements ProcessWeightChannel {
  readonly #jobDir: string;

  constructor(jobDir: string) {
    this.#jobDir = jobDir;
  }

  get location(): string {
    return syncFolder(this.#jobDir);
  }

  async latest(): Promise<SyncPointer | null> {
    return readSyncPointer(this.#jobDir);
  }

  publisher(trainer: WeightSaver): WeightPublisher {
    return new FolderWeightPublisher(trainer, this.#jobDir);
  }

  receiver(options: ProcessReceiverOptions): WeightReceiver {
    return new FolderWeightReceiver({ ...options, jobDir: this.#jobDir });
  }

  async close(): Promise<void> {}
}
