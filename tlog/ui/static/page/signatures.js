// One checklist row per signature, whatever signed what: an entry's own signature, each §19.1
// signature of a receipt, each proof of a conformance credential, a registry record's
// signature. Every verifier of lib/ reports a signature as {status, reason, by?, alg?, key?,
// source?, roles?, index?} with status verified | failed | not_checkable | missing (the
// verdicts of `oap-log verify`); this module turns such a report into a row, so that a new
// kind of signature (an ML-DSA cosignature, a mirror's cosignature) is one more report, not
// new page code. Rows of `not_checkable` signatures carry `incomplete`: the result is then
// INCOMPLETE, never green (OK needs every signature checked and verified).
import { h, value } from './dom.js';

export const VERIFIED = 'verified', FAILED = 'failed', NOT_CHECKABLE = 'not_checkable', MISSING = 'missing';
const SOURCES = { 'did:key': 'the did:key itself', anchored: 'the DID document kept in the log entry',
  pinned: 'a DID document you pinned', answer: 'the DID document the registry keeps with the record',
  registry: "the registry's key" };
const WORD = { [VERIFIED]: 'verified', [FAILED]: 'FAILED', [NOT_CHECKABLE]: 'not checked', [MISSING]: 'MISSING' };

/** A signature report -> a checklist row. `what`: what signed ("signature 1", "proof 0",
 * "entry signature"); `id`: the row id (data-check) for tests and styles. */
export function signatureRow(report, { what = 'signature', id = 'signature' } = {}) {
  const who = report.by ? ['by ', value(report.by, 'signer', { link: linkOf(report.by) })] : [];
  const roles = report.roles && report.roles.length ? ` (${report.roles.join(', ')})` : '';
  const alg = report.alg ? ` ${report.alg}` : '';
  const label = `${what}${roles}: ${WORD[report.status] || report.status}${alg}`;
  let detail;
  if (report.status === VERIFIED) {
    const from = report.source ? SOURCES[report.source] || report.source : null;
    detail = [...who, report.key && report.key !== report.by && report.source !== 'did:key' ? [', with key ', value(report.key, 'key')] : '',
      from ? `, from ${from}` : ''];
  } else {
    detail = [...who, who.length ? ': ' : '', report.reason];
  }
  const state = report.status === VERIFIED ? 'pass' : report.status === NOT_CHECKABLE ? 'warn' : 'fail';
  return { id, state, label, detail, incomplete: report.status === NOT_CHECKABLE, signature: report };
}

/** The rows of a receipt's signatures report (lib/receipts.js verifyReceiptSignatures). */
export function receiptRows(report) {
  const rows = report.signatures.map((s) => signatureRow(s, {
    what: s.index !== undefined ? `receipt signature ${s.index}` : 'receipt signature', id: 'receipt-signature' }));
  const words = { ok: 'all verified', failed: 'FAILED', incomplete: 'not all checked' };
  rows.unshift({ id: 'receipt-signatures', state: report.verdict === 'ok' ? 'pass' : report.verdict === 'failed' ? 'fail' : 'warn',
    label: `receipt signatures: ${words[report.verdict]}`,
    detail: [`${report.signatures.filter((s) => s.status === VERIFIED).length} of ${report.signatures.length} verified `
      + '(OAP-CORE-1.0 §19.1: the agent and the tool each sign)'] });
  return rows;
}

let linker = null;
/** Where a signer's DID links to (set by the page: its search view). */
export function linkSignersWith(fn) { linker = fn; }
function linkOf(by) {
  if (!linker || typeof by !== 'string') return null;
  return { href: linker(by.split('#')[0]) };
}

/** A small legend of the four verdicts (shown under a list of signatures). */
export const legend = () => h('p', { class: 'hint', text: 'verified: checked against the key named; FAILED: checked and wrong, or a '
  + 'required signature is missing; not checked: no key to check it with (the result is then INCOMPLETE, as `oap-log verify` '
  + 'exits 3).' });
