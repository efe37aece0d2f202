// Config builder: a form generated from the config schema (GET /api/config/schema), presets per algorithm, an
// editable YAML view, the problems `trinity config check` finds (POST /api/config/check runs the command's own
// check) shown beside their fields, download, save and "start run" (POST /api/launches).
import { el, params, setParams } from '../lib.js';
import YAML from '/vendor/yaml/index.js';

const CHECK_DELAY_MS = 250;

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

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

function getIn(tree, path) {
  let node = tree;
  for (const key of path) {
    if (!isObject(node)) return undefined;
    node = node[key];
  }
  return node;
}

/** Sets (or, for undefined, deletes) a key; mappings on the way are made, and left empty ones removed. */
function setIn(tree, path, value) {
  const parents = [];
  let node = tree;
  for (const key of path.slice(0, -1)) {
    if (!isObject(node[key])) {
      if (value === undefined) return;
      node[key] = {};
    }
    parents.push([node, key]);
    node = node[key];
  }
  const last = path.at(-1);
  if (value === undefined) delete node[last];
  else node[last] = value;
  for (const [parent, key] of parents.reverse())
    if (isObject(parent[key]) && Object.keys(parent[key]).length === 0) delete parent[key];
}

/** What a leaf's input holds → the YAML value (undefined: unset, the default applies). */
function readInput(field, input) {
  const text = input.value;
  if (text === '') return undefined;
  if (field.kind === 'boolean') return text === 'true';
  if (field.kind === 'number' || field.kind === 'integer')
    return /^\s*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*$/i.test(text) ? Number(text) : text;
  if (field.kind === 'yaml') return YAML.parse(text);
  return text;
}

function showValue(field, value) {
  if (value === undefined || value === null) return '';
  if (field.kind === 'yaml')
    return isObject(value) || Array.isArray(value) ? YAML.stringify(value, { flowLevel: 0 }).trim() : String(value);
  return String(value);
}

function hint(field) {
  const parts = [];
  if (field.default !== undefined) parts.push(`default ${JSON.stringify(field.default)}`);
  if (field.min || field.max) {
    const lo = field.min ? `${field.min.exclusive ? '(' : '['}${field.min.value}` : '(-∞';
    const hi = field.max ? `${field.max.value}${field.max.exclusive ? ')' : ']'}` : '∞)';
    parts.push(`${lo}, ${hi}`);
  }
  if (field.required) parts.push('required');
  return parts.join(' · ');
}

export async function render(root) {
  const [schema, presets] = await Promise.all([
    fetch('/api/config/schema').then((r) => r.json()),
    fetch('/api/config/presets').then((r) => r.json()),
  ]);
  let tree = {};
  let edits = 0;
  let timer = null;
  const inputs = new Map(); // path → [field, input]
  const problemSlots = new Map(); // path → element

  const fileInput = el('input', {
    id: 'config-file',
    type: 'text',
    size: 40,
    value: params().get('file') ?? 'configs/studio.yaml',
  });
  const yamlView = el('textarea', { id: 'yaml', spellcheck: 'false', rows: 30 });
  const status = el('div', { id: 'check-status', 'data-state': 'pending' }, 'checking…');
  const message = el('pre', { id: 'check-message', class: 'problems' });
  const startNote = el('div', { id: 'start-note', class: 'muted' });
  const presetSelect = el(
    'select',
    { id: 'preset' },
    el('option', { value: '' }, 'preset…'),
    presets.map((p) => el('option', { value: p.name, title: p.description }, `${p.name}: ${p.description}`)),
  );

  function leaf(field) {
    const id = `f-${field.path}`;
    let input;
    if (field.kind === 'enum' || field.kind === 'boolean') {
      const choices = field.kind === 'boolean' ? ['true', 'false'] : field.choices;
      input = el(
        'select',
        { id },
        el('option', { value: '' }, field.default === undefined ? '—' : `(${field.default})`),
        choices.map((c) => el('option', { value: c }, c)),
      );
    } else if (field.kind === 'yaml') {
      input = el('textarea', { id, rows: 1, placeholder: field.default === undefined ? 'YAML' : JSON.stringify(field.default) });
    } else {
      input = el('input', { id, type: 'text', placeholder: field.default === undefined ? '' : String(field.default) });
    }
    input.dataset.path = field.path;
    const local = el('span', { class: 'local-error' });
    input.addEventListener('change', () => {
      try {
        local.textContent = '';
        setIn(tree, field.path.split('.'), readInput(field, input));
      } catch (error) {
        local.textContent = `not YAML: ${error.message}`;
        return;
      }
      yamlView.value = Object.keys(tree).length ? YAML.stringify(tree, { lineWidth: 0 }) : '';
      scheduleCheck();
    });
    inputs.set(field.path, [field, input]);
    const problem = el('div', { class: 'field-problem', 'data-for': field.path });
    problemSlots.set(field.path, problem);
    return el(
      'div',
      { class: 'field', 'data-field': field.path },
      el('label', { for: id }, field.key, field.required ? ' *' : ''),
      input,
      el('span', { class: 'muted hint' }, hint(field)),
      local,
      problem,
    );
  }

  function group(field, depth) {
    const problem = el('div', { class: 'field-problem', 'data-for': field.path });
    if (field.path !== '') problemSlots.set(field.path, problem);
    const children = field.fields.map((f) => (f.kind === 'object' ? group(f, depth + 1) : leaf(f)));
    if (field.path === '') return el('div', { class: 'form-root' }, problem, children);
    return el(
      'details',
      { class: 'group', 'data-group': field.path, open: depth === 0 && ['model', 'algorithm', 'buffer'].includes(field.key) },
      el('summary', {}, field.key, field.nullable ? el('span', { class: 'muted' }, ' (optional section)') : ''),
      problem,
      children,
    );
  }
  problemSlots.set('', el('div'));

  /** The form's inputs from the tree. */
  function fillForm() {
    for (const [path, [field, input]] of inputs) input.value = showValue(field, getIn(tree, path.split('.')));
  }

  function scheduleCheck() {
    edits++;
    status.dataset.current = 'false';
    clearTimeout(timer);
    timer = setTimeout(check, CHECK_DELAY_MS);
  }

  async function check() {
    const edit = edits;
    const text = yamlView.value;
    let answer;
    try {
      answer = await post('/api/config/check', { file: fileInput.value, yaml: text });
    } catch (error) {
      status.dataset.state = 'error';
      status.textContent = error.message;
      return;
    }
    if (edit !== edits) return; // a newer edit is being checked
    for (const slot of problemSlots.values()) slot.replaceChildren();
    for (const p of answer.problems) {
      // beside the field of its key, or of the nearest section above it (an unknown key sits in its section)
      const segments = p.path === '' ? [] : p.path.split('.');
      let slot;
      while (slot === undefined) {
        slot = problemSlots.get(segments.join('.'));
        if (slot === undefined) segments.pop();
      }
      slot.append(el('div', { class: 'problem', 'data-path': p.path }, p.text));
      slot.closest('details')?.setAttribute('open', '');
    }
    message.textContent = answer.message;
    status.dataset.state = answer.ok ? 'ok' : 'error';
    status.dataset.file = answer.file;
    status.textContent = answer.ok
      ? `✓ trinity config check ${answer.file}: no problems`
      : `✗ trinity config check ${answer.file}: ${answer.problems.length} problem(s)`;
    status.dataset.current = 'true';
  }

  yamlView.addEventListener('input', () => {
    try {
      const parsed = YAML.parse(yamlView.value);
      tree = isObject(parsed) ? parsed : {};
      fillForm();
    } catch {
      // the check reports the syntax error with its line and column
    }
    scheduleCheck();
  });
  fileInput.addEventListener('change', () => {
    setParams({ file: fileInput.value });
    scheduleCheck();
  });
  presetSelect.addEventListener('change', () => {
    const preset = presets.find((p) => p.name === presetSelect.value);
    if (preset === undefined) return;
    yamlView.value = preset.yaml;
    tree = YAML.parse(preset.yaml);
    fillForm();
    scheduleCheck();
  });

  const save = async () => post('/api/config/save', { file: fileInput.value, yaml: yamlView.value });
  const download = () => {
    const a = el('a', {
      href: URL.createObjectURL(new Blob([yamlView.value], { type: 'application/yaml' })),
      download: fileInput.value.split('/').at(-1) || 'config.yaml',
    });
    a.click();
    URL.revokeObjectURL(a.href);
  };
  const start = async () => {
    startNote.textContent = 'starting…';
    try {
      const saved = await save();
      const launch = await post('/api/launches', { config: saved.file });
      startNote.textContent = `started: launch ${launch.id}, run ${launch.run}`;
      window.studio.go(`/launches?launch=${launch.id}`);
    } catch (error) {
      startNote.textContent = error.message;
      startNote.dataset.state = 'error';
    }
  };

  root.append(
    el('link', { rel: 'stylesheet', href: '/app/pages/forms.css' }),
    el('h2', {}, 'Config builder'),
    el(
      'div',
      { class: 'toolbar' },
      presetSelect,
      el('label', { for: 'config-file' }, ' file in the runs folder '),
      fileInput,
      el(
        'button',
        {
          id: 'save',
          onclick: () =>
            save().then(
              (s) => (startNote.textContent = `saved ${s.file}`),
              (e) => (startNote.textContent = e.message),
            ),
        },
        'Save',
      ),
      el('button', { id: 'download', onclick: download }, 'Download YAML'),
      el('button', { id: 'start-run', class: 'primary', onclick: start }, 'Start run'),
      startNote,
    ),
    el(
      'div',
      { class: 'builder' },
      el('div', { class: 'form', id: 'config-form' }, group(schema, -1)),
      el('div', { class: 'preview' }, el('h3', {}, 'YAML'), yamlView, status, message),
    ),
  );

  const file = params().get('file');
  if (file) {
    try {
      const answer = await fetch(`/api/config/file?file=${encodeURIComponent(file)}`).then((r) => r.json());
      if (typeof answer.yaml === 'string') yamlView.value = answer.yaml;
    } catch {
      // a new file
    }
  }
  try {
    tree = YAML.parse(yamlView.value) ?? {};
  } catch {
    tree = {};
  }
  fillForm();
  scheduleCheck();
  return () => clearTimeout(timer);
}
