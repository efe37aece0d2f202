// One rank of a fully sharded trainer (test/rft/trainer/fsdp.test.ts forks 2 or 4). For each scenario of the plan in
// $SCENARIOS: rank 0 takes the steps, saves checkpoint <steps> (every rank writes its shards) unless save is false,
// reports its weights (gathered for a weight sync) and its sharded state bytes, and closes (which stops the others);
// the other ranks follow, then report their own state bytes. With resume, every rank starts from the latest
// checkpoint of the scenario's jobDir (shared by the ranks). Reports over IPC:
//   { type: 'result', scenario, weights, bytes, checkpoint, exported } from rank 0 (exported: a saveWeights folder)
//   { type: 'followed', scenario, steps, bytes } from the others
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TrainerClient } from '../../../../src/rft/trainer/trainer.js';
import { RANK_TIMEOUT_MS, type Scenario, scenarioInit } from './distributed-scenarios.js';

/** What a rank of fsdp.test.ts is told (a JSON file named by $SCENARIOS). */
export interface FsdpPlan {
  jobDir: string;
  scenarios: (Scenario & {
    port: number;
    modelDir: string;
    /** One job folder for every rank (default: one per rank under the plan's jobDir). */
    sharedJobDir?: string;
    resume?: boolean;
    save?: boolean;
  })[];
}

const send = (message: unknown) =>
  new Promise<void>((resolve, reject) => process.send?.(message, (error: Error | null) => (error ? reject(error) : resolve())));

const rank = Number(process.env.RANK);
const worldSize = Number(process.env.WORLD_SIZE);
const plan = JSON.parse(readFileSync(process.env.SCENARIOS as string, 'utf8')) as FsdpPlan;

async function main(): Promise<void> {
  for (const scenario of plan.scenarios) {
    const distributed = {
      rank,
      worldSize,
      masterAddr: '127.0.0.1',
      masterPort: scenario.port,
      timeoutMs: RANK_TIMEOUT_MS,
      strategy: 'fsdp' as const,
    };
    const jobDir = scenario.sharedJobDir ?? join(plan.jobDir, `${scenario.name}-fsdp-rank${rank}`);
    const init = {
      ...scenarioInit(scenario, scenario.modelDir, jobDir, distributed),
      gradientCheckpointing: true,
      resume: scenario.resume ?? false,
    };
    const { trainer } = await TrainerClient.start(init);
    if (rank === 0) {
      for (const batch of scenario.batches) await trainer.step(batch);
      const bytes = await trainer.shardedStateBytes();
      const checkpoint = scenario.save === false ? null : await trainer.save(scenario.batches.length, {}, 0);
      // the consolidated Hugging Face folder (the run's export)
      const exported = scenario.save === false ? null : join(jobDir, 'export');
      if (exported !== null) await trainer.saveWeights(exported);
      const weights = await trainer.beginSync();
      const arrays = Object.fromEntries([...weights].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
      await trainer.endSync();
      await trainer.close();
      await send({ type: 'result', scenario: scenario.name, weights: arrays, bytes, checkpoint, exported });
    } else {
      const { steps } = await trainer.follow();
      const bytes = await trainer.shardedStateBytes();
      await trainer.close();
      await send({ type: 'followed', scenario: scenario.name, steps, bytes });
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
