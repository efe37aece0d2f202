// Human feedback: rate a serve-mode run's answers (each rating is a reward through the endpoint's POST /feedback),
// pick the better of two answers (a {prompt, chosen, rejected} line in a DPO dataset file in the runs folder), and
// rate the pending pairs of the task pipeline's human_preference_annotation_mapper.
import { api, el } from '../lib.js';

async function post(path, body) {
  const response = await fetch(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer?.error?.message ?? `${path}: HTTP ${response.status}`);
  return answer;
}

const input = (id, value, size = 30, attrs = {}) => el('input', { id, type: 'text', value, size, ...attrs });

export async function render(root) {
  // --- serve mode -----------------------------------------------------------------------------------------------
  const serveUrl = input('serve-url', localStorage.getItem('studio.serveUrl') ?? 'http://127.0.0.1:8010');
  const apiKey = input('serve-key', '', 16, { type: 'password', placeholder: 'explorer.api_key, if set' });
  const prompt = el('textarea', { id: 'serve-prompt', rows: 3, cols: 70, placeholder: 'a prompt for the served model' });
  const n = el(
    'select',
    { id: 'serve-n' },
    [1, 2, 3, 4].map((k) => el('option', { value: k, selected: k === 2 }, String(k))),
  );
  const answers = el('div', { id: 'serve-answers' });
  const serveNote = el('div', { id: 'serve-note', class: 'muted' });
  const dpoFile = input('dpo-file', localStorage.getItem('studio.dpoFile') ?? 'feedback/preferences.jsonl', 36);
  const dpoNote = el('div', { id: 'dpo-note', class: 'muted' });

  async function prefer(promptText, chosen, rejected) {
    localStorage.setItem('studio.dpoFile', dpoFile.value);
    const saved = await post('/api/feedback/preference', { file: dpoFile.value, prompt: promptText, chosen, rejected });
    dpoNote.textContent = `${saved.file}: ${saved.pairs} pair(s)`;
    dpoNote.dataset.pairs = String(saved.pairs);
    return saved;
  }

  function answerCard(generated, answer) {
    const reward = el('input', { class: 'reward', type: 'number', step: 'any', value: '1', size: 5 });
    const sent = el('span', { class: 'sent muted' });
    const send = async (value) => {
      try {
        const result = await post('/api/feedback/serve/reward', {
          url: serveUrl.value,
          apiKey: apiKey.value,
          responseId: generated.responseId,
          choiceIndex: answer.choiceIndex,
          reward: value,
        });
        sent.textContent = `reward ${value} written (${result.eid})`;
        card.dataset.rewarded = String(value);
      } catch (error) {
        sent.textContent = error.message;
      }
    };
    const card = el(
      'div',
      { class: 'answer', 'data-choice': answer.choiceIndex },
      el('div', { class: 'muted' }, `answer ${answer.choiceIndex + 1}`),
      el('pre', { class: 'text' }, answer.text),
      el('button', { class: 'good', onclick: () => send(1) }, '👍 1'),
      el('button', { class: 'bad', onclick: () => send(0) }, '👎 0'),
      ' reward ',
      reward,
      el('button', { class: 'send', onclick: () => send(Number(reward.value)) }, 'Send'),
      ' ',
      sent,
    );
    return card;
  }

  async function generate() {
    localStorage.setItem('studio.serveUrl', serveUrl.value);
    serveNote.textContent = 'asking the model…';
    answers.replaceChildren();
    try {
      const generated = await post('/api/feedback/serve/generate', {
        url: serveUrl.value,
        apiKey: apiKey.value,
        prompt: prompt.value,
        n: Number(n.value),
      });
      serveNote.textContent = `response ${generated.responseId} (${generated.model}): rate each answer, or pick the better`;
      answers.dataset.response = generated.responseId;
      answers.append(...generated.answers.map((a) => answerCard(generated, a)));
      if (generated.answers.length >= 2) {
        const [a, b] = generated.answers;
        answers.append(
          el(
            'div',
            { class: 'pair-pick' },
            el(
              'button',
              {
                class: 'prefer-1',
                onclick: () => prefer(generated.prompt, a.text, b.text).catch((e) => (dpoNote.textContent = e.message)),
              },
              'answer 1 is better → DPO pair',
            ),
            el(
              'button',
              {
                class: 'prefer-2',
                onclick: () => prefer(generated.prompt, b.text, a.text).catch((e) => (dpoNote.textContent = e.message)),
              },
              'answer 2 is better → DPO pair',
            ),
          ),
        );
      }
    } catch (error) {
      serveNote.textContent = error.message;
    }
  }

  // --- a pair by hand ----------------------------------------------------------------------------------------------
  const pairPrompt = el('textarea', { id: 'pair-prompt', rows: 2, cols: 70, placeholder: 'prompt' });
  const pairA = el('textarea', { id: 'pair-a', rows: 3, cols: 34, placeholder: 'answer A' });
  const pairB = el('textarea', { id: 'pair-b', rows: 3, cols: 34, placeholder: 'answer B' });
  const pick = (first) => () =>
    prefer(pairPrompt.value, first ? pairA.value : pairB.value, first ? pairB.value : pairA.value).catch((e) => {
      dpoNote.textContent = e.message;
    });

  // --- the task pipeline's annotation server -------------------------------------------------------------------------
  const annotationUrl = input('annotation-url', '', 36, { placeholder: 'http://127.0.0.1:PORT' });
  const discovered = el('div', { id: 'annotation-servers', class: 'muted' });
  const pending = el('div', { id: 'annotation-pending' });
  const annotationNote = el('div', { id: 'annotation-note', class: 'muted' });

  async function loadPending() {
    annotationNote.textContent = '';
    try {
      const answer = await api('/api/feedback/annotations', { url: annotationUrl.value });
      pending.dataset.rated = String(answer.rated);
      pending.dataset.total = String(answer.total);
      annotationNote.textContent = `${answer.rated} of ${answer.total} rated`;
      pending.replaceChildren(
        ...answer.pending.map((p) =>
          el(
            'div',
            { class: 'pair', 'data-id': p.id },
            el('div', {}, el('strong', {}, `#${p.id} `), p.prompt),
            el(
              'div',
              { class: 'pair-answers' },
              el('pre', { class: 'text' }, p.answer1),
              el('pre', { class: 'text' }, p.answer2),
            ),
            el('button', { class: 'annotate-1', onclick: () => annotate(p.id, 'answer1') }, 'answer 1 is better'),
            el('button', { class: 'annotate-2', onclick: () => annotate(p.id, 'answer2') }, 'answer 2 is better'),
          ),
        ),
      );
    } catch (error) {
      annotationNote.textContent = error.message;
    }
  }
  async function annotate(id, preferred) {
    try {
      await post('/api/feedback/annotations', { url: annotationUrl.value, id, preferred });
    } catch (error) {
      annotationNote.textContent = error.message;
      return;
    }
    await loadPending();
  }
  const servers = await api('/api/feedback/annotation-servers');
  discovered.replaceChildren(
    servers.length === 0
      ? 'No annotation server announced in the runs folder (a running human_preference_annotation_mapper writes annotation_server.json).'
      : el(
          'span',
          {},
          'Announced: ',
          servers.map((s) =>
            el(
              'button',
              {
                class: 'use-server',
                onclick: () => {
                  annotationUrl.value = s.url;
                  void loadPending();
                },
              },
              `${s.operator} (${s.total} pairs) ${s.url}`,
            ),
          ),
        ),
  );
  if (servers.length > 0 && annotationUrl.value === '') annotationUrl.value = servers[0].url;

  root.append(
    el('link', { rel: 'stylesheet', href: '/app/pages/forms.css' }),
    el('h2', {}, 'Human feedback'),
    el('h3', {}, 'Rate a serve-mode run’s answers'),
    el(
      'p',
      { class: 'muted' },
      'A run with mode: serve records each answer; a rating here is sent to its POST /feedback and becomes that answer’s reward in the run’s experience buffer.',
    ),
    el('div', { class: 'toolbar' }, 'endpoint ', serveUrl, ' key ', apiKey, ' answers ', n),
    prompt,
    el('div', {}, el('button', { id: 'serve-generate', class: 'primary', onclick: generate }, 'Ask')),
    serveNote,
    answers,
    el('h3', {}, 'Pick the better of two'),
    el(
      'p',
      { class: 'muted' },
      'Each choice appends {prompt, chosen, rejected} to a JSONL file in the runs folder: a DPO stage reads it as its experience buffer (storage_type: file).',
    ),
    el('div', { class: 'toolbar' }, 'DPO file ', dpoFile),
    pairPrompt,
    el('div', {}, pairA, ' ', pairB),
    el(
      'div',
      {},
      el('button', { id: 'pair-a-better', onclick: pick(true) }, 'A is better'),
      el('button', { id: 'pair-b-better', onclick: pick(false) }, 'B is better'),
    ),
    dpoNote,
    el('h3', {}, 'Task pipeline annotation queue'),
    el(
      'p',
      { class: 'muted' },
      'Pairs waiting in a human_preference_annotation_mapper (data_processor.task_pipeline): the run goes on once all are rated.',
    ),
    discovered,
    el(
      'div',
      { class: 'toolbar' },
      'server ',
      annotationUrl,
      el('button', { id: 'annotation-load', onclick: loadPending }, 'Load pending'),
    ),
    annotationNote,
    pending,
  );
}
