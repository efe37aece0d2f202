// Records which addon functions a piece of code calls, in order: for tests of which native calls a step makes (a
// kernel chosen or not) and of where host <-> device transfers happen (on a GPU an upload from JavaScript data or a
// read back to the host waits for all queued work, so code that must not stall — a decode step, a sampler prepared
// ahead — is checked on the CPU by the order of its calls).
import { dtypeCode } from '../../src/torch/dtype.js';
import { type NativeAddon, native } from '../../src/torch/native.js';

/** Addon functions that move data between JavaScript and a device: each one waits for the device's queued work. */
export const HOST_TRANSFERS = ['fromBytes', 'toBytes', 'item'] as const satisfies readonly (keyof NativeAddon)[];

/**
 * Addon functions whose result's size can depend on the values: nonzero, masked_select, and index with a bool (or
 * uint8) mask (index with integer indices is not recorded). On a GPU they read a count back before returning, so they
 * wait like a transfer.
 */
export const SIZE_READS = ['nonzero', 'maskedSelect', 'index'] as const satisfies readonly (keyof NativeAddon)[];

/**
 * Wraps the addon functions `names` until stop(): `calls` lists the calls made to them meanwhile, in order (names
 * only). Stop it in a finally block: the wrappers stay until then.
 */
export function recordNativeCalls(names: readonly (keyof NativeAddon)[]): { calls: string[]; stop(): void } {
  const calls: string[] = [];
  const table = native as unknown as Record<string, (...args: unknown[]) => unknown>;
  const originals = new Map(names.map((name) => [name, table[name] as (...args: unknown[]) => unknown]));
  for (const [name, original] of originals) {
    table[name] = (...args: unknown[]) => {
      if (name !== 'index' || maskIndex(args[1] as unknown[])) calls.push(name);
      return original.apply(native, args);
    };
  }
  return {
    calls,
    stop: () => {
      for (const [name, original] of originals) table[name] = original;
    },
  };
}

const MASK_DTYPES = [dtypeCode('bool'), dtypeCode('uint8')];

/** Whether index()'s indices hold a mask (the result's size is its count). */
function maskIndex(indices: unknown[]): boolean {
  return indices.some((h) => h !== null && MASK_DTYPES.includes(native.dtype(h as Parameters<NativeAddon['dtype']>[0])));
}
