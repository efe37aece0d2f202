// Data-parallel training under the torchrun environment. A launcher (torchrun, Kubernetes, or `trinity run
// --nproc-per-node N [--nnodes N --node-rank K --master-addr A]`) starts the same `trinity run --config F` once per
// rank with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (srun: Slurm's variables stand for them,
// ./slurm.ts); WORLD_SIZE > 1 makes the process one rank of a data-parallel trainer:
//
//   rank 0     the stage as one process runs it (explorer, buffer, trainer loop, checkpoints, metrics, weights);
//              its trainer sends each step's batch to the other ranks, and all of them step together
//   rank > 0   a follower (./follower.ts): per stage, a trainer that takes the steps rank 0 sends until it ends
//              the stage; nothing explored, logged or saved
import { readTorchrunEnv } from '../../torch/index.js';
import type { DistributedSettings, StageSettings } from '../settings.js';
import { torchrunEnvFromSlurm } from './slurm.js';

/**
 * The data-parallel launch the torchrun variables describe; null when WORLD_SIZE is unset or 1 (one process). A set
 * variable with a bad value, or WORLD_SIZE > 1 without RANK or MASTER_PORT, is an error naming the variable.
 */
export function distributedLaunchFromEnv(processEnv: NodeJS.ProcessEnv = process.env): DistributedSettings | null {
  const env = torchrunEnvFromSlurm(processEnv);
  const vars = readTorchrunEnv(env);
  if (vars.worldSize === undefined || vars.worldSize === 1) {
    if (vars.rank !== undefined && vars.rank !== 0)
      throw new RangeError(`RANK=${vars.rank} needs WORLD_SIZE > ${vars.rank} (WORLD_SIZE is ${env.WORLD_SIZE ?? 'unset'})`);
    return null;
  }
  const worldSize = vars.worldSize;
  if (vars.rank === undefined) throw new Error(`WORLD_SIZE=${worldSize} but RANK is not set: each process needs its rank`);
  if (vars.rank >= worldSize)
    throw new RangeError(`RANK=${vars.rank} is out of range for WORLD_SIZE=${worldSize} (ranks are 0..${worldSize - 1})`);
  if (vars.masterPort === undefined)
    throw new Error(`WORLD_SIZE=${worldSize} but MASTER_PORT is not set: the port where rank 0 serves the rendezvous`);
  const localWorldSize = env.LOCAL_WORLD_SIZE ? Number(env.LOCAL_WORLD_SIZE) : 1;
  if (!Number.isSafeInteger(localWorldSize) || localWorldSize < 1 || localWorldSize > worldSize)
    throw new RangeError(
      `LOCAL_WORLD_SIZE=${JSON.stringify(env.LOCAL_WORLD_SIZE)} is not an integer in [1, WORLD_SIZE=${worldSize}]`,
    );
  return {
    rank: vars.rank,
    worldSize,
    localRank: vars.localRank ?? 0,
    localWorldSize,
    masterAddr: vars.masterAddr ?? '127.0.0.1',
    masterPort: vars.masterPort,
  };
}

/** "rank 1 of 2 (local rank 1, rendezvous at 127.0.0.1:29500)": where a rank runs, for the log. */
export function describeRank(launch: DistributedSettings): string {
  return (
    `rank ${launch.rank} of ${launch.worldSize} (local rank ${launch.localRank}, ` +
    `rendezvous at ${launch.masterAddr}:${launch.masterPort})`
  );
}

/**
 * Where each part of a stage runs, for the log: "placement: trainer on cpu (float32); rollout engine on cpu
 * (bfloat16); weights in memory, on the same device". Ranks > 0 have no explorer.
 */
/**
 * The rollout engines of the placement line: one embedded engine, an embedded pool (engine_num on threads or in
 * processes of their own, engine_process), one external server or an external pool (a base_url list).
 */
function describeEngines(settings: StageSettings): string {
  const engine = settings.explorer.engine;
  if (engine.type === 'openai') {
    if (!Array.isArray(engine.baseUrl)) return `rollout engine: external server ${engine.baseUrl}`;
    const n = engine.baseUrl.length;
    return `rollout engines: external pool of ${n} server${n === 1 ? '' : 's'} (${engine.baseUrl.join(', ')})`;
  }
  const where = `on ${settings.explorer.device} (${settings.dtype})`;
  const n = engine.engineNum;
  if (engine.engineProcess) return `rollout engines: ${n} process${n === 1 ? '' : 'es'} ${where}`;
  return n === 1 ? `rollout engine ${where}` : `rollout engines: ${n} on threads ${where}`;
}

export function describePlacement(settings: StageSettings): string {
  const d = settings.distributed;
  const hasTrainer = settings.mode === 'both' || settings.mode === 'train';
  const explores = settings.mode !== 'train' && (d === null || d.rank === 0);
  const engine = settings.explorer.engine;
  const parts: string[] = [];
  if (hasTrainer) {
    const rank = d === null ? '' : ` rank ${d.rank} of ${d.worldSize}`;
    const { paramDtype, masterDtype } = settings.trainer;
    const dtypes = paramDtype === masterDtype ? paramDtype : `${paramDtype} compute, ${masterDtype} master weights`;
    parts.push(`trainer${rank} on ${settings.trainer.device} (${dtypes})`);
  }
  if (explores) parts.push(describeEngines(settings));
  if (settings.mode === 'train' && settings.trainer.stopWhen !== null && (d === null || d.rank === 0))
    parts.push(`${describeEngines(settings)} for trainer.stop_when's evaluations`);
  if (hasTrainer && explores && settings.mode === 'both' && engine.type === 'embedded') {
    const same = settings.trainer.device === settings.explorer.device;
    parts.push(
      engine.weightSync === 'checkpoint'
        ? 'weights through checkpoint folders'
        : same
          ? `weights in memory, on the same device (${settings.trainer.device}, one process)`
          : `weights in memory, copied ${settings.trainer.device} -> ${settings.explorer.device}`,
    );
  }
  return `placement: ${parts.join('; ')}`;
}
