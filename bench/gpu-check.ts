// CUDA check for a machine with a GPU and a CUDA libtorch (CI has none: this is run by hand on a GPU machine,
// after `LIBTORCH=<torch dir> node native/build.mjs`). It checks that CUDA was linked and works — ops, autograd,
// fused AdamW, a fixture model's logits — against the CPU, then measures bf16/fp32 matmul TFLOP/s beside Python
// PyTorch on the same GPU, and ends with one JSON line.
//   node --import tsx bench/gpu-check.ts [python3]
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CausalLM } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';

const results: Record<string, unknown> = { bench: 'gpu-check' };
const fail = (message: string): never => {
  console.log(JSON.stringify({ ...results, error: message }));
  process.exit(1);
};

const maxDiff = (a: torch.Tensor, b: torch.Tensor) => torch.scope(() => a.float().cpu().sub(b.float().cpu()).abs().max().item());

if (!torch.cuda.isAvailable()) fail('torch.cuda.isAvailable() is false: CUDA libtorch not linked or no GPU');
results.devices = torch.cuda.deviceCount();
results.torchVersion = torch.buildInfo().torchVersion;
const device = 'cuda:0';

// 1. ops on the GPU equal the CPU
torch.manualSeed(0);
results.ops = torch.scope(() => {
  const a = torch.randn([64, 96]);
  const b = torch.randn([96, 48]);
  const q = torch.randn([2, 8, 32, 16]);
  const kv = torch.randn([2, 2, 32, 16]);
  const target = torch.randint(0, 48, [64]);
  const onGpu = (t: torch.Tensor) => t.to({ device });
  const diffs = {
    matmul: maxDiff(a.matmul(b), onGpu(a).matmul(onGpu(b))),
    softmax: maxDiff(a.softmax(-1), onGpu(a).softmax(-1)),
    sdpa_gqa_causal: maxDiff(
      torch.scaledDotProductAttention(q, kv, kv, { causal: true }),
      torch.scaledDotProductAttention(onGpu(q), onGpu(kv), onGpu(kv), { causal: true }),
    ),
    cross_entropy: maxDiff(torch.crossEntropy(a.matmul(b), target), torch.crossEntropy(onGpu(a).matmul(onGpu(b)), onGpu(target))),
  };
  for (const [name, d] of Object.entries(diffs)) if (!(d < 1e-3)) fail(`${name} on CUDA differs from CPU by ${d}`);
  return diffs;
});

// 2. autograd + fused AdamW on the GPU follow the CPU
results.train = torch.scope(() => {
  const run = (dev: string) => {
    torch.manualSeed(1);
    const w = torch.keep(torch.randn([32, 16]).to({ device: dev }).requiresGrad_());
    const x = torch.randn([64, 32]).to({ device: dev });
    const optimizer = new torch.AdamW([w], { lr: 1e-2 });
    let loss = 0;
    for (let i = 0; i < 20; i++) {
      loss = torch.scope(() => {
        const l = x.matmul(w).tanh().square().mean();
        l.backward();
        return l.item();
      });
      optimizer.step();
      optimizer.zeroGrad();
    }
    const final = w.detach().cpu();
    optimizer.dispose();
    w.dispose();
    return { loss, final };
  };
  const cpu = run('cpu');
  const gpu = run(device);
  const d = maxDiff(cpu.final, gpu.final);
  if (!(d < 1e-4)) fail(`AdamW on CUDA diverged from CPU by ${d}`);
  return { lossCpu: cpu.loss, lossGpu: gpu.loss, weightDiff: d };
});

// 3. a fixture model's logits on the GPU
results.model = torch.scope(() => {
  const dir = fileURLToPath(new URL('../test/fixtures/models/qwen2-tied', import.meta.url));
  const cpuModel = CausalLM.load(dir);
  const gpuModel = CausalLM.load(dir, { device });
  const ids = torch.randint(0, 128, [2, 24]);
  const d = maxDiff(cpuModel.forward(ids), gpuModel.forward(ids.to({ device })));
  cpuModel.dispose();
  gpuModel.dispose();
  if (!(d < 1e-3)) fail(`model logits on CUDA differ from CPU by ${d}`);
  return { logitsDiff: d };
});

// 4. matmul throughput, ours vs PyTorch on the same GPU (synchronised by reading a value back)
function oursTflops(n: number, dtype: torch.DType, iterations: number): number {
  return torch.scope(() => {
    const a = torch.randn([n, n], { device }).to({ dtype });
    const b = torch.randn([n, n], { device }).to({ dtype });
    for (let i = 0; i < 3; i++) torch.scope(() => a.matmul(b).dispose());
    a.sum().item();
    const start = performance.now();
    let last: torch.Tensor | null = null;
    for (let i = 0; i < iterations; i++) {
      last?.dispose();
      last = a.matmul(b);
    }
    last?.sum().item();
    const seconds = (performance.now() - start) / 1000;
    return (2 * n ** 3 * iterations) / seconds / 1e12;
  });
}

const python = process.argv[2] ?? 'python3';
const pythonScript = `
import json, sys, time, torch
out = {}
for n, dtype, iters in json.loads(sys.argv[1]):
    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device='cuda').to(dt); b = torch.randn(n, n, device='cuda').to(dt)
    for _ in range(3): a @ b
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(iters): c = a @ b
    torch.cuda.synchronize(); s = time.perf_counter() - t
    out[f"{dtype}_{n}"] = 2 * n**3 * iters / s / 1e12
print(json.dumps(out))
`;
const sizes: [number, 'bfloat16' | 'float32', number][] = [
  [4096, 'bfloat16', 50],
  [8192, 'bfloat16', 20],
  [8192, 'float32', 10],
];
const ours: Record<string, number> = {};
for (const [n, dtype, iterations] of sizes) ours[`${dtype}_${n}`] = oursTflops(n, dtype, iterations);
let theirs: Record<string, number> = {};
try {
  theirs = JSON.parse(execFileSync(python, ['-c', pythonScript, JSON.stringify(sizes)], { encoding: 'utf8' })) as Record<
    string,
    number
  >;
} catch (error) {
  results.pytorchError = (error as Error).message.slice(0, 300);
}
results.matmulTflops = Object.fromEntries(
  Object.keys(ours).map((k) => [
    k,
    { ours: Number(ours[k]?.toFixed(1)), pytorch: theirs[k] === undefined ? null : Number(theirs[k]?.toFixed(1)) },
  ]),
);
console.log('matmul TFLOP/s (ours vs PyTorch):', results.matmulTflops);
console.log(JSON.stringify(results));
