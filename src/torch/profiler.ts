// Where the time of some tensor work goes, from libtorch's profiler (Kineto; native/src/profiler.cpp):
//
//   const { value, profile } = torch.profile(() => step(), { trace: 'step.json' });
//   console.log(torch.formatProfile(profile));   // ops by self time; Chrome trace in step.json
//
// Profiles the calling thread's ATen ops and the threads its work runs on (autograd's backward, the intra-op pool),
// and on a CUDA libtorch the GPU's kernels and copies. profileRange(name, fn) marks a span of work by name (a row of
// the table and a span in the trace; nearly free when no profile is running). One profile at a time: a second one on
// the same thread is an error, and libtorch's collector is shared by the whole process, so profile one thread at a
// time.
import { rmSync, statSync, writeFileSync } from 'node:fs';
import { native, type ProfilerEvents } from './native.js';

export interface ProfileOptions {
  /** Write a Chrome trace (JSON: chrome://tracing or ui.perfetto.dev) of the profiled work to this path. */
  trace?: string;
  /** Also record device activity (CUDA kernels and copies) when libtorch has CUDA (default true). */
  device?: boolean;
}

export interface ProfiledOp {
  /** The op (aten::mm), backward function (autograd::engine::evaluate_function: MmBackward0), range or kernel. */
  name: string;
  /** cpu: an op, backward function or range on the CPU; device: a kernel or copy on the GPU. */
  where: 'cpu' | 'device';
  calls: number;
  /** Sum of the durations, µs, what ran nested inside included. */
  totalUs: number;
  /** totalUs less the time of the events nested inside it on the same thread, µs. */
  selfUs: number;
}

export interface Profile {
  /** Every op, backward function, range and kernel, by self time, largest first. */
  ops: ProfiledOp[];
  /** Wall-clock time from start to stop, µs. */
  wallUs: number;
  /** Where the Chrome trace was written, or null. */
  trace: string | null;
}

/** A running profile of this thread: stop() ends it and returns the Profile. */
export class Profiler {
  readonly #trace: string | null;
  readonly #started = performance.now();
  #stopped = false;

  constructor(options: ProfileOptions = {}) {
    this.#trace = options.trace ?? null;
    if (this.#trace !== null) {
      // libtorch only logs a trace it cannot write: find out before the work runs
      try {
        writeFileSync(this.#trace, '');
      } catch (error) {
        throw new Error(`profile trace ${this.#trace}: cannot write it (${(error as Error).message})`);
      }
    }
    try {
      native.profilerStart(options.device ?? true);
    } catch (error) {
      if (this.#trace !== null) rmSync(this.#trace, { force: true });
      throw error;
    }
  }

  stop(): Profile {
    if (this.#stopped) throw new Error('this profile was already stopped');
    this.#stopped = true;
    const wallUs = (performance.now() - this.#started) * 1e3;
    const events = native.profilerStop(this.#trace);
    if (this.#trace !== null && statSync(this.#trace).size === 0)
      throw new Error(`profile trace ${this.#trace}: libtorch wrote nothing there (its log above says why)`);
    return { ops: summarizeEvents(events), wallUs, trace: this.#trace };
  }
}

/** Runs fn with the profiler on (see the header); its value and the Profile. */
export function profile<T>(fn: () => T, options: ProfileOptions = {}): { value: T; profile: Profile } {
  const profiler = new Profiler(options);
  let value: T;
  try {
    value = fn();
  } catch (error) {
    profiler.stop();
    throw error;
  }
  return { value, profile: profiler.stop() };
}

/** Runs fn as a named range of the running profile (none running: it just runs fn). */
export function profileRange<T>(name: string, fn: () => T): T {
  native.profilerRangePush(name);
  try {
    return fn();
  } finally {
    native.profilerRangePop();
  }
}

/**
 * Events → per-name totals. Self time: on each thread, an event's duration less those of the events that start and
 * end inside it (the ops it called); device activities do not nest.
 */
export function summarizeEvents(events: ProfilerEvents): ProfiledOp[] {
  const n = events.name.length;
  const self = Float64Array.from(events.durationUs);
  const cpuByThread = new Map<number, number[]>();
  for (let i = 0; i < n; i++) {
    if (events.onDevice[i] === 1) continue;
    const thread = events.thread[i] as number;
    const list = cpuByThread.get(thread);
    if (list === undefined) cpuByThread.set(thread, [i]);
    else list.push(i);
  }
  const end = (i: number) => (events.startUs[i] as number) + (events.durationUs[i] as number);
  for (const list of cpuByThread.values()) {
    // outer events first: by start, the longer one first when two start together
    list.sort((a, b) => (events.startUs[a] as number) - (events.startUs[b] as number) || end(b) - end(a));
    const open: number[] = [];
    for (const i of list) {
      while (open.length > 0 && end(open[open.length - 1] as number) <= (events.startUs[i] as number)) open.pop();
      const parent = open[open.length - 1];
      if (parent !== undefined && end(i) <= end(parent))
        self[parent] = (self[parent] as number) - (events.durationUs[i] as number);
      open.push(i);
    }
  }
  const byKey = new Map<string, ProfiledOp>();
  for (let i = 0; i < n; i++) {
    const name = events.names[events.name[i] as number] as string;
    const where = events.onDevice[i] === 1 ? 'device' : 'cpu';
    const key = `${where}\u0000${name}`;
    let op = byKey.get(key);
    if (op === undefined) {
      op = { name, where, calls: 0, totalUs: 0, selfUs: 0 };
      byKey.set(key, op);
    }
    op.calls++;
    op.totalUs += events.durationUs[i] as number;
    op.selfUs += Math.max(0, self[i] as number);
  }
  return [...byKey.values()].sort((a, b) => b.selfUs - a.selfUs || a.name.localeCompare(b.name));
}

/** The self time of all ops of a profile, µs: on the CPU (every thread) and on the device. */
export function selfTime(p: Profile): { cpu: number; device: number } {
  const total = { cpu: 0, device: 0 };
  for (const op of p.ops) total[op.where] += op.selfUs;
  return total;
}

/** The profile as a table: the `rows` ops with the most self time, with their share of the CPU or device total. */
export function formatProfile(p: Profile, rows = 20): string {
  const total = selfTime(p);
  const ms = (us: number) => (us / 1e3).toFixed(3);
  const head = ['self ms', 'share', 'total ms', 'calls', 'where', 'name'];
  const body = p.ops
    .slice(0, rows)
    .map((op) => [
      ms(op.selfUs),
      `${((100 * op.selfUs) / Math.max(total[op.where], 1e-9)).toFixed(1)}%`,
      ms(op.totalUs),
      String(op.calls),
      op.where,
      op.name.length > 90 ? `${op.name.slice(0, 87)}...` : op.name,
    ]);
  const widths = head.map((h, c) => Math.max(h.length, ...body.map((r) => (r[c] as string).length)));
  const line = (cells: string[]) =>
    cells.map((cell, c) => (c === cells.length - 1 ? cell : cell.padStart(widths[c] as number))).join('  ');
  const summary =
    `wall ${ms(p.wallUs)} ms; CPU self time ${ms(total.cpu)} ms over all threads` +
    (total.device > 0 ? `; device ${ms(total.device)} ms` : '') +
    `; ${p.ops.length} distinct ops${p.ops.length > rows ? `, the top ${rows} shown` : ''}`;
  return [summary, line(head), ...body.map(line)].join('\n');
}
