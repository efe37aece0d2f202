// One rank of test/rft/trainer/stage-rendezvous.test.ts: joins the stages in $STAGES in turn
// (joinStageGroup of src/rft/trainer/data-parallel.ts, Gloo, rendezvous at 127.0.0.1:$MASTER_PORT), and in each
// all-reduces [rank + 1] with the other rank (the sum is 3 when rank 0 and rank 1 met). Reports over IPC:
//   { type: 'other-stage', stage, other }  it reached the store of stage `other` while looking for `stage`'s
//   { type: 'result', stage, sum }         the all-reduced value in `stage`
// then leaves the stage when the test sends { type: 'leave', stage }.
import * as torch from '../../../../src/torch/index.js';
import { joinStageGroup } from '../../../../src/rft/trainer/data-parallel.js';

const send = (message: unknown) =>
  new Promise<void>((resolve, reject) => process.send?.(message, (error: Error | null) => (error ? reject(error) : resolve())));

const rank = Number(process.env.RANK);
const stages = JSON.parse(process.env.STAGES as string) as string[];
const leaveRequests = new Map<string, () => void>();
const leaveSignals = new Map(stages.map((s) => [s, new Promise<void>((resolve) => leaveRequests.set(s, resolve))]));
process.on('message', (m: { type: string; stage: string }) => {
  if (m.type === 'leave') leaveRequests.get(m.stage)?.();
});

for (const stage of stages) {
  const { group, store } = await joinStageGroup({
    rank,
    worldSize: 2,
    masterAddr: '127.0.0.1',
    masterPort: Number(process.env.MASTER_PORT),
    timeoutMs: 120_000,
    stage,
    onOtherStage: (other) => void send({ type: 'other-stage', stage, other }),
  });
  const value = torch.tensor(new Float32Array([rank + 1]));
  await group.allReduce(value, { op: 'sum' });
  await send({ type: 'result', stage, sum: (value.toTypedArray() as Float32Array)[0] });
  value.dispose();
  await leaveSignals.get(stage);
  await group.destroy();
  await store.close();
}
process.disconnect();
