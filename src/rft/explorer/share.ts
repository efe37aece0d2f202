// Mode explore's share of a stage's explore steps (several explorer processes, each with its own explorer.name, on one
// buffer): the steps come from task claims (./task-claims.ts), their tasks from a task scheduler every explorer runs
// the same way, and each step's experiences go to the buffer together with the step's finished marker.
//
//   claim step g ─▶ deal batch g (replay the scheduler to it) ─▶ explore ─▶ write rows + marker `explored/<stage>/<g>`
//                                                                          (one transaction) ─▶ mark the claim done
//
// No experience is written twice: the marker says a step's rows are in (an explorer killed after the write and
// before its claim was marked done finds it and moves on), and rows are keyed by (stage, step, task, repeat, index)
// (Experience.eid), which the buffer stores once. An explorer with nothing to claim while others still explore waits
// for them (polling the claims: a dead explorer sends no event), and takes over the steps of any that died.
import { keepStepLines } from '../monitor/index.js';
import type { SharedExperienceBuffer, TaskBatch, TasksetScheduler } from '../buffer/index.js';
import type { Experience } from '../experience.js';
import type { Task } from '../task.js';
import type { ExploreStepSource } from './loop.js';
import type { TaskClaims } from './task-claims.js';

/** How often an explorer with nothing to claim looks at the claims again. */
const CLAIM_POLL_MS = 500;

/** The buffer meta key marking that explore step `step` of `stage` has its rows in the buffer. */
export function exploredMarker(stage: string, step: number): string {
  return `explored/${stage}/${step}`;
}

export interface ClaimedStepsOptions {
  claims: TaskClaims;
  buffer: SharedExperienceBuffer;
  stage: string;
  explorer: string;
  /** A task scheduler at the stage's start: every explorer deals the same batches from it. */
  newScheduler: () => Promise<TasksetScheduler>;
  /** The longest an explorer waits for the others' steps (synchronizer.sync_timeout). */
  timeoutMs: number;
  signal?: AbortSignal;
  log: (line: string) => void;
}

/** The explore steps this explorer claims, in the order it claims them. */
export class ClaimedExploreSteps implements ExploreStepSource {
  readonly #options: ClaimedStepsOptions;
  #scheduler: TasksetScheduler | null = null;
  #allDone = false;

  constructor(options: ClaimedStepsOptions) {
    this.#options = options;
  }

  /** True once every step of the stage was finished (by any explorer): the buffer may be marked finished. */
  get allDone(): boolean {
    return this.#allDone;
  }

  async next(): Promise<{ step: number; tasks: Task[] } | null> {
    const { claims, buffer, stage, explorer, timeoutMs, signal, log } = this.#options;
    let waitingSince: number | null = null;
    for (;;) {
      if (signal?.aborted) return null;
      const claim = await claims.claim();
      if (claim.kind === 'done') {
        this.#allDone = true;
        return null;
      }
      if (claim.kind === 'step') {
        // its rows are in (a run killed between the write and marking the claim done): finished, not explored again
        if ((await buffer.readMeta(exploredMarker(stage, claim.step))) !== null) {
          await claims.complete(claim.step);
          continue;
        }
        const from = claim.from === null ? '' : ` (taken over from explorer '${claim.from}', which is no longer running)`;
        log(`[${stage}] explorer '${explorer}' claimed explore step ${claim.step}${from}`);
        return { step: claim.step, tasks: (await this.#deal(claim.step)).tasks };
      }
      waitingSince ??= Date.now();
      if (Date.now() - waitingSince > timeoutMs) {
        const inFlight = claim.inFlight.map((c) => `step ${c.step} (explorer '${c.owner}')`).join(', ');
        throw new Error(
          `explorer '${explorer}': timed out after ${timeoutMs} ms waiting for the other explorers' steps of stage ` +
            `'${stage}' in ${claims.location}: ${inFlight}`,
        );
      }
      await pause(CLAIM_POLL_MS, signal);
    }
  }

  /** Explore step `step`'s batch: the scheduler replayed to it (from the start when it went past). */
  async #deal(step: number): Promise<TaskBatch> {
    if (this.#scheduler === null || this.#scheduler.step >= step) this.#scheduler = await this.#options.newScheduler();
    for (;;) {
      const batch = this.#scheduler.nextBatch();
      if (batch === null)
        throw new Error(
          `explorer '${this.#options.explorer}': explore step ${step} is past the task scheduler's last step ` +
            `(${this.#scheduler.totalSteps})`,
        );
      if (batch.step === step - 1) return batch;
    }
  }

  /** What a step's write carries besides its rows: the finished marker (same transaction). */
  writeMeta(step: number): Record<string, string> {
    return { [exploredMarker(this.#options.stage, step)]: this.#options.explorer };
  }
}

/**
 * Gives a step's experiences ids keyed by what they are (stage, step, task, repeat, index in that run's output), so
 * the same step explored twice writes the same rows, which the buffer stores once.
 */
export function stampExperienceIds(stage: string, step: number, experiences: readonly Experience[]): Experience[] {
  const seen = new Map<string, number>();
  return experiences.map((e) => {
    const key = `${e.info.taskId ?? ''}/${e.info.runId ?? ''}`;
    const index = seen.get(key) ?? 0;
    seen.set(key, index + 1);
    return { ...e, eid: `${stage}/${step}/${key}/${index}` };
  });
}

/**
 * Keeps the JSONL lines (metrics, eval samples) of the steps this explorer finished; eval at startup (step 0) goes
 * with step 1. The other lines are of steps cut short, which are explored again.
 */
export function keepFinishedSteps(file: string, finished: ReadonlySet<number>): void {
  keepStepLines(file, (step) => finished.has(step === 0 ? 1 : step));
}

function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
