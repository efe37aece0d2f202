// The sides of bench:long-grpo (bench/long-grpo.bench.ts, whose header says what each one runs): our GRPO train step
// in the padded or the packed layout, and TRL's GRPOTrainer step in a Python child (bench/long_grpo_trl.py), each
// behind one interface: a timed step on given rows, and one step under libtorch's profiler.
import { join } from 'node:path';
import { CausalLM, type ModelDType } from '../src/model/index.js';
import { resolveAlgorithm } from '../src/rft/algorithm/index.js';
import type { Experience } from '../src/rft/experience.js';
import { MasterWeights } from '../src/rft/trainer/master-weights.js';
import { TrainStep } from '../src/rft/trainer/train-step.js';
import * as torch from '../src/torch/index.js';
import { findPython, now, PythonHalf, repoRoot, secondsSince } from './harness.js';
import type { GrpoRow } from './math-word-problems.js';

export interface StepTiming {
  seconds: number;
  /** CPU seconds of the side's process over the step (all threads): less sensitive to other processes' load. */
  cpuSeconds: number;
  /** Positions the policy's trunk computed (pads included). */
  computed: number;
}

/** A row to train; `logprobs`: the rollout's, where it was generated (else stand-ins, see the header). */
export type TrainRow = GrpoRow & { logprobs?: number[] };

/** One op of a profiled step: ATen op or autograd backward function, its self time and calls. */
export interface ProfileRow {
  name: string;
  selfMs: number;
  calls: number;
}

export interface Side {
  name: string;
  step(s: number, rows: TrainRow[]): Promise<StepTiming>;
  /** One more step under libtorch's profiler (Kineto, the same on both sides): the ops by self time, largest first. */
  profile(s: number, rows: TrainRow[]): Promise<{ wallMs: number; ops: ProfileRow[] }>;
  close(): Promise<void>;
}

/** Our train step in one layout over the model folder (see the header). */
export function ourSide(
  modelDir: string,
  options: { layout: 'padded' | 'packed'; dtype: ModelDType; device: string; micro: number; tokenBudget: number },
): Side {
  const onDevice = options.device === 'cpu' ? {} : { device: options.device };
  const model = CausalLM.load(modelDir, { dtype: options.dtype, ...onDevice, requiresGrad: true });
  const masterModel =
    options.dtype === 'float32' ? null : CausalLM.load(modelDir, { dtype: 'float32', ...onDevice, requiresGrad: true });
  const names = [...(masterModel ?? model).parameters().keys()];
  const masterWeights =
    masterModel === null
      ? null
      : new MasterWeights(
          names.map((n) => model.parameters().get(n) as torch.Tensor),
          names.map((n) => masterModel.parameters().get(n) as torch.Tensor),
        );
  let computed = 0;
  const beginPass = model.beginPass.bind(model);
  model.beginPass = (ids, passOptions = {}) => {
    computed += ids.numel;
    return beginPass(ids, passOptions);
  };
  const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none' });
  const o = algorithm.optimizer;
  const packed = options.layout === 'packed';
  const trainStep = new TrainStep({
    model,
    optimizer: new torch.AdamW(torch.weightDecayGroups((masterModel ?? model).parameters(), o.weightDecay), {
      lr: 1e-6,
      betas: [o.betas[0] ?? 0.9, o.betas[1] ?? 0.999],
    }),
    algorithm,
    checkpoint: true,
    removePadding: packed,
    ...(packed ? { microBatchTokens: options.tokenBudget } : { microBatchSize: options.micro }),
    device: options.device,
    masterWeights,
  });
  const experiencesOf = (s: number, rows: TrainRow[]): Experience[] =>
    rows.map((r, i) => ({
      eid: `s${s}-row${i}`,
      tokens: [...r.prompt_ids, ...r.completion_ids],
      promptLength: r.prompt_ids.length,
      logprobs: r.logprobs ?? r.completion_ids.map(() => -1),
      reward: r.reward,
      info: { taskId: `s${s}-${r.question}`, runId: i },
    }));
  return {
    name: `ours ${options.layout}`,
    step: async (s, rows) => {
      const experiences = experiencesOf(s, rows);
      computed = 0;
      const cpu0 = process.cpuUsage();
      const t0 = now();
      trainStep.run(experiences);
      const seconds = secondsSince(t0);
      const cpu = process.cpuUsage(cpu0);
      return { seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6, computed };
    },
    profile: async (s, rows) => {
      const experiences = experiencesOf(s, rows);
      const { profile } = torch.profile(() => trainStep.run(experiences));
      const ops = profile.ops
        .filter((op) => op.where === 'cpu')
        .map((op) => ({ name: op.name, selfMs: op.selfUs / 1e3, calls: op.calls }));
      return { wallMs: profile.wallUs / 1e3, ops };
    },
    close: async () => {
      model.dispose();
      masterModel?.dispose();
    },
  };
}

/** TRL's GRPOTrainer step in bench/long_grpo_trl.py (a child process; see its header). */
export async function trlSide(init: {
  model: string;
  rows: string;
  micro: number;
  threads: number;
  device: string;
  out: string;
}) {
  const python = new PythonHalf(findPython(), join(repoRoot, 'bench', 'long_grpo_trl.py'));
  const ready = await python.request<{ ok: boolean; torch: string; device: string }>({ kind: 'init', lr: 1e-6, ...init });
  const side: Side = {
    name: 'TRL',
    step: async (s) => {
      const reply = await python.request<{ ok: boolean; s: number[]; cpu_s: number; computed: number }>({
        kind: 'step',
        step: s,
      });
      return { seconds: reply.s[0] as number, cpuSeconds: reply.cpu_s, computed: reply.computed };
    },
    profile: async (s) => {
      const reply = await python.request<{ ok: boolean; wall_ms: number; ops: ProfileRow[] }>({ kind: 'profile', step: s });
      return { wallMs: reply.wall_ms, ops: reply.ops };
    },
    close: () => python.close(),
  };
  return { side, torchVersion: ready.torch, device: ready.device };
}
