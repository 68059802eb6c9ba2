// Every view and lookup is a URL: query strings on the page's own path (?view=entry&index=12),
// so a result can be shared and reopened, from a service's /ui/ or from any static host
// (no server routing). The services the page points at (?log=&registry=&witness=) stay in
// every link when they were in the URL. Links are plain <a href> (they work with a middle
// click and without this script); a plain click is handled here without a reload.

export const SERVICE_KEYS = ['log', 'registry', 'witness'];
const handlers = [];

export const params = () => new URLSearchParams(location.search);

/** The href of a view: `query` ({view, index, …}; null values dropped) plus the service
 * parameters of the current URL. */
export function href(query) {
  const cur = params(), out = new URLSearchParams();
  for (const k of SERVICE_KEYS) if (cur.get(k) && !(k in query)) out.set(k, cur.get(k));
  for (const [k, v] of Object.entries(query)) if (v !== null && v !== undefined && v !== '') out.set(k, String(v));
  return `${location.pathname}?${out}`;
}

/** Open a view: a new history entry (or the current one replaced), then the handlers run. */
export function go(query, { replace = false } = {}) {
  const url = typeof query === 'string' ? query : href(query);
  if (replace) history.replaceState(null, '', url); else history.pushState(null, '', url);
  for (const fn of handlers) fn(params());
}

export function onRoute(fn) { handlers.push(fn); }

export function start() {
  window.addEventListener('popstate', () => { for (const fn of handlers) fn(params()); });
  document.addEventListener('click', (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const a = e.target.closest && e.target.closest('a[href]');
    if (!a || a.target || a.hasAttribute('download')) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || url.pathname !== location.pathname || !url.search) return;
    e.preventDefault();
    go(url.pathname + url.search);
  });
}
