// A principal or record (?view=principal&id=<DID, token class or record id>[&issuer=<DID>]):
// its signed status answer checked here as registry/statusverify.py checks it (signature, the
// epoch's anchors in k of the registry's logs, the proof, every record that decides it with
// its Git path and anchors, freshness), said in the words of docs/architecture.md §6.1; the
// registry's push stream followed live, each pushed answer verified before it is shown; the
// issuer's status lists (revocation and suspension); a conformance receipt shown in full; and
// every record naming the id.
import * as oap from '../../lib/index.js';
import { $, h, rows, facts, fill, value, time, rawLink, reasonOf } from '../dom.js';
import { show, running, idle, failedOrInput, checkLength, InputError } from '../verdict.js';
import { app } from '../services.js';
import { get, pathPart } from '../net.js';
import { href, params as currentParams } from '../router.js';
import { UNPINNED_WORDS } from '../checks.js';
import { SOURCES } from '../trust.js';
import { registryInfo } from './registry.js';
import { registryPolicy } from '../anchoring.js';
import { commitLink, principalLink } from '../entrydata.js';
import { showConformance } from '../conformance.js';

const TOKEN_CLASSES = ['subscription_tokens', 'oauth_grants', 'trust_tokens', 'webhook_subscriptions'];
const r = (state, label, ...detail) => ({ state, label, detail });
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const iso = (d) => (d ? oap.formatUtc(oap.dateToMicros(d)) : null);

/** How each status reads (docs/architecture.md §6.1). A status the registry adds later is a
 * row here; one this page does not know is shown by name, never as good. */
export const STATUS_LOOK = {
  good: { state: 'pass', word: 'GOOD', means: 'nothing in the registry stood against this id at this answer\'s time' },
  revoked: { state: 'revoked', word: 'REVOKED', means: 'refuse: revoked by a record in the registry' },
  suspended: { state: 'suspended', word: 'SUSPENDED', means: 'refuse the principal and its tokens until it recovers; nothing is revoked' },
  unknown: { state: 'unknown', word: 'UNKNOWN', means: 'the registry knows no record of this id (not a statement of validity)' },
};
const lookOf = (status) => STATUS_LOOK[status] || { state: 'unknown', word: String(status).toUpperCase(), means: 'a status this page does not know' };

/** What a record is, in a few words, with a link to its commit. */
function recordWords(rec) {
  if (!rec) return '';
  const what = rec.type === 'key_event' ? `key event ${rec.body.event}` : rec.type === 'revocation' ? `${rec.body.kind} revocation (${rec.body.reason})`
    : rec.type === 'kill_switch' ? 'kill switch' : `conformance receipt ${rec.level || ''}`;
  return [what, ' ', h('span', { class: 'mono', text: rec.id }), ' signed by ', value(rec.issuedBy, 'signer', { link: { href: href({ view: 'principal', id: rec.issuedBy }) } }),
    rec.seq !== undefined ? [', in ', commitLink(rec.seq, rec.commit, `commit ${rec.seq}`)] : ''];
}

/** The sentence a relying party acts on, for a verified answer (§6.1). */
function meaning(v, id) {
  if (v.signer) { // a conformance receipt whose level does not hold: a signer that does not count (§31, §28.5)
    const who = value(v.signer, 'signer', { link: { href: href({ view: 'principal', id: v.signer }) } });
    const since = iso(v.revokedAt);
    if (v.reason === 'witness_unqualified')
      return { headline: `REVOKED (witness_unqualified) from ${since}: its level does not hold`,
        detail: ['witness ', who, ' held no valid L4/L5 receipt when it signed, and too few qualified witnesses remain: the receipt never proved its level.'] };
    if (v.reason === 'subject_invalid')
      return { headline: `REVOKED (subject_invalid) from ${since}: its own signature does not count`,
        detail: ['its subject ', who, ' signed it with a key that had lost its standing (', recordWords(v.deciding),
          ') no later than the receipt was committed: the key\'s thief may have made it.'] };
    const role = v.reason === 'auditor_invalid' ? 'auditor' : 'witness';
    return { headline: `REVOKED (${v.reason}) from ${since}: its level does not hold`,
      detail: [`its ${role} `, who, ' had lost its standing (', recordWords(v.deciding),
        ') no later than the receipt was committed, the latest time it can have signed: its signature does not count, and the signatures left do not make the level.'] };
  }
  if (v.subject) { // a conformance receipt that falls with its subject: the subject's standing, said of the receipt
    const subject = value(v.subject, 'subject', { link: { href: href({ view: 'principal', id: v.subject }) } });
    const since = iso(v.status === 'suspended' ? v.suspendedAt : v.revokedAt);
    return v.status === 'suspended'
      ? { headline: `SUSPENDED since ${since} (${v.reason}) with its subject: refuse the receipt until its subject recovers`,
        detail: ['the receipt vouches for ', subject, ', which is suspended (', recordWords(v.deciding),
          '); the receipt turns good again when its subject recovers.'] }
      : { headline: `REVOKED (${v.reason}) from ${since} with its subject: the receipt vouches for a revoked subject`,
        detail: ['the receipt vouches for ', subject, ', which is revoked (', recordWords(v.deciding),
          `); refuse the receipt from ${since}.`] };
  }
  const [principal, cls] = oap.tokenParts(id) || [id, null];
  if (v.status === 'suspended') {
    const rec = v.deciding;
    const how = rec && rec.type === 'key_event' ? ['by a suspend signed by ', value(rec.issuedBy, 'signer')]
      : ['automatically: its key ', value(rec ? rec.subject : '', 'key'), ' was declared lost (loss_of_key) and no controller is left that could sign a recovery'];
    return { headline: `SUSPENDED since ${iso(v.suspendedAt)} (${v.reason}): refuse until it recovers`,
      detail: [cls ? `every ${cls} token of ${principal}, and the principal itself, ` : 'the principal and its tokens ', 'are suspended ', ...how,
        '. Nothing is revoked: the answer turns good again after a recovery (a rotate or resume signed by a controller).'] };
  }
  if (v.status === 'revoked') {
    if (v.reason === 'superseded') {
      const successor = v.deciding && v.deciding.key;
      return { headline: `REVOKED: superseded at ${iso(v.revokedAt)}, a rotation retired this key`,
        detail: ['a rotation of ', value(v.deciding ? v.deciding.subject : principal, 'principal'), ' replaced it with ',
          successor ? value(successor, 'successor key', { link: { href: href({ view: 'principal', id: successor }) } }) : '?',
          `: everything this key signs from ${iso(v.revokedAt)} is refused; what it signed before stays valid.`] };
    }
    if (v.reason === 'kill_switch') {
      if (v.reinstatedAt) {
        return { headline: `REVOKED for good, reinstated at ${iso(v.reinstatedAt)}: every ${cls || 'token'} with this status id stays revoked; the tokens issued since carry the status id of the new epoch`,
          detail: [`the kill switch of ${iso(v.revokedAt)} revoked every ${cls || 'token'} of `, value(principal, 'principal'),
            ' with this status id, for good (a recovery never revives a token that was active at the kill); the principal recovered (',
            recordWords(v.reinstatedBy), '), and the tokens it issued since carry the status id ',
            principalLink(v.reinstatedId, v.reinstatedId), ': ask about that id.'] };
      }
      return { headline: `REVOKED by a kill switch at ${iso(v.revokedAt)}: every ${cls || 'token'} with this status id is revoked, whenever it was issued`,
        detail: ['for good; after a recovery, the tokens the principal issues carry the status id of the new epoch (shown here then).'] };
    }
    if (v.reason === 'expired') return { headline: `REVOKED: expired at ${iso(v.revokedAt)}`, detail: ['the receipt is not valid from its expires_at.'] };
    return { headline: `REVOKED (${v.reason}) from ${iso(v.revokedAt)}`,
      detail: [`everything signed or done at or after ${iso(v.revokedAt)} is refused; for key_compromise that time may lie in the past.`] };
  }
  const look = lookOf(v.status);
  return { headline: `${look.word} (verified)`, detail: [look.means] };
}

// --- the live push stream ----------------------------------------------------------------------

let stream = null; // {es, id, url}
function stopLive(note = '') {
  if (stream) { stream.es.close(); stream = null; }
  const box = $('status-live');
  box.dataset.state = 'idle';
  fill(box, note);
}
addEventListener('pagehide', () => stopLive());

/** The page moved to another view: stop following the push stream. */
export function leave() { stopLive(); }

/** Follow the registry's push stream for `id` (Server-Sent Events): each pushed answer is
 * verified here before it is shown; one that does not verify is reported, never shown. */
function follow(url, id, issuer, check) {
  stopLive();
  const es = new EventSource(url);
  stream = { es, id, url };
  const box = $('status-live');
  box.dataset.state = 'running';
  const stop = h('button', { type: 'button', class: 'small', text: 'stop', attrs: { 'aria-label': 'stop following the push stream' },
    on: { click: () => stopLive('live updates stopped') } });
  fill(box, 'live: following the registry\'s push stream (', h('span', { class: 'mono', text: new URL(url).pathname }), ') ', stop);
  let count = 0;
  es.addEventListener('status', async (ev) => {
    const p = currentParams();
    if (p.get('view') !== 'principal' || p.get('id') !== id || (p.get('issuer') || null) !== (issuer || null)) { stopLive(); return; }
    count++;
    try {
      const shown = await check(ev.data);
      box.dataset.state = shown.pinned ? 'pass' : 'unpinned'; // green only against a pinned policy
      fill(box, `live: pushed answer ${count} (epoch ${ev.lastEventId}) verified here at ${new Date().toISOString().slice(11, 19)} UTC`,
        `${shown.pinned ? '' : ' (NOT against a pinned key)'}: ${shown.headline}; `,
        'following ', h('span', { class: 'mono', text: new URL(url).pathname }), ' ', stop);
    } catch (e) {
      box.dataset.state = 'fail';
      fill(box, `live: a pushed answer did NOT verify and is not shown: ${reasonOf(e)} `, stop);
    }
  });
  es.addEventListener('error', () => { if (stream && stream.es === es && es.readyState === EventSource.CLOSED) stopLive('live updates ended'); });
}

// --- the view ----------------------------------------------------------------------------------

let generation = 0;

export async function render(params) {
  const mine = ++generation;
  const id = params.get('id') || '', issuer = params.get('issuer') || '';
  $('status-id').value = id;
  $('status-issuer').value = issuer;
  facts('status-facts', []);
  for (const x of ['status-links', 'status-caveat', 'principal-conformance']) fill(x);
  rows('principal-records', []);
  rows('status-lists', []);
  $('status-lists-box').hidden = true;
  if (stream && stream.id !== id) stopLive();
  $('principal-title').textContent = id ? `Status of ${id.length > 40 ? id.slice(0, 36) + '…' : id}` : 'Status';
  if (!id) { idle('status-verdict', 'no status checked'); return; }
  running('status-verdict');
  try {
    checkLength(id, 'the id');
    checkLength(issuer, 'the issuer');
    const info = await registryInfo();
    const q = issuer ? `?issuer=${encodeURIComponent(issuer)}` : '';
    const url = `${app.registry}/v1/status/${pathPart(id)}${q}`;
    let text;
    try { text = await get(url, 'text', { fresh: true }); } catch (e) { // the registry refused the id as malformed: the input
      if (e.status === 400 && e.code === 'invalid_input') throw new InputError(e.said || 'the registry refused this id');
      throw e;
    }
    if (mine !== generation) return;
    const trust = await registryPolicy(info, { statusAnswers: true });
    const shown = await showAnswer(text, { id, issuer, info, trust, url });
    if (mine !== generation) return;
    if (shown && shown.push && !stream) {
      const push = `${app.registry}${shown.push}?id=${encodeURIComponent(id)}${issuer ? `&issuer=${encodeURIComponent(issuer)}` : ''}`;
      follow(push, id, issuer, async (data) => {
        const trustNow = await registryPolicy(info, { statusAnswers: true });
        const again = await showAnswer(data, { id, issuer, info, trust: trustNow, url, pushed: true });
        return { headline: again.headline, pinned: again.pinned };
      });
    }
    const parts = oap.tokenParts(id);
    const owner = parts ? parts[0] : id; // a token class: its principal's records
    await Promise.all([statusLists(id, info), conformance(id), records(owner)]);
  } catch (e) {
    if (mine === generation) failedOrInput('status-verdict', e, reasonOf);
  }
}

/** Verify an answer (its JSON text) and show it; throws (and shows nothing) when it does not
 * verify and it was pushed. -> {headline, push, v} or null. */
async function showAnswer(text, { id, issuer, info, trust, url, pushed = false }) {
  const { policy, said, logs, k } = trust;
  // the status key, pinned as `oap-registry status --log-policy` pins it: a `registry` line of
  // the pin of a log the registry anchors in; else it is only the key the registry names
  let key = app.trust.registryKey(info.status_service, logs.map((l) => l.origin));
  let v, keys = null, signer = info.status_service;
  try { // the answer must be about the id asked about (a credential's: scoped by its issuer)
    if (info.key_rotations > 0 || (info.registry && info.registry !== info.status_service)) {
      // a rotated registry (or a mirror's upstream): its keys, each handed over by the key before it
      keys = await oap.chainOfDocument(await get(`${app.registry}/v1/key-rotations`, 'json', { fresh: true }));
      const pin = (key.others || []).find((d) => keys.keys.includes(d));
      if (pin) { signer = pin; key = app.trust.registryKey(pin, logs.map((l) => l.origin)); }
    }
    if (key.others) throw new oap.StatusVerificationError(`the registry signs with ${info.status_service}, which the pinned policy `
      + `does not pin (it pins ${key.others.join(', ')})`);
    v = await oap.verifyStatus(text, { registry: signer, id: issuer ? oap.vcStatusKey(id, issuer) : id, policy, keys });
  } catch (e) {
    if (pushed) throw e;
    show('status-verdict', { state: 'fail', headline: `FAILED: ${reasonOf(e)}`, checks: [
      r('fail', 'status answer', reasonOf(e)),
      r(trust.pinned ? 'pass' : 'warn', trust.pinned ? 'pinned' : 'not pinned', `log anchors checked against ${said}`)] });
    fill('status-links', rawLink(url, 'raw answer'));
    return null;
  }
  const pinned = trust.pinned && !!key.pinned;
  const resp = oap.parseJSON(text, { strict: false });
  const look = lookOf(v.status), words = meaning(v, id);
  const st = v.statement;
  const checks = [key.pinned
    ? r('pass', 'signature', 'by the pinned status key ', value(signer, 'status key'),
      ` (${SOURCES[key.pinned.source] || key.pinned.source})`
      + (signer !== info.status_service ? `, rotated to ${info.status_service} by statements it signed` : ''))
    : r('warn', 'signature', 'by the key the registry names itself, ', value(info.status_service, 'status key'),
      ': NOT PINNED (a registry line in a pinned policy pins it: Trust)')];
  checks.push(...await anchorRows(resp.epoch_anchor, policy, `epoch ${v.epoch}`, said, logs, k));
  if (v.history !== info.registry)
    checks.push(r('info', 'history', 'records are in the history of the registry ', value(v.history, 'registry key'), ' (this answer is signed by a mirror)'));
  if (v.status === 'good' || v.status === 'unknown') {
    checks.push(r('pass', 'absence proven', `the epoch's tree of ids that are not good (${st.revoked_size} leaves) does not hold this id`));
  } else {
    checks.push(r('pass', `${v.status === 'revoked' ? 'revocation' : 'suspension'} proven`, `the epoch's tree holds this id's ${v.status} leaf, which names the deciding record's hash`));
    checks.push(r('pass', 'deciding record', ...recordWords(v.deciding), ': its signature, its Git path from the commit tree and the commit\'s anchors verify'));
    if (v.linkedBy) checks.push(r('pass', 'linked by', ...recordWords(v.linkedBy), v.reason === 'superseded' ? ': the rotation that made this key the principal\'s key'
      : ': the rotation that made the lost key the principal\'s key'));
    if (v.via && !v.signer) checks.push(r('pass', 'with its subject', ...recordWords(v.via), ': this receipt, proven in the registry as the deciding record is, names the subject ',
      value(v.subject, 'subject'), ' whose standing the deciding record decides'));
    if (v.reinstatedBy) checks.push(r('pass', 'reinstated by', ...recordWords(v.reinstatedBy), `: a recovery, from ${iso(v.reinstatedAt)}`));
    if (v.signer && v.via) checks.push(r('pass', 'signer', value(v.signer, 'signer'), ' signed this receipt (', ...recordWords(v.via),
      '), and the deciding record takes its standing away no later than that commit\'s time'));
  }
  const now = Date.now() / 1000, nextU = v.nextUpdate.getTime() / 1000;
  checks.push(r('pass', 'fresh', 'answered ', time(resp.this_update), ', fresh until ', time(resp.next_update, { age: false }),
    ` (for another ${Math.max(0, Math.round((nextU - now) / 60))} min)`));
  checks.push(r(trust.pinned ? 'pass' : 'warn', trust.pinned ? 'pinned' : 'not pinned', trust.pinned ? `the log anchors were checked against ${said}` : `${UNPINNED_WORDS} (${said})`));
  const state = look.state === 'pass' && !pinned ? 'unpinned' : look.state;
  const headline = v.status === 'good' || v.status === 'unknown' ? `${look.word} (verified)` : `${words.headline} (verified)`;
  show('status-verdict', { state, headline, summary: [...words.detail, !pinned ? `; NOT PINNED: ${UNPINNED_WORDS}` : ''], checks });
  const f = [['id', id], ['status', look.word], ['epoch', String(v.epoch)], ['answered', time(resp.this_update)], ['fresh until', time(resp.next_update)]];
  if (v.status === 'revoked') {
    f.push(['revoked at', time(iso(v.revokedAt))], ['reason', String(v.reason)]);
    if (v.reason === 'superseded' && v.deciding && v.deciding.key) f.push(['successor key', value(v.deciding.key, 'successor key', { link: { href: href({ view: 'principal', id: v.deciding.key }) } })]);
    if (v.reinstatedAt) f.push(['reinstated at', time(iso(v.reinstatedAt))], ['tokens issued since', principalLink(v.reinstatedId, v.reinstatedId)]);
  }
  if (v.status === 'suspended') f.push(['suspended at', time(iso(v.suspendedAt))], ['reason', String(v.reason)],
    ['suspended by', v.deciding && v.deciding.type === 'key_event' ? value(v.deciding.issuedBy, 'signer') : 'the registry, automatically (§5.3)']);
  if (v.subject) f.push(['with its subject', value(v.subject, 'subject', { link: { href: href({ view: 'principal', id: v.subject }) } })]);
  if (v.signer) f.push(['signer that does not count', value(v.signer, 'signer', { link: { href: href({ view: 'principal', id: v.signer }) } })]);
  if (v.deciding) f.push(['deciding record', recordWords(v.deciding)]);
  if (v.linkedBy) f.push(['linked by', recordWords(v.linkedBy)]);
  facts('status-facts', f);
  const push = typeof st.push === 'string' && st.push.startsWith('/') ? st.push : null;
  const pushUrl = push ? `${app.registry}${push}?id=${encodeURIComponent(id)}` : null;
  fill('status-links', rawLink(url, 'raw answer'), pushUrl ? [' ', rawLink(pushUrl, 'push stream (Server-Sent Events)')] : '',
    /^did:/.test(id) && app.log ? [' ', h('a', { href: href({ view: 'search', q: id.split('#')[0] }), text: 'receipts it signed in the log' })] : '',
    id.startsWith('did:') && !id.includes('#') ? [' ', ...TOKEN_CLASSES.map((c) => [principalLink(`${id}#${c}`, c), ' '])] : '');
  if (typeof st.caveat === 'string') fill('status-caveat', h('strong', { text: 'Caveat (signed in the epoch statement): ' }), st.caveat);
  return { headline, push, v, pinned };
}

/** One row per log the epoch statement is anchored in (k of them required), and the rule. */
async function anchorRows(anchor, policy, what, said, logs, k) {
  if (!policy) return [r('warn', `${what} anchored`, 'not checked: the registry names no log')];
  if (!oap.isAnchorsFile(anchor)) return [r('pass', `${what} anchored in the log`, `checked against ${said}`)];
  const got = await policy.verifyAnchored(anchor);
  const out = [r('pass', `${what} anchored in ${got.logs.length} of ${logs.length} logs`, `${k} required; checked against ${said}`)];
  for (const e of got.entries) out.push({ id: 'anchor-log', state: 'pass', label: `anchored in ${e.checkpoint.checkpoint.origin}`, detail: [`entry ${e.index} of the tree of size ${e.checkpoint.checkpoint.size}`] });
  for (const [where, why] of got.failures) out.push({ id: 'anchor-log', state: 'warn', label: `${where}: does not count`, detail: [why] });
  return out;
}

/** The issuer's W3C status lists (list 0): revocation and suspension, each verified. */
async function statusLists(id, info) {
  $('status-lists-box').hidden = !/^did:/.test(id) || id.includes('#') || !info.status_service;
  if ($('status-lists-box').hidden) { rows('status-lists', []); return; }
  const out = [];
  for (const purpose of ['revocation', 'suspension']) {
    const url = `${app.registry}/v1/status-lists/${pathPart(id)}/0${purpose === 'suspension' ? '/suspension' : ''}`;
    try {
      const l = await oap.verifyStatusList(await get(url, 'json', { fresh: true }), { registry: info.status_service, purpose });
      const means = purpose === 'revocation'
        ? (l.all ? 'every bit set: every credential it issued is revoked (the issuer is revoked)' : l.set ? `${l.set} credential(s) it issued are revoked` : 'no credential it issued is revoked')
        : (l.all ? 'every bit set: the issuer is SUSPENDED, its credentials are on hold' : 'no bit set: not suspended');
      out.push({ state: l.all && purpose === 'suspension' ? 'fail' : '', cells: [rawLink(url, `list 0${purpose === 'suspension' ? ' (suspension)' : ''}`), purpose,
        `${l.set} of ${l.size}`, [means, ` (signed by the registry, valid until ${l.validUntil})`]] });
    } catch (e) {
      out.push({ state: 'fail', cells: [rawLink(url, 'list 0'), purpose, '', `FAILED: ${reasonOf(e)}`] });
    }
  }
  rows('status-lists', out);
}

/** A conformance receipt id: the receipt, in full, with its signatures or proofs and audit. */
async function conformance(id) {
  if (!id.startsWith('urn:oap:conformance:')) { fill('principal-conformance'); return; }
  let body;
  try { body = (await get(`${app.registry}/v1/records/${pathPart(id)}`)).record; } catch (_) { fill('principal-conformance'); return; }
  await showConformance('principal-conformance', body, { documents: app.documents, title: 'Conformance receipt in the registry' });
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
      const needs = /must be resolved to check its signature/.test(reasonOf(e));
      check = needs ? 'needs its signer\'s DID document' : `FAILED: ${reasonOf(e)}`;
      state = needs ? '' : 'fail';
    }
    const what = isObj(body) ? body.event || body.kind || body.level || (isObj(body.credentialSubject) ? body.credentialSubject.level : '') : '';
    const by = isObj(body) ? body.issued_by || body.subject || body.issuer || '' : '';
    out.push({ state, cells: [commitLink(item.seq, item.commit, String(item.seq)), `${item.type}${what ? ' ' + what : ''}`,
      h('span', { class: 'mono', text: item.id }), by ? value(by, 'signer', { link: { href: href({ view: 'principal', id: by }) } }) : '', check] });
  }
  rows('principal-records', out);
}

