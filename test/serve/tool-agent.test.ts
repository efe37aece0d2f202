// An agent written with the official `openai` client, calling tools, trained through mode serve: each episode (the
// user's question, the model's tool call, the tool's result, the model's answer) is one conversation; its feedback
// makes one experience whose action mask is 1 on exactly the ids the model generated (both replies) and 0 on the
// tool result and the template's tokens; a train step consumes the experiences.
// The served engine is scripted (a random tiny model writes no tool calls): it answers with fixed texts in the model's
// own vocabulary, so everything after the engine — the server, the client's tool calls, conversation tracking,
// feedback, the buffer and the trainer — is the real code.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import type { GenerateRequest, GenerateResult } from '../../src/engine/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { openSharedBuffer } from '../../src/rft/buffer/index.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { runConfig, stageSettings } from '../../src/rft/run/index.js';
import { type ServeEngineStarter, startServeStage } from '../../src/serve/index.js';
import { DEFAULT_ALPHABET, Tokenizer } from '../../src/tokenizer/index.js';
import { makeJob } from '../rft/run/helpers.js';

const shared = [
  'buffer.trainer_input.experience_buffer.storage_type=sql',
  'buffer.train_batch_size=2',
  'synchronizer.sync_method=checkpoint',
  'explorer.proxy_port=0',
  'model.max_prompt_tokens=200',
  'model.max_response_tokens=80',
  'model.max_model_len=400',
];

const TOOL_CALL = '<tool_call>\n{"name": "calc", "arguments": {"expression": "2+3"}}\n</tool_call>';
const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'calc',
      description: 'evaluates an addition',
      parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
    },
  },
];

/** A served engine that calls `calc` first and then answers with the next of `answers`, in the model's own ids. */
function scriptedStarter(answers: string[]): ServeEngineStarter {
  return async (servedDir, settings) => {
    const tokenizer = Tokenizer.load(servedDir);
    const imEnd = tokenizer.tokenToId('<|im_end|>') as number;
    const generate = async (request: GenerateRequest): Promise<GenerateResult> => {
      const promptIds = [...(request.promptIds ?? [])];
      const seenTool = tokenizer.decode(promptIds, { skipSpecialTokens: false }).includes('<|im_start|>tool');
      const text = seenTool ? (answers.shift() as string) : TOOL_CALL;
      const tokenIds = [...tokenizer.encode(text), imEnd];
      return {
        promptIds,
        completions: [
          {
            index: 0,
            tokenIds,
            logprobs: tokenIds.map(() => -0.5),
            text,
            finishReason: 'stop',
            stopReason: imEnd,
          },
        ],
      };
    };
    const engine = {
      tokenizer,
      maxLength: settings.explorer.maxLength,
      generate,
      syncWeightsFromDir: async () => 0,
      close: async () => {},
      stats: async () => [],
    };
    return { engine, tokenizer };
  };
}

/** The agent: plain `openai` code with a calculator tool; returns its answer and the completion ids of its turns. */
async function runAgent(client: OpenAI, question: string): Promise<{ answer: string; lastId: string }> {
  const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: question }];
  for (let turn = 0; turn < 4; turn++) {
    const reply = await client.chat.completions.create({ model: 'any-name', messages, tools });
    const message = reply.choices[0]?.message;
    assert.ok(message);
    if (!message.tool_calls?.length) return { answer: message.content ?? '', lastId: reply.id };
    messages.push(message);
    for (const call of message.tool_calls) {
      assert.equal(call.type, 'function');
      const { expression } = JSON.parse(call.function.arguments) as { expression: string };
      const sum = expression.split('+').reduce((a, b) => a + Number(b), 0);
      messages.push({ role: 'tool', tool_call_id: call.id, content: String(sum) });
    }
  }
  throw new Error('the agent ran out of turns');
}

describe('a tool-calling openai agent trained through mode serve', () => {
  it("turns each episode into one experience masked on the model's ids, and trains on them", { timeout: 240_000 }, async () => {
    const job = makeJob({ totalSteps: 1, saveInterval: 1, model: { alphabet: DEFAULT_ALPHABET } });
    const [serveConfig] = resolveStages(loadConfig(job.configFile, { resolveAlgorithm, overrides: ['mode=serve', ...shared] }));
    assert.ok(serveConfig);
    const settings = stageSettings(serveConfig, join(job.root, 'model'), job.root);
    const stage = await startServeStage(settings, { log: () => {} }, scriptedStarter(['5', '6']));
    const bufferPath = settings.buffer.path ?? join(settings.jobDir, 'buffer.db');
    try {
      const client = new OpenAI({ baseURL: stage.server.baseURL, apiKey: 'none' });
      for (const _ of [0, 1]) {
        const { answer, lastId } = await runAgent(client, 'What is 2+3?');
        const response = await fetch(`${stage.server.url}/feedback`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ response_id: lastId, reward: answer === '5' ? 1 : 0, task_id: 'q-2+3' }),
        });
        assert.equal(response.status, 200, await response.clone().text());
      }
    } finally {
      await stage.stop();
    }

    const tokenizer = Tokenizer.load(join(job.root, 'model'));
    const buffer = await openSharedBuffer({ path: bufferPath, readonly: true });
    const stored = await buffer.peek({ limit: 10 });
    await buffer.close();
    assert.deepEqual(
      stored.map((s) => s.experience.reward),
      [1, 0],
    );
    for (const [i, { experience: e }] of stored.entries()) {
      const response = e.tokens.slice(e.promptLength);
      const mask = e.actionMask as number[];
      assert.equal(mask.length, response.length);
      const text = (keep: 0 | 1) =>
        tokenizer.decode(
          response.filter((_, j) => mask[j] === keep),
          { skipSpecialTokens: false },
        );
      // trained: the tool call and the answer, each with its end-of-turn token; not trained: the tool's result in
      // its template turn and the next assistant header
      assert.equal(text(1), `${TOOL_CALL}<|im_end|>${i === 0 ? '5' : '6'}<|im_end|>`);
      assert.equal(text(0), '\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n');
      assert.equal(e.info.taskId, 'q-2+3');
      // the prompt is the question with the tool list the template renders
      assert.match(
        tokenizer.decode(e.tokens.slice(0, e.promptLength), { skipSpecialTokens: false }),
        /tools: calc.*What is 2\+3\?/s,
      );
    }

    const training = await runConfig(
      loadConfig(job.configFile, { resolveAlgorithm, overrides: ['mode=train', ...shared, 'buffer.total_steps=1'] }),
      { log: () => {} },
    );
    assert.deepEqual(
      training.stages.map((s) => s.steps),
      [1],
    );
  });
});
