// Decode steps over long histories, by KV-cache layout: `npm run bench:paged-decode` (node --import tsx
// bench/paged-decode.bench.ts [--help]).
//
// `rows` sequences of `length` positions each decode `steps` tokens together, one step at a time, as the engine runs
// them (src/engine/decode-steps.ts: a step shape runs eagerly, then is captured, then replayed; key bucket 32), on
//   slots    the slot layout: attention reads each row's keys and values in place
//   gather   the paged cache gathering each row's blocks, in every layer, every step (decodeCopy off: before the copy)
//   copy     the paged cache's decode copy (src/model/paged-decode-copy.ts): gathered at the first step, then kept
// The histories hold no real tokens' keys (what a step costs does not depend on the values): the paged caches' are
// planned and committed without a forward, the rows' blocks interleaved as rows that grew together get them; the slot
// layout's one row is prefilled and copied to the others (its mask reads which positions were written). Per step:
// the first step (the copy's gather happens there) and the mean of the others, wall and CPU milliseconds (process CPU,
// all threads: steadier than the wall time on a shared machine). Ends with one JSON line.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CausalLM, initModel, type KVCache, PagedKVCache } from '../src/model/index.js';
import { DecodeSteps } from '../src/engine/decode-steps.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, fmt, now, positiveFlag, r2, secondsSince, table } from './harness.js';

const HELP = `Decode steps over long histories: slots vs the paged cache gathering vs its decode copy, ms per step.
  node --import tsx bench/paged-decode.bench.ts [--rows 16] [--lengths 1000,4000,12000] [--steps 64] [--hidden 128]
    [--layouts slots,gather,copy] [--threads 1]`;
const { values: flags } = parseArgs({
  options: {
    help: { type: 'boolean' },
    rows: { type: 'string', default: '16' },
    lengths: { type: 'string', default: '1000,4000,12000' },
    steps: { type: 'string', default: '64' },
    hidden: { type: 'string', default: '128' },
    layouts: { type: 'string', default: 'slots,gather,copy' },
    threads: { type: 'string', default: '1' },
  },
});
if (flags.help) {
  console.log(HELP);
  process.exit(0);
}
const rows = positiveFlag('rows', flags.rows as string);
const lengths = (flags.lengths as string).split(',').map((v) => positiveFlag('lengths', v));
const steps = positiveFlag('steps', flags.steps as string);
const hidden = positiveFlag('hidden', flags.hidden as string);
const LAYOUTS = ['slots', 'gather', 'copy'] as const;
type Layout = (typeof LAYOUTS)[number];
const layouts = (flags.layouts as string).split(',').map((name) => {
  if (!(LAYOUTS as readonly string[]).includes(name))
    throw new Error(`--layouts: unknown layout '${name}' (${LAYOUTS.join(', ')})`);
  return name as Layout;
});
torch.setNumThreads(positiveFlag('threads', flags.threads as string));
const KEY_BUCKET = 32;
const BLOCK_SIZE = 16;

const dir = mkdtempSync(join(tmpdir(), 'paged-decode-bench-'));
const longest = Math.max(...lengths) + steps + KEY_BUCKET;
initModel(dir, { hiddenSize: hidden, numLayers: 4, numHeads: 4, maxPositionEmbeddings: longest, seed: 1 });
const model = CausalLM.load(dir, { layout: 'inference' });
const slots = Array.from({ length: rows }, (_, b) => b);

/** This process's CPU seconds so far (user + system, all threads). */
const cpuNow = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
};

/** A cache of `rows` histories of `length` positions in `layout`. */
function filledCache(layout: Layout, length: number): KVCache | PagedKVCache {
  const maxLength = length + steps + KEY_BUCKET;
  if (layout === 'slots') {
    const cache = model.createKVCache({ slots: rows, maxLength });
    torch.noGrad(() =>
      torch.scope(() => {
        for (let start = 0; start < length; start += 2048) {
          const chunk = Math.min(2048, length - start);
          const ids = torch.tensor(
            BigInt64Array.from({ length: chunk }, (_, t) => BigInt(3 + ((start + t) % 50))),
            {
              shape: [1, chunk],
            },
          );
          model.forward(ids, { cache, slots: [0] });
        }
      }),
    );
    cache.copySlot(0, slots.slice(1));
    return cache;
  }
  const numBlocks = rows * Math.ceil(maxLength / BLOCK_SIZE) + 1;
  const cache = model.createPagedKVCache({
    slots: rows,
    maxLength,
    numBlocks,
    prefixCaching: false,
    decodeCopy: layout === 'copy',
  });
  torch.scope(() => {
    for (let start = 0; start < length; start += BLOCK_SIZE)
      cache.plan(slots, Math.min(BLOCK_SIZE, length - start), null).commit();
  });
  return cache;
}

interface Figures {
  layout: Layout;
  length: number;
  firstMs: number;
  firstCpuMs: number;
  stepMs: number;
  stepCpuMs: number;
  /** The paged caches' decode copy at the end, positions per layer. */
  copyPositions: number;
}

function measure(layout: Layout, length: number): Figures {
  const cache = filledCache(layout, length);
  const decodeSteps = new DecodeSteps();
  const ids = torch.keep(torch.full([rows, 1], 5, { dtype: 'int64' }));
  const step = () =>
    torch.noGrad(() =>
      torch.scope(() => {
        const plan = cache.plan(slots, 1, null, { keyBucket: KEY_BUCKET });
        decodeSteps.run(plan.shapeKey, [ids, ...plan.stepInputs], () => [model.forward(ids, { cache, slots, cachePlan: plan })]);
        plan.commit();
      }),
    );
  try {
    const [t0, c0] = [now(), cpuNow()];
    step();
    const [firstMs, firstCpuMs] = [secondsSince(t0) * 1000, (cpuNow() - c0) * 1000];
    const [t1, c1] = [now(), cpuNow()];
    for (let s = 1; s < steps; s++) step();
    const copyPositions = cache instanceof PagedKVCache ? cache.stats.decodeCopyPositions : 0;
    return {
      layout,
      length,
      firstMs,
      firstCpuMs,
      stepMs: (secondsSince(t1) * 1000) / (steps - 1),
      stepCpuMs: ((cpuNow() - c1) * 1000) / (steps - 1),
      copyPositions,
    };
  } finally {
    decodeSteps.invalidate();
    ids.dispose();
    cache.dispose();
  }
}

const cpu = cpuFeatures();
console.log(
  `paged-decode bench: ${cpu.model} (${cpu.features.join(', ')}), ${torch.getNumThreads()} thread(s); Qwen2 hidden ${hidden}, ` +
    `4 layers, float32; ${rows} rows, ${steps} steps`,
);
// warm-up: the first forwards pack the weights and size the thread pools, which no layout should carry
torch.noGrad(() => torch.scope(() => model.forward(torch.full([rows, 1], 5, { dtype: 'int64' }))));
const figures: Figures[] = [];
for (const length of lengths) for (const layout of layouts) figures.push(measure(layout, length));
model.dispose();
rmSync(dir, { recursive: true, force: true });

table(
  'ms per decode step (first step: the copy is gathered there; later: mean of the others)',
  ['history', 'layout', 'first wall', 'first CPU', 'later wall', 'later CPU', 'copy positions'],
  figures.map((f) => [
    String(f.length),
    f.layout,
    fmt(f.firstMs),
    fmt(f.firstCpuMs),
    fmt(f.stepMs),
    fmt(f.stepCpuMs),
    String(f.copyPositions),
  ]),
);
console.log(
  JSON.stringify({
    bench: 'paged-decode',
    cpu,
    threads: torch.getNumThreads(),
    hidden,
    rows,
    steps,
    figures: figures.map((f) => ({
      ...f,
      firstMs: r2(f.firstMs),
      firstCpuMs: r2(f.firstCpuMs),
      stepMs: r2(f.stepMs),
      stepCpuMs: r2(f.stepCpuMs),
    })),
  }),
);
