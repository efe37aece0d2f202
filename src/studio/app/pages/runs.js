// Runs: every run and stage with its status, step and last metrics; kept current by the live events.
import { ago, api, el, fmt, listen, statusBadge } from '../lib.js';

/** The metrics shown in the table when a stage wrote them (the rest are on the Curves page). */
const HEADLINE = ['rollout/reward/mean', 'actor/loss', 'actor/pg_loss', 'actor/kl', 'actor/entropy', 'actor/grad_norm'];

function headline(metrics) {
  const keys = HEADLINE.filter((k) => k in metrics);
  const evalKeys = Object.keys(metrics).filter((k) => k.startsWith('eval/') && k.endsWith('accuracy'));
  return [...keys, ...evalKeys].slice(0, 5).map((k) => el('div', {}, el('span', { class: 'muted' }, `${k} `), fmt(metrics[k])));
}

function link(text, href) {
  return el(
    'a',
    {
      href,
      onclick: (e) => {
        e.preventDefault();
        window.studio.go(href);
      },
    },
    text,
  );
}

function table(runs) {
  if (runs.length === 0) return el('p', { class: 'muted' }, 'No runs here yet: start one with trinity run, it appears here.');
  const body = [];
  for (const run of runs) {
    const q = `run=${encodeURIComponent(run.id)}`;
    body.push(
      el(
        'tr',
        { class: 'group', 'data-run': run.id },
        el('td', { colspan: 3 }, run.id, ' ', statusBadge(run.status)),
        el(
          'td',
          { colspan: 3 },
          link('curves', `/curves?${q}`),
          ' · ',
          link('rollouts', `/rollouts?${q}`),
          ' · ',
          link('buffer', `/buffer?${q}`),
        ),
      ),
    );
    for (const stage of run.stages)
      body.push(
        el(
          'tr',
          { 'data-run': run.id, 'data-stage': stage.path },
          el('td', {}, stage.name),
          el('td', {}, statusBadge(stage.status)),
          el('td', { class: 'num step' }, stage.step ?? '–'),
          el('td', {}, headline(stage.lastMetrics)),
          el('td', {}, stage.checkpoints.length ? `${stage.checkpoints.length} (last ${stage.checkpoints.at(-1)})` : '–'),
          el('td', { class: 'muted' }, ago(stage.lastTime)),
        ),
      );
  }
  return el(
    'table',
    { id: 'runs' },
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        ['stage', 'status', 'step', 'last metrics', 'checkpoints', 'updated'].map((h) => el('th', {}, h)),
      ),
    ),
    el('tbody', {}, body),
  );
}

export async function render(root) {
  const holder = el('div', {}, el('p', { class: 'muted' }, 'reading runs…'));
  root.append(el('h2', {}, 'Runs'), holder);
  const draw = (runs) => holder.replaceChildren(table(runs));
  draw(await api('/api/runs'));
  const off = [
    listen('runs', draw),
    // a metrics line updates its stage's step at once (the runs event with statuses follows)
    listen('metrics', ({ run, stage, rows }) => {
      const last = rows.at(-1);
      if (last === undefined) return;
      for (const tr of holder.querySelectorAll('tr[data-stage]'))
        if (tr.dataset.run === run && tr.dataset.stage === stage) tr.querySelector('.step').textContent = String(last.step);
    }),
  ];
  return () => {
    for (const f of off) f();
  };
}
