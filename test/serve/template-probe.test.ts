// `trinity serve` renders a one-message chat with the model's template when it loads: a template that fails there
// (here: one that runs past its render budget on any input) is the model's error at load, naming the folder,
// instead of every request's (issue 49).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { serveModel } from '../../src/serve/index.js';
import { fixtureModelWithTokenizer } from '../engine/helpers.js';

test('serveModel refuses a model whose chat template cannot render a one-message chat', async () => {
  const modelDir = fixtureModelWithTokenizer('qwen2-tied');
  const configFile = join(modelDir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  const looping = '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}';
  writeFileSync(configFile, JSON.stringify({ ...config, chat_template: looping }));
  await assert.rejects(serveModel({ modelDir, port: 0, slots: 1, maxLength: 32, numThreads: 1 }), (error: Error) => {
    assert.equal(error.name, 'TokenizerError');
    assert.match(error.message, new RegExp(`^${modelDir}: chat_template cannot render a one-message chat: .*budget`));
    return true;
  });
});
