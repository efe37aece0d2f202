// LoRA adapters over vLLM's dynamic adapter API on `trinity serve` (serveModel with a reload root), pushed to every
// server of a RemoteEnginePool: POST /v1/load_lora_adapter {lora_name, lora_path} and /v1/unload_lora_adapter
// {lora_name} (200 with vLLM's plain-text "Success: ..." line), requests whose model is the adapter's name get the
// base model with the adapter merged (checked against an engine whose weights were merged here with PEFT's formula,
// ../../src/model/lora.ts), requests for the base model still get the base model, and re-syncing under the same name
// replaces the adapter. Errors: unknown adapter 404, a folder outside the reload root 403, missing fields 400.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { CausalLM, LoraModel } from '../../src/model/index.js';
import { OpenAIRemoteEngine, RemoteEnginePool } from '../../src/openai/index.js';
import { type ServedModel, serveModel } from '../../src/serve/index.js';
import * as torch from '../../src/torch/index.js';
import { fixtureModelWithTokenizer } from './helpers.js';

const modelDir = fixtureModelWithTokenizer('qwen2-tied');
const root = mkdtempSync(join(tmpdir(), 'lora-root-'));
const request = { promptIds: [5, 9, 14, 20], maxTokens: 5, temperature: 0, ignoreEos: true };

/** A random PEFT adapter (B ≠ 0, so it changes the model) saved under the reload root. */
function writeAdapter(name: string, seed: number): string {
  const dir = join(root, name);
  const model = CausalLM.load(modelDir);
  try {
    const lora = LoraModel.attach(model, { r: 4, loraAlpha: 16, targetModules: 'all-linear', initLoraWeights: false, seed });
    lora.save(dir);
    lora.dispose();
  } finally {
    model.dispose();
  }
  return dir;
}

/** Greedy ids of `request` on the base model with the adapter in `adapterDir` merged (or the base model: null). */
async function reference(adapterDir: string | null): Promise<number[]> {
  const model = CausalLM.load(modelDir);
  if (adapterDir !== null) LoraModel.load(model, adapterDir, { trainable: false }).mergeAndUnload();
  const engine = new RolloutEngine(model, { slots: 1 });
  try {
    return (await engine.generate(request)).completions[0]?.tokenIds ?? [];
  } finally {
    await engine.close();
    model.dispose();
  }
}

let servers: ServedModel[] = [];

before(async () => {
  torch.setNumThreads(1);
  servers = await Promise.all(
    [0, 1].map(() => serveModel({ modelDir, port: 0, modelName: 'tiny', reloadRoot: root, slots: 4, numThreads: 1 })),
  );
});
after(async () => {
  for (const s of servers) await s.close();
});

async function post(server: ServedModel, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${server.server.baseURL}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

describe('LoRA adapters on a pool of two trinity serve servers (serveModel, in this process)', () => {
  it('reach every server; requests naming the adapter get the merged model, the base name the base model', async () => {
    const first = writeAdapter('adapter-1', 1);
    const second = writeAdapter('adapter-2', 2);
    const [base, adapted1, adapted2] = [await reference(null), await reference(first), await reference(second)];
    assert.notDeepEqual(adapted1, base, 'the adapter changes the greedy answer (else the test could not tell)');
    assert.notDeepEqual(adapted2, adapted1);

    const pool = await RemoteEnginePool.connect({
      baseURLs: servers.map((s) => s.server.baseURL),
      model: 'tiny',
      tokenizer: null,
    });
    try {
      await pool.syncLoraAdapter('policy', first);
      for (const server of servers) {
        const direct = new OpenAIRemoteEngine({ baseURL: server.server.baseURL, model: 'tiny', tokenizer: null });
        assert.deepEqual((await direct.generate(request)).completions[0]?.tokenIds, base, 'base model name: base model');
        direct.useModel('policy');
        assert.deepEqual((await direct.generate(request)).completions[0]?.tokenIds, adapted1, 'adapter name: merged');
        const models = (await (await fetch(`${server.server.baseURL}/models`)).json()) as { data: { id: string }[] };
        assert.deepEqual(
          models.data.map((m) => m.id),
          ['tiny', 'policy'],
        );
      }
      // the pool's own requests name the adapter now
      assert.deepEqual((await pool.generate(request)).completions[0]?.tokenIds, adapted1);
      // the next version under the same name replaces it on every server (unload, then load)
      await pool.syncLoraAdapter('policy', second);
      for (const server of servers) {
        const direct = new OpenAIRemoteEngine({ baseURL: server.server.baseURL, model: 'policy', tokenizer: null });
        assert.deepEqual((await direct.generate(request)).completions[0]?.tokenIds, adapted2);
      }
      assert.deepEqual(
        pool.members().map((m) => m.reloads),
        [2, 2],
      );
    } finally {
      await pool.close();
    }
  });

  it("answers as vLLM does: a plain-text success line, 404 for an unknown adapter, the root's 403, 400 for missing fields", async () => {
    const server = servers[0] as ServedModel;
    const dir = writeAdapter('adapter-3', 3);
    assert.deepEqual(await post(server, '/load_lora_adapter', { lora_name: 'x', lora_path: dir }), {
      status: 200,
      text: "Success: LoRA adapter 'x' added successfully.",
    });
    // several models served (the base, the first test's adapter, x): a name that is none of them is a 404 naming them
    const unknown = await post(server, '/chat/completions', { model: 'nope', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(unknown.status, 404);
    assert.match(unknown.text, /The model 'nope' does not exist; this server serves 3 models: tiny, policy, x/);
    const again = await post(server, '/load_lora_adapter', { lora_name: 'x', lora_path: dir });
    assert.equal(again.status, 400);
    assert.match(again.text, /The lora adapter 'x' has already been loaded/);
    assert.deepEqual(await post(server, '/unload_lora_adapter', { lora_name: 'x' }), {
      status: 200,
      text: "Success: LoRA adapter 'x' removed successfully.",
    });
    const gone = await post(server, '/unload_lora_adapter', { lora_name: 'x' });
    assert.equal(gone.status, 404);
    assert.match(gone.text, /The lora adapter 'x' cannot be found/);
    const client = new OpenAIRemoteEngine({ baseURL: server.server.baseURL, model: 'tiny', tokenizer: null });
    assert.equal(await client.unloadLoraAdapter('x'), false, 'unloading an unknown adapter is not an error for the pool');
    client.useModel('x');
    await assert.rejects(client.generate(request), /HTTP 404/);
    const outside = await post(server, '/load_lora_adapter', { lora_name: 'y', lora_path: mkdtempSync(join(tmpdir(), 'out-')) });
    assert.equal(outside.status, 403);
    assert.match(outside.text, /outside the reload root/);
    const notAdapter = await post(server, '/load_lora_adapter', { lora_name: 'z', lora_path: root });
    assert.equal(notAdapter.status, 400);
    assert.match(notAdapter.text, /adapter_config\.json/);
    assert.equal((await post(server, '/load_lora_adapter', { lora_path: dir })).status, 400);
    assert.equal((await post(server, '/load_lora_adapter', { lora_name: 'w' })).status, 400);
  });
});
