// Weight-sync benchmark: the time and the peak extra memory of moving a trainer's weights into a rollout engine, per
// channel, against model size. The trainer is a CausalLM on the main thread (its weights are the source, as a
// TrainerClient's would be); the engine is a WorkerRolloutEngine on its own thread, with the same model. Channels:
//
//   memory            LocalWeightChannel, sync_method memory: the tensors by reference to the engine's thread,
//                     copied in
//   checkpoint whole  LocalWeightChannel, sync_method checkpoint: a Hugging Face folder written, then loaded by an
//                     engine that reads the whole folder before copying (no weight_sync_buffer_size: the load before
//                     buckets)
//   checkpoint        the same into an engine that loads in buckets of --buffer-mb (weight_sync_buffer_size)
//   folder            mode train -> explore (SQLite buffer): FolderWeightPublisher writes the version folder and the
//                     pointer; the explorer's engine (buckets of --buffer-mb) loads the folder the pointer names (the
//                     receiver's poll wait is left out). The PostgreSQL channel moves the same folder (only its
//                     pointer lives in the database).
//
// Per (size, channel): `--repeats` syncs; the median wall time and the largest peak, where the peak is the resident
// memory the process gained during the sync (src/util/resident-peak.ts: VmHWM after a reset minus VmRSS before; it
// is what the trainer logs as sync/peak_bytes). Memory glibc's allocator keeps and reuses is not new, so the bench
// runs itself with MALLOC_MMAP_THRESHOLD_=131072 (allocations of 128 KiB or more are mapped, and unmapped when freed):
// every sync's buffers then show, whatever ran before it. Sizes are Qwen2.5 shapes with a character vocabulary (so fewer
// parameters than the named model: the count is in the table): 0.1b (hidden 768, 12 layers), 0.5b (Qwen2.5-0.5B:
// hidden 896, 24 layers, MLP 4864), 1.5b (Qwen2.5-1.5B: hidden 1536, 28 layers, MLP 8960). Prints a table and one
// final JSON line (see bench/README.md).
//
//   node --import tsx bench/weight-sync.bench.ts [--sizes 0.1b,0.5b,1.5b] [--repeats 3] [--dtype float32|bfloat16]
//                                                [--buffer-mb 64]
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { WorkerRolloutEngine } from '../src/engine/index.js';
import { CausalLM } from '../src/model/index.js';
import { initModel } from '../src/model/init.js';
import { LocalWeightChannel } from '../src/rft/sync/local-channel.js';
import { SyncFolderChannel } from '../src/rft/sync/sync-folder.js';
import type { WeightSource } from '../src/rft/sync/weight-channel.js';
import type { Tensor } from '../src/torch/index.js';
import { measureResidentPeak } from '../src/util/index.js';
import { cpuFeatures, fmt, median, r3, table } from './harness.js';

// glibc reads its malloc settings at start: run again with the threshold set (see the header)
if (process.env.MALLOC_MMAP_THRESHOLD_ === undefined) {
  const rerun = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '131072' },
  });
  process.exit(rerun.status ?? 1);
}

const SIZES = {
  '0.1b': { hiddenSize: 768, numLayers: 12, numHeads: 12, numKeyValueHeads: 2, intermediateSize: 3072 },
  '0.5b': { hiddenSize: 896, numLayers: 24, numHeads: 14, numKeyValueHeads: 2, intermediateSize: 4864 },
  '1.5b': { hiddenSize: 1536, numLayers: 28, numHeads: 12, numKeyValueHeads: 2, intermediateSize: 8960 },
} as const;
type SizeName = keyof typeof SIZES;
const CHANNELS = ['memory', 'checkpoint whole', 'checkpoint', 'folder'] as const;
type ChannelName = (typeof CHANNELS)[number];

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '0.1b,0.5b,1.5b' },
    repeats: { type: 'string', default: '3' },
    dtype: { type: 'string', default: 'float32' },
    'buffer-mb': { type: 'string', default: '64' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log('node --import tsx bench/weight-sync.bench.ts [--sizes 0.1b,0.5b,1.5b] [--repeats 3] [--dtype float32|bfloat16]');
  process.exit(0);
}
const sizes = values.sizes.split(',').map((s) => s.trim());
for (const size of sizes)
  if (!(size in SIZES)) throw new Error(`--sizes: unknown size '${size}' (known: ${Object.keys(SIZES).join(', ')})`);
const repeats = Number(values.repeats);
if (!Number.isInteger(repeats) || repeats < 1) throw new Error(`--repeats must be a positive integer, got '${values.repeats}'`);
if (values.dtype !== 'float32' && values.dtype !== 'bfloat16')
  throw new Error(`--dtype must be float32 or bfloat16, got '${values.dtype}'`);
const dtype: 'float32' | 'bfloat16' = values.dtype;

const bufferMb = Number(values['buffer-mb']);
if (!Number.isInteger(bufferMb) || bufferMb < 1)
  throw new Error(`--buffer-mb must be a positive integer, got '${values['buffer-mb']}'`);

const TIMEOUT_MS = 30 * 60_000;
const root = mkdtempSync(join(os.tmpdir(), 'weight-sync-bench-'));

/** The trainer's side: its weights by reference (fresh handles: the channel disposes them) or written as a folder. */
function weightSource(trainer: CausalLM): WeightSource {
  return {
    saveWeights: async (dir) => {
      trainer.save(dir);
    },
    saveAdapter: async () => {
      throw new Error('the bench has no LoRA adapter');
    },
    beginSync: async () => new Map<string, Tensor>([...trainer.parameters()].map(([name, t]) => [name, t.detach()])),
    endSync: async () => {},
  };
}

/** One sync over `channel` as version `version`. */
function syncer(
  channel: ChannelName,
  trainer: CausalLM,
  engines: { whole: WorkerRolloutEngine; buckets: WorkerRolloutEngine },
  jobDir: string,
) {
  const engine = channel === 'checkpoint whole' ? engines.whole : engines.buckets;
  const source = weightSource(trainer);
  if (channel === 'folder') {
    const folder = new SyncFolderChannel(jobDir);
    const publisher = folder.publisher(source);
    return async (version: number) => {
      await publisher.publish(version);
      const pointer = await folder.latest();
      if (pointer === null || pointer.version !== version) throw new Error(`no pointer to version ${version}`);
      await engine.syncWeightsFromDir(pointer.dir, { timeoutMs: TIMEOUT_MS });
    };
  }
  const local = new LocalWeightChannel({
    trainer: source,
    transport: channel === 'memory' ? { method: 'memory', engine } : { method: 'checkpoint', engine, jobDir },
    startVersion: 0,
    timeoutMs: TIMEOUT_MS,
  });
  return (version: number) => local.publish(version);
}

interface Row {
  size: string;
  parameters: number;
  weight_bytes: number;
  channel: ChannelName;
  seconds: number;
  peak_bytes: number | null;
}
const rows: Row[] = [];

for (const size of sizes as SizeName[]) {
  const modelDir = join(root, size, 'model');
  console.log(`creating the ${size} model (${dtype}) ...`);
  const { parameters } = initModel(modelDir, { architecture: 'qwen2', ...SIZES[size], seed: 0, dtype });
  const trainer = CausalLM.load(modelDir, { dtype });
  const engineOptions = { dtype, slots: 1, maxLength: 64, numThreads: os.availableParallelism() };
  const engines = {
    whole: await WorkerRolloutEngine.start(modelDir, engineOptions),
    buckets: await WorkerRolloutEngine.start(modelDir, { ...engineOptions, weightSyncBufferBytes: bufferMb * 2 ** 20 }),
  };
  try {
    for (const channel of CHANNELS) {
      const jobDir = join(root, size, channel.replace(' ', '-'));
      mkdirSync(jobDir, { recursive: true });
      const sync = syncer(channel, trainer, engines, jobDir);
      const seconds: number[] = [];
      let peak: number | null = null;
      for (let version = 1; version <= repeats; version++) {
        const measured = await measureResidentPeak(() => sync(version));
        seconds.push(measured.seconds);
        if (measured.peakBytes !== null) peak = Math.max(peak ?? 0, measured.peakBytes);
      }
      const weightBytes = parameters * (dtype === 'float32' ? 4 : 2);
      rows.push({ size, parameters, weight_bytes: weightBytes, channel, seconds: r3(median(seconds)), peak_bytes: peak });
      console.log(
        `${size} ${channel}: ${fmt(median(seconds), 3)} s, peak ${peak === null ? '-' : `${fmt(peak / 2 ** 20, 0)} MiB`}`,
      );
      rmSync(jobDir, { recursive: true, force: true });
    }
  } finally {
    await engines.whole.close();
    await engines.buckets.close();
    trainer.dispose();
    rmSync(join(root, size), { recursive: true, force: true });
  }
}
rmSync(root, { recursive: true, force: true });

const MiB = 2 ** 20;
table(
  `weight sync: median of ${repeats} syncs (${dtype}, buckets of ${bufferMb} MiB), peak = most resident memory gained during one`,
  ['size', 'parameters', 'weights MiB', 'channel', 'seconds', 'peak MiB', 'peak / weights'],
  rows.map((r) => [
    r.size,
    `${fmt(r.parameters / 1e6, 1)}M`,
    fmt(r.weight_bytes / MiB, 0),
    r.channel,
    fmt(r.seconds, 3),
    r.peak_bytes === null ? '-' : fmt(r.peak_bytes / MiB, 0),
    r.peak_bytes === null ? '-' : fmt(r.peak_bytes / r.weight_bytes, 2),
  ]),
);
console.log(
  JSON.stringify({
    bench: 'weight-sync',
    cpu: cpuFeatures(),
    cores: os.availableParallelism(),
    malloc_mmap_threshold: Number(process.env.MALLOC_MMAP_THRESHOLD_),
    dtype,
    buffer_mb: bufferMb,
    repeats,
    rows,
  }),
);
