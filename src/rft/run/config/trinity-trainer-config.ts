// trainer.trainer_config: veRL's own config inline (Trinity's advanced trainer settings). Most of it tunes veRL's
// FSDP/Megatron machinery and stays in the "ignored on this backend" block as one entry (src/rft/config/ignored-keys.ts);
// the knobs that mean something here are taken out of it first and mapped onto their keys:
//
//   actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu  → trainer.micro_batch_size (sequences per micro-batch)
//   actor_rollout_ref.actor.use_dynamic_bsz               → trainer.use_dynamic_bsz (micro-batches by a token budget)
//   actor_rollout_ref.actor.ppo_max_token_len_per_gpu     → trainer.max_token_len_per_gpu (the budget)
//   actor_rollout_ref.actor.grad_clip                      → trainer.grad_clip
//   actor_rollout_ref.model.enable_gradient_checkpointing  → trainer.gradient_checkpointing
//   actor_rollout_ref.model.use_remove_padding             → trainer.use_remove_padding
//   actor_rollout_ref.actor.optim.{lr, lr_warmup_steps, lr_warmup_steps_ratio, min_lr_ratio, weight_decay, betas}
//                                                          → algorithm.optimizer.* (Trinity's older place for them)
//   actor_rollout_ref.actor.optim.warmup_style             → algorithm.optimizer.lr_scheduler_type
//
// A target key the config also sets to another value is a problem at the veRL key (one of the two would be dropped).
import type { Segment, Tree } from '../../config/source.js';
import { describeValue, getIn, isMapping, joinPath } from '../../config/source.js';

const ACTOR = ['actor_rollout_ref', 'actor'];
const OPTIM = [...ACTOR, 'optim'];

/** [path under trainer.trainer_config, the key it sets] */
const VERL_KEYS: readonly [readonly string[], readonly string[]][] = [
  [
    [...ACTOR, 'ppo_micro_batch_size_per_gpu'],
    ['trainer', 'micro_batch_size'],
  ],
  [
    [...ACTOR, 'use_dynamic_bsz'],
    ['trainer', 'use_dynamic_bsz'],
  ],
  [
    [...ACTOR, 'ppo_max_token_len_per_gpu'],
    ['trainer', 'max_token_len_per_gpu'],
  ],
  [
    [...ACTOR, 'grad_clip'],
    ['trainer', 'grad_clip'],
  ],
  [
    ['actor_rollout_ref', 'model', 'enable_gradient_checkpointing'],
    ['trainer', 'gradient_checkpointing'],
  ],
  [
    ['actor_rollout_ref', 'model', 'use_remove_padding'],
    ['trainer', 'use_remove_padding'],
  ],
  ...['lr', 'lr_warmup_steps', 'lr_warmup_steps_ratio', 'min_lr_ratio', 'weight_decay', 'betas'].map(
    (key): [string[], string[]] => [
      [...OPTIM, key],
      ['algorithm', 'optimizer', key],
    ],
  ),
  [
    [...OPTIM, 'warmup_style'],
    ['algorithm', 'optimizer', 'lr_scheduler_type'],
  ],
];

/** Sets `path` in `tree`, making the mappings on the way. */
function setIn(tree: Tree, path: readonly string[], value: unknown): void {
  let node = tree;
  for (const segment of path.slice(0, -1)) {
    if (!isMapping(node[segment])) node[segment] = {};
    node = node[segment] as Tree;
  }
  node[path[path.length - 1] as string] = value;
}

/** Removes `path` from `tree`, and the mappings it leaves empty. */
function removeIn(tree: Tree, path: readonly string[]): void {
  const parent = getIn(tree, path.slice(0, -1));
  if (!isMapping(parent)) return;
  delete parent[path[path.length - 1] as string];
  if (path.length > 1 && Object.keys(parent).length === 0) removeIn(tree, path.slice(0, -1));
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** Maps the veRL knobs of `node`'s trainer.trainer_config (a run or a stage) onto their keys; returns what it mapped. */
export function mapTrainerConfig(
  node: Tree,
  at: (path: readonly Segment[]) => string,
  problem: (path: string, message: string) => void,
): { path: string; value: unknown; to: string }[] {
  const mapped: { path: string; value: unknown; to: string }[] = [];
  const trainer = node.trainer;
  if (!isMapping(trainer) || !isMapping(trainer.trainer_config)) return mapped;
  const verl = trainer.trainer_config;
  for (const [from, to] of VERL_KEYS) {
    const value = getIn(verl, from);
    if (value === undefined || value === null) continue;
    removeIn(verl, from);
    const path = at(['trainer', 'trainer_config', ...from]);
    const written = getIn(node, to);
    if (written !== undefined && written !== null && !same(written, value)) {
      problem(path, `sets ${joinPath(to)}, which is set to ${describeValue(written)}: remove one`);
      continue;
    }
    setIn(node, to, value);
    mapped.push({ path, value, to: `${joinPath(to)} ${JSON.stringify(value)}` });
  }
  if (Object.keys(verl).length === 0) delete trainer.trainer_config;
  return mapped;
}
