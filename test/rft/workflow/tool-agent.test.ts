// The tool agent (tool_agent_workflow): the calculator's parser (arithmetic right, everything else refused), the
// lookup tool, tool-call handling, answer normalisation, and whole episodes through the OpenAI client on a scripted
// backend: an expert's episode scores 1 and becomes one experience with exactly the tokens and action mask of the
// same conversation as an SFT demonstration; wrong answers, bad tool calls and runaway episodes are scored and counted.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { answerOf, expertDemonstration, type ToolQuestion } from '../../../examples/tool_agent/make-data.js';
import { concatenatedConversationTokens } from '../../../src/rft/buffer/dataset.js';
import { type Experience, validateExperience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import {
  answersMatch,
  builtInDocuments,
  CalculatorError,
  DocumentStore,
  EngineModelHandle,
  evaluateExpression,
  formatNumber,
  NO_MATCH,
  normalizeAnswer,
  runToolCall,
  WORKFLOWS,
  WorkflowRunner,
} from '../../../src/rft/workflow/index.js';
import type { ChatMessage, Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { SCRIPTED_LOGPROB, ScriptedBackend } from './scripted-backend.js';

describe('calculator', () => {
  test('arithmetic with precedence, parentheses, unary signs, powers, decimals and digit separators', () => {
    const cases: Array<[string, number]> = [
      ['4821+310', 5131],
      ['4821-310', 4511],
      ['4821*3', 14463],
      ['2+3*4', 14],
      ['(2+3)*4', 20],
      ['10-4-3', 3], // left-associative
      ['100/10/5', 2],
      ['2^3^2', 512], // right-associative: 2^(3^2)
      ['-2^2', -4],
      ['--3', 3],
      ['-(1+2)*+3', -9],
      ['7%4', 3],
      ['1.5*4', 6],
      ['.5+.25', 0.75],
      ['4,821 + 1_000', 5821],
      ['  ( ( 1 ) )  ', 1],
    ];
    for (const [expression, expected] of cases) assert.equal(evaluateExpression(expression), expected, expression);
    assert.equal(formatNumber(evaluateExpression('0.1+0.2')), '0.3');
    assert.equal(formatNumber(evaluateExpression('10/4')), '2.5');
    assert.equal(formatNumber(evaluateExpression('0*-1')), '0');
  });

  test('refuses code, names, malformed and hostile input with a CalculatorError (never evaluates it)', () => {
    const hostile = [
      'process.exit(1)',
      'require("fs")',
      'constructor.constructor("return process")()',
      '__proto__',
      'globalThis',
      '1;2',
      '1,,2',
      '`1`',
      "'1'+1",
      '[1]+1',
      '{}',
      'Math.PI',
      '1e3', // exponents are not part of the grammar
      'Infinity',
      'NaN',
      '',
      '   ',
      '1 2',
      '(1+2',
      '1+2)',
      '+',
      '2*',
      '1/0',
      '5%0',
      '10^400', // overflows to Infinity
      `${'('.repeat(40)}1${')'.repeat(40)}`, // too deep
      `${'-'.repeat(40)}1`, // too deep
      `1${'+1'.repeat(150)}`, // too long
    ];
    for (const expression of hostile) assert.throws(() => evaluateExpression(expression), CalculatorError, expression);
    assert.throws(() => evaluateExpression(42 as unknown as string), CalculatorError);
  });
});

describe('lookup', () => {
  const store = new DocumentStore([
    { key: 'Varnia', text: 'Varnia: population 4821' },
    { key: 'Quell', text: 'Quell: population 310' },
    { key: 'Old Quell', text: 'Old Quell: a ruined fort' },
  ]);

  test('a key (any case, spaces trimmed) gives its document; otherwise the best keyword matches', () => {
    assert.equal(store.lookup('Varnia'), 'Varnia: population 4821');
    assert.equal(store.lookup('  vARNIA '), 'Varnia: population 4821');
    assert.equal(store.lookup('population of varnia'), 'Varnia: population 4821'); // 2 words beat 1
    assert.equal(store.lookup('quell'), 'Quell: population 310'); // the key wins over a keyword match
    assert.equal(store.lookup('ruined quell'), 'Old Quell: a ruined fort');
    assert.equal(store.lookup('population'), 'Varnia: population 4821\nQuell: population 310'); // a tie: both
    assert.equal(store.lookup('Zembla'), NO_MATCH);
    assert.equal(store.lookup('!!'), NO_MATCH);
  });

  test('document files are checked; the built-in set has 120 places with populations', () => {
    assert.throws(
      () =>
        new DocumentStore([
          { key: 'a', text: 'x' },
          { key: 'A', text: 'y' },
        ]),
      /duplicate key 'A'/,
    );
    const dir = mkdtempSync(join(tmpdir(), 'lookup-'));
    writeFileSync(join(dir, 'bad.json'), JSON.stringify([{ key: 'a' }]));
    assert.throws(() => DocumentStore.load(join(dir, 'bad.json')), /bad\.json: expected \[\{key, text\}/);
    writeFileSync(join(dir, 'broken.json'), '[{');
    assert.throws(() => DocumentStore.load(join(dir, 'broken.json')), /broken\.json/);
    const builtIn = builtInDocuments();
    assert.equal(builtIn.documents.length, 120);
    for (const d of builtIn.documents) assert.match(d.text, new RegExp(`^${d.key}: population \\d+$`));
  });
});

describe('tool calls and answers', () => {
  const documents = builtInDocuments();
  const place = documents.documents[0]?.key as string;

  test('valid calls return results; malformed ones return an error and count as invalid', () => {
    assert.deepEqual(runToolCall({ name: 'calc', arguments: '{"expression":"4821+310"}' }, documents), {
      content: '5131',
      valid: true,
    });
    assert.equal(
      runToolCall({ name: 'lookup', arguments: JSON.stringify({ query: place }) }, documents).content,
      documents.get(place)?.text,
    );
    for (const [call, message] of [
      [{ name: 'calc', arguments: '{"expression":"1/0"}' }, /division by zero/],
      [{ name: 'calc', arguments: '{"expr":"1"}' }, /calc needs a string expression/],
      [{ name: 'calc', arguments: 'not json' }, /not JSON/],
      [{ name: 'calc', arguments: '[1]' }, /must be an object/],
      [{ name: 'lookup', arguments: '{"query":5}' }, /lookup needs a string query/],
      [{ name: 'search', arguments: '{}' }, /unknown tool 'search'/],
    ] as const) {
      const result = runToolCall(call, documents);
      assert.equal(result.valid, false, call.arguments);
      assert.match(result.content, message);
    }
  });

  test('answers match with numbers normalised, and only then', () => {
    assert.ok(answersMatch('5131', '5131'));
    assert.ok(answersMatch(' 5,131. ', '5131'));
    assert.ok(answersMatch('5131.0', '5131'));
    assert.ok(answersMatch('+12', '12'));
    assert.ok(answersMatch('-45', '-45'));
    assert.ok(!answersMatch('5132', '5131'));
    assert.ok(!answersMatch('The answer is 5131', '5131'));
    assert.ok(!answersMatch('', '5131'));
    assert.equal(normalizeAnswer('  hello   world '), 'hello world');
  });
});

/** The assistant turns of a conversation as the model would write them (what the template renders for each). */
function assistantTexts(tokenizer: Tokenizer, conversation: readonly ChatMessage[]): string[] {
  const texts: string[] = [];
  conversation.forEach((message, i) => {
    if (message.role !== 'assistant') return;
    const before = conversation.slice(0, i);
    const prompt = tokenizer.applyChatTemplate(before, { addGenerationPrompt: true });
    const full = tokenizer.applyChatTemplate([...before, message], { addGenerationPrompt: false });
    texts.push(full.slice(prompt.length).split('<|im_end|>')[0] as string);
  });
  return texts;
}

const assistantTurns = (prompt: string) => prompt.split('<|im_start|>assistant\n').length - 2;

describe('tool_agent_workflow', () => {
  let tokenizer: Tokenizer;
  let handle: EngineModelHandle;
  let backend: ScriptedBackend;

  before(() => {
    tokenizer = fixtureTokenizer();
  });
  after(async () => {
    await handle?.close();
  });

  async function play(policy: (prompt: string) => string, task: Partial<Task> & { prompt: string; response: string }) {
    await handle?.close();
    backend = new ScriptedBackend(tokenizer, policy);
    handle = new EngineModelHandle(backend, { modelVersion: 1 });
    const runner = new WorkflowRunner({ models: handle, maxRetryTimes: 0, maxTimeout: 30, workflows: WORKFLOWS });
    const full: Task = {
      id: 'q1',
      taskset: 'test',
      index: 0,
      raw: {},
      workflow: 'tool_agent_workflow',
      rolloutArgs: { temperature: 1, max_tokens: 200 },
      ...task,
    };
    const result = await runner.runStep([full], { step: 1, repeatTimes: 2 });
    assert.deepEqual(
      result.statuses.map((s) => s.error ?? 'ok'),
      ['ok', 'ok'],
    );
    return result.experiences;
  }

  const question: ToolQuestion = { kind: 'plus', places: ['Krelqueth', 'Gemotanth'] };
  const demonstration = expertDemonstration(question);
  const user = demonstration[1]?.content as string;

  test("an expert's episode: reward 1, one experience per episode, tokens and mask equal to the SFT demonstration's", async () => {
    assert.equal(user, 'Population of Krelqueth plus Gemotanth?');
    assert.equal(answerOf(question), '6465'); // 6287 + 178 in the built-in documents
    const texts = assistantTexts(tokenizer, demonstration as ChatMessage[]);
    assert.equal(texts.length, 3);
    const experiences = await play((prompt) => texts[assistantTurns(prompt)] ?? 'oops', { prompt: user, response: '6465' });
    assert.equal(experiences.length, 2, 'repeat_times 2: two episodes, one experience each');
    const reference = concatenatedConversationTokens(demonstration, tokenizer);
    for (const experience of experiences as Experience[]) {
      assert.deepEqual(validateExperience(experience), []);
      assert.equal(experience.reward, 1);
      assert.deepEqual(experience.metrics, { correct: 1, turns: 3, tool_calls: 3, invalid_tool_calls: 0, truncated: 0 });
      assert.equal(experience.info.taskId, 'q1');
      assert.equal(experience.info.modelVersion, 1);
      // The rollout's exact ids are the SFT demonstration's: the system tools line, the tool calls, the results.
      assert.deepEqual(experience.tokens, reference.tokens);
      assert.equal(experience.promptLength, reference.promptLength);
      assert.deepEqual(experience.actionMask, reference.actionMask);
      // Generated tokens carry the backend's log-probs; tool results between them are masked out with 0.
      const mask = experience.actionMask as number[];
      const logprobs = experience.logprobs as number[];
      for (const [i, m] of mask.entries()) assert.equal(logprobs[i], m === 1 ? SCRIPTED_LOGPROB : 0);
      const masked = tokenizer.decode(
        experience.tokens.slice(experience.promptLength).filter((_, i) => mask[i] === 0),
        { skipSpecialTokens: false },
      );
      assert.match(masked, /Krelqueth: population 6287/);
      assert.doesNotMatch(masked, /<tool_call>/);
    }
    assert.deepEqual([...new Set(experiences.map((e) => e.info.runId))].sort(), [0, 1]);
    const firstPrompt = backend.prompts[0] as string;
    assert.ok(firstPrompt.startsWith('<|im_start|>system\ntools: calc lookup<|im_end|>\n'), firstPrompt);
  });

  test('a wrong final answer scores 0; invalid tool calls are counted and answered with an error', async () => {
    const calls = [
      '<tool_call>\n{"name": "search", "arguments": {"query": "Krelqueth"}}\n</tool_call>',
      '<tool_call>\n{"name": "calc", "arguments": {"expression": "6287+"}}\n</tool_call>',
      '6464',
    ];
    const experiences = await play((prompt) => calls[assistantTurns(prompt)] ?? '', { prompt: user, response: '6465' });
    for (const experience of experiences) {
      assert.equal(experience.reward, 0);
      assert.deepEqual(experience.metrics, { correct: 0, turns: 3, tool_calls: 2, invalid_tool_calls: 2, truncated: 0 });
    }
    const lastPrompt = backend.prompts.at(-1) as string;
    assert.match(lastPrompt, /<\|im_start\|>tool\nerror: unknown tool 'search'<\|im_end\|>/);
    assert.match(lastPrompt, /<\|im_start\|>tool\nerror: unexpected end of expression<\|im_end\|>/);
  });

  test('an unparsable call block ends the episode as an invalid call; max_turns stops a runaway episode', async () => {
    const broken = await play(() => '<tool_call>\n{"name": calc}\n</tool_call>', { prompt: user, response: '6465' });
    assert.deepEqual(broken[0]?.metrics, { correct: 0, turns: 1, tool_calls: 0, invalid_tool_calls: 1, truncated: 0 });

    const lookupForever = '<tool_call>\n{"name": "lookup", "arguments": {"query": "Krelqueth"}}\n</tool_call>';
    const runaway = await play(() => lookupForever, { prompt: user, response: '6465', workflowArgs: { max_turns: 2 } });
    for (const experience of runaway) {
      assert.equal(experience.reward, 0);
      assert.deepEqual(experience.metrics, { correct: 0, turns: 2, tool_calls: 2, invalid_tool_calls: 0, truncated: 1 });
    }
  });

  test('a conversation that outgrows the context ends there instead of failing the task', async () => {
    const long = `<tool_call>\n{"name": "lookup", "arguments": {"query": "${'x'.repeat(250)}"}}\n</tool_call>`;
    const experiences = await play(() => long, {
      prompt: user,
      response: '6465',
      workflowArgs: { max_turns: 20 },
      rolloutArgs: { temperature: 1, max_tokens: 400 },
    });
    for (const experience of experiences) {
      assert.equal(experience.metrics?.truncated, 1);
      assert.ok((experience.metrics?.turns ?? 0) < 20 && experience.tokens.length <= 2048);
    }
  });
});
