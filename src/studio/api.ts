// The Studio's JSON API: one route per entry, each a few lines over the readers. Run ids and stage paths are
// relative to the runs folder and checked by resolveInside (./paths.ts) before anything is opened.
import type { EvalSample } from '../rft/report/read.js';
import { HttpError, query, type Route, type RouteRequest } from './router.js';
import { metricKeys, metricSeries } from './series.js';

const MAX_POINTS = 20_000;

async function runDetail({ params, studio }: RouteRequest) {
  const run = await studio.runs.run(params.run as string);
  const stages = await studio.runs.stages(run.id);
  return { ...run, keys: metricKeys(stages.flatMap((s) => s.metrics.rows)) };
}

async function series({ params, url, studio }: RouteRequest) {
  const key = query.required(url, 'key');
  const points = query.number(url, 'points', { min: 2, max: MAX_POINTS, integer: true }) ?? 2000;
  const smoothing = query.number(url, 'smooth', { min: 0, max: 0.999 }) ?? 0;
  const run = await studio.runs.run(params.run as string);
  const stages = await studio.runs.stages(run.id);
  const offsets = new Map(run.stages.map((s) => [s.path, s.offset]));
  return {
    run: run.id,
    ...metricSeries(
      key,
      stages.map((s) => ({ name: s.name, offset: offsets.get(s.path) ?? 0, rows: s.metrics.rows })),
      { points, smoothing },
    ),
  };
}

async function sources({ params, studio }: RouteRequest) {
  const run = await studio.runs.run(params.run as string);
  const found = [];
  for (const stage of run.stages)
    for (const file of stage.buffers)
      for (const source of await studio.sources.describe(file)) found.push({ ...source, stage: stage.path });
  return found;
}

async function rollouts({ url, studio }: RouteRequest) {
  const source = await studio.sources.get(query.required(url, 'file'), query.string(url, 'table') ?? null);
  const filter = {
    step: query.number(url, 'step', { integer: true }),
    task: query.string(url, 'task'),
    minReward: query.number(url, 'minReward'),
    maxReward: query.number(url, 'maxReward'),
    minLength: query.number(url, 'minLength', { min: 0, integer: true }),
    maxLength: query.number(url, 'maxLength', { min: 0, integer: true }),
    truncated: query.boolean(url, 'truncated'),
  };
  const order = query.string(url, 'order') ?? 'group';
  if (order !== 'group' && order !== 'id')
    throw new HttpError(400, `query parameter 'order' must be group or id, got '${order}'`);
  const offset = query.number(url, 'offset', { min: 0, integer: true }) ?? 0;
  const limit = query.number(url, 'limit', { min: 1, max: 1000, integer: true }) ?? 100;
  return { ...source.page(filter, offset, limit, order), warnings: source.warnings.slice(-10) };
}

async function rolloutDetail({ url, studio }: RouteRequest) {
  const source = await studio.sources.get(query.required(url, 'file'), query.string(url, 'table') ?? null);
  const id = query.number(url, 'id', { min: 0, integer: true });
  if (id === undefined) throw new HttpError(400, "query parameter 'id' is required");
  const detail = source.detail(id);
  if (detail === null) throw new HttpError(404, `no rollout with id ${id} in ${query.required(url, 'file')}`);
  return detail;
}

/**
 * Eval answers before and after a stage, matched by taskset and task: "before" is the stage's first eval step (or,
 * when the stage evaluated once, the previous stage's last), "after" its last.
 */
async function evalComparison({ params, url, studio }: RouteRequest) {
  const run = await studio.runs.run(params.run as string);
  const stages = await studio.runs.stages(run.id);
  const index = stages.findIndex((s) => s.path === query.required(url, 'stage'));
  if (index < 0) throw new HttpError(404, `run '${run.id}' has no stage '${query.required(url, 'stage')}'`);
  const samples = (stages[index] as (typeof stages)[number]).samples.rows;
  const steps = [...new Set(samples.map((s) => s.step))].sort((a, b) => a - b);
  const afterStep = steps.at(-1);
  let before: EvalSample[] = [];
  let beforeLabel = '';
  if (steps.length >= 2) {
    before = samples.filter((s) => s.step === steps[0]);
    beforeLabel = `${stages[index]?.name} step ${steps[0]}`;
  } else if (index > 0) {
    const previous = stages[index - 1] as (typeof stages)[number];
    const last = Math.max(...previous.samples.rows.map((s) => s.step));
    before = previous.samples.rows.filter((s) => s.step === last);
    if (before.length) beforeLabel = `${previous.name} step ${last}`;
  }
  const after = afterStep === undefined ? [] : samples.filter((s) => s.step === afterStep);
  const key = (s: EvalSample) => `${s.taskset}\0${s.taskId}`;
  const beforeByKey = new Map(before.map((s) => [key(s), s]));
  const afterByKey = new Map(after.map((s) => [key(s), s]));
  const keys = [...new Set([...after.map(key), ...before.map(key)])];
  return {
    before: beforeLabel,
    after: afterStep === undefined ? '' : `${stages[index]?.name} step ${afterStep}`,
    pairs: keys.map((k) => {
      const b = beforeByKey.get(k);
      const a = afterByKey.get(k);
      const any = (a ?? b) as EvalSample;
      return {
        taskset: any.taskset,
        taskId: any.taskId,
        prompt: any.prompt,
        reference: any.reference,
        before: b ? { response: b.response, reward: b.reward } : null,
        after: a ? { response: a.response, reward: a.reward } : null,
      };
    }),
  };
}

/** The API routes. A new one is an entry here (docs/studio.md). */
export const apiRoutes: Route[] = [
  {
    method: 'GET',
    path: '/api/runs',
    description: 'every run with its stages: status, step, last metrics, checkpoints, buffers',
    handle: ({ studio }) => studio.runs.list(),
  },
  { method: 'GET', path: '/api/runs/:run', description: 'one run, with every metric key it wrote', handle: runDetail },
  {
    method: 'GET',
    path: '/api/runs/:run/series',
    description: 'one metric over the run (?key, ?points, ?smooth): smoothed (eval/ series never) and downsampled on the server',
    handle: series,
  },
  {
    method: 'GET',
    path: '/api/runs/:run/sources',
    description: "the run's experience buffers and dumps (file, table, kind, stage)",
    handle: sources,
  },
  {
    method: 'GET',
    path: '/api/runs/:run/eval',
    description: "a stage's eval answers before and after it (?stage), matched by task",
    handle: evalComparison,
  },
  {
    method: 'GET',
    path: '/api/rollouts',
    description:
      'rollouts of one source (?file, ?table), filtered (?step ?task ?minReward ?maxReward ?minLength ?maxLength ?truncated), paged',
    handle: rollouts,
  },
  {
    method: 'GET',
    path: '/api/rollouts/detail',
    description: 'one rollout (?file, ?table, ?id) with its tokens, log-probs, advantages and action mask',
    handle: rolloutDetail,
  },
  {
    method: 'GET',
    path: '/api/events',
    description: 'server-sent events: metrics rows as they are written, the runs list when it changes',
    handle: async ({ res, studio }) => {
      await studio.events.subscribe(res);
      return undefined;
    },
  },
];
