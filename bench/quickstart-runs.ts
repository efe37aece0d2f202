// What the benchmarks that run the whole quickstart share (bench/quickstart-seeds.bench.ts: seeds × thread counts;
// bench/on-policy-learning.bench.ts: seeds × trainer.bitwise_on_policy off/on): one `trinity quickstart` run from
// scratch in a child process, and the figures read back from its job folder's metrics.
//
// Figures of one run, from <job>/grpo/metrics.jsonl and <job>/sft/done.json:
//   afterSft, afterGrpo   held-out greedy accuracy (eval/eval/mean@1) at the GRPO stage's first and last evaluation
//   gain                  afterGrpo − afterSft
//   pass8*                eval/eval_sampled/pass@8 at the same two evaluations
//   sftSteps              the steps SFT took before its stop rule (trainer.stop_when) ended it
import { spawn } from 'node:child_process';
import { cpSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { now, repoRoot, secondsSince } from './harness.js';

/** One quickstart run's figures (see the header). */
export interface QuickstartFigures {
  sftSteps: number;
  afterSft: number;
  afterGrpo: number;
  gain: number;
  pass8AfterSft: number;
  pass8AfterGrpo: number;
  /** Wall-clock minutes of the whole command. */
  minutes: number;
}

type Line = Record<string, number>;
const lines = (file: string): Line[] =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);

/** The job folder of `trinity quickstart` with job name `name` (runs/quickstart/<name> in this repository). */
export const quickstartJobDir = (name: string): string => join(repoRoot, 'runs', 'quickstart', name);

/**
 * `trinity quickstart --seed S --threads T --set name=<name> [--set k=v]...` from scratch (its job folder removed
 * first; the seed's model folder is reused: `trinity model init` is deterministic), its output shown; the figures.
 * `finishedStages`: stages another run of the same seed finished (`from`: its job folder, `stages`: their folder
 * names), copied in first so that this run skips them (their done.json) and starts from their final model.
 */
export async function runQuickstart(
  seed: number,
  threads: number,
  name: string,
  sets: readonly string[] = [],
  finishedStages?: { from: string; stages: readonly string[] },
): Promise<QuickstartFigures> {
  const jobDir = quickstartJobDir(name);
  rmSync(jobDir, { recursive: true, force: true });
  for (const stage of finishedStages?.stages ?? [])
    cpSync(join(finishedStages?.from as string, stage), join(jobDir, stage), { recursive: true });
  const args = ['quickstart', '--seed', String(seed), '--threads', String(threads), '--set', `name=${name}`];
  for (const set of sets) args.push('--set', set);
  const t0 = now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'trinity.js'), ...args], {
      cwd: repoRoot,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    child.on('error', reject);
    child.on('exit', (code, signal) =>
      code === 0 ? resolve() : reject(new Error(`trinity ${args.join(' ')}: ${signal ?? `exit ${code}`}`)),
    );
  });
  return quickstartFigures(jobDir, secondsSince(t0) / 60);
}

/** The figures of the finished run in `jobDir` (see the header). */
export function quickstartFigures(jobDir: string, minutes: number): QuickstartFigures {
  const evals = lines(join(jobDir, 'grpo', 'metrics.jsonl')).filter((l) => l['eval/eval/mean@1'] !== undefined);
  const first = evals[0];
  const last = evals.at(-1);
  if (first?.step !== 0 || last === undefined) throw new Error(`${jobDir}/grpo/metrics.jsonl: no evaluation at step 0 and after`);
  const afterSft = first['eval/eval/mean@1'] as number;
  const afterGrpo = last['eval/eval/mean@1'] as number;
  return {
    sftSteps: JSON.parse(readFileSync(join(jobDir, 'sft', 'done.json'), 'utf8')).steps as number,
    afterSft,
    afterGrpo,
    gain: afterGrpo - afterSft,
    pass8AfterSft: first['eval/eval_sampled/pass@8'] as number,
    pass8AfterGrpo: last['eval/eval_sampled/pass@8'] as number,
    minutes,
  };
}
