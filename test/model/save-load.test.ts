// Saving and loading Hugging Face folders: save() → our loader gives identical logits, single file or sharded;
// transformers loads what we wrote (scripts/fixtures/hf_models.py verify, with the reference Python environment);
// missing, misshapen and unexpected weights give errors that name the file and the tensor.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CausalLM, ModelWeightsError } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, FIXTURE_MODELS, get, loadReference, maxAbsDiff, modelDir, repoRoot } from './helpers/fixtures.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-save-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Saves every fixture model (qwen3 sharded) into tmp; the folders are reused by the transformers check. */
const saved = new Map<string, string>();

test('save() then load() gives identical logits (single file and sharded), with config and generation config', () => {
  for (const name of FIXTURE_MODELS) {
    const model = CausalLM.load(modelDir(name));
    const ref = loadReference(name);
    const dir = join(tmp, name);
    try {
      const written = model.save(dir, name === 'qwen3-untied' ? { maxShardBytes: 100_000 } : {});
      saved.set(name, dir);
      const files = readdirSync(dir).sort();
      if (name === 'qwen3-untied') {
        const shards = files.filter((f) => /^model-\d{5}-of-\d{5}\.safetensors$/.test(f));
        assert.ok(files.includes('model.safetensors.index.json') && shards.length > 1, files.join(', '));
        assert.ok(!files.includes('model.safetensors'));
      } else assert.ok(files.includes('model.safetensors'));
      assert.ok(files.includes('generation_config.json'), 'generation_config.json is copied from the source folder');
      assert.equal(written.length, files.length);
      const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
      const source = JSON.parse(readFileSync(join(modelDir(name), 'config.json'), 'utf8')) as Record<string, unknown>;
      assert.deepEqual(config, { ...source, dtype: 'float32' }, 'every key is kept; dtype says what was written');

      const reloaded = CausalLM.load(dir);
      try {
        torch.scope(() => {
          const ids = get(ref, 'plain.ids');
          const a = model.forward(ids);
          const b = reloaded.forward(ids);
          assert.equal(maxAbsDiff(a, b), 0, `${name}: reloaded logits differ`);
          assert.ok(maxAbsDiff(b, get(ref, 'plain.logits')) < 1e-4);
        });
      } finally {
        reloaded.dispose();
      }
    } finally {
      model.dispose();
      disposeAll(ref.values());
    }
  }
});

test('a bfloat16 model saves bf16 weights and loads back identical', () => {
  const model = CausalLM.load(modelDir('llama3-rope'), { dtype: 'bfloat16' });
  const dir = join(tmp, 'bf16');
  try {
    model.save(dir);
    const header = torch.readSafetensorsHeader(join(dir, 'model.safetensors'));
    assert.ok([...header.entries.values()].every((e) => e.dtype === 'bfloat16'));
    assert.equal((JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { dtype: string }).dtype, 'bfloat16');
    const reloaded = CausalLM.load(dir, { dtype: 'bfloat16' });
    torch.scope(() => {
      const ids = torch.tensor([[3n, 9n, 27n, 81n]]);
      assert.equal(maxAbsDiff(model.forward(ids), reloaded.forward(ids)), 0);
    });
    reloaded.dispose();
  } finally {
    model.dispose();
  }
});

test('transformers loads the folders we saved, with no missing or unexpected weights, and gives the same logits', () => {
  const python = join(repoRoot, '.cache/python-ref/bin/python');
  assert.ok(
    existsSync(python),
    `${python} not found: run \`bash scripts/python-env.sh\` to create the reference Python environment`,
  );
  assert.equal(saved.size, FIXTURE_MODELS.length, 'the save test above must run first');
  const args = [join(repoRoot, 'scripts/fixtures/hf_models.py'), 'verify'];
  for (const [name, dir] of saved)
    args.push(dir, join(modelDir(name as (typeof FIXTURE_MODELS)[number]), 'reference.safetensors'));
  let output: string;
  try {
    output = execFileSync(python, args, {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, OMP_NUM_THREADS: '1' },
    });
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string };
    assert.fail(`transformers rejected a saved folder:\n${e.stdout ?? ''}\n${(e.stderr ?? '').slice(-2000)}`);
  }
  const results = output
    .trim()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as { dir: string; ok: boolean; max_abs_diff: number });
  assert.equal(results.length, saved.size);
  for (const r of results) assert.ok(r.ok && r.max_abs_diff < 1e-4, JSON.stringify(r));
});

// ---- bad weights

/** A copy of the qwen2-tied fixture whose model.safetensors holds `edit(tensors)`. */
function folderWith(label: string, edit: (tensors: Map<string, torch.Tensor>) => void): string {
  const dir = join(tmp, `bad-${label}`);
  const source = modelDir('qwen2-tied');
  torch.scope(() => {
    const tensors = torch.loadSafetensors(join(source, 'model.safetensors'));
    edit(tensors);
    execFileSync('mkdir', ['-p', dir]);
    copyFileSync(join(source, 'config.json'), join(dir, 'config.json'));
    torch.saveSafetensors(join(dir, 'model.safetensors'), tensors);
  });
  return dir;
}

function assertWeightsError(dir: string, pattern: RegExp): void {
  assert.throws(
    () => CausalLM.load(dir),
    (error: Error) => {
      assert.ok(error instanceof ModelWeightsError, `${error.name}: ${error.message}`);
      assert.ok(error.message.includes(join(dir, 'model.safetensors')), `the message names the file: ${error.message}`);
      assert.match(error.message, pattern);
      return true;
    },
  );
}

test('missing, misshapen and unexpected weights name the file (the shard) and the tensor; known buffers are ignored', () => {
  const live = torch.liveTensorCount();
  assertWeightsError(
    folderWith('missing', (t) => t.delete('model.layers.1.self_attn.k_proj.bias')),
    /missing tensor 'model\.layers\.1\.self_attn\.k_proj\.bias' \(expected shape \[32\]\)/,
  );
  assertWeightsError(
    folderWith('shape', (t) => t.set('model.norm.weight', torch.ones([65]))),
    /tensor 'model\.norm\.weight' has shape \[65\], expected \[64\]/,
  );
  assertWeightsError(
    folderWith('unexpected', (t) => t.set('model.layers.0.mlp.extra.weight', torch.ones([2]))),
    /unexpected tensors 'model\.layers\.0\.mlp\.extra\.weight'/,
  );
  assertWeightsError(
    folderWith('tied-differs', (t) => t.set('lm_head.weight', torch.zeros([128, 64]))),
    /tie_word_embeddings is true but lm_head\.weight differs from embed_tokens/,
  );
  assert.equal(torch.liveTensorCount(), live, 'failed loads free what they loaded');

  // an old checkpoint's rotary buffer and a tied model's copy of the embedding load fine
  const dir = folderWith('ignorable', (t) => {
    t.set('model.layers.0.self_attn.rotary_emb.inv_freq', torch.ones([8]));
    t.set('lm_head.weight', (t.get('model.embed_tokens.weight') as torch.Tensor).clone());
  });
  const model = CausalLM.load(dir);
  assert.ok(!model.parameters().has('lm_head.weight'));
  model.dispose();

  // sharded: the error names the shard that holds the tensor
  const sharded = saved.get('qwen3-untied');
  assert.ok(sharded !== undefined, 'the save test above must run first');
  const index = JSON.parse(readFileSync(join(sharded, 'model.safetensors.index.json'), 'utf8')) as torch.ShardIndex;
  const shard = join(sharded, index.weight_map['model.norm.weight'] as string);
  torch.scope(() => {
    const tensors = torch.loadSafetensors(shard);
    tensors.set('model.norm.weight', torch.ones([63]));
    torch.saveSafetensors(shard, tensors);
  });
  assert.throws(
    () => CausalLM.load(sharded),
    (error: Error) => error.message.startsWith(`${shard}: tensor 'model.norm.weight' has shape [63]`),
  );

  assert.throws(() => CausalLM.load(join(tmp, 'no-such-model')), /no-such-model\/config.json: cannot read the model config/);
  const noWeights = join(tmp, 'no-weights');
  execFileSync('mkdir', ['-p', noWeights]);
  copyFileSync(join(modelDir('qwen2-tied'), 'config.json'), join(noWeights, 'config.json'));
  assert.throws(() => CausalLM.load(noWeights), /no model\.safetensors or model\.safetensors\.index\.json found/);
});
