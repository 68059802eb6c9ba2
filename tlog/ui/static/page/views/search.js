// Search (?view=search&q=…): by signer DID (the log's receipt index, /v1/receipts, with a
// time range), by receipt hash, leaf hash or index, by receipt id (the latest entry bundles,
// read here) or registry record id, by registry commit hash. Results are what the services
// list: each links to its entry, where it is verified.
import * as oap from '../../lib/index.js';
import { $, h, rows, fill, time, value, reasonOf, rawLink } from '../dom.js';
import { show, running, wrongInput, failedOrInput, checkLength, InputError } from '../verdict.js';
import { app } from '../services.js';
import { get, pathPart } from '../net.js';
import { href, go } from '../router.js';
import { currentHead } from '../head.js';
import { readEntries, entryLink, summary, principalLink, commitLink, signerLink } from '../entrydata.js';

const PAGE = 100;
const SCAN = 1024n; // entries read per step of a receipt-id search
const REGISTRY_IDS = /^urn:oap:(revocation|kill-switch|key-event|conformance):/; // records.js ID_PREFIXES
let generation = 0;

export function init() {
  $('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const q = { view: 'search', q: $('search-q').value.trim(), since: $('search-since').value.trim(), until: $('search-until').value.trim() };
    try { // a mistake in what was typed is said here, and never put in the page's URL
      checkLength(q.q, 'the search text');
      checkLength(q.since, 'since', 64);
      checkLength(q.until, 'until', 64);
    } catch (err) { rows('search-results', []); fill('search-pager'); wrongInput('search-verdict', err.reason); return; }
    go(q);
  });
}

/** What a query is. */
export function kindOf(q) {
  if (/^(0|[1-9][0-9]{0,18})$/.test(q)) return 'index';
  if (/^(did:[a-z0-9]+:|ed25519:)/.test(q)) return 'signer';
  if (/^sha256:[0-9a-fA-F]{64}$/.test(q)) return 'receipt_hash';
  if (/^[0-9a-fA-F]{64}$/.test(q) || /^[A-Za-z0-9+/_-]{43}=?$/.test(q)) return 'leaf';
  if (/^[0-9a-f]{40}$/.test(q)) return 'commit';
  if (/^urn:oap:/.test(q)) return 'id';
  return null;
}

function done(n, what, extra = null) {
  show('search-verdict', { state: n ? 'info' : 'unknown', headline: n ? `${n} ${what}` : `nothing found: ${what}`, extra });
}

export async function render(params) {
  const mine = ++generation;
  const q = params.get('q') || '', since = params.get('since') || '', until = params.get('until') || '';
  $('search-q').value = q; $('search-since').value = since; $('search-until').value = until;
  rows('search-results', []);
  fill('search-pager');
  if (!q) { show('search-verdict', { state: 'idle', headline: 'no search yet' }); return; }
  try {
    checkLength(q, 'the search text');
    if (!kindOf(q)) throw new InputError('not a DID, hash, index or id this page can search for');
    for (const [name, v] of [['since', since], ['until', until]]) {
      if (!v) continue;
      try { oap.parseUtc(v, name); } catch (e) { throw new InputError(reasonOf(e)); }
    }
  } catch (e) { wrongInput('search-verdict', e.reason); return; }
  running('search-verdict', 'searching…');
  try {
    const stale = () => mine !== generation;
    await SEARCHES[kindOf(q)](q, params, stale);
  } catch (e) {
    if (mine === generation) failedOrInput('search-verdict', e, reasonOf);
  }
}

const needLog = () => { if (!app.log) throw new InputError('no log to search: give its URL (Trust, Services)'); };

/** The services' 400 invalid_input about what was asked: an input mistake, in their words. */
async function asked(url) {
  try { return await get(url); } catch (e) {
    if (e.status === 400 && e.code === 'invalid_input') throw new InputError(e.said || 'the service refused the query');
    throw e;
  }
}

/** Why a receipt's agent or tool is not found by a signer search (shown with every such
 * search): the log holds only the receipt's hash and the key that anchored it. */
const SIGNER_HINT = () => h('p', { class: 'hint', data: { hint: 'signer' } },
  "The log knows a receipt only by its hash and by the key that anchored it (the entry's signer: the key given to ",
  h('code', { text: 'oap-log add --key' }), '). The DIDs a receipt names, its agent_did and tool_did, and their signatures stay in '
  + 'the receipt and are never sent to the log. To find a receipt by them, ',
  h('a', { href: href({ view: 'entry' }), text: 'paste the receipt.json' }), ' (it is hashed here) or search for its hash (sha256:…).');

const SEARCHES = {
  async index(q) {
    needLog();
    const list = [{ cells: [entryLink(q), 'the entry at this index', '', ''] }];
    if (app.registry) list.push({ cells: ['', ['registry commit ', commitLink(q, '', `seq ${q}`)], '', ''] });
    rows('search-results', list);
    done(list.length, `result(s) for index ${q}`);
  },

  async signer(q, params, stale) {
    needLog();
    const since = params.get('since'), until = params.get('until'), after = params.get('after');
    const untilUs = until ? oap.parseUtc(until, 'until') : null;
    const qs = new URLSearchParams({ signer: q, limit: String(PAGE) });
    if (since) qs.set('since', since);
    if (after) qs.set('after', after);
    const url = `${app.log}/v1/receipts?${qs}`;
    const body = await asked(url);
    if (stale()) return;
    const hits = body.receipts.filter((x) => untilUs === null || oap.parseUtc(x.logged_at, 'logged_at') <= untilUs
      || (x.timestamp && oap.parseUtc(x.timestamp, 'timestamp') <= untilUs));
    rows('search-results', hits.map((x) => ({ cells: [entryLink(x.index), ['receipt ', value(x.receipt_hash, 'receipt hash')],
      time(x.logged_at), x.timestamp ? time(x.timestamp, { age: false }) : '—'] })));
    const pastUntil = untilUs !== null && body.receipts.length && oap.parseUtc(body.receipts[body.receipts.length - 1].logged_at, 'logged_at') > untilUs;
    if (body.next_after !== undefined && !pastUntil)
      fill('search-pager', h('a', { href: href({ view: 'search', q, since, until, after: String(body.next_after) }), text: 'More receipts ›', rel: 'next' }));
    const who = body.signer && body.signer !== q ? [' (', value(body.signer, 'signer'), ')'] : '';
    done(hits.length, `receipt(s) signed by ${q}${after ? ` after index ${after}` : ''}`, [
      h('p', { class: 'links' }, 'listed by the log\'s receipt index, by the key that anchored each (open one to verify it); ', who,
        rawLink(url), app.registry ? [' · ', principalLink(q, 'its status and records in the registry')] : ''),
      SIGNER_HINT()]);
  },

  async receipt_hash(q) {
    needLog();
    const url = `${app.log}/v1/entries:lookup?receipt_hash=${encodeURIComponent(q.toLowerCase())}`;
    let body;
    try { body = await asked(url); } catch (e) { if (e.status === 404) { done(0, `no entry anchors ${q}`); return; } throw e; }
    rows('search-results', body.receipts.map((x) => ({ cells: [entryLink(x.index), ['signed by ', signerLink(x.signer)],
      time(x.logged_at), x.timestamp ? time(x.timestamp, { age: false }) : '—'] })));
    done(body.receipts.length, `entr${body.receipts.length === 1 ? 'y anchors' : 'ies anchor'} this receipt`, h('p', { class: 'links' }, rawLink(url)));
  },

  async leaf(q) {
    needLog();
    const url = `${app.log}/v1/entries:lookup?leaf_hash=${encodeURIComponent(q)}`;
    let body;
    try { body = await asked(url); } catch (e) { if (e.status === 404) { done(0, 'no entry has this leaf hash'); return; } throw e; }
    rows('search-results', [{ cells: [entryLink(body.index), ['leaf hash ', value(body.leaf_hash, 'leaf hash')], '', ''] }]);
    done(1, 'entry has this leaf hash', h('p', { class: 'links' }, rawLink(url)));
  },

  /** A receipt id: the registry's record of that id, and the log's receipt entries naming it,
   * found by reading the latest entry bundles (a step of SCAN entries; ?before= goes back). */
  async id(q, params, stale) {
    const list = [];
    if (app.registry && REGISTRY_IDS.test(q)) {
      try {
        const rec = await get(`${app.registry}/v1/records/${pathPart(q)}`);
        list.push({ cells: [rec.log_index !== undefined && rec.log_index !== null ? entryLink(rec.log_index) : '',
          ['registry record ', principalLink(q), rec.seq !== undefined ? [' in ', commitLink(rec.seq, rec.commit || '', `commit ${rec.seq}`)] : ''], '', ''] });
      } catch (e) { if (e.status !== 404) throw e; }
    }
    let scanned = '';
    if (app.log) {
      const head = await currentHead();
      if (head && head.cp) {
        const size = head.cp.size, raw = params.get('before');
        const hi = raw && /^[0-9]{1,19}$/.test(raw) && BigInt(raw) < size ? BigInt(raw) : size;
        const lo = hi > SCAN ? hi - SCAN : 0n;
        const { rows: got } = await readEntries(app.log, head.cp, lo, hi);
        if (stale()) return;
        for (const x of got) {
          if (x.entry && (x.entry.receipt_id === q || (x.entry.receipt && x.entry.receipt.id === q)))
            list.push({ state: x.error ? 'fail' : '', cells: [entryLink(x.index), x.error ? `FAILED: ${x.error}` : summary(x.entry), '', x.entry.timestamp ? time(x.entry.timestamp, { age: false }) : '—'] });
        }
        scanned = hi > 0n ? `; entries ${lo}–${hi - 1n} of the log read` : '';
        if (lo > 0n) fill('search-pager', h('a', { href: href({ view: 'search', q, before: lo.toString() }), text: `Search older entries (before ${lo}) ›`, rel: 'next' }));
      }
    }
    rows('search-results', list);
    done(list.length, `result(s) for ${q}${scanned}`);
  },

  /** A registry commit hash: the latest pages of commits, newest first. */
  async commit(q, params, stale) {
    if (!app.registry) throw new InputError('no registry to search: give its URL (Trust, Services)');
    let before = null;
    for (let page = 0; page < 10; page++) {
      const body = await get(`${app.registry}/v1/commits?limit=100${before !== null ? `&before=${before}` : ''}`);
      if (stale()) return;
      const hit = body.commits.find((c) => c.commit === q);
      if (hit) {
        rows('search-results', [{ cells: [hit.log_index === null ? '' : entryLink(hit.log_index), ['registry ', commitLink(hit.seq, hit.commit, `commit ${hit.seq}`)], time(hit.time), ''] }]);
        done(1, 'registry commit');
        return;
      }
      if (body.next_before === null || body.next_before === undefined) break;
      before = body.next_before;
    }
    done(0, 'no registry commit with this hash among the latest 1,000');
  },
};
