// The household world (in the style of ALFWorld's text worlds): what a house is made of and how one is generated.
//
// A house has 2 to 4 rooms (always the kitchen; the living room, bedroom and bathroom by chance). Each room has
// receptacles of the kinds it allows, numbered per kind across the house as ALFWorld numbers them ("cabinet 3",
// "drawer 5"). A receptacle is a surface (countertop, desk: always reachable) or a container (cabinet, drawer, fridge,
// microwave: closed until opened). Three are appliances: a sinkbasin cleans, a microwave heats, a fridge cools. A
// desklamp stands on a desk, sidetable or dresser when the house has one. Objects ("mug 2", "book 1") lie in
// receptacles of the kinds their catalogue entry names, and have properties: cleanable, heatable, coolable, and
// examinable (looked at under the desklamp).
//
// The goal is one of ALFWorld's six task types, over object and receptacle kinds (any mug, any coffeemachine):
//   pick_and_place   put an X in/on a Y               pick_clean_then_place  clean an X, put it in/on a Y
//   pick_heat_then_place  heat an X, put it in/on a Y  pick_cool_then_place   cool an X, put it in/on a Y
//   look_at_obj_in_light  hold an X with the desklamp turned on
//   pick_two_obj_and_place  put two Xs in/on one Y
// No object of the goal's kind starts in a receptacle of the goal's kind, so no goal holds at the start.
//
// A house is a pure function of its parameters (seed, task types, room count): generateHousehold draws from
// seededRandom(seed, ...) only, so a seed is a layout on every machine, and held-out layouts are held-out seeds.
import { seededRandom } from '../../../buffer/random.js';

export type RoomName = 'kitchen' | 'livingroom' | 'bedroom' | 'bathroom';
export const ROOMS: readonly RoomName[] = ['kitchen', 'livingroom', 'bedroom', 'bathroom'];

export type Appliance = 'clean' | 'heat' | 'cool';

interface ReceptacleKind {
  container: boolean;
  appliance?: Appliance;
}

/** Receptacle kinds: containers open and close; an appliance cleans, heats or cools what the agent holds there. */
export const RECEPTACLE_KINDS: Readonly<Record<string, ReceptacleKind>> = {
  countertop: { container: false },
  cabinet: { container: true },
  drawer: { container: true },
  fridge: { container: true, appliance: 'cool' },
  microwave: { container: true, appliance: 'heat' },
  sinkbasin: { container: false, appliance: 'clean' },
  stoveburner: { container: false },
  coffeemachine: { container: false },
  diningtable: { container: false },
  garbagecan: { container: false },
  sofa: { container: false },
  coffeetable: { container: false },
  sidetable: { container: false },
  shelf: { container: false },
  tvstand: { container: false },
  bed: { container: false },
  desk: { container: false },
  dresser: { container: false },
  toilet: { container: false },
  towelholder: { container: false },
  bathtubbasin: { container: false },
};

/** Each room's receptacle kinds with how many of each it gets: [kind, fewest, most]. */
const ROOM_FURNITURE: Readonly<Record<RoomName, readonly (readonly [string, number, number])[]>> = {
  kitchen: [
    ['countertop', 1, 2],
    ['cabinet', 1, 4],
    ['drawer', 1, 3],
    ['fridge', 1, 1],
    ['microwave', 1, 1],
    ['sinkbasin', 1, 1],
    ['stoveburner', 1, 2],
    ['coffeemachine', 1, 1],
    ['diningtable', 0, 1],
    ['garbagecan', 1, 1],
  ],
  livingroom: [
    ['sofa', 1, 1],
    ['coffeetable', 1, 1],
    ['sidetable', 0, 2],
    ['shelf', 1, 3],
    ['tvstand', 0, 1],
    ['drawer', 0, 2],
  ],
  bedroom: [
    ['bed', 1, 1],
    ['desk', 1, 1],
    ['dresser', 1, 1],
    ['sidetable', 1, 2],
    ['shelf', 0, 2],
    ['drawer', 1, 3],
  ],
  bathroom: [
    ['sinkbasin', 1, 1],
    ['countertop', 1, 1],
    ['cabinet', 1, 3],
    ['toilet', 1, 1],
    ['towelholder', 1, 1],
    ['garbagecan', 1, 1],
    ['bathtubbasin', 0, 1],
  ],
};

/** The receptacle kinds a desklamp stands on. */
const LAMP_STANDS: readonly string[] = ['desk', 'sidetable', 'dresser'];

export interface ObjectKind {
  /** The rooms it is found in. */
  rooms: readonly RoomName[];
  /** Receptacle kinds it starts in (in those rooms). */
  places: readonly string[];
  /** Receptacle kinds a goal may ask it to be put in/on. */
  targets: readonly string[];
  cleanable?: boolean;
  heatable?: boolean;
  coolable?: boolean;
  /** Looked at under the desklamp (look_at_obj_in_light). */
  examinable?: boolean;
}

/** Object kinds (ALFWorld's names): where they lie, where goals put them, what can be done to them. */
export const OBJECT_KINDS: Readonly<Record<string, ObjectKind>> = {
  mug: {
    rooms: ['kitchen', 'livingroom', 'bedroom'],
    places: ['countertop', 'cabinet', 'diningtable', 'coffeemachine', 'sinkbasin', 'shelf', 'desk'],
    targets: ['coffeemachine', 'cabinet', 'shelf', 'countertop', 'diningtable', 'desk'],
    cleanable: true,
    heatable: true,
    coolable: true,
    examinable: true,
  },
  cup: {
    rooms: ['kitchen'],
    places: ['countertop', 'cabinet', 'diningtable', 'fridge', 'sinkbasin'],
    targets: ['cabinet', 'countertop', 'diningtable', 'shelf'],
    cleanable: true,
    heatable: true,
    coolable: true,
  },
  apple: {
    rooms: ['kitchen'],
    places: ['countertop', 'diningtable', 'fridge', 'garbagecan'],
    targets: ['countertop', 'diningtable', 'garbagecan'],
    cleanable: true,
    heatable: true,
    coolable: true,
  },
  potato: {
    rooms: ['kitchen'],
    places: ['countertop', 'fridge', 'diningtable', 'stoveburner'],
    targets: ['countertop', 'diningtable', 'garbagecan'],
    cleanable: true,
    heatable: true,
    coolable: true,
  },
  egg: {
    rooms: ['kitchen'],
    places: ['countertop', 'fridge'],
    targets: ['countertop', 'diningtable', 'garbagecan'],
    heatable: true,
    coolable: true,
  },
  tomato: {
    rooms: ['kitchen'],
    places: ['countertop', 'fridge', 'diningtable'],
    targets: ['countertop', 'diningtable', 'garbagecan'],
    cleanable: true,
    heatable: true,
    coolable: true,
  },
  plate: {
    rooms: ['kitchen'],
    places: ['cabinet', 'countertop', 'diningtable'],
    targets: ['cabinet', 'countertop', 'diningtable'],
    cleanable: true,
    heatable: true,
    coolable: true,
  },
  bowl: {
    rooms: ['kitchen', 'livingroom'],
    places: ['cabinet', 'countertop', 'diningtable', 'shelf'],
    targets: ['cabinet', 'countertop', 'diningtable', 'shelf'],
    cleanable: true,
    coolable: true,
    examinable: true,
  },
  knife: {
    rooms: ['kitchen'],
    places: ['countertop', 'drawer', 'diningtable'],
    targets: ['countertop', 'drawer', 'diningtable'],
    cleanable: true,
  },
  spoon: {
    rooms: ['kitchen'],
    places: ['drawer', 'countertop'],
    targets: ['drawer', 'countertop', 'diningtable'],
    cleanable: true,
  },
  pan: {
    rooms: ['kitchen'],
    places: ['stoveburner', 'cabinet', 'countertop'],
    targets: ['stoveburner', 'countertop', 'cabinet'],
    cleanable: true,
  },
  lettuce: {
    rooms: ['kitchen'],
    places: ['fridge', 'countertop'],
    targets: ['countertop', 'diningtable'],
    cleanable: true,
    coolable: true,
  },
  bread: {
    rooms: ['kitchen'],
    places: ['countertop', 'diningtable'],
    targets: ['countertop', 'diningtable'],
    heatable: true,
    coolable: true,
  },
  book: {
    rooms: ['livingroom', 'bedroom'],
    places: ['bed', 'desk', 'shelf', 'sidetable', 'coffeetable', 'sofa'],
    targets: ['bed', 'desk', 'shelf', 'sidetable'],
    examinable: true,
  },
  pen: {
    rooms: ['livingroom', 'bedroom'],
    places: ['desk', 'drawer', 'sidetable', 'shelf'],
    targets: ['desk', 'drawer', 'shelf'],
    examinable: true,
  },
  pencil: {
    rooms: ['livingroom', 'bedroom'],
    places: ['desk', 'drawer'],
    targets: ['desk', 'drawer', 'shelf'],
    examinable: true,
  },
  cellphone: {
    rooms: ['livingroom', 'bedroom'],
    places: ['bed', 'desk', 'sidetable', 'dresser', 'sofa'],
    targets: ['bed', 'desk', 'dresser', 'sidetable'],
    examinable: true,
  },
  keychain: {
    rooms: ['livingroom', 'bedroom'],
    places: ['sidetable', 'dresser', 'drawer', 'coffeetable'],
    targets: ['sidetable', 'dresser', 'drawer'],
    examinable: true,
  },
  creditcard: {
    rooms: ['livingroom', 'bedroom'],
    places: ['desk', 'drawer', 'coffeetable', 'sidetable'],
    targets: ['desk', 'drawer', 'dresser'],
    examinable: true,
  },
  alarmclock: {
    rooms: ['livingroom', 'bedroom'],
    places: ['desk', 'sidetable', 'dresser', 'shelf'],
    targets: ['desk', 'dresser', 'shelf'],
    examinable: true,
  },
  cd: {
    rooms: ['livingroom', 'bedroom'],
    places: ['desk', 'drawer', 'shelf'],
    targets: ['desk', 'drawer', 'shelf'],
    examinable: true,
  },
  remotecontrol: {
    rooms: ['livingroom'],
    places: ['sofa', 'coffeetable', 'tvstand', 'sidetable'],
    targets: ['sofa', 'coffeetable', 'sidetable'],
  },
  pillow: { rooms: ['livingroom', 'bedroom'], places: ['bed', 'sofa'], targets: ['bed', 'sofa'] },
  vase: {
    rooms: ['livingroom'],
    places: ['shelf', 'coffeetable', 'sidetable'],
    targets: ['shelf', 'coffeetable'],
    examinable: true,
  },
  soapbar: {
    rooms: ['bathroom'],
    places: ['countertop', 'bathtubbasin', 'toilet', 'cabinet'],
    targets: ['countertop', 'cabinet', 'toilet', 'garbagecan'],
    cleanable: true,
  },
  cloth: {
    rooms: ['bathroom'],
    places: ['countertop', 'cabinet', 'bathtubbasin', 'towelholder'],
    targets: ['countertop', 'cabinet'],
    cleanable: true,
  },
  toiletpaper: { rooms: ['bathroom'], places: ['toilet', 'cabinet', 'countertop'], targets: ['toilet', 'cabinet', 'countertop'] },
  spraybottle: { rooms: ['bathroom'], places: ['cabinet', 'countertop', 'toilet'], targets: ['cabinet', 'countertop', 'toilet'] },
  candle: {
    rooms: ['bathroom', 'livingroom'],
    places: ['cabinet', 'countertop', 'shelf'],
    targets: ['cabinet', 'countertop', 'shelf'],
  },
};

export type TaskType =
  | 'pick_and_place'
  | 'pick_clean_then_place'
  | 'pick_heat_then_place'
  | 'pick_cool_then_place'
  | 'look_at_obj_in_light'
  | 'pick_two_obj_and_place';

export const TASK_TYPES: readonly TaskType[] = [
  'pick_and_place',
  'pick_clean_then_place',
  'pick_heat_then_place',
  'pick_cool_then_place',
  'look_at_obj_in_light',
  'pick_two_obj_and_place',
];

/** The object property a task type needs (and the appliance that gives it). */
const NEEDS: Readonly<Partial<Record<TaskType, keyof ObjectKind>>> = {
  pick_clean_then_place: 'cleanable',
  pick_heat_then_place: 'heatable',
  pick_cool_then_place: 'coolable',
  look_at_obj_in_light: 'examinable',
};

export interface Receptacle {
  /** "cabinet 3" */
  name: string;
  kind: string;
  room: RoomName;
  container: boolean;
  appliance?: Appliance;
}

export interface HouseObject {
  /** "mug 2" */
  name: string;
  kind: string;
}

export interface Goal {
  type: TaskType;
  /** The object kind (e.g. mug). */
  object: string;
  /** The receptacle kind it goes in/on (absent for look_at_obj_in_light). */
  target?: string;
  /** The goal as the agent reads it: "put a clean mug in coffeemachine." */
  text: string;
}

/** A generated house: its fixed parts and where everything starts. */
export interface Household {
  rooms: RoomName[];
  receptacles: Receptacle[];
  objects: HouseObject[];
  /** The receptacle the desklamp stands on, or null (no lamp in this house). */
  lamp: string | null;
  /** Each object's starting receptacle, by object name. */
  start: Record<string, string>;
  /** The room the agent starts in (in its middle, at no receptacle). */
  startRoom: RoomName;
  goal: Goal;
}

export interface HouseholdParams {
  seed: number;
  /** The task types to draw from (default all six). */
  taskTypes?: readonly TaskType[];
  /** At most this many rooms (2..4, default 4); the kitchen is always one. */
  maxRooms?: number;
  /** Only houses this accepts (e.g. by the length of their shortest plan); the seed's next draw otherwise. */
  accept?: (house: Household) => boolean;
}

/** The goal as ALFWorld phrases it. */
function goalText(type: TaskType, object: string, target = ''): string {
  switch (type) {
    case 'pick_and_place':
      return `put a ${object} in/on ${target}.`;
    case 'pick_clean_then_place':
      return `put a clean ${object} in/on ${target}.`;
    case 'pick_heat_then_place':
      return `put a hot ${object} in/on ${target}.`;
    case 'pick_cool_then_place':
      return `put a cool ${object} in/on ${target}.`;
    case 'look_at_obj_in_light':
      return `look at ${object} under the desklamp.`;
    case 'pick_two_obj_and_place':
      return `put two ${object} in/on ${target}.`;
  }
}

/** A house with a reachable goal; the same params always give the same house (see the header). */
export function generateHousehold(params: HouseholdParams): Household {
  const { seed, taskTypes = TASK_TYPES, maxRooms = 4, accept } = params;
  if (taskTypes.length === 0) throw new RangeError('household: task_types must name at least one task type');
  for (const type of taskTypes)
    if (!TASK_TYPES.includes(type))
      throw new RangeError(`household: unknown task type ${JSON.stringify(type)} (task types: ${TASK_TYPES.join(', ')})`);
  if (!Number.isInteger(maxRooms) || maxRooms < 2 || maxRooms > 4)
    throw new RangeError(`household: max_rooms must be an integer in [2, 4], got ${maxRooms}`);
  const random = seededRandom(seed, maxRooms, ...taskTypes.map((t) => TASK_TYPES.indexOf(t)));
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const between = (low: number, high: number) => low + Math.floor(random() * (high - low + 1));
  for (let attempt = 0; attempt < 200; attempt++) {
    const type = pick(taskTypes);
    // rooms: the kitchen and 1..maxRooms-1 others; the lamp's room for look_at_obj_in_light
    const others = ROOMS.slice(1).filter(() => random() < 0.6);
    if (type === 'look_at_obj_in_light' && !others.includes('bedroom') && !others.includes('livingroom'))
      others.push(pick(['bedroom', 'livingroom'] as const));
    while (others.length > maxRooms - 1) others.splice(Math.floor(random() * others.length), 1);
    if (others.length === 0) others.push(pick(ROOMS.slice(1)));
    const rooms: RoomName[] = ['kitchen', ...others];
    const receptacles = furnish(rooms, between);
    const stands = receptacles.filter((r) => LAMP_STANDS.includes(r.kind));
    const lamp = stands.length > 0 ? pick(stands).name : null;
    const goal = drawGoal(type, receptacles, lamp, pick);
    if (goal === null) continue;
    const placed = placeObjects(goal, receptacles, between, pick);
    if (placed === null) continue;
    const house: Household = { rooms, receptacles, ...placed, lamp, startRoom: pick(rooms), goal };
    if (accept === undefined || accept(house)) return house;
  }
  throw new Error(`household: no house found for seed ${seed}`);
}

/** Each room's receptacles, numbered per kind across the house. */
function furnish(rooms: readonly RoomName[], between: (low: number, high: number) => number): Receptacle[] {
  const counts = new Map<string, number>();
  const receptacles: Receptacle[] = [];
  for (const room of rooms)
    for (const [kind, fewest, most] of ROOM_FURNITURE[room]) {
      const { container, appliance } = RECEPTACLE_KINDS[kind] as ReceptacleKind;
      for (let i = between(fewest, most); i > 0; i--) {
        const number = (counts.get(kind) ?? 0) + 1;
        counts.set(kind, number);
        receptacles.push({ name: `${kind} ${number}`, kind, room, container, ...(appliance ? { appliance } : {}) });
      }
    }
  return receptacles;
}

/** An object of this kind may start in this receptacle. */
const fits = (kind: ObjectKind, receptacle: Receptacle): boolean =>
  kind.rooms.includes(receptacle.room) && kind.places.includes(receptacle.kind);

/** A goal of this type the house can hold, or null. */
function drawGoal(
  type: TaskType,
  receptacles: readonly Receptacle[],
  lamp: string | null,
  pick: <T>(items: readonly T[]) => T,
): Goal | null {
  const kinds = new Set(receptacles.map((r) => r.kind));
  const need = NEEDS[type];
  if (type === 'look_at_obj_in_light' && lamp === null) return null;
  const appliance = { cleanable: 'sinkbasin', heatable: 'microwave', coolable: 'fridge' } as Record<string, string>;
  const candidates = Object.entries(OBJECT_KINDS).filter(
    ([, kind]) =>
      receptacles.some((r) => fits(kind, r)) &&
      (need === undefined || kind[need] === true) &&
      (need === undefined || appliance[need] === undefined || kinds.has(appliance[need] as string)) &&
      (type === 'look_at_obj_in_light' || kind.targets.some((t) => kinds.has(t))),
  );
  if (candidates.length === 0) return null;
  const [object, kind] = pick(candidates);
  if (type === 'look_at_obj_in_light') return { type, object, text: goalText(type, object) };
  const targets = kind.targets.filter((t) => kinds.has(t) && receptacles.some((r) => r.kind !== t && fits(kind, r)));
  if (targets.length === 0) return null;
  const target = pick(targets);
  return { type, object, target, text: goalText(type, object, target) };
}

/** The objects and their starting receptacles: the goal's object (two for pick_two) and 6..12 others. */
function placeObjects(
  goal: Goal,
  receptacles: readonly Receptacle[],
  between: (low: number, high: number) => number,
  pick: <T>(items: readonly T[]) => T,
): { objects: HouseObject[]; start: Record<string, string> } | null {
  const objects: HouseObject[] = [];
  const start: Record<string, string> = {};
  const counts = new Map<string, number>();
  const add = (kind: string): boolean => {
    // a goal-kind object never starts in a receptacle of the goal's target kind
    const allowed = receptacles.filter(
      (r) => fits(OBJECT_KINDS[kind] as ObjectKind, r) && !(kind === goal.object && r.kind === goal.target),
    );
    if (allowed.length === 0) return false;
    const number = (counts.get(kind) ?? 0) + 1;
    counts.set(kind, number);
    const name = `${kind} ${number}`;
    objects.push({ name, kind });
    start[name] = pick(allowed).name;
    return true;
  };
  for (let i = goal.type === 'pick_two_obj_and_place' ? 2 : 1; i > 0; i--) if (!add(goal.object)) return null;
  const present = Object.entries(OBJECT_KINDS)
    .filter(([, kind]) => receptacles.some((r) => fits(kind, r)))
    .map(([name]) => name);
  for (let i = between(6, 12); i > 0; i--) add(pick(present));
  return { objects, start };
}
