// Curves: any metric of one or more runs, overlaid; smoothing and downsampling happen on the server (so 100,000 steps
// arrive as a few thousand points; eval/ series are never smoothed, and say so), log scale and stage boundaries here. Live: a metrics event for a shown run
// re-fetches its series.
import { api, el, listen, params, runPath, setParams } from '../lib.js';

const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
const DEFAULT_KEYS = ['rollout/reward/mean', 'actor/loss'];

/** uPlot plugin: a dashed line and the stage's name where each stage after the first begins. */
function stageLines(stages) {
  return {
    hooks: {
      draw: (u) => {
        const { ctx } = u;
        ctx.save();
        ctx.strokeStyle = '#94a3b8';
        ctx.fillStyle = '#64748b';
        ctx.setLineDash([4, 4]);
        ctx.font = `${11 * devicePixelRatio}px system-ui`;
        for (const stage of stages) {
          if (stage.offset === 0) continue;
          const x = u.valToPos(stage.offset, 'x', true);
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillText(stage.name, x + 4, u.bbox.top + 12 * devicePixelRatio);
        }
        ctx.restore();
      },
    },
  };
}

async function drawChart(holder, key, runIds, options) {
  const all = await Promise.all(
    runIds.map((id) => api(`${runPath(id)}/series`, { key, smooth: options.smooth, points: options.points })),
  );
  const shown = all.filter((s) => s.total > 0);
  const box = el('div', { class: 'chart', 'data-key': key });
  if (shown.length === 0) {
    box.append(el('div', {}, key), el('p', { class: 'muted' }, 'no points yet'));
    holder.replaceChildren(box);
    return null;
  }
  const data = uPlot.join(shown.map((s) => [s.x, s.y]));
  const width = Math.max(400, holder.clientWidth - 20);
  const plot = new uPlot(
    {
      title: options.smooth > 0 && shown.every((s) => s.smoothing === 0) ? `${key} (raw: eval series are not smoothed)` : key,
      width,
      height: 260,
      scales: { x: { time: false }, y: options.log ? { distr: 3 } : {} },
      axes: [{ label: 'step' }, {}],
      series: [
        { label: 'step' },
        ...shown.map((s, i) => ({
          label: s.run,
          stroke: PALETTE[i % PALETTE.length],
          width: 1.5,
          spanGaps: true,
          points: { show: false },
        })),
      ],
      plugins: [stageLines(shown[0].stages)],
    },
    data,
    box,
  );
  box.dataset.points = shown.map((s) => s.x.length).join(',');
  box.dataset.total = shown.map((s) => s.total).join(',');
  holder.replaceChildren(box);
  return plot;
}

export async function render(root) {
  const runs = await api('/api/runs');
  const p = params();
  const selected = new Set((p.get('run') ?? runs[0]?.id ?? '').split(',').filter(Boolean));
  const state = { smooth: Number(p.get('smooth') ?? 0), log: p.get('log') === '1', points: 2000, keys: [] };
  const runList = el('div', { class: 'list' });
  const keyList = el('div', { class: 'list' });
  const charts = el('div', { id: 'charts' });
  const plots = new Map();

  async function keysOf() {
    const details = await Promise.all([...selected].map((id) => api(runPath(id))));
    return [...new Set(details.flatMap((d) => d.keys))].sort();
  }

  async function drawAll() {
    for (const plot of plots.values()) plot?.destroy();
    plots.clear();
    window.studio.charts = [];
    charts.replaceChildren();
    for (const key of state.keys) {
      const holder = el('div');
      charts.append(holder);
      const plot = await drawChart(holder, key, [...selected], state);
      plots.set(key, plot);
      if (plot) window.studio.charts.push({ key, plot });
    }
    charts.dataset.ready = String(Date.now());
  }

  async function drawKeys() {
    const keys = await keysOf();
    const wanted = (p.get('key') ?? '').split(',').filter((k) => keys.includes(k));
    state.keys = wanted.length ? wanted : DEFAULT_KEYS.filter((k) => keys.includes(k));
    if (state.keys.length === 0 && keys.length) state.keys = [keys[0]];
    keyList.replaceChildren(
      ...keys.map((k) =>
        el(
          'label',
          { style: { display: 'block' } },
          el('input', {
            type: 'checkbox',
            value: k,
            checked: state.keys.includes(k),
            onchange: (e) => {
              state.keys = e.target.checked ? [...state.keys, k] : state.keys.filter((x) => x !== k);
              setParams({ key: state.keys.join(',') });
              void drawAll();
            },
          }),
          ` ${k}`,
        ),
      ),
    );
  }

  runList.append(
    ...runs.map((r) =>
      el(
        'label',
        { style: { display: 'block' } },
        el('input', {
          type: 'checkbox',
          value: r.id,
          checked: selected.has(r.id),
          onchange: async (e) => {
            if (e.target.checked) selected.add(r.id);
            else selected.delete(r.id);
            setParams({ run: [...selected].join(',') });
            await drawKeys();
            await drawAll();
          },
        }),
        ` ${r.id}`,
      ),
    ),
  );
  const controls = el(
    'div',
    { class: 'controls' },
    el(
      'label',
      {},
      'smoothing',
      el('input', {
        id: 'smoothing',
        type: 'range',
        min: 0,
        max: 0.99,
        step: 0.01,
        value: state.smooth,
        onchange: (e) => {
          state.smooth = Number(e.target.value);
          setParams({ smooth: state.smooth || '' });
          void drawAll();
        },
      }),
    ),
    el(
      'label',
      {},
      'log scale',
      el('input', {
        id: 'log-scale',
        type: 'checkbox',
        checked: state.log,
        onchange: (e) => {
          state.log = e.target.checked;
          setParams({ log: state.log ? 1 : '' });
          void drawAll();
        },
      }),
    ),
  );
  root.append(
    el('h2', {}, 'Curves'),
    el(
      'div',
      { class: 'layout' },
      el(
        'div',
        {},
        el('div', { class: 'panel' }, el('h3', {}, 'Runs'), runList),
        el('div', { class: 'panel' }, el('h3', {}, 'Metrics'), keyList),
      ),
      el('div', {}, controls, charts),
    ),
  );
  await drawKeys();
  await drawAll();
  // live: redraw once per burst of lines for a shown run
  let pending = null;
  const off = listen('metrics', ({ run }) => {
    if (!selected.has(run) || pending) return;
    pending = setTimeout(async () => {
      pending = null;
      await drawAll();
    }, 50);
  });
  return () => {
    off();
    if (pending) clearTimeout(pending);
    for (const plot of plots.values()) plot?.destroy();
  };
}
