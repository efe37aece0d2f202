// household_workflow: a text household in the style of ALFWorld. The agent walks between rooms and receptacles,
// opens containers, takes and puts objects, cleans / heats / cools them with the sinkbasin / microwave / fridge and
// turns on a desklamp, one command per turn, until the goal holds (reward 1) or max_steps run out (reward 0).
// The house is generated from the task's seed (world.ts), the rules are rules.ts, the expert is solver.ts.
//
//   system     You are in a house. ... Reply with exactly one of the admissible actions.
//   user       You are in the middle of the bedroom. Looking around you, you see a bed 1, a desk 1, ... Doors lead to
//              the kitchen.
//              Your task is to: put a clean mug in/on coffeemachine.
//              Admissible actions: go to bed 1, go to desk 1, go to kitchen, inventory, look
//   assistant  go to kitchen
//   user       You are in the middle of the kitchen. ...
//              Admissible actions: ...
//
// The reply is read as one action: the content of its last fenced block (```…```) if it has one, else the whole
// reply; lower-cased, whitespace collapsed, a trailing period and a leading "> " or "action:" dropped; "put X in R"
// and "put X on R" are read as ALFWorld's "put X in/on R". It must then be one of the admissible actions; else the
// text's lines are tried, and exactly one distinct admissible line is the action. Anything else is an invalid action:
// nothing changes, the observation says so ("Nothing happens.") and lists the admissible actions again.
//
// Task arguments (row fields or workflow_args): seed (default: the task's index), task_types (a list of world.ts's
// TASK_TYPES or one of them; default all six), max_rooms (2..4, default 4), min_solution_steps and
// max_solution_steps (only houses whose shortest plan has that many steps: the seed's next draw otherwise), plus the
// environment workflow's max_steps (default 30), experience_mode and invalid_action_penalty (default 0.1).
// Held-out layouts are held-out seeds (make-data's eval seeds; a seed is the same house on every machine).
import { WORKFLOWS } from '../../workflow-registry.js';
import type { Environment, EnvironmentStep } from '../environment.js';
import { environmentWorkflow } from '../environment.js';
import { intArg } from '../grid.js';
import {
  admissibleActions,
  applyAction,
  describeRoom,
  goalReached,
  type HouseholdState,
  initialState,
  stateKey,
} from './rules.js';
import { solveHousehold } from './solver.js';
import { generateHousehold, type Household, TASK_TYPES, type TaskType } from './world.js';

export const HOUSEHOLD_SYSTEM_PROMPT =
  'You are in a house. Reach the goal by acting in it, one action per turn. ' +
  'Reply with exactly one of the admissible actions.';

/** The observation: what happened, then the admissible actions (see the header). */
function observe(house: Household, state: HouseholdState, feedback: string): string {
  return `${feedback}\nAdmissible actions: ${admissibleActions(house, state).join(', ')}`;
}

const normalize = (text: string): string =>
  text
    .toLowerCase()
    .replace(/\s+/g, ' ')
    .trim()
    .replace(/^(?:>\s*|action:\s*)/, '')
    .replace(/\.$/, '')
    .replace(/^put (.+) (?:in|on) (.+)$/, 'put $1 in/on $2');

/** The admissible action a reply names, or null (see the header). */
export function parseHouseholdAction(reply: string, admissible: readonly string[]): string | null {
  const fenced = [...reply.matchAll(/```([\s\S]*?)```/g)].at(-1);
  const text = fenced !== undefined ? (fenced[1] ?? '') : reply;
  const whole = normalize(text);
  if (admissible.includes(whole)) return whole;
  const lines = new Set(
    text
      .split('\n')
      .map(normalize)
      .filter((line) => admissible.includes(line)),
  );
  return lines.size === 1 ? ([...lines][0] as string) : null;
}

export class HouseholdEnv implements Environment {
  readonly house: Household;
  state: HouseholdState;
  done = false;
  success = false;

  constructor(house: Household) {
    this.house = house;
    this.state = initialState(house);
  }

  reset(): string {
    this.state = initialState(this.house);
    this.done = false;
    this.success = false;
    return observe(this.house, this.state, `${describeRoom(this.house, this.state)}\nYour task is to: ${this.house.goal.text}`);
  }

  step(reply: string): EnvironmentStep {
    if (this.done) throw new Error('household: the episode is over (reset first)');
    const admissible = admissibleActions(this.house, this.state);
    const action = parseHouseholdAction(reply, admissible);
    if (action === null)
      return {
        observation: observe(this.house, this.state, 'Nothing happens. (Reply with one of the admissible actions.)'),
        reward: 0,
        done: false,
        invalidAction: true,
      };
    const { state, feedback } = applyAction(this.house, this.state, action);
    this.state = state;
    this.success = goalReached(this.house, state);
    this.done = this.success;
    return { observation: observe(this.house, state, feedback), reward: this.success ? 1 : 0, done: this.done };
  }

  /** The world state (rules.ts stateKey): the observation shows only what the agent sees, not the whole state. */
  stateKey(): string {
    return stateKey(this.state);
  }

  metrics(): Record<string, number> {
    return { success: this.success ? 1 : 0 };
  }
}

/** task_types as a row or workflow_args gives it: a list of task types or one. */
function taskTypesArg(value: unknown, who: string): TaskType[] {
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0 || !list.every((t) => TASK_TYPES.includes(t as TaskType)))
    throw new Error(`${who}: task_types must be one or a list of ${TASK_TYPES.join(', ')}; got ${JSON.stringify(value)}`);
  return list as TaskType[];
}

/** The house of a task from its arguments (see the header). */
export function householdFromArgs(args: Readonly<Record<string, unknown>>, defaults: { seed: number }): Household {
  const who = 'household_workflow';
  const minSteps = intArg(args, 'min_solution_steps', 0, who, 0, 1000);
  const maxSteps = args.max_solution_steps === undefined ? undefined : intArg(args, 'max_solution_steps', 0, who, 1, 1000);
  if (maxSteps !== undefined && maxSteps < minSteps)
    throw new Error(`${who}: max_solution_steps (${maxSteps}) is below min_solution_steps (${minSteps})`);
  const bounded = minSteps > 0 || maxSteps !== undefined;
  return generateHousehold({
    seed: intArg(args, 'seed', defaults.seed, who),
    ...(args.task_types !== undefined ? { taskTypes: taskTypesArg(args.task_types, who) } : {}),
    maxRooms: intArg(args, 'max_rooms', 4, who, 2, 4),
    ...(bounded
      ? {
          accept: (house: Household) => {
            const steps = solveHousehold(house, initialState(house))?.length;
            return steps !== undefined && steps >= minSteps && steps <= (maxSteps ?? Number.POSITIVE_INFINITY);
          },
        }
      : {}),
  });
}

export const householdWorkflow = environmentWorkflow(
  'household_workflow',
  ({ task, args }) => new HouseholdEnv(householdFromArgs(args, { seed: task.index })),
  {
    systemPrompt: HOUSEHOLD_SYSTEM_PROMPT,
    environmentArgs: ['seed', 'task_types', 'max_rooms', 'min_solution_steps', 'max_solution_steps'],
    layoutArgs: ['seed', 'task_types', 'max_rooms'],
    maxSteps: 30,
    invalidActionPenalty: 0.1,
    description: 'Household: an ALFWorld-style text house, one command per turn (reward 1 when the goal holds)',
  },
);

WORKFLOWS.register('household_workflow', householdWorkflow);
