// The explorer page: fetches what the services serve and verifies it here, with the verifiers
// of lib/ (WebCrypto only). Nothing is green because a service said so: a result is green only
// when the math held in this browser against a policy that was pinned (page/trust.js). Every
// view is a URL (page/router.js). DOM updates use textContent only: the page runs under a CSP
// with no inline code and Trusted Types.
import { $, reasonOf } from './page/dom.js';
import * as router from './page/router.js';
import { app, discover } from './page/services.js';
import { refreshHead, onHead, startPolling } from './page/head.js';
import { failed } from './page/verdict.js';
import * as log from './page/views/log.js';
import * as entries from './page/views/entries.js';
import * as entry from './page/views/entry.js';
import * as search from './page/views/search.js';
import * as bundle from './page/views/bundle.js';
import * as registry from './page/views/registry.js';
import * as principal from './page/views/principal.js';
import * as witness from './page/views/witness.js';
import * as trust from './page/views/trust.js';

/** Each view: the section it shows, the navigation link it belongs to, its title, how it draws. */
const VIEWS = {
  log: { nav: 'log', title: 'Log', render: log.render },
  entries: { nav: 'entries', title: 'Entries', render: entries.render },
  entry: { nav: 'entries', title: 'Entry', render: entry.render },
  search: { nav: 'search', title: 'Search', render: search.render },
  bundle: { nav: 'bundle', title: 'Bundle check', render: bundle.render },
  registry: { nav: 'registry', title: 'Registry', render: registry.render },
  principal: { nav: 'registry', title: 'Status', render: principal.render, leave: principal.leave },
  commit: { nav: 'registry', title: 'Registry commit', render: registry.renderCommit },
  witness: { nav: 'witness', title: 'Witnesses', render: witness.render },
  trust: { nav: 'trust', title: 'Trust', render: trust.render },
};
let defaultView = 'log', current = null, routed = 0;

/** The view a URL names: ?view=, else the links of earlier versions (?index=, ?id=, #entry). */
function viewOf(params) {
  const v = params.get('view');
  if (v && VIEWS[v]) return v;
  if (params.get('index')) return 'entry';
  if (params.get('id')) return 'principal';
  const old = location.hash.slice(1);
  if (VIEWS[old]) return old;
  return defaultView;
}

async function route(params) {
  const name = viewOf(params), view = VIEWS[name], mine = ++routed;
  const moved = current !== null && current !== name;
  if (moved && VIEWS[current].leave) VIEWS[current].leave();
  current = name;
  for (const id of Object.keys(VIEWS)) $(id).hidden = id !== name;
  for (const a of document.querySelectorAll('nav a[data-view]')) {
    if (a.dataset.view === view.nav) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    a.href = router.href({ view: a.dataset.view });
  }
  $('home').href = router.href({});
  document.title = `${view.title} · OAP explorer`;
  document.body.dataset.view = name;
  if (moved) $(`${name}-title`).focus({ preventScroll: false });
  try {
    await view.render(params);
  } catch (e) {
    const v = document.querySelector(`#${name} .verdict`);
    if (v) failed(v, reasonOf(e));
  }
  if (mine === routed) document.body.dataset.rendered = String(mine);
}

/** A pin was added or removed: check the head again, then the view shown. */
async function trustChanged() {
  await refreshHead({ force: true });
  trust.alarms();
  await route(router.params());
}

async function main() {
  router.start();
  router.onRoute((p) => { route(p); });
  for (const v of [entries, entry, search, bundle, registry]) v.init();
  trust.init(trustChanged);
  onHead((head) => { // the log view and the trust line follow every new checkpoint, shown or not
    trust.alarms();
    log.showHead(head);
  });
  if (location.protocol.startsWith('http')) await app.trust.loadShipped(new URL('trust.policy', location.href).href);
  const params = router.params();
  defaultView = await discover(params);
  if (app.log) await refreshHead();
  trust.alarms();
  startPolling();
  await route(params);
  document.body.dataset.ready = '1';
}

main().catch((e) => {
  document.body.dataset.ready = 'error';
  failed('log-verdict', reasonOf(e));
});
