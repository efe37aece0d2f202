// Checkpoints of a run, in the job folder:
//   <jobDir>/checkpoints/global_step_<N>/
//       model/                    Hugging Face folder (config.json, model.safetensors, tokenizer...) — or, with LoRA,
//       adapter/                  the PEFT adapter only
//       optimizer.safetensors     optimizer state tensors (AdamW moments, step counters)
//       state.json                { step, optimizer: {kind, groups}, ...component state (explorer, trainer, buffer, selector) }
//   <jobDir>/checkpoints/latest_checkpointed_iteration.txt    N of the newest complete checkpoint
// A checkpoint is written into global_step_<N>.tmp and renamed when complete, and the "latest" file is replaced
// atomically after that, so a kill -9 at any moment leaves the previous checkpoint usable.
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CausalLM, LoraModel } from '../model/index.js';
import * as torch from '../torch/index.js';

export interface CheckpointContents {
  model: CausalLM;
  /** With LoRA only the adapter is saved (the base model is the run's model_path). */
  lora?: LoraModel | null;
  optimizer?: torch.Optimizer | null;
  /** JSON-serialisable state of the run's components. */
  state: Record<string, unknown>;
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
  rmSync(temporary, { recursive: true, force: true });
  mkdirSync(temporary, { recursive: true });
  if (contents.lora) contents.lora.save(join(temporary, 'adapter'));
  else contents.model.save(join(temporary, 'model'));
  let optimizer: { kind: string; groups: unknown[] } | null = null;
  if (contents.optimizer) {
    const saved = contents.optimizer.stateDict();
    torch.saveSafetensors(join(temporary, 'optimizer.safetensors'), saved.tensors);
    optimizer = { kind: saved.kind, groups: saved.groups };
  }
  writeFileSync(join(temporary, 'state.json'), `${JSON.stringify({ step, optimizer, ...contents.state }, null, 2)}\n`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(temporary, dir);
  writeFileAtomic(join(root, LATEST), `${step}\n`);
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
  /** The model folder (full model) or null when the checkpoint holds a LoRA adapter. */
  modelDir: string | null;
  adapterDir: string | null;
  state: Record<string, unknown>;
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
  return {
    step,
    dir,
    modelDir: existsSync(join(dir, 'model')) ? join(dir, 'model') : null,
    adapterDir: existsSync(join(dir, 'adapter')) ? join(dir, 'adapter') : null,
    state,
  };
}

/** Restores an optimizer's state from a checkpoint written by saveCheckpoint (same parameter layout). */
export function loadOptimizerState(checkpoint: LoadedCheckpoint, optimizer: torch.Optimizer): void {
  const saved = checkpoint.state.optimizer as { kind: string; groups: torch.OptimizerState['groups'] } | null | undefined;
  const file = join(checkpoint.dir, 'optimizer.safetensors');
  if (!saved || !existsSync(file)) throw new Error(`${checkpoint.dir}: the checkpoint has no optimizer state`);
  const tensors = torch.loadSafetensors(file);
  try {
    optimizer.loadStateDict({ kind: saved.kind, groups: saved.groups, tensors: Object.fromEntries(tensors) });
  } finally {
    for (const t of tensors.values()) t.dispose();
  }
}
