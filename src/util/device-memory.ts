// How much memory a device has, for checks that refuse a size before allocating it (the KV cache's, in
// src/model/kv-cache.ts): the CPU's is this machine's (os.totalmem()); a CUDA device's is what `nvidia-smi` reports as
// its total memory (the addon does not expose CUDA's memory queries). `cuda:N` is the N-th device this process sees:
// with CUDA_VISIBLE_DEVICES set, that list's N-th entry (an index or a GPU UUID, both of which `nvidia-smi -i` takes).
// Where no figure is available (no nvidia-smi, another device kind) the answer is null and the caller skips its check.
import { spawnSync } from 'node:child_process';
import { totalmem } from 'node:os';

export interface DeviceMemory {
  readonly bytes: number;
  /** What the figure is, for messages: "this machine's memory", "cuda:0's memory (NVIDIA H100, nvidia-smi)". */
  readonly what: string;
}

/** The `nvidia-smi -i` argument for `cuda:N` (N defaults to 0), through CUDA_VISIBLE_DEVICES when it is set. */
export function nvidiaSmiDevice(device: string, visible = process.env.CUDA_VISIBLE_DEVICES): string | null {
  const match = /^cuda(?::(\d+))?$/.exec(device);
  if (match === null) return null;
  const ordinal = Number(match[1] ?? 0);
  if (visible === undefined || visible.trim() === '') return String(ordinal);
  const listed = visible.split(',').map((s) => s.trim());
  return listed[ordinal] ?? null;
}

/** Parses `nvidia-smi --query-gpu=memory.total,name --format=csv,noheader,nounits` (MiB, name): null when malformed. */
export function parseNvidiaSmiMemory(stdout: string): { bytes: number; name: string } | null {
  const line = stdout.trim().split('\n')[0] ?? '';
  const [mib, ...name] = line.split(',');
  const value = Number(mib?.trim());
  if (!Number.isFinite(value) || value <= 0) return null;
  return { bytes: value * 2 ** 20, name: name.join(',').trim() };
}

const cached = new Map<string, DeviceMemory | null>();

/** The memory of `device` ('cpu', 'cuda', 'cuda:N'), or null when it cannot be known here. */
export function deviceMemory(device: string): DeviceMemory | null {
  if (device === 'cpu') return { bytes: totalmem(), what: "this machine's memory" };
  const known = cached.get(device);
  if (known !== undefined) return known;
  const index = nvidiaSmiDevice(device);
  let answer: DeviceMemory | null = null;
  if (index !== null) {
    const result = spawnSync('nvidia-smi', ['-i', index, '--query-gpu=memory.total,name', '--format=csv,noheader,nounits'], {
      encoding: 'utf8',
      timeout: 10_000,
    });
    const parsed = result.status === 0 ? parseNvidiaSmiMemory(result.stdout) : null;
    if (parsed !== null)
      answer = { bytes: parsed.bytes, what: `${device}'s memory (${parsed.name || 'GPU'}, as nvidia-smi reports it)` };
  }
  cached.set(device, answer);
  return answer;
}
