// Registry records as statusverify.py needs them (registry/records.py check_record with
// now=None, the layout of registry/layout.py) and the Git path proof of a record
// (statusverify.py _verify_git_path). Every record but a conformance receipt is signed by
// `issued_by` (a did:key, or another DID whose document the caller gives through a lookup)
// over JCS(record without "signature"); a conformance receipt is checked by
// lib/conformance.js (either form, its signatures and level rules).
import { FormatError, InvalidInput, SignatureError, isInvalid, pySorted } from './errors.js';
import { b64dec, b64decEither, utf8, hex, subtle } from './b64.js';
import { jcsBytes } from './jcs.js';
import { sha256 } from './merkle.js';
import { isDid, verifySignedBy } from './diddoc.js';
import { publicFromDidKey } from './didkey.js';
import { parseUtc } from './times.js';
import { checkJsonValue } from './jsonvalue.js';
import { isVC, claimsOf, validateConformance } from './conformance.js';

export { validateConformance } from './conformance.js';
export const MAX_CLOCK_SKEW_US = 5n * 60n * 1000000n;
export const REVOCATION_KINDS = ['did', 'vc', 'key', 'conformance'];
export const REASONS = ['unspecified', 'key_compromise', 'superseded', 'cessation_of_operation', 'privilege_withdrawn',
  'affiliation_changed', 'loss_of_key', 'policy_violation'];
export const KILL_SWITCH_CLASSES = ['subscription_tokens', 'oauth_grants', 'trust_tokens', 'webhook_subscriptions'];
export const KEY_EVENTS = ['add_controller', 'resume', 'rotate', 'suspend'];
const KEYED_EVENTS = ['add_controller', 'rotate'];
const RECORD_TYPES = ['conformance', 'revocation', 'kill_switch', 'key_event'];
const STATUS_LIST_BITS = 131072, MAX_STATUS_LISTS = 65536;
const ID_PREFIXES = { revocation: 'urn:oap:revocation:', kill_switch: 'urn:oap:kill-switch:', key_event: 'urn:oap:key-event:', conformance: 'urn:oap:conformance:' };
const COMMON = ['type', 'id', 'effective_at', 'issued_at', 'issued_by', 'signature'];
const FIELDS = {
  revocation: [[...COMMON, 'kind', 'subject', 'reason'], ['status_list', 'status_list_index']],
  kill_switch: [[...COMMON, 'principal'], ['reason']],
  key_event: [[...COMMON, 'subject', 'event'], ['key', 'reason']],
};
const URN = /^urn:oap:[\x21-\x7e]{1,240}$/;
const URI = /^[A-Za-z][A-Za-z0-9+.-]*:[\x21-\x7e]+$/;
const MAX_URI = 512;

export { parseUtc, microsToDate, dateToMicros } from './times.js';

/** records.py _time: any refusal is worded "must be an RFC 3339 UTC time". */
function recordTime(value, where) {
  try { return parseUtc(value, where); } catch (e) {
    if (e instanceof InvalidInput) throw new InvalidInput(`${where} must be an RFC 3339 UTC time like 2026-01-02T03:04:05Z`);
    throw e;
  }
}
const without = (obj, key) => Object.fromEntries(Object.entries(obj).filter(([k]) => k !== key));
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// --- layout (registry/layout.py) ----------------------------------------------------------

const shard = (h) => `${h.slice(0, 2)}/${h.slice(2, 4)}/${h}`;
/** layout.py id_hash: hex SHA-256 of the id's UTF-8. */
export const idHash = async (id) => hex(await sha256(utf8(id)));

/** layout.py record_path: the one path of a record, sharded by SHA-256 of its id. */
export async function recordPath(rtype, id, kind) {
  const h = await idHash(id);
  if (rtype === 'revocation') return `revocations/${kind}/${shard(h)}.json`;
  return `${{ conformance: 'conformance', kill_switch: 'killswitch', key_event: 'keys' }[rtype]}/${shard(h)}.json`;
}

const RECORD_RE = /^(conformance|killswitch|keys|revocations\/(did|vc|key|conformance))\/([0-9a-f]{2})\/([0-9a-f]{2})\/([0-9a-f]{64})(\.anchors\.json|\.json|\.tlog-proof)$/;
const DID_DOC_RE = /^dids\/([0-9a-f]{2})\/([0-9a-f]{2})\/([0-9a-f]{64})\/([0-9a-f]{64})\.json$/;
const ANCHOR_RE = /^anchors\/(0|[1-9][0-9]{0,15})\/(0|[1-9][0-9]{0,15})(\.tlog-proof|\.anchors\.json)$/;
const TYPE_OF_DIR = { conformance: 'conformance', killswitch: 'kill_switch', keys: 'key_event' };

/** layout.py classify: what a tree path is ({what, rtype, kind, hash, seq, contentHash});
 * InvalidInput for anything the layout does not allow. */
export function classify(path) {
  if (path === 'registry.json') return { what: 'genesis' };
  let m = ANCHOR_RE.exec(path);
  if (m) {
    const seq = BigInt(m[2]);
    if (BigInt(m[1]) !== seq / 1000n) throw new InvalidInput(`${path}: anchor in the wrong shard`);
    return { what: 'anchor', seq, several: m[3] === '.anchors.json' };
  }
  m = DID_DOC_RE.exec(path);
  if (m) {
    if (m[1] !== m[3].slice(0, 2) || m[2] !== m[3].slice(2, 4)) throw new InvalidInput(`${path}: DID document in the wrong shard`);
    return { what: 'did_document', hash: m[3], contentHash: m[4] };
  }
  m = RECORD_RE.exec(path);
  if (!m) throw new InvalidInput(`${path}: not a path of the registry layout`);
  const h = m[5];
  if (m[3] !== h.slice(0, 2) || m[4] !== h.slice(2, 4)) throw new InvalidInput(`${path}: record in the wrong shard`);
  const rtype = m[1].startsWith('revocations/') ? 'revocation' : TYPE_OF_DIR[m[1]];
  if (m[6] !== '.json') {
    if (rtype !== 'kill_switch') throw new InvalidInput(`${path}: only kill switch records have a receipt proof`);
    return { what: 'receipt_proof', rtype, kind: null, hash: h, several: m[6] === '.anchors.json' };
  }
  return { what: 'record', rtype, kind: m[2] ?? null, hash: h };
}

// --- records (registry/records.py check_record) ---------------------------------------------

function did(value, where) {
  if (!isDid(value) || value.includes('#')) throw new InvalidInput(`${where} must be a DID (did:<method>:<id>, at most 256 characters)`);
  return value;
}
function didKeyOf(value, where) {
  try { publicFromDidKey(value); } catch (e) { if (e instanceof InvalidInput) throw new InvalidInput(`${where}: ${e.reason}`); throw e; }
  return value;
}
function smallInt(v, where, limit) {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= limit) throw new InvalidInput(`${where} must be an integer from 0 to ${limit - 1}`);
  return v;
}

function revocationSubject(body, kind) {
  const subject = body.subject;
  if (kind === 'key') return didKeyOf(subject, 'revocation: subject of a key revocation');
  if (kind === 'did') return did(subject, 'revocation: subject of a did revocation');
  if (kind === 'conformance') {
    const prefix = ID_PREFIXES.conformance;
    if (typeof subject !== 'string' || !subject.startsWith(prefix) || !URN.test(subject))
      throw new InvalidInput(`revocation: subject of a conformance revocation must be a '${prefix}' id`);
    return subject;
  }
  if (typeof subject !== 'string' || [...subject].length > MAX_URI || !URI.test(subject))
    throw new InvalidInput(`revocation: subject of a vc revocation must be the credential id (a URI, at most ${MAX_URI} characters)`);
  if (subject.startsWith('did:') || subject.startsWith('urn:oap:'))
    throw new InvalidInput('revocation: a vc subject must be a credential id, not a DID or urn:oap: id');
  return subject;
}

async function verifyRecordSignature(body, what, lookup) {
  let raw;
  try { raw = b64decEither(body.signature, 'signature'); } catch (e) { throw new InvalidInput(`${what}: ${e.reason}`); }
  if (raw.length !== 64) throw new InvalidInput(`${what}: signature must be base64 of a 64-byte signature`);
  try {
    await verifySignedBy(body.issued_by, jcsBytes(without(body, 'signature')), raw, lookup);
  } catch (e) {
    if (e instanceof SignatureError) throw new InvalidInput(`${what}: signature by ${body.issued_by} does not verify`);
    if (isInvalid(e)) throw new e.constructor(`${what}: issued_by: ${e.reason}`);
    throw e;
  }
}

/** records.py check_record(body, now=None, lookup) -> {type, id, body, content, path, subject,
 * issuedBy, effectiveAt (µs), kind, expiresAt, key, level, witnesses}. Schema and signatures
 * (a conformance receipt as of its own issuing time); no time window. `lookup`: DID -> keys
 * for signers that are not did:key. */
export async function checkRecord(body, { lookup = null } = {}) {
  if (!isObj(body)) throw new InvalidInput('record must be an object');
  checkJsonValue(body);
  const rtype = Object.hasOwn(body, 'type') && !isVC(body) ? body.type : 'conformance';
  if (rtype === 'conformance') {
    const at = recordTime(claimsOf(body).issued_at ?? null, 'conformance receipt: issued_at');
    const c = await validateConformance(body, at, { lookup });
    return { type: 'conformance', id: c.id, body, content: jcsBytes(body), path: await recordPath('conformance', c.id),
      subject: c.subject, issuedBy: c.subject, effectiveAt: c.issuedAt, expiresAt: c.expiresAt, kind: null, key: null,
      level: c.level, witnesses: c.witnesses, form: c.form, audit: c.audit, signingKeys: c.signingKeys };
  }
  if (typeof rtype !== 'string' || !Object.hasOwn(FIELDS, rtype)) throw new InvalidInput(`type must be one of: ${RECORD_TYPES.join(', ')}`);
  const [req, opt] = FIELDS[rtype];
  const missing = pySorted(req.filter((k) => !Object.hasOwn(body, k)));
  if (missing.length) throw new InvalidInput(`${rtype}: missing field(s): ${missing.join(', ')}`);
  const unknown = pySorted(Object.keys(body).filter((k) => !req.includes(k) && !opt.includes(k)));
  if (unknown.length) throw new InvalidInput(`${rtype}: unknown field(s): ${unknown.join(', ')}`);
  const P = ID_PREFIXES[rtype], id = body.id;
  if (typeof id !== 'string' || !id.startsWith(P) || id.length === P.length || !URN.test(id))
    throw new InvalidInput(`${rtype}: id must be '${P}<id>' (printable ASCII, at most 248 characters)`);
  recordTime(body.issued_at, `${rtype}: issued_at`);
  const effectiveAt = recordTime(body.effective_at, `${rtype}: effective_at`);
  const issuedBy = did(body.issued_by, `${rtype}: issued_by`);
  let subject, kind = null, key = null;
  if (rtype === 'revocation') {
    kind = body.kind;
    if (!REVOCATION_KINDS.includes(kind)) throw new InvalidInput(`revocation: kind must be one of ${REVOCATION_KINDS.join(', ')}`);
    subject = revocationSubject(body, kind);
    if (!REASONS.includes(body.reason)) throw new InvalidInput(`revocation: reason must be one of ${pySorted(REASONS).join(', ')}`);
    if (kind === 'vc') {
      if (!Object.hasOwn(body, 'status_list_index')) throw new InvalidInput('revocation: a vc revocation needs status_list_index (W3C Bitstring Status List)');
      smallInt(Object.hasOwn(body, 'status_list') ? body.status_list : 0, 'revocation: status_list', MAX_STATUS_LISTS);
      smallInt(body.status_list_index, 'revocation: status_list_index', STATUS_LIST_BITS);
    } else if (Object.hasOwn(body, 'status_list') || Object.hasOwn(body, 'status_list_index')) {
      throw new InvalidInput('revocation: status_list fields belong to vc revocations only');
    }
  } else if (rtype === 'kill_switch') {
    subject = did(body.principal, 'kill_switch: principal');
    const reason = Object.hasOwn(body, 'reason') ? body.reason : '';
    if (typeof reason !== 'string' || [...reason].length > 256) throw new InvalidInput('kill_switch: reason must be a string of at most 256 characters');
  } else {
    subject = did(body.subject, 'key_event: subject');
    const event = body.event;
    if (!KEY_EVENTS.includes(event)) throw new InvalidInput(`key_event: event must be one of ${KEY_EVENTS.join(', ')}`);
    if (KEYED_EVENTS.includes(event)) {
      if (!Object.hasOwn(body, 'key')) throw new InvalidInput(`key_event: ${event} needs key (the DID that becomes a controller)`);
      key = did(body.key, 'key_event: key');
      if (key === subject) throw new InvalidInput('key_event: a subject is already its own controller');
    } else if (Object.hasOwn(body, 'key')) throw new InvalidInput(`key_event: ${event} concerns the subject alone and takes no key`);
    if (Object.hasOwn(body, 'reason') && (event !== 'suspend' || !REASONS.includes(body.reason)))
      throw new InvalidInput(`key_event: only suspend takes a reason, one of ${pySorted(REASONS).join(', ')}`);
  }
  await verifyRecordSignature(body, rtype, lookup);
  return { type: rtype, id, body, content: jcsBytes(body), path: await recordPath(rtype, id, kind), subject, issuedBy,
    effectiveAt, kind, expiresAt: null, key, level: null, witnesses: [] };
}

/** records.py vc_status_key: a credential's status id is scoped by its issuer. */
export const vcStatusKey = (vcId, issuer) => `vc ${issuer} ${vcId}`;

// --- Git objects (SHA-1, as Git names them) ------------------------------------------

export async function gitSha(kind, data) {
  const head = utf8(`${kind} ${data.length}\0`), all = new Uint8Array(head.length + data.length);
  all.set(head); all.set(data, head.length);
  return hex(new Uint8Array(await subtle().digest('SHA-1', all)));
}
const latin1 = (b) => String.fromCharCode(...b);

function treeEntries(raw, fail) {
  const out = new Map();
  let pos = 0;
  while (pos < raw.length) {
    const sp = raw.indexOf(0x20, pos), nul = sp < 0 ? -1 : raw.indexOf(0, sp + 1);
    if (sp < 0 || nul < 0 || nul + 21 > raw.length) throw fail('malformed Git tree object in the path proof');
    out.set(latin1(raw.subarray(sp + 1, nul)), [latin1(raw.subarray(pos, sp)), hex(raw.subarray(nul + 1, nul + 21))]);
    pos = nul + 21;
  }
  return out;
}

/** Walk Git tree objects from `tree` to the blob at `path`; the blob must be `content`.
 * `fail(msg)` makes the error to throw (statusverify.py _verify_git_path). */
export async function verifyGitPath(tree, path, rawTrees, content, fail) {
  const parts = latin1(utf8(path)).split('/');
  if (!Array.isArray(rawTrees) || rawTrees.length !== parts.length) throw fail('Git path proof has the wrong length');
  let expected = tree;
  for (let i = 0; i < parts.length; i++) {
    let raw;
    try { raw = b64dec(rawTrees[i], 'tree object'); } catch (e) { if (e instanceof FormatError) throw fail(e.reason); throw e; }
    if (await gitSha('tree', raw) !== expected) throw fail(`Git path proof: tree object ${i} does not hash to ${expected}`);
    const entry = treeEntries(raw, fail).get(parts[i]);
    if (!entry) throw fail(`Git path proof: ${parts[i]} is not in tree ${expected}`);
    let mode;
    [mode, expected] = entry;
    if (mode !== (i === parts.length - 1 ? '100644' : '40000')) throw fail(`Git path proof: ${parts[i]} has mode ${mode}`);
  }
  if (await gitSha('blob', content) !== expected) throw fail('Git path proof: the blob is not the record');
}
