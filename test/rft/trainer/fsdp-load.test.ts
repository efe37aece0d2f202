// A fully sharded rank starts from positioned reads of its model folder (src/rft/trainer/fsdp-load.ts), in one process
// per rank here: a weightless model (every parameter a stride-0 view of one element) and the rank's ranges of each flat
// class, read from model.safetensors or from numbered shards through model.safetensors.index.json, bfloat16 or float32
// files, tied embeddings or not. Each rank's shards equal those of a FullyShardedModel over the whole loaded weights
// (the way ranks started before), bitwise, in float32 and bfloat16 masters; each rank reads exactly the headers of
// the files plus its own range of every class (count x the file's element size; a tied file's lm_head.weight is never
// read), so the ranks of a world read the weight bytes once between them. The weightless model holds one element per
// parameter; a rank whose shards a sharded checkpoint replaces reads the headers only; rank 0 of 8's start from a
// 38 MB folder raises the process's peak resident memory by a fraction of it, where a whole load raises it by all of
// it. LoRA's frozen base is sharded the same way and takes adapters. A folder whose tensors do not fit the config is
// refused naming the file and the tensor. The multi-rank runs that start this way and train as one process does
// (fresh, 1 → 2 from a checkpoint's model/ folder, 2 → 2) are test/rft/trainer/fsdp.test.ts.
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CausalLM, initModel, LoraModel } from '../../../src/model/index.js';
import { FullyShardedModel, ownRange } from '../../../src/rft/trainer/fsdp.js';
import { folderSource, weightlessModel } from '../../../src/rft/trainer/fsdp-load.js';
import { CheckpointReads } from '../../../src/rft/trainer/fsdp-resume.js';
import * as torch from '../../../src/torch/index.js';

const START_MEMORY = fileURLToPath(new URL('./helpers/start-memory.ts', import.meta.url));

let work: string;
/** The folders: float32 tied, bfloat16 untied, float32 untied in numbered shards. */
const folders = new Map<string, string>();

before(() => {
  work = mkdtempSync(join(tmpdir(), 'trinity-fsdp-load-'));
  const model = (name: string, options: Parameters<typeof initModel>[1]) => {
    const dir = join(work, name);
    initModel(dir, { hiddenSize: 32, numLayers: 2, numHeads: 2, numKeyValueHeads: 1, seed: 7, ...options });
    folders.set(name, dir);
    return dir;
  };
  // tied, with the copy of embed_tokens as lm_head.weight that some checkpoints carry (read by no rank)
  const tied = model('float32 tied', { tieWordEmbeddings: true });
  const tiedWeights = torch.loadSafetensors(join(tied, 'model.safetensors'));
  tiedWeights.set('lm_head.weight', (tiedWeights.get('model.embed_tokens.weight') as torch.Tensor).clone());
  torch.saveSafetensors(join(tied, 'model.safetensors'), Object.fromEntries(tiedWeights));
  for (const t of tiedWeights.values()) t.dispose();
  model('bfloat16 untied', { tieWordEmbeddings: false, dtype: 'bfloat16' });
  // the same weights as numbered shards (model-0000x-of-0000y.safetensors) and an index, as save_pretrained writes
  const whole = model('float32 untied', { tieWordEmbeddings: false });
  const sharded = join(work, 'float32 untied, sharded');
  mkdirSync(sharded);
  copyFileSync(join(whole, 'config.json'), join(sharded, 'config.json'));
  const weights = torch.loadSafetensors(join(whole, 'model.safetensors'));
  torch.saveModelWeights(sharded, weights, { maxShardBytes: 40_000 });
  for (const t of weights.values()) t.dispose();
  folders.set('float32 untied, sharded', sharded);
});
after(() => rmSync(work, { recursive: true, force: true }));

const safetensorsFiles = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors'))
    .map((f) => join(dir, f));

/** The bytes of lm_head.weight in the files (0: absent). */
const lmHeadBytes = (files: string[]) =>
  files.reduce((n, f) => n + (torch.readSafetensorsHeader(f).entries.get('lm_head.weight')?.byteLength ?? 0), 0);

/** Rank `rank` of `worldSize` started from the folder's reads, and the same rank over the whole loaded weights. */
function bothWays(dir: string, rank: number, worldSize: number, master: 'float32' | 'bfloat16') {
  const reads = new CheckpointReads();
  const options = { rank, worldSize, computeDtype: master };
  const weightless = weightlessModel(dir, { dtype: master, device: 'cpu' });
  const fromFolder = new FullyShardedModel(
    weightless,
    folderSource(dir, weightless, { dtype: master, device: 'cpu' }, reads),
    options,
  );
  const loaded = CausalLM.load(dir, { dtype: master });
  const fromWhole = new FullyShardedModel(loaded, loaded.parameters(), options);
  return {
    reads,
    fromFolder,
    fromWhole,
    dispose: () => {
      for (const s of [fromFolder, fromWhole]) {
        s.dispose();
        s.model.dispose();
      }
    },
  };
}

for (const name of ['float32 tied', 'bfloat16 untied', 'float32 untied, sharded'])
  for (const master of ['float32', 'bfloat16'] as const)
    test(`${name} folder, ${master} shards: each of 2 and 3 ranks reads its own ranges only and shards as the whole load does`, () => {
      const dir = folders.get(name) as string;
      const files = safetensorsFiles(dir);
      const headers = files.reduce((n, f) => n + torch.readSafetensorsHeader(f).headerBytes, 0);
      const fileElementBytes = name.startsWith('bfloat16') ? 2 : 4;
      if (name.endsWith('sharded')) assert.ok(files.length >= 2, `${name}: ${files.length} file(s)`);
      for (const worldSize of [2, 3]) {
        let payloadTogether = 0;
        let wholeElements = 0;
        for (let rank = 0; rank < worldSize; rank++) {
          const ranks = bothWays(dir, rank, worldSize, master);
          try {
            const classes = ranks.fromFolder.units.flatMap((u) => u.classes);
            const reference = ranks.fromWhole.units.flatMap((u) => u.classes);
            assert.equal(classes.length, reference.length);
            let payload = 0;
            for (const [i, c] of classes.entries()) {
              const e = reference[i] as (typeof classes)[number];
              assert.deepEqual(c.params, e.params, `${name}, class ${i}: layout`);
              assert.equal(c.shard.dtype, master);
              assert.deepEqual(
                [...(c.shard.float().toTypedArray() as Float32Array)],
                [...(e.shard.float().toTypedArray() as Float32Array)],
                `${name}, rank ${rank} of ${worldSize}, class ${i}: shard`,
              );
              payload += ownRange(c, rank).count * fileElementBytes;
            }
            // the headers (each file's once) and its range of every class: no more
            assert.equal(ranks.reads.bytes, headers + payload, `${name}, rank ${rank} of ${worldSize}: bytes read`);
            payloadTogether += payload;
            wholeElements = classes.reduce((n, c) => n + c.total, 0);
          } finally {
            ranks.dispose();
          }
        }
        // together the ranks read every parameter's bytes once (a tied file's lm_head.weight not at all)
        assert.equal(payloadTogether, wholeElements * fileElementBytes, `${name}: ${worldSize} ranks together`);
        const weightBytes = files.reduce((n, f) => n + statSync(f).size, 0) - headers;
        const unread = name.includes('tied') && !name.includes('untied') ? lmHeadBytes(files) : 0;
        assert.ok(name.includes('untied') || unread > 0, `${name}: the file holds a tied lm_head.weight`);
        assert.equal(payloadTogether, weightBytes - unread, `${name}: the weight bytes less a tied lm_head's`);
      }
    });

test('the weightless model holds one element per parameter (stride 0), and its sharded rank holds only its shards', () => {
  const dir = folders.get('float32 untied') as string;
  const model = weightlessModel(dir, { dtype: 'float32', device: 'cpu' });
  const params = model.parameters();
  /** Elements a tensor's memory spans: 1 + Σ (size_i - 1) · stride_i. */
  const spanned = (t: torch.Tensor) => 1 + t.shape.reduce((n, size, i) => n + (size - 1) * (t.strides[i] as number), 0);
  const numel = [...params.values()].reduce((n, t) => n + t.numel, 0);
  assert.equal(
    [...params.values()].reduce((n, t) => n + spanned(t), 0),
    params.size,
  );
  assert.ok(numel > 100 * params.size, `${numel} elements over ${params.size} parameters`);
  const sharded = new FullyShardedModel(
    model,
    folderSource(dir, model, { dtype: 'float32', device: 'cpu' }, new CheckpointReads()),
    {
      rank: 1,
      worldSize: 4,
      computeDtype: 'float32',
    },
  );
  try {
    assert.ok(
      [...model.parameters().values()].every((t) => t.numel === 0),
      'the model reads placeholders',
    );
    const held = sharded.stateBytes().parameters;
    assert.ok(held <= sharded.wholeParameterBytes() / 4 + sharded.stateBytes().classes * 3 * 4, `rank 1 of 4 holds ${held}`);
  } finally {
    sharded.dispose();
    model.dispose();
  }
});

test('shards a sharded checkpoint replaces (overwritten) read the headers only and start as zeros', () => {
  const dir = folders.get('float32 untied') as string;
  const model = weightlessModel(dir, { dtype: 'float32', device: 'cpu' });
  const reads = new CheckpointReads();
  const source = folderSource(dir, model, { dtype: 'float32', device: 'cpu', overwritten: true }, reads);
  const sharded = new FullyShardedModel(model, source, { rank: 0, worldSize: 2, computeDtype: 'float32' });
  try {
    assert.equal(reads.bytes, torch.readSafetensorsHeader(join(dir, 'model.safetensors')).headerBytes);
    assert.ok(sharded.shards.every((s) => s.abs().sum().item() === 0));
  } finally {
    sharded.dispose();
    model.dispose();
  }
});

test("LoRA's frozen base: adapters attach to the weightless model, the base is sharded frozen from the folder", () => {
  const dir = folders.get('float32 tied') as string;
  const model = weightlessModel(dir, { dtype: 'float32', device: 'cpu' });
  const lora = LoraModel.attach(model, { r: 4, loraAlpha: 8, targetModules: ['q_proj', 'down_proj'], seed: 1 });
  const reads = new CheckpointReads();
  const sharded = new FullyShardedModel(model, folderSource(dir, model, { dtype: 'float32', device: 'cpu' }, reads), {
    rank: 0,
    worldSize: 2,
    computeDtype: 'float32',
    frozen: true,
  });
  try {
    assert.ok(
      sharded.shards.every((s) => !s.requiresGrad),
      'frozen shards',
    );
    assert.equal(lora.loraParameters().size, 2 * 2 * 2, 'A and B of 2 modules in 2 layers');
    const loaded = CausalLM.load(dir);
    const whole = new FullyShardedModel(loaded, loaded.parameters(), {
      rank: 0,
      worldSize: 2,
      computeDtype: 'float32',
      frozen: true,
    });
    try {
      for (const [i, s] of sharded.shards.entries())
        assert.deepEqual(
          [...(s.toTypedArray() as Float32Array)],
          [...((whole.shards[i] as torch.Tensor).toTypedArray() as Float32Array)],
        );
    } finally {
      whole.dispose();
      loaded.dispose();
    }
  } finally {
    lora.dispose();
    sharded.dispose();
    model.dispose();
  }
});

test("rank 0 of 8's start from a 38 MB folder peaks at a fraction of it; a whole load at all of it (peak resident memory, a child process each)", () => {
  const dir = join(work, 'larger');
  initModel(dir, { hiddenSize: 384, numLayers: 6, numHeads: 6, numKeyValueHeads: 2, seed: 1 });
  const modelBytes = statSync(join(dir, 'model.safetensors')).size;
  const start = (mode: 'sharded' | 'whole') =>
    JSON.parse(
      execFileSync(process.execPath, ['--import', 'tsx', START_MEMORY, mode, dir, folders.get('float32 untied') as string], {
        encoding: 'utf8',
        env: { ...process.env, OMP_NUM_THREADS: '1' },
      }),
    ) as { peakBytes: number; shardBytes: number };
  const whole = start('whole');
  const sharded = start('sharded');
  assert.ok(whole.peakBytes >= 0.9 * modelBytes, `a whole load added ${whole.peakBytes} of ${modelBytes}: the measure misses it`);
  assert.ok(sharded.shardBytes <= modelBytes / 8 + 1024, `rank 0 of 8 holds ${sharded.shardBytes} bytes of shards`);
  // 1/8 of the weights, one parameter's range in flight (read, copied into the shard, freed) and the allocator's slack
  assert.ok(sharded.peakBytes < 0.35 * modelBytes, `rank 0 of 8's start added ${sharded.peakBytes} of ${modelBytes} bytes`);
});

test('a folder whose tensors do not fit the config is refused, naming the file and the tensor', () => {
  const dir = join(work, 'misshapen');
  mkdirSync(dir);
  const source = folders.get('float32 untied') as string;
  copyFileSync(join(source, 'config.json'), join(dir, 'config.json'));
  const weights = torch.loadSafetensors(join(source, 'model.safetensors'));
  const norm = weights.get('model.norm.weight') as torch.Tensor;
  weights.set('model.norm.weight', norm.narrow(0, 0, 8).clone());
  torch.saveSafetensors(join(dir, 'model.safetensors'), Object.fromEntries(weights));
  for (const t of [...weights.values(), norm]) t.dispose();
  assert.throws(
    () => weightlessModel(dir, { dtype: 'float32', device: 'cpu' }),
    (e: Error) => e.message.includes(join(dir, 'model.safetensors')) && e.message.includes("'model.norm.weight'"),
  );
  rmSync(join(dir, 'model.safetensors'));
  assert.throws(() => weightlessModel(dir, { dtype: 'float32', device: 'cpu' }), /model\.safetensors/);
});
