// examples/household in a shortened form: the example's config.yaml (its workflow, stages and algorithms) and its data
// generator (make-data.ts) on a tiny random model, 2-room houses and a few steps, once per experience mode: the
// config as it is (GRPO over whole episodes) and step-wise (gigpo, experience_mode step: one experience per command,
// each with the hash of the world state it acted from). No learning is asserted (that is a measurement, README.md);
// the runs must go end to end: a bench, SFT on the expert's episodes, GRPO steps over household episodes whose
// metrics say how they went, and in step mode anchor states that GiGPO found (every run of a task starts from the
// same state). Also: the committed data is what make-data.ts writes, and its options (the house arguments the
// workflow reads; the ε-greedy demonstrator; the observing expert, which acts only on what it has seen), and
// make-tokenizer.ts (each word of the demonstrations one token).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { householdDemonstrator, makeHouseholdData } from '../../examples/household/make-data.js';
import { householdWords } from '../../examples/household/make-tokenizer.js';
import { initModel } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { writeJsonlSets } from '../../src/rft/buffer/index.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import { seededRandom } from '../../src/rft/buffer/random.js';
import {
  generateHousehold,
  HouseholdEnv,
  householdAdmissibleActions,
  householdFromArgs,
  type Household,
  type HouseholdState,
  householdObservingExpert,
  initialHouseholdState,
  observingExpertPlan,
  solveHousehold,
} from '../../src/rft/workflow/index.js';
import { Tokenizer, writeWordTokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';

const example = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'household');
let root: string;
let threads: number;

before(async () => {
  threads = torch.getNumThreads();
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'household-'));
  initModel(join(root, 'model'), { hiddenSize: 32, numLayers: 1, numHeads: 2, maxPositionEmbeddings: 4096, seed: 0 });
  writeJsonlSets(root, await makeHouseholdData({ maxRooms: 2, maxSteps: 30, train: 4, eval: 2, sft: 4 }));
});
after(() => {
  torch.setNumThreads(threads);
  rmSync(root, { recursive: true, force: true });
});

/** Runs the example's config, shortened, into `runs`; the GRPO stage's metric rows. */
async function runExample(runs: string, extra: string[]): Promise<Record<string, number>[]> {
  const args = (taskset: string) => [`${taskset}.path=${join(root, `${taskset.includes('eval') ? 'eval' : 'train'}.jsonl`)}`];
  const config = loadConfig(join(example, 'config.yaml'), {
    resolveAlgorithm,
    overrides: [
      `checkpoint_root_dir=${runs}`,
      `model.model_path=${join(root, 'model')}`,
      'model.max_prompt_tokens=4000',
      'model.max_response_tokens=8',
      ...args('buffer.explorer_input.taskset'),
      'buffer.explorer_input.taskset.workflow_args.max_steps=3',
      ...args('buffer.explorer_input.eval_tasksets.0'),
      'buffer.explorer_input.eval_tasksets.0.workflow_args.max_steps=2',
      'buffer.batch_size=2',
      'buffer.total_steps=2',
      'algorithm.repeat_times=2',
      'explorer.eval_interval=2',
      'explorer.runner_per_model=4',
      'explorer.rollout_model.slots=4',
      'trainer.save_interval=0',
      'monitor.monitor_type=[jsonl]',
      `stages.1.buffer.trainer_input.experience_buffer.path=${join(root, 'sft.jsonl')}`,
      'stages.1.buffer.train_batch_size=2',
      'stages.1.buffer.total_steps=2',
      ...extra,
    ],
  });
  const result = await runConfig(config, { log: () => {} });
  assert.ok(result.finalModelDir && existsSync(result.finalModelDir), 'the run wrote its final model');
  for (const stage of ['base', 'sft'])
    assert.ok(existsSync(join(runs, 'household', 'chores', stage, 'metrics.jsonl')), `stage ${stage} ran`);
  return readFileSync(join(runs, 'household', 'chores', 'grpo', 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>);
}

/** The value of the metric whose name ends with `suffix`. */
const metric = (row: Record<string, number> | undefined, suffix: string) =>
  Object.entries(row ?? {}).find(([key]) => key.endsWith(suffix))?.[1];

describe('examples/household, shortened', () => {
  it('experience_mode episode (the config as it is): bench, SFT, then GRPO steps over household episodes', async () => {
    const rows = await runExample(join(root, 'episode'), []);
    const rollouts = rows.filter((r) => typeof r['rollout/steps/mean'] === 'number');
    assert.equal(rollouts.length, 2, 'two GRPO steps');
    for (const row of rollouts) {
      const steps = row['rollout/steps/mean'] as number;
      assert.ok(steps >= 1 && steps <= 3, `episode steps ${steps} within max_steps 3`);
      assert.equal(typeof row['rollout/success/mean'], 'number');
      assert.equal(typeof row['rollout/invalid_actions/mean'], 'number');
    }
  });

  it('experience_mode step with gigpo: one experience per command, anchor states found from the world state', async () => {
    const rows = await runExample(join(root, 'step'), [
      'algorithm.algorithm_type=gigpo',
      'buffer.explorer_input.taskset.workflow_args.experience_mode=step',
    ]);
    const trained = rows.filter((r) => metric(r, 'gigpo/anchor_groups_total') !== undefined);
    assert.equal(trained.length, 2, 'two GRPO steps');
    for (const row of trained) {
      // a train step takes batch_size × repeat_times = 4 step experiences; the two runs of a task both act first from
      // its start state, and a command the world rejects leaves the state as it was: states repeat, anchors form
      assert.ok((metric(row, 'gigpo/anchor_groups_total') as number) >= 1, JSON.stringify(row));
      assert.equal(metric(row, 'advantage/experience_count'), 4);
    }
  });

  it('the committed data is what make-data.ts writes with its defaults (the SFT file: its first 20 episodes)', async () => {
    const data = await makeHouseholdData({ maxRooms: 4, maxSteps: 30, train: 1000, eval: 100, sft: 20 });
    for (const [set, rows] of Object.entries(data)) {
      const lines = readFileSync(join(example, 'data', `${set}.jsonl`), 'utf8').split('\n');
      const expected = rows.map((r) => JSON.stringify(r));
      assert.deepEqual(lines.slice(0, expected.length), expected, `${set}.jsonl is stale: rerun make-data.ts`);
    }
    // held out: no train or SFT house has an eval house's seed or layout (the whole generated house)
    const layout = (seed: number) => JSON.stringify(generateHousehold({ seed }));
    const heldOut = new Set(data.eval.map((r) => r.seed));
    const heldOutLayouts = new Set(data.eval.map((r) => layout(r.seed)));
    for (const { seed } of [...data.train, ...data.sft]) {
      assert.ok(!heldOut.has(seed), `seed ${seed} is held out`);
      assert.ok(!heldOutLayouts.has(layout(seed)), `seed ${seed} has a held-out layout`);
    }
  });

  it('make-data.ts: the house arguments restrict every set as the workflow reads them', async () => {
    const data = await makeHouseholdData({
      maxRooms: 2,
      taskTypes: ['pick_and_place', 'look_at_obj_in_light'],
      maxSolutionSteps: 4,
      maxSteps: 10,
      train: 10,
      eval: 10,
      sft: 10,
    });
    const args = { max_rooms: 2, task_types: ['pick_and_place', 'look_at_obj_in_light'], max_solution_steps: 4 };
    for (const { seed } of [...data.train, ...data.eval, ...data.sft]) {
      const house = householdFromArgs({ ...args, seed }, { seed });
      assert.ok(house.rooms.length <= 2, `seed ${seed}: ${house.rooms.length} rooms`);
      assert.ok(args.task_types.includes(house.goal.type), `seed ${seed}: ${house.goal.type}`);
      assert.ok((solveHousehold(house, initialHouseholdState(house))?.length ?? 99) <= 4, `seed ${seed}: plan too long`);
    }
    // the expert's episodes are those houses' shortest plans: the first observation is the restricted house's
    for (const row of data.sft) {
      const env = new HouseholdEnv(householdFromArgs({ ...args, seed: row.seed }, { seed: row.seed }));
      assert.equal(row.messages[1]?.content, env.reset());
      const replies = row.messages.filter((m) => m.role === 'assistant').map((m) => m.content);
      assert.deepEqual(replies, solveHousehold(env.house, env.state));
    }
  });

  it('make-data.ts --epsilon: the demonstrator takes random admissible actions, replans, and its failures are kept', async () => {
    const house = generateHousehold({ seed: 7, maxRooms: 2 });
    const plan = solveHousehold(house, initialHouseholdState(house)) as string[];
    // ε = 0: the expert's shortest plan exactly
    const expert = householdDemonstrator(0, seededRandom(1));
    const env = new HouseholdEnv(house);
    env.reset();
    const played: string[] = [];
    while (!env.done) {
      const action = expert(env);
      played.push(action);
      env.step(action);
    }
    assert.deepEqual(played, plan);
    // ε = 0.5 over many episodes: every action admissible where it was taken, some off the expert's plan, and after
    // a random action the demonstrator's next expert action starts a shortest plan from where it is
    let offPlan = 0;
    for (let k = 0; k < 20; k++) {
      const noisy = householdDemonstrator(0.5, seededRandom(7, k));
      const episode = new HouseholdEnv(house);
      episode.reset();
      for (let step = 0; step < 12 && !episode.done; step++) {
        const shortest = solveHousehold(house, episode.state)?.[0];
        const action = noisy(episode);
        assert.ok(householdAdmissibleActions(house, episode.state).includes(action), `${action} is admissible`);
        if (action !== shortest) offPlan++;
        episode.step(action);
      }
    }
    assert.ok(offPlan > 0, 'some actions are random');
    const data = await makeHouseholdData({ maxRooms: 2, epsilon: 0.5, maxSteps: 6, train: 0, eval: 4, sft: 30 });
    assert.equal(data.sft.length, 30, 'with ε > 0 every demonstration is kept');
    const solved = (row: (typeof data.sft)[number]) => {
      const env = new HouseholdEnv(householdFromArgs({ max_rooms: 2, seed: row.seed }, { seed: row.seed }));
      env.reset();
      for (const m of row.messages) if (m.role === 'assistant') env.step(m.content as string);
      return env.success;
    };
    const failures = data.sft.filter((row) => !solved(row)).length;
    assert.ok(failures > 0 && failures < 30, `${failures} of 30 demonstrations fail`);
  });

  it('the observing expert reaches the goal, and acts on what it has seen: moving an unseen object changes nothing', () => {
    // a policy that acts on the observations alone takes the same actions in two houses as long as their observations
    // agree; here the second house is the first with the goal objects moved to the last receptacle they may start in
    type Policy = (house: Household) => (state: HouseholdState) => string;
    const agreesUntilSeen = (house: Household, policy: Policy): boolean => {
      const places = house.receptacles.filter((r) => r.kind !== house.goal.target);
      const hidden = places.at(-1)?.name as string;
      const moved = { ...house, start: { ...house.start } };
      for (const o of house.objects) if (o.kind === house.goal.object) moved.start[o.name] = hidden;
      const [a, b] = [new HouseholdEnv(house), new HouseholdEnv(moved)];
      const [policyA, policyB] = [policy(house), policy(moved)];
      let same = a.reset() === b.reset();
      for (let step = 0; step < 30 && same && !a.done && !b.done; step++) {
        const action = policyA(a.state);
        if (action !== policyB(b.state)) return false;
        same = a.step(action).observation === b.step(action).observation;
      }
      return true;
    };
    const bfs: Policy = (house) => (state) => solveHousehold(house, state)?.[0] ?? 'look';
    let bfsDiffers = 0;
    for (let seed = 0; seed < 16; seed++) {
      for (const maxRooms of [2, 4]) {
        const house = generateHousehold({ seed, maxRooms });
        const plan = observingExpertPlan(house, initialHouseholdState(house), 40);
        const env = new HouseholdEnv(house);
        env.reset();
        for (const action of plan) env.step(action);
        assert.ok(env.success, `seed ${seed}, ${maxRooms} rooms (${house.goal.type}): ${plan.join('; ')}`);
        const shortest = solveHousehold(house, initialHouseholdState(house)) as string[];
        assert.ok(plan.length >= shortest.length);
        assert.ok(agreesUntilSeen(house, householdObservingExpert), `seed ${seed}: the observing expert peeked`);
        if (!agreesUntilSeen(house, bfs)) bfsDiffers++;
      }
    }
    assert.ok(bfsDiffers > 0, 'the BFS expert walks to unseen objects (the check above can tell)');
  });

  it('make-data.ts --demonstrator observing: the demonstrations are the observing expert episodes', async () => {
    const data = await makeHouseholdData({
      maxRooms: 2,
      taskTypes: ['pick_and_place'],
      demonstrator: 'observing',
      maxSteps: 30,
      train: 0,
      eval: 4,
      sft: 10,
    });
    assert.equal(data.sft.length, 10);
    for (const row of data.sft) {
      const house = householdFromArgs({ max_rooms: 2, task_types: 'pick_and_place', seed: row.seed }, { seed: row.seed });
      const replies = row.messages.filter((m) => m.role === 'assistant').map((m) => m.content);
      assert.deepEqual(replies, observingExpertPlan(house, initialHouseholdState(house), 30));
    }
  });

  it('make-tokenizer.ts: every word of the demonstrations one token, any text encodes and decodes unchanged', async () => {
    const data = await makeHouseholdData({ maxRooms: 2, demonstrator: 'observing', maxSteps: 30, train: 0, eval: 4, sft: 8 });
    const texts = data.sft.flatMap((row) => row.messages.map((m) => m.content as string));
    const words = householdWords(texts, 1);
    assert.ok(words.includes('countertop') && words.includes('1') && words.includes('a'), words.join(','));
    const dir = join(root, 'household-tokenizer');
    assert.ok(writeWordTokenizer(dir, words) < 1000);
    const tokenizer = Tokenizer.load(dir);
    for (const word of words) {
      assert.equal(tokenizer.encode(word).length, 1, word);
      assert.equal(tokenizer.encode(` ${word}`).length, 1, ` ${word}`);
    }
    // an observation: a token per word, space, digit run or punctuation mark; an unseen word falls back to characters
    const observation = texts[1] as string;
    const ids = tokenizer.encode(observation);
    assert.equal(tokenizer.decode(ids), observation);
    assert.ok(ids.length * 3 < observation.length, `${ids.length} tokens for ${observation.length} characters`);
    const command = 'take countertop 1 from zzz'; // "take", " countertop", " 1", " from", then " zzz" by characters
    assert.equal(tokenizer.encode(command).length, 4 + ' zzz'.length);
    assert.equal(tokenizer.decode(tokenizer.encode(command)), command);
  });
});
