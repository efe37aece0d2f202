// Checkpoints of a run, in the job folder:
//   <jobDir>/checkpoints/global_step_<N>/
//       model/                    Hugging Face folder (config.json, model.safetensors, tokenizer...) — or, with LoRA,
//       adapter/                  the PEFT adapter only
//       sharded/                  — or, for a fully sharded policy, each rank's shards and AdamW state with an index
//                                 (./trainer/fsdp-checkpoint.ts), in place of model/ and optimizer.safetensors
//       optimizer.safetensors     optimizer state tensors (AdamW moments, step counters)
//       critic.safetensors        PPO: the critic's weights (trunk.<name>, head.weight, head.bias)
//       critic-optimizer.safetensors   PPO: the critic optimizer's state tensors
//       trainer.json              the trainer's other state that later steps depend on: { criticOptimizer: {kind,
//                                 groups} | null, ...(adaptive KL coefficients, step counters, LR schedule position,
//                                 LoRA dropout stream {seed, draws}) }
//       state.json                { step, optimizer: {kind, groups}, ...the run's state (RunState: what each part
//                                 keeps, listed in src/rft/run/checkpoint-state.ts; `settings`, compared on resume:
//                                 src/rft/run/resume-settings.ts) }
//   <jobDir>/checkpoints/latest_checkpointed_iteration.txt    N of the newest complete checkpoint
// A checkpoint is written into global_step_<N>.tmp and renamed when complete, and the "latest" file is replaced
// atomically after that, so a kill -9 at any moment leaves the previous checkpoint usable. A write that fails names
// the checkpoint, the part and the file (../util/file-write.ts): a full disk otherwise said only "ENOSPC ..., write".
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CausalLM, LoraModel } from '../model/index.js';
import * as torch from '../torch/index.js';
import { writingFile } from '../util/file-write.js';
import type { Critic } from './algorithm/critic.js';

export interface CheckpointContents {
  /** The policy: a CausalLM, or a vision-language model (VisionLanguageModel), whose save() writes its folder. */
  model: Pick<CausalLM, 'save'>;
  /** With LoRA only the adapter is saved (the base model is the run's model_path). */
  lora?: LoraModel | null;
  /**
   * A fully sharded policy: the folder its ranks wrote their shard files into (./trainer/fsdp-checkpoint.ts), moved
   * in as sharded/ in place of the model (the optimizer state is in it too: leave `optimizer` out).
   */
  shards?: string | null;
  optimizer?: torch.Optimizer | null;
  /** The PPO critic and its optimizer. */
  critic?: { critic: Critic; optimizer: torch.Optimizer } | null;
  /** JSON-serialisable trainer state (trainer.json). */
  trainer?: Record<string, unknown> | null;
  /** JSON-serialisable state of the run's components. */
  state: Record<string, unknown>;
}

interface SavedOptimizer {
  kind: string;
  groups: torch.OptimizerState['groups'];
}

/** Writes an optimizer's tensors to `file`; returns the JSON part (kind, groups). */
function writeOptimizer(file: string, optimizer: torch.Optimizer): SavedOptimizer {
  const saved = optimizer.stateDict();
  torch.saveSafetensors(file, saved.tensors);
  return { kind: saved.kind, groups: saved.groups };
}

/** Restores an optimizer from `file` and its JSON part. */
function readOptimizer(file: string, saved: SavedOptimizer, optimizer: torch.Optimizer): void {
  const tensors = torch.loadSafetensors(file);
  try {
    optimizer.loadStateDict({ kind: saved.kind, groups: saved.groups, tensors: Object.fromEntries(tensors) });
  } finally {
    for (const t of tensors.values()) t.dispose();
  }
}

export interface SavedCheckpoint {
  step: number;
  dir: string;
}

const LATEST = 'latest_checkpointed_iteration.txt';

export function checkpointsDir(jobDir: string): string {
  return join(jobDir, 'checkpoints');
}

function writeFileAtomic(file: string, text: string): void {
  const temporary = `${file}.tmp-${process.pid}`;
  writeFileSync(temporary, text);
  renameSync(temporary, file);
}

/** Writes checkpoint `step` and makes it the latest; keeps the newest `keep` checkpoints (0 or less: all). */
export function saveCheckpoint(jobDir: string, step: number, contents: CheckpointContents, keep = 0): SavedCheckpoint {
  const root = checkpointsDir(jobDir);
  const dir = join(root, `global_step_${step}`);
  const temporary = `${dir}.tmp`;
  /** Writes one part of the checkpoint; its error names the part and the file. */
  const write = <T>(part: string, file: string, action: () => T): T => writingFile(`checkpoint ${step}'s ${part}`, file, action);
  write('folder', temporary, () => {
    rmSync(temporary, { recursive: true, force: true });
    mkdirSync(temporary, { recursive: true });
  });
  const { lora, optimizer: optimizerState } = contents;
  const shards = contents.shards ?? null;
  if (lora) write('LoRA adapter', join(temporary, 'adapter'), () => lora.save(join(temporary, 'adapter')));
  else if (shards !== null)
    write('sharded policy', join(temporary, 'sharded'), () => renameSync(shards, join(temporary, 'sharded')));
  else write('model', join(temporary, 'model'), () => contents.model.save(join(temporary, 'model')));
  const optimizerFile = join(temporary, 'optimizer.safetensors');
  const optimizer = optimizerState
    ? write('optimizer state', optimizerFile, () => writeOptimizer(optimizerFile, optimizerState))
    : null;
  let criticOptimizer: SavedOptimizer | null = null;
  if (contents.critic) {
    const { critic, optimizer: criticOptimizerState } = contents.critic;
    const criticFile = join(temporary, 'critic.safetensors');
    write('critic', criticFile, () => torch.saveSafetensors(criticFile, critic.namedTensors()));
    const criticOptimizerFile = join(temporary, 'critic-optimizer.safetensors');
    criticOptimizer = write('critic optimizer state', criticOptimizerFile, () =>
      writeOptimizer(criticOptimizerFile, criticOptimizerState),
    );
  }
  if (contents.trainer || criticOptimizer) {
    const trainer = { criticOptimizer, ...contents.trainer };
    const trainerFile = join(temporary, 'trainer.json');
    write('trainer state', trainerFile, () => writeFileSync(trainerFile, `${JSON.stringify(trainer, null, 2)}\n`));
  }
  const stateFile = join(temporary, 'state.json');
  write('run state', stateFile, () =>
    writeFileSync(stateFile, `${JSON.stringify({ step, optimizer, ...contents.state }, null, 2)}\n`),
  );
  write('folder', dir, () => {
    rmSync(dir, { recursive: true, force: true });
    renameSync(temporary, dir);
  });
  write('latest-checkpoint marker', join(root, LATEST), () => writeFileAtomic(join(root, LATEST), `${step}\n`));
  if (keep > 0) {
    const steps = listCheckpoints(jobDir);
    for (const old of steps.slice(0, Math.max(0, steps.length - keep)))
      rmSync(join(root, `global_step_${old}`), { recursive: true, force: true });
  }
  return { step, dir };
}

/** Steps of the complete checkpoints, oldest first. */
export function listCheckpoints(jobDir: string): number[] {
  const root = checkpointsDir(jobDir);
  if (!existsSync(root)) return [];
  return readdirSync(root)
    .map((name) => /^global_step_(\d+)$/.exec(name)?.[1])
    .filter((s): s is string => s !== undefined)
    .map(Number)
    .filter((step) => existsSync(join(root, `global_step_${step}`, 'state.json')))
    .sort((a, b) => a - b);
}

export interface LoadedCheckpoint {
  step: number;
  dir: string;
  /** The model folder (full model) or null when the checkpoint holds a LoRA adapter or a sharded policy. */
  modelDir: string | null;
  adapterDir: string | null;
  /** A fully sharded policy's shard files and index (./trainer/fsdp-checkpoint.ts), else null. */
  shardedDir: string | null;
  state: Record<string, unknown>;
  /** trainer.json (null when the checkpoint has none). */
  trainer: Record<string, unknown> | null;
}

/** The latest complete checkpoint, or null when the job has none. */
export function latestCheckpoint(jobDir: string): LoadedCheckpoint | null {
  const root = checkpointsDir(jobDir);
  const latestFile = join(root, LATEST);
  let step: number | undefined;
  if (existsSync(latestFile)) {
    const text = readFileSync(latestFile, 'utf8').trim();
    if (/^\d+$/.test(text) && existsSync(join(root, `global_step_${text}`, 'state.json'))) step = Number(text);
  }
  step ??= listCheckpoints(jobDir).at(-1);
  if (step === undefined) return null;
  const dir = join(root, `global_step_${step}`);
  let state: Record<string, unknown>;
  try {
    state = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new Error(`${join(dir, 'state.json')}: unreadable checkpoint state: ${(error as Error).message}`);
  }
  let trainer: Record<string, unknown> | null = null;
  const trainerFile = join(dir, 'trainer.json');
  if (existsSync(trainerFile)) {
    try {
      trainer = JSON.parse(readFileSync(trainerFile, 'utf8')) as Record<string, unknown>;
    } catch (error) {
      throw new Error(`${trainerFile}: unreadable trainer state: ${(error as Error).message}`);
    }
  }
  return {
    step,
    dir,
    modelDir: existsSync(join(dir, 'model')) ? join(dir, 'model') : null,
    adapterDir: existsSync(join(dir, 'adapter')) ? join(dir, 'adapter') : null,
    shardedDir: existsSync(join(dir, 'sharded')) ? join(dir, 'sharded') : null,
    state,
    trainer,
  };
}

/**
 * Throws when a tensor of a checkpoint's weights (as loaded) holds NaN or ±Inf, naming the checkpoint and the first
 * such tensor: a run that diverged saved them, and resuming would train on NaN without a word. One reduction per
 * tensor, all(isfinite(t)), read back as one number.
 */
export function checkFiniteWeights(checkpointDir: string, weights: ReadonlyMap<string, torch.Tensor>): void {
  for (const [name, tensor] of weights) {
    if (torch.scope(() => tensor.isfinite().all().item()) === 1) continue;
    throw new Error(
      `${checkpointDir}: the checkpoint's weights are not finite (${name} holds NaN or Inf; the run that wrote it ` +
        'diverged): resume from an earlier checkpoint by removing this one, or start the run afresh',
    );
  }
}

/** Restores an optimizer's state from a checkpoint written by saveCheckpoint (same parameter layout). */
export function loadOptimizerState(checkpoint: LoadedCheckpoint, optimizer: torch.Optimizer): void {
  const saved = checkpoint.state.optimizer as SavedOptimizer | null | undefined;
  const file = join(checkpoint.dir, 'optimizer.safetensors');
  if (!saved || !existsSync(file)) throw new Error(`${checkpoint.dir}: the checkpoint has no optimizer state`);
  readOptimizer(file, saved, optimizer);
}

/** Restores the critic's weights and its optimizer from a checkpoint written with `critic`. */
export function loadCriticState(checkpoint: LoadedCheckpoint, critic: Critic, optimizer: torch.Optimizer): void {
  const weightsFile = join(checkpoint.dir, 'critic.safetensors');
  const optimizerFile = join(checkpoint.dir, 'critic-optimizer.safetensors');
  const saved = checkpoint.trainer?.criticOptimizer as SavedOptimizer | null | undefined;
  if (!existsSync(weightsFile) || !existsSync(optimizerFile) || !saved) {
    throw new Error(
      `${checkpoint.dir}: the checkpoint has no critic (written by a run without one, or before critics were saved); ` +
        `a PPO run cannot resume from it as the same run`,
    );
  }
  const tensors = torch.loadSafetensors(weightsFile);
  try {
    critic.loadNamedTensors(tensors, weightsFile);
  } finally {
    for (const t of tensors.values()) t.dispose();
  }
  readOptimizer(optimizerFile, saved, optimizer);
}
