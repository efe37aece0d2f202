// Fuzzing `trinity config check` with mutated configs: the example configs and configs like the tests', with keys
// deleted, values swapped for other types, numbers made huge, negative, NaN or infinite, unknown keys added and the
// YAML broken. Seeded and bounded by count, so a failure reproduces. For every mutant:
//   - the check never throws (an internal error would be a crash of the CLI) and prints no stack trace;
//   - it exits 0 only when the config loads and the pre-run checks that `trinity run` makes find nothing;
//   - a mutation that is certainly invalid (a number outside its key's range, NaN, a wrong type, an unknown key of a
//     schema mapping, broken YAML) exits 1 with the problems listed.
// Most mutants go through the in-process command; a sample goes through `node bin/trinity.js config check FILE`,
// which must agree.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { isDeepStrictEqual } from 'node:util';
import YAML from 'yaml';
import { configCommand } from '../../../src/cli/config-command.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { preflightProblems } from '../../../src/rft/run/config/preflight.js';
import { getIn, resolvePaths, type Tree } from '../../../src/rft/config/source.js';
import { isModulePath } from '../../../src/util/index.js';
import { defOf, modelFolder, numbersIn, schemaAt, tasksetFile } from './helpers.js';
import { seededRandom } from '../../../src/rft/buffer/random.js';

const ROOT = resolve(import.meta.dirname, '..', '..', '..');
const BIN = join(ROOT, 'bin', 'trinity.js');
const SEED = 20_261_201;
const MUTANTS = 400;
const SPAWNED = 6;
const STACK_TRACE = /^\s+at .+(\(|:\d+:\d+)/m;

const dir = mkdtempSync(join(tmpdir(), 'trinity-config-fuzz-'));
const model = modelFolder(join(dir, 'model'), 151_936);
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
const sft = tasksetFile(join(dir, 'sft.jsonl'), [{ prompt: 'a', response: 'b' }]);

type Path = (string | number)[];

/** The configs mutated: each example's, with its paths made absolute and the model replaced by the fixture. */
function sources(): { name: string; tree: Tree }[] {
  const examples = ['quickstart', 'frozen_lake', 'sokoban', 'tool_agent', 'openai_agent'].map((name) => {
    const file = join(ROOT, 'examples', name, 'config.yaml');
    const tree = YAML.parse(readFileSync(file, 'utf8')) as Tree;
    resolvePaths(tree, dirname(file), dirname(file), () => false);
    const input = (tree.buffer as Tree | undefined)?.explorer_input as Tree | undefined;
    for (const key of ['default_workflow_type', 'default_reward_fn_type']) {
      const value = input?.[key];
      if (input !== undefined && typeof value === 'string' && isModulePath(value) && !isAbsolute(value)) {
        input[key] = resolve(dirname(file), value);
      }
    }
    return { name, tree };
  });
  const own = [
    `model: {model_path: m, max_model_len: 64}
algorithm: {algorithm_type: grpo, repeat_times: 4, optimizer: {lr: 1.0e-5}}
buffer:
  batch_size: 2
  total_steps: 3
  explorer_input:
    taskset: {path: ${tasks}, rollout_args: {temperature: 0.7, top_p: 0.9, stop_token_ids: [1, 2]}}
    eval_tasksets: [{path: ${tasks}, repeat_times: 2}]
    default_workflow_type: math_workflow
    default_reward_fn_type: math_reward
explorer: {runner_per_model: 4, max_timeout: 60, eval_interval: 2, rollout_model: {slots: 16}}
trainer: {save_interval: 2, micro_batch_size: 4}
synchronizer: {sync_interval: 1, sync_offset: 1, sync_timeout: 600}`,
    `mode: train
model: {model_path: m, max_prompt_tokens: 32, max_response_tokens: 32}
algorithm: {algorithm_type: sft}
buffer:
  train_batch_size: 8
  total_steps: 2
  trainer_input: {experience_buffer: {storage_type: file, path: ${sft}}}`,
    `mode: serve
model: {model_path: m, max_model_len: 128}
buffer: {trainer_input: {experience_buffer: {storage_type: sql, capacity: 100, max_read_timeout: 5}}}
explorer: {proxy_port: 0, serve_max_tokens: 64, serve_max_n: 4}`,
  ].map((text, i) => ({ name: `own-${i}`, tree: YAML.parse(text) as Tree }));
  for (const { tree } of [...examples, ...own]) {
    (tree.model as Tree).model_path = model;
    tree.checkpoint_root_dir = join(dir, 'runs');
  }
  return [...examples, ...own];
}

/** Every path in the tree, with its value (mappings and lists included). */
function paths(node: unknown, at: Path = []): [Path, unknown][] {
  const here: [Path, unknown][] = at.length > 0 ? [[at, node]] : [];
  if (Array.isArray(node)) return [...here, ...node.flatMap((v, i) => paths(v, [...at, i]))];
  if (node !== null && typeof node === 'object') {
    return [...here, ...Object.entries(node).flatMap(([k, v]) => paths(v, [...at, k]))];
  }
  return here;
}

function setIn(tree: unknown, path: Path, value: unknown): void {
  let node = tree as Record<string | number, unknown>;
  for (const segment of path.slice(0, -1)) node = node[segment] as Record<string | number, unknown>;
  const last = path.at(-1) as string | number;
  if (value === undefined) {
    if (Array.isArray(node)) node.splice(Number(last), 1);
    else delete node[last];
  } else node[last] = value;
}

const schemaType = (path: Path): string | undefined => {
  const s = schemaAt(path);
  return s === undefined ? undefined : defOf(s).type;
};

/** A bounded numeric key's range, or undefined where the schema does not bound the value at `path` as a number. */
function rangeAt(path: Path): { min: number; max: number } | undefined {
  const s = schemaAt(path);
  if (s === undefined || defOf(s).type !== 'number') return undefined;
  const [n] = numbersIn(s);
  return n === undefined
    ? undefined
    : { min: n.minValue ?? Number.NEGATIVE_INFINITY, max: n.maxValue ?? Number.POSITIVE_INFINITY };
}

interface Mutant {
  text: string;
  /** Why the config is certainly invalid (null: it may be valid). */
  invalid: string | null;
  what: string[];
}

/** One to three mutations of a source config. */
function mutate(source: Tree, random: () => number): Mutant {
  const tree = structuredClone(source);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const what: string[] = [];
  // values that make the config certainly invalid, while a later mutation leaves them in place
  const certain: { path: Path; value: unknown; reason: string }[] = [];
  let textBreak: string | null = null;
  let truncated = false;
  let brokenText: ((text: string) => string) | null = null;
  const count = 1 + Math.floor(random() * 3);
  for (let m = 0; m < count; m++) {
    const all = paths(tree);
    const leaves = all.filter(([, v]) => v === null || typeof v !== 'object');
    const mappings = all.filter(([, v]) => v !== null && typeof v === 'object' && !Array.isArray(v));
    const numeric = all.filter(([p]) => rangeAt(p) !== undefined);
    const kind = pick(['delete', 'swap', 'huge', 'negative', 'nan', 'unknown', 'yaml', 'number'] as const);
    if (kind === 'delete' && all.length > 0) {
      const [path] = pick(all);
      setIn(tree, path, undefined);
      what.push(`delete ${path.join('.')}`);
    } else if (kind === 'swap' && leaves.length > 0) {
      const [path] = pick(leaves);
      const value = pick(['not-a-number', true, [1, 'x'], { a: 1 }, 42, '']);
      setIn(tree, path, value);
      what.push(`swap ${path.join('.')} = ${JSON.stringify(value)}`);
      const type = schemaType(path);
      const structured = typeof value === 'object';
      if (type === 'number' && (typeof value === 'boolean' || structured || (typeof value === 'string' && value !== '')))
        certain.push({ path, value, reason: `${path.join('.')}: a number key given ${JSON.stringify(value)}` });
      if ((type === 'boolean' || type === 'enum' || type === 'string') && structured)
        certain.push({ path, value, reason: `${path.join('.')}: a ${type} key given ${JSON.stringify(value)}` });
    } else if ((kind === 'huge' || kind === 'negative' || kind === 'nan' || kind === 'number') && numeric.length > 0) {
      const [path] = pick(numeric);
      const range = rangeAt(path) as { min: number; max: number };
      const value =
        kind === 'huge'
          ? pick([1e9, 1e15, 2 ** 53, 1e300, 4_294_967_297])
          : kind === 'negative'
            ? -pick([1, 2, 1e9, 0.5])
            : kind === 'nan'
              ? pick([Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])
              : pick([0, 1, 2, 0.5, 7, 100, 1024, 65_536]);
      setIn(tree, path, value);
      what.push(`${kind} ${path.join('.')} = ${value}`);
      if (!Number.isFinite(value) || value < range.min || value > range.max)
        certain.push({ path, value, reason: `${path.join('.')} = ${value} outside [${range.min}, ${range.max}]` });
    } else if (kind === 'unknown' && mappings.length > 0) {
      const [path] = pick(mappings);
      setIn(tree, [...path, `zz_unknown_${m}`], 1);
      what.push(`unknown key in ${path.join('.')}`);
      if (schemaType(path) === 'object') {
        certain.push({ path: [...path, `zz_unknown_${m}`], value: 1, reason: `unknown key in ${path.join('.')}` });
      }
    } else if (kind === 'yaml') {
      const breakage = pick(['unclosed', 'duplicate', 'tab', 'truncate'] as const);
      what.push(`yaml ${breakage}`);
      if (breakage === 'unclosed') brokenText = (t) => `${t}\nzz_broken: [1, 2\n`;
      if (breakage === 'duplicate') brokenText = (t) => `${t}\nproject: a\nproject: b\n`;
      if (breakage === 'tab') brokenText = (t) => `${t}\nzz_tab:\n\t- 1\n`;
      if (breakage === 'truncate') {
        const cut = random();
        brokenText = (t) => t.slice(0, Math.floor(t.length * cut));
      }
      // the text is broken once, at the end: the last breakage chosen is the one applied
      textBreak = breakage === 'truncate' ? null : `YAML ${breakage}`;
      truncated = breakage === 'truncate';
    }
  }
  // a truncated text may have lost every mutation: nothing is certain about it
  const invalid = truncated
    ? null
    : (textBreak ?? certain.find((c) => isDeepStrictEqual(getIn(tree, c.path), c.value))?.reason ?? null);
  const text = YAML.stringify(tree, { lineWidth: 0 });
  return { text: brokenText === null ? text : (brokenText as (t: string) => string)(text), invalid, what };
}

async function checkInProcess(file: string): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const output = { stdout: { write: (t: string) => (out += t) }, stderr: { write: (t: string) => (err += t) } };
  const code = await configCommand(['check', file], output);
  return { code, out, err };
}

function checkSpawned(file: string): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((done) => {
    // the timeout only ends a hang (a check takes seconds)
    execFile(process.execPath, [BIN, 'config', 'check', file], { timeout: 300_000, killSignal: 'SIGKILL' }, (error, out, err) => {
      const code =
        error === null ? 0 : typeof (error as { code?: unknown }).code === 'number' ? (error as { code: number }).code : null;
      done({ code, out, err });
    });
  });
}

describe('config check fuzz', () => {
  const random = seededRandom(SEED);
  const bases = sources();
  const files: { file: string; code: number }[] = [];

  it(`${MUTANTS} mutants in process: no crash, no stack trace, exit 0 only for configs run would accept`, async () => {
    // the unmutated configs pass, so the mutations are what the checks catch
    for (const { name, tree } of bases) {
      const file = join(dir, `base-${name}.yaml`);
      writeFileSync(file, YAML.stringify(tree, { lineWidth: 0 }));
      const { code, err } = await checkInProcess(file);
      assert.equal(code, 0, `${name}: ${err}`);
    }
    const codes = { 0: 0, 1: 0, invalid: 0 };
    for (let i = 0; i < MUTANTS; i++) {
      const base = bases[Math.floor(random() * bases.length)] as (typeof bases)[number];
      const mutant = mutate(base.tree, random);
      const file = join(dir, `mutant-${i}.yaml`);
      writeFileSync(file, mutant.text);
      const label = `mutant ${i} of ${base.name} (seed ${SEED}): ${mutant.what.join('; ')} — ${file}`;
      let result: Awaited<ReturnType<typeof checkInProcess>>;
      try {
        result = await checkInProcess(file);
      } catch (error) {
        assert.fail(`${label}: config check threw ${(error as Error).stack}`);
      }
      const { code, out, err } = result;
      assert.ok(code === 0 || code === 1, `${label}: exit ${code}`);
      assert.doesNotMatch(`${out}${err}`, STACK_TRACE, label);
      if (code === 1) assert.match(err, /^invalid config .*: \d+ problems?\n {2}- /, label);
      if (mutant.invalid !== null) assert.equal(code, 1, `${label}: accepted though ${mutant.invalid}\n${out}`);
      if (code === 0) {
        // what `trinity run` does first: load, then the pre-run checks
        const config = loadConfig(file, { resolveAlgorithm });
        assert.deepEqual(await preflightProblems(config, { baseDir: dirname(file) }), [], label);
        assert.ok(
          YAML.parseAllDocuments(out).every((d) => d.errors.length === 0),
          label,
        );
      }
      codes[code as 0 | 1]++;
      if (mutant.invalid !== null) codes.invalid++;
      files.push({ file, code });
    }
    // the mix the assertions above ran on: some mutants survive, many are certainly invalid
    assert.ok(codes[0] >= MUTANTS / 20 && codes.invalid >= MUTANTS / 4, JSON.stringify(codes));
  });

  it(`${SPAWNED} of them through node bin/trinity.js agree, with no stack trace`, async () => {
    assert.equal(files.length, MUTANTS);
    // both outcomes in the sample: the first mutants that exited 0, the rest of those that exited 1
    const accepted = files.filter((f) => f.code === 0).slice(0, 2);
    const refused = files.filter((f) => f.code === 1).slice(0, SPAWNED - accepted.length);
    for (const { file, code } of [...accepted, ...refused]) {
      const result = await checkSpawned(file);
      assert.equal(result.code, code, `${file}: ${result.err}`);
      assert.doesNotMatch(`${result.out}${result.err}`, STACK_TRACE, file);
    }
  });
});
