// Rollouts: per step and task group, every sample's prompt, response, reward, advantage and finish reason, with
// filters (step, reward, length, truncated, task); a click shows the tokens; eval answers before vs after a stage.
import { api, el, fmt, params, runPath, setParams } from '../lib.js';
import { renderDetail } from '../rollout-view.js';

const FILTERS = [
  ['step', 'step', 'number'],
  ['task', 'task contains', 'text'],
  ['minReward', 'reward ≥', 'number'],
  ['maxReward', 'reward ≤', 'number'],
  ['minLength', 'length ≥', 'number'],
  ['maxLength', 'length ≤', 'number'],
];

function rolloutTable(page, onPick) {
  const rows = [];
  let group = null;
  for (const r of page.rows) {
    const key = `${r.step}\0${r.taskId}`;
    if (key !== group) {
      group = key;
      const members = page.rows.filter((x) => `${x.step}\0${x.taskId}` === key);
      const rewards = members.map((x) => x.reward).filter((x) => x !== null);
      const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
      rows.push(
        el(
          'tr',
          { class: 'group' },
          el(
            'td',
            { colspan: 8 },
            `step ${r.step ?? '–'} · task ${r.taskId || '–'} · ${members.length} shown · mean reward ${fmt(mean)}`,
          ),
        ),
      );
    }
    rows.push(
      el(
        'tr',
        { class: 'clickable rollout', 'data-id': r.id, onclick: () => onPick(r.id) },
        el('td', { class: 'num' }, r.repeat ?? '–'),
        el('td', { class: 'num reward' }, fmt(r.reward)),
        el('td', { class: 'num advantage' }, fmt(r.advantage)),
        el('td', { class: 'num length' }, r.responseLength),
        el('td', {}, r.finishReason, r.turns ? ` · ${r.turns} turns` : ''),
        el('td', {}, el('div', { class: 'text' }, r.prompt)),
        el('td', {}, el('div', { class: 'text' }, r.response)),
      ),
    );
  }
  return el(
    'table',
    { id: 'rollouts' },
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        ['#', 'reward', 'advantage', 'length', 'finish', 'prompt', 'response'].map((h) => el('th', {}, h)),
      ),
    ),
    el('tbody', {}, rows),
  );
}

async function evalPanel(holder, runId, stages) {
  const select = el(
    'select',
    { id: 'eval-stage' },
    stages.map((s) => el('option', { value: s.path }, s.name)),
  );
  const body = el('div');
  const draw = async () => {
    const cmp = await api(`${runPath(runId)}/eval`, { stage: select.value });
    if (cmp.pairs.length === 0) {
      body.replaceChildren(el('p', { class: 'muted' }, 'this stage wrote no eval samples'));
      return;
    }
    body.replaceChildren(
      el(
        'table',
        { id: 'eval' },
        el(
          'thead',
          {},
          el('tr', {}, el('th', {}, 'task'), el('th', {}, `before: ${cmp.before || '–'}`), el('th', {}, `after: ${cmp.after}`)),
        ),
        el(
          'tbody',
          {},
          cmp.pairs.map((p) =>
            el(
              'tr',
              {},
              el('td', {}, el('div', { class: 'text' }, p.prompt), el('div', { class: 'muted' }, `reference: ${p.reference}`)),
              ...[p.before, p.after].map((x) =>
                el(
                  'td',
                  {},
                  x ? [el('div', { class: 'text' }, x.response), el('div', { class: 'muted' }, `reward ${fmt(x.reward)}`)] : '–',
                ),
              ),
            ),
          ),
        ),
      ),
    );
  };
  select.addEventListener('change', draw);
  holder.replaceChildren(el('h3', {}, 'Eval answers before vs after a stage ', select), body);
  if (stages.length) await draw();
}

export async function render(root) {
  const runs = await api('/api/runs');
  const p = params();
  const runId = p.get('run') ?? runs[0]?.id;
  root.append(el('h2', {}, 'Rollouts'));
  if (runId === undefined) {
    root.append(el('p', { class: 'muted' }, 'no runs'));
    return;
  }
  const runSelect = el(
    'select',
    { id: 'run', onchange: () => window.studio.go(`/rollouts?run=${encodeURIComponent(runSelect.value)}`) },
    runs.map((r) => el('option', { value: r.id, selected: r.id === runId }, r.id)),
  );
  const sources = await api(`${runPath(runId)}/sources`);
  const sourceKey = (s) => `${s.file}#${s.table ?? ''}`;
  const sourceSelect = el(
    'select',
    { id: 'source' },
    sources.map((s) =>
      el(
        'option',
        { value: sourceKey(s), selected: sourceKey(s) === p.get('source') },
        `${s.file}${s.table ? ` (${s.table})` : ''}`,
      ),
    ),
  );
  const inputs = Object.fromEntries(
    FILTERS.map(([name, , type]) => [name, el('input', { id: `f-${name}`, type, value: p.get(name) ?? '' })]),
  );
  const truncated = el(
    'select',
    { id: 'f-truncated' },
    ['any', 'true', 'false'].map((v) => el('option', { value: v, selected: v === (p.get('truncated') ?? 'any') }, v)),
  );
  const summary = el('p', { id: 'rollout-summary', class: 'muted' });
  const list = el('div');
  const detail = el('div');
  const evalHolder = el('div');
  let offset = 0;
  const limit = 100;

  const move = (delta) => {
    offset = Math.max(0, offset + delta);
    void draw();
  };
  async function draw() {
    if (sources.length === 0) {
      summary.textContent = 'this run stored no experiences (a buffer with storage_type sql, or save_input, stores them)';
      return;
    }
    const [file, table] = sourceSelect.value.split('#');
    const filter = Object.fromEntries(Object.entries(inputs).map(([k, input]) => [k, input.value]));
    setParams({ ...filter, truncated: truncated.value === 'any' ? '' : truncated.value, source: sourceSelect.value });
    const page = await api('/api/rollouts', { file, table, ...filter, truncated: truncated.value, offset, limit });
    summary.textContent = `${page.matched} of ${page.total} rollouts match · ${page.tasks} tasks · steps ${page.steps[0] ?? '–'}–${page.steps.at(-1) ?? '–'}`;
    summary.dataset.matched = String(page.matched);
    const pager = el(
      'div',
      { class: 'pager' },
      el('button', { disabled: offset === 0, onclick: () => move(-limit) }, '‹ previous'),
      `${page.matched ? offset + 1 : 0}–${Math.min(offset + limit, page.matched)}`,
      el('button', { disabled: offset + limit >= page.matched, onclick: () => move(limit) }, 'next ›'),
    );
    list.replaceChildren(
      pager,
      rolloutTable(page, (id) => renderDetail(detail, file, table, id)),
    );
  }
  const apply = () => {
    offset = 0;
    void draw();
  };
  for (const input of [...Object.values(inputs), truncated, sourceSelect]) input.addEventListener('change', apply);
  root.append(
    el(
      'div',
      { class: 'controls' },
      el('label', {}, 'run', runSelect),
      el('label', {}, 'source', sourceSelect),
      FILTERS.map(([name, label]) => el('label', {}, label, inputs[name])),
      el('label', {}, 'truncated', truncated),
    ),
    summary,
    el('div', { class: 'side' }, list, detail),
    evalHolder,
  );
  const run = runs.find((r) => r.id === runId);
  await Promise.all([
    draw(),
    evalPanel(
      evalHolder,
      runId,
      (run?.stages ?? []).filter((s) => s.evalSamples > 0),
    ),
  ]);
}
