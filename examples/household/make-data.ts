// Generates the household example's data: houses named by seed (household_workflow builds the house from its seed),
// in three disjoint sets.
//   sft.jsonl    expert demonstrations: whole episodes played by the BFS expert (shortest plans), as chat messages
//   train.jsonl  houses for GRPO ({seed})
//   eval.jsonl   held-out houses, never trained on (seeds 0.., and no train or SFT house has an eval house's layout)
// Usage: node --import tsx examples/household/make-data.ts OUT_DIR [--max-rooms N] [--max-steps N] [--train N] ...
import { parseArgs } from 'node:util';
import {
  generateHousehold,
  HOUSEHOLD_SYSTEM_PROMPT,
  HouseholdEnv,
  seededEpisodeData,
  solveHousehold,
  writeJsonlSets,
} from 'trinity-rft/rft';

export function makeHouseholdData(options: { maxRooms: number; maxSteps: number; train: number; eval: number; sft: number }) {
  const house = (seed: number) => generateHousehold({ seed, maxRooms: options.maxRooms });
  // the expert's plan for each episode, computed at its first step and followed (the expert's own moves never
  // leave it)
  const plans = new WeakMap<HouseholdEnv, string[]>();
  return seededEpisodeData({
    counts: options,
    // the layout: the whole house (rooms, receptacles, where everything starts, the lamp, the goal)
    layout: (seed) => JSON.stringify(house(seed)),
    environment: (seed) => new HouseholdEnv(house(seed)),
    expert: (env) => {
      let plan = plans.get(env);
      if (plan === undefined) {
        plan = solveHousehold(env.house, env.state) ?? ['look'];
        plans.set(env, plan);
      }
      return plan.shift() ?? 'look';
    },
    systemPrompt: HOUSEHOLD_SYSTEM_PROMPT,
    maxSteps: options.maxSteps,
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      'max-rooms': { type: 'string', default: '4' },
      'max-steps': { type: 'string', default: '30' },
      train: { type: 'string', default: '1000' },
      eval: { type: 'string', default: '100' },
      sft: { type: 'string', default: '200' },
    },
  });
  const out = positionals[0];
  if (!out) throw new Error('usage: make-data.ts OUT_DIR [--max-rooms N] [--max-steps N] [--train N] [--eval N] [--sft N]');
  const data = await makeHouseholdData({
    maxRooms: Number(values['max-rooms']),
    maxSteps: Number(values['max-steps']),
    train: Number(values.train),
    eval: Number(values.eval),
    sft: Number(values.sft),
  });
  writeJsonlSets(out, data);
  console.log(
    `wrote ${out}: ${data.sft.length} expert episodes, ${data.train.length} GRPO houses, ${data.eval.length} eval houses`,
  );
}
