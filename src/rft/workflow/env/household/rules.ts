// The household's rules: the state of a house in play, the actions admissible in it (ALFWorld's text commands),
// what each does, what the agent is told, and when the goal holds.
//
// Commands (X an object, R a receptacle, ROOM a room; all lower case, as ALFWorld writes them):
//   go to R           walk to a receptacle of the room you are in
//   go to ROOM        walk to the middle of another room (or of this one, from one of its receptacles)
//   open R / close R  at a closed / open container                       take X from R   hands empty, R open or a surface
//   put X in/on R     holding X, at R, R open or a surface ("put X in R" and "put X on R" are read the same)
//   clean X with R    holding a cleanable X at a sinkbasin    heat X with R (microwave)    cool X with R (fridge)
//   use desklamp 1    at the receptacle the lamp stands on: turns it on or off
//   look, inventory, examine R (where you are), examine X (what you hold): change nothing
// The agent holds at most one object. An object's properties are the ones actions gave it: clean (cleaned at a
// sinkbasin), hot (heated; heating ends cold), cool (cooled; cooling ends hot).
//
// Goal (see world.ts): pick_*_place holds when an object of the goal's kind, with the property the type names,
// lies in a receptacle of the goal's kind; pick_two when two of them lie in one such receptacle;
// look_at_obj_in_light when the agent holds one with the desklamp on.
import type { Household, HouseObject, Receptacle, RoomName } from './world.js';
import { OBJECT_KINDS } from './world.js';

/** What changes during an episode. */
export interface HouseholdState {
  room: RoomName;
  /** The receptacle the agent stands at, or null (the middle of the room). */
  at: string | null;
  holding: string | null;
  /** Each object's receptacle (absent while held). */
  location: Record<string, string>;
  /** The containers that are open. */
  open: string[];
  clean: string[];
  hot: string[];
  cool: string[];
  lampOn: boolean;
}

export function initialState(house: Household): HouseholdState {
  return {
    room: house.startRoom,
    at: null,
    holding: null,
    location: { ...house.start },
    open: [],
    clean: [],
    hot: [],
    cool: [],
    lampOn: false,
  };
}

/**
 * The state as text, equal exactly when the states are equal (Environment.stateKey: GiGPO's anchor states). The
 * house (fixed for an episode) is not in it: states are compared within one task.
 */
export function stateKey(state: HouseholdState): string {
  const sorted = (names: readonly string[]) => [...names].sort().join(',');
  const objects = Object.keys(state.location)
    .sort()
    .map((name) => `${name}@${state.location[name]}`)
    .join(';');
  return [
    `room=${state.room}`,
    `at=${state.at ?? '-'}`,
    `holding=${state.holding ?? '-'}`,
    `objects=${objects}`,
    `open=${sorted(state.open)}`,
    `clean=${sorted(state.clean)}`,
    `hot=${sorted(state.hot)}`,
    `cool=${sorted(state.cool)}`,
    `lamp=${state.lampOn ? 'on' : 'off'}`,
  ].join('|');
}

const receptacleNamed = (house: Household, name: string | null): Receptacle | undefined =>
  house.receptacles.find((r) => r.name === name);

const reachable = (state: HouseholdState, receptacle: Receptacle): boolean =>
  !receptacle.container || state.open.includes(receptacle.name);

/** The objects in a receptacle, in the house's order. */
export function contents(house: Household, state: HouseholdState, receptacle: string): HouseObject[] {
  return house.objects.filter((o) => state.location[o.name] === receptacle);
}

/** "a mug 1, and a lamp"-style list, as ALFWorld writes what you see. */
function listing(names: readonly string[]): string {
  if (names.length === 0) return 'nothing';
  const items = names.map((n) => `a ${n}`);
  return items.length === 1 ? (items[0] as string) : `${items.slice(0, -1).join(', ')}, and ${items.at(-1)}`;
}

/** What the agent sees at a receptacle. */
export function describeReceptacle(house: Household, state: HouseholdState, receptacle: Receptacle): string {
  if (!reachable(state, receptacle)) return `The ${receptacle.name} is closed.`;
  const seen = contents(house, state, receptacle.name).map((o) => o.name);
  if (house.lamp === receptacle.name) seen.push('desklamp 1');
  return receptacle.container
    ? `The ${receptacle.name} is open. In it, you see ${listing(seen)}.`
    : `On the ${receptacle.name}, you see ${listing(seen)}.`;
}

/** What the agent sees from the middle of its room. */
export function describeRoom(house: Household, state: HouseholdState): string {
  const here = house.receptacles.filter((r) => r.room === state.room).map((r) => r.name);
  const doors = house.rooms.filter((r) => r !== state.room).map((r) => `the ${r}`);
  return `You are in the middle of the ${state.room}. Looking around you, you see ${listing(here)}. Doors lead to ${doors.join(', ')}.`;
}

/** Every action admissible in this state, sorted (ALFWorld lists its admissible commands sorted). */
export function admissibleActions(house: Household, state: HouseholdState): string[] {
  const actions = ['look', 'inventory'];
  for (const room of house.rooms) if (room !== state.room || state.at !== null) actions.push(`go to ${room}`);
  for (const r of house.receptacles) if (r.room === state.room && r.name !== state.at) actions.push(`go to ${r.name}`);
  const at = receptacleNamed(house, state.at);
  if (at !== undefined) {
    actions.push(`examine ${at.name}`);
    if (at.container) actions.push(`${state.open.includes(at.name) ? 'close' : 'open'} ${at.name}`);
    if (reachable(state, at)) {
      if (state.holding === null) for (const o of contents(house, state, at.name)) actions.push(`take ${o.name} from ${at.name}`);
      else actions.push(`put ${state.holding} in/on ${at.name}`);
    }
    if (house.lamp === at.name) actions.push('use desklamp 1');
    const held = house.objects.find((o) => o.name === state.holding);
    if (held !== undefined && at.appliance !== undefined) {
      const kind = OBJECT_KINDS[held.kind];
      const able = { clean: kind?.cleanable, heat: kind?.heatable, cool: kind?.coolable }[at.appliance];
      if (able) actions.push(`${at.appliance} ${held.name} with ${at.name}`);
    }
  }
  if (state.holding !== null) actions.push(`examine ${state.holding}`);
  return actions.sort();
}

const without = (names: readonly string[], name: string) => names.filter((n) => n !== name);

/**
 * Applies an admissible action (see admissibleActions): the new state and what the agent is told. An action that is
 * not admissible is the caller's error, not a no-op here.
 */
export function applyAction(
  house: Household,
  state: HouseholdState,
  action: string,
): { state: HouseholdState; feedback: string } {
  if (!admissibleActions(house, state).includes(action))
    throw new Error(`household: ${JSON.stringify(action)} is not admissible here`);
  const next: HouseholdState = { ...state, location: { ...state.location } };
  const words = action.split(' ');
  const verb = words[0] as string;
  if (verb === 'look')
    return {
      state,
      feedback: state.at === null ? describeRoom(house, state) : `You are at the ${state.at} in the ${state.room}.`,
    };
  if (verb === 'inventory')
    return {
      state,
      feedback: state.holding === null ? 'You are not carrying anything.' : `You are carrying: a ${state.holding}.`,
    };
  if (verb === 'go') {
    const where = words.slice(2).join(' ');
    const receptacle = receptacleNamed(house, where);
    if (receptacle === undefined) {
      next.room = where as RoomName;
      next.at = null;
      return { state: next, feedback: describeRoom(house, next) };
    }
    next.at = receptacle.name;
    return { state: next, feedback: `You arrive at the ${receptacle.name}. ${describeReceptacle(house, next, receptacle)}` };
  }
  const at = receptacleNamed(house, state.at) as Receptacle;
  if (verb === 'examine') {
    const name = words.slice(1).join(' ');
    if (name === at?.name) return { state, feedback: describeReceptacle(house, state, at) };
    const properties = [state.clean, state.hot, state.cool]
      .map((names, i) => (names.includes(name) ? ['clean', 'hot', 'cool'][i] : ''))
      .filter(Boolean);
    return { state, feedback: `This is a ${[...properties, name].join(' ')}.` };
  }
  if (verb === 'open') {
    next.open = [...state.open, at.name];
    return { state: next, feedback: `You open the ${at.name}. ${describeReceptacle(house, next, at)}` };
  }
  if (verb === 'close') {
    next.open = without(state.open, at.name);
    return { state: next, feedback: `You close the ${at.name}.` };
  }
  if (verb === 'take') {
    const name = `${words[1]} ${words[2]}`;
    delete next.location[name];
    next.holding = name;
    return { state: next, feedback: `You pick up the ${name} from the ${at.name}.` };
  }
  if (verb === 'put') {
    const name = state.holding as string;
    next.location[name] = at.name;
    next.holding = null;
    return { state: next, feedback: `You put the ${name} in/on the ${at.name}.` };
  }
  if (verb === 'use') {
    next.lampOn = !state.lampOn;
    return { state: next, feedback: `You turn ${next.lampOn ? 'on' : 'off'} the desklamp 1.` };
  }
  // clean / heat / cool X with R
  const name = state.holding as string;
  if (verb === 'clean') next.clean = [...without(state.clean, name), name];
  if (verb === 'heat') [next.hot, next.cool] = [[...without(state.hot, name), name], without(state.cool, name)];
  if (verb === 'cool') [next.cool, next.hot] = [[...without(state.cool, name), name], without(state.hot, name)];
  const done = { clean: 'clean', heat: 'heat', cool: 'cool' }[verb as 'clean' | 'heat' | 'cool'];
  return { state: next, feedback: `You ${done} the ${name} using the ${at.name}.` };
}

/** True when the house's goal holds in this state (see the header). */
export function goalReached(house: Household, state: HouseholdState): boolean {
  const { goal } = house;
  const ofKind = house.objects.filter((o) => o.kind === goal.object).map((o) => o.name);
  if (goal.type === 'look_at_obj_in_light') return state.lampOn && state.holding !== null && ofKind.includes(state.holding);
  const property = {
    pick_and_place: null,
    pick_two_obj_and_place: null,
    pick_clean_then_place: state.clean,
    pick_heat_then_place: state.hot,
    pick_cool_then_place: state.cool,
  }[goal.type];
  const placed = ofKind.filter(
    (name) =>
      receptacleNamed(house, state.location[name] ?? null)?.kind === goal.target &&
      (property === null || property.includes(name)),
  );
  if (goal.type !== 'pick_two_obj_and_place') return placed.length > 0;
  const perReceptacle = new Map<string, number>();
  for (const name of placed) {
    const where = state.location[name] as string;
    perReceptacle.set(where, (perReceptacle.get(where) ?? 0) + 1);
  }
  return [...perReceptacle.values()].some((count) => count >= 2);
}
