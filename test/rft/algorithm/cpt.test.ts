// The cpt algorithm (continued pre-training, Trinity-RFT v0.6): plain-text rows read by the CPT formatter
// (src/rft/buffer/cpt.ts) without a chat template, the loss over every token after the first checked by hand against
// the model's own log-probabilities, a tiny model whose loss falls, and a whole `mode: train` run of the preset.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CausalLM, initModel, tokenLogProbs } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import { EXPERIENCE_SCHEMAS, trainsOffline } from '../../../src/rft/algorithm/schemas.js';
import { loadCptDataset } from '../../../src/rft/buffer/index.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import { Tokenizer } from '../../../src/tokenizer/index.js';
import * as torch from '../../../src/torch/index.js';

const TEXTS = ['abcabc abc', 'cab cab', 'a b c a b c', 'bbb aaa ccc'];

let root: string;
let modelDir: string;
let textFile: string;
before(() => {
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'cpt-'));
  modelDir = join(root, 'model');
  initModel(modelDir, { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 7, alphabet: 'abc ' });
  textFile = join(root, 'corpus.jsonl');
  writeFileSync(textFile, `${TEXTS.map((text, i) => JSON.stringify({ id: `doc${i}`, text })).join('\n')}\n`);
});
after(() => rmSync(root, { recursive: true, force: true }));

describe('cpt', () => {
  test('the preset: supervised on the cpt schema, offline, no reference, critic or advantages', () => {
    const cpt = resolveAlgorithm({ algorithm_type: 'cpt' });
    assert.equal(cpt.schema, 'cpt');
    assert.equal(cpt.policyLossFn.name, 'sft');
    assert.equal(cpt.advantageFn, null);
    assert.deepEqual([cpt.useCritic, cpt.useReference, cpt.repeatTimes], [false, false, 1]);
    assert.equal(EXPERIENCE_SCHEMAS.cpt.readDataset, loadCptDataset);
    assert.deepEqual(['cpt', 'sft', 'dpo', 'grpo', 'raft', 'nonsense'].map(trainsOffline), [
      true,
      true,
      true,
      false,
      false,
      false,
    ]);
  });

  test('the formatter: plain text, no chat template, the first token the prompt, mask 1 on all the rest', async () => {
    const tokenizer = Tokenizer.load(modelDir);
    const rows = await loadCptDataset(textFile, tokenizer, { promptKey: 'text' });
    assert.equal(rows.length, TEXTS.length);
    const eos = tokenizer.eosTokenIds[0] as number;
    for (const [i, row] of rows.entries()) {
      const text = TEXTS[i] as string;
      // the char tokenizer has no BOS: tokens = encode(text) ++ eos, one token per character
      assert.deepEqual(row.tokens, [...tokenizer.encode(text), eos]);
      assert.equal(row.tokens.length, text.length + 1);
      assert.equal(row.promptLength, 1);
      assert.deepEqual(row.actionMask, Array(text.length).fill(1));
      assert.equal(row.info.taskId, `doc${i}`);
      assert.ok(!tokenizer.decode(row.tokens, { skipSpecialTokens: false }).includes('<|im_start|>'), 'no chat template');
    }
  });

  test('rows without text are errors naming the file, the row and the key', async () => {
    const tokenizer = Tokenizer.load(modelDir);
    const write = (name: string, lines: unknown[]) => {
      const file = join(root, name);
      writeFileSync(file, `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
      return file;
    };
    await assert.rejects(
      loadCptDataset(write('missing.jsonl', [{ text: 'abc' }, { body: 'abc' }]), tokenizer, { promptKey: 'text' }),
      /missing\.jsonl:2: 'text' \(the text to train on, format\.prompt_key\) must be non-empty text; it is missing/,
    );
    await assert.rejects(
      loadCptDataset(write('default-key.jsonl', [{ text: 'abc' }]), tokenizer),
      /default-key\.jsonl:1: 'prompt' \(the text to train on/,
    );
    await assert.rejects(
      loadCptDataset(write('empty.jsonl', [{ prompt: '' }]), tokenizer),
      /empty\.jsonl:1: .* got an empty string/,
    );
    await assert.rejects(loadCptDataset(write('list.jsonl', [['abc']]), tokenizer), /list\.jsonl:1: a row must be a JSON object/);
  });

  test('the loss is the mean NLL of every token after the first (by hand from the model), and it falls', async () => {
    const tokenizer = Tokenizer.load(modelDir);
    const rows = await loadCptDataset(textFile, tokenizer, { promptKey: 'text' });
    const model = CausalLM.load(modelDir, { requiresGrad: true });
    const algorithm = resolveAlgorithm({ algorithm_type: 'cpt', optimizer: { lr: 0.01 } });
    // by hand: −(1/N) Σ_rows Σ_{t≥1} log π(x_t | x_<t), N = the tokens after the first of every row (token-mean)
    let sum = 0;
    let count = 0;
    for (const row of rows) {
      const logProbs = torch.scope(() =>
        torch.noGrad(() => {
          const ids = torch.tensor([row.tokens.map(BigInt)]);
          // logProbs[t] = log π(x_{t+1} | x_≤t): positions 0..n−2 predict tokens 1..n−1, every token but the first
          return [...(tokenLogProbs(model, ids).logProbs.toTypedArray() as Float32Array)];
        }),
      );
      assert.equal(logProbs.length, row.tokens.length - 1);
      sum -= logProbs.reduce((a, b) => a + b, 0);
      count += logProbs.length;
    }
    assert.equal(
      count,
      TEXTS.reduce((n, t) => n + t.length, 0),
      'every character and the EOS are predicted',
    );
    const handLoss = sum / count;
    const step = new TrainStep({
      model,
      optimizer: new torch.AdamW([...model.parameters().values()], { lr: 0.01, weightDecay: 0 }),
      algorithm,
      reference: null,
      critic: null,
    });
    const losses: number[] = [];
    for (let i = 0; i < 8; i++) losses.push(step.run(rows).loss as number);
    assert.ok(Math.abs((losses[0] as number) - handLoss) < 1e-4, `first step loss ${losses[0]} vs by hand ${handLoss}`);
    assert.ok((losses.at(-1) as number) < (losses[0] as number) * 0.8, `loss ${losses.map((l) => l.toFixed(3)).join(' → ')}`);
    model.dispose();
  });

  test('a mode-train run of algorithm_type cpt reads the text file and trains', async () => {
    const configFile = join(root, 'cpt.yaml');
    writeFileSync(
      configFile,
      `mode: train
project: test
name: cpt
checkpoint_root_dir: out
model:
  model_path: model
  max_model_len: 32
  dtype: float32
algorithm:
  algorithm_type: cpt
  optimizer:
    lr: 0.01
buffer:
  train_batch_size: 4
  total_steps: 6
  trainer_input:
    experience_buffer:
      name: corpus
      storage_type: file
      path: corpus.jsonl
      format:
        prompt_key: text
trainer:
  save_interval: 6
`,
    );
    await runConfig(loadConfig(configFile), { log: () => {} });
    const metrics = readFileSync(join(root, 'out/test/cpt/metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, number>)
      .filter((m) => m['actor/loss'] !== undefined);
    assert.deepEqual(
      metrics.map((m) => m.step),
      [1, 2, 3, 4, 5, 6],
    );
    assert.ok((metrics[5]?.['actor/loss'] as number) < (metrics[0]?.['actor/loss'] as number), 'the loss falls');
  });
});
