// The registry (?view=registry&before=N): its commits, newest first, each with its log anchor
// verified here; and one commit (?view=commit&seq=N&commit=…), its records and its anchor
// checked row by row. Anchors are checked against the pinned policy for the registry's log,
// else against the registry's word for its log key (never green).
import * as oap from '../../lib/index.js';
import { $, h, rows, facts, fill, value, time, rawLink, copyButton, downloadButton, reasonOf } from '../dom.js';
import { show, failed, running } from '../verdict.js';
import { app } from '../services.js';
import { get } from '../net.js';
import { href, go } from '../router.js';
import { ENTRY_CHECKS, bundleContext, verdictOf, UNPINNED_WORDS } from '../checks.js';
import { entryLink, principalLink, commitLink } from '../entrydata.js';

const PAGE = 20;

export function init() {
  $('registry-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = $('status-id').value.trim();
    if (!id) { failed('registry-verdict', 'give a DID or a record id'); return; }
    go({ view: 'principal', id });
  });
}

export async function registryInfo() {
  if (!app.registry) throw new Error(app.log ? 'the log names no registry: give its URL (Trust, Services)' : 'no registry: give its URL (Trust, Services)');
  if (!app.registryInfo) app.registryInfo = await get(`${app.registry}/v1/info`);
  return app.registryInfo;
}

/** The policy anchors are checked with: {policy, pinned, said}. */
export async function registryPolicy(info) {
  if (!info.log) return { policy: null, pinned: false, said: 'no log: anchors not checked' };
  const pinned = await app.trust.policyFor(info.log.origin);
  if (pinned) return { policy: pinned.policy, pinned: true, said: 'the pinned policy' };
  if (app.logInfo && app.logInfo.origin === info.log.origin && app.served) {
    try { return { policy: await app.trust.policyOf(app.served), pinned: false, said: "the log's own policy" }; } catch (_) { /* below */ }
  }
  return { policy: await oap.TrustPolicy.forLog(info.log.vkey), pinned: false, said: `the log key the registry names (${info.log.vkey})` };
}

export async function render(params) {
  running('registry-verdict', 'reading the registry…');
  rows('commits', []);
  fill('commits-pager');
  let info;
  try { info = await registryInfo(); } catch (e) { failed('registry-verdict', reasonOf(e)); facts('registry-facts', []); return; }
  facts('registry-facts', [['registry', `${info.name} (${info.mode})`], ['anchors signed by', value(info.registry, 'registry key')],
    ['status answers signed by', info.status_service ? value(info.status_service, 'status key') : 'no status service'],
    ['head', info.head ? [commitLink(info.head.seq, info.head.commit, `commit ${info.head.seq}`), ' ', value(info.head.commit, 'commit')] : 'empty'],
    ['anchored in', info.log ? [info.log.origin, info.log.url ? [' at ', h('a', { href: href({ view: 'log', log: info.log.url }), text: info.log.url })] : ''] : '—'],
    ['raw', rawLink(`${app.registry}/v1/info`)]]);
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
          const index = await oap.verifyCommitAnchor(c.anchor, { commit: c.commit, tree: c.tree, seq: c.seq, registry: info.registry, policy });
          cell = [pinned ? '✓ verified in the log (index ' : '! in the log, not against a pinned key (index ', entryLink(index), ')'];
          state = pinned ? 'pass' : 'unpinned';
          ok++;
        } catch (e) { cell = `✗ FAILED: ${reasonOf(e)}`; state = 'fail'; bad++; }
      }
      const recs = c.records.map((x) => h('span', { class: 'rec' }, `${x.type} `, principalLink(x.id)));
      if (c.record_count > c.records.length) recs.push(h('span', { class: 'rec', text: `(+${c.record_count - c.records.length} more)` }));
      list.push({ state, cells: [commitLink(c.seq, c.commit, String(c.seq)), time(c.time, { age: false }), value(c.commit, 'commit'),
        recs.length ? recs : (c.seq === 0 ? 'genesis' : 'anchor-only'), c.log_index === null ? '' : entryLink(c.log_index), cell] });
    }
    rows('commits', list);
    const pager = [];
    if (before) pager.push(h('a', { href: href({ view: 'registry' }), text: '« Newest' }), ' ');
    if (data.next_before !== null && data.next_before !== undefined)
      pager.push(h('a', { href: href({ view: 'registry', before: String(data.next_before) }), text: 'Older commits ›', rel: 'next' }));
    pager.push(' ', rawLink(url));
    fill('commits-pager', pager);
    $('commits-note').textContent = `Each anchor: the registry's signature on (commit, tree, seq), and its inclusion in the log, checked against ${said}.`;
    const summary = `${ok} anchor(s) verified${pending ? `, ${pending} not in the log yet` : ''}`;
    show('registry-verdict', bad ? { state: 'fail', headline: `FAILED: ${bad} anchor(s) did not verify`, summary }
      : pinned ? { state: 'pass', headline: 'VERIFIED', summary: `${summary}, against the pinned policy for ${info.log.origin}` }
        : { state: 'unpinned', headline: `NOT PINNED: ${UNPINNED_WORDS}`, summary });
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
      ['records', String(c.record_count)], ['log index', c.log_index === null ? 'not in the log yet' : entryLink(c.log_index)]]);
    rows('commit-records', c.records.map((x) => [x.type, principalLink(x.id), h('span', { class: 'mono', text: x.path })]));
    const links = [rawLink(url), ' ', h('a', { href: href({ view: 'registry', before: String(c.seq + 1) }), text: 'in the list of commits' })];
    if (c.anchor === null) {
      show('commit-verdict', { state: 'unknown', headline: 'not in the log yet', summary: 'the registry anchors each commit in its log within seconds' });
      fill('commit-links', links);
      return;
    }
    $('commit-anchor').textContent = c.anchor;
    links.push(' ', copyButton(c.anchor, 'anchor bundle'), ' ', downloadButton(c.anchor, `registry-commit-${c.seq}.tlog-proof`, 'download .tlog-proof'));
    fill('commit-links', links);
    const b = oap.parseProofBundle(c.anchor);
    const origin = info.log ? info.log.origin : '';
    const ours = app.logInfo && app.logInfo.origin === origin;
    const { policy, pinned } = await registryPolicy(info);
    const ctx = await bundleContext(app.trust, b, { served: ours ? app.served : null, logUrl: ours ? app.log : null });
    if (!ctx.policy && policy) { // the registry's word for its log key: unpinned
      ctx.policy = policy; ctx.pinned = pinned;
      try { ctx.vc = await policy.verifyCheckpoint(b.checkpoint); ctx.cpError = null; ctx.vcError = null; ctx.verified = await policy.verifyBundle(b); } catch (e) { ctx.vcError = e; }
    }
    Object.assign(ctx, { commit: c, bundleText: c.anchor, registryKey: info.registry });
    show('commit-verdict', await verdictOf(COMMIT_CHECKS, ctx, `commit ${c.seq} is anchored at index ${b.index} of ${origin}`));
  } catch (e) {
    failed('commit-verdict', reasonOf(e));
  }
}
