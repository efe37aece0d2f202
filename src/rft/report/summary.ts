// The run at a glance: per stage the steps trained, the reward at the first and last step, and each eval metric at
// the stage's first and last eval (step 0 of a stage = the weights the previous stage left: base → after SFT → ...).
import { type MetricsRow, type RunData, readRun, type StageData } from './read.js';

export const REWARD_KEY = 'rollout/reward/mean';

export const isEvalKey = (key: string) => key.startsWith('eval/');

export interface StepValue {
  step: number;
  value: number;
}

export interface StageSummary {
  stage: string;
  /** The last step with training metrics (0: the stage has none, e.g. mode bench). */
  steps: number;
  /** The highest step of any line (training or eval). */
  lastStep: number;
  /** rollout/reward/mean at the first and last step that has it (null: never logged). */
  rewardFirst: StepValue | null;
  rewardLast: StepValue | null;
  /** Every eval key of the stage: its value at the first and the last step that has it. */
  eval: Record<string, { start: StepValue; end: StepValue }>;
  /** Lines of eval_samples.jsonl. */
  samples: number;
}

/** Rows sorted by step; lines of the same step keep their file order. */
export const sortedRows = (rows: readonly MetricsRow[]) => [...rows].sort((a, b) => a.step - b.step);

/** A training line carries a metric other than eval/*. */
const isTrainingRow = (row: MetricsRow) => Object.keys(row.metrics).some((k) => !isEvalKey(k));

export function summarizeStage(stage: StageData): StageSummary {
  const rows = sortedRows(stage.rows);
  const training = rows.filter(isTrainingRow);
  const rewards = rows.flatMap((r) =>
    REWARD_KEY in r.metrics ? [{ step: r.step, value: r.metrics[REWARD_KEY] as number }] : [],
  );
  const evals: StageSummary['eval'] = {};
  for (const row of rows)
    for (const [key, value] of Object.entries(row.metrics)) {
      if (!isEvalKey(key)) continue;
      const point = { step: row.step, value };
      const entry = evals[key];
      if (entry === undefined) evals[key] = { start: point, end: point };
      else entry.end = point;
    }
  return {
    stage: stage.name,
    steps: training.at(-1)?.step ?? 0,
    lastStep: rows.at(-1)?.step ?? 0,
    rewardFirst: rewards[0] ?? null,
    rewardLast: rewards.at(-1) ?? null,
    eval: evals,
    samples: stage.samples.length,
  };
}

export const summarizeStages = (run: RunData): StageSummary[] => run.stages.map(summarizeStage);

/** Reads the job folder (see ./read.ts) and summarises each stage, in run order. */
export async function summarizeRun(jobDir: string): Promise<StageSummary[]> {
  return summarizeStages(await readRun(jobDir));
}

/**
 * The eval keys that measure accuracy: eval/<taskset>/mean@n, each followed by its pass@n when n > 1 (a sampled eval:
 * how often one of the n answers is right); all eval keys when there is no mean@n.
 */
export function accuracyKeys(rows: readonly StageSummary[]): string[] {
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r.eval)))];
  const means = keys.filter((k) => /\/mean@\d+$/.test(k));
  if (means.length === 0) return keys;
  return means.flatMap((mean) => {
    const n = Number(mean.slice(mean.lastIndexOf('@') + 1));
    const pass = `${mean.slice(0, mean.lastIndexOf('/'))}/pass@${n}`;
    return n > 1 && keys.includes(pass) ? [mean, pass] : [mean];
  });
}

/**
 * One accuracy key through the run, each value labelled by where its eval sits: step 0 of the first stage is
 * "base", step 0 of a later stage "after <previous stage>"; the last step of a stage is "after <stage>" unless the
 * next stage starts with its own eval (that one is the stage's final weights: an eval during a stage runs with the
 * explorer's weights, which may trail the trainer by a sync); any other step is "<stage> step n".
 */
export function evalProgression(rows: readonly StageSummary[], key: string): { label: string; value: number }[] {
  const out: { label: string; value: number }[] = [];
  rows.forEach((row, i) => {
    const entry = row.eval[key];
    if (entry === undefined) return;
    const nextStartsWithEval = rows[i + 1]?.eval[key]?.start.step === 0;
    const label = (point: StepValue) => {
      if (point.step === 0) return i === 0 ? 'base' : `after ${rows[i - 1]?.stage}`;
      if (point.step === row.lastStep && !nextStartsWithEval) return `after ${row.stage}`;
      return `${row.stage} step ${point.step}`;
    };
    out.push({ label: label(entry.start), value: entry.start.value });
    if (entry.end.step !== entry.start.step) out.push({ label: label(entry.end), value: entry.end.value });
  });
  return out;
}

/** A metric value for tables: 3 decimals (1 from 100 up, an exponent below 0.001); '—' for none. */
export function formatNumber(value: number | null | undefined): string {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  if (value !== 0 && Math.abs(value) < 1e-3) return value.toExponential(2);
  return value.toFixed(Math.abs(value) >= 100 ? 1 : 3);
}

/** Header and cells of the summary table (shared by the terminal and the HTML table). */
export function summaryTable(rows: readonly StageSummary[]): { header: string[]; cells: string[][] } {
  const keys = accuracyKeys(rows);
  const header = ['stage', 'steps', 'reward first', 'reward last', ...keys.map((k) => `${k.slice('eval/'.length)} start → end`)];
  const cells = rows.map((row) => [
    row.stage,
    String(row.steps),
    formatNumber(row.rewardFirst?.value),
    formatNumber(row.rewardLast?.value),
    ...keys.map((k) => {
      const entry = row.eval[k];
      if (entry === undefined) return '—';
      if (entry.start.step === entry.end.step) return formatNumber(entry.end.value);
      return `${formatNumber(entry.start.value)} → ${formatNumber(entry.end.value)}`;
    }),
  ]);
  return { header, cells };
}

/**
 * The summary as aligned text columns, then one line per accuracy key through the run:
 *
 *   stage  steps  reward first  reward last  math/mean@4 start → end
 *   sft        3             —            —                        —
 *   grpo       4         0.100        0.600            0.250 → 0.625
 *
 *   math/mean@4: after sft 0.250 → after grpo 0.625
 */
export function formatSummaryTable(rows: readonly StageSummary[]): string {
  const { header, cells } = summaryTable(rows);
  const widths = header.map((h, c) => Math.max(h.length, ...cells.map((r) => (r[c] ?? '').length)));
  const line = (values: readonly string[]) =>
    values
      .map((v, c) => (c === 0 ? v.padEnd(widths[c] ?? 0) : v.padStart(widths[c] ?? 0)))
      .join('  ')
      .trimEnd();
  const out = [line(header), ...cells.map(line)];
  const progressions = accuracyKeys(rows)
    .map((key) => ({ key, points: evalProgression(rows, key) }))
    .filter((p) => p.points.length > 1);
  if (progressions.length) out.push('');
  for (const { key, points } of progressions)
    out.push(`${key.slice('eval/'.length)}: ${points.map((p) => `${p.label} ${formatNumber(p.value)}`).join(' → ')}`);
  return `${out.join('\n')}\n`;
}
