// The household's observing expert: a demonstrator that acts only on what the agent has seen, so that a policy which
// reads the same observations can learn its episodes on a house it has never seen (solver.ts's breadth-first expert
// knows where every object lies and walks straight to it, which on a new house is a guess, not a skill).
//
// Until it holds an object of the goal's kind it searches: it visits, in a fixed order, the receptacles where such an
// object can start (world.ts: the object kind's `places` in its `rooms`; never one of the goal's target kind, where
// no goal object starts), the current room's first in the order the room lists them, then the next room's (in the
// house's room order), opening each closed container it reaches, and takes the first goal object it sees (one that
// is not already in a receptacle of the target kind, which pick_two's first object is once placed). What it knows is
// the world state restricted to the receptacles it has seen into (only the agent moves objects, so a receptacle looks
// as it looked when seen, unless the agent changed it). Holding a goal object, it follows the breadth-first expert
// (solver.ts) from there: the rest of the plan needs only receptacle names (the goal's target kind, the appliance,
// the desklamp's stand), not where the objects lie. Holding anything else (after a random ε action) it also follows
// the breadth-first expert, which puts it down on the way.
import { applyAction, goalReached, type HouseholdState } from './rules.js';
import { solveHousehold } from './solver.js';
import { type Household, OBJECT_KINDS, type Receptacle } from './world.js';

/**
 * A new observing expert for one episode in `house` (see the header): called with the state the agent acts from
 * (each observation's), it returns the next action, an admissible one. It remembers the receptacles seen into.
 */
export function householdObservingExpert(house: Household): (state: HouseholdState) => string {
  const seenInto = new Set<string>();
  const { goal } = house;
  const kind = OBJECT_KINDS[goal.object];
  const searchOrder = house.receptacles.filter(
    (r) => kind?.places.includes(r.kind) && kind.rooms.includes(r.room) && r.kind !== goal.target,
  );
  const kindOf = (receptacle: string | undefined) => house.receptacles.find((r) => r.name === receptacle)?.kind;
  const walkTo = (state: HouseholdState, r: Receptacle) => (r.room === state.room ? `go to ${r.name}` : `go to ${r.room}`);
  const breadthFirst = (state: HouseholdState) => solveHousehold(house, state)?.[0] ?? 'look';

  return (state) => {
    const here = house.receptacles.find((r) => r.name === state.at);
    if (here !== undefined && (!here.container || state.open.includes(here.name))) seenInto.add(here.name);
    if (state.holding !== null) return breadthFirst(state);
    // the goal objects it has seen that still need moving, where they lie now
    const known = house.objects.filter((o) => {
      const where = state.location[o.name];
      return o.kind === goal.object && where !== undefined && seenInto.has(where) && kindOf(where) !== goal.target;
    });
    const atHand = known.find((o) => state.location[o.name] === state.at);
    if (atHand !== undefined && here !== undefined && seenInto.has(here.name)) return `take ${atHand.name} from ${here.name}`;
    const seenElsewhere = known[0];
    if (seenElsewhere !== undefined)
      return walkTo(state, house.receptacles.find((r) => r.name === state.location[seenElsewhere.name]) as Receptacle);
    if (here?.container && !seenInto.has(here.name) && searchOrder.includes(here)) return `open ${here.name}`;
    const unseen = searchOrder.filter((r) => !seenInto.has(r.name));
    const next = unseen.find((r) => r.room === state.room) ?? unseen[0];
    return next === undefined ? breadthFirst(state) : walkTo(state, next);
  };
}

/** The observing expert's episode from the start as its list of actions, at most `maxSteps` (fewer when it succeeds). */
export function observingExpertPlan(house: Household, state: HouseholdState, maxSteps: number): string[] {
  const expert = householdObservingExpert(house);
  const plan: string[] = [];
  for (let current = state; plan.length < maxSteps && !goalReached(house, current); ) {
    const action = expert(current);
    plan.push(action);
    current = applyAction(house, current, action).state; // throws if the action is not admissible
  }
  return plan;
}
