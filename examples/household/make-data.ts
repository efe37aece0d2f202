// Generates the household example's data: houses named by seed (household_workflow builds the house from its seed
// and the house arguments below, which the config's workflow_args must repeat), in three disjoint sets.
//   sft.jsonl    demonstrations as chat messages: whole episodes played by the BFS expert (shortest plans: it knows
//                where every object lies), or with --demonstrator observing by the observing expert (searcher.ts:
//                it searches the receptacles in a fixed order until it sees a goal object, then follows the BFS
//                expert; learnable from the observations on a new house), or with --epsilon E by an ε-greedy
//                version of either: at each turn, with probability E a uniformly random admissible action, else the
//                expert's next action from the state it is in (the BFS expert replans after every random action);
//                with E > 0 episodes are kept whether they reach the goal or not (imperfect demonstrations), with
//                E = 0 only solved ones
//   train.jsonl  houses for RL ({seed})
//   eval.jsonl   held-out houses, never trained on (seeds 0.., and no train or SFT house has an eval house's layout)
// House arguments, as the workflow reads them (householdFromArgs): --max-rooms N, --task-types a,b,
// --max-solution-steps N.
// Usage: node --import tsx examples/household/make-data.ts OUT_DIR [--max-rooms N] [--task-types T,...]
//          [--max-solution-steps N] [--demonstrator shortest|observing] [--epsilon E] [--max-steps N] [--train N] [--eval N] [--sft N]
import { parseArgs } from 'node:util';
import {
  HOUSEHOLD_SYSTEM_PROMPT,
  HouseholdEnv,
  householdAdmissibleActions,
  householdFromArgs,
  householdObservingExpert,
  seededEpisodeData,
  seededRandom,
  solveHousehold,
  writeJsonlSets,
} from 'trinity-rft/rft';

export interface HouseholdDataOptions {
  maxRooms: number;
  /** The task types (default: all six). */
  taskTypes?: string[];
  /** Only houses whose shortest plan has at most this many steps (default: any). */
  maxSolutionSteps?: number;
  /** The demonstrator (default 'shortest': the BFS expert; 'observing': the observing expert, see the header). */
  demonstrator?: HouseholdDemonstratorKind;
  /** Probability that the demonstrator takes a random admissible action instead of the expert's (default 0). */
  epsilon?: number;
  maxSteps: number;
  train: number;
  eval: number;
  sft: number;
}

export type HouseholdDemonstratorKind = 'shortest' | 'observing';

/**
 * The ε-greedy demonstrator of one episode (see the header): its next reply in `env`. The BFS expert keeps its plan
 * from the state it was made in while it follows it, and replans after a random action; the observing expert reads
 * the state each turn (what it has seen into stays remembered).
 */
export function householdDemonstrator(
  epsilon: number,
  random: () => number,
  kind: HouseholdDemonstratorKind = 'shortest',
): (env: HouseholdEnv) => string {
  let plan: string[] = [];
  let observing: ((state: HouseholdEnv['state']) => string) | undefined;
  return (env) => {
    if (epsilon > 0 && random() < epsilon) {
      plan = [];
      const actions = householdAdmissibleActions(env.house, env.state);
      return actions[Math.floor(random() * actions.length)] as string;
    }
    if (kind === 'observing') {
      observing ??= householdObservingExpert(env.house);
      return observing(env.state);
    }
    if (plan.length === 0) plan = solveHousehold(env.house, env.state) ?? ['look'];
    return plan.shift() as string;
  };
}

export function makeHouseholdData(options: HouseholdDataOptions) {
  const epsilon = options.epsilon ?? 0;
  // the workflow's own reading of the house arguments, so the data and the runs build the same house from a seed
  const houseArgs = {
    max_rooms: options.maxRooms,
    ...(options.taskTypes !== undefined ? { task_types: options.taskTypes } : {}),
    ...(options.maxSolutionSteps !== undefined ? { max_solution_steps: options.maxSolutionSteps } : {}),
  };
  const house = (seed: number) => householdFromArgs({ ...houseArgs, seed }, { seed });
  const demonstrators = new WeakMap<HouseholdEnv, (env: HouseholdEnv) => string>();
  return seededEpisodeData({
    counts: options,
    // the layout: the whole house (rooms, receptacles, where everything starts, the lamp, the goal)
    layout: (seed) => JSON.stringify(house(seed)),
    environment: (seed) => {
      const env = new HouseholdEnv(house(seed));
      demonstrators.set(env, householdDemonstrator(epsilon, seededRandom(seed, 0xe95), options.demonstrator));
      return env;
    },
    expert: (env) => (demonstrators.get(env) as (env: HouseholdEnv) => string)(env),
    systemPrompt: HOUSEHOLD_SYSTEM_PROMPT,
    maxSteps: options.maxSteps,
    keepFailed: epsilon > 0,
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      'max-rooms': { type: 'string', default: '4' },
      'task-types': { type: 'string' },
      'max-solution-steps': { type: 'string' },
      demonstrator: { type: 'string', default: 'shortest' },
      epsilon: { type: 'string', default: '0' },
      'max-steps': { type: 'string', default: '30' },
      train: { type: 'string', default: '1000' },
      eval: { type: 'string', default: '100' },
      sft: { type: 'string', default: '200' },
    },
  });
  const out = positionals[0];
  if (!out)
    throw new Error(
      'usage: make-data.ts OUT_DIR [--max-rooms N] [--task-types T,...] [--max-solution-steps N] [--demonstrator shortest|observing] [--epsilon E] [--max-steps N] [--train N] [--eval N] [--sft N]',
    );
  if (values.demonstrator !== 'shortest' && values.demonstrator !== 'observing')
    throw new Error(`--demonstrator must be shortest or observing, got '${values.demonstrator}'`);
  const data = await makeHouseholdData({
    maxRooms: Number(values['max-rooms']),
    ...(values['task-types'] !== undefined ? { taskTypes: values['task-types'].split(',') } : {}),
    ...(values['max-solution-steps'] !== undefined ? { maxSolutionSteps: Number(values['max-solution-steps']) } : {}),
    demonstrator: values.demonstrator,
    epsilon: Number(values.epsilon),
    maxSteps: Number(values['max-steps']),
    train: Number(values.train),
    eval: Number(values.eval),
    sft: Number(values.sft),
  });
  writeJsonlSets(out, data);
  console.log(`wrote ${out}: ${data.sft.length} demonstrations, ${data.train.length} RL houses, ${data.eval.length} eval houses`);
}
