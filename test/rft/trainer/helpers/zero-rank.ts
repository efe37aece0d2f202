// One rank of a ZeRO-1 data-parallel trainer (test/rft/trainer/zero.test.ts forks two). For each scenario of the plan
// in $SCENARIOS: rank 0 takes the steps, saves checkpoint <steps> (every rank joins the gather of the optimizer
// state), reports its weights and optimizer state size, and closes (which stops the other); rank 1 follows, then
// reports its own optimizer state size. Reports over IPC:
//   { type: 'result', scenario, weights, metrics, elements, checkpoint } from rank 0
//   { type: 'followed', scenario, steps, elements } from rank 1
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TrainerClient } from '../../../../src/rft/trainer/trainer.js';
import { RANK_TIMEOUT_MS, type RankPlan, SMALL_BUCKET_BYTES, scenarioInit } from './distributed-scenarios.js';

const send = (message: unknown) =>
  new Promise<void>((resolve, reject) => process.send?.(message, (error: Error | null) => (error ? reject(error) : resolve())));

const rank = Number(process.env.RANK);
const worldSize = Number(process.env.WORLD_SIZE);
const plan = JSON.parse(readFileSync(process.env.SCENARIOS as string, 'utf8')) as RankPlan;

async function main(): Promise<void> {
  for (const scenario of plan.scenarios) {
    const distributed = {
      rank,
      worldSize,
      masterAddr: '127.0.0.1',
      masterPort: scenario.port,
      timeoutMs: RANK_TIMEOUT_MS,
      bucketBytes: SMALL_BUCKET_BYTES,
      zeroStage: 1 as const,
    };
    const jobDir = join(plan.jobDir, `${scenario.name}-zero-rank${rank}`);
    const { trainer } = await TrainerClient.start(scenarioInit(scenario, plan.modelDir, jobDir, distributed));
    if (rank === 0) {
      const metrics: Record<string, number>[] = [];
      for (const batch of scenario.batches) metrics.push(await trainer.step(batch));
      const checkpoint = await trainer.save(scenario.batches.length, {}, 0);
      const elements = await trainer.optimizerStateElements();
      const weights = await trainer.beginSync();
      const arrays = Object.fromEntries([...weights].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
      await trainer.endSync();
      await trainer.close();
      await send({ type: 'result', scenario: scenario.name, weights: arrays, metrics, elements, checkpoint });
    } else {
      const { steps } = await trainer.follow();
      const elements = await trainer.optimizerStateElements();
      await trainer.close();
      await send({ type: 'followed', scenario: scenario.name, steps, elements });
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
