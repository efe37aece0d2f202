// Where a train step moves data between JavaScript and the device. On a GPU an upload or a read-back waits for all
// work queued before it, so a read inside the micro-batch loop (a metric, a token count, the prompts read back to
// pack them) stops the host until the micro-batch's forward or backward has finished: the next micro-batch cannot be
// queued meanwhile and the device idles while the host catches up. Checked on the CPU by the order of the addon calls:
// from the first micro-batch's forward to the last one's backward there is no upload, no read-back and no op whose
// result's size depends on the values (nonzero, masked_select, a bool-mask index: on a GPU they read a count back).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { CausalLM } from '../../../src/model/transformer.js';
import { ALGORITHM_TYPES, Critic, type ResolvedAlgorithm, resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { frozenCopyReference } from '../../../src/rft/trainer/reference-policy.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import { HOST_TRANSFERS, recordNativeCalls, SIZE_READS } from '../../helpers/native-calls.js';
import { loadPolicy, responseLogprobs, tinyModelDir } from './toy.js';

before(() => torch.setNumThreads(1));
let toy: { dir: string; remove: () => void };
before(() => {
  toy = tinyModelDir();
});
after(() => toy.remove());

const prompts = [
  [5, 11, 17, 23, 29, 31, 37],
  [6, 13, 19, 21, 27],
];

/**
 * The batch of `algorithm`'s schema over two prompts of 7 and 5 tokens (a packed batch). Experiences: four responses
 * per prompt of 3 to 6 tokens with rollout (and teacher) log-probs; with a mix sample strategy one demonstration per
 * prompt follows (MIX / CHORD rows: no log-probs). sft: the responses as data; dpo: two pairs per prompt.
 */
function batch(model: CausalLM, algorithm: ResolvedAlgorithm): Experience[] {
  if (algorithm.schema === 'dpo')
    return prompts.flatMap((prompt, task) =>
      [0, 1].map((pair) => ({
        eid: `pair-${task}-${pair}`,
        tokens: [...prompt],
        promptLength: prompt.length,
        chosen: [40 + pair, 42, 43],
        rejected: [50 + pair, 52],
        info: { taskId: `t${task}` },
      })),
    );
  const expert = algorithm.sampleStrategy.name === 'mix';
  return prompts
    .flatMap((prompt, task) =>
      [0, 1, 2, 3].map((run): Experience => {
        const response = Array.from({ length: 3 + run }, (_, j) => 40 + ((task * 7 + run * 3 + j * 5) % 20));
        return {
          eid: `t${task}-r${run}`,
          tokens: [...prompt, ...response],
          promptLength: prompt.length,
          logprobs: responseLogprobs(model, prompt, response),
          teacherLogprobs: response.map((_, j) => -1 - j / 10),
          reward: (run + task) % 3,
          info: { taskId: `t${task}`, runId: run },
        };
      }),
    )
    .concat(
      expert
        ? prompts.map((prompt, task) => ({
            eid: `expert-${task}`,
            tokens: [...prompt, 45, 46, 47],
            promptLength: prompt.length,
            info: { isExpert: true },
          }))
        : [],
    );
}

const cases: { name: string; config: Record<string, unknown>; removePadding?: boolean }[] = [
  // GRPO's preset: reference and k2 KL loss, entropy metric, rollout log-probs (bypass: correction metrics per
  // micro-batch)
  { name: 'grpo', config: { algorithm_type: 'grpo', rollout_correction: { rollout_is: 'token' } } },
  { name: 'gspo', config: { algorithm_type: 'gspo', entropy_loss_fn: 'default', entropy_loss_fn_args: { entropy_coef: 0.01 } } },
  { name: 'ppo (critic)', config: { algorithm_type: 'ppo' } },
  // rows packed without pads (trainer.use_remove_padding): each micro-batch's packing is uploaded ahead too
  { name: 'grpo, packed rows', config: { algorithm_type: 'grpo' }, removePadding: true },
  { name: 'ppo (critic), packed rows', config: { algorithm_type: 'ppo' }, removePadding: true },
  // expert rows: the loss and the entropy term split the rows by expertMask (with an entropy bonus, so it trains)
  { name: 'mix_chord', config: { algorithm_type: 'mix_chord', entropy_loss_fn_args: { entropy_coef: 0.01 } } },
  // and every other preset as it comes
  ...ALGORITHM_TYPES.filter((type) => !['grpo', 'gspo', 'ppo', 'mix_chord'].includes(type)).map((type) => ({
    name: type,
    config: { algorithm_type: type },
  })),
];

for (const { name, config, removePadding } of cases) {
  test(`${name}: no upload or read-back between the micro-batches' forwards and backwards`, () => {
    const algorithm = resolveAlgorithm(config);
    const model = loadPolicy(toy.dir);
    const reference = algorithm.useReference ? frozenCopyReference(model) : null;
    const critic = algorithm.useCritic ? Critic.fromPolicy(model, { seed: 1 }) : null;
    const step = new TrainStep({
      model,
      optimizer: new torch.AdamW([...model.parameters().values()], { lr: 1e-3, weightDecay: 0 }),
      algorithm,
      reference,
      critic: critic && { critic, optimizer: new torch.AdamW(critic.parameters(), { lr: 1e-3, weightDecay: 0 }) },
      microBatchSize: 3,
      removePadding: removePadding ?? false,
    });
    try {
      const experiences = batch(model, algorithm);
      // micro-batches of 3 rows (DPO: 4, whole pairs)
      const rows = algorithm.schema === 'dpo' ? 2 * experiences.length : experiences.length;
      const micro = Math.ceil(rows / (algorithm.schema === 'dpo' ? 4 : 3));
      step.run(experiences); // warm: the first step sets up what later steps reuse
      const recording = recordNativeCalls([...HOST_TRANSFERS, ...SIZE_READS, 'embedding', 'backward']);
      let metrics: Record<string, number>;
      try {
        metrics = step.run(experiences);
      } finally {
        recording.stop();
      }
      const { calls } = recording;
      for (const key of ['loss', 'pg_loss', 'grad_norm', 'tokens']) assert.ok(Number.isFinite(metrics[key]), key);
      // the policy's micro-batches: each a forward (embedding) and two backward calls (the head's, the trunk's),
      // from the forward before the first backward; then (PPO) the critic's, one backward each, after the optimizer
      // step (which reads the gradient norm)
      const backwards = calls.flatMap((c, i) => (c === 'backward' ? [i] : []));
      assert.equal(backwards.length, (critic === null ? 2 : 3) * micro, calls.join(' '));
      const loops = [{ what: 'policy', first: 0, last: 2 * micro - 1 }];
      if (critic !== null) loops.push({ what: 'critic', first: 2 * micro, last: 3 * micro - 1 });
      for (const { what, first, last } of loops) {
        const start = calls.lastIndexOf('embedding', backwards[first]);
        const loop = calls.slice(start, (backwards[last] as number) + 1);
        assert.equal(loop.filter((c) => c === 'embedding').length, micro, `${what}: ${micro} micro-batches: ${loop.join(' ')}`);
        assert.deepEqual(
          loop.filter((c) => c !== 'embedding' && c !== 'backward'),
          [],
          `${what}: transfers inside the micro-batch loop: ${loop.join(' ')}`,
        );
      }
    } finally {
      reference?.dispose();
      critic?.dispose();
      model.dispose();
    }
  });
}
