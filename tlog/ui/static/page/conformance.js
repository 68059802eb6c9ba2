// A conformance receipt (OAP-CORE-1.0 §31, §5.2), in either form, checked here: what it
// claims (issuer, credentialSubject.level, validFrom/validUntil), each signature or Data
// Integrity proof with its own verdict (which key verified it), the §31 level rules the page
// can check offline (lib/conformance.js: publisher check, witness and auditor independence),
// and an L5 audit attestation: its standard, URI and digest, the auditor's signature, and the
// anchor's inclusion in a log, checked against the policy pinned for that log.
import * as oap from '../lib/index.js';
import { h, fill, facts, value, time, reasonOf } from './dom.js';
import { show } from './verdict.js';
import { app } from './services.js';
import { judge } from './checks.js';
import { signatureRow } from './signatures.js';

const r = (state, label, ...detail) => ({ state, label, detail });
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** A lookup (DID -> keys) over DID documents; documents that are not valid are left out. */
function lookupOver(documents) {
  const good = [];
  for (const d of documents) {
    try { oap.keysFromDocument(d.id, d); good.push([d.id, d]); } catch (_) { /* not a usable document */ }
  }
  return good.length ? oap.lookupFrom(good) : null;
}

/** The policy to check an anchor (a tlog-proof or anchors file) with: the pin of each log it
 * names, k from their `logs <k>`. null when no log it names is pinned. */
export async function anchorPolicy(anchor) {
  const logs = [];
  let k = 1;
  for (const b of oap.parseAnchors(anchor)) {
    const origin = oap.bundleOrigin(b);
    if (logs.some((l) => l.origin === origin)) continue;
    const pinned = await app.trust.policyFor(origin);
    if (pinned) {
      logs.push({ origin, policy: pinned.policy, pinned: true });
      k = Math.max(k, pinned.policy.policy.logQuorum || 1);
    }
  }
  return logs.length ? new oap.PolicySet(logs, Math.min(k, logs.length)) : null;
}

/** Rows for an audit attestation: its signature and binding, and its anchor's inclusion. */
async function auditRows(audit, subject, lookup) {
  const rows = [];
  let checked = null;
  try {
    checked = await oap.checkAudit(audit, subject, lookup, 'audit');
    rows.push(r('pass', 'audit attestation', `signed by the auditor `, value(checked.auditor, 'auditor'),
      ` for ${subject}; its anchor is a receipt entry of the digest signed by the auditor`));
  } catch (e) {
    rows.push(r('fail', 'audit attestation', reasonOf(e)));
    return rows;
  }
  try {
    const policy = await anchorPolicy(audit.anchor);
    if (!policy) {
      const origins = oap.parseAnchors(audit.anchor).map(oap.bundleOrigin);
      rows.push({ ...r('warn', 'audit anchor', `not checked: pin a policy for ${origins.join(' or ')} (Trust) to check its inclusion`), incomplete: true });
    } else {
      const v = await policy.verifyAnchored(audit.anchor, { entry: checked.entry });
      rows.push(r('pass', 'audit anchor', `included in ${v.logs.join(', ')} (index ${v.entries[0].index}), against your pinned policy`));
    }
  } catch (e) {
    rows.push(r('fail', 'audit anchor', reasonOf(e)));
  }
  return rows;
}

/** Check `receipt` and draw it into `target`: a heading, a verdict with one row per check,
 * and the facts. `documents`: DID documents to check did:web / did:plc signers with. */
export async function showConformance(target, receipt, { documents = [], title = 'Conformance receipt' } = {}) {
  const box = fill(target);
  if (!isObj(receipt)) return null;
  const vc = oap.isVC(receipt);
  const claims = oap.claimsOf(receipt);
  const lookup = lookupOver(documents);
  const card = h('div', { class: 'verdict', data: { state: 'running', check: 'conformance' }, attrs: { role: 'status' } });
  const dl = h('dl', { class: 'facts' });
  box.append(h('h2', { text: `${title} (${vc ? 'W3C VC 2.0, eddsa-jcs-2022' : 'compact form'})` }), card, dl);
  const cs = vc && isObj(receipt.credentialSubject) ? receipt.credentialSubject : {};
  facts(dl, [
    ['id', String(claims.id)],
    [vc ? 'issuer' : 'subject', typeof claims.subject === 'string' ? value(claims.subject, 'issuer') : String(claims.subject)],
    [vc ? 'credentialSubject.level' : 'level', String(claims.level)],
    ['profile', String(claims.profile)],
    ['suite', isObj(claims.suite) ? `${claims.suite.name} ${claims.suite.version}` : String(claims.suite)],
    [vc ? 'validFrom' : 'issued_at', typeof claims.issued_at === 'string' ? time(claims.issued_at, { age: false }) : String(claims.issued_at)],
    [vc ? 'validUntil' : 'expires_at', typeof claims.expires_at === 'string' ? time(claims.expires_at) : String(claims.expires_at)],
    ['results digest', typeof claims.results_digest === 'string' ? value(claims.results_digest, 'results digest') : undefined],
    ...(isObj(claims.audit) ? [
      ['audit standard', String(claims.audit.standard)],
      ['audit report', typeof claims.audit.uri === 'string' ? h('span', { class: 'mono', text: claims.audit.uri }) : undefined],
      ['audit digest', typeof claims.audit.digest === 'string' ? [value(claims.audit.digest, 'audit digest'),
        ' (compare with the SHA-256 of the report; nothing here fetches it)'] : undefined],
      ['auditor', typeof claims.audit.auditor === 'string' ? value(claims.audit.auditor, 'auditor') : undefined]] : []),
    ['credential context', vc && Array.isArray(receipt['@context']) ? receipt['@context'].join(', ') : undefined],
    ['subject of the credential', vc && typeof cs.id === 'string' ? value(cs.id, 'credential subject') : undefined],
  ]);
  const rows = [];
  let whole = null;
  try {
    whole = await oap.validateConformance(receipt, oap.dateToMicros(new Date()), { lookup });
    rows.push(r('pass', 'receipt', `valid now: level ${whole.level}, ${whole.witnesses.length} witness(es)`
      + `${whole.witnesses.length ? ' independent of the subject (as far as DIDs and keys show)' : ''}`));
  } catch (e) {
    const rule = e instanceof oap.Forbidden && e.rule ? ` (witness ${e.witness}: ${e.rule})` : '';
    const open = /must be resolved to check its signature/.test(reasonOf(e));
    rows.push({ ...r(open ? 'warn' : 'fail', 'receipt', `${reasonOf(e)}${rule}`), incomplete: open });
  }
  try {
    for (const s of await oap.conformanceSignatures(receipt, lookup)) {
      const report = { status: s.status, reason: s.reason, by: s.by, alg: s.alg, key: s.key, roles: [s.role],
        source: s.by.startsWith('did:key:') ? 'did:key' : s.status === 'verified' ? 'pinned' : undefined };
      rows.push(signatureRow(report, { what: vc ? `proof ${s.where.match(/\[(\d+)\]/)[1]}` : `signature ${s.where.match(/\[(\d+)\]/)[1]}`,
        id: vc ? 'vc-proof' : 'conformance-signature' }));
    }
  } catch (e) {
    rows.push(r('fail', vc ? 'proofs' : 'signatures', reasonOf(e)));
  }
  if (isObj(claims.audit) && typeof claims.subject === 'string') rows.push(...await auditRows(claims.audit, claims.subject, lookup));
  const v = judge(rows, { pinned: true });
  show(card, { ...v, headline: v.state === 'pass' ? 'VALID: every signature verified' : v.headline });
  card.dataset.state = v.state;
  return { verdict: v, claims, whole };
}
