// DOM helpers of the explorer's pages. Text goes in with textContent only (the page runs
// under a CSP with Trusted Types: no HTML strings anywhere). Keys, hashes and DIDs are shown
// shortened, with the whole value a click (or hover) away and a copy button beside it.

export const $ = (id) => document.getElementById(id);

/** h('a', {href, class, text, title, data: {...}, attrs: {...}, on: {click}}, ...children) */
export function h(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = String(v);
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
    else if (k === 'attrs') for (const [ak, av] of Object.entries(v)) { if (av !== null && av !== undefined) e.setAttribute(ak, String(av)); }
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (k in e && typeof e[k] !== 'function') e[k] = v;
    else e.setAttribute(k, String(v));
  }
  append(e, children);
  return e;
}
function append(e, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}
export function fill(target, ...children) {
  const e = typeof target === 'string' ? $(target) : target;
  e.replaceChildren();
  append(e, children);
  return e;
}

/** The shortened form of a key, hash or DID: enough to recognise it, never enough to mistake
 * for another by eye alone (the full value is one click away). */
export function shorten(text) {
  const s = String(text);
  if (s.length <= 28) return s;
  const plus = s.split('+');
  if (plus.length >= 3 && /^[0-9a-f]{8}$/.test(plus[1])) { // a vkey: name+keyid+key
    const key = plus.slice(2).join('+');
    return `${plus[0]}+${plus[1]}+${key.slice(0, 4)}…${key.slice(-4)}`;
  }
  const m = /^(did:[a-z0-9]+:|sha256:|ed25519:)(.*)$/.exec(s);
  if (m) return m[1] + m[2].slice(0, 8) + '…' + m[2].slice(-6);
  return s.slice(0, 12) + '…' + s.slice(-8);
}

let copyFallback = null;
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_) { // no clipboard permission (or an insecure context): select it in a field
    copyFallback ??= h('textarea', { class: 'copy-fallback', attrs: { 'aria-hidden': 'true', tabindex: '-1', readonly: '' } });
    if (!copyFallback.isConnected) document.body.append(copyFallback);
    copyFallback.value = text;
    copyFallback.select();
    try { return document.execCommand('copy'); } catch (_e) { return false; } finally { copyFallback.blur(); }
  }
}

/** A small "copy" button for `text`; `what` names it for screen readers. */
export function copyButton(text, what) {
  const b = h('button', { type: 'button', class: 'copy', text: 'copy', attrs: { 'aria-label': `copy ${what}` } });
  b.addEventListener('click', async () => {
    const ok = await copyText(text);
    b.textContent = ok ? 'copied' : 'select and copy';
    b.dataset.copied = ok ? '1' : '0';
    setTimeout(() => { b.textContent = 'copy'; }, 1500); // the label only: nothing waits on it
  });
  return b;
}

/** A key, hash or DID: shortened, the full value on hover (title) and on click (expands in
 * place), and a copy button. `link` (optional) makes the short form a link instead. */
export function value(text, what = 'value', { link = null, copy = true } = {}) {
  const full = String(text);
  const short = shorten(full);
  const out = h('span', { class: 'value' });
  if (link) {
    out.append(h('a', { href: link.href, class: 'mono', title: full, text: short, data: link.data || {} }));
  } else if (short === full) {
    out.append(h('span', { class: 'mono', text: full }));
  } else {
    const b = h('button', { type: 'button', class: 'mono expand', title: full, text: short,
      attrs: { 'aria-expanded': 'false', 'aria-label': `${what} ${short}: show in full` } });
    b.addEventListener('click', () => {
      const open = b.getAttribute('aria-expanded') !== 'true';
      b.setAttribute('aria-expanded', String(open));
      b.textContent = open ? full : short;
      b.classList.toggle('full', open);
    });
    out.append(b);
  }
  if (copy) out.append(copyButton(full, what));
  return out;
}

/** A time that never breaks mid-token, with its age. */
export function time(iso, { age = true } = {}) {
  if (!iso) return h('span', { class: 'muted', text: '—' });
  const d = new Date(iso);
  // the date and the time of day each stay whole; a line may break only between them
  const at = iso.indexOf('T');
  const t = h('time', { class: 'time', attrs: { datetime: iso }, title: isNaN(d) ? iso : d.toString() },
    at > 0 ? [h('span', { class: 'nw', text: iso.slice(0, at) }), h('wbr'), h('span', { class: 'nw', text: iso.slice(at) })] : iso);
  if (!age || isNaN(d)) return t;
  return h('span', { class: 'when' }, t, ' ', h('span', { class: 'age', text: `(${ago((Date.now() - d.getTime()) / 1000)})` }));
}
export function ago(seconds) {
  const s = Math.round(seconds), a = Math.abs(s);
  const t = a >= 86400 ? `${Math.floor(a / 86400)} d` : a >= 3600 ? `${Math.floor(a / 3600)} h`
    : a >= 60 ? `${Math.floor(a / 60)} min` : `${a} s`;
  return s >= 0 ? `${t} ago` : `in ${t}`;
}

/** A link to the raw answer a result was made from (opens the service's own JSON or text). */
export function rawLink(url, text = 'raw JSON') {
  return h('a', { class: 'raw', href: url, target: '_blank', rel: 'noopener noreferrer', text,
    attrs: { 'aria-label': `${text}: ${url}` } });
}

/** A button that downloads `text` as `filename`. */
export function downloadButton(text, filename, label = `download ${filename}`) {
  const b = h('button', { type: 'button', class: 'download', text: label });
  b.addEventListener('click', () => {
    const url = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
    const a = h('a', { href: url, download: filename, class: 'hidden' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  return b;
}

/** A definition list of [label, value (text or node)] rows. */
export function facts(target, rows) {
  const dl = typeof target === 'string' ? $(target) : target;
  dl.replaceChildren();
  for (const [k, v] of rows) {
    if (v === undefined) continue;
    dl.append(h('dt', { text: k }), h('dd', {}, v === null ? '—' : v));
  }
  return dl;
}

/** Rows into a table whose header names the columns; each cell carries its column's name
 * (data-label), so that on a phone the table reads as one card per row. */
export function rows(target, cells) {
  const table = typeof target === 'string' ? $(target) : target;
  const labels = [...table.tHead.rows[0].cells].map((c) => c.textContent);
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const row of cells) {
    const tr = h('tr');
    if (row.state) tr.dataset.state = row.state;
    if (row.kind) tr.dataset.kind = row.kind;
    (row.cells || row).forEach((c, i) => {
      const td = h('td', { data: { label: labels[i] || '' } });
      const empty = c === null || c === undefined || c === '';
      if (!empty) td.append(h('span', { class: 'cell' }, c));
      tr.append(td);
    });
    body.append(tr);
  }
  table.dataset.rows = String(cells.length);
  return table;
}

export const reasonOf = (e) => (e && e.reason) || (e && e.message) || String(e);
