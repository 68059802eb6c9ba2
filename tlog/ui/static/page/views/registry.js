// The registry (?view=registry&before=N): its commits, newest first, each with its log anchors
// verified here (one per log it anchors in, k of them required: OAP-CORE-1.0 §19.3); and one
// commit (?view=commit&seq=N&commit=…), its records and its anchors checked row by row, one
// row per log. Anchors are checked against the pinned policy for each log, else against the
// registry's word for that log's key (never green).
import * as oap from '../../lib/index.js';
import { $, h, rows, facts, fill, value, time, rawLink, copyButton, downloadButton, reasonOf } from '../dom.js';
import { show, failed, running, wrongInput, checkLength } from '../verdict.js';
import { app } from '../services.js';
import { get } from '../net.js';
import { href, go } from '../router.js';
import { ENTRY_CHECKS, UNPINNED_WORDS } from '../checks.js';
import { principalLink, commitLink } from '../entrydata.js';
import { anchorVerdict, registryPolicy, registryFallback, registryLogs } from '../anchoring.js';

export { registryPolicy } from '../anchoring.js';

const PAGE = 20;

export function init() {
  $('registry-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = $('status-id').value.trim(), issuer = $('status-issuer').value.trim();
    if (!id) { wrongInput('registry-verdict', 'give a DID, a token class (DID#oauth_grants) or a record id'); return; }
    try { checkLength(id, 'the id'); checkLength(issuer, 'the issuer'); } catch (err) { wrongInput('registry-verdict', err.reason); return; }
    go({ view: 'principal', id, issuer: issuer || null });
  });
}

export async function registryInfo() {
  if (!app.registry) throw new Error(app.log ? 'the log names no registry: give its URL (Trust, Services)' : 'no registry: give its URL (Trust, Services)');
  if (!app.registryInfo) app.registryInfo = await get(`${app.registry}/v1/info`);
  return app.registryInfo;
}

/** The genesis (registry.json, commit 0) as the registry serves it: {format, logs, k}; it must
 * name the logs and k that /v1/info names (a registry cannot change them). */
export async function registryGenesis(info) {
  if (app.registryGenesis && app.registryGenesis.registry === info.registry) return app.registryGenesis;
  const doc = await get(`${app.registry}/v1/files/registry.json`);
  const logs = doc.format === 'oap-registry/2' ? doc.logs : doc.log ? [doc.log] : [];
  const k = doc.format === 'oap-registry/2' ? doc.anchor_quorum : 1;
  const named = registryLogs(info);
  const same = logs.length === named.logs.length && k === named.k
    && logs.every((l, i) => l.origin === named.logs[i].origin && l.vkey === named.logs[i].vkey);
  app.registryGenesis = { registry: info.registry, format: doc.format, logs, k, same, signedBy: doc.registry };
  return app.registryGenesis;
}

/** A link to entry `index` of the log `origin` (the loaded log, or one the registry names). */
export function logEntryLink(info, origin, index) {
  const text = String(index);
  if (app.logInfo && app.logInfo.origin === origin) return h('a', { href: href({ view: 'entry', index: text }), text });
  const l = registryLogs(info).logs.find((x) => x.origin === origin);
  return l && l.url ? h('a', { href: href({ view: 'entry', index: text, log: l.url }), text }) : h('span', { text });
}

/** One commit's anchors in a table cell: each log that holds it (✓ origin #index), and each
 * that does not count (why); the binding (commit, tree, seq, signed by the registry) first. */
async function anchorCell(c, info, policy, pinned) {
  const index = await oap.verifyCommitAnchor(c.anchor, { commit: c.commit, tree: c.tree, seq: c.seq, registry: info.registry, policy });
  if (!oap.isAnchorsFile(c.anchor)) return [pinned ? '✓ verified in the log (index ' : '! in the log, not against a pinned key (index ', logEntryLink(info, (c.anchored_in[0] || {}).origin, index), ')'];
  const got = await policy.verifyAnchored(c.anchor);
  const where = new Map((c.anchored_in || []).map((a) => [a.origin, a.index]));
  const out = [h('span', { class: 'rec', text: `${pinned ? '✓' : '!'} in ${got.logs.length} of ${where.size || got.logs.length} logs` + (pinned ? '' : ', not against pinned keys') })];
  for (const v of got.entries) {
    const origin = v.checkpoint.checkpoint.origin;
    out.push(h('span', { class: 'rec', data: { log: origin, state: 'pass' } }, `✓ ${origin} #`, logEntryLink(info, origin, v.index)));
  }
  for (const [where0, why] of got.failures) out.push(h('span', { class: 'rec', data: { state: 'fail' }, text: `✗ ${where0}: ${why}` }));
  return out;
}

export async function render(params) {
  running('registry-verdict', 'reading the registry…');
  rows('commits', []);
  fill('commits-pager');
  let info;
  try { info = await registryInfo(); } catch (e) { failed('registry-verdict', reasonOf(e)); facts('registry-facts', []); return; }
  const named = registryLogs(info);
  let genesis = null;
  try { genesis = await registryGenesis(info); } catch (_) { genesis = null; }
  const keyPin = (did) => { // as the status view says it: pinned by a policy's registry line, or only named
    const k = app.trust.registryKey(did, named.logs.map((l) => l.origin));
    return k.pinned ? ' (pinned)' : k.others ? ' (NOT the key the pinned policy pins)' : ' (not pinned: the registry names it)';
  };
  facts('registry-facts', [['registry', `${info.name} (${info.mode})`], ['anchors signed by', [value(info.registry, 'registry key'), keyPin(info.registry)]],
    ['status answers signed by', info.status_service ? [value(info.status_service, 'status key'), keyPin(info.status_service)] : 'no status service'],
    ['head', info.head ? [commitLink(info.head.seq, info.head.commit, `commit ${info.head.seq}`), ' ', value(info.head.commit, 'commit')] : 'empty'],
    ['anchored in', named.logs.length ? named.logs.map((l, i) => h('span', { class: 'rec', data: { log: l.origin } }, `${i + 1}. ${l.origin}`,
      l.url ? [' at ', h('a', { href: href({ view: 'log', log: l.url }), text: l.url })] : '', ' key ', value(l.vkey, `key of ${l.origin}`))) : '—'],
    ['required', `a commit is served as anchored once ${named.k} of ${named.logs.length || 1} log(s) hold it`],
    ['genesis', genesis ? `${genesis.format}: ${genesis.logs.length} log(s), k = ${genesis.k}${genesis.same ? ', as /v1/info says' : ' — DIFFERS from /v1/info'}` : 'not read'],
    ['raw', [rawLink(`${app.registry}/v1/info`), ' ', rawLink(`${app.registry}/v1/files/registry.json`, 'raw genesis'),
      ...(info.log_list ? [' ', rawLink(`${app.registry}${info.log_list}`, 'signed log list')] : [])]]]);
  if (genesis && !genesis.same) { failed('registry-verdict', 'the registry\'s /v1/info names other logs or another k than its genesis (registry.json)'); return; }
  const before = params.get('before');
  const url = `${app.registry}/v1/commits?limit=${PAGE}${before && /^[0-9]{1,15}$/.test(before) ? `&before=${before}` : ''}`;
  try {
    const { policy, pinned, said } = await registryPolicy(info);
    const data = await get(url);
    let ok = 0, bad = 0, pending = 0;
    const list = [];
    for (const c of data.commits) {
      let cell, state = '';
      if (c.anchor === null) { cell = 'not in the log yet'; pending++; } else {
        try {
          cell = await anchorCell(c, info, policy, pinned);
          state = pinned ? 'pass' : 'unpinned';
          ok++;
        } catch (e) { cell = `✗ FAILED: ${reasonOf(e)}`; state = 'fail'; bad++; }
      }
      const recs = c.records.map((x) => h('span', { class: 'rec' }, `${x.type} `, principalLink(x.id)));
      if (c.record_count > c.records.length) recs.push(h('span', { class: 'rec', text: `(+${c.record_count - c.records.length} more)` }));
      const first = (c.anchored_in || [])[0];
      list.push({ state, cells: [commitLink(c.seq, c.commit, String(c.seq)), time(c.time, { age: false }), value(c.commit, 'commit'),
        recs.length ? recs : (c.seq === 0 ? 'genesis' : 'anchor-only'), c.log_index === null ? '' : logEntryLink(info, first ? first.origin : '', c.log_index), cell] });
    }
    rows('commits', list);
    const pager = [];
    if (before) pager.push(h('a', { href: href({ view: 'registry' }), text: '« Newest' }), ' ');
    if (data.next_before !== null && data.next_before !== undefined)
      pager.push(h('a', { href: href({ view: 'registry', before: String(data.next_before) }), text: 'Older commits ›', rel: 'next' }));
    pager.push(' ', rawLink(url));
    fill('commits-pager', pager);
    const several = named.logs.length > 1;
    $('commits-note').textContent = `Each anchor: the registry's signature on (commit, tree, seq), and its inclusion in the log${several ? `s (${named.k} of ${named.logs.length} required)` : ''}, checked against ${said}.`;
    const summary = `${ok} anchor(s) verified${several ? ` in ${named.k} of ${named.logs.length} logs or more` : ''}${pending ? `, ${pending} not in the log yet` : ''}`;
    show('registry-verdict', bad ? { state: 'fail', headline: `FAILED: ${bad} anchor(s) did not verify`, summary }
      : pinned ? { state: 'pass', headline: 'VERIFIED', summary: `${summary}, against the pinned ${several ? 'policies' : 'policy'} for ${named.logs.map((l) => l.origin).join(' and ')}` }
        : { state: 'unpinned', headline: `NOT PINNED: ${UNPINNED_WORDS}`, summary: `${summary} (${said})` });
  } catch (e) {
    failed('registry-verdict', reasonOf(e));
  }
}

// --- one commit -----------------------------------------------------------------------------

/** The row a commit adds to an anchor's checks: the entry names this commit, signed by the registry. */
const commitBinding = {
  id: 'commit', label: 'anchors this commit',
  async run(ctx) {
    const c = ctx.commit;
    await oap.verifyCommitAnchor(ctx.bundleText, { commit: c.commit, tree: c.tree, seq: c.seq, registry: ctx.registryKey, policy: null });
    return { state: 'pass', label: 'anchors this commit', detail: [`commit ${c.seq}, tree `, value(c.tree, 'tree'), ', signed by the registry key ', value(ctx.registryKey, 'registry key')] };
  },
};
export const COMMIT_CHECKS = [...ENTRY_CHECKS, commitBinding];

export async function renderCommit(params) {
  running('commit-verdict');
  for (const id of ['commit-links', 'commit-anchor']) fill(id);
  facts('commit-facts', []);
  rows('commit-records', []);
  try {
    const seq = params.get('seq');
    if (!seq || !/^(0|[1-9][0-9]{0,14})$/.test(seq)) throw new Error('a commit is named by its seq (a decimal number)');
    const info = await registryInfo();
    const url = `${app.registry}/v1/commits?limit=1&before=${BigInt(seq) + 1n}`;
    const data = await get(url);
    const c = data.commits[0];
    if (!c || String(c.seq) !== seq) throw new Error(`the registry has no commit ${seq}`);
    const want = params.get('commit');
    if (want && want !== c.commit) throw new oap.VerificationError(`the link names commit ${want} at seq ${seq}; the registry says ${c.commit}`);
    facts('commit-facts', [['seq', String(c.seq)], ['time', time(c.time)], ['commit', value(c.commit, 'commit')], ['tree', value(c.tree, 'tree')],
      ['records', String(c.record_count)],
      ['anchored in', c.log_index === null ? 'not in the log yet' : (c.anchored_in || []).map((a, i) => [i ? ', ' : '', `${a.origin} #`, logEntryLink(info, a.origin, a.index)])]]);
    rows('commit-records', c.records.map((x) => [x.type, principalLink(x.id), h('span', { class: 'mono', text: x.path })]));
    const links = [rawLink(url), ' ', h('a', { href: href({ view: 'registry', before: String(c.seq + 1) }), text: 'in the list of commits' })];
    if (c.anchor === null) {
      show('commit-verdict', { state: 'unknown', headline: 'not in the log yet', summary: 'the registry anchors each commit in its log within seconds' });
      fill('commit-links', links);
      return;
    }
    $('commit-anchor').textContent = c.anchor;
    const several = oap.isAnchorsFile(c.anchor);
    fill('commit-anchor-title', ...(several ? ['Log anchors (an ', h('code', { text: 'oap-anchors/v1' }), ' file: one ', h('code', { text: '.tlog-proof' }), ' per log)']
      : ['Log anchor (a ', h('code', { text: '.tlog-proof' }), ' bundle)']));
    links.push(' ', copyButton(c.anchor, 'anchor'), ' ', downloadButton(c.anchor, `registry-commit-${c.seq}${several ? '.anchors.json' : '.tlog-proof'}`,
      several ? 'download .anchors.json' : 'download .tlog-proof'));
    fill('commit-links', links);
    const { k } = registryLogs(info);
    const v = await anchorVerdict(c.anchor, { table: COMMIT_CHECKS, k, fallback: registryFallback(info),
      extra: { commit: c, bundleText: c.anchor, registryKey: info.registry } });
    const where = v.logs.filter((l) => l.counted).map((l) => `${l.origin} (index ${l.index})`).join(', ');
    show('commit-verdict', { ...v, summary: `commit ${c.seq} is anchored in ${where || 'no log'}${v.summary && several ? `; ${v.summary}` : ''}` });
  } catch (e) {
    failed('commit-verdict', reasonOf(e));
  }
}
