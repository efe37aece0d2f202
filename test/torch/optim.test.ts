// Optimizers, gradient clipping and learning-rate schedules against PyTorch / transformers.
// Reference values: test/fixtures/torch-optim.{safetensors,json}, written by scripts/fixtures/torch_optim.py
// (torch.optim.AdamW and SGD, torch.nn.utils.clip_grad_norm_, transformers' get_*_schedule lr_lambdas and LambdaLR).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as torch from '../../src/torch/index.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');
const TOL = 1e-6;

interface SgdCase {
  name: string;
  lr: number;
  momentum: number;
  dampening: number;
  nesterov: boolean;
  weight_decay: number;
  params: number;
}
interface ClipCase {
  name: string;
  max_norm: number;
  norm_type: number | 'inf';
  total_norm: number;
  params: number;
}
interface ScheduleCase {
  name: string;
  type: torch.LrScheduleType;
  warmup?: number;
  total?: number;
  min_lr_rate?: number;
  multipliers: number[];
  group_lrs: number[][];
}
interface Cases {
  steps: number;
  adamw: {
    params: number;
    groups: { params: number[]; lr: number; weight_decay: number }[];
    betas: [number, number];
    eps: number;
  };
  sgd: SgdCase[];
  clip: ClipCase[];
  schedules: { base_lrs: number[]; steps: number; cases: ScheduleCase[] };
}

const cases = JSON.parse(readFileSync(join(FIXTURES, 'torch-optim.json'), 'utf8')) as Cases;

/** Runs fn with the fixture tensors loaded, inside a scope; checks that no tensor handle leaks. */
function withFixture(fn: (fx: (name: string) => torch.Tensor) => void): void {
  const before = torch.liveTensorCount();
  torch.scope(() => {
    const tensors = torch.loadSafetensors(join(FIXTURES, 'torch-optim.safetensors'));
    fn((name) => {
      const t = tensors.get(name);
      if (t === undefined) throw new Error(`fixture tensor '${name}' missing`);
      return t;
    });
  });
  assert.equal(torch.liveTensorCount(), before, 'tensor handles leaked');
}

function assertClose(actual: torch.Tensor, expected: torch.Tensor, what: string, tol = TOL): void {
  assert.deepEqual(actual.shape, expected.shape, `${what}: shape`);
  const a = actual.toTypedArray() as Float32Array;
  const e = expected.toTypedArray() as Float32Array;
  for (let i = 0; i < e.length; i++) {
    const diff = Math.abs((a[i] as number) - (e[i] as number));
    if (!(diff <= tol)) assert.fail(`${what}: element ${i} is ${a[i]}, expected ${e[i]} (|diff| ${diff} > ${tol})`);
  }
}

function makeParams(fx: (name: string) => torch.Tensor, prefix: string, n: number): torch.Tensor[] {
  return Array.from({ length: n }, (_, i) => fx(`${prefix}.p${i}.init`).clone().requiresGrad_());
}

/** Runs `steps` optimizer steps with the fixture's gradients, checking the parameters after each. */
function runSteps(
  fx: (name: string) => torch.Tensor,
  prefix: string,
  params: torch.Tensor[],
  opt: torch.Optimizer,
  from: number,
  to: number,
): void {
  for (let k = from; k <= to; k++) {
    torch.scope(() => {
      params.forEach((p, i) => {
        p.grad = fx(`${prefix}.p${i}.grad${k}`).clone();
      });
      opt.step();
      opt.zeroGrad();
      params.forEach((p, i) => {
        assertClose(p, fx(`${prefix}.p${i}.step${k}`), `${prefix} param ${i} after step ${k}`);
      });
    });
  }
}

function makeAdamW(params: torch.Tensor[]): torch.AdamW {
  const { groups, betas, eps } = cases.adamw;
  return new torch.AdamW(
    groups.map((g) => ({ params: g.params.map((i) => params[i] as torch.Tensor), lr: g.lr, weightDecay: g.weight_decay })),
    { lr: 0.5, betas, eps, weightDecay: 0.5 },
  );
}

function makeSgd(params: torch.Tensor[], c: SgdCase): torch.SGD {
  return new torch.SGD(params, {
    lr: c.lr,
    momentum: c.momentum,
    dampening: c.dampening,
    nesterov: c.nesterov,
    weightDecay: c.weight_decay,
  });
}

describe('AdamW', () => {
  test('matches torch.optim.AdamW for 5 steps (two groups, own lr and weight decay, non-default betas/eps)', () =>
    withFixture((fx) => {
      const params = makeParams(fx, 'adamw', cases.adamw.params);
      const opt = makeAdamW(params);
      try {
        runSteps(fx, 'adamw', params, opt, 1, cases.steps);
      } finally {
        opt.dispose();
      }
    }));

  test('stateDict/loadStateDict: stopping after 2 steps and reloading gives the same parameters as never stopping', () =>
    withFixture((fx) => {
      const params = makeParams(fx, 'adamw', cases.adamw.params);
      const first = makeAdamW(params);
      let resumed: torch.AdamW | undefined;
      const dir = mkdtempSync(join(tmpdir(), 'trinity-optim-'));
      try {
        runSteps(fx, 'adamw', params, first, 1, 2);
        // Through a file, as a checkpoint would: tensors via safetensors, the rest as JSON.
        const saved = first.stateDict();
        assert.equal(saved.kind, 'AdamW');
        assert.equal(Object.keys(saved.tensors).length, 3 * cases.adamw.params);
        const file = join(dir, 'optimizer.safetensors');
        torch.saveSafetensors(file, saved.tensors, { groups: JSON.stringify(saved.groups) });
        first.dispose();
        // Fresh parameters with the values after step 2, a fresh optimizer (with other lrs), then the saved state.
        const again = params.map((p) => p.detach().clone().requiresGrad_());
        resumed = new torch.AdamW([{ params: again.slice(0, 2) }, { params: again.slice(2) }], {
          lr: 1,
          betas: cases.adamw.betas,
          eps: cases.adamw.eps,
        });
        const header = torch.readSafetensorsHeader(file);
        const groups = JSON.parse(header.metadata.groups ?? '[]') as torch.OptimizerState['groups'];
        resumed.loadStateDict({ kind: 'AdamW', groups, tensors: Object.fromEntries(torch.loadSafetensors(file)) });
        assert.deepEqual(
          resumed.groups.map((g) => [g.lr, g.weightDecay]),
          cases.adamw.groups.map((g) => [g.lr, g.weight_decay]),
        );
        runSteps(fx, 'adamw', again, resumed, 3, cases.steps);
      } finally {
        first.dispose();
        resumed?.dispose();
        rmSync(dir, { recursive: true, force: true });
      }
    }));

  test('loadStateDict rejects state of another optimizer or group layout', () =>
    withFixture((fx) => {
      const params = makeParams(fx, 'adamw', cases.adamw.params);
      const adam = makeAdamW(params);
      const sgd = new torch.SGD(params, { lr: 0.1, momentum: 0.9 });
      try {
        assert.throws(() => adam.loadStateDict(sgd.stateDict()), /optimizer state is for SGD, not AdamW/);
        const oneGroup = new torch.AdamW(params);
        assert.throws(() => oneGroup.loadStateDict(adam.stateDict()), /2 parameter groups, this optimizer has 1/);
      } finally {
        adam.dispose();
        sgd.dispose();
      }
    }));
});

describe('SGD', () => {
  for (const c of cases.sgd) {
    test(`matches torch.optim.SGD: ${c.name} (lr ${c.lr}, momentum ${c.momentum}, dampening ${c.dampening}, nesterov ${c.nesterov}, weight decay ${c.weight_decay})`, () =>
      withFixture((fx) => {
        const prefix = `sgd.${c.name}`;
        const params = makeParams(fx, prefix, c.params);
        const opt = makeSgd(params, c);
        try {
          runSteps(fx, prefix, params, opt, 1, cases.steps);
        } finally {
          opt.dispose();
        }
      }));
  }

  test('stateDict/loadStateDict round trip (momentum buffers) continues exactly', () =>
    withFixture((fx) => {
      const c = cases.sgd.find((s) => s.name === 'nesterov_wd') as SgdCase;
      const prefix = `sgd.${c.name}`;
      const params = makeParams(fx, prefix, c.params);
      const first = makeSgd(params, c);
      const second = makeSgd(params, { ...c, lr: 123 });
      try {
        runSteps(fx, prefix, params, first, 1, 3);
        const state = first.stateDict();
        assert.deepEqual(Object.keys(state.tensors).sort(), ['state.0.momentum_buffer', 'state.1.momentum_buffer']);
        second.loadStateDict(state);
        first.dispose(); // the loaded state is a copy
        assert.equal(second.lr, c.lr);
        runSteps(fx, prefix, params, second, 4, cases.steps);
      } finally {
        first.dispose();
        second.dispose();
      }
    }));
});

describe('clipGradNorm', () => {
  for (const c of cases.clip) {
    test(`matches torch.nn.utils.clip_grad_norm_: ${c.name} (max ${c.max_norm}, norm ${c.norm_type})`, () =>
      withFixture((fx) => {
        const params = Array.from({ length: c.params }, (_, i) => {
          const p = torch.zeros(fx(`clip.${c.name}.g${i}.before`).shape, { requiresGrad: true });
          p.grad = fx(`clip.${c.name}.g${i}.before`).clone();
          return p;
        });
        const normType = c.norm_type === 'inf' ? Number.POSITIVE_INFINITY : c.norm_type;
        const total = torch.clipGradNorm(params, c.max_norm, normType);
        assert.ok(
          Math.abs(total - c.total_norm) <= TOL * Math.max(1, c.total_norm),
          `total norm ${total}, expected ${c.total_norm}`,
        );
        params.forEach((p, i) => {
          assertClose(p.grad as torch.Tensor, fx(`clip.${c.name}.g${i}.after`), `${c.name} grad ${i}`);
        });
      }));
  }

  test('parameters without gradients are skipped; no gradients gives 0', () =>
    torch.scope(() => {
      const a = torch.zeros([2], { requiresGrad: true });
      const b = torch.zeros([2], { requiresGrad: true });
      assert.equal(torch.clipGradNorm([a, b], 1), 0);
      a.grad = torch.tensor([3, 4]);
      assert.ok(Math.abs(torch.clipGradNorm([a, b], 100) - 5) < 1e-6);
      assert.equal(b.grad, null);
    }));

  test('gradients of several dtypes are each scaled by the one coefficient', () =>
    torch.scope(() => {
      // norms 3 (float32), 4 (bfloat16), 12 (float32): total 13, clipped to 6.5 → every gradient × (6.5 / (13 + 1e-6))
      const grads: [number[], 'float32' | 'bfloat16'][] = [
        [[3, 0], 'float32'],
        [[0, 4], 'bfloat16'],
        [[12], 'float32'],
      ];
      const params = grads.map(([g, dtype]) => {
        const p = torch.zeros([g.length], { dtype, requiresGrad: true });
        p.grad = torch.tensor(g).to({ dtype });
        return p;
      });
      assert.ok(Math.abs(torch.clipGradNorm(params, 6.5) - 13) < 1e-5);
      const coefficient = 6.5 / (13 + 1e-6);
      params.forEach((p, i) => {
        const [g, dtype] = grads[i] as [number[], string];
        assert.equal(p.grad?.dtype, dtype);
        const got = p.grad?.float().toArray() as number[];
        g.forEach((v, j) => {
          const tolerance = dtype === 'bfloat16' ? 2 ** -7 * Math.abs(v) : 1e-6;
          assert.ok(
            Math.abs((got[j] as number) - v * coefficient) <= tolerance,
            `grad ${i}[${j}] ${got[j]}, expected ${v * coefficient}`,
          );
        });
      });
    }));
});

describe('learning-rate schedules', () => {
  const { base_lrs: baseLrs, steps, cases: scheduleCases } = cases.schedules;
  const scheduleOf = (c: ScheduleCase): torch.LrSchedule => ({
    type: c.type,
    ...(c.warmup !== undefined ? { warmupSteps: c.warmup } : {}),
    ...(c.total !== undefined ? { totalSteps: c.total } : {}),
    ...(c.min_lr_rate !== undefined ? { minLrRatio: c.min_lr_rate } : {}),
  });

  for (const c of scheduleCases) {
    test(`lrMultiplier matches transformers: ${c.name}`, () => {
      for (let step = 0; step <= steps; step++) {
        const got = torch.lrMultiplier(scheduleOf(c), step);
        const want = c.multipliers[step] as number;
        assert.ok(Math.abs(got - want) <= TOL, `${c.name} step ${step}: ${got}, expected ${want}`);
      }
    });

    test(`LrScheduler gives each parameter group its LambdaLR learning rate: ${c.name}`, () =>
      torch.scope(() => {
        const w = [torch.zeros([1], { requiresGrad: true }), torch.zeros([1], { requiresGrad: true })];
        const opt = new torch.SGD([
          { params: [w[0] as torch.Tensor], lr: baseLrs[0] },
          { params: [w[1] as torch.Tensor], lr: baseLrs[1] },
        ]);
        const scheduler = new torch.LrScheduler(opt, baseLrs, scheduleOf(c));
        for (let step = 0; step <= steps; step++) {
          assert.equal(scheduler.currentStep, step);
          const want = c.group_lrs[step] as number[];
          opt.groups.forEach((g, i) => {
            assert.ok(
              Math.abs(g.lr - (want[i] as number)) <= TOL,
              `${c.name} step ${step} group ${i}: lr ${g.lr}, expected ${want[i]}`,
            );
          });
          const first = scheduler.step();
          assert.equal(first, opt.groups[0]?.lr);
        }
      }));
  }

  test('LrScheduler: one base lr sets every group; startStep resumes mid-schedule', () =>
    torch.scope(() => {
      const opt = new torch.SGD([
        { params: [torch.zeros([1], { requiresGrad: true })] },
        { params: [torch.zeros([1], { requiresGrad: true })] },
      ]);
      const schedule: torch.LrSchedule = { type: 'cosine', warmupSteps: 2, totalSteps: 10 };
      const scheduler = new torch.LrScheduler(opt, 0.5, schedule, 6);
      assert.equal(scheduler.currentStep, 6);
      for (const g of opt.groups) assert.equal(g.lr, 0.5 * torch.lrMultiplier(schedule, 6));
      assert.throws(() => new torch.LrScheduler(opt, [1, 2, 3], schedule), /3 base learning rates for 2 parameter groups/);
      assert.throws(() => torch.lrMultiplier({ type: 'linear', warmupSteps: 1 }, 3), /needs totalSteps/);
    }));
});

/** The gradient's values, or null (a function, so that assertions on `.grad` do not narrow later reads). */
function gradValues(p: torch.Tensor): unknown {
  const g = p.grad;
  return g === null ? null : g.toArray();
}

describe('parameter groups and gradients', () => {
  test('weightDecayGroups: biases, norm weights and 1-d tensors get no weight decay', () =>
    torch.scope(() => {
      const named: [string, torch.Tensor][] = [
        ['layers.0.attn.q_proj.weight', torch.zeros([4, 4], { requiresGrad: true })],
        ['layers.0.attn.q_proj.bias', torch.zeros([4], { requiresGrad: true })],
        ['layers.0.input_layernorm.weight', torch.zeros([4], { requiresGrad: true })],
        ['norm.weight', torch.zeros([4], { requiresGrad: true })],
        ['lm_head.weight', torch.zeros([8, 4], { requiresGrad: true })],
        ['layers.0.mlp.bias', torch.zeros([2, 2], { requiresGrad: true })],
        ['scale', torch.zeros([], { requiresGrad: true })],
      ];
      const byName = new Map(named.map(([n, t]) => [t, n]));
      const groups = torch.weightDecayGroups(named, 0.1);
      assert.equal(groups.length, 2);
      const [decay, plain] = groups as [torch.ParamGroup, torch.ParamGroup];
      assert.equal(decay.weightDecay, 0.1);
      assert.equal(plain.weightDecay, 0);
      assert.deepEqual(
        decay.params.map((p) => byName.get(p)),
        ['layers.0.attn.q_proj.weight', 'lm_head.weight'],
      );
      assert.deepEqual(
        plain.params.map((p) => byName.get(p)),
        ['layers.0.attn.q_proj.bias', 'layers.0.input_layernorm.weight', 'norm.weight', 'layers.0.mlp.bias', 'scale'],
      );
      // An optimizer over these groups keeps their weight decay; AdamW's default applies to none of them.
      const opt = new torch.AdamW(groups, { lr: 1e-3 });
      assert.deepEqual(
        opt.groups.map((g) => g.weightDecay),
        [0.1, 0],
      );
      // Only matrices: one group.
      assert.equal(torch.weightDecayGroups([named[0] as [string, torch.Tensor]], 0.1).length, 1);
    }));

  test('zeroGrad sets gradients to none; a step skips parameters without gradients', () =>
    torch.scope(() => {
      const a = torch.ones([3], { requiresGrad: true });
      const b = torch.ones([3], { requiresGrad: true });
      const opt = new torch.SGD([a, b], { lr: 0.5 });
      a.mul(2).sum().backward();
      assert.deepEqual(gradValues(a), [2, 2, 2]);
      assert.equal(b.grad, null);
      opt.step();
      assert.deepEqual(a.toArray(), [0, 0, 0]);
      assert.deepEqual(b.toArray(), [1, 1, 1]);
      opt.zeroGrad();
      assert.equal(a.grad, null);
      assert.equal(b.grad, null);
      // After zeroGrad the next backward writes fresh gradients (no accumulation from before).
      a.mul(3).sum().backward();
      assert.deepEqual(gradValues(a), [3, 3, 3]);
      const adam = new torch.AdamW([a, b]);
      adam.step();
      assert.deepEqual(Object.keys(adam.stateDict().tensors).sort(), ['state.0.exp_avg', 'state.0.exp_avg_sq', 'state.0.step']);
      adam.dispose();
    }));

  test('a parameter that does not require gradients is rejected', () =>
    torch.scope(() => {
      assert.throws(() => new torch.AdamW([torch.zeros([2])]), /does not require gradients/);
    }));
});
