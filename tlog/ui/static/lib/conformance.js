// OAP conformance receipts (OAP-CORE-1.0 §31, §5.2 OAPConformance), both forms, mirroring
// tlog/formats/conformance.py validate_conformance and tlog/formats/audit.py check_audit with
// the same checks, order and reasons:
//
// - compact: the receipt's own JSON; every signature {by, alg, value} covers JCS(receipt
//   without "signatures");
// - W3C Verifiable Credential 2.0: type ["VerifiableCredential", "OAPConformance"], issuer =
//   credentialSubject.id = the subject, secured by eddsa-jcs-2022 Data Integrity proofs
//   (lib/dataintegrity.js): the subject's proof and one per witness.
//
// Checked offline: schema, times, every signature, the witness count, the L3+ publisher check
// (the subject is a did:web), witness and auditor independence as far as DIDs and keys show
// (rules 1, 4 and 5), and an audit attestation's signature and anchor binding. Not checked here
// (the registry checks them): that L5 witnesses hold L4/L5 receipts, rules 2 and 3 with the
// registry's key events and stored documents, and the audit anchor's inclusion in a log (the
// page checks that against the user's pinned policy: `auditAnchor`).
//
// `conformanceSignatures` gives one verdict per signature or proof for display, without
// stopping at the first failure.
import { Forbidden, InvalidInput, SignatureError, StatusVerificationError, isInvalid, pyRepr, pySorted, pyStr } from './errors.js';
import { b64decEither } from './b64.js';
import { jcsBytes } from './jcs.js';
import { decodeCBOR } from './cbor.js';
import { didKeyFromPublic, parseSigner } from './didkey.js';
import { ALGS, ED25519_CURVE, isDid, needsResolution, signerKeys, splitDidUrl, verifySignedBy } from './diddoc.js';
import { proofsOf, verifyProof, sameJSON } from './dataintegrity.js';
import { parseAnchors } from './anchors.js';
import { parseUtc } from './times.js';
import { parties, principal, relation } from './independence.js';
import { checkJsonValue } from './jsonvalue.js';

export const LEVELS = ['L0', 'L1', 'L2', 'L3', 'L4', 'L5', 'L1-NC', 'L3-NC'];
export const MIN_WITNESSES = { L4: 1, L5: 3 };
export const PUBLISHER_LEVELS = ['L3', 'L3-NC', 'L4', 'L5'];
export const AUDIT_LEVELS = ['L5'];
export const MAX_VALIDITY_US = 90n * 86400n * 1000000n;
export const MAX_CLOCK_SKEW_US = 5n * 60n * 1000000n;
export const ID_PREFIX = 'urn:oap:conformance:';
export const VC_CONTEXT = 'https://www.w3.org/ns/credentials/v2';
export const VC_TYPES = ['VerifiableCredential', 'OAPConformance'];
const MAX_ID_LEN = 256, MAX_CONTEXTS = 8;
const FIELDS = ['id', 'subject', 'level', 'profile', 'suite', 'results_digest', 'issued_at', 'expires_at', 'signatures'];
const OPTIONAL = ['audit'];
const VC_FIELDS = ['@context', 'id', 'type', 'issuer', 'validFrom', 'validUntil', 'credentialSubject', 'proof'];
const VC_SUBJECT = ['id', 'level', 'profile', 'suite', 'resultsDigest'];
const SIG_FIELDS = ['by', 'alg', 'value'];
const URN = /^urn:oap:[\x21-\x7e]+$/;
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const without = (obj, key) => Object.fromEntries(Object.entries(obj).filter(([k]) => k !== key));
const isSha256Text = (t) => typeof t === 'string' && t.length === 71 && /^sha256:[0-9a-fA-F]{64}$/.test(t);

/** A receipt in W3C VC form (as opposed to the compact form). */
export const isVC = (r) => isObj(r) && (Object.hasOwn(r, '@context') || Object.hasOwn(r, 'credentialSubject'));

/** What every compact signature covers: JCS of the receipt minus "signatures". */
export const signingBytes = (r) => jcsBytes(without(r, 'signatures'));

/** The claims of a receipt in either form, in the compact form's names (conformance.py claims_of). */
export function claimsOf(r) {
  if (!isVC(r)) return without(r, 'signatures');
  const cs = isObj(r.credentialSubject) ? r.credentialSubject : {};
  const get = (o, k) => (Object.hasOwn(o, k) ? o[k] : null);
  const out = { id: get(r, 'id'), subject: get(r, 'issuer'), level: get(cs, 'level'), profile: get(cs, 'profile'),
    suite: get(cs, 'suite'), results_digest: get(cs, 'resultsDigest'), issued_at: get(r, 'validFrom'), expires_at: get(r, 'validUntil') };
  if (Object.hasOwn(cs, 'audit')) out.audit = cs.audit;
  return out;
}

function exactFields(obj, required, optional, what) {
  const missing = pySorted(required.filter((k) => !Object.hasOwn(obj, k)));
  if (missing.length) throw new InvalidInput(`${what}: missing field(s): ${missing.join(', ')}`);
  const unknown = pySorted(Object.keys(obj).filter((k) => !required.includes(k) && !optional.includes(k)));
  if (unknown.length) throw new InvalidInput(`${what}: unknown field(s): ${unknown.join(', ')}`);
}

function compact(r, lookup) {
  exactFields(r, FIELDS, OPTIONAL, 'conformance receipt');
  const sigs = r.signatures;
  if (!Array.isArray(sigs) || !sigs.length) throw new InvalidInput('conformance receipt: signatures must be a non-empty list');
  const message = signingBytes(r);
  return [claimsOf(r), sigs.map((sig, i) => {
    const where = `conformance receipt: signatures[${i}]`;
    if (!isObj(sig) || Object.keys(sig).length !== 3 || !SIG_FIELDS.every((k) => Object.hasOwn(sig, k)))
      throw new InvalidInput(`${where} must be {"by", "alg", "value"} exactly`);
    if (!Object.values(ALGS).includes(sig.alg)) throw new InvalidInput(`${where}: alg must be one of ${Object.values(ALGS).join(', ')}`);
    const by = sig.by;
    if (typeof by !== 'string' || !isDid(splitDidUrl(by)[0])) throw new InvalidInput(`${where}: by must be a DID`);
    let value;
    try { value = b64decEither(sig.value, 'value'); } catch (e) { throw new InvalidInput(`${where}: ${e.reason}`); }
    if (value.length !== 64) throw new InvalidInput(`${where}: value must be base64 of a 64-byte signature`);
    const verify = async () => {
      const key = await verifySignedBy(by, message, value, lookup);
      if (ALGS[key.curve] !== sig.alg) throw new InvalidInput(`${where}: alg must be ${ALGS[key.curve]} for the key that signed`);
      return key;
    };
    return { where, by, alg: sig.alg, verify };
  })];
}

function vc(r, lookup) {
  exactFields(r, VC_FIELDS, [], 'conformance credential');
  const ctx = r['@context'];
  if (!Array.isArray(ctx) || ctx.length < 1 || ctx.length > MAX_CONTEXTS || ctx[0] !== VC_CONTEXT
      || !ctx.every((c) => typeof c === 'string' && c) || new Set(ctx).size !== ctx.length)
    throw new InvalidInput(`conformance credential: @context must be a list starting with ${pyRepr(VC_CONTEXT)} (at most ${MAX_CONTEXTS} distinct URLs)`);
  const types = r.type;
  if (!Array.isArray(types) || types.length !== 2 || !types.every((t) => typeof t === 'string')
      || new Set(types).size !== 2 || !VC_TYPES.every((t) => types.includes(t)))
    throw new InvalidInput(`conformance credential: type must be ['${VC_TYPES[0]}', '${VC_TYPES[1]}']`);
  const issuer = r.issuer;
  if (!isDid(issuer) || issuer.includes('#')) throw new InvalidInput("conformance credential: issuer must be the subject's DID (§5.2: self-issued)");
  const cs = r.credentialSubject;
  if (!isObj(cs)) throw new InvalidInput('conformance credential: credentialSubject must be an object');
  exactFields(cs, VC_SUBJECT, OPTIONAL, 'conformance credential: credentialSubject');
  if (!sameJSON(cs.id, issuer)) throw new InvalidInput('conformance credential: credentialSubject.id must be the issuer (§5.2: self-issued)');
  return [claimsOf(r), proofsOf(r).map((proof, i) => {
    const where = `conformance credential: proof[${i}]`;
    if (!sameJSON(Object.hasOwn(proof, '@context') ? proof['@context'] : ctx, ctx)) throw new InvalidInput(`${where}: @context must be the credential's @context`);
    const vm = proof.verificationMethod;
    if (typeof vm !== 'string' || !isDid(splitDidUrl(vm)[0])) throw new InvalidInput(`${where}: verificationMethod must be a DID URL`);
    return { where, by: vm, alg: 'EdDSA', proof, verify: () => verifyProof(r, proof, lookup, { where }) };
  })];
}

/** conformance.py publisher_check: L3 and above need a did:web subject (a publisher domain). */
export function publisherCheck(subject, level, what = 'conformance receipt') {
  if (!subject.startsWith('did:web:')) {
    const method = subject.split(':')[1];
    throw new Forbidden(`${what}: level ${level} needs the publisher check (§31 L3: DNS or DID-based publisher `
      + `verification), and the subject ${subject} is a did:${method}, which names no publisher domain; use a did:web `
      + 'whose DID document lists the signing key');
  }
}

function offlineKeys(did, lookup) {
  if (!lookup || needsResolution(did) === null) return [];
  try { return signerKeys(did, lookup); } catch (e) { if (isInvalid(e)) return []; throw e; }
}

/** conformance.py offline_independence: rules 1, 4 and 5; Forbidden naming who and why. */
export function offlineIndependence(subject, witnesses, auditor, lookup, what = 'conformance receipt') {
  const s = principal(subject, { keys: offlineKeys(subject, lookup) });
  const who = [...witnesses.map((w) => ['witness', w]), ...(auditor ? [['auditor', auditor]] : [])];
  for (const [role, w] of who) {
    const why = relation(s, principal(w, { keys: offlineKeys(w, lookup) }));
    if (why !== null) throw new Forbidden(`${what}: ${role} ${w} is not independent of the subject ${subject}: ${why}`, { witness: w, rule: why });
  }
}

/** conformance.py independent_witnesses: witnesses that are not independent of each other
 * count as one party toward the level's number; Forbidden naming them and the rule. */
export function independentWitnesses(what, level, needed, members, { kind = '' } = {}) {
  if (needed < 2) return;
  const [groups, related] = parties(members);
  if (groups.length >= needed) return;
  const [, b, rule] = related[0];
  const why = related.map(([, y, r]) => `${y}: ${r}`).join('; ');
  throw new Forbidden(`${what}: level ${level} needs at least ${needed} independent ${kind}peer witnesses, and its `
    + `${members.length} ${kind}witnesses are ${groups.length} part${groups.length === 1 ? 'y' : 'ies'} `
    + `(${groups.map((g) => g.join(' = ')).join('; ')}): ${why}`, { witness: b, rule });
}

/** diddoc.py key_did: the did:key of the Ed25519 key that made a signature (what a `kind=key`
 * revocation names), null for other curves. */
export function keyDid(key) {
  return key && key.curve === ED25519_CURVE && key.public instanceof Uint8Array && key.public.length === 32
    ? didKeyFromPublic(key.public) : null;
}

async function checkSignatures(what, signatures, subject, keys) {
  let selfKeys = 0;
  const witnesses = [];
  for (const sig of signatures) {
    const who = splitDidUrl(sig.by)[0];
    let key;
    try {
      key = await sig.verify();
    } catch (e) {
      if (e instanceof SignatureError) {
        throw new InvalidInput(`${sig.where}: ${who === subject ? 'self signature' : `witness signature by ${sig.by}`} does not verify`);
      }
      if (isInvalid(e)) throw new e.constructor(e.reason.startsWith(sig.where) ? e.reason : `${sig.where}: ${e.reason}`);
      throw e;
    }
    if (who === subject) selfKeys++;
    else if (witnesses.includes(who)) throw new InvalidInput(`${sig.where}: duplicate witness ${who}`);
    else witnesses.push(who);
    const signedWith = keyDid(key);
    if (signedWith !== null) keys.set(who, signedWith);
  }
  if (selfKeys !== 1) throw new InvalidInput(`${what}: needs exactly one self signature by the subject, has ${selfKeys}`);
  return witnesses;
}

// --- audit attestations (audit.py) ------------------------------------------------------------

export const AUDIT_FIELDS = ['anchor', 'auditor', 'digest', 'signature', 'standard', 'uri'];
const SIGNED = ['standard', 'uri', 'digest', 'auditor'];
const MAX_ANCHOR = 32 * 1024, MAX_URI = 512;
const URI = /^[A-Za-z][A-Za-z0-9+.-]*:[\x21-\x7e]+$/;
const STANDARD = /^[\x20-\x7e]{1,64}$/;

/** What the auditor signs: JCS({type: "OAPAuditAttestation", subject, standard, uri, digest, auditor}). */
export const attestationBytes = (subject, audit) => jcsBytes({ type: 'OAPAuditAttestation', subject,
  ...Object.fromEntries(SIGNED.map((k) => [k, audit[k]])) });

function samePrincipal(signer, auditor) {
  if (signer.startsWith('ed25519:')) {
    try { return didKeyFromPublic(parseSigner(signer)) === auditor; } catch (e) { if (isInvalid(e)) return false; throw e; }
  }
  return splitDidUrl(signer)[0] === auditor;
}

async function checkAnchoredEntry(entry, digest, auditor, lookup) {
  const obj = decodeCBOR(entry).value;
  if (!isObj(obj) || obj.type !== 'receipt' || obj.receipt_hash !== 'sha256:' + digest)
    throw new InvalidInput("the anchored entry is not a receipt entry of the attestation's digest");
  const signer = obj.signer;
  if (typeof signer !== 'string' || !samePrincipal(signer, auditor))
    throw new InvalidInput(`the anchored entry is signed by ${pyStr(signer)}, not by the auditor ${auditor}`);
  const sig = b64decEither(obj.signature, 'signature');
  if (sig.length !== 64) throw new InvalidInput("the anchored entry's signature is not 64 bytes");
  try {
    await verifySignedBy(signer, Uint8Array.from(digest.match(/../g), (h) => parseInt(h, 16)), sig, lookup);
  } catch (e) {
    if (e instanceof SignatureError) throw new InvalidInput(`the anchored entry's signature by ${signer} does not verify`);
    throw e;
  }
}

/** audit.py check_audit: schema, the auditor's signature, the anchor's binding (not its
 * inclusion) -> {standard, uri, digest (hex), auditor, anchor, entry (bytes)}. */
export async function checkAudit(audit, subject, lookup, where = 'audit') {
  if (!isObj(audit)) throw new InvalidInput(`${where} must be an object`);
  if (Object.keys(audit).length !== AUDIT_FIELDS.length || !AUDIT_FIELDS.every((k) => Object.hasOwn(audit, k)))
    throw new InvalidInput(`${where} must have exactly the fields ${AUDIT_FIELDS.join(', ')}`);
  const { standard, uri, auditor, anchor } = audit;
  if (typeof standard !== 'string' || !STANDARD.test(standard))
    throw new InvalidInput(`${where}: standard must be 1 to 64 printable ASCII characters (e.g. 'SOC 2 Type II')`);
  if (typeof uri !== 'string' || uri.length > MAX_URI || !URI.test(uri)) throw new InvalidInput(`${where}: uri must be an absolute URI of at most ${MAX_URI} characters`);
  if (!isSha256Text(audit.digest)) throw new InvalidInput(`${where}: digest must be 'sha256:' followed by 64 hex digits`);
  const digest = audit.digest.slice(7).toLowerCase();
  if (audit.digest !== 'sha256:' + digest) throw new InvalidInput(`${where}: digest must be 'sha256:' followed by 64 lowercase hex digits`);
  if (!isDid(auditor) || auditor.includes('#')) throw new InvalidInput(`${where}: auditor must be a DID`);
  let raw;
  try { raw = b64decEither(audit.signature, 'signature'); } catch (e) { throw new InvalidInput(`${where}: ${e.reason}`); }
  if (raw.length !== 64) throw new InvalidInput(`${where}: signature must be base64 of a 64-byte signature`);
  let signedWith;
  try {
    signedWith = await verifySignedBy(auditor, attestationBytes(subject, audit), raw, lookup);
  } catch (e) {
    if (e instanceof SignatureError) throw new InvalidInput(`${where}: the auditor's signature by ${auditor} does not verify for subject ${subject}`);
    if (isInvalid(e)) throw new e.constructor(`${where}: auditor: ${e.reason}`);
    throw e;
  }
  if (typeof anchor !== 'string' || anchor.length > MAX_ANCHOR)
    throw new InvalidInput(`${where}: anchor must be a .tlog-proof (or anchors file) of at most ${MAX_ANCHOR} bytes`);
  let bundles;
  try { bundles = parseAnchors(anchor); } catch (e) { if (isInvalid(e)) throw new InvalidInput(`${where}: anchor: ${e.reason}`); throw e; }
  const entry = bundles[0].extra;
  if (entry === null || bundles.some((b) => b.extra === null || b.extra.length !== entry.length || b.extra.some((x, i) => x !== entry[i])))
    throw new InvalidInput(`${where}: anchor must carry its log entry (the tlog-proof 'extra' line), the same in every bundle`);
  try { await checkAnchoredEntry(entry, digest, auditor, lookup); } catch (e) {
    if (isInvalid(e)) throw new InvalidInput(`${where}: anchor: ${e.reason}`);
    throw e;
  }
  return { standard, uri, digest, auditor, anchor, entry, key: keyDid(signedWith) };
}

// --- the whole receipt --------------------------------------------------------------------

export const NON_COMMERCIAL = 'non-commercial';
/** conformance.py PROFILES (sorted): the full profile's two names and the Non-Commercial Profile. */
const PROFILES = ['commercial', NON_COMMERCIAL, 'standard'];
const NC_LEVELS = ['L1-NC', 'L3-NC'];
const COMMERCIAL_LEVELS = ['L1', 'L2', 'L3', 'L4', 'L5'];

/** conformance.py profile_rule (§31 Non-Commercial Profile): an -NC level needs profile
 * non-commercial, and a non-commercial receipt claims an -NC level (or L0). */
export function profileRule(level, profile, what = 'conformance receipt') {
  if (NC_LEVELS.includes(level) && profile !== NON_COMMERCIAL)
    throw new InvalidInput(`${what}: level ${level} is the Non-Commercial Profile (§31): its profile must be ${pyRepr(NON_COMMERCIAL)}, not ${pyRepr(profile)}`);
  if (profile === NON_COMMERCIAL && COMMERCIAL_LEVELS.includes(level))
    throw new InvalidInput(`${what}: profile ${pyRepr(NON_COMMERCIAL)} waives requirements of level ${level} (§31); a non-commercial receipt claims ${NC_LEVELS.join(' or ')}`);
}

/** conformance.py validate_conformance: a receipt in either form, completely; InvalidInput
 * naming the problem, or Forbidden when a §31 level rule fails. `nowUs`: BigInt microseconds.
 * `lookup`: DID -> keys for signers that are not did:key (lib/diddoc.js lookupFrom). */
export async function validateConformance(receipt, nowUs, { requireWitnesses = true, lookup = null, checkPublisher = true } = {}) {
  if (!isObj(receipt)) throw new InvalidInput('conformance receipt must be an object');
  checkJsonValue(receipt);
  const form = isVC(receipt) ? 'vc' : 'compact';
  const [claims, signatures] = form === 'vc' ? vc(receipt, lookup) : compact(receipt, lookup);
  const what = form === 'vc' ? 'conformance credential' : 'conformance receipt';
  const rid = claims.id;
  if (typeof rid !== 'string' || !rid.startsWith(ID_PREFIX) || [...rid].length > MAX_ID_LEN || rid.length === ID_PREFIX.length || !URN.test(rid))
    throw new InvalidInput(`${what}: id must be '${ID_PREFIX}<id>' (printable ASCII, at most ${MAX_ID_LEN} chars)`);
  const subject = claims.subject;
  if (!isDid(subject) || subject.includes('#')) throw new InvalidInput(`${what}: subject must be a DID`);
  const level = claims.level;
  if (typeof level !== 'string' || !LEVELS.includes(level)) throw new InvalidInput(`${what}: level must be one of ${pySorted(LEVELS).join(', ')}`);
  if (typeof claims.profile !== 'string' || !PROFILES.includes(claims.profile))
    throw new InvalidInput(`${what}: profile must be one of ${PROFILES.join(', ')} (§31: the test suite's --profile; ${pyRepr(NON_COMMERCIAL)} is the Non-Commercial Profile)`);
  profileRule(level, claims.profile, what);
  const suite = claims.suite;
  if (!isObj(suite) || Object.keys(suite).length !== 2 || !Object.hasOwn(suite, 'name') || !Object.hasOwn(suite, 'version')
      || !Object.values(suite).every((v) => typeof v === 'string' && v))
    throw new InvalidInput(`${what}: suite must be {"name": <string>, "version": <string>}`);
  if (!isSha256Text(claims.results_digest)) throw new InvalidInput(`${what}: results_digest must be 'sha256:' followed by 64 hex digits`);
  const issued = parseUtc(claims.issued_at, `${what}: issued_at`), expires = parseUtc(claims.expires_at, `${what}: expires_at`);
  if (expires <= issued) throw new InvalidInput(`${what}: expires_at must be after issued_at`);
  if (expires - issued > MAX_VALIDITY_US) throw new InvalidInput(`${what}: validity period exceeds 90 days`);
  if (issued > nowUs + MAX_CLOCK_SKEW_US) throw new InvalidInput(`${what}: issued_at is in the future`);
  if (nowUs >= expires) throw new InvalidInput(`${what}: expired`);
  const signingKeys = new Map();
  const witnesses = await checkSignatures(what, signatures, subject, signingKeys);
  const needed = requireWitnesses ? (MIN_WITNESSES[level] || 0) : 0;
  if (witnesses.length < needed) throw new InvalidInput(`${what}: level ${level} needs at least ${needed} witness signature(s), has ${witnesses.length}`);
  if (checkPublisher && PUBLISHER_LEVELS.includes(level)) publisherCheck(subject, level, what);
  let audit = null;
  if (Object.hasOwn(claims, 'audit')) audit = await checkAudit(claims.audit, subject, lookup, `${what}: audit`);
  else if (AUDIT_LEVELS.includes(level))
    throw new InvalidInput(`${what}: level ${level} needs an audit attestation (§31: an independent third-party `
      + "security audit published in machine-readable form): the 'audit' field");
  offlineIndependence(subject, witnesses, audit ? audit.auditor : null, lookup, what);
  independentWitnesses(what, level, needed, witnesses.map((w) => principal(w, { keys: offlineKeys(w, lookup) })));
  if (audit !== null && audit.key !== null) signingKeys.set(audit.auditor, audit.key);
  return { id: rid, subject, level, issuedAt: issued, expiresAt: expires, witnesses, form, audit, signingKeys };
}

/** Every signature (compact) or proof (VC) of a receipt, each with its own verdict, for display:
 * [{where, by, role: 'subject'|'witness', status: 'verified'|'failed'|'not_checkable', reason, key?}].
 * The shape must already be valid (the schema errors of validateConformance are thrown). */
export async function conformanceSignatures(receipt, lookup = null) {
  const [claims, signatures] = isVC(receipt) ? vc(receipt, lookup) : compact(receipt, lookup);
  const out = [];
  for (const sig of signatures) {
    const role = splitDidUrl(sig.by)[0] === claims.subject ? 'subject' : 'witness';
    const row = { where: sig.where, by: sig.by, alg: sig.alg, role };
    try {
      const key = await sig.verify();
      out.push({ ...row, status: 'verified', reason: `verified with ${key.id}`, key: key.id });
    } catch (e) {
      if (e instanceof SignatureError) out.push({ ...row, status: 'failed', reason: 'does not verify' });
      else if (isInvalid(e) && /must be resolved to check its signature|no pinned DID document|no DID document of/.test(e.reason))
        out.push({ ...row, status: 'not_checkable', reason: e.reason });
      else if (isInvalid(e) || e instanceof StatusVerificationError) out.push({ ...row, status: 'failed', reason: e.reason });
      else throw e;
    }
  }
  return out;
}
