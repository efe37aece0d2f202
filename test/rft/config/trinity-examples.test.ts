// Configs in the form of upstream Trinity-RFT examples (test/fixtures/trinity-examples/*.yaml: the upstream keys as
// written, only the paths ours) pass `trinity config check` and train two steps with `trinity run`, printing the
// Trinity keys this backend ignores and those it maps. Each file's header comments drive its test:
//
//   # expect-ignored: key.path ...   each must be a line of the printed "ignored on this backend" block
//   # expect-mapped: key.path ...    each must be a line of the printed "mapped" block
//   # run-set: key.path=value ...    --set overrides for a small machine (sizes only), for the check and the run
//   # run-with: other.yaml           run together with that file, as two processes (e.g. an explorer and a trainer
//                                    sharing one SQLite buffer); the pair is run once, by the file listed first
//   # model: qwen2_5_vl              the config's model is a vision-language model (its rows hold images)
//   # model: r3l_answer_8            the tiny model taught to reply `<think>x</think><answer>8</answer>` to R3L's prompts
//                                    (RAFT trains only solved rollouts: the fixture's rows answered by 8 are solved)
//   # judge: served                  the config's judge is an OpenAI-compatible endpoint named by environment variables
//                                    (OpenJudge's graders): a tiny random model with an 8192-token context, served by
//                                    this process, is set in OPENAI_BASE_URL, OPENAI_API_KEY and TRINITY_JUDGE_MODEL_NAME
//
// Every file runs with TRINITY_MODEL_PATH (one tiny random model with a printable-ASCII character tokenizer, made once;
// a tiny random Qwen2.5-VL with the same tokenizer and Qwen2.5-VL's vision tokens for `# model: qwen2_5_vl`, whose
// image processor's pixel bounds of 56 x 56 make a few image tokens of each image; for `# model: r3l_answer_8`, the text
// model after an SFT run of trinity on that reply to R3L's countdown and dapo prompts, made when a test first needs it)
// and TRINITY_CHECKPOINT_ROOT_DIR (a temporary folder, one per run
// group), and DEFAULT_EMAIL_DB_PATH (the email_search database, written once from data/enron_emails as `trinity
// email-db` writes it), and TAVILY_API_KEY, TAVILY_API_URL and SEARXNG_URL (a local stand-in search service answering
// Tavily's and SearXNG's /search with one result), from a copy of the fixture folder, so a sqlite:/// path relative to
// the YAML lands in the copy. A process that trains must print "trained 2 of 2 step(s)".
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { configCommand } from '../../../src/cli/config-command.js';
import { initModel, initVisionLanguageModel } from '../../../src/model/index.js';
import { IGNORED_HEADER, MAPPED_HEADER } from '../../../src/rft/run/config/trinity-report.js';
import { writeEmailDatabase } from '../../../src/rft/workflow/agents/email-db-write.js';
import { countdownPrompt, R3L_MATH_SYSTEM_PROMPT } from '../../../src/rft/workflow/r3l-raft.js';
import { type ServedModel, serveModel } from '../../../src/serve/index.js';

const FIXTURES = fileURLToPath(new URL('../../fixtures/trinity-examples/', import.meta.url));
const TRINITY = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

interface Example {
  file: string;
  ignored: string[];
  mapped: string[];
  runSet: string[];
  runWith: string | null;
  /** The model the config needs: 'text' (the default), 'qwen2_5_vl' or 'r3l_answer_8' (see the header). */
  model: string;
  /** The config's judge is an endpoint this process serves (`# judge: served`). */
  servedJudge: boolean;
}

/** The header comments of a fixture (`# key: words ...`). */
function readExample(file: string): Example {
  const text = readFileSync(join(FIXTURES, file), 'utf8');
  const header = (key: string): string[] => {
    const line = text.split('\n').find((l) => l.startsWith(`# ${key}:`));
    return line === undefined ? [] : line.slice(`# ${key}:`.length).trim().split(/\s+/).filter(Boolean);
  };
  return {
    file,
    ignored: header('expect-ignored'),
    mapped: header('expect-mapped'),
    runSet: header('run-set'),
    runWith: header('run-with')[0] ?? null,
    model: header('model')[0] ?? 'text',
    servedJudge: header('judge')[0] === 'served',
  };
}

/** The key paths of the lines of the block under `title` (`  key.path=value ...`), `# ` prefixes removed. */
function blockKeys(output: string, title: string): string[] {
  const lines = output.split('\n').map((l) => l.replace(/^# /, ''));
  const start = lines.indexOf(title);
  if (start < 0) return [];
  const keys: string[] = [];
  for (const line of lines.slice(start + 1)) {
    const entry = /^ {2}(\S+?)=/.exec(line);
    if (entry === null) break;
    keys.push(entry[1] as string);
  }
  return keys;
}

function assertBlocks(output: string, example: Example, where: string): void {
  const ignored = blockKeys(output, IGNORED_HEADER);
  const mapped = blockKeys(output, MAPPED_HEADER);
  for (const key of example.ignored) assert.ok(ignored.includes(key), `${where}: ${key} not in the ignored block:\n${output}`);
  for (const key of example.mapped) assert.ok(mapped.includes(key), `${where}: ${key} not in the mapped block:\n${output}`);
}

const examples = readdirSync(FIXTURES)
  .filter((f) => f.endsWith('.yaml'))
  .sort()
  .map(readExample);
const partners = new Set(examples.flatMap((e) => (e.runWith !== null && e.file < e.runWith ? [e.runWith] : [])));

const root = mkdtempSync(join(tmpdir(), 'trinity-examples-'));
const modelPath = join(root, 'model');
initModel(modelPath, { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1 });
const emailDbPath = join(root, 'enron_emails.db');
await writeEmailDatabase(join(FIXTURES, 'data', 'enron_emails'), emailDbPath);
const searchService = createServer((_request, response) => {
  const result = { title: 'Example', url: 'https://example.org/', content: 'An example page.', score: 1 };
  response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ results: [result] }));
});
await new Promise<void>((done) => searchService.listen(0, '127.0.0.1', done));
searchService.unref(); // the test process ends without closing it
const searchUrl = `http://127.0.0.1:${(searchService.address() as AddressInfo).port}`;
const SEARCH_ENV = { TAVILY_API_KEY: 'test-key', TAVILY_API_URL: searchUrl, SEARXNG_URL: searchUrl };
const TAUGHT_ROOT = join(root, 'r3l-answer-8');
const modelPaths: Readonly<Record<string, string>> = {
  text: modelPath,
  qwen2_5_vl: join(root, 'vl-model'),
  r3l_answer_8: join(TAUGHT_ROOT, 'checkpoints', 'teach', 'answer_8', 'final_model'),
};
const vlOptions = { hiddenSize: 32, numLayers: 1, numHeads: 2, visionHiddenSize: 16, visionDepth: 1, visionHeads: 2 };
initVisionLanguageModel(modelPaths.qwen2_5_vl as string, { ...vlOptions, minPixels: 56 * 56, maxPixels: 56 * 56, seed: 1 });
for (const example of examples)
  assert.ok(
    example.model in modelPaths,
    `${example.file}: unknown '# model: ${example.model}' (${Object.keys(modelPaths).join(', ')})`,
  );

/**
 * The text model taught to reply `<think>x</think><answer>8</answer>` to R3L's first countdown prompt and to its dapo
 * system prompt and problem: 120 SFT steps of `trinity run` in float32 (loss → 0), so that sampling at temperature 1
 * writes the reply. Made once, when a test first needs it.
 */
let taught: Promise<void> | null = null;
function teachAnswer8(): Promise<void> {
  const reply = '<think>x</think><answer>8</answer>';
  const countdown = ([[8], [4, 6, 1], [2, 3, 4]] as const).map((nums, i) => [
    { role: 'user', content: countdownPrompt(nums, [8, 24, 10][i] as number, 0, []) },
    { role: 'assistant', content: reply },
  ]);
  const dapo = ['What is 3 + 5?', 'What is 9 - 4?', 'Find 2^3.', 'What is 7 + 6?', 'Solve x + 1 = 3.'].map((question) => [
    { role: 'system', content: R3L_MATH_SYSTEM_PROMPT },
    { role: 'user', content: question },
    { role: 'assistant', content: reply },
  ]);
  mkdirSync(join(TAUGHT_ROOT, 'data'), { recursive: true });
  const rows = [...countdown, ...dapo].map((messages) => JSON.stringify({ messages }));
  writeFileSync(join(TAUGHT_ROOT, 'data', 'train.jsonl'), `${rows.join('\n')}\n`);
  const config = [
    'mode: train',
    'project: teach',
    'name: answer_8',
    `checkpoint_root_dir: ${join(TAUGHT_ROOT, 'checkpoints')}`,
    'algorithm: { algorithm_type: sft, optimizer: { lr: 2e-2 } }',
    `model: { model_path: ${modelPath}, max_model_len: 2048, max_response_tokens: 64, dtype: float32 }`,
    'buffer:',
    `  total_epochs: 120`,
    `  batch_size: ${rows.length}`,
    `  train_batch_size: ${rows.length}`,
    '  trainer_input:',
    '    experience_buffer: { name: teach, storage_type: file, path: data, format: { prompt_type: messages, messages_key: messages } }',
    'trainer: { save_interval: 1000, param_dtype: float32 }',
  ];
  writeFileSync(join(TAUGHT_ROOT, 'teach.yaml'), `${config.join('\n')}\n`);
  return new Promise((done, fail) => {
    execFile(process.execPath, [TRINITY, 'run', '--config', join(TAUGHT_ROOT, 'teach.yaml')], (error, stdout, stderr) => {
      if (error !== null) fail(new Error(`teaching r3l_answer_8 failed:\n${stdout}${stderr}`));
      else done();
    });
  });
}

/** Makes the example's model when it is made on first use. */
async function modelReady(model: string): Promise<void> {
  if (model !== 'r3l_answer_8') return;
  taught ??= teachAnswer8();
  await taught;
}

/** The judge endpoint of `# judge: served` (see the header), started when a test first needs it. */
let judge: Promise<ServedModel> | null = null;
after(async () => {
  await (await judge)?.close();
});
async function judgeEnv(example: Example): Promise<Record<string, string>> {
  if (!example.servedJudge) return {};
  judge ??= (async () => {
    const modelDir = join(root, 'judge-model');
    initModel(modelDir, { hiddenSize: 32, numLayers: 1, numHeads: 2, maxPositionEmbeddings: 8192, seed: 2 });
    return serveModel({ modelDir, port: 0, modelName: 'judge', apiKey: 'sk-judge', slots: 8, numThreads: 1, maxLength: 8192 });
  })();
  const served = await judge;
  return { OPENAI_BASE_URL: served.server.baseURL, OPENAI_API_KEY: 'sk-judge', TRINITY_JUDGE_MODEL_NAME: served.modelName };
}

/** A copy of the fixture folder of its own for each run group (files a run writes beside its YAML stay there). */
function folderFor(group: string): string {
  const folder = join(root, `examples-${group}`);
  if (!existsSync(folder)) cpSync(FIXTURES, folder, { recursive: true });
  return folder;
}

/** The variables a run of `example` gets (see the header); runs in group `group` share a checkpoint folder. */
const envFor = async (group: string, example: Example): Promise<Record<string, string>> => ({
  TRINITY_MODEL_PATH: modelPaths[example.model] as string,
  TRINITY_CHECKPOINT_ROOT_DIR: join(root, `checkpoints-${group}`),
  DEFAULT_EMAIL_DB_PATH: emailDbPath,
  ...(await judgeEnv(example)),
  ...SEARCH_ENV,
});

function trinityRun(example: Example, folder: string, env: NodeJS.ProcessEnv): Promise<{ code: number; output: string }> {
  const args = [TRINITY, 'run', '--config', join(folder, example.file), ...example.runSet.flatMap((s) => ['--set', s])];
  return new Promise((done) => {
    execFile(process.execPath, args, { env, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
      done({ code, output: `${stdout}${stderr}` });
    });
  });
}

describe('configs in the form of upstream Trinity-RFT examples', () => {
  for (const example of examples) {
    it(`${example.file}: trinity config check prints its ignored and mapped keys`, async () => {
      await modelReady(example.model);
      let out = '';
      let err = '';
      const vars = await envFor(example.file, example);
      const saved = Object.keys(vars).map((name) => [name, process.env[name]] as const);
      Object.assign(process.env, vars);
      try {
        const args = [
          'check',
          join(folderFor(`check-${example.file}`), example.file),
          ...example.runSet.flatMap((s) => ['--set', s]),
        ];
        const code = await configCommand(args, {
          stdout: { write: (t: string) => (out += t) },
          stderr: { write: (t: string) => (err += t) },
        });
        assert.equal(code, 0, err);
      } finally {
        for (const [name, value] of saved) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
      }
      assertBlocks(out, example, 'config check');
    });

    if (partners.has(example.file)) continue; // run by the file it is paired with
    const group = [example, ...examples.filter((e) => e.file === example.runWith)];
    it(`${group.map((e) => e.file).join(' + ')}: trinity run trains 2 steps, printing the blocks once`, async () => {
      await modelReady(example.model);
      const env = { ...process.env, ...(await envFor(example.file, example)) };
      const folder = folderFor(example.file);
      const results = await Promise.all(group.map((e) => trinityRun(e, folder, env)));
      results.forEach(({ code, output }, i) => {
        const member = group[i] as Example;
        assert.equal(code, 0, `${member.file}:\n${output}`);
        assertBlocks(output, member, `trinity run ${member.file}`);
        if (member.ignored.length > 0)
          assert.equal(output.split(IGNORED_HEADER).length - 1, 1, 'the ignored block is printed once');
        const explores = /stage 1\/1: mode explore/.test(output);
        if (!explores) assert.match(output, /trained 2 of 2 step\(s\)/, `${member.file}:\n${output}`);
      });
    });
  }
});
