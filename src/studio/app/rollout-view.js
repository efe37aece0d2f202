// One rollout in full: its turns (multi-turn conversations), and its response tokens coloured by log-prob or
// advantage, with the tokens the model did not produce (action mask 0: tool output, the user's turns) outlined.
import { api, el, fmt } from './lib.js';

/** Red (low) to green (high) for a value in [lo, hi]. */
function colour(value, lo, hi) {
  if (value === null) return 'transparent';
  const t = hi > lo ? Math.min(1, Math.max(0, (value - lo) / (hi - lo))) : 0.5;
  return `hsla(${Math.round(t * 120)}, 75%, 50%, 0.35)`;
}

function tokenView(detail, by) {
  const values = detail.tokens.map((t) => t[by]).filter((v) => v !== null);
  const lo = by === 'logprob' ? Math.max(-10, Math.min(...values)) : Math.min(...values, 0);
  const hi = by === 'logprob' ? 0 : Math.max(...values, 0);
  return el(
    'div',
    { class: 'tokens', 'data-colour-by': by },
    detail.tokens.map((t) =>
      el(
        'span',
        {
          class: t.mask === 0 ? 'masked' : undefined,
          'data-mask': t.mask,
          title: `id ${t.id} · log-prob ${fmt(t.logprob)} · advantage ${fmt(t.advantage)}${t.mask === 0 ? ' · not generated (mask 0)' : ''}`,
          style: t.mask === 0 ? undefined : { background: colour(t[by], lo, hi) },
        },
        t.text,
      ),
    ),
  );
}

export async function renderDetail(holder, file, table, id) {
  holder.replaceChildren(el('p', { class: 'muted' }, 'loading…'));
  const d = await api('/api/rollouts/detail', { file, table, id });
  const colourBy = el(
    'select',
    { id: 'colour-by', onchange: () => tokens.replaceChildren(tokenView(d, colourBy.value)) },
    el('option', { value: 'logprob' }, 'log-prob'),
    el('option', { value: 'advantage' }, 'advantage'),
  );
  const tokens = el('div', {}, tokenView(d, 'logprob'));
  holder.replaceChildren(
    el(
      'div',
      { class: 'panel', id: 'rollout-detail' },
      el('h3', {}, `rollout ${d.eid}`),
      el(
        'p',
        { class: 'muted' },
        `step ${d.step ?? '–'} · task ${d.taskId || '–'} · reward ${fmt(d.reward)} · advantage ${fmt(d.advantage)} · `,
        `finish ${d.finishReason} · ${d.promptTokens} prompt + ${d.responseLength} response tokens`,
        d.tokenizer ? '' : ' · no tokenizer in the run folder: token ids shown',
      ),
      d.messages.length
        ? el(
            'div',
            { id: 'turns' },
            el('h3', {}, `conversation (${d.messages.length} messages)`),
            d.messages.map((m) =>
              el(
                'div',
                { class: `turn ${m.role}` },
                el('div', { class: 'role' }, m.role),
                el('div', { class: 'text' }, m.content),
              ),
            ),
          )
        : el('div', {}, el('h3', {}, 'prompt'), el('div', { class: 'text' }, d.prompt)),
      el('h3', {}, 'response tokens ', el('label', { class: 'muted' }, 'colour by ', colourBy)),
      tokens,
      Object.keys(d.metrics).length
        ? el(
            'p',
            { class: 'muted' },
            Object.entries(d.metrics)
              .map(([k, v]) => `${k} ${fmt(v)}`)
              .join(' · '),
          )
        : null,
    ),
  );
}
