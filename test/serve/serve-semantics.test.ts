// Mode serve as an agent developer meets it: a conversation's context is model.max_model_len (derived as
// max_prompt_tokens + max_response_tokens when unset, and said at start), a reply gets model.max_response_tokens when
// the request gives no max_tokens and at most that when it asks more, turns after the first are served while they fit
// the context, any model name reaches the one model served, the API key is required when set, and the feedback of
// n=1 calls that name one task_id forms one GRPO group. `trinity serve` without the LoRA API accepts any name too.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { computeGrpoAdvantages } from '../../src/rft/algorithm/index.js';
import { SqliteBuffer } from '../../src/rft/buffer/index.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { type StageSettings, stageSettings } from '../../src/rft/run/index.js';
import { type ServeStage, serveModel, startServeStage } from '../../src/serve/index.js';
import * as torch from '../../src/torch/index.js';
import { makeJob } from '../rft/run/helpers.js';

delete process.env.TRINITY_API_KEY; // the key is the config's

/** A mode-serve stage of the tiny test job (max_prompt_tokens 24, max_response_tokens 4, name e2e) with `overrides`. */
function serveSettings(overrides: string[]): StageSettings {
  const job = makeJob({ totalSteps: 1, saveInterval: 1 });
  const config = loadConfig(job.configFile, {
    resolveAlgorithm,
    overrides: ['mode=serve', 'buffer.trainer_input.experience_buffer.storage_type=sql', 'explorer.proxy_port=0', ...overrides],
  });
  const [serveConfig] = resolveStages(config);
  assert.ok(serveConfig);
  return stageSettings(serveConfig, join(job.root, 'model'), job.root);
}

type Message = { role: string; content: string };
interface Reply {
  status: number;
  body: {
    id: string;
    model: string;
    choices: { message: Message; finish_reason: string }[];
    usage: { prompt_tokens: number; completion_tokens: number };
    error?: { message: string; param: string | null };
  };
}

function client(stage: () => ServeStage, key: string | null) {
  const headers = { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) };
  const post = async (path: string, body: unknown): Promise<Reply> => {
    const res = await fetch(`${stage().server.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as Reply['body'] };
  };
  // ignore_eos: a reply runs to its budget, so the budget is what the test sees
  const chat = (messages: Message[], extra: Record<string, unknown> = {}) =>
    post('/v1/chat/completions', { model: 'e2e', messages, ignore_eos: true, temperature: 0, ...extra });
  return { post, chat, headers };
}

describe('mode serve: max_model_len is the conversation, max_response_tokens a reply', () => {
  let stage: ServeStage;
  const lines: string[] = [];
  before(async () => {
    stage = await startServeStage(serveSettings(['model.max_model_len=160']), { log: (line) => lines.push(line) });
  });
  after(async () => {
    await stage?.stop();
  });
  const { chat } = client(() => stage, null);

  it('gives a request without max_tokens max_response_tokens, and caps one asking more', async () => {
    const none = await chat([{ role: 'user', content: '1+1=' }]);
    assert.equal(none.status, 200);
    assert.equal(none.body.usage.completion_tokens, 4);
    assert.equal(none.body.choices[0]?.finish_reason, 'length');
    const more = await chat([{ role: 'user', content: '1+2=' }], { max_tokens: 50 });
    assert.equal(more.status, 200, JSON.stringify(more.body));
    assert.equal(more.body.usage.completion_tokens, 4);
    const less = await chat([{ role: 'user', content: '1+3=' }], { max_tokens: 2 });
    assert.equal(less.body.usage.completion_tokens, 2);
  });

  it('serves a second and a third turn past max_prompt_tokens while they fit max_model_len', async () => {
    const messages: Message[] = [{ role: 'user', content: '2+2=' }];
    let promptTokens = 0;
    for (const next of ['3+3=', '4+4=', null]) {
      const reply = await chat(messages, { max_tokens: 4 });
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      assert.equal(reply.body.usage.completion_tokens, 4);
      promptTokens = reply.body.usage.prompt_tokens;
      messages.push(reply.body.choices[0]?.message as Message);
      if (next !== null) messages.push({ role: 'user', content: next });
    }
    assert.ok(promptTokens > 24, `the third turn's prompt (${promptTokens} tokens) is over max_prompt_tokens 24`);
  });

  it('says the lengths at start', () => {
    assert.ok(
      lines.some((l) => /a conversation's context .*: 160 tokens \(model\.max_model_len\); a reply: 4 tokens/.test(l)),
      lines.join('\n'),
    );
  });
});

describe('mode serve without max_model_len: the context is max_prompt_tokens + max_response_tokens, said at start', () => {
  let stage: ServeStage;
  const lines: string[] = [];
  before(async () => {
    stage = await startServeStage(serveSettings([]), { log: (line) => lines.push(line) });
  });
  after(async () => {
    await stage?.stop();
  });
  const { chat } = client(() => stage, null);

  it('lowers a reply to what the context has left, and refuses a prompt that fills it naming the context', async () => {
    assert.ok(
      lines.some((l) => /: 28 tokens \(model\.max_model_len, here max_prompt_tokens \+ max_response_tokens: the value/.test(l)),
      lines.join('\n'),
    );
    const first = await chat([{ role: 'user', content: '1' }], { max_tokens: 4 });
    assert.equal(first.status, 200);
    const room = 28 - first.body.usage.prompt_tokens; // what a prompt of this length leaves
    // a user message that leaves 2 tokens: the reply is cut to them (without the cap: a 400)
    const fill = '1'.repeat(room - 2 + 1);
    const cut = await chat([{ role: 'user', content: fill }], { max_tokens: 4 });
    assert.equal(cut.status, 200, JSON.stringify(cut.body));
    assert.equal(cut.body.usage.prompt_tokens + cut.body.usage.completion_tokens, 28);
    assert.equal(cut.body.usage.completion_tokens, 2);
    const full = await chat([{ role: 'user', content: '1'.repeat(room + 1) }]);
    assert.equal(full.status, 400);
    assert.match(full.body.error?.message ?? '', /fills the model's context of 28/);
  });
});

describe('mode serve: model name, API key, task_id groups', () => {
  let stage: ServeStage;
  let settings: StageSettings;
  before(async () => {
    settings = serveSettings(['explorer.api_key=agent-key', 'model.max_model_len=160']);
    stage = await startServeStage(settings, { log: () => {} });
  });
  after(async () => {
    await stage?.stop();
  });
  const keyed = client(() => stage, 'agent-key');

  it('answers any model name with the one model served; /v1/models lists the run name', async () => {
    const reply = await keyed.chat([{ role: 'user', content: '1+1=' }], { model: 'gpt-4o-mini' });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    const models = await fetch(`${stage.server.url}/v1/models`, { headers: keyed.headers });
    assert.deepEqual(
      ((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id),
      ['e2e'],
    );
  });

  it('refuses a request without the key, or with another, when explorer.api_key is set', async () => {
    for (const key of [null, 'wrong']) {
      const other = client(() => stage, key);
      const reply = await other.chat([{ role: 'user', content: '1+1=' }]);
      assert.equal(reply.status, 401);
      assert.equal((await other.post('/feedback', { response_id: 'x', reward: 1 })).status, 401);
    }
  });

  it('groups the feedback of n=1 calls by task_id: one GRPO group; without it each call is its own', async () => {
    const rewards = [1, 0, 0, 1];
    for (const [taskId, seed] of [
      ['q-7', 0],
      [null, 10],
    ] as const) {
      for (const [run, reward] of rewards.entries()) {
        const reply = await keyed.chat([{ role: 'user', content: '3+4=' }], { temperature: 1, seed: seed + run });
        const feedback = { response_id: reply.body.id, reward, ...(taskId ? { task_id: taskId, run_id: run } : {}) };
        assert.equal((await keyed.post('/feedback', feedback)).status, 200);
      }
    }
    const buffer = new SqliteBuffer({ path: settings.buffer.path as string, table: 'experience_buffer' });
    const stored = buffer.peek({ limit: 20 }).map((s) => s.experience);
    await buffer.close();
    assert.equal(stored.length, 8);
    assert.deepEqual(
      stored.slice(0, 4).map((e) => [e.info.taskId, e.info.runId]),
      [0, 1, 2, 3].map((run) => ['q-7', run]),
    );
    assert.equal(new Set(stored.slice(4).map((e) => e.info.taskId)).size, 4, 'default task id: each response its own');
    // the trainer's GRPO over these groups (../../src/rft/trainer/loss-inputs.ts passes info.taskId as groupIds)
    torch.scope(() => {
      const { advantages } = computeGrpoAdvantages({
        actionMask: torch.ones([8, 1], { dtype: 'float64' }),
        rewards: torch.tensor(
          stored.map((e) => e.reward ?? Number.NaN),
          { dtype: 'float64' },
        ),
        groupIds: stored.map((e) => e.info.taskId as string),
      });
      const a = (advantages.toArray() as number[][]).map((row) => row[0] as number);
      // one group [1, 0, 0, 1]: mean 1/2, unbiased std sqrt(1/3) → ±(1/2)/sqrt(1/3) = ±0.866
      const s = 0.5 / Math.sqrt(1 / 3);
      for (const [i, expected] of [s, -s, -s, s].entries()) assert.ok(Math.abs((a[i] as number) - expected) < 1e-4, `${a}`);
      // groups of one: mean 0, std 1 → the raw reward, no comparison between the calls
      for (const [i, expected] of rewards.entries()) assert.ok(Math.abs((a[4 + i] as number) - expected) < 1e-4, `${a}`);
    });
  });
});

describe('trinity serve (serveModel) without the LoRA API: one model, any name', () => {
  it('answers a request naming another model with the folder served', async () => {
    const job = makeJob({ totalSteps: 1, saveInterval: 1 });
    const served = await serveModel({ modelDir: join(job.root, 'model'), port: 0, slots: 2 });
    try {
      const res = await fetch(`${served.server.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: '1+1=' }], max_tokens: 2 }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const models = (await (await fetch(`${served.server.baseURL}/models`)).json()) as { data: { id: string }[] };
      assert.deepEqual(
        models.data.map((m) => m.id),
        ['model'],
      );
    } finally {
      await served.close();
    }
  });
});
