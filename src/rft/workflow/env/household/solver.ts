// The household's expert: a breadth-first search over the world's own rules (rules.ts: admissibleActions and
// applyAction), so a plan it finds is one the environment accepts, and its length is the fewest steps the goal takes.
//
// The search skips actions that cannot bring the goal closer, which keeps the state space small without losing
// a shortest plan: look, inventory, examine and close change nothing the goal reads (closing only hides things);
// take is searched only for objects of the goal's kind (the agent starts empty-handed and needs no other object);
// put only of an object of another kind (somewhere, to free the hands: from a state the model reached) or into a
// receptacle of the goal's target kind; open only of a container that holds a goal-kind object or is of the target
// kind; clean / heat / cool and the lamp only when the goal's type uses them. A plan in the reduced space is a plan in
// the full one, and every shortest full plan maps to one no longer in the reduced space (drop the skipped actions).
import { admissibleActions, applyAction, goalReached, type HouseholdState, stateKey } from './rules.js';
import type { Household } from './world.js';

/** The goal-relevant actions of a state (see the header). */
function relevantActions(house: Household, state: HouseholdState): string[] {
  const { goal } = house;
  const goalObjects = new Set(house.objects.filter((o) => o.kind === goal.object).map((o) => o.name));
  const targetKind = (receptacle: string) => house.receptacles.find((r) => r.name === receptacle)?.kind === goal.target;
  const useful = (receptacle: string) =>
    targetKind(receptacle) || house.objects.some((o) => goalObjects.has(o.name) && state.location[o.name] === receptacle);
  const applianceVerb = {
    pick_clean_then_place: 'clean',
    pick_heat_then_place: 'heat',
    pick_cool_then_place: 'cool',
  }[goal.type as string];
  return admissibleActions(house, state).filter((action) => {
    const words = action.split(' ');
    const verb = words[0];
    if (verb === 'go') return true;
    if (verb === 'take') return goalObjects.has(`${words[1]} ${words[2]}`);
    if (verb === 'put') return !goalObjects.has(state.holding ?? '') || targetKind(words.slice(4).join(' '));
    if (verb === 'open') return useful(words.slice(1).join(' '));
    if (verb === 'use') return goal.type === 'look_at_obj_in_light';
    return verb === applianceVerb;
  });
}

/**
 * A shortest list of actions that reaches the goal from `state` (default the start), or null when none does within
 * `maxStates` searched states.
 */
export function solveHousehold(house: Household, state: HouseholdState, maxStates = 200_000): string[] | null {
  if (goalReached(house, state)) return [];
  const previous = new Map<string, { from: string; action: string } | null>([[stateKey(state), null]]);
  let frontier: HouseholdState[] = [state];
  while (frontier.length > 0) {
    const next: HouseholdState[] = [];
    for (const current of frontier) {
      const from = stateKey(current);
      for (const action of relevantActions(house, current)) {
        const after = applyAction(house, current, action).state;
        const key = stateKey(after);
        if (previous.has(key)) continue;
        previous.set(key, { from, action });
        if (goalReached(house, after)) {
          const plan: string[] = [];
          for (let at = previous.get(key); at; at = previous.get(at.from)) plan.push(at.action);
          return plan.reverse();
        }
        if (previous.size >= maxStates) return null;
        next.push(after);
      }
    }
    frontier = next;
  }
  return null;
}
