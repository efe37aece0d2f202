// examples/tool_agent_serve, shortened, with a real (tiny, random) model: the agent's own code — its evaluation loop
// and its training rounds, the official `openai` client with `tools` — against a mode serve stage, and a train run
// on the same buffer that consumes the round's traffic. The evaluation runs before (weights version 0) and after (the
// version the train step published); a streamed episode and a non-streamed one are the same episode; the experiences
// in the buffer are the agent's episodes with its rewards, task ids and training temperature. The model has the
// example's word-level tokenizer (make-tokenizer.ts): each place name one token, numbers one token per digit, the
// character tokenizer's template.
// Also: the agent's tools give exactly the tool results of the expert conversations the SFT warm start trains on, and
// its `tools` render as those rows' system turn.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import {
  type Episode,
  evaluate,
  playEpisode,
  type Question,
  readQuestions,
  sameAnswer,
  servingSide,
  trainRounds,
} from '../../examples/tool_agent_serve/agent.js';
import { documentTexts, readConversations, toolAgentWords } from '../../examples/tool_agent_serve/make-tokenizer.js';
import { calculate, loadDocuments, runTool, TOOLS } from '../../examples/tool_agent_serve/tools.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { openSharedBuffer } from '../../src/rft/buffer/index.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { runConfig, stageSettings } from '../../src/rft/run/index.js';
import { startServeStage } from '../../src/serve/index.js';
import { charTokenizerFiles, Tokenizer, writeWordTokenizer } from '../../src/tokenizer/index.js';
import { makeJob, oneThreadForRuns } from '../rft/run/helpers.js';

const repo = fileURLToPath(new URL('../../', import.meta.url));
const documentsFile = join(repo, 'src/rft/workflow/agents/tool-agent-documents.json');
const sftFile = join(repo, 'examples/tool_agent/data/sft.jsonl');

/** make-tokenizer.ts's tokenizer, written once for both groups of tests. */
let wordTokenizerDir: string;
before(() => {
  wordTokenizerDir = mkdtempSync(join(tmpdir(), 'tool-agent-tokenizer-'));
  writeWordTokenizer(wordTokenizerDir, toolAgentWords(readConversations(sftFile), documentTexts(documentsFile)));
});
after(() => rmSync(wordTokenizerDir, { recursive: true, force: true }));

describe('the served tool agent: its tools', () => {
  it('calc: precedence, parentheses, signs; malformed expressions are errors', () => {
    assert.equal(calculate('6287+178'), 6465);
    assert.equal(calculate('2+3*4'), 14);
    assert.equal(calculate('(2+3)*4'), 20);
    assert.equal(calculate('243-1838'), -1595);
    assert.equal(calculate('-(4)*2/8'), -1);
    for (const bad of ['2+', '2 3', 'x', '(1+2', '1/0']) assert.throws(() => calculate(bad), Error, `'${bad}' is an error`);
    assert.deepEqual(runTool({ name: 'calc', arguments: '{"expression":"1+"}' }, new Map()), {
      content: 'error: unexpected end',
      valid: false,
    });
  });

  it('answers compare as numbers', () => {
    assert.ok(sameAnswer('6,465', '6465'));
    assert.ok(sameAnswer(' 6465. ', '6465'));
    assert.ok(sameAnswer('6465.0', '6465'));
    assert.ok(!sameAnswer('6466', '6465'));
    assert.ok(!sameAnswer('', '6465'));
  });

  it("give exactly the expert conversations' tool results, and render as their system turn", () => {
    const documents = loadDocuments(documentsFile);
    const rows = readFileSync(sftFile, 'utf8').trim().split('\n').slice(0, 300);
    type Turn = { role: string; content: string; tool_calls?: Array<{ function: { name: string; arguments: string } }> };
    let checked = 0;
    for (const [i, line] of rows.entries()) {
      const messages = (JSON.parse(line) as { messages: Turn[] }).messages;
      messages.forEach((turn, t) => {
        for (const [k, call] of (turn.tool_calls ?? []).entries()) {
          const result = messages[t + 1 + k];
          assert.equal(result?.role, 'tool', `row ${i + 1}`);
          assert.deepEqual(runTool(call.function, documents), { content: result?.content, valid: true }, `row ${i + 1}`);
          checked++;
        }
      });
    }
    assert.ok(checked > 600, `${checked} tool calls checked`);
    assert.equal(runTool({ name: 'lookup', arguments: '{"query":"Atlantis"}' }, documents).content, 'no match');

    // the chat template lists the tools on one system line: the SFT rows carry that line as their system turn
    const tokenizer = Tokenizer.load(wordTokenizerDir);
    const first = (JSON.parse(rows[0] as string) as { messages: Turn[] }).messages;
    const question = first[1] as Turn;
    assert.deepEqual(
      tokenizer.encodeChat([{ role: 'user', content: question.content }], { tools: TOOLS as never, addGenerationPrompt: true }),
      tokenizer.encodeChat([first[0] as Turn, question] as never, { addGenerationPrompt: true }),
    );
  });
});

describe("the served tool agent's tokenizer (make-tokenizer.ts)", () => {
  it('makes each place one token in the question, the lookup call and its result; digits stay one token each', () => {
    const tokenizer = Tokenizer.load(wordTokenizerDir);
    const pieces = (text: string) => tokenizer.encode(text).map((id) => tokenizer.decode([id]));
    for (const key of loadDocuments(documentsFile).values()) {
      const place = key.slice(0, key.indexOf(':'));
      assert.deepEqual(pieces(`Population of ${place} plus 3?`), ['Population', ' of', ` ${place}`, ' plus', ' ', '3', '?']);
      assert.deepEqual(pieces(`{"query":"${place}"}`), ['{', '"', 'query', '"', ':', '"', place, '"', '}']);
      assert.deepEqual(pieces(`${place}: population 6287`).slice(0, 3), [place, ':', ' population']);
    }
    assert.deepEqual(pieces('6287+178'), ['6', '2', '8', '7', '+', '1', '7', '8']);
    const unseen = 'Population of Zyxwvut?'; // a name outside the vocabulary falls back to characters
    assert.equal(tokenizer.decode(tokenizer.encode(unseen)), unseen);
    assert.equal(pieces(unseen).length, 2 + ' Zyxwvut?'.length);
  });

  it("renders the expert conversations to the character tokenizer's text, in half the tokens or fewer", () => {
    const tokenizer = Tokenizer.load(wordTokenizerDir);
    const files = charTokenizerFiles();
    const characters = new Tokenizer(files.tokenizerJson as never, files.tokenizerConfig as never);
    for (const messages of readConversations(sftFile).slice(0, 50)) {
      const text = characters.applyChatTemplate(messages);
      assert.equal(tokenizer.applyChatTemplate(messages), text);
      const ids = tokenizer.encodeChat(messages);
      assert.equal(tokenizer.decode(ids, { skipSpecialTokens: false }), text);
      assert.ok(2 * ids.length <= characters.encodeChat(messages).length, `${ids.length} tokens for ${text.length} characters`);
    }
  });
});

describe("the served tool agent's serving side", () => {
  it('waiting for a weights version that never comes ends in a named error', async () => {
    const server = createServer((_req, res) => res.end(JSON.stringify({ model_version: 3 })));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const serving = servingSide(`http://127.0.0.1:${port}/v1`, 'none');
      await serving.waitForVersion(3, 0); // already served: no wait
      await assert.rejects(serving.waitForVersion(4, 0), /waited 0 s for weights version 4 .* still serving version 3/);
    } finally {
      server.close();
    }
  });
});

describe('the served tool agent, end to end', () => {
  it('evaluates before and after a train step that consumed its round', { timeout: 240_000 }, async () => {
    const restoreThreads = oneThreadForRuns();
    const job = makeJob({ totalSteps: 1, saveInterval: 1, model: { tokenizer: wordTokenizerDir } });
    const shared = [
      'buffer.trainer_input.experience_buffer.storage_type=sql',
      'buffer.train_batch_size=4', // one round: 2 questions × 2 episodes
      'synchronizer.sync_method=checkpoint',
      'synchronizer.sync_interval=1',
      'explorer.proxy_port=0',
      'model.max_prompt_tokens=200',
      'model.max_response_tokens=24',
      'model.max_model_len=400',
    ];
    const config = (mode: string, extra: string[] = []) =>
      loadConfig(job.configFile, { resolveAlgorithm, overrides: [`mode=${mode}`, ...shared, ...extra] });
    const [serveConfig] = resolveStages(config('serve'));
    assert.ok(serveConfig);
    const settings = stageSettings(serveConfig, join(job.root, 'model'), job.root);
    const stage = await startServeStage(settings, { log: () => {} });
    const documents = loadDocuments(documentsFile);
    const questions: Question[] = readQuestions(join(repo, 'examples/tool_agent/data/eval.jsonl')).slice(0, 2);
    const training = runConfig(config('train', ['buffer.total_steps=1']), { log: () => {} });
    let rounds: Awaited<ReturnType<typeof trainRounds>>;
    const served: number[] = [];
    const afterRounds: Array<{ round: number; served: number }> = []; // agent.ts --eval-every evaluates here
    const trainTemperature = 0.5; // agent.ts --train-temperature: the round's episodes sampled at it, recorded with it
    try {
      const client = new OpenAI({ baseURL: stage.server.baseURL, apiKey: 'none', maxRetries: 0 });
      const serving = servingSide(stage.server.baseURL, 'none');
      const evaluation = async () => {
        served.push(await serving.modelVersion());
        return evaluate(client, questions, { documents, temperature: 1, samples: 2, seed: 0 });
      };
      const before = await evaluation();
      assert.equal(before.episodes, 4);
      // streamed or not, the same (greedy) episode: the deltas put together are the message the API returns
      const options = { documents, temperature: 0 };
      const plain = await playEpisode(client, questions[0]?.prompt as string, options);
      const streamed = await playEpisode(client, questions[0]?.prompt as string, { ...options, stream: true });
      const comparable = (e: Episode) => ({
        ...e,
        lastReplyId: '',
        messages: e.messages.map((m) => ({
          role: m.role,
          content: m.content || '',
          calls: 'tool_calls' in m ? m.tool_calls?.map((c) => (c.type === 'function' ? c.function : c)) : undefined,
        })),
      });
      assert.deepEqual(comparable(streamed), comparable(plain));
      assert.notEqual(streamed.lastReplyId, plain.lastReplyId);

      rounds = await trainRounds(client, serving, questions, {
        documents,
        rounds: 1,
        questions: 2,
        group: 2,
        temperature: trainTemperature,
        seed: 0,
        afterRound: async (round) => void afterRounds.push({ round, served: await serving.modelVersion() }),
      });
      const after = await evaluation(); // trainRounds returned once the weights trained on its round were served
      assert.equal(after.episodes, 4);
    } finally {
      await stage.stop();
      restoreThreads();
    }
    const trained = await training;
    assert.deepEqual(
      trained.stages.map((s) => s.steps),
      [1],
    );
    assert.deepEqual(served, [0, 1], 'the evaluation after training is answered by the trained weights');
    assert.equal(rounds.length, 1);
    assert.equal(rounds[0]?.modelVersion, 0);
    assert.deepEqual(afterRounds, [{ round: 1, served: 1 }], 'the hook after a round sees the weights trained on it');

    // the round's episodes, as the agent rewarded them, are the experiences the train step read
    const buffer = await openSharedBuffer({ path: settings.buffer.path ?? join(settings.jobDir, 'buffer.db'), readonly: true });
    const stored = await buffer.peek({ limit: 10 });
    await buffer.close();
    assert.equal(stored.length, 4);
    assert.deepEqual(stored.map((s) => s.experience.info.taskId).sort(), ['round1-q0', 'round1-q0', 'round1-q1', 'round1-q1']);
    const meanReward = stored.reduce((sum, s) => sum + (s.experience.reward ?? Number.NaN), 0) / stored.length;
    assert.equal(meanReward, rounds[0]?.meanReward);
    for (const { experience } of stored) {
      assert.equal(
        experience.temperature,
        trainTemperature,
        'the trainer takes the log-probs at the temperature the round sampled at',
      );
      assert.match(
        Tokenizer.load(join(job.root, 'model')).decode(experience.tokens.slice(0, experience.promptLength), {
          skipSpecialTokens: false,
        }),
        /tools: calc lookup.*Population of/s,
      );
    }
  });
});
