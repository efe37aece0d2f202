// `trinity model init` folders: loadable here and by transformers, with the same logits; seeded.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CausalLM, initModel } from '../../src/model/index.js';
import { Tokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';
import { maxAbsDiff, repoRoot } from './helpers/fixtures.js';

const python = join(repoRoot, '.cache/python-ref/bin/python');
const root = mkdtempSync(join(tmpdir(), 'model-init-'));

const cases = [
  { architecture: 'qwen2', tieWordEmbeddings: true },
  { architecture: 'qwen3', tieWordEmbeddings: false },
  { architecture: 'llama', tieWordEmbeddings: false },
  { architecture: 'qwen3_moe', tieWordEmbeddings: false },
  { architecture: 'qwen2_moe', tieWordEmbeddings: true },
] as const;

for (const c of cases) {
  test(`${c.architecture}: init writes a folder that this framework and transformers load, with equal logits`, () => {
    const dir = join(root, c.architecture);
    const { parameters } = initModel(dir, { ...c, hiddenSize: 64, numLayers: 2, numHeads: 4, seed: 3 });
    for (const f of ['config.json', 'model.safetensors', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) {
      assert.ok(existsSync(join(dir, f)), `${f} written`);
    }
    const tokenizer = Tokenizer.load(dir);
    const ids = [tokenizer.encodeChat([{ role: 'user', content: '12+7=' }], { addGenerationPrompt: true })];
    const model = CausalLM.load(dir);
    const counted = [...model.parameters().values()].reduce((n, p) => n + p.numel, 0);
    assert.equal(counted, parameters);
    assert.ok(existsSync(python), 'the Python reference environment is missing: run `bash scripts/python-env.sh`');
    const reference = JSON.parse(
      execFileSync(python, [join(repoRoot, 'scripts/fixtures/hf_logits.py'), dir, JSON.stringify(ids)], { encoding: 'utf8' }),
    ) as { architecture: string; missing: string[]; unexpected: string[]; logits: number[][][] };
    assert.deepEqual(reference.missing, []);
    assert.deepEqual(reference.unexpected, []);
    assert.equal(reference.architecture, model.config.architecture);
    torch.scope(() => {
      const ours = model.forward(torch.tensor(ids, { dtype: 'int64' }));
      assert.ok(maxAbsDiff(ours, torch.tensor(reference.logits)) < 1e-4);
    });
    model.dispose();
  });
}

test('init is seeded: the same seed gives the same weights, another seed different ones', () => {
  const bytes = (seed: number, name: string) => {
    const dir = join(root, name);
    initModel(dir, { hiddenSize: 32, numLayers: 1, seed });
    return readFileSync(join(dir, 'model.safetensors'));
  };
  assert.ok(bytes(5, 'a').equals(bytes(5, 'b')));
  assert.ok(!bytes(5, 'c').equals(bytes(6, 'd')));
});

test('init checks its options', () => {
  assert.throws(() => initModel(join(root, 'bad1'), { numHeads: 4, numKeyValueHeads: 3 }), /multiple of numKeyValueHeads/);
  assert.throws(() => initModel(join(root, 'bad2'), { hiddenSize: 30, numHeads: 4 }), /headDim must be a positive integer/);
  assert.throws(() => initModel(join(root, 'bad3'), { tokenizer: root }), /has no tokenizer\.json/);
});
