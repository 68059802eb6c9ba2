// A principal or record (?view=principal&id=<DID or record id>): its signed status answer
// checked here (signature, log anchors, freshness), and every record naming it.
import * as oap from '../../lib/index.js';
import { $, h, rows, facts, fill, value, time, rawLink, reasonOf } from '../dom.js';
import { show, failed, running, idle } from '../verdict.js';
import { app } from '../services.js';
import { get, pathPart } from '../net.js';
import { href } from '../router.js';
import { UNPINNED_WORDS } from '../checks.js';
import { registryInfo, registryPolicy } from './registry.js';
import { commitLink } from '../entrydata.js';

/** How each status reads. A status the registry adds later (suspended, a rotated key) is a
 * row here; one this page does not know is shown by name, never as good. */
export const STATUS_LOOK = {
  good: { state: 'pass', word: 'GOOD', means: 'not revoked as of this answer' },
  revoked: { state: 'revoked', word: 'REVOKED', means: 'revoked by a record in the registry' },
  unknown: { state: 'unknown', word: 'UNKNOWN', means: 'the registry knows no record of this id' },
};
const lookOf = (status) => STATUS_LOOK[status] || { state: 'unknown', word: String(status).toUpperCase(), means: 'a status this page does not know' };

export async function render(params) {
  const id = params.get('id') || '';
  $('status-id').value = id;
  facts('status-facts', []);
  fill('status-links');
  rows('principal-records', []);
  $('principal-title').textContent = id ? `Status of ${id.length > 40 ? id.slice(0, 36) + '…' : id}` : 'Status';
  if (!id) { idle('status-verdict', 'no status checked'); return; }
  running('status-verdict');
  try {
    const info = await registryInfo();
    const url = `${app.registry}/v1/status/${pathPart(id)}`;
    const text = await get(url, 'text');
    const { policy, pinned, said } = await registryPolicy(info);
    const checks = [];
    let v;
    try {
      v = await oap.verifyStatus(text, { registry: info.status_service, policy });
    } catch (e) {
      show('status-verdict', { state: 'fail', headline: `FAILED: ${reasonOf(e)}`, checks: [
        { state: 'fail', label: 'status answer', detail: [reasonOf(e)] },
        { state: pinned ? 'pass' : 'warn', label: pinned ? 'pinned' : 'not pinned', detail: [`log anchors checked against ${said}`] }] });
      fill('status-links', rawLink(url, 'raw answer'));
      await records(id);
      return;
    }
    const resp = JSON.parse(text), look = lookOf(v.status);
    const now = Date.now() / 1000, nextU = v.nextUpdate.getTime() / 1000;
    checks.push({ state: 'pass', label: 'signature', detail: ['by the status key ', value(info.status_service, 'status key')] },
      { state: 'pass', label: 'epoch anchored in the log', detail: [`epoch ${v.epoch}, checked against ${said}`] },
      { state: 'pass', label: v.status === 'revoked' ? 'revocation proven' : 'absence proven', detail: [v.status === 'revoked'
        ? 'the revoked-ids tree holds this id, its record verifies and is anchored' : 'the revoked-ids tree of the epoch does not hold this id'] },
      { state: 'pass', label: 'fresh', detail: ['answered ', time(resp.this_update), ', fresh until ', time(resp.next_update, { age: false }),
        ` (for another ${Math.max(0, Math.round((nextU - now) / 60))} min)`] },
      { state: pinned ? 'pass' : 'warn', label: pinned ? 'pinned' : 'not pinned', detail: [pinned ? `the log anchors were checked against ${said}` : `${UNPINNED_WORDS} (${said})`] });
    const state = look.state === 'pass' && !pinned ? 'unpinned' : look.state;
    show('status-verdict', { state, headline: `${look.word} (verified)`, summary: `${look.means}${!pinned ? `; NOT PINNED: ${UNPINNED_WORDS}` : ''}`, checks });
    const rowsOut = [['id', v.id], ['status', look.word], ['epoch', String(v.epoch)], ['answered', time(resp.this_update)],
      ['fresh until', time(resp.next_update)]];
    if (v.status === 'revoked') rowsOut.push(['revoked at', time(resp.revocation.revoked_at)], ['reason', String(v.reason)],
      ['revocation commit', commitLink(resp.revocation.seq, resp.revocation.commit, `commit ${resp.revocation.seq}`)]);
    facts('status-facts', rowsOut);
    fill('status-links', rawLink(url, 'raw answer'), ' ', /^did:/.test(id) && app.log ? h('a', { href: href({ view: 'search', q: id }), text: 'receipts it signed in the log' }) : '');
    await records(id);
  } catch (e) {
    failed('status-verdict', reasonOf(e));
  }
}

async function records(who) {
  const listed = await get(`${app.registry}/v1/records?subject=${encodeURIComponent(who)}&limit=1`);
  if (!listed.total) { rows('principal-records', [['', '', 'no record names it', '', '']]); return; }
  const out = [];
  for (const item of (await get(`${app.registry}/v1/subjects/${pathPart(who)}`)).records) {
    const body = item.record;
    let check, state = '';
    try {
      await oap.checkRecord(body);
      check = 'verified'; state = 'checked'; // its own signature: who may sign it is the status answer's business
    } catch (e) {
      check = body.issued_by && !String(body.issued_by).startsWith('did:key:') ? 'needs its DID document' : `FAILED: ${reasonOf(e)}`;
      state = check.startsWith('FAILED') ? 'fail' : '';
    }
    const what = body.event || body.kind || body.level || '';
    const by = body.issued_by || body.subject || '';
    out.push({ state, cells: [commitLink(item.seq, item.commit, String(item.seq)), `${item.type}${what ? ' ' + what : ''}`,
      h('span', { class: 'mono', text: item.id }), by ? value(by, 'signer', { link: { href: href({ view: 'principal', id: by }) } }) : '', check] });
  }
  rows('principal-records', out);
}
