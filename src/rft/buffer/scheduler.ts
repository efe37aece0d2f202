// The taskset scheduler: the explorer's source of task batches (Trinity-RFT's TasksetScheduler). One or more
// tasksets, each with its own selector, are mixed by weight (default: taskset size, so each sees the same number
// of epochs). Slots are dealt by smooth weighted round-robin, so every prefix of the run follows the weights as
// closely as whole tasks allow and the deal is deterministic:
//   each slot: current_i += w_i for all i; pick j = argmax current; current_j −= Σ w
// The run lasts `totalSteps` full batches, else `totalEpochs` × Σ sizes tasks (the last batch may be short).
// state()/loadState() round-trip through JSON for resume.
import type { Task } from '../task.js';
import { createSelector, type SelectorConfig, type SelectorState, type TaskFeedback, type TaskSelector } from './selector.js';
import type { Taskset } from './taskset.js';

export interface ScheduledTaskset {
  taskset: Taskset;
  selector?: SelectorConfig;
  /** Share of each batch (relative; default the taskset's size). */
  weight?: number;
}

export interface TasksetSchedulerOptions {
  tasksets: ScheduledTaskset[];
  /** Tasks per explore step (buffer.batch_size). */
  batchSize: number;
  /** Passes over the tasksets (buffer.total_epochs, default 1). */
  totalEpochs?: number;
  /** Explore steps; overrides totalEpochs (buffer.total_steps). */
  totalSteps?: number;
}

export interface SchedulerState {
  version: 1;
  step: number;
  served: number;
  current: number[];
  tasksets: { name: string; selector: SelectorState }[];
}

export interface TaskBatch {
  /** 0-based explore step of this batch. */
  step: number;
  tasks: Task[];
}

export class TasksetScheduler {
  readonly batchSize: number;
  /** Tasks the whole run serves. */
  readonly totalTasks: number;
  readonly totalSteps: number;
  readonly #entries: { taskset: Taskset; selector: TaskSelector; weight: number }[];
  readonly #owner = new Map<string, number>();
  #current: number[];
  #step = 0;
  #served = 0;

  constructor(options: TasksetSchedulerOptions) {
    if (options.tasksets.length === 0) throw new Error('scheduler: no tasksets');
    if (!Number.isInteger(options.batchSize) || options.batchSize < 1) {
      throw new RangeError(`scheduler: batchSize must be a positive integer, got ${options.batchSize}`);
    }
    this.batchSize = options.batchSize;
    const names = new Set<string>();
    this.#entries = options.tasksets.map(({ taskset, selector, weight }, t) => {
      if (names.has(taskset.name)) throw new Error(`scheduler: taskset name '${taskset.name}' appears twice`);
      names.add(taskset.name);
      const w = weight ?? taskset.tasks.length;
      if (!(w >= 0) || !Number.isFinite(w))
        throw new RangeError(`scheduler: weight of taskset '${taskset.name}' must be >= 0, got ${w}`);
      for (const task of taskset.tasks) {
        const other = this.#owner.get(task.id);
        if (other !== undefined) {
          throw new Error(
            `scheduler: task id '${task.id}' is in tasksets '${this.#entries[other]?.taskset.name ?? ''}' and '${taskset.name}'`,
          );
        }
        this.#owner.set(task.id, t);
      }
      return { taskset, selector: createSelector(taskset.tasks, selector), weight: w };
    });
    if (!this.#entries.some((e) => e.weight > 0)) throw new Error('scheduler: all taskset weights are 0');
    this.#current = this.#entries.map(() => 0);
    const datasetSize = this.#entries.reduce((s, e) => s + e.taskset.tasks.length, 0);
    if (options.totalSteps !== undefined) {
      if (!Number.isInteger(options.totalSteps) || options.totalSteps < 0) {
        throw new RangeError(`scheduler: totalSteps must be an integer >= 0, got ${options.totalSteps}`);
      }
      this.totalSteps = options.totalSteps;
      this.totalTasks = options.totalSteps * this.batchSize;
    } else {
      const epochs = options.totalEpochs ?? 1;
      if (!Number.isInteger(epochs) || epochs < 0)
        throw new RangeError(`scheduler: totalEpochs must be an integer >= 0, got ${epochs}`);
      this.totalTasks = epochs * datasetSize;
      this.totalSteps = Math.ceil(this.totalTasks / this.batchSize);
    }
  }

  /** The next explore step's tasks, or null when the run is over. */
  nextBatch(): TaskBatch | null {
    if (this.#step >= this.totalSteps) return null;
    const count = Math.min(this.batchSize, this.totalTasks - this.#served);
    const perTaskset = this.#entries.map(() => 0);
    const order: number[] = [];
    const totalWeight = this.#entries.reduce((s, e) => s + e.weight, 0);
    for (let k = 0; k < count; k++) {
      let best = 0;
      this.#entries.forEach((e, i) => {
        this.#current[i] = (this.#current[i] as number) + e.weight;
        if ((this.#current[i] as number) > (this.#current[best] as number)) best = i;
      });
      this.#current[best] = (this.#current[best] as number) - totalWeight;
      perTaskset[best] = (perTaskset[best] as number) + 1;
      order.push(best);
    }
    const picked = this.#entries.map((e, i) => e.selector.next(perTaskset[i] as number));
    const cursor = this.#entries.map(() => 0);
    const tasks = order.map((t) => {
      const entry = this.#entries[t]!;
      const index = picked[t]![cursor[t]!++] as number;
      return entry.taskset.tasks[index] as Task;
    });
    const batch = { step: this.#step, tasks };
    this.#step++;
    this.#served += count;
    return batch;
  }

  /** Explore steps done. */
  get step(): number {
    return this.#step;
  }

  /** Routes one explore step's rewards (task id → rewards) to the selectors of the tasks' tasksets, once each. */
  feedback(step: TaskFeedback): void {
    const byTaskset = new Map<number, Map<string, readonly number[]>>();
    for (const [taskId, rewards] of step) {
      const t = this.#owner.get(taskId);
      if (t === undefined) throw new Error(`scheduler feedback: unknown task id '${taskId}'`);
      let entries = byTaskset.get(t);
      if (entries === undefined) {
        entries = new Map();
        byTaskset.set(t, entries);
      }
      entries.set(taskId, rewards);
    }
    for (const [t, entries] of byTaskset) this.#entries[t]!.selector.feedback(entries);
  }

  /** The selector of a taskset (for inspection). */
  selector(name: string): TaskSelector {
    const entry = this.#entries.find((e) => e.taskset.name === name);
    if (entry === undefined) throw new Error(`scheduler: no taskset '${name}'`);
    return entry.selector;
  }

  state(): SchedulerState {
    return {
      version: 1,
      step: this.#step,
      served: this.#served,
      current: [...this.#current],
      tasksets: this.#entries.map((e) => ({ name: e.taskset.name, selector: e.selector.state() })),
    };
  }

  loadState(state: SchedulerState): void {
    if (state?.version !== 1) throw new Error(`scheduler state: unsupported version ${String(state?.version)}`);
    const names = this.#entries.map((e) => e.taskset.name);
    const stateNames = state.tasksets.map((t) => t.name);
    if (names.join('\0') !== stateNames.join('\0')) {
      throw new Error(`scheduler state is for tasksets [${stateNames.join(', ')}], this run has [${names.join(', ')}]`);
    }
    if (state.current.length !== names.length) throw new Error('scheduler state: weight counters do not match the tasksets');
    this.#entries.forEach((e, i) => {
      e.selector.loadState(state.tasksets[i]!.selector);
    });
    this.#step = state.step;
    this.#served = state.served;
    this.#current = [...state.current];
  }
}
