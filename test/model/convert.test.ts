// trinity model convert: another dtype, shards, or a LoRA adapter merged in; the result loads and computes the same.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CausalLM, LoraModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { maxAbsDiff, modelDir } from './helpers/fixtures.js';

const trinity = fileURLToPath(new URL('../../bin/trinity.js', import.meta.url));
const convert = (...args: string[]) =>
  execFileSync(process.execPath, [trinity, 'model', 'convert', ...args], { encoding: 'utf8' });

test('convert to bfloat16 in several shards: loads, and its logits follow the float32 model', () => {
  const out = join(mkdtempSync(join(tmpdir(), 'convert-')), 'bf16');
  assert.match(convert(modelDir('qwen2-tied'), out, '--dtype', 'bfloat16', '--max-shard-mb', '0.05'), /wrote .*bfloat16/);
  assert.ok(existsSync(join(out, 'model.safetensors.index.json')), 'sharded');
  const converted = CausalLM.load(out, { dtype: 'bfloat16' });
  const original = CausalLM.load(modelDir('qwen2-tied'));
  assert.equal(converted.dtype, 'bfloat16');
  torch.scope(() => {
    const ids = torch.randint(0, 120, [2, 10], { generator: new torch.Generator(3) });
    assert.ok(maxAbsDiff(converted.forward(ids), original.forward(ids)) < 0.1);
  });
  converted.dispose();
  original.dispose();
});

test('convert with --adapter merges a PEFT LoRA adapter: equal to the base model with the adapter attached', () => {
  const adapter = fileURLToPath(new URL('../fixtures/lora/qwen2-tied-r4', import.meta.url));
  const out = join(mkdtempSync(join(tmpdir(), 'convert-')), 'merged');
  convert(modelDir('qwen2-tied'), out, '--adapter', adapter, '--dtype', 'float32');
  const merged = CausalLM.load(out);
  const base = CausalLM.load(modelDir('qwen2-tied'));
  const lora = LoraModel.load(base, adapter);
  torch.scope(() => {
    const ids = torch.randint(0, 120, [2, 10], { generator: new torch.Generator(4) });
    assert.ok(maxAbsDiff(merged.forward(ids), base.forward(ids)) < 1e-4);
  });
  lora.dispose();
  base.dispose();
  merged.dispose();
  assert.throws(() => convert(modelDir('qwen2-tied'), modelDir('qwen2-tied')), /DST must differ from SRC/);
});
