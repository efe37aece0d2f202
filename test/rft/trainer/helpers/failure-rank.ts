// One rank of test/rft/trainer/distributed-failure.test.ts: a 2-rank SFT trainer (rendezvous at
// 127.0.0.1:$MASTER_PORT) whose rank 0 fails in one of two ways ($CASE):
//   between-steps  rank 0 takes one step, then closes with a failure (as the run loop does when its stage failed)
//   mid-step       the algorithm's policy loss ($PLUGIN, a module-path plug-in) throws on rank 0 alone, inside its
//                  first step; rank 0 reports what step() rejected with, then closes with that failure
// Reports over IPC: rank 0 { type: 'step-failed', message } (mid-step) and { type: 'closed' }; rank 1
// { type: 'followed', steps } or { type: 'error', ... } with what follow() rejected with.
import { RankZeroFailedError, TrainerClient } from '../../../../src/rft/trainer/trainer.js';
import { DistributedError } from '../../../../src/torch/index.js';
import { RANK_TIMEOUT_MS, scenarioInit } from './distributed-scenarios.js';
import { expertData } from '../toy.js';

const send = (message: unknown) =>
  new Promise<void>((resolve, reject) => process.send?.(message, (error: Error | null) => (error ? reject(error) : resolve())));

const rank = Number(process.env.RANK);
const midStep = process.env.CASE === 'mid-step';
const algorithm: Record<string, unknown> = {
  algorithm_type: 'sft',
  optimizer: { lr: 1e-2 },
  ...(midStep ? { policy_loss_fn: process.env.PLUGIN } : {}),
};
const init = scenarioInit(
  { name: 'failure', algorithm, lora: null, microBatchSize: 2, batches: [] },
  process.env.MODEL_DIR as string,
  `${process.env.JOB_DIR}/rank${rank}`,
  {
    rank,
    worldSize: 2,
    masterAddr: '127.0.0.1',
    masterPort: Number(process.env.MASTER_PORT),
    timeoutMs: RANK_TIMEOUT_MS,
    stage: 'failure',
  },
);
const { trainer } = await TrainerClient.start(init);
if (rank === 0) {
  let failure: unknown = new Error(process.env.FAILURE);
  try {
    await trainer.step(expertData());
  } catch (error) {
    if (!midStep) throw error;
    failure = error;
    await send({ type: 'step-failed', message: (error as Error).message });
  }
  await trainer.close({ failure });
  await send({ type: 'closed' });
} else {
  try {
    const { steps } = await trainer.follow();
    await send({ type: 'followed', steps });
  } catch (error) {
    const e = error as Error;
    await send({
      type: 'error',
      name: e.name,
      message: e.message,
      ...(error instanceof RankZeroFailedError
        ? { rankZeroFailed: true, rank: error.rank, worldSize: error.worldSize, rankZeroMessage: error.rankZeroMessage }
        : {}),
      ...(error instanceof DistributedError ? { distributed: true, rank: error.rank, collective: error.collective } : {}),
    });
  }
  await trainer.close();
}
process.disconnect();
