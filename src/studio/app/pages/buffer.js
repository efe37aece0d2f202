// Buffer: a run's experience buffers and dumps, row by row in id order (what the trainer reads, in that order).
import { api, el, fmt, params, runPath, setParams } from '../lib.js';
import { renderDetail } from '../rollout-view.js';

export async function render(root) {
  const runs = await api('/api/runs');
  const p = params();
  const runId = p.get('run') ?? runs[0]?.id;
  root.append(el('h2', {}, 'Buffer'));
  if (runId === undefined) {
    root.append(el('p', { class: 'muted' }, 'no runs'));
    return;
  }
  const runSelect = el(
    'select',
    { id: 'run', onchange: () => window.studio.go(`/buffer?run=${encodeURIComponent(runSelect.value)}`) },
    runs.map((r) => el('option', { value: r.id, selected: r.id === runId }, r.id)),
  );
  const sources = await api(`${runPath(runId)}/sources`);
  const sourceSelect = el(
    'select',
    { id: 'source' },
    sources.map((s) =>
      el(
        'option',
        { value: `${s.file}#${s.table ?? ''}` },
        // a PostgreSQL buffer: where it is (from the stage's buffer.json), not the record's file
        s.backend === 'postgresql'
          ? `${s.location} table ${s.table} (${s.stage}, PostgreSQL)`
          : `${s.file}${s.table ? ` (${s.table}, ${s.kind})` : ''}`,
      ),
    ),
  );
  const info = el('p', { class: 'muted', id: 'buffer-summary' });
  const list = el('div');
  const detail = el('div');
  let offset = Number(p.get('offset') ?? 0);
  const limit = 50;
  const move = (delta) => {
    offset = Math.max(0, offset + delta);
    void draw();
  };
  async function draw() {
    if (sources.length === 0) {
      info.textContent = 'this run has no experience buffer in its folders';
      return;
    }
    const [file, table] = sourceSelect.value.split('#');
    setParams({ offset: offset || '' });
    let page;
    try {
      page = await api('/api/rollouts', { file, table, order: 'id', offset, limit });
    } catch (error) {
      // a database that does not answer (its message names host, port and database): the selectors stay usable
      info.textContent = '';
      list.replaceChildren(el('p', { class: 'error', id: 'buffer-error' }, String(error.message ?? error)));
      return;
    }
    info.textContent = `${page.total} experiences · showing ${page.total ? offset + 1 : 0}–${Math.min(offset + limit, page.total)}`;
    list.replaceChildren(
      el(
        'div',
        { class: 'pager' },
        el('button', { disabled: offset === 0, onclick: () => move(-limit) }, '‹ previous'),
        el('button', { disabled: offset + limit >= page.total, onclick: () => move(limit) }, 'next ›'),
      ),
      el(
        'table',
        { id: 'buffer' },
        el(
          'thead',
          {},
          el(
            'tr',
            {},
            ['id', 'eid', 'step', 'task', 'reward', 'length', 'finish', 'response'].map((h) => el('th', {}, h)),
          ),
        ),
        el(
          'tbody',
          {},
          page.rows.map((r) =>
            el(
              'tr',
              { class: 'clickable', onclick: () => renderDetail(detail, file, table, r.id) },
              el('td', { class: 'num' }, r.id),
              el('td', {}, r.eid),
              el('td', { class: 'num' }, r.step ?? '–'),
              el('td', {}, r.taskId),
              el('td', { class: 'num' }, fmt(r.reward)),
              el('td', { class: 'num' }, r.responseLength),
              el('td', {}, r.finishReason),
              el('td', {}, el('div', { class: 'text' }, r.response)),
            ),
          ),
        ),
      ),
    );
  }
  sourceSelect.addEventListener('change', () => {
    offset = 0;
    void draw();
  });
  root.append(
    el('div', { class: 'controls' }, el('label', {}, 'run', runSelect), el('label', {}, 'buffer', sourceSelect)),
    info,
    el('div', { class: 'side' }, list, detail),
  );
  await draw();
}
