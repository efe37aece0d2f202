// Shared helpers of the Studio's pages: the JSON API, a DOM builder, live events, formatting.

/** GET an API path with query parameters; throws the server's error message. */
export async function api(path, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') query.set(k, String(v));
  const response = await fetch(`${path}${query.size ? `?${query}` : ''}`);
  const body = await response.json();
  if (!response.ok) throw new Error(body?.error?.message ?? `${path}: HTTP ${response.status}`);
  return body;
}

/** A run id as one path segment (ids hold slashes). */
export const runPath = (id) => `/api/runs/${encodeURIComponent(id)}`;

/** el('td', { class: 'num', onclick }, child...) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'style' && typeof v === 'object') Object.assign(node.style, v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function fmt(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (Number.isInteger(x)) return String(x);
  return Math.abs(x) >= 1000 || Math.abs(x) < 1e-3 ? x.toExponential(2) : x.toFixed(digits);
}

export function ago(unixSeconds) {
  if (unixSeconds === null || unixSeconds === undefined) return '–';
  const s = Math.max(0, Date.now() / 1000 - unixSeconds);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(unixSeconds * 1000).toLocaleString();
}

/** Live events from /api/events, shared by the pages: listen('metrics' | 'runs', fn) returns an unsubscribe. */
const target = new EventTarget();
let source = null;
export function connectEvents(indicator) {
  if (source !== null) return;
  source = new EventSource('/api/events');
  source.addEventListener('ready', () => {
    indicator.textContent = '● live';
    indicator.classList.add('on');
  });
  source.onerror = () => {
    indicator.textContent = '○ reconnecting';
    indicator.classList.remove('on');
  };
  for (const type of ['metrics', 'runs'])
    source.addEventListener(type, (e) => target.dispatchEvent(new CustomEvent(type, { detail: JSON.parse(e.data) })));
}
export function listen(type, fn) {
  const handler = (e) => fn(e.detail);
  target.addEventListener(type, handler);
  return () => target.removeEventListener(type, handler);
}

/** The page's query parameters, and a way to change them without a reload. */
export function params() {
  return new URLSearchParams(location.search);
}
export function setParams(changes) {
  const p = params();
  for (const [k, v] of Object.entries(changes)) {
    if (v === undefined || v === null || v === '') p.delete(k);
    else p.set(k, String(v));
  }
  history.replaceState(null, '', `${location.pathname}${p.size ? `?${p}` : ''}`);
}

export function statusBadge(status) {
  return el('span', { class: `status ${status}`, 'data-status': status }, status);
}
