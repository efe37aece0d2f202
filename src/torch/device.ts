// Device settings as runs write them: 'auto' (CUDA when this libtorch sees a GPU, else the CPU), 'cpu', 'cuda' (the
// first GPU, or a rank's own: LOCAL_RANK, as torchrun does) and 'cuda:N'. Resolution checks the GPU is there, so a
// setting that cannot be honoured fails before anything loads, with an error naming the setting.
import { native } from './native.js';

/** A device setting: 'auto', 'cpu', 'cuda' or 'cuda:N'. */
export type DeviceSetting = 'auto' | 'cpu' | 'cuda' | `cuda:${number}`;

/** The written forms of a device setting (for schemas). */
export const DEVICE_SETTING_PATTERN = /^(auto|cpu|cuda(:\d+)?)$/;

export function isDeviceSetting(value: string): value is DeviceSetting {
  return DEVICE_SETTING_PATTERN.test(value);
}

export interface ResolveDeviceOptions {
  /** The setting's name in errors (e.g. 'trainer.device'). */
  key: string;
  /** Which GPU 'auto' and 'cuda' mean: this process's index on its machine (LOCAL_RANK; default 0). */
  localRank?: number;
  /** GPUs visible (default: what libtorch sees). */
  cudaDevices?: number;
}

/** The concrete device ('cpu' or 'cuda:N') a setting stands for on this machine. */
export function resolveDevice(setting: string, options: ResolveDeviceOptions): string {
  const { key, localRank = 0 } = options;
  if (!isDeviceSetting(setting)) throw new Error(`${key}: '${setting}' is not a device; use auto, cpu, cuda or cuda:N`);
  const gpus = options.cudaDevices ?? native.cudaDeviceCount();
  if (setting === 'cpu') return 'cpu';
  if (setting === 'auto' && gpus === 0) return 'cpu';
  const index = setting === 'auto' || setting === 'cuda' ? localRank : Number(setting.slice('cuda:'.length));
  const why = setting === 'auto' || setting === 'cuda' ? ` (local rank ${localRank})` : '';
  if (gpus === 0)
    throw new Error(
      `${key} is '${setting}', but no CUDA device is visible: this libtorch build or machine has no GPU (CPU only); ` +
        `use 'cpu' or 'auto', or build the addon against a CUDA libtorch on a GPU machine`,
    );
  if (index >= gpus)
    throw new Error(`${key} is '${setting}': it needs GPU ${index}${why}, but only ${gpus} CUDA device(s) are visible`);
  return `cuda:${index}`;
}
