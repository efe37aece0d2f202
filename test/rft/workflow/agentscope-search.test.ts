// agentscope_v1_react_search_workflow (src/rft/workflow/agents/agentscope-search.ts) played through the OpenAI client
// on a scripted backend, its search tool on a local SearXNG stand-in and its judge scripted: the search result reaches
// the next prompt, the answer and the reference reach the judge, the judge's "Correctness: YES" on one line is reward 1
// (anything else 0), one experience per model call, max_model_tokens drops the longer ones, a run without a judge
// fails. And the pre-run check (`config check`) refuses a taskset whose search service is not set, by its variable.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';
import { type ConfigProblem, parseConfig } from '../../../src/rft/run/config/index.js';
import { preflightProblems } from '../../../src/rft/run/config/preflight.js';
import type { Task } from '../../../src/rft/task.js';
import {
  EngineModelHandle,
  WEB_SEARCH_SYSTEM_PROMPT,
  WORKFLOWS,
  type WorkflowContext,
  webSearchWorkflow,
} from '../../../src/rft/workflow/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { modelFolder, tasksetFile } from '../config/helpers.js';
import { fakeJudge, judgePrompt } from './fake-judge.js';
import { ScriptedBackend } from './scripted-backend.js';

const NAME = 'agentscope_v1_react_search_workflow';
const call = (name: string, args: Record<string, unknown>) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
const assistantTurns = (prompt: string) => prompt.split('<|im_start|>assistant\n').length - 2;

const SEARCH = call('searxng_web_search', { query: 'capital of France' });
const ANSWER = `Found it. ${call('generate_response', { result: 'The capital is Paris.' })}`;

/** An auxiliary judge answering `verdict`; `asked` holds the prompts it was asked. */
function judge(verdict: string): { models: AuxiliaryModels; readonly asked: string[] } {
  const { models, calls } = fakeJudge(() => verdict);
  return {
    models,
    get asked() {
      return calls.map(judgePrompt);
    },
  };
}

const NO_MODELS: AuxiliaryModels = {
  list: [],
  get: () => {
    throw new Error('none');
  },
};

describe('agentscope_v1_react_search_workflow', () => {
  let server: Server;
  let searxngUrl: string;
  const queries: string[] = [];

  before(async () => {
    server = createServer((request, response) => {
      queries.push(new URL(request.url ?? '', 'http://x').searchParams.get('q') ?? '');
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify({ results: [{ title: 'Paris', content: 'Capital of France.', url: 'https://p.org', score: 1 }] }),
      );
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    searxngUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await new Promise((done) => server.close(done));
  });

  async function play(policy: (prompt: string) => string, auxiliaryModels: AuxiliaryModels, workflowArgs = {}) {
    const backend = new ScriptedBackend(fixtureTokenizer(), policy);
    const handle = new EngineModelHandle(backend, { modelVersion: 1 });
    const task: Task = {
      id: 'w0',
      taskset: 'webqa',
      index: 0,
      raw: {},
      prompt: 'What is the capital of France?',
      response: 'Paris',
      workflowArgs: { max_turns: 4, ...workflowArgs },
      rolloutArgs: { temperature: 1, max_tokens: 300 },
    };
    const context: WorkflowContext = {
      task,
      model: handle,
      repeatTimes: 1,
      runIdBase: 3,
      seed: 5,
      signal: new AbortController().signal,
      isEval: false,
      auxiliaryModels,
    };
    try {
      const experiences = await webSearchWorkflow({ SEARXNG_URL: searxngUrl }).run(context);
      return { experiences, prompts: backend.prompts };
    } finally {
      await handle.close();
    }
  }

  const policy = (prompt: string) => [SEARCH, ANSWER][assistantTurns(prompt)] ?? 'oops';

  test('search, answer, judged YES: reward 1 on each model call’s experience', async () => {
    const accepting = judge('**Reasoning**: the same city.\n\n**Correctness**: YES');
    const { experiences, prompts } = await play(policy, accepting.models);
    assert.deepEqual(queries.at(-1), 'capital of France');
    assert.equal(prompts.length, 2);
    assert.ok((prompts[0] as string).includes(WEB_SEARCH_SYSTEM_PROMPT));
    assert.match(prompts[0] as string, /searxng_web_search/);
    assert.ok(
      (prompts[1] as string).includes(
        'Title: Paris\nDescription: Capital of France.\nURL: https://p.org\nRelevance Score: 1.000',
      ),
      prompts[1],
    );
    assert.equal(experiences.length, 2, 'one experience per model call');
    for (const experience of experiences) {
      assert.equal(experience.reward, 1);
      assert.equal(experience.info.runId, 3);
      assert.deepEqual(experience.metrics, {
        react_turns: 2, // the query, 2 replies, 2 tool results: ⌊5 / 2⌋
        max_turns: 4,
        model_calls: 2,
        tool_calls: 2,
        invalid_tool_calls: 0,
        summarized: 0,
      });
    }
    assert.equal(accepting.asked.length, 1);
    const asked = accepting.asked[0] as string;
    assert.ok(asked.startsWith('system: You evaluate correctness.\nuser: Decide whether the [response] below'), asked);
    assert.match(
      asked,
      /\[question\]: What is the capital of France\?\n\n\[response\]: The capital is Paris\.\n\n\[correct_answer\]: Paris\n/,
    );
  });

  test('the verdict: NO, or YES not on the Correctness line, is reward 0', async () => {
    for (const verdict of ['**Correctness**: NO', '**Correctness**:\nYES', 'YES']) {
      const { experiences } = await play(policy, judge(verdict).models);
      assert.deepEqual(
        experiences.map((e) => e.reward),
        [0, 0],
        verdict,
      );
    }
  });

  test('max_model_tokens drops the experiences over it; a run without a judge fails', async () => {
    const all = (await play(policy, judge('Correctness: YES').models)).experiences;
    const [first, second] = all.map((e) => e.tokens.length) as [number, number];
    assert.ok(first < second);
    const kept = (await play(policy, judge('Correctness: YES').models, { max_model_tokens: first })).experiences;
    assert.deepEqual(
      kept.map((e) => e.tokens.length),
      [first],
    );
    await assert.rejects(play(policy, NO_MODELS), new RegExp(`${NAME} needs a judge model in explorer.auxiliary_models`));
    await assert.rejects(
      play(policy, judge('YES').models, { max_turns: 0 }),
      /workflow_args\.max_turns must be a positive integer, got 0/,
    );
  });

  test('config check refuses a taskset whose search service is not set, naming the variable', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'trinity-websearch-'));
    const model = modelFolder(join(dir, 'model'));
    const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
    const check = async (workflowArgs: string) => {
      const text = `
model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  explorer_input:
    taskset: {path: ${tasks}, workflow_args: ${workflowArgs}}
    default_workflow_type: ${NAME}
explorer: {auxiliary_models: [{model_path: ${model}}]}
`;
      const config = parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'config.yaml') });
      return (await preflightProblems(config, { baseDir: dir })).map((p: ConfigProblem) => `${p.path}: ${p.message}`);
    };
    const saved = { searxng: process.env.SEARXNG_URL, tavily: process.env.TAVILY_API_KEY };
    try {
      delete process.env.SEARXNG_URL;
      delete process.env.TAVILY_API_KEY;
      // no arguments: upstream's default client, searxng
      assert.deepEqual(await check('{}'), [
        `buffer.explorer_input.taskset.workflow_args: ${NAME}: search_client_type searxng needs SEARXNG_URL (your SearXNG instance's URL) in the environment`,
      ]);
      assert.deepEqual(await check('{search_client_type: tavily, max_turns: 10}'), [
        `buffer.explorer_input.taskset.workflow_args: ${NAME}: search_client_type tavily needs TAVILY_API_KEY (your Tavily API key) in the environment`,
      ]);
      process.env.TAVILY_API_KEY = 'k';
      process.env.SEARXNG_URL = 'http://127.0.0.1:1';
      assert.deepEqual(await check('{search_client_type: tavily}'), []);
      assert.deepEqual(await check('{}'), []);
      assert.equal(WORKFLOWS.get(NAME).description?.startsWith('AgentScope ReAct agent (v1) with a web search tool'), true);
    } finally {
      for (const [name, value] of [
        ['SEARXNG_URL', saved.searxng],
        ['TAVILY_API_KEY', saved.tavily],
      ] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
  });
});
