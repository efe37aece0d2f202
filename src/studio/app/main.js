// The Studio's shell: the page table, navigation without reloads, and the live-events connection. A new page is a
// module in ./pages exporting render(root) (it may return a cleanup function) plus an entry in PAGES and its path
// in the server's page list (src/studio/server.ts staticRoutes).
import { connectEvents, el } from './lib.js';

export const PAGES = [
  { path: '/runs', title: 'Runs', load: () => import('./pages/runs.js') },
  { path: '/curves', title: 'Curves', load: () => import('./pages/curves.js') },
  { path: '/rollouts', title: 'Rollouts', load: () => import('./pages/rollouts.js') },
  { path: '/buffer', title: 'Buffer', load: () => import('./pages/buffer.js') },
  { path: '/config', title: 'Config', load: () => import('./pages/config.js') },
  { path: '/launches', title: 'Launches', load: () => import('./pages/launches.js') },
  { path: '/feedback', title: 'Feedback', load: () => import('./pages/feedback.js') },
];

const root = document.getElementById('page');
const nav = document.getElementById('nav');
let cleanup = null;

async function show() {
  const page = PAGES.find((p) => p.path === location.pathname) ?? PAGES[0];
  for (const a of nav.querySelectorAll('a')) a.classList.toggle('active', a.getAttribute('href') === page.path);
  document.title = `${page.title} · Trinity Studio`;
  if (typeof cleanup === 'function') cleanup();
  cleanup = null;
  root.replaceChildren();
  root.dataset.page = page.title.toLowerCase();
  try {
    const module = await page.load();
    cleanup = await module.render(root);
  } catch (error) {
    root.replaceChildren(el('p', { class: 'error' }, String(error.message ?? error)));
  }
}

/** Goes to a page (path with query) without a reload. */
export function go(href) {
  history.pushState(null, '', href);
  void show();
}
window.studio = { go, charts: [] };

for (const page of PAGES)
  nav.append(
    el(
      'a',
      {
        href: page.path,
        onclick: (e) => {
          e.preventDefault();
          go(page.path);
        },
      },
      page.title,
    ),
  );
window.addEventListener('popstate', () => void show());
connectEvents(document.getElementById('live'));
void show();
