// Sharded checkpoints of a fully sharded policy (./fsdp.ts): each rank writes its own shards and their AdamW state,
// nobody gathers the model. In a checkpoint folder (../checkpoint.ts), in place of model/ and optimizer.safetensors:
//
//   sharded/index.json                  { format, worldSize, dtype, units: [{ index, classes: [{ decay, total,
//                                         shardLength, params: [{ name, shape, numel, offset }] }] }],
//                                         optimizer: { kind: 'AdamW', groups, order } }
//   sharded/rank-<r>-of-<W>.safetensors rank r's slice of every flat class, flat[rL, (r+1)L):
//                                         unit.<u>.<decay|no_decay> [L] (master weights), and once stepped
//                                         .exp_avg [L], .exp_avg_sq [L], .step [] (its AdamW state)
//
// <u> is the decoder layer's index or `root`; `order` lists the parameters in one process's optimizer order (AdamW
// over torch.weightDecayGroups: decayed, then the others). Every rank writes its file into a staging folder rank 0
// names, then the ranks learn which of them failed (one all-reduce), and rank 0 moves the folder into the checkpoint
// only when every file is there.
//
// Resuming reads every rank's file and lays each class's flat vector out again, flat = cat_r(slice r)[0, n): the
// whole parameters and one process's AdamW state (optimizer.safetensors' layout). One process loads those as its
// own; a sharded trainer on W' ranks shards them for W' (./fsdp-optimizer.ts loadStateDict), so W → W' for any W'.
// (Each rank holds the whole state while it loads, as when it loads a model folder; only the save is sharded.)
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as torch from '../../torch/index.js';
import type { DType, OptimizerState, ProcessGroup, Tensor } from '../../torch/index.js';
import { writingFile } from '../../util/file-write.js';
import { checkpointsDir } from '../checkpoint.js';
import { sendCommand } from './data-parallel.js';
import { type FlatParam, type FullyShardedModel, ROOT_UNIT } from './fsdp.js';
import type { ShardedAdamW } from './fsdp-optimizer.js';

/** The sharded policy's folder in a checkpoint. */
export const SHARDED_DIR = 'sharded';
const INDEX_FILE = 'index.json';
const FORMAT = 'trinity-fsdp-shards/1';

interface ShardIndex {
  format: string;
  worldSize: number;
  dtype: DType;
  units: { index: number; classes: { decay: boolean; total: number; shardLength: number; params: FlatParam[] }[] }[];
  optimizer: { kind: 'AdamW'; groups: OptimizerState['groups']; order: string[] };
}

const rankFile = (rank: number, worldSize: number) => `rank-${rank}-of-${worldSize}.safetensors`;
const classKey = (unit: number, decay: boolean) => `unit.${unit === ROOT_UNIT ? 'root' : unit}.${decay ? 'decay' : 'no_decay'}`;
const MOMENTS = ['exp_avg', 'exp_avg_sq'] as const;

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
    format: FORMAT,
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

/** The index of a sharded checkpoint folder, checked. */
function readIndex(dir: string): ShardIndex {
  const file = join(dir, INDEX_FILE);
  let index: ShardIndex;
  try {
    index = JSON.parse(readFileSync(file, 'utf8')) as ShardIndex;
  } catch (error) {
    throw new Error(`${file}: unreadable sharded checkpoint index: ${(error as Error).message}`);
  }
  if (index.format !== FORMAT)
    throw new Error(
      `${file}: format ${JSON.stringify(index.format)} is not ${JSON.stringify(FORMAT)} (a sharded policy's index)`,
    );
  if (!Number.isInteger(index.worldSize) || index.worldSize < 1 || !Array.isArray(index.units))
    throw new Error(`${file}: worldSize must be a positive integer and units a list`);
  return index;
}

/**
 * A sharded checkpoint folder's whole policy (by Hugging Face name, in its master dtype) and one process's AdamW
 * state, from every rank's file (see the header). The caller disposes the tensors.
 */
export function readShardedCheckpoint(dir: string): { weights: Map<string, Tensor>; optimizer: OptimizerState } {
  const index = readIndex(dir);
  const files: Map<string, Tensor>[] = [];
  const weights = new Map<string, Tensor>();
  const state = new Map<string, Tensor>(); // `<name>.<exp_avg|exp_avg_sq|step>`
  try {
    for (let r = 0; r < index.worldSize; r++) {
      const file = join(dir, rankFile(r, index.worldSize));
      if (!existsSync(file)) throw new Error(`${file}: missing (the index says ${index.worldSize} ranks wrote this checkpoint)`);
      files.push(torch.loadSafetensors(file));
    }
    torch.noGrad(() =>
      torch.scope(() => {
        for (const unit of index.units)
          for (const c of unit.classes) {
            const key = classKey(unit.index, c.decay);
            /** flat = cat_r(slice r)[0, n) of `name` (the weights, or a moment). */
            const flat = (name: string) =>
              torch
                .cat(
                  files.map((f, r) => {
                    const t = f.get(name);
                    if (t === undefined || t.numel !== c.shardLength)
                      throw new Error(
                        `${join(dir, rankFile(r, index.worldSize))}: ${name} is ${t === undefined ? 'missing' : `${t.numel} elements`}; the index says ${c.shardLength}`,
                      );
                    return t.reshape([-1]);
                  }),
                )
                .narrow(0, 0, c.total);
            const split = (whole: Tensor, into: Map<string, Tensor>, suffix: string) => {
              for (const p of c.params)
                into.set(`${p.name}${suffix}`, torch.keep(whole.narrow(0, p.offset, p.numel).reshape(p.shape).clone()));
            };
            split(flat(key), weights, '');
            const step = files[0]?.get(`${key}.step`);
            if (step === undefined) continue; // not stepped yet
            for (const moment of MOMENTS) split(flat(`${key}.${moment}`), state, `.${moment}`);
            for (const p of c.params) state.set(`${p.name}.step`, torch.keep(step.clone()));
          }
      }),
    );
  } catch (error) {
    for (const t of [...weights.values(), ...state.values()]) t.dispose();
    throw error;
  } finally {
    for (const f of files) for (const t of f.values()) t.dispose();
  }
  const tensors: Record<string, Tensor> = {};
  for (const [i, name] of index.optimizer.order.entries())
    for (const part of [...MOMENTS, 'step']) {
      const t = state.get(`${name}.${part}`);
      if (t !== undefined) tensors[`state.${i}.${part}`] = t;
    }
  return { weights, optimizer: { kind: index.optimizer.kind, groups: index.optimizer.groups, tensors } };
}

/** Copies `weights` (by name) into each model's parameters, cast to its dtype (the master and the compute copy). */
export function copyWeightsInto(
  models: readonly ({ parameters(): Map<string, Tensor> } | undefined)[],
  weights: ReadonlyMap<string, Tensor>,
): void {
  torch.noGrad(() => {
    for (const model of models) {
      if (model === undefined) continue;
      const params = model.parameters();
      for (const [name, t] of weights) {
        const target = params.get(name);
        if (target === undefined) throw new Error(`sharded checkpoint: '${name}' is not a parameter of the model`);
        target.copy_(t);
      }
    }
  });
}

/** Loads what readShardedCheckpoint read into `optimizer` (any AdamW: one process's, ZeRO-1's, sharded) and frees it. */
export function restoreOptimizer(restored: ReturnType<typeof readShardedCheckpoint>, optimizer: torch.Optimizer): void {
  try {
    optimizer.loadStateDict(restored.optimizer);
  } finally {
    for (const t of [...restored.weights.values(), ...Object.values(restored.optimizer.tensors)]) t.dispose();
  }
}
