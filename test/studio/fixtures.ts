// Runs on disk for the Studio's tests and benchmark, written with the writers `trinity run` uses so they cannot
// drift: JsonlMonitor (metrics.jsonl), writeEvalSamples (eval_samples.jsonl), SqliteBuffer (buffer.db),
// writeBufferRecord (buffer.json, as the stage writes it when it opens its shared buffer), writeCharTokenizer (the
// final model's tokenizer), appendAdvantages (trainer_advantages.jsonl); stages.json and done.json as
// src/rft/run/run.ts writes them.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import type { Experience } from '../../src/rft/experience.js';
import { writeBufferRecord } from '../../src/rft/buffer/buffer-record.js';
import { SqliteBuffer } from '../../src/rft/buffer/sqlite.js';
import { ADVANTAGES_FILE, appendAdvantages } from '../../src/rft/monitor/advantage-record.js';
import { JsonlMonitor } from '../../src/rft/monitor/monitor.js';
import { writeEvalSamples } from '../../src/rft/explorer/evaluation.js';
import type { Task } from '../../src/rft/task.js';
import { Tokenizer, writeCharTokenizer } from '../../src/tokenizer/index.js';

export interface StageSpec {
  name: string;
  steps: number;
  /** Stage finished (done.json written). */
  done?: boolean;
  /** Eval steps (eval_samples.jsonl). */
  evalSteps?: number[];
  /** Tasks per step and responses per task in buffer.db (0: no buffer). */
  tasksPerStep?: number;
  repeats?: number;
  /**
   * Where the buffer goes, relative to the stage folder (default 'buffer.db', beside the stage's files). A run's
   * shared SQLite buffer is at 'buffer/experience_buffer.db' unless its config sets a path (src/rft/buffer/config.ts).
   */
  bufferAt?: string;
  /** Also write the stage's buffer.json naming the buffer (table experiences), as the run's stage does. */
  recordBuffer?: boolean;
  /** Write final_model/tokenizer.json (token texts in the rollout view). */
  tokenizer?: boolean;
  /**
   * The advantages as a GRPO run keeps them: not in the buffer's experiences but in the stage's
   * trainer_advantages.jsonl (appendAdvantages, one line per step), each rollout's mean advantage.
   */
  trainerAdvantages?: boolean;
}

/** metric value at step s of stage k: a known function, so tests can check what is drawn. */
export const rewardAt = (step: number) => Math.min(1, step / 50);
export const lossAt = (step: number) => 2 / (1 + step);

/** Writes a run under root/project/name; returns its job folder. */
export async function writeRun(root: string, project: string, name: string, stages: StageSpec[]): Promise<string> {
  const jobDir = join(root, project, name);
  mkdirSync(jobDir, { recursive: true });
  writeFileSync(join(jobDir, 'stages.json'), `${JSON.stringify(stages.map((s) => s.name))}\n`);
  for (const stage of stages) {
    const dir = join(jobDir, stage.name);
    const monitor = new JsonlMonitor(join(dir, 'metrics.jsonl'));
    for (let step = 1; step <= stage.steps; step++)
      monitor.log(step, { 'rollout/reward/mean': rewardAt(step), 'actor/loss': lossAt(step) });
    if (stage.tokenizer) writeCharTokenizer(join(dir, 'final_model'));
    for (const step of stage.evalSteps ?? []) writeEvalSamples(dir, step, evaluation(step));
    if ((stage.tasksPerStep ?? 0) > 0) {
      const file = join(dir, stage.bufferAt ?? 'buffer.db');
      mkdirSync(dirname(file), { recursive: true });
      await writeBuffer(file, stage.steps, stage.tasksPerStep ?? 0, stage.repeats ?? 2, stage.trainerAdvantages ? dir : null);
      if (stage.recordBuffer) writeBufferRecord(dir, file, 'experiences');
    }
    if (stage.done)
      writeFileSync(join(dir, 'done.json'), `${JSON.stringify({ finalModelDir: null, steps: stage.steps }, null, 2)}\n`);
  }
  return jobDir;
}

/** Appends one metrics line to a stage, as the run's trainer loop does. */
export function appendMetrics(stageDir: string, step: number): void {
  new JsonlMonitor(join(stageDir, 'metrics.jsonl')).log(step, {
    'rollout/reward/mean': rewardAt(step),
    'actor/loss': lossAt(step),
  });
}

function evaluation(step: number) {
  const tasks: Task[] = [0, 1, 2].map((i) => ({
    id: `eval:${i}`,
    taskset: 'eval',
    index: i,
    raw: {},
    prompt: `${i}+${i}=`,
    response: String(2 * i),
  }));
  const experiences: Experience[] = tasks.map((t, i) => ({
    eid: `eval-${step}-${i}`,
    tokens: [1, 2, 3],
    promptLength: 2,
    info: { taskId: t.id },
    responseText: step === 0 ? `wrong ${i}` : String(2 * i),
    reward: step === 0 ? 0 : 1,
  }));
  return { tasks, experiences, metrics: {} };
}

const tokenizer = (() => {
  const dir = join(process.env.TMPDIR ?? '/tmp', `studio-tok-${process.pid}`);
  writeCharTokenizer(dir);
  return Tokenizer.load(dir);
})();

/**
 * Rollouts per step and task: task t's responses at step s have reward (t + r) % 2 for repeat r, responses of
 * length 3 + r (repeat r = 2 is truncated: finish reason length); the last task of each step is a two-turn
 * conversation whose tool reply (action mask 0) sits between the assistant's turns.
 */
export function makeExperiences(steps: number, tasksPerStep: number, repeats: number): Experience[] {
  const out: Experience[] = [];
  for (let step = 1; step <= steps; step++)
    for (let t = 0; t < tasksPerStep; t++)
      for (let r = 0; r < repeats; r++) {
        const prompt = tokenizer.encode(`Q${t}: ${t}+${step}=`);
        const multiTurn = t === tasksPerStep - 1 && tasksPerStep > 1;
        const text = multiTurn ? 'call|tool:42|ok' : 'abcdefgh'.slice(0, 3 + r);
        const response = tokenizer.encode(text);
        const actionMask = response.map((_, i) => (multiTurn && i >= 5 && i < 12 ? 0 : 1));
        const reward = (t + r) % 2;
        out.push({
          eid: `s${step}-t${t}-r${r}`,
          tokens: [...prompt, ...response],
          promptLength: prompt.length,
          logprobs: response.map((_, i) => -0.1 * (i + 1)),
          advantages: response.map(() => reward - 0.5),
          actionMask,
          reward,
          info: { step, taskId: `task-${t}`, runId: r, modelVersion: step - 1 },
          promptText: `Q${t}: ${t}+${step}=`,
          responseText: text,
          ...(r === 2 ? { truncateStatus: 'response_truncated' as const } : {}),
          ...(multiTurn
            ? {
                messages: [
                  { role: 'user', content: `Q${t}: ${t}+${step}=` },
                  { role: 'assistant', content: 'call' },
                  { role: 'tool', content: 'tool:42' },
                  { role: 'assistant', content: 'ok' },
                ],
              }
            : {}),
        });
      }
  return out;
}

/** `advantagesDir`: the advantages go to its trainer_advantages.jsonl instead of the experiences (StageSpec). */
async function writeBuffer(
  file: string,
  steps: number,
  tasksPerStep: number,
  repeats: number,
  advantagesDir: string | null,
): Promise<void> {
  const buffer = new SqliteBuffer({ path: file });
  try {
    let all = makeExperiences(steps, tasksPerStep, repeats);
    if (advantagesDir !== null) {
      for (let step = 1; step <= steps; step++) {
        const trained = all.filter((e) => e.info.step === step).map((e) => [e.eid, e.advantages?.[0] ?? 0] as const);
        appendAdvantages(join(advantagesDir, ADVANTAGES_FILE), step, new Map(trained));
      }
      all = all.map(({ advantages: _, ...e }) => e);
    }
    for (let i = 0; i < all.length; i += 1000) await buffer.write(all.slice(i, i + 1000));
  } finally {
    await buffer.close();
  }
}

/** A run id as the Studio names it. */
export const runId = (root: string, jobDir: string) => relative(root, jobDir).split('\\').join('/');
