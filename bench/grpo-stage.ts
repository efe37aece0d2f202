// The GRPO stage of a quickstart-style config, as the GRPO benchmarks read it (bench/grpo.bench.ts and
// bench/grpo-same-batch.ts): the stage's merged config (the base config with the first mode-both stage's overrides) and
// the settings that are mapped onto TRL's GRPOConfig (bench/grpo_trl.py).
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import YAML from 'yaml';
import { permutation, seededRandom } from '../src/rft/buffer/random.js';

export type Doc = Record<string, unknown>;
export const asDoc = (v: unknown): Doc => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Doc) : {});
export const at = (doc: Doc, ...path: string[]): unknown => path.reduce<unknown>((d, k) => asDoc(d)[k], doc);

/** Deep merge of a stage's overrides onto the base config (objects merge, everything else replaces). */
export function merge(base: Doc, over: Doc): Doc {
  const out: Doc = { ...base };
  for (const [k, v] of Object.entries(over)) {
    out[k] = v !== null && typeof v === 'object' && !Array.isArray(v) ? merge(asDoc(base[k]), v as Doc) : v;
  }
  return out;
}

export interface GrpoStage {
  /** The merged one-stage config (no stage_name, no stages). */
  stage: Doc;
  taskset: Doc;
  trainFile: string;
  evalFile: string;
  group: number;
  batch: number;
  maxTokens: number;
  lr: number;
  warmupSteps: number;
  scheduler: 'cosine' | 'constant_with_warmup';
  minLrRatio: number;
  temperature: number;
  /** TRL's beta: the KL loss coefficient, 0 when kl_loss_fn is none. */
  beta: number;
  /** synchronizer.sync_offset: 1 = the explorer samples step s + 1 while the trainer trains step s. */
  syncOffset: number;
  /** buffer.total_steps, when set. */
  totalSteps: number | undefined;
  /** explorer.eval_interval, when set. */
  evalInterval: number | undefined;
}

export function readGrpoStage(configFile: string): GrpoStage {
  const base = asDoc(YAML.parse(readFileSync(configFile, 'utf8')));
  const stages = (base.stages as Doc[] | undefined) ?? [];
  const grpoStage = stages.find((s) => s.mode === 'both' || s.mode === undefined) ?? {};
  const { stages: _stages, ...baseWithoutStages } = base;
  const stage = merge(baseWithoutStages, grpoStage);
  delete stage.stage_name;
  const fromConfig = (p: unknown) => resolve(dirname(configFile), String(p));
  const taskset = asDoc(at(stage, 'buffer', 'explorer_input', 'taskset'));
  const evalTaskset = asDoc((at(stage, 'buffer', 'explorer_input', 'eval_tasksets') as Doc[] | undefined)?.[0]);
  const optimizer = asDoc(at(stage, 'algorithm', 'optimizer'));
  const klCoef = Number(at(stage, 'algorithm', 'kl_loss_fn_args', 'kl_coef') ?? 0.001);
  const numbers = {
    group: Number(at(stage, 'algorithm', 'repeat_times')),
    batch: Number(at(stage, 'buffer', 'batch_size')),
    maxTokens: Number(at(stage, 'model', 'max_response_tokens')),
    lr: Number(optimizer.lr),
    warmupSteps: Math.max(0, Number(optimizer.lr_warmup_steps ?? 0)),
    minLrRatio: Number(optimizer.min_lr_ratio ?? 0),
    temperature: Number(at(taskset, 'rollout_args', 'temperature') ?? 1),
    beta: String(at(stage, 'algorithm', 'kl_loss_fn') ?? 'k2') === 'none' ? 0 : klCoef,
    syncOffset: Number(at(stage, 'synchronizer', 'sync_offset') ?? 0),
  };
  for (const [k, v] of Object.entries(numbers)) {
    if (!Number.isFinite(v)) throw new Error(`${configFile}: the GRPO stage has no usable ${k}`);
  }
  const optional = (v: unknown) => (v === undefined ? undefined : Number(v));
  return {
    stage,
    taskset,
    trainFile: fromConfig(taskset.path),
    evalFile: fromConfig(evalTaskset.path),
    ...numbers,
    scheduler: optimizer.lr_scheduler_type === 'cosine' ? 'cosine' : 'constant_with_warmup',
    totalSteps: optional(at(stage, 'buffer', 'total_steps')),
    evalInterval: optional(at(stage, 'explorer', 'eval_interval')),
  };
}

/**
 * `count` or more of `rows` in one seeded order (bench:grpo --task-order shared): a fresh Fisher–Yates permutation of
 * all rows per pass, passes appended until there are at least `count`.
 */
export function sharedTaskOrder(rows: readonly string[], seed: number, count: number): string[] {
  if (rows.length === 0) throw new Error('sharedTaskOrder: the train file has no rows');
  const random = seededRandom(seed);
  const ordered: string[] = [];
  while (ordered.length < count) ordered.push(...permutation(rows.length, random).map((i) => rows[i] as string));
  return ordered;
}
