// Trust (?view=trust): what the page checks against and how to change it; the trust bar under
// the navigation, on every view; and the alarms above it, the loudest thing the page says
// (a log that showed two histories, a key that changed).
import * as oap from '../../lib/index.js';
import { $, h, rows, fill, value, time, downloadButton, reasonOf, shorten } from '../dom.js';
import { show } from '../verdict.js';
import { app } from '../services.js';
import { get } from '../net.js';
import { href, SERVICE_KEYS } from '../router.js';
import { SOURCES, SHORT, keysIn } from '../trust.js';
import { UNPINNED_WORDS } from '../checks.js';

let source = { kind: 'pasted', detail: '', text: null }; // where the policy in the text box came from
let changed = () => {};

/** `onChange` runs after a pin is added or removed (the views check again). */
export function init(onChange) {
  changed = onChange;
  $('policy').addEventListener('input', () => { source = { kind: 'pasted', detail: '', text: null }; });
  $('policy-file').addEventListener('change', async (e) => {
    const f = e.target.files[0];
    if (!f) return;
    $('policy').value = await f.text();
    source = { kind: 'file', detail: f.name, text: $('policy').value };
    said(`Loaded ${f.name}: check it, then pin it.`);
  });
  const zone = $('policy-drop');
  zone.addEventListener('dragover', (e) => e.preventDefault());
  zone.addEventListener('drop', async (e) => {
    e.preventDefault();
    const f = e.dataTransfer.files[0];
    if (!f) return;
    $('policy').value = await f.text();
    source = { kind: 'file', detail: f.name, text: $('policy').value };
    said(`Loaded ${f.name}: check it, then pin it.`);
  });
  $('policy-fetch').addEventListener('click', async () => {
    const url = $('policy-url').value.trim();
    if (!/^https?:\/\//.test(url)) { said('give an http(s) URL'); return; }
    try {
      $('policy').value = await get(url, 'text');
      source = { kind: 'url', detail: url, text: $('policy').value };
      said(`Fetched ${url}: check it, then pin it.`);
    } catch (e) { said(`FAILED: ${reasonOf(e)}`); }
  });
  $('policy-pin').addEventListener('click', async () => {
    const text = $('policy').value;
    const kind = source.text === text ? source.kind : 'pasted';
    try {
      const origins = await app.trust.pin(text, kind, kind === 'pasted' ? '' : source.detail);
      said(`Pinned for ${origins.join(', ')}.`);
      await changed();
    } catch (e) { said(`FAILED: the policy does not parse: ${reasonOf(e)}`); }
  });
  $('forget-history').addEventListener('click', () => { app.trust.forgetHistory(); changed(); });
  $('services').addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams({ view: 'log' });
    for (const k of SERVICE_KEYS) { const v = $(`${k}-url`).value.trim().replace(/\/+$/, ''); if (v) q.set(k, v); }
    location.assign(`${location.pathname}?${q}`); // the services are found again from these
  });
  app.trust.onChange(alarms);
}

function said(text) { $('policy-said').textContent = text; }

/** Trust the log's own policy from now on (trust on first use); later changes of its key are flagged. */
async function tofu() {
  if (!app.served) return;
  try {
    await app.trust.pin(app.served, 'tofu', app.log);
    await changed();
  } catch (e) { said(`FAILED: ${reasonOf(e)}`); }
}

const origin = () => (app.head && app.head.cp ? app.head.cp.origin : app.logInfo ? app.logInfo.origin : null);

/** The one line under the navigation: pinned or not, and the way to pin. */
export function bar() {
  const o = origin(), el = $('trust-bar');
  if (!o) { el.dataset.state = 'idle'; fill(el, 'Trust: no log loaded. ', h('a', { href: href({ view: 'trust' }), text: 'Trust settings' })); return; }
  const pin = app.trust.pinFor(o);
  if (pin) {
    el.dataset.state = 'pass';
    const keys = keysIn(pin.text, o);
    fill(el, h('strong', { text: 'Pinned: ' }), `${o}, ${SHORT[pin.source] || pin.source}`,
      keys.length ? [', key ', h('span', { class: 'mono', title: keys[0], text: shorten(keys[0]) })] : '', '. ',
      h('a', { href: href({ view: 'trust' }), text: 'Trust' }));
    return;
  }
  el.dataset.state = 'unpinned';
  fill(el, h('strong', { text: 'NOT PINNED: ' }), `what you see of ${o} is ${UNPINNED_WORDS}. `,
    app.served ? h('button', { type: 'button', id: 'tofu', class: 'small', text: "Trust this log's key (first use)", on: { click: tofu } }) : '',
    ' ', h('a', { href: href({ view: 'trust' }), text: 'Pin a policy' }));
}

/** The alarms: evidence of two histories (kept until dismissed), and key changes. */
let shown = null;
export function alarms() {
  const list = app.trust.alarms();
  const said = JSON.stringify(list);
  if (said === shown) { bar(); return; } // unchanged: leave the box (and the focus in it) alone
  shown = said;
  fill('alarms', list.map((a) => {
    if (a.kind === 'conflict') {
      const evidence = `Two checkpoints of ${a.origin}, signed by ${a.vkey}, that cannot both be true (${a.reason}).\n\n`
        + `Seen earlier:\n${a.earlier}\nSeen at ${a.at}:\n${a.later}`;
      return h('div', { class: 'alarm', data: { kind: 'inconsistent' } },
        h('p', { class: 'alarm-title', text: `INCONSISTENT: ${a.origin} has shown two different histories` }),
        h('p', {}, `Two checkpoints signed by the same log key cannot both be true: ${a.reason}. The log (or someone with its key) `
          + 'showed this browser a fork. Keep the evidence and report it to the log\'s operator and witnesses.'),
        h('p', { class: 'row' }, downloadButton(evidence, 'inconsistent-checkpoints.txt', 'download the evidence'), ' ',
          h('button', { type: 'button', class: 'small', text: 'dismiss', on: { click: () => app.trust.dismissConflict(a.origin, a.vkey) } })));
    }
    return h('div', { class: 'alarm', data: { kind: a.id.startsWith('key:') ? 'key-changed' : 'other' } },
      h('p', { class: 'alarm-title', text: a.title }), h('p', { text: a.detail }),
      h('p', {}, h('button', { type: 'button', class: 'small', text: 'dismiss', on: { click: () => app.trust.dismissEvent(a.id) } })));
  }));
  bar();
}

/** What a policy requires, one row each: the log's key, every witness and mirror (key, URL),
 * the groups, the quorum, `logs <k>`, and the registries whose keys it pins. `state`: the rows'
 * state (pass for a pinned policy, info for what a log says about itself). */
export function policyRows(text, o, state) {
  let p;
  try { p = oap.parsePolicy(text); } catch (e) { return [{ state: 'fail', label: 'policy', detail: [reasonOf(e)] }]; }
  const at = (url) => (url ? [' at ', h('span', { class: 'mono', text: url })] : '');
  const out = keysIn(text, o).map((k) => ({ state, label: 'log key', detail: [value(k, 'log key')] }));
  for (const w of p.witnesses.values())
    out.push({ id: w.mirror ? 'policy-mirror' : 'policy-witness', state, label: `${w.mirror ? 'mirror' : 'witness'} ${w.name}`,
      detail: [value(w.vkey, `key of ${w.name}`), at(w.url), w.mirror ? ' (a C2SP tlog-mirror: its cosignature also says it stored the entries)' : ''] });
  for (const g of p.groups.values()) {
    const n = g.members.length, k = g.threshold === n ? (n === 1 ? '1' : 'all') : g.threshold === 1 ? 'any' : String(g.threshold);
    out.push({ id: 'policy-group', state, label: `group ${g.name}`, detail: [`${k} of ${g.members.join(', ')}`] });
  }
  out.push({ id: 'policy-quorum', state, label: 'quorum',
    detail: [p.quorum === null ? 'none: no cosignature is required' : `${p.quorum}: a checkpoint is accepted only when it is met`] });
  if (p.logQuorum > 1) out.push({ id: 'policy-logs', state, label: 'logs', detail: [`an entry counts when ${p.logQuorum} of the logs hold it`] });
  for (const reg of p.registries)
    out.push({ id: 'policy-registry', state, label: 'registry key', detail: [value(reg.did, 'registry key'), at(reg.url), ': status answers must be signed by it'] });
  return out;
}

export async function render() {
  const o = origin();
  const pin = o ? app.trust.pinFor(o) : null;
  if (!o) show('trust-state', { state: 'idle', headline: 'no log loaded' });
  else if (pin) {
    show('trust-state', { state: 'pass', headline: `PINNED: ${o}`, summary: `checked against ${SOURCES[pin.source] || pin.source}${pin.detail ? ` (${pin.detail})` : ''}`,
      checks: policyRows(pin.text, o, 'pass') });
  } else {
    show('trust-state', { state: 'unpinned', headline: `NOT PINNED: ${o}`, summary: `results are ${UNPINNED_WORDS}`,
      checks: app.served ? [{ state: 'info', label: 'the log says', detail: ['(its own /v1/policy, not checked against anything you trust)'] },
        ...policyRows(app.served, o, 'info')]
        : app.logInfo ? [{ state: 'info', label: 'the log says its key is', detail: [value(app.logInfo.verifier_key, 'log key')] }] : [] });
  }
  const actions = [];
  if (o && !pin && app.served) actions.push(h('button', { type: 'button', id: 'tofu-here', text: "Trust this log's key (first use)", on: { click: tofu } }));
  if (o && app.trust.pins[o]) actions.push(h('button', { type: 'button', text: `Unpin ${o}`, on: { click: async () => { app.trust.unpin(o); await changed(); } } }));
  if (o && !pin && app.served && !$('policy').value) { // the log's own policy, to read before trusting it
    $('policy').value = app.served;
    source = { kind: 'tofu', detail: app.log, text: app.served };
  }
  fill('trust-actions', actions);
  const pins = Object.entries(app.trust.pins).map(([org, p]) => ({ state: 'pass', cells: [org, keysIn(p.text, org).map((k) => value(k, 'pinned key')),
    [SOURCES[p.source] || p.source, p.detail ? ` (${p.detail})` : '', p.at ? [', ', time(p.at)] : ''],
    h('button', { type: 'button', class: 'small', text: 'forget', attrs: { 'aria-label': `forget the pin for ${org}` }, on: { click: async () => { app.trust.unpin(org); await changed(); } } })] }));
  if (app.trust.shipped) for (const org of app.trust.shipped.origins)
    pins.push({ state: 'pass', cells: [org, keysIn(app.trust.shipped.text, org).map((k) => value(k, 'shipped key')), [SOURCES.operator, ` (${app.trust.shipped.url})`], ''] });
  rows('pins', pins);
  const seen = [];
  for (const [org, byKey] of Object.entries(app.trust.seen)) {
    for (const [k, hist] of Object.entries(byKey)) {
      seen.push({ state: hist.conflict ? 'fail' : '', cells: [org, value(k, 'key'),
        hist.last ? [`size ${hist.last.size}, `, time(new Date(hist.last.t).toISOString())] : '—',
        hist.conflict ? `INCONSISTENT: ${hist.conflict.reason}` : 'consistent'] });
    }
  }
  rows('seen', seen);
  for (const k of SERVICE_KEYS) $(`${k}-url`).value = app[k] || '';
}
