// Slurm's task environment as the torchrun environment. `srun trinity run --config F` starts one process per task
// with Slurm's variables and none of torchrun's; each becomes one rank:
//
//   RANK              = SLURM_PROCID
//   WORLD_SIZE        = SLURM_NTASKS (SLURM_NPROCS on old Slurm)
//   LOCAL_RANK        = SLURM_LOCALID
//   LOCAL_WORLD_SIZE  = this node's entry of SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE ("2(x3),1": 2 tasks
//                       on each of nodes 0-2, 1 on node 3), indexed by SLURM_NODEID; else SLURM_NTASKS_PER_NODE
//   MASTER_ADDR       = MASTER_ADDR if set, else the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST /
//                       SLURM_NODELIST, in Slurm's compressed host list syntax ("node[01-03,07],gpu5")
//   MASTER_PORT       = MASTER_PORT if set, else 29500 (torchrun's default)
//
// A torchrun variable that is set wins over Slurm's (torchrun or `trinity run --nnodes` under srun sets them for its
// ranks). Errors name the Slurm variable.

/** The port rank 0 serves the rendezvous on when MASTER_PORT is not set (torchrun's default). */
export const DEFAULT_MASTER_PORT = 29500;

/**
 * Expands Slurm's compressed host list: comma-separated names, each with bracketed ranges and single values
 * (zero padding kept: "n[08-10]" is n08 n09 n10), several brackets in one name multiply ("r[1-2]-n[1-2]": r1-n1 r1-n2
 * r2-n1 r2-n2). Order is kept. A malformed list is an error naming `variable` and what is wrong.
 */
export function expandSlurmHostList(list: string, variable = 'SLURM_NODELIST'): string[] {
  const bad = (why: string) => new Error(`${variable}=${JSON.stringify(list)}: ${why}`);
  const names: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i <= list.length; i++) {
    const c = list[i];
    if (c === '[') {
      if (++depth > 1) throw bad(`nested '[' at character ${i + 1}`);
    } else if (c === ']') {
      if (--depth < 0) throw bad(`']' at character ${i + 1} closes no '['`);
    } else if ((c === ',' && depth === 0) || i === list.length) {
      if (depth > 0) throw bad(`'[' without its ']'`);
      const name = list.slice(start, i).trim();
      if (name === '') throw bad(`an empty host name at character ${start + 1}`);
      names.push(name);
      start = i + 1;
    }
  }
  return names.flatMap((name) => expandName(name, bad));
}

/** One name with its bracket groups: the product of the groups' values, left to right. */
function expandName(name: string, bad: (why: string) => Error): string[] {
  const open = name.indexOf('[');
  if (open < 0) return [name];
  const close = name.indexOf(']', open);
  const prefix = name.slice(0, open);
  const values = name
    .slice(open + 1, close)
    .split(',')
    .flatMap((part) => expandRange(part.trim(), name, bad));
  const rests = expandName(name.slice(close + 1), bad);
  return values.flatMap((value) => rests.map((rest) => `${prefix}${value}${rest}`));
}

/** "07" -> ["07"]; "01-03" -> ["01", "02", "03"] (the width of the start is kept). */
function expandRange(part: string, name: string, bad: (why: string) => Error): string[] {
  const match = /^(\d+)(?:-(\d+))?$/.exec(part);
  if (match === null) throw bad(`'${part}' in ${name} is not a number or a range a-b`);
  const [, from, to] = match as unknown as [string, string, string | undefined];
  if (to === undefined) return [from];
  const first = Number(from);
  const last = Number(to);
  if (last < first) throw bad(`the range ${part} in ${name} ends before it starts`);
  if (last - first >= 100_000) throw bad(`the range ${part} in ${name} has more than 100000 hosts`);
  const width = from.length;
  return Array.from({ length: last - first + 1 }, (_, i) => String(first + i).padStart(width, '0'));
}

/** Expands SLURM_TASKS_PER_NODE's syntax: "2(x3),1" -> [2, 2, 2, 1]. */
export function expandSlurmTasksPerNode(value: string, variable = 'SLURM_TASKS_PER_NODE'): number[] {
  return value.split(',').flatMap((part) => {
    const match = /^\s*(\d+)(?:\(x(\d+)\))?\s*$/.exec(part);
    if (match === null || Number(match[1]) < 1)
      throw new Error(`${variable}=${JSON.stringify(value)}: '${part}' is not a task count n or n(xk) with n >= 1`);
    return Array.from({ length: Number(match[2] ?? 1) }, () => Number(match[1]));
  });
}

/** Whether `env` is a Slurm task's (srun sets SLURM_PROCID and SLURM_NTASKS for each task). */
export function isSlurmTask(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env.SLURM_PROCID) && Boolean(env.SLURM_NTASKS ?? env.SLURM_NPROCS);
}

/**
 * The torchrun variables a Slurm task stands for (see the header); `env` itself when torchrun's WORLD_SIZE is set or
 * this is no Slurm task. The result is `env` with the variables added, for readTorchrunEnv's checks.
 */
export function torchrunEnvFromSlurm(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  if (env.WORLD_SIZE || !isSlurmTask(env)) return env;
  const ntasksName = env.SLURM_NTASKS ? 'SLURM_NTASKS' : 'SLURM_NPROCS';
  const ntasks = slurmInteger(env, ntasksName, 1);
  const out: NodeJS.ProcessEnv = {
    ...env,
    RANK: String(slurmInteger(env, 'SLURM_PROCID', 0)),
    WORLD_SIZE: String(ntasks),
  };
  if (ntasks === 1) return out;
  if (env.SLURM_LOCALID) out.LOCAL_RANK = String(slurmInteger(env, 'SLURM_LOCALID', 0));
  const local = localWorldSize(env);
  if (local !== null) out.LOCAL_WORLD_SIZE = String(local);
  if (!env.MASTER_ADDR) {
    const listName = ['SLURM_STEP_NODELIST', 'SLURM_JOB_NODELIST', 'SLURM_NODELIST'].find((name) => env[name]);
    if (listName === undefined)
      throw new Error(
        `Slurm task ${env.SLURM_PROCID} of ${ntasks}: neither MASTER_ADDR nor SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST is set: no host for rank 0's rendezvous`,
      );
    out.MASTER_ADDR = expandSlurmHostList(env[listName] as string, listName)[0];
  }
  if (!env.MASTER_PORT) out.MASTER_PORT = String(DEFAULT_MASTER_PORT);
  return out;
}

/** This node's task count: its entry of the tasks-per-node list (by SLURM_NODEID), else SLURM_NTASKS_PER_NODE. */
function localWorldSize(env: NodeJS.ProcessEnv): number | null {
  const listName = ['SLURM_STEP_TASKS_PER_NODE', 'SLURM_TASKS_PER_NODE'].find((name) => env[name]);
  if (listName !== undefined) {
    const counts = expandSlurmTasksPerNode(env[listName] as string, listName);
    const node = env.SLURM_NODEID ? slurmInteger(env, 'SLURM_NODEID', 0) : 0;
    const count = counts[node];
    if (count === undefined)
      throw new Error(`SLURM_NODEID=${node} but ${listName}=${JSON.stringify(env[listName])} lists ${counts.length} nodes`);
    return count;
  }
  return env.SLURM_NTASKS_PER_NODE ? slurmInteger(env, 'SLURM_NTASKS_PER_NODE', 1) : null;
}

function slurmInteger(env: NodeJS.ProcessEnv, name: string, min: number): number {
  const raw = (env[name] ?? '').trim();
  const value = /^\d+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < min)
    throw new RangeError(`${name}=${JSON.stringify(env[name])} is not an integer >= ${min}`);
  return value;
}
