// The household environment without a model: its rules on a hand-made house (moves, containers, appliances, the
// lamp, invalid replies, rewards, termination, the state key), the reply parser, the expert (shortest plans on the
// hand-made house; every generated house of 60 seeds solved within the default step bound, by play), the generator
// (deterministic by seed, all six task types, the solution-length bounds, argument errors) and the row refusal.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Task } from '../../../../src/rft/task.js';
import {
  generateHousehold,
  HOUSEHOLD_SYSTEM_PROMPT,
  HOUSEHOLD_TASK_TYPES,
  type Household,
  HouseholdEnv,
  householdFromArgs,
  householdWorkflow,
  initialHouseholdState,
  parseHouseholdAction,
  playEpisode,
  solveHousehold,
  WORKFLOWS,
  type WorkflowContext,
} from '../../../../src/rft/workflow/index.js';

/** Kitchen and bedroom; a mug in the closed cabinet, one on the countertop, a book in the bedroom's drawer. */
function house(goal: Household['goal']): Household {
  const r = (name: string, room: 'kitchen' | 'bedroom', container = false, appliance?: 'clean' | 'heat' | 'cool') => ({
    name,
    kind: name.split(' ')[0] as string,
    room,
    container,
    ...(appliance ? { appliance } : {}),
  });
  return {
    rooms: ['kitchen', 'bedroom'],
    receptacles: [
      r('countertop 1', 'kitchen'),
      r('cabinet 1', 'kitchen', true),
      r('sinkbasin 1', 'kitchen', false, 'clean'),
      r('microwave 1', 'kitchen', true, 'heat'),
      r('fridge 1', 'kitchen', true, 'cool'),
      r('coffeemachine 1', 'kitchen'),
      r('desk 1', 'bedroom'),
      r('drawer 1', 'bedroom', true),
    ],
    objects: [
      { name: 'mug 1', kind: 'mug' },
      { name: 'mug 2', kind: 'mug' },
      { name: 'book 1', kind: 'book' },
    ],
    lamp: 'desk 1',
    start: { 'mug 1': 'cabinet 1', 'mug 2': 'countertop 1', 'book 1': 'drawer 1' },
    startRoom: 'kitchen',
    goal,
  };
}
const cleanMug = house({
  type: 'pick_clean_then_place',
  object: 'mug',
  target: 'coffeemachine',
  text: 'put a clean mug in/on coffeemachine.',
});
const kitchenActions =
  'go to bedroom, go to cabinet 1, go to coffeemachine 1, go to countertop 1, go to fridge 1, go to microwave 1, ' +
  'go to sinkbasin 1, inventory, look';

describe('household rules (a hand-made house)', () => {
  test('the first observation: the room, the goal, the admissible actions sorted', () => {
    assert.equal(
      new HouseholdEnv(cleanMug).reset(),
      'You are in the middle of the kitchen. Looking around you, you see a countertop 1, a cabinet 1, a sinkbasin 1, ' +
        'a microwave 1, a fridge 1, and a coffeemachine 1. Doors lead to the bedroom.\n' +
        'Your task is to: put a clean mug in/on coffeemachine.\n' +
        `Admissible actions: ${kitchenActions}`,
    );
  });

  test('containers, taking, the appliance, reward 1 when the goal holds and the end of the episode', () => {
    const env = new HouseholdEnv(cleanMug);
    env.reset();
    const feedback = (reply: string) => {
      const step = env.step(reply);
      return [step.observation.split('\n')[0], step.reward, step.done, step.invalidAction ?? false];
    };
    assert.deepEqual(feedback('go to cabinet 1'), ['You arrive at the cabinet 1. The cabinet 1 is closed.', 0, false, false]);
    // a closed container hides what is in it: taking from it is not admissible, so nothing happens
    const before = env.stateKey();
    assert.deepEqual(feedback('take mug 1 from cabinet 1'), [
      'Nothing happens. (Reply with one of the admissible actions.)',
      0,
      false,
      true,
    ]);
    assert.equal(env.stateKey(), before, 'an invalid action changes nothing');
    assert.deepEqual(feedback('open cabinet 1'), [
      'You open the cabinet 1. The cabinet 1 is open. In it, you see a mug 1.',
      0,
      false,
      false,
    ]);
    assert.deepEqual(feedback('take mug 1 from cabinet 1'), ['You pick up the mug 1 from the cabinet 1.', 0, false, false]);
    assert.deepEqual(feedback('inventory'), ['You are carrying: a mug 1.', 0, false, false]);
    // the hands are full: another take is not admissible anywhere
    assert.deepEqual(feedback('go to countertop 1')[0], 'You arrive at the countertop 1. On the countertop 1, you see a mug 2.');
    assert.equal(feedback('take mug 2 from countertop 1')[3], true);
    // a mug that is not clean on the coffeemachine is not the goal
    feedback('go to coffeemachine 1');
    assert.deepEqual(feedback('put mug 1 in/on coffeemachine 1'), [
      'You put the mug 1 in/on the coffeemachine 1.',
      0,
      false,
      false,
    ]);
    feedback('take mug 1 from coffeemachine 1');
    assert.deepEqual(feedback('go to sinkbasin 1')[0], 'You arrive at the sinkbasin 1. On the sinkbasin 1, you see nothing.');
    assert.deepEqual(feedback('clean mug 1 with sinkbasin 1'), ['You clean the mug 1 using the sinkbasin 1.', 0, false, false]);
    assert.deepEqual(feedback('examine mug 1')[0], 'This is a clean mug 1.');
    feedback('go to coffeemachine 1');
    assert.deepEqual(feedback('put mug 1 on coffeemachine 1'), ['You put the mug 1 in/on the coffeemachine 1.', 1, true, false]);
    assert.deepEqual(env.metrics(), { success: 1 });
    assert.throws(() => env.step('look'), /the episode is over/);
  });

  test('heating ends cold, cooling ends hot; the appliance acts only on what its kind allows', () => {
    const env = new HouseholdEnv(
      house({ type: 'pick_heat_then_place', object: 'mug', target: 'desk', text: 'put a hot mug in/on desk.' }),
    );
    env.reset();
    for (const action of ['go to countertop 1', 'take mug 2 from countertop 1', 'go to fridge 1', 'cool mug 2 with fridge 1'])
      assert.equal(env.step(action).invalidAction, undefined, action);
    assert.equal(env.step('examine mug 2').observation.split('\n')[0], 'This is a cool mug 2.');
    env.step('go to microwave 1');
    env.step('heat mug 2 with microwave 1');
    assert.equal(env.step('examine mug 2').observation.split('\n')[0], 'This is a hot mug 2.');
    assert.equal(env.step('clean mug 2 with microwave 1').invalidAction, true, 'a microwave does not clean');
    for (const action of ['go to bedroom', 'go to desk 1']) env.step(action);
    assert.deepEqual(env.step('put mug 2 in/on desk 1').reward, 1);
  });

  test('look_at_obj_in_light: holding the object with the lamp on; pick_two: two in one receptacle', () => {
    const lamp = new HouseholdEnv(
      house({ type: 'look_at_obj_in_light', object: 'book', text: 'look at book under the desklamp.' }),
    );
    lamp.reset();
    // the lamp on without the book, then off; the book fetched, then the lamp on
    for (const action of ['go to bedroom', 'go to desk 1', 'use desklamp 1']) assert.equal(lamp.step(action).reward, 0);
    assert.equal(lamp.step('use desklamp 1').observation.split('\n')[0], 'You turn off the desklamp 1.');
    for (const action of ['go to drawer 1', 'open drawer 1', 'take book 1 from drawer 1', 'go to desk 1'])
      assert.equal(lamp.step(action).reward, 0, action);
    const lit = lamp.step('use desklamp 1');
    assert.deepEqual([lit.observation.split('\n')[0], lit.reward, lit.done], ['You turn on the desklamp 1.', 1, true]);
    const two = new HouseholdEnv(
      house({ type: 'pick_two_obj_and_place', object: 'mug', target: 'fridge', text: 'put two mug in/on fridge.' }),
    );
    two.reset();
    const plan = [
      'go to countertop 1',
      'take mug 2 from countertop 1',
      'go to fridge 1',
      'open fridge 1',
      'put mug 2 in/on fridge 1',
    ];
    for (const action of plan) assert.equal(two.step(action).reward, 0, action);
    for (const action of ['go to cabinet 1', 'open cabinet 1', 'take mug 1 from cabinet 1', 'go to fridge 1'])
      assert.equal(two.step(action).reward, 0, action);
    assert.equal(two.step('put mug 1 in fridge 1').reward, 1);
  });

  test('the state key: equal states by any route are equal, any change of the world differs', () => {
    const env = new HouseholdEnv(cleanMug);
    env.reset();
    const start = env.stateKey();
    env.step('go to cabinet 1');
    env.step('go to countertop 1');
    const viaCabinet = env.stateKey();
    env.reset();
    env.step('go to countertop 1');
    assert.equal(env.stateKey(), viaCabinet);
    assert.notEqual(viaCabinet, start);
    env.step('go to cabinet 1');
    const closed = env.stateKey();
    env.step('open cabinet 1');
    assert.notEqual(env.stateKey(), closed, 'an open container is another state (the observation would not say so later)');
    env.step('close cabinet 1');
    assert.equal(env.stateKey(), closed);
    env.step('look');
    env.step('inventory');
    assert.equal(env.stateKey(), closed, 'look and inventory change nothing');
  });
});

describe('parseHouseholdAction', () => {
  const admissible = ['go to desk 1', 'look', 'put mug 1 in/on desk 1', 'take book 1 from desk 1'];
  test('one admissible action, in any case and spacing, with put ... in or on read as in/on', () => {
    assert.equal(parseHouseholdAction('go to desk 1', admissible), 'go to desk 1');
    assert.equal(parseHouseholdAction('  Go  to Desk 1.\n', admissible), 'go to desk 1');
    assert.equal(parseHouseholdAction('> look', admissible), 'look');
    assert.equal(parseHouseholdAction('Action: take book 1 from desk 1', admissible), 'take book 1 from desk 1');
    assert.equal(parseHouseholdAction('put mug 1 on desk 1', admissible), 'put mug 1 in/on desk 1');
    assert.equal(parseHouseholdAction('put mug 1 in desk 1', admissible), 'put mug 1 in/on desk 1');
  });
  test('a fenced block is the action; else exactly one admissible line of the reply', () => {
    assert.equal(parseHouseholdAction('I should look first, then go to desk 1. ```look```', admissible), 'look');
    assert.equal(parseHouseholdAction('The book is on the desk.\ngo to desk 1', admissible), 'go to desk 1');
    for (const reply of ['', 'go to desk 2', 'go to the desk', 'look\ngo to desk 1', '```go to desk 9``` look', 'take book 1'])
      assert.equal(parseHouseholdAction(reply, admissible), null, reply);
  });
});

describe('household expert and generator', () => {
  test('the expert finds a shortest plan: the mug on the countertop, not the one in the closed cabinet', () => {
    assert.deepEqual(solveHousehold(cleanMug, initialHouseholdState(cleanMug)), [
      'go to countertop 1',
      'take mug 2 from countertop 1',
      'go to sinkbasin 1',
      'clean mug 2 with sinkbasin 1',
      'go to coffeemachine 1',
      'put mug 2 in/on coffeemachine 1',
    ]);
    // from a state the model reached (holding a book in the bedroom): the plan continues from there
    const env = new HouseholdEnv(cleanMug);
    env.reset();
    for (const action of ['go to bedroom', 'go to drawer 1', 'open drawer 1', 'take book 1 from drawer 1']) env.step(action);
    const plan = solveHousehold(cleanMug, env.state) ?? [];
    // the book put down somewhere (1), to the kitchen (1), then the 6 steps above: 8
    assert.equal(plan.length, 8);
    assert.ok(
      plan.some((action) => action.startsWith('put book 1 in/on ')),
      'the hands are freed first',
    );
    for (const action of plan) env.step(action);
    assert.equal(env.success, true);
  });

  test('every house of 60 seeds: deterministic, no goal at the start, solved by the expert within max_steps (30)', async () => {
    const types = new Set<string>();
    const lengths: number[] = [];
    for (let seed = 0; seed < 60; seed++) {
      const generated = generateHousehold({ seed });
      assert.deepEqual(generateHousehold({ seed }), generated, `seed ${seed}: the same house twice`);
      types.add(generated.goal.type);
      const plan = solveHousehold(generated, initialHouseholdState(generated));
      assert.ok(plan !== null && plan.length >= 1 && plan.length <= 30, `seed ${seed}: plan ${plan?.length}`);
      lengths.push(plan.length);
      // played through the environment (the parser, the rules, the reward), the plan reaches the goal at its last step
      const env = new HouseholdEnv(generated);
      const episode = await playEpisode(env, (_, i) => plan[i] as string, { maxSteps: 30 });
      assert.deepEqual([episode.reward, episode.done, episode.steps], [1, true, plan.length], `seed ${seed}`);
    }
    assert.deepEqual([...types].sort(), [...HOUSEHOLD_TASK_TYPES].sort(), 'all six task types are drawn');
    assert.notDeepEqual(generateHousehold({ seed: 1 }), generateHousehold({ seed: 2 }));
    assert.ok(Math.max(...lengths) >= 8, 'some plans are long (pick_two)');
  });

  test('workflow arguments: task_types, max_rooms, solution-length bounds; bad values are precise errors', () => {
    for (let seed = 0; seed < 10; seed++) {
      const heat = householdFromArgs({ seed, task_types: 'pick_heat_then_place', max_rooms: 2 }, { seed: 0 });
      assert.equal(heat.goal.type, 'pick_heat_then_place');
      assert.equal(heat.rooms.length, 2);
      const long = householdFromArgs({ seed, min_solution_steps: 9 }, { seed: 0 });
      assert.ok((solveHousehold(long, initialHouseholdState(long))?.length ?? 0) >= 9, `seed ${seed}`);
      const short = householdFromArgs({ seed, max_solution_steps: 5 }, { seed: 0 });
      assert.ok((solveHousehold(short, initialHouseholdState(short))?.length ?? 99) <= 5, `seed ${seed}`);
    }
    assert.deepEqual(householdFromArgs({}, { seed: 4 }), generateHousehold({ seed: 4 }), 'seed defaults to the task index');
    assert.throws(
      () => householdFromArgs({ seed: 1, task_types: ['pick_and_place', 'stack'] }, { seed: 0 }),
      /household_workflow: task_types must be one or a list of pick_and_place, .*; got \["pick_and_place","stack"\]/,
    );
    assert.throws(
      () => householdFromArgs({ seed: 1, max_rooms: 5 }, { seed: 0 }),
      /max_rooms must be an integer in \[2, 4\], got 5/,
    );
    assert.throws(
      () => householdFromArgs({ seed: 1, min_solution_steps: 8, max_solution_steps: 4 }, { seed: 0 }),
      /max_solution_steps \(4\) is below min_solution_steps \(8\)/,
    );
  });

  test('household_workflow is registered, reads no prompt, and refuses a row that is not a household row', async () => {
    const spec = await WORKFLOWS.resolve('household_workflow');
    assert.equal(spec.description, householdWorkflow.description);
    assert.equal(spec.readsPrompt, false);
    assert.equal(spec.stateHashes?.({ experience_mode: 'step' }), true);
    const task: Task = { id: 'house:2', taskset: 'house', index: 2, raw: { question: 'where?' }, workflowArgs: {} };
    const context = { task, seed: 0, isEval: false, signal: new AbortController().signal } as unknown as WorkflowContext;
    await assert.rejects(
      householdWorkflow.run(context),
      /household_workflow: task 'house:2', taskset 'house' row 3 has none of seed, task_types, max_rooms .* no prompt/,
    );
    assert.ok(HOUSEHOLD_SYSTEM_PROMPT.includes('admissible actions'));
  });
});
