// How much memory a piece of work adds at its peak, measured by the kernel rather than counted by the code that
// allocates (a weight sync's copies live in libtorch, on worker threads, in Node buffers): on Linux,
//
//   peak = VmHWM after the work − VmRSS before it
//
// where VmHWM (the resident set's high-water mark, /proc/self/status) was reset to the current resident size by
// writing 5 to /proc/self/clear_refs just before the work. It counts every thread of this process, whatever it was
// doing meanwhile, and only pages that became resident: memory the allocator reuses without returning it to the
// system is not new. Elsewhere (no /proc, or clear_refs not writable) the peak is null.
import { readFileSync, writeFileSync } from 'node:fs';

/** The status line `field` (VmRSS, VmHWM) of this process in bytes, or null. */
function statusBytes(field: 'VmRSS' | 'VmHWM'): number | null {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
    return match === null ? null : Number(match[1]) * 1024;
  } catch {
    return null;
  }
}

function resetHighWaterMark(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}

export interface ResidentPeak<T> {
  value: T;
  /** Wall-clock seconds the work took. */
  seconds: number;
  /** The most resident memory the process gained during the work, in bytes (see the header); null where unknown. */
  peakBytes: number | null;
}

/** Runs `work`, measuring its time and the peak resident memory it added. Measurements must not overlap. */
export async function measureResidentPeak<T>(work: () => Promise<T>): Promise<ResidentPeak<T>> {
  const before = statusBytes('VmRSS');
  const reset = before !== null && resetHighWaterMark();
  const started = performance.now();
  const value = await work();
  const seconds = (performance.now() - started) / 1000;
  const high = reset ? statusBytes('VmHWM') : null;
  return { value, seconds, peakBytes: high === null || before === null ? null : Math.max(0, high - before) };
}
