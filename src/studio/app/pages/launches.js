// Launches: the runs this Studio started (from the config builder), live: state, pid, exit code, their output, and
// Stop (SIGINT, as Ctrl-C: the run stops after its current step) / Resume (the same config again: trinity run
// resumes from the latest checkpoint). Other runs in the folder are listed with why they cannot be controlled here.
import { api, el, listen, runPath, statusBadge } from '../lib.js';

async function post(path) {
  const response = await fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer?.error?.message ?? `${path}: HTTP ${response.status}`);
  return answer;
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

export async function render(root) {
  const note = el('div', { id: 'control-note', class: 'muted' });
  const list = el('div', { id: 'launches' });
  const others = el('div', { id: 'uncontrolled' });
  root.append(
    el('link', { rel: 'stylesheet', href: '/app/pages/forms.css' }),
    el('h2', {}, 'Launches'),
    el(
      'p',
      { class: 'muted' },
      'Runs started from this Studio (Config → Start run). Stop sends SIGINT, as Ctrl-C does: the run finishes its ',
      'current step and exits (code 130). Resume runs the same config again: trinity run continues from the latest ',
      'checkpoint and skips finished stages.',
    ),
    note,
    list,
    el('h3', {}, 'Other runs in the folder'),
    el(
      'p',
      { class: 'muted' },
      'These were not started by this Studio (a terminal, a scheduler, another Studio, or this one before a restart): ',
      'they are other processes, and the Studio never signals a process it did not start. Stop them where they run ',
      '(Ctrl-C, or kill -INT PID); resume them with the same trinity run command.',
    ),
    others,
  );

  const act = (what, id) => async () => {
    note.textContent = '';
    try {
      await post(`/api/launches/${id}/${what}`);
    } catch (error) {
      note.textContent = error.message;
    }
  };

  function draw(launches) {
    if (launches.length === 0) {
      list.replaceChildren(
        el('p', { class: 'muted' }, 'No runs started here yet: build a config on the Config page and press Start run.'),
      );
    } else {
      list.replaceChildren(
        ...launches.map((l) =>
          el(
            'div',
            { class: 'launch', 'data-launch': l.id, 'data-state': l.state, 'data-exit': l.exitCode ?? '' },
            el(
              'div',
              { class: 'launch-head' },
              el('strong', {}, `#${l.id} `),
              link(l.run, `/runs`),
              ' ',
              statusBadge(l.state),
              ' ',
              steps.has(l.run)
                ? el('span', { class: 'launch-step', 'data-step': steps.get(l.run) }, `step ${steps.get(l.run)}`)
                : el('span', { class: 'launch-step' }),
              el(
                'span',
                { class: 'muted' },
                ` ${l.config} · start ${l.starts}`,
                l.pid ? ` · pid ${l.pid}` : '',
                l.exitCode !== null ? ` · exit ${l.exitCode}` : '',
              ),
              ' ',
              el('button', { class: 'stop', disabled: l.state !== 'running', onclick: act('stop', l.id) }, 'Stop'),
              el(
                'button',
                { class: 'resume', disabled: l.state === 'running' || l.state === 'stopping', onclick: act('resume', l.id) },
                'Resume',
              ),
              ' ',
              link('curves', `/curves?run=${encodeURIComponent(l.run)}`),
            ),
            el('pre', { class: 'log' }, l.log.slice(-30).join('\n')),
          ),
        ),
      );
    }
    void drawOthers(launches);
  }

  async function drawOthers(launches) {
    let runs;
    try {
      runs = await api('/api/runs');
    } catch (error) {
      // shown in place of the list; the next update of the launches reads it again
      others.replaceChildren(el('p', { class: 'error', id: 'uncontrolled-error' }, String(error.message ?? error)));
      return;
    }
    const mine = new Set(launches.map((l) => l.run));
    const rest = runs.filter((r) => !mine.has(r.id));
    others.replaceChildren(
      rest.length === 0
        ? el('p', { class: 'muted' }, 'none')
        : el(
            'table',
            {},
            el(
              'tbody',
              {},
              rest.map((r) =>
                el(
                  'tr',
                  { 'data-run': r.id },
                  el('td', {}, r.id),
                  el('td', {}, statusBadge(r.status)),
                  el('td', { class: 'muted' }, 'not started by this Studio: no stop / resume here'),
                ),
              ),
            ),
          ),
    );
  }

  /** The newest step each run wrote (live metrics events), shown on its launch. */
  const steps = new Map();
  let latest = await api('/api/launches');
  draw(latest);
  const events = new EventSource('/api/launches/events');
  events.addEventListener('launches', (e) => {
    latest = JSON.parse(e.data);
    draw(latest);
  });
  const off = listen('metrics', async ({ run, rows, reset }) => {
    // a reset (a run seen for the first time, or rewritten) carries no rows: read the run's steps (if that read fails,
    // the step shown waits for the run's next metrics event)
    let stepsNow;
    try {
      stepsNow = reset ? (await api(runPath(run))).stages.map((s) => s.step ?? 0) : rows.map((r) => r.step);
    } catch {
      return;
    }
    const step = Math.max(steps.get(run) ?? 0, ...stepsNow);
    if (step === 0 || step === steps.get(run)) return;
    steps.set(run, step);
    if (latest.some((l) => l.run === run)) draw(latest);
  });
  return () => {
    events.close();
    off();
  };
}
