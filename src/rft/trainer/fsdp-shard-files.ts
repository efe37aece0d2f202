// The files of a fully sharded policy's checkpoint (./fsdp.ts), which ./fsdp-checkpoint.ts writes and
// ./fsdp-resume.ts reads. In a checkpoint folder (../checkpoint.ts), in place of model/ and optimizer.safetensors:
//
//   sharded/index.json                  { format, worldSize, dtype, units: [{ index, classes: [{ decay, total,
//                                         shardLength, params: [{ name, shape, numel, offset }] }] }],
//                                         optimizer: { kind: 'AdamW', groups, order } }
//   sharded/rank-<r>-of-<W>.safetensors rank r's slice of every flat class, flat[rL, (r+1)L):
//                                         unit.<u>.<decay|no_decay> [L] (master weights), and once stepped
//                                         .exp_avg [L], .exp_avg_sq [L], .step [] (its AdamW state)
//
// <u> is the decoder layer's index or `root`; `order` lists the parameters in one process's optimizer order (AdamW
// over torch.weightDecayGroups: decayed, then the others).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DType, OptimizerState } from '../../torch/index.js';
import { type FlatParam, ROOT_UNIT } from './fsdp.js';

/** The sharded policy's folder in a checkpoint. */
export const SHARDED_DIR = 'sharded';
export const INDEX_FILE = 'index.json';
export const SHARDS_FORMAT = 'trinity-fsdp-shards/1';

/** A flat class as the index records it. */
export interface IndexedClass {
  decay: boolean;
  total: number;
  shardLength: number;
  params: FlatParam[];
}

export interface ShardIndex {
  format: string;
  worldSize: number;
  dtype: DType;
  units: { index: number; classes: IndexedClass[] }[];
  optimizer: { kind: 'AdamW'; groups: OptimizerState['groups']; order: string[] };
}

export const rankFile = (rank: number, worldSize: number) => `rank-${rank}-of-${worldSize}.safetensors`;
export const classKey = (unit: number, decay: boolean) =>
  `unit.${unit === ROOT_UNIT ? 'root' : unit}.${decay ? 'decay' : 'no_decay'}`;
export const MOMENTS = ['exp_avg', 'exp_avg_sq'] as const;

/** The index of a sharded checkpoint folder, checked. */
export function readShardIndex(dir: string): ShardIndex {
  const file = join(dir, INDEX_FILE);
  let index: ShardIndex;
  try {
    index = JSON.parse(readFileSync(file, 'utf8')) as ShardIndex;
  } catch (error) {
    throw new Error(`${file}: unreadable sharded checkpoint index: ${(error as Error).message}`);
  }
  if (index.format !== SHARDS_FORMAT)
    throw new Error(
      `${file}: format ${JSON.stringify(index.format)} is not ${JSON.stringify(SHARDS_FORMAT)} (a sharded policy's index)`,
    );
  if (!Number.isInteger(index.worldSize) || index.worldSize < 1 || !Array.isArray(index.units))
    throw new Error(`${file}: worldSize must be a positive integer and units a list`);
  return index;
}
