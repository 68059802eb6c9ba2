// Registry records as statusverify.py needs them (registry/records.py check_record
// with now=None, tlog/formats/conformance.py validate_conformance, registry/layout.py
// record_path) and the Git path proof of a record (statusverify.py _verify_git_path).
// Every record but a conformance receipt is signed by `issued_by` (Ed25519 did:key)
// over JCS(record without "signature"); a conformance receipt's signatures
// (self + witnesses) cover JCS(receipt without "signatures").
import { InvalidInput, FormatError, SignatureError } from './errors.js';
import { b64dec, utf8, hex, bytesEqual, subtle } from './b64.js';
import { jcsBytes, JSONFloat } from './jcs.js';
import { sha256 } from './merkle.js';
import { publicFromDidKey } from './didkey.js';
import { ed25519Verify } from './ed25519.js';
import { parseUtc } from './times.js';

export const MAX_CLOCK_SKEW_US = 5n * 60n * 1000000n;
const REVOCATION_KINDS = ['did', 'vc', 'key', 'conformance'];
const REASONS = ['unspecified', 'key_compromise', 'superseded', 'cessation_of_operation', 'privilege_withdrawn',
  'affiliation_changed', 'loss_of_key', 'policy_violation'];
export const KILL_SWITCH_CLASSES = ['subscription_tokens', 'oauth_grants', 'trust_tokens', 'webhook_subscriptions'];
const ID_PREFIXES = { revocation: 'urn:oap:revocation:', kill_switch: 'urn:oap:kill-switch:', key_event: 'urn:oap:key-event:', conformance: 'urn:oap:conformance:' };
const COMMON = ['type', 'id', 'effective_at', 'issued_at', 'issued_by', 'signature'];
const FIELDS = {
  revocation: [[...COMMON, 'kind', 'subject', 'reason'], ['status_list', 'status_list_index']],
  kill_switch: [[...COMMON, 'principal'], ['reason']],
  key_event: [[...COMMON, 'subject', 'event', 'key'], []],
};
const URN = /^urn:oap:[\x21-\x7e]{1,240}$/;
const DID = /^did:[a-z0-9]+:(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})+(?::(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})*)*$/;
const URI = /^[A-Za-z][A-Za-z0-9+.-]*:[\x21-\x7e]+$/;
const LEVELS = ['L0', 'L1', 'L2', 'L3', 'L4', 'L5', 'L1-NC', 'L3-NC'];

export { parseUtc, microsToDate, dateToMicros } from './times.js';

/** records.py _time: any refusal is worded "must be an RFC 3339 UTC time". */
function recordTime(value, where) {
  try { return parseUtc(value, where); } catch (e) {
    if (e instanceof InvalidInput) throw new InvalidInput(`${where} must be an RFC 3339 UTC time like 2026-01-02T03:04:05Z`);
    throw e;
  }
}
const without = (obj, key) => Object.fromEntries(Object.entries(obj).filter(([k]) => k !== key));
const isDid = (t) => typeof t === 'string' && t.length <= 256 && DID.test(t);
const isObj = (v) => v && typeof v === 'object' && !Array.isArray(v);

/** layout.py record_path: the one path of a record, sharded by SHA-256 of its id. */
export async function recordPath(rtype, id, kind) {
  const h = hex(await sha256(utf8(id))), shard = `${h.slice(0, 2)}/${h.slice(2, 4)}/${h}`;
  if (rtype === 'revocation') return `revocations/${kind}/${shard}.json`;
  return `${{ conformance: 'conformance', kill_switch: 'killswitch', key_event: 'keys' }[rtype]}/${shard}.json`;
}

function didKey(value, where) {
  try { publicFromDidKey(value); } catch (e) { throw new InvalidInput(`${where}: ${e.reason}`); }
  return value;
}
function b64sig(v, where) {
  let raw;
  try { raw = typeof v === 'string' ? b64dec(v, 'signature') : new Uint8Array(0); } catch (e) { throw new InvalidInput(`${where}: ${e.reason}`); }
  return raw;
}

/** canonical.py check_json_value's refusal of floats (records read with floats: 'wrap'). */
function checkNoFloats(v, path = '$') {
  if (v instanceof JSONFloat || (typeof v === 'number' && !Number.isInteger(v)))
    throw new InvalidInput(`${path}: floating-point numbers are not allowed`);
  if (Array.isArray(v)) v.forEach((x, i) => checkNoFloats(x, `${path}[${i}]`));
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) checkNoFloats(x, `${path}.${k}`);
}

/** conformance.py validate_conformance (schema, time window at `nowUs`, signatures). */
export async function validateConformance(r, nowUs) {
  const F = ['id', 'subject', 'level', 'profile', 'suite', 'results_digest', 'issued_at', 'expires_at', 'signatures'];
  if (!isObj(r)) throw new InvalidInput('conformance receipt must be an object');
  checkNoFloats(r);
  const missing = F.filter((k) => !(k in r)).sort(), unknown = Object.keys(r).filter((k) => !F.includes(k)).sort();
  if (missing.length) throw new InvalidInput(`conformance receipt: missing field(s): ${missing.join(', ')}`);
  if (unknown.length) throw new InvalidInput(`conformance receipt: unknown field(s): ${unknown.join(', ')}`);
  const P = ID_PREFIXES.conformance;
  if (typeof r.id !== 'string' || !r.id.startsWith(P) || r.id.length > 256 || r.id.length === P.length || !/^urn:oap:[\x21-\x7e]+$/.test(r.id))
    throw new InvalidInput(`conformance receipt: id must be '${P}<id>' (printable ASCII, at most 256 chars)`);
  let subjectKey;
  try { subjectKey = publicFromDidKey(r.subject); } catch (e) { throw new InvalidInput(`conformance receipt: subject: ${e.reason}`); }
  if (!LEVELS.includes(r.level)) throw new InvalidInput(`conformance receipt: level must be one of ${[...LEVELS].sort().join(', ')}`);
  if (typeof r.profile !== 'string' || !r.profile) throw new InvalidInput('conformance receipt: profile must be a non-empty string');
  const s = r.suite;
  if (!isObj(s) || Object.keys(s).sort().join() !== 'name,version' || !Object.values(s).every((v) => typeof v === 'string' && v))
    throw new InvalidInput('conformance receipt: suite must be {"name": <string>, "version": <string>}');
  if (typeof r.results_digest !== 'string' || !/^sha256:[0-9a-fA-F]{64}$/.test(r.results_digest))
    throw new InvalidInput("conformance receipt: results_digest must be 'sha256:' followed by 64 hex digits");
  const issued = parseUtc(r.issued_at, 'conformance receipt: issued_at'), expires = parseUtc(r.expires_at, 'conformance receipt: expires_at');
  if (expires <= issued) throw new InvalidInput('conformance receipt: expires_at must be after issued_at');
  if (expires - issued > 90n * 86400n * 1000000n) throw new InvalidInput('conformance receipt: validity period exceeds 90 days');
  if (issued > nowUs + MAX_CLOCK_SKEW_US) throw new InvalidInput('conformance receipt: issued_at is in the future');
  if (nowUs >= expires) throw new InvalidInput('conformance receipt: expired');
  if (!Array.isArray(r.signatures) || !r.signatures.length) throw new InvalidInput('conformance receipt: signatures must be a non-empty list');
  const message = jcsBytes(without(r, 'signatures'));
  let selfSigs = 0;
  const witnesses = [];
  for (const [i, sig] of r.signatures.entries()) {
    const where = `conformance receipt: signatures[${i}]`;
    if (!isObj(sig) || Object.keys(sig).sort().join() !== 'alg,by,value') throw new InvalidInput(`${where} must be {"by", "alg", "value"} exactly`);
    if (sig.alg !== 'EdDSA') throw new InvalidInput(`${where}: alg must be 'EdDSA'`);
    let key;
    try { key = sig.by === r.subject ? subjectKey : publicFromDidKey(sig.by); } catch (e) { throw new InvalidInput(`${where}: by: ${e.reason}`); }
    const value = b64sig(sig.value, where);
    if (value.length !== 64) throw new InvalidInput(`${where}: value must be base64 of a 64-byte Ed25519 signature`);
    try { await ed25519Verify(key, message, value); } catch (e) {
      if (!(e instanceof SignatureError)) throw e;
      throw new InvalidInput(`${where}: ${sig.by === r.subject ? 'self signature' : `witness signature by ${sig.by}`} does not verify`);
    }
    if (sig.by === r.subject) selfSigs++;
    else if (witnesses.includes(sig.by)) throw new InvalidInput(`${where}: duplicate witness ${sig.by}`);
    else witnesses.push(sig.by);
  }
  if (selfSigs !== 1) throw new InvalidInput(`conformance receipt: needs exactly one self signature by the subject, has ${selfSigs}`);
  return { id: r.id, subject: r.subject, level: r.level, issuedAt: issued, expiresAt: expires, witnesses };
}

/** records.py check_record(body, now=None) -> {type, id, body, content, path, subject, issuedBy,
 * effectiveAt (µs), kind, expiresAt}. Schema and signatures; no time window. */
export async function checkRecord(body) {
  if (!isObj(body)) throw new InvalidInput('record must be an object');
  checkNoFloats(body);
  const rtype = 'type' in body ? body.type : 'conformance';
  if (rtype === 'conformance') {
    const c = await validateConformance(body, parseUtc(body.issued_at, 'conformance receipt: issued_at'));
    return { type: 'conformance', id: c.id, body, content: jcsBytes(body), path: await recordPath('conformance', c.id),
      subject: c.subject, issuedBy: c.subject, effectiveAt: c.issuedAt, expiresAt: c.expiresAt, kind: null };
  }
  if (!Object.hasOwn(FIELDS, rtype)) throw new InvalidInput('type must be one of: conformance, revocation, kill_switch, key_event');
  const [req, opt] = FIELDS[rtype];
  const missing = req.filter((k) => !(k in body)).sort(), unknown = Object.keys(body).filter((k) => !req.includes(k) && !opt.includes(k)).sort();
  if (missing.length) throw new InvalidInput(`${rtype}: missing field(s): ${missing.join(', ')}`);
  if (unknown.length) throw new InvalidInput(`${rtype}: unknown field(s): ${unknown.join(', ')}`);
  const P = ID_PREFIXES[rtype], id = body.id;
  if (typeof id !== 'string' || !id.startsWith(P) || id.length === P.length || !URN.test(id))
    throw new InvalidInput(`${rtype}: id must be '${P}<id>' (printable ASCII, at most 248 characters)`);
  recordTime(body.issued_at, `${rtype}: issued_at`);
  const effectiveAt = recordTime(body.effective_at, `${rtype}: effective_at`);
  const issuedBy = didKey(body.issued_by, `${rtype}: issued_by`);
  let subject, kind = null;
  if (rtype === 'revocation') {
    kind = body.kind;
    if (!REVOCATION_KINDS.includes(kind)) throw new InvalidInput(`revocation: kind must be one of ${REVOCATION_KINDS.join(', ')}`);
    subject = body.subject;
    if (kind === 'key') didKey(subject, 'revocation: subject of a key revocation');
    else if (kind === 'did') { if (!isDid(subject)) throw new InvalidInput('revocation: subject of a did revocation must be a DID (did:<method>:<id>, at most 256 characters)'); }
    else if (kind === 'conformance') {
      if (typeof subject !== 'string' || !subject.startsWith(ID_PREFIXES.conformance) || !URN.test(subject))
        throw new InvalidInput("revocation: subject of a conformance revocation must be a 'urn:oap:conformance:' id");
    } else {
      if (typeof subject !== 'string' || subject.length > 512 || !URI.test(subject))
        throw new InvalidInput('revocation: subject of a vc revocation must be the credential id (a URI, at most 512 characters)');
      if (subject.startsWith('did:') || subject.startsWith('urn:oap:'))
        throw new InvalidInput('revocation: a vc subject must be a credential id, not a DID or urn:oap: id');
    }
    if (!REASONS.includes(body.reason)) throw new InvalidInput(`revocation: reason must be one of ${[...REASONS].sort().join(', ')}`);
    const small = (v, where, limit) => {
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= limit) throw new InvalidInput(`${where} must be an integer from 0 to ${limit - 1}`);
    };
    if (kind === 'vc') {
      if (!('status_list_index' in body)) throw new InvalidInput('revocation: a vc revocation needs status_list_index (W3C Bitstring Status List)');
      small(body.status_list ?? 0, 'revocation: status_list', 65536);
      small(body.status_list_index, 'revocation: status_list_index', 131072);
    } else if ('status_list' in body || 'status_list_index' in body) throw new InvalidInput('revocation: status_list fields belong to vc revocations only');
  } else if (rtype === 'kill_switch') {
    subject = body.principal;
    if (!isDid(subject)) throw new InvalidInput('kill_switch: principal must be a DID (did:<method>:<id>, at most 256 characters)');
    const reason = body.reason ?? '';
    if (typeof reason !== 'string' || reason.length > 256) throw new InvalidInput('kill_switch: reason must be a string of at most 256 characters');
  } else {
    subject = body.subject;
    if (!isDid(subject)) throw new InvalidInput('key_event: subject must be a DID (did:<method>:<id>, at most 256 characters)');
    if (!['add_controller', 'rotate'].includes(body.event)) throw new InvalidInput('key_event: event must be one of add_controller, rotate');
    didKey(body.key, 'key_event: key');
    if (body.key === subject) throw new InvalidInput('key_event: a subject is already its own controller');
  }
  const raw = b64sig(body.signature, rtype);
  if (raw.length !== 64) throw new InvalidInput(`${rtype}: signature must be base64 of a 64-byte Ed25519 signature`);
  try { await ed25519Verify(publicFromDidKey(issuedBy), jcsBytes(without(body, 'signature')), raw); } catch (e) {
    if (!(e instanceof SignatureError)) throw e;
    throw new InvalidInput(`${rtype}: signature by ${issuedBy} does not verify`);
  }
  return { type: rtype, id, body, content: jcsBytes(body), path: await recordPath(rtype, id, kind), subject, issuedBy,
    effectiveAt, kind, expiresAt: null };
}

/** The status ids a record revokes at (key, reason, time): statusverify.py _record_revokes. */
export function recordRevokes(rec, key, reason, revokedAtUs) {
  if (rec.type === 'revocation') {
    const want = rec.kind === 'vc' ? `vc ${rec.issuedBy} ${rec.subject}` : rec.subject;
    return key === want && reason === rec.body.reason && revokedAtUs === rec.effectiveAt;
  }
  if (rec.type === 'kill_switch')
    return KILL_SWITCH_CLASSES.some((c) => key === `${rec.subject}#${c}`) && reason === 'kill_switch' && revokedAtUs === rec.effectiveAt;
  if (rec.type === 'conformance') return key === rec.id && reason === 'expired' && revokedAtUs === rec.expiresAt;
  return false;
}

// --- Git objects (SHA-1, as Git names them) ------------------------------------------

async function gitSha(kind, data) {
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
    try { raw = b64dec(rawTrees[i], 'tree object'); } catch (e) { throw fail(e.reason); }
    if (await gitSha('tree', raw) !== expected) throw fail(`Git path proof: tree object ${i} does not hash to ${expected}`);
    const entry = treeEntries(raw, fail).get(parts[i]);
    if (!entry) throw fail(`Git path proof: ${parts[i]} is not in tree ${expected}`);
    let mode;
    [mode, expected] = entry;
    if (mode !== (i === parts.length - 1 ? '100644' : '40000')) throw fail(`Git path proof: ${parts[i]} has mode ${mode}`);
  }
  if (await gitSha('blob', content) !== expected) throw fail('Git path proof: the blob is not the record');
}
