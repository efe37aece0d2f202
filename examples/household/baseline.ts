// Reference points for the household example, without a model, on its held-out houses (data/eval.jsonl seeds):
// the expert's shortest plans (length per task type), the observing expert's episodes (searcher.ts: it searches
// until it sees a goal object, as a policy that reads only the observations must), and the success rate of a policy that picks a uniformly random
// admissible action each turn (the floor a trained model should clear), within max_steps commands.
// Usage: node --import tsx examples/household/baseline.ts [--max-steps N] [--episodes N] (per house, random policy)
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  generateHousehold,
  HouseholdEnv,
  householdAdmissibleActions,
  initialHouseholdState,
  observingExpertPlan,
  playEpisode,
  seededRandom,
  solveHousehold,
} from 'trinity-rft/rft';

const { values } = parseArgs({
  options: { 'max-steps': { type: 'string', default: '20' }, episodes: { type: 'string', default: '10' } },
});
const maxSteps = Number(values['max-steps']);
const episodes = Number(values.episodes);
const evalFile = join(dirname(fileURLToPath(import.meta.url)), 'data', 'eval.jsonl');
const seeds = readFileSync(evalFile, 'utf8')
  .trim()
  .split('\n')
  .map((line) => (JSON.parse(line) as { seed: number }).seed);

const byType = new Map<string, { plans: number[]; observing: number[]; randomWins: number; randomEpisodes: number }>();
for (const seed of seeds) {
  const house = generateHousehold({ seed });
  const row = byType.get(house.goal.type) ?? { plans: [], observing: [], randomWins: 0, randomEpisodes: 0 };
  byType.set(house.goal.type, row);
  row.plans.push(solveHousehold(house, initialHouseholdState(house))?.length ?? Number.NaN);
  row.observing.push(observingExpertPlan(house, initialHouseholdState(house), 100).length);
  for (let episode = 0; episode < episodes; episode++) {
    const random = seededRandom(seed, episode);
    const env = new HouseholdEnv(house);
    const played = await playEpisode(
      env,
      () => {
        const actions = householdAdmissibleActions(house, env.state);
        return actions[Math.floor(random() * actions.length)] as string;
      },
      { maxSteps },
    );
    row.randomWins += played.reward;
    row.randomEpisodes++;
  }
}

const percent = (x: number) => `${(100 * x).toFixed(1)}%`;
const range = (xs: readonly number[]) =>
  `${Math.min(...xs)} / ${(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(1)} / ${Math.max(...xs)}`;
console.log(
  `| task type | houses | expert plan: min / mean / max | observing expert: min / mean / max | random policy success (${maxSteps} steps) |`,
);
console.log('| --- | --- | --- | --- | --- |');
let [wins, total] = [0, 0];
const allPlans: number[] = [];
const allObserving: number[] = [];
for (const [type, row] of [...byType].sort()) {
  console.log(
    `| ${type} | ${row.plans.length} | ${range(row.plans)} | ${range(row.observing)} | ${percent(row.randomWins / row.randomEpisodes)} |`,
  );
  wins += row.randomWins;
  total += row.randomEpisodes;
  allPlans.push(...row.plans);
  allObserving.push(...row.observing);
}
const meanPlan = allPlans.reduce((a, b) => a + b, 0) / allPlans.length;
console.log(`| all | ${allPlans.length} | ${range(allPlans)} | ${range(allObserving)} | ${percent(wins / total)} |`);
console.log(
  JSON.stringify({
    houses: allPlans.length,
    max_steps: maxSteps,
    expert_plan_mean: meanPlan,
    observing_expert_mean: allObserving.reduce((a, b) => a + b, 0) / allObserving.length,
    random_success: wins / total,
  }),
);
