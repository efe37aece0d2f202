// The quickstart on a mixture of experts in miniature, for a test and a benchmark that must finish in minutes
// (test/examples/quickstart-moe-learns.test.ts, bench/moe-replay-gap.bench.ts): examples/quickstart/config.yaml as
// it is (base bench, SFT until a held-out greedy accuracy, then GRPO with an exact verifier reward) over a tiny random
// qwen3_moe (hidden 64, 2 layers, 4 experts, top 2) and one-digit addition (make-data.ts with max 10: "3+4=" → "07";
// 20 held out, 40 demonstrations). SFT stops at 30% held-out accuracy; GRPO then samples the 40 demonstrated problems
// at temperature 1, 16 problems × 16 samples a step, for 24 steps.
import { join } from 'node:path';
import { initModel } from 'trinity-rft/model';
import { writeJsonlSets } from 'trinity-rft/rft';
import { makeAdditionData } from './make-data.js';

/** GRPO steps of the short run. */
export const SHORT_MOE_GRPO_STEPS = 24;

/** Writes the model (`root`/model) and the data (`root`/{sft,train,eval}.jsonl). */
export function prepareShortMoeRun(root: string): void {
  initModel(join(root, 'model'), {
    architecture: 'qwen3_moe',
    hiddenSize: 64,
    numLayers: 2,
    numHeads: 4,
    numExperts: 4,
    numExpertsPerTok: 2,
    maxPositionEmbeddings: 32,
    seed: 0,
    alphabet: '0123456789+=',
  });
  writeJsonlSets(root, makeAdditionData(0, 10, 20, 40));
}

/**
 * `--set` overrides of examples/quickstart/config.yaml for the short run in `root` (its job: `root`/runs/quickstart/
 * `name`), in `dtype` (the engine's, and the trainer's unless `trainerDtype`: trainer.param_dtype), with
 * algorithm.enable_router_replay `replay`.
 */
export function shortMoeRunOverrides(
  root: string,
  options: { name: string; dtype: 'float32' | 'bfloat16'; trainerDtype?: 'float32' | 'bfloat16'; replay: boolean },
): string[] {
  const evalPath = join(root, 'eval.jsonl');
  return [
    `checkpoint_root_dir=${join(root, 'runs')}`,
    `name=${options.name}`,
    `model.model_path=${join(root, 'model')}`,
    `model.dtype=${options.dtype}`,
    ...(options.trainerDtype === undefined ? [] : [`trainer.param_dtype=${options.trainerDtype}`]),
    `algorithm.enable_router_replay=${options.replay}`,
    `buffer.explorer_input.taskset.path=${join(root, 'sft.jsonl')}`, // GRPO sharpens what SFT began
    'buffer.explorer_input.taskset.rollout_args.temperature=1',
    ...[0, 1].map((i) => `buffer.explorer_input.eval_tasksets.${i}.path=${evalPath}`),
    'buffer.batch_size=16',
    `buffer.total_steps=${SHORT_MOE_GRPO_STEPS}`,
    'algorithm.repeat_times=16',
    'algorithm.optimizer.lr=0.001',
    'algorithm.optimizer.lr_warmup_steps=0',
    `explorer.eval_interval=${SHORT_MOE_GRPO_STEPS}`,
    'trainer.save_interval=0',
    'monitor.monitor_type=[jsonl]',
    `stages.0.buffer.explorer_input.eval_tasksets.0.path=${evalPath}`,
    `stages.1.buffer.trainer_input.experience_buffer.path=${join(root, 'sft.jsonl')}`,
    `stages.1.buffer.explorer_input.eval_tasksets.0.path=${evalPath}`,
    'stages.1.buffer.train_batch_size=20',
    'stages.1.buffer.total_steps=200',
    'stages.1.algorithm.optimizer.lr=0.01',
    'stages.1.algorithm.optimizer.lr_warmup_steps=0',
    'stages.1.trainer.save_interval=0',
    'stages.1.trainer.stop_when.at_least=0.3',
  ];
}
