// Multi-turn environment workflows: the base (one episode per run, one experience per episode or per step) and the
// built-in environments.
import '../registry.js'; // the built-in workflows' list first: it, not this file, decides their registration order
export * from './environment.js';
export * from './frozen-lake.js';
export * from './gomoku.js';
export * from './grid.js';
export * from './household/household.js';
export {
  admissibleActions as householdAdmissibleActions,
  type HouseholdState,
  initialState as initialHouseholdState,
} from './household/rules.js';
export { householdObservingExpert, observingExpertPlan } from './household/searcher.js';
export { solveHousehold } from './household/solver.js';
export {
  generateHousehold,
  type Household,
  type HouseholdParams,
  TASK_TYPES as HOUSEHOLD_TASK_TYPES,
  type TaskType as HouseholdTaskType,
} from './household/world.js';
export * from './sokoban.js';
