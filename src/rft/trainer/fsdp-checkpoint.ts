// Sharded checkpoints of a fully sharded policy (./fsdp.ts): each rank writes its own shards and their AdamW state,
// nobody gathers the model. The files (sharded/index.json, sharded/rank-<r>-of-<W>.safetensors) are
// ./fsdp-shard-files.ts's. Every rank writes its file into a staging folder rank 0 names, then the ranks learn which of
// them failed (one all-reduce), and rank 0 moves the folder into the checkpoint only when every file is there.
//
// Resuming reads, on each rank, only that rank's part of the files (./fsdp-resume.ts), so W → W' for any W'.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as torch from '../../torch/index.js';
import type { ProcessGroup, Tensor } from '../../torch/index.js';
import { writingFile } from '../../util/file-write.js';
import { checkpointsDir } from '../checkpoint.js';
import { sendCommand } from './data-parallel.js';
import type { FullyShardedModel } from './fsdp.js';
import type { ShardedAdamW } from './fsdp-optimizer.js';
import { classKey, INDEX_FILE, MOMENTS, rankFile, SHARDS_FORMAT, type ShardIndex } from './fsdp-shard-files.js';

/** This rank's file (its shards and their AdamW state) in `dir`; rank 0 writes the index too. */
export function writeRankShards(sharded: FullyShardedModel, optimizer: ShardedAdamW, dir: string): void {
  const { rank, worldSize } = sharded;
  writingFile(`rank ${rank}'s sharded checkpoint folder`, dir, () => mkdirSync(dir, { recursive: true }));
  const file = join(dir, rankFile(rank, worldSize));
  torch.noGrad(() =>
    torch.scope(() => {
      const tensors = new Map<string, Tensor>();
      for (const unit of sharded.units)
        for (const c of unit.classes) {
          const key = classKey(unit.index, c.decay);
          tensors.set(key, c.shard.detach());
          const state = optimizer.classState(c);
          if (state === null) continue;
          for (const moment of MOMENTS) tensors.set(`${key}.${moment}`, state[moment]);
          tensors.set(`${key}.step`, state.step);
        }
      writingFile(`rank ${rank}'s shards`, file, () => torch.saveSafetensors(file, tensors));
    }),
  );
  if (rank !== 0) return;
  const index: ShardIndex = {
    format: SHARDS_FORMAT,
    worldSize,
    dtype: sharded.masterDtype,
    units: sharded.units.map((u) => ({
      index: u.index,
      classes: u.classes.map((c) => ({ decay: c.decay, total: c.total, shardLength: c.shardLength, params: c.params })),
    })),
    optimizer: { kind: 'AdamW', groups: optimizer.groupSettings(), order: [...optimizer.oneProcessOrder] },
  };
  const indexFile = join(dir, INDEX_FILE);
  writingFile('the sharded checkpoint index', indexFile, () => writeFileSync(indexFile, `${JSON.stringify(index)}\n`));
}

/**
 * Rank 0 saving checkpoint `step` of `policy`: every rank (told so: the saveShards command) writes its shards into a
 * staging folder next to the checkpoints; returns the folder, which saveCheckpoint then moves in.
 */
export async function saveShards(
  policy: { sharded: FullyShardedModel; optimizer: ShardedAdamW },
  jobDir: string,
  step: number,
  group: ProcessGroup,
): Promise<string> {
  const dir = join(checkpointsDir(jobDir), `global_step_${step}.shards`);
  rmSync(dir, { recursive: true, force: true });
  await sendCommand(group, { kind: 'saveShards', dir });
  await saveShardsTogether(policy.sharded, policy.optimizer, dir, group);
  return dir;
}

/**
 * Every rank: writes its file into `dir` (writeRankShards), then joins one all-reduce over `group` of a failure flag
 * per rank, so that no rank goes on before every file is written. A rank whose write failed (or that holds no sharded
 * policy, undefined) throws its error; rank 0 throws naming the other ranks that failed (their errors are in their logs).
 */
export async function saveShardsTogether(
  sharded: FullyShardedModel | undefined,
  optimizer: ShardedAdamW | null | undefined,
  dir: string,
  group: ProcessGroup,
): Promise<void> {
  let failure: unknown = null;
  try {
    if (!sharded || !optimizer)
      throw new Error(`trainer rank ${group.rank}: rank 0 asked for sharded checkpoint files; this rank's policy is not sharded`);
    writeRankShards(sharded, optimizer, dir);
  } catch (error) {
    failure = error;
  }
  const flags = new Float32Array(group.worldSize);
  flags[group.rank] = failure === null ? 0 : 1;
  const summed = torch.tensor(flags);
  let failed: number[];
  try {
    await group.allReduce(summed, { op: 'sum' });
    failed = [...(summed.toTypedArray() as Float32Array)].flatMap((flag, r) => (flag > 0 ? [r] : []));
  } finally {
    summed.dispose();
  }
  if (failure !== null) throw failure;
  if (failed.length > 0)
    throw new Error(
      `sharded checkpoint ${dir}: trainer rank${failed.length > 1 ? 's' : ''} ${failed.join(', ')} of ${group.worldSize} ` +
        'could not write their shard files (their errors are in their logs)',
    );
}
