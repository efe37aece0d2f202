// The run report: one self-contained HTML file (inline CSS and SVG, no scripts, nothing fetched) with the summary
// table, line charts over steps and a table of sampled eval problems answered before and after training.
//
// Stages share one step axis, one after another: stage i's step s is drawn at x = offset_i + s, where
//   offset_0 = 0,   offset_i = offset_(i−1) + (highest step of stage i−1)
// so step 0 of a stage (an eval of the weights the previous stage left) sits on the boundary between the two.
//
// Every value drawn is also in <script type="application/json" id="report-data">: the metrics lines as read from
// metrics.jsonl and, per chart, the [x, value] points of each line.
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { type ChartSegment, escapeXml, extent, type LineChart, PALETTE, renderLineChart } from './chart.js';
import { type EvalSample, type MetricsRow, type RunData, readRun, type StageData } from './read.js';
import {
  accuracyKeys,
  evalProgression,
  formatNumber,
  isEvalKey,
  REWARD_KEY,
  type StageSummary,
  sortedRows,
  summarizeStages,
  summaryTable,
} from './summary.js';

export interface ReportOptions {
  title?: string;
  /** Sampled problems in the table (default 8). */
  maxSamples?: number;
  /** A sampled answer is correct when its reward is at least this (default 1, as the eval's pass@k). */
  correctThreshold?: number;
}

export interface ChartData {
  id: string;
  title: string;
  /** One entry per metric key and stage: [x on the shared step axis, the value in metrics.jsonl]. */
  series: { key: string; stage: string; points: [number, number][] }[];
}

/** What the report shows, as embedded in its report-data block. */
export interface ReportData {
  title: string;
  jobDir: string;
  /** In run order; `rows` are the lines of metrics.jsonl ({step, time, ...metrics}). */
  stages: { name: string; offset: number; rows: Record<string, number>[] }[];
  summary: StageSummary[];
  charts: ChartData[];
  warnings: string[];
}

interface ChartSpec {
  id: string;
  title: string;
  yLabel: string;
  keys: string[];
  /** Draw mean ± std of this pair as a band. */
  band?: { mean: string; std: string };
  yDomain?: [number, number];
  /** Shown as an empty chart (with a note) when no line has its keys; otherwise left out. */
  required: boolean;
}

const BASE_CHARTS: ChartSpec[] = [
  {
    id: 'reward',
    title: 'Reward (rollout mean ± std)',
    yLabel: 'reward',
    keys: [REWARD_KEY],
    band: { mean: REWARD_KEY, std: 'rollout/reward/std' },
    required: true,
  },
  {
    id: 'response-length',
    title: 'Response length (mean tokens)',
    yLabel: 'tokens',
    keys: ['rollout/response_length/mean'],
    required: true,
  },
  { id: 'kl', title: 'KL divergence (actor/kl)', yLabel: 'KL', keys: ['actor/kl'], required: true },
  { id: 'entropy', title: 'Entropy (actor/entropy)', yLabel: 'entropy', keys: ['actor/entropy'], required: true },
  { id: 'loss', title: 'Loss', yLabel: 'loss', keys: ['actor/loss', 'actor/pg_loss'], required: true },
  { id: 'grad-norm', title: 'Gradient norm', yLabel: 'norm', keys: ['actor/grad_norm'], required: false },
  { id: 'lr', title: 'Learning rate', yLabel: 'lr', keys: ['actor/lr'], required: false },
];

/** eval/<taskset>/<metric> → [taskset, metric]. */
function splitEvalKey(key: string): [string, string] {
  const cut = key.lastIndexOf('/');
  return [key.slice('eval/'.length, cut), key.slice(cut + 1)];
}

/** mean@n, then pass@k, best@k, worst@k (k ascending), then anything else. */
function evalMetricOrder(metric: string): [number, number] {
  const match = /^(mean|pass|best|worst)@(\d+)$/.exec(metric);
  if (!match) return [4, 0];
  return [['mean', 'pass', 'best', 'worst'].indexOf(match[1] as string), Number(match[2])];
}

/** One accuracy chart per eval taskset, its metrics as lines; [0, 1] when every value lies there. */
function evalCharts(stages: readonly StageData[]): ChartSpec[] {
  const byTaskset = new Map<string, string[]>();
  for (const stage of stages)
    for (const row of stage.rows)
      for (const key of Object.keys(row.metrics)) {
        if (!isEvalKey(key)) continue;
        const [taskset] = splitEvalKey(key);
        const keys = byTaskset.get(taskset) ?? [];
        if (!keys.includes(key)) keys.push(key);
        byTaskset.set(taskset, keys);
      }
  if (byTaskset.size === 0)
    return [{ id: 'eval', title: 'Eval accuracy', yLabel: 'accuracy', keys: ['eval/<taskset>/mean@<n>'], required: true }];
  return [...byTaskset].map(([taskset, keys]) => {
    keys.sort((a, b) => {
      const [ka, na] = evalMetricOrder(splitEvalKey(a)[1]);
      const [kb, nb] = evalMetricOrder(splitEvalKey(b)[1]);
      return ka - kb || na - nb || a.localeCompare(b);
    });
    const values = stages.flatMap((s) => s.rows.flatMap((r) => keys.flatMap((k) => r.metrics[k] ?? [])));
    const unit = values.every((v) => v >= 0 && v <= 1);
    return {
      id: `eval-${taskset.replace(/[^A-Za-z0-9_-]/g, '_')}`,
      title: `Eval accuracy: ${taskset}`,
      yLabel: 'accuracy',
      keys,
      ...(unit ? { yDomain: [0, 1] as [number, number] } : {}),
      required: true,
    };
  });
}

/** Where each stage starts on the shared step axis (see the header). */
export function stageOffsets(stages: readonly StageData[]): number[] {
  const offsets: number[] = [];
  let offset = 0;
  for (const stage of stages) {
    offsets.push(offset);
    offset += stage.rows.reduce((max, r) => Math.max(max, r.step), 0);
  }
  return offsets;
}

const pointsOf = (rows: readonly MetricsRow[], key: string, offset: number): [number, number][] =>
  rows.flatMap((r) => (key in r.metrics ? [[offset + r.step, r.metrics[key] as number] as [number, number]] : []));

function renderCharts(run: RunData, offsets: readonly number[]): { charts: ChartData[]; svgs: string[] } {
  const stages = run.stages;
  const sorted = stages.map((s) => sortedRows(s.rows));
  const last = stages.length - 1;
  const end = (offsets[last] ?? 0) + (sorted[last]?.at(-1)?.step ?? 0);
  const xDomain: [number, number] = [0, Math.max(end, 1)];
  // "step: sft 0–40 · grpo 40–160 (dashed line: next stage)"
  const xLabel =
    stages.length > 1
      ? `step: ${stages.map((s, i) => `${s.name} ${offsets[i] ?? 0}–${(offsets[i] ?? 0) + (sorted[i]?.at(-1)?.step ?? 0)}`).join(' · ')} (dashed line: next stage)`
      : 'step';
  const charts: ChartData[] = [];
  const svgs: string[] = [];
  for (const spec of [...BASE_CHARTS.slice(0, 1), ...evalCharts(stages), ...BASE_CHARTS.slice(1)]) {
    const series = spec.keys.map((key, k) => {
      const segments: ChartSegment[] = stages.map((stage, i) => {
        const offset = offsets[i] ?? 0;
        const rows = sorted[i] ?? [];
        const band =
          spec.band?.mean === key
            ? rows.flatMap((r) => {
                const mean = r.metrics[key];
                const std = r.metrics[spec.band?.std ?? ''];
                return mean === undefined || std === undefined ? [] : [[offset + r.step, mean - std, mean + std] as const];
              })
            : [];
        return { stage: stage.name, offset, points: pointsOf(rows, key, offset), ...(band.length ? { band } : {}) };
      });
      return { key, label: key, color: PALETTE[k % PALETTE.length] as string, segments };
    });
    const drawn = series.filter((s) => s.segments.some((g) => g.points.length > 0));
    if (drawn.length === 0 && !spec.required) continue;
    const chart: LineChart = {
      id: spec.id,
      title: spec.title,
      xLabel,
      yLabel: spec.yLabel,
      series: drawn,
      stages: stages.map((s, i) => ({ x: offsets[i] ?? 0, label: s.name })),
      xDomain,
      ...(spec.yDomain ? { yDomain: spec.yDomain } : {}),
      emptyMessage: `no data: no metrics line has ${spec.keys.join(' or ')}`,
    };
    svgs.push(renderLineChart(chart));
    charts.push({
      id: spec.id,
      title: spec.title,
      series: drawn.flatMap((s) =>
        s.segments
          .filter((g) => g.points.length)
          .map((g) => ({ key: s.key, stage: g.stage, points: g.points.map(([x, y]): [number, number] => [x, y]) })),
      ),
    });
  }
  return { charts, svgs };
}

// ---------------------------------------------------------------------------------------------------------------
// sampled problems

interface Answer {
  response: string;
  reward: number;
  /** Answers of this task at this step, and how many of them were correct. */
  count: number;
  correct: number;
}

export interface SampleRow {
  taskset: string;
  taskId: string;
  prompt: string;
  reference: string;
  before: Answer | null;
  after: Answer | null;
}

export interface SampleComparison {
  first: { stage: string; step: number } | null;
  last: { stage: string; step: number } | null;
  rows: SampleRow[];
}

/**
 * Problems answered at the run's first and last eval step that has samples (in stage order): those answered at
 * both come first, those whose correctness changed before the rest; at most `maxSamples`.
 */
export function compareSamples(run: RunData, maxSamples = 8, correctThreshold = 1): SampleComparison {
  const points = run.stages.flatMap((stage, index) =>
    [...new Set(stage.samples.map((s) => s.step))].map((step) => ({ stage: stage.name, index, step })),
  );
  points.sort((a, b) => a.index - b.index || a.step - b.step);
  const first = points[0];
  const last = points.at(-1);
  if (first === undefined || last === undefined) return { first: null, last: null, rows: [] };
  const at = (point: { index: number; step: number }) => {
    const byTask = new Map<string, EvalSample[]>();
    for (const s of run.stages[point.index]?.samples ?? []) {
      if (s.step !== point.step) continue;
      const id = `${s.taskset}\u0000${s.taskId}`;
      byTask.set(id, [...(byTask.get(id) ?? []), s]);
    }
    return byTask;
  };
  const answer = (samples: EvalSample[] | undefined): Answer | null => {
    const head = samples?.[0];
    if (samples === undefined || head === undefined) return null;
    const correct = samples.filter((s) => s.reward >= correctThreshold).length;
    return { response: head.response, reward: head.reward, count: samples.length, correct };
  };
  const isLast = first.index === last.index && first.step === last.step;
  const before = at(first);
  const after = isLast ? new Map<string, EvalSample[]>() : at(last);
  const ids = [...new Set([...before.keys(), ...after.keys()])];
  const rows = ids.map((id): SampleRow => {
    const head = (before.get(id) ?? after.get(id))?.[0] as EvalSample;
    return {
      taskset: head.taskset,
      taskId: head.taskId,
      prompt: head.prompt,
      reference: head.reference,
      before: answer(before.get(id)),
      after: answer(after.get(id)),
    };
  });
  const rank = (r: SampleRow) => {
    if (r.before === null || (r.after === null && !isLast)) return 2;
    if (r.after !== null && r.before.correct > 0 !== r.after.correct > 0) return 0;
    return 1;
  };
  rows.sort((a, b) => rank(a) - rank(b));
  return {
    first: { stage: first.stage, step: first.step },
    last: isLast ? null : { stage: last.stage, step: last.step },
    rows: rows.slice(0, maxSamples),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// the page

const CSS = `
body { margin: 0; background: #f6f7f9; color: #111; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
main { max-width: 1340px; margin: 0 auto; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 10px; }
.meta { color: #555; margin: 0 0 8px; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid #d8dbe0; padding: 5px 9px; vertical-align: top; }
th { background: #eef0f3; text-align: left; font-weight: 600; }
table.summary td:not(:first-child) { text-align: right; font-variant-numeric: tabular-nums; }
.progression { margin: 10px 0 0; padding-left: 20px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 14px; }
.charts svg { width: 100%; height: auto; border: 1px solid #d8dbe0; border-radius: 4px; background: #fff; }
.warnings { background: #fff8e1; border: 1px solid #f0d58c; padding: 8px 14px; border-radius: 4px; }
.warnings li { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
table.samples { width: 100%; table-layout: fixed; }
table.samples pre { margin: 0; white-space: pre-wrap; word-break: break-word; max-height: 14em; overflow: auto;
  font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; }
.mark { font-weight: 700; }
.ok { color: #1a7f37; }
.bad { color: #c62828; }
.note { color: #666; }
`;

const esc = escapeXml;

function summarySection(summary: readonly StageSummary[]): string {
  const { header, cells } = summaryTable(summary);
  const progressions = accuracyKeys(summary)
    .map((key) => ({ key, points: evalProgression(summary, key) }))
    .filter((p) => p.points.length > 0);
  return [
    '<h2>Summary</h2>',
    '<table class="summary"><thead><tr>',
    ...header.map((h) => `<th>${esc(h)}</th>`),
    '</tr></thead><tbody>',
    ...cells.map((row) => `<tr>${row.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`),
    '</tbody></table>',
    progressions.length
      ? `<ul class="progression">${progressions
          .map(
            ({ key, points }) =>
              `<li><b>${esc(key.slice('eval/'.length))}</b>: ${points
                .map((p) => `${esc(p.label)} <b>${formatNumber(p.value)}</b>`)
                .join(' → ')}</li>`,
          )
          .join('')}</ul>`
      : '<p class="note">No eval metrics (eval/&lt;taskset&gt;/mean@n) in any stage.</p>',
  ].join('\n');
}

function answerCell(answer: Answer | null, threshold: number): string {
  if (answer === null) return '<td class="note">not sampled</td>';
  const ok = answer.reward >= threshold;
  const mark = `<span class="mark ${ok ? 'ok' : 'bad'}">${ok ? '✓ correct' : '✗ wrong'}</span>`;
  const tally = answer.count > 1 ? ` · ${answer.correct}/${answer.count} answers correct` : '';
  return `<td>${mark} <span class="note">reward ${formatNumber(answer.reward)}${tally}</span><pre>${esc(answer.response)}</pre></td>`;
}

function samplesSection(comparison: SampleComparison, threshold: number, stageCount: number): string {
  const out = ['<h2>Sampled eval problems</h2>'];
  const where = (p: { stage: string; step: number }) => (stageCount > 1 ? `${p.stage} step ${p.step}` : `step ${p.step}`);
  if (comparison.first === null) {
    out.push('<p class="note">No stage has eval_samples.jsonl: no sampled problems to show.</p>');
    return out.join('\n');
  }
  const before = `answer at ${where(comparison.first)}`;
  const after = comparison.last ? `answer at ${where(comparison.last)}` : null;
  out.push(
    `<p class="note">${comparison.rows.length} problem(s) from the first${after ? ' and the last' : ''} eval step with samples; ` +
      `an answer is correct when its reward is at least ${threshold}.${after ? '' : ' Only one eval step has samples.'}</p>`,
    '<table class="samples"><thead><tr>',
    `<th style="width:22%">problem</th><th style="width:14%">reference</th><th>${esc(before)}</th>${after ? `<th>${esc(after)}</th>` : ''}`,
    '</tr></thead><tbody>',
  );
  for (const row of comparison.rows)
    out.push(
      `<tr><td><div class="note">${esc(row.taskset)} · ${esc(row.taskId)}</div><pre>${esc(row.prompt)}</pre></td>` +
        `<td><pre>${esc(row.reference)}</pre></td>${answerCell(row.before, threshold)}${after ? answerCell(row.after, threshold) : ''}</tr>`,
    );
  out.push('</tbody></table>');
  return out.join('\n');
}

const rowObject = (row: MetricsRow): Record<string, number> => ({
  step: row.step,
  ...(row.time !== undefined ? { time: row.time } : {}),
  ...row.metrics,
});

function timeRange(run: RunData): string {
  const times = extent(run.stages.flatMap((s) => s.rows.flatMap((r) => (r.time === undefined ? [] : [r.time]))));
  if (times === null) return '';
  const iso = (t: number) => new Date(t * 1000).toISOString().replace('T', ' ').slice(0, 19);
  return `, metrics from ${iso(times[0])} to ${iso(times[1])} UTC`;
}

/** The report's data and its HTML page. */
export function buildReport(run: RunData, options: ReportOptions = {}): { data: ReportData; html: string } {
  const title = options.title ?? `Run report: ${basename(resolve(run.jobDir))}`;
  const threshold = options.correctThreshold ?? 1;
  const offsets = stageOffsets(run.stages);
  const summary = summarizeStages(run);
  const { charts, svgs } = renderCharts(run, offsets);
  const data: ReportData = {
    title,
    jobDir: run.jobDir,
    stages: run.stages.map((s, i) => ({ name: s.name, offset: offsets[i] ?? 0, rows: s.rows.map(rowObject) })),
    summary,
    charts,
    warnings: run.warnings,
  };
  const comparison = compareSamples(run, options.maxSamples ?? 8, threshold);
  const html = [
    '<!doctype html>',
    '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${esc(title)}</title>`,
    `<style>${CSS}</style>`,
    '</head><body><main>',
    `<h1>${esc(title)}</h1>`,
    `<p class="meta">Job folder <code>${esc(run.jobDir)}</code>: ${run.stages.length} stage(s), ${esc(
      run.stages.map((s) => s.name).join(' → '),
    )}${esc(timeRange(run))}.</p>`,
    run.warnings.length
      ? `<div class="warnings"><b>While reading the run:</b><ul>${run.warnings.map((w) => `<li>${esc(w)}</li>`).join('')}</ul></div>`
      : '',
    summarySection(summary),
    '<h2>Curves</h2>',
    `<div class="charts">\n${svgs.join('\n')}\n</div>`,
    samplesSection(comparison, threshold, run.stages.length),
    // `<` escaped so no value can end the block; JSON.parse reads \u003c back as `<`
    `<script type="application/json" id="report-data">${JSON.stringify(data).replace(/</g, '\\u003c')}</script>`,
    '</main></body></html>',
    '',
  ].join('\n');
  return { data, html };
}

export interface WriteReportResult {
  file: string;
  summary: StageSummary[];
  warnings: string[];
}

/** Reads the job folder and writes its report (default JOB_DIR/report.html). */
export async function writeReport(jobDir: string, options: ReportOptions & { out?: string } = {}): Promise<WriteReportResult> {
  const run = await readRun(jobDir);
  const { data, html } = buildReport(run, options);
  const file = options.out ?? join(jobDir, 'report.html');
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, html);
  return { file, summary: data.summary, warnings: run.warnings };
}
