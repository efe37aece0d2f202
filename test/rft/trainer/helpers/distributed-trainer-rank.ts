// One rank of a data-parallel trainer (test/rft/trainer/distributed.test.ts forks one per rank). It runs each
// scenario of the plan in $SCENARIOS in turn, as the run loop would drive it: rank 0 takes the steps and closes
// (which stops the others), the other ranks follow(). Reports over IPC:
//   { type: 'result', scenario, weights, metrics } from rank 0 (the weights after the last step, the metrics of each)
//   { type: 'followed', scenario, steps, saveError } from the others (saveError: what save() said on this rank)
// With $SCENARIO_KIND=kill or hang, rank 0 reports { type: 'ready' } once the trainers joined and then waits (the
// test SIGKILLs it); the follower reports { type: 'following' } and then what follow() rejected with
// ({ type: 'error' }). In hang, the follower waits for rank 0's next command at most 1 s (commandTimeoutMs).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TrainerClient } from '../../../../src/rft/trainer/trainer.js';
import { DistributedError } from '../../../../src/torch/index.js';
import { RANK_TIMEOUT_MS, type RankPlan, SMALL_BUCKET_BYTES, scenarioInit } from './distributed-scenarios.js';

const send = (message: unknown) =>
  new Promise<void>((resolve, reject) => process.send?.(message, (error: Error | null) => (error ? reject(error) : resolve())));

const rank = Number(process.env.RANK);
const worldSize = Number(process.env.WORLD_SIZE);
const plan = JSON.parse(readFileSync(process.env.SCENARIOS as string, 'utf8')) as RankPlan;
const kind = process.env.SCENARIO_KIND ?? 'equal';
const kill = kind === 'kill' || kind === 'hang';

/** What `call` was refused with (or that it was not). */
const refusal = (call: () => Promise<unknown>) =>
  call().then(
    () => 'not refused',
    (error: Error) => error.message,
  );

async function main(): Promise<void> {
  for (const scenario of plan.scenarios) {
    const distributed = {
      rank,
      worldSize,
      masterAddr: '127.0.0.1',
      masterPort: scenario.port,
      timeoutMs: RANK_TIMEOUT_MS,
      // small buckets: the tiny model's gradients fill several, so buckets go out from the backward's hooks
      bucketBytes: SMALL_BUCKET_BYTES,
      ...(kind === 'hang' ? { commandTimeoutMs: 1000 } : {}),
    };
    const jobDir = join(plan.jobDir, `${scenario.name}-rank${rank}`);
    const { trainer } = await TrainerClient.start(scenarioInit(scenario, plan.modelDir, jobDir, distributed));
    if (kill) {
      if (rank === 0) {
        await send({ type: 'ready' });
        await new Promise(() => {}); // until SIGKILLed
      }
      await send({ type: 'following' });
      try {
        await trainer.follow();
        await send({ type: 'error', name: 'none', message: 'follow() resolved although rank 0 was killed' });
      } catch (error) {
        const e = error as Error;
        await send({
          type: 'error',
          name: e.name,
          message: e.message,
          isDistributedError: error instanceof DistributedError,
          ...(error instanceof DistributedError
            ? { collective: error.collective, rank: error.rank, timedOut: error.timedOut }
            : {}),
        });
      }
      await trainer.close();
      return;
    }
    if (rank === 0) {
      const followError = await refusal(() => trainer.follow());
      const metrics: Record<string, number>[] = [];
      for (const batch of scenario.batches) metrics.push(await trainer.step(batch));
      const weights = await trainer.beginSync();
      const arrays = Object.fromEntries([...weights].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
      await trainer.endSync();
      await trainer.close();
      await send({ type: 'result', scenario: scenario.name, weights: arrays, metrics, followError });
    } else {
      const { steps } = await trainer.follow();
      const refused = {
        save: await refusal(() => trainer.save(steps, {}, 0)),
        saveWeights: await refusal(() => trainer.saveWeights(join(jobDir, 'weights'))),
        beginSync: await refusal(() => trainer.beginSync()),
        step: await refusal(() => trainer.step(scenario.batches[0] ?? [])),
      };
      await trainer.close();
      await send({ type: 'followed', scenario: scenario.name, steps, refused });
    }
  }
}

main().then(
  () => process.exit(0),
  async (error: Error) => {
    await send({ type: 'error', name: error.name, message: error.stack ?? error.message }).catch(() => {});
    process.exit(1);
  },
);
