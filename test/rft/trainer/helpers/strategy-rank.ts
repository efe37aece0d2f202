// One rank of a data-parallel trainer (forked by ./rank-harness.ts forkRanks): plain data parallelism (ddp:
// vision-distributed.test.ts), or ranks that shard their state: ZeRO-1 (zero.test.ts: the AdamW state sharded) or
// fully sharded (fsdp.test.ts: parameters, gradients and AdamW state). For each scenario of
// the plan in $SCENARIOS: rank 0 takes the steps, reads its sharded state bytes, saves checkpoint <steps> and a
// weights folder (every rank joins) unless save is false, reads its optimizer state size and its weights (a weight
// sync's), and closes (which stops the others); the other ranks follow, then report their own sizes. With resume,
// every rank starts from the latest checkpoint of the scenario's job folder (sharedJobDir: one for every rank;
// default, one per rank). Reports over IPC (./rank-harness.ts RankMessage):
//   { type: 'result', scenario, weights, elements, bytes, checkpoint, exported, resumeBytes } from rank 0
//   { type: 'followed', scenario, steps, elements, bytes, resumeBytes } from the others
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TrainerClient, type TrainerInit } from '../../../../src/rft/trainer/trainer.js';
import { RANK_TIMEOUT_MS, type Scenario, SMALL_BUCKET_BYTES, scenarioInit } from './distributed-scenarios.js';

/** What a rank is told (a JSON file named by $SCENARIOS). */
export interface StrategyPlan {
  strategy: 'ddp' | 'zero1' | 'fsdp';
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
const plan = JSON.parse(readFileSync(process.env.SCENARIOS as string, 'utf8')) as StrategyPlan;

/** The strategy's distributed settings and what its trainer needs besides (fsdp: gradient checkpointing). */
function strategyInit(port: number): { distributed: NonNullable<TrainerInit['distributed']>; gradientCheckpointing: boolean } {
  const base = { rank, worldSize, masterAddr: '127.0.0.1', masterPort: port, timeoutMs: RANK_TIMEOUT_MS };
  if (plan.strategy === 'fsdp') return { distributed: { ...base, strategy: 'fsdp' }, gradientCheckpointing: true };
  const zero = plan.strategy === 'zero1' ? { zeroStage: 1 as const } : {};
  return { distributed: { ...base, bucketBytes: SMALL_BUCKET_BYTES, ...zero }, gradientCheckpointing: false };
}

async function main(): Promise<void> {
  for (const scenario of plan.scenarios) {
    const { distributed, gradientCheckpointing } = strategyInit(scenario.port);
    const jobDir = scenario.sharedJobDir ?? join(plan.jobDir, `${scenario.name}-${plan.strategy}-rank${rank}`);
    const init = {
      ...scenarioInit(scenario, scenario.modelDir, jobDir, distributed),
      gradientCheckpointing,
      resume: scenario.resume ?? false,
    };
    const { trainer, start } = await TrainerClient.start(init);
    const resumeBytes = start.checkpointBytesRead;
    const modelBytes = start.modelBytesRead;
    if (rank === 0) {
      for (const batch of scenario.batches) await trainer.step(batch);
      const bytes = await trainer.shardedStateBytes();
      const saves = scenario.save !== false;
      const checkpoint = saves ? await trainer.save(scenario.batches.length, {}, 0) : null;
      const exported = saves ? join(jobDir, 'export') : null;
      if (exported !== null) await trainer.saveWeights(exported);
      const elements = await trainer.optimizerStateElements();
      const synced = await trainer.beginSync();
      const weights = Object.fromEntries([...synced].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
      await trainer.endSync();
      await trainer.close();
      await send({
        type: 'result',
        scenario: scenario.name,
        weights,
        elements,
        bytes,
        checkpoint,
        exported,
        resumeBytes,
        modelBytes,
      });
    } else {
      const { steps } = await trainer.follow();
      const bytes = await trainer.shardedStateBytes();
      const elements = await trainer.optimizerStateElements();
      await trainer.close();
      await send({ type: 'followed', scenario: scenario.name, steps, elements, bytes, resumeBytes, modelBytes });
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
