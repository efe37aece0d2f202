// config.json parsing (both RoPE spellings, transformers' defaults, precise errors) and RoPE inverse frequencies
// against transformers' ROPE_INIT_FUNCTIONS (test/fixtures/models/rope.json, from scripts/fixtures/hf_models.py).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { loadModelConfig, type ModelConfig, parseModelConfig, ropeInverseFrequencies } from '../../src/model/index.js';
import { fixturesDir, modelDir } from './helpers/fixtures.js';

const tmp = mkdtempSync(join(tmpdir(), 'model-config-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

const baseConfig = (): Record<string, unknown> => JSON.parse(readFileSync(join(modelDir('qwen2-tied'), 'config.json'), 'utf8'));

test('fixture configs parse into typed configs', () => {
  const qwen2 = loadModelConfig(modelDir('qwen2-tied'));
  assert.equal(qwen2.modelType, 'qwen2');
  assert.equal(qwen2.architecture, 'Qwen2ForCausalLM');
  assert.equal(qwen2.headDim, 16);
  assert.equal(qwen2.numKeyValueHeads, 2);
  assert.equal(qwen2.qkvBias, true);
  assert.equal(qwen2.outputBias, false);
  assert.equal(qwen2.tieWordEmbeddings, true);
  assert.deepEqual(qwen2.rope, { theta: 1e6, scaling: { type: 'default' } });
  const qwen3 = loadModelConfig(modelDir('qwen3-untied'));
  assert.equal(qwen3.headDim, 32);
  assert.equal(qwen3.qkNorm, true);
  assert.equal(qwen3.qkvBias, false);
  const llama3 = loadModelConfig(modelDir('llama3-rope'));
  assert.deepEqual(llama3.rope.scaling, {
    type: 'llama3',
    factor: 4,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: 16,
  });
  const yarn = loadModelConfig(modelDir('llama-yarn'));
  assert.equal(yarn.rope.scaling.type, 'yarn');
  assert.equal(yarn.qkvBias && yarn.outputBias && yarn.mlpBias, true);
});

test('the pre-v5 spelling (rope_theta + rope_scaling with "type") reads the same', () => {
  const raw = baseConfig();
  delete raw.rope_parameters;
  raw.model_type = 'llama';
  raw.architectures = ['LlamaForCausalLM'];
  raw.rope_theta = 500000;
  raw.rope_scaling = { type: 'linear', factor: 2 };
  const config = parseModelConfig(raw);
  assert.deepEqual(config.rope, { theta: 500000, scaling: { type: 'linear', factor: 2 } });
  raw.rope_scaling = null;
  assert.deepEqual(parseModelConfig(raw).rope, { theta: 500000, scaling: { type: 'default' } });
  delete raw.rope_theta;
  assert.equal(parseModelConfig(raw).rope.theta, 10000, "transformers' default theta");
});

test("transformers' per-model defaults: Qwen3 head_dim 128, Llama kv heads = heads", () => {
  const raw = baseConfig();
  raw.model_type = 'qwen3';
  raw.architectures = ['Qwen3ForCausalLM'];
  assert.equal(parseModelConfig(raw).headDim, 128);
  raw.model_type = 'llama';
  raw.architectures = ['LlamaForCausalLM'];
  delete raw.num_key_value_heads;
  const llama = parseModelConfig(raw);
  assert.equal(llama.headDim, 16);
  assert.equal(llama.numKeyValueHeads, 4);
  assert.equal(llama.qkvBias, false);
});

test('bad configs name the file and the key', () => {
  const file = join(tmp, 'config.json');
  const expectError = (edit: (raw: Record<string, unknown>) => void, pattern: RegExp) => {
    const raw = baseConfig();
    edit(raw);
    writeFileSync(file, JSON.stringify(raw));
    assert.throws(
      () => loadModelConfig(tmp),
      (error: Error) => {
        assert.equal(error.name, 'ModelConfigError');
        assert.ok(error.message.startsWith(`${file}: `), error.message);
        assert.match(error.message, pattern);
        return true;
      },
    );
  };
  expectError((r) => (r.model_type = 'gpt2'), /key 'model_type': unsupported model type "gpt2"; supported: llama, qwen2, qwen3/);
  expectError((r) => (r.architectures = ['Qwen2ForSequenceClassification']), /key 'architectures': unsupported architectures/);
  expectError((r) => delete r.hidden_size, /key 'hidden_size': missing \(expected a positive integer\)/);
  expectError((r) => (r.vocab_size = '128'), /key 'vocab_size': expected a positive integer, got "128"/);
  expectError((r) => (r.num_key_value_heads = 3), /key 'num_key_value_heads': 3 does not divide num_attention_heads 4/);
  expectError((r) => delete r.num_key_value_heads, /key 'num_key_value_heads': missing/);
  expectError((r) => (r.hidden_act = 'gelu'), /key 'hidden_act': unsupported activation "gelu"/);
  expectError((r) => (r.use_sliding_window = true), /key 'use_sliding_window': sliding-window attention is not supported/);
  expectError(
    (r) => (r.rope_parameters = { rope_type: 'longrope', rope_theta: 1e4 }),
    /key 'rope_parameters.rope_type': unsupported rope type "longrope"/,
  );
  expectError((r) => (r.rope_parameters = { rope_type: 'llama3', factor: 8 }), /key 'rope_parameters.low_freq_factor': missing/);
  expectError((r) => (r.rope_scaling = { type: 'linear' }), /key 'rope_scaling.factor': missing \(expected a positive number\)/);
  writeFileSync(file, '{"model_type": ');
  assert.throws(() => loadModelConfig(tmp), /config.json: not valid JSON/);
  assert.throws(() => loadModelConfig(join(tmp, 'nowhere')), /nowhere\/config.json: cannot read the model config/);
});

interface RopeCase {
  name: string;
  rope_parameters: Record<string, unknown>;
  head_dim: number;
  max_position_embeddings: number;
  seq_len: number | null;
  inv_freq: number[];
  attention_factor: number;
}

test("RoPE inverse frequencies and attention factors equal transformers' bit for bit (default, linear, dynamic, llama3, yarn)", () => {
  const { cases } = JSON.parse(readFileSync(join(fixturesDir, 'rope.json'), 'utf8')) as { cases: RopeCase[] };
  assert.ok(cases.length >= 9);
  for (const c of cases) {
    const raw = { ...baseConfig(), model_type: 'llama', architectures: ['LlamaForCausalLM'] } as Record<string, unknown>;
    raw.head_dim = c.head_dim;
    raw.max_position_embeddings = c.max_position_embeddings;
    raw.rope_parameters = c.rope_parameters;
    const config: ModelConfig = parseModelConfig(raw);
    const { invFreq, attentionScaling } = ropeInverseFrequencies(
      config.rope,
      c.head_dim,
      c.max_position_embeddings,
      c.seq_len ?? undefined,
    );
    const ours = Array.from(invFreq.toTypedArray() as Float32Array);
    invFreq.dispose();
    assert.equal(ours.length, c.inv_freq.length, c.name);
    ours.forEach((v, i) => {
      const expected = c.inv_freq[i] as number;
      assert.ok(v === expected, `${c.name}: inv_freq[${i}] = ${v}, transformers ${expected}`);
    });
    assert.ok(
      Math.abs(attentionScaling - c.attention_factor) < 1e-12,
      `${c.name}: attention factor ${attentionScaling} vs ${c.attention_factor}`,
    );
  }
});
