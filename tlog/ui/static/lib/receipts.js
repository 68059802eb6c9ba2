// Every signature of an OAP receipt (OAP-CORE-1.0 §19.1) and of the log entry that anchors
// it, each with its own verdict, offline: the browser's twin of tlog/client/receipts.py,
// with the same checks, order, verdicts and reasons (tests/ui/test_differential.py).
//
// A receipt signature is {"by": DID or DID URL, "alg": "EdDSA" | "ES256" | "ES256K",
// "value": base64 or base64url of 64 bytes} over the receipt's RFC 8785 form without
// `signatures`. Keys: a did:key itself; another DID's from a document the user pinned, else
// from the DID document the log kept in the anchoring entry (when the entry's signer is that
// DID): a pinned document is the only one used for its DID. Each signature is "verified",
// "failed", "not_checkable" or "missing" (the agent's or the tool's, §19.1); a receipt that
// does not name its agent and its tool by their DIDs fails. The verdict is "ok" only when
// every signature was checked and verified; "failed" when any failed or is missing (or there
// are none); else "incomplete".
import { FormatError, InvalidInput, OAPError, SignatureError, pyRepr } from './errors.js';
import { b64decEither, unhex } from './b64.js';
import { jcsBytes, parseJSON, receiptHash } from './jcs.js';
import { decodeCBOR } from './cbor.js';
import { parseSigner } from './didkey.js';
import { ALGS, ED25519_CURVE, NotCheckableHere, didKeyKeys, isDid, keysFromDocument, needsResolution, splitDidUrl, verifyWithKey } from './diddoc.js';

export const VERIFIED = 'verified', FAILED = 'failed', NOT_CHECKABLE = 'not_checkable', MISSING = 'missing';
export const FROM_DID_KEY = 'did:key', FROM_ENTRY = 'anchored', FROM_PINNED = 'pinned';
const ROLES = [['agent', 'agent_did'], ['tool', 'tool_did'], ['principal', 'principal_did']];
const REQUIRED_ROLES = ['agent', 'tool'];
export const MAX_RECEIPT_SIGNATURES = 64;
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const parse = (v) => (typeof v === 'string' || v instanceof Uint8Array ? parseJSON(v, { floats: 'wrap' }) : v);

/** What each receipt signature covers: JCS of the receipt without `signatures` (entries.py receipt_signing_bytes). */
export function receiptSigningBytes(receipt) {
  const { signatures, ...rest } = receipt;
  return jcsBytes(rest);
}

export { b64decEither };

function check(status, reason, fields = {}) {
  const out = { status, reason };
  for (const k of ['by', 'index', 'alg', 'key', 'source']) if (fields[k] !== undefined && fields[k] !== null) out[k] = fields[k];
  if (fields.roles && fields.roles.length) out.roles = [...fields.roles];
  return out;
}

/** Overall verdict of signature checks: "ok", "failed" or "incomplete" (receipts.py verdict_of). */
export function verdictOf(checks) {
  if (checks.some((c) => c.status === FAILED || c.status === MISSING)) return 'failed';
  return checks.some((c) => c.status === NOT_CHECKABLE) ? 'incomplete' : 'ok';
}

function sources(did, anchored, pinned) {
  if (did.startsWith('did:key:')) {
    try { return [[[FROM_DID_KEY, didKeyKeys(did)]], []]; } catch { return [[], ['only Ed25519 did:key DIDs can be checked']]; }
  }
  const found = [], problems = [];
  for (const [source, docs] of pinned.has(did) ? [[FROM_PINNED, pinned]] : [[FROM_ENTRY, anchored]]) { // a pin wins over the log's copy
    if (!docs.has(did)) continue;
    try { found.push([source, keysFromDocument(did, docs.get(did))]); } catch (e) {
      if (!(e instanceof InvalidInput)) throw e;
      problems.push(`${source} document: ${e.reason}`);
    }
  }
  if (!found.length && !problems.length) problems.push(`no DID document of ${did} was anchored with the entry or pinned`);
  return [found, problems];
}

async function checkOne(i, sig, message, roles, anchored, pinned) {
  if (!isObj(sig) || Object.keys(sig).length !== 3 || !['by', 'alg', 'value'].every((k) => k in sig))
    return check(FAILED, 'a signature is {"by", "alg", "value"} exactly', { index: i });
  const { by, alg, value } = sig;
  if (typeof by !== 'string' || !isDid(splitDidUrl(by)[0])) return check(FAILED, 'by must be a DID or a DID URL', { index: i });
  const [did, fragment] = splitDidUrl(by);
  const base = { by, index: i, roles: roles.get(did) || [] };
  if (typeof alg !== 'string') return check(FAILED, 'alg must be a string', base);
  base.alg = alg;
  if (!Object.values(ALGS).includes(alg))
    return check(NOT_CHECKABLE, `alg ${pyRepr(alg)} is not one this verifier checks (EdDSA, ES256, ES256K)`, base);
  let raw;
  try { raw = b64decEither(value, 'value'); } catch (e) {
    if (e instanceof FormatError) return check(FAILED, 'value is not base64 or base64url', base);
    throw e;
  }
  if (raw.length !== 64) return check(FAILED, 'value must be base64 of a 64-byte signature', base);
  const [found, problems] = sources(did, anchored, pinned);
  if (!found.length) return check(NOT_CHECKABLE, problems.join('; '), base);
  const named = found.map(([src, keys]) => [src, keys.filter((k) => fragment === null || k.id === `${did}#${fragment}`)]);
  if (!named.some(([, keys]) => keys.length)) return check(FAILED, `the DID document of ${did} lists no signing key #${fragment}`, base);
  const fitting = named.map(([src, keys]) => [src, keys.filter((k) => ALGS[k.curve] === alg)]);
  if (!fitting.some(([, keys]) => keys.length)) return check(FAILED, `${did} has no ${alg} signing key${fragment ? ` #${fragment}` : ''}`, base);
  let notHere = null;
  for (const [src, keys] of fitting) {
    for (const key of keys) {
      try {
        await verifyWithKey(key, message, raw);
        return check(VERIFIED, `verified with ${key.id}`, { ...base, key: key.id, source: src });
      } catch (e) {
        if (e instanceof NotCheckableHere) { notHere = e.message; continue; }
        if (!(e instanceof SignatureError)) throw e;
      }
    }
  }
  if (notHere) return check(NOT_CHECKABLE, notHere, base);
  return check(FAILED, `does not verify with the ${alg} key(s) of ${did}`, base);
}

function documentsMap(documents) {
  const pinned = new Map();
  for (const d of documents || []) {
    const doc = parse(d);
    if (isObj(doc) && typeof doc.id === 'string') pinned.set(doc.id, doc);
  }
  return pinned;
}

function entryObject(entry) {
  if (entry === null || entry === undefined) return null;
  if (entry instanceof Uint8Array) {
    try { return decodeCBOR(entry).value; } catch { return null; }
  }
  return isObj(entry) ? entry : null;
}

/** The DID document a stored entry keeps for its signer, as a Map did -> document (empty when none). */
export function entryDocuments(entry) {
  const obj = entryObject(entry);
  const out = new Map();
  if (!isObj(obj)) return out;
  const did = needsResolution(obj.signer);
  if (did !== null && 'did_document' in obj) out.set(did, obj.did_document);
  return out;
}

/** Verify every signature of a receipt (object or JSON text), offline.
 * options.documents: pinned DID documents (objects or JSON text); options.entry: the anchoring
 * entry (its stored bytes or decoded object), whose kept DID document serves its signer.
 * -> {receipt_hash: "sha256:<hex>", verdict, signatures: [{status, reason, by?, index?, roles?, alg?, key?, source?}]} */
export async function verifyReceiptSignatures(receipt, { documents = [], entry = null } = {}) {
  receipt = parse(receipt);
  const rh = await receiptHash(receipt); // InvalidInput for a non-object or a value without a JCS form
  const anchored = entryDocuments(entry), pinned = documentsMap(documents);
  const roles = new Map();
  for (const [role, name] of ROLES) {
    const v = receipt[name];
    if (typeof v === 'string' && isDid(v)) roles.set(v, [...(roles.get(v) || []), role]);
  }
  const done = (checks) => ({ receipt_hash: rh.text, verdict: verdictOf(checks), signatures: checks });
  const sigs = receipt.signatures;
  if (!Array.isArray(sigs) || !sigs.length)
    return done([check(FAILED, 'the receipt carries no signatures (OAP-CORE-1.0 §19.1: receipts are signed by the agent and the tool)')]);
  if (sigs.length > MAX_RECEIPT_SIGNATURES) return done([check(FAILED, `more than ${MAX_RECEIPT_SIGNATURES} signatures`)]);
  const message = receiptSigningBytes(receipt);
  const checks = [];
  for (let i = 0; i < sigs.length; i++) checks.push(await checkOne(i, sigs[i], message, roles, anchored, pinned));
  const signedBy = new Set(sigs.filter((s) => isObj(s) && typeof s.by === 'string').map((s) => splitDidUrl(s.by)[0]));
  for (const [role, name] of ROLES) {
    const did = receipt[name];
    if (!REQUIRED_ROLES.includes(role)) continue;
    if (!Object.prototype.hasOwnProperty.call(receipt, name))
      checks.push(check(FAILED, `the receipt names no ${role} (${name}; OAP-CORE-1.0 §19.1: it names its agent and its tool, and both sign it)`, { roles: [role] }));
    else if (typeof did !== 'string' || !isDid(did))
      checks.push(check(FAILED, `${name} is not a DID (OAP-CORE-1.0 §19.1: the agent and the tool are named by their DIDs, and both sign)`, { roles: [role] }));
    else if (!signedBy.has(did))
      checks.push(check(MISSING, `no signature by the ${role} ${did} (OAP-CORE-1.0 §19.1)`, { by: did, roles: roles.get(did) || [role] }));
  }
  return done(checks);
}

/** The verdict on a stored entry's own signature (receipt and registry entries), like
 * receipts.py verify_entry_signature: a did:key offline; another DID with a pinned DID
 * document (then the only one used), else the one the entry keeps. `entry`: stored bytes or the decoded object. null for other
 * entry types and non-entries. The shape of the entry is the log's to check; this checks who signed. */
export async function verifyEntrySignature(entry, { documents = [] } = {}) {
  const obj = entryObject(entry);
  if (!isObj(obj) || (obj.type !== 'receipt' && obj.type !== 'registry')) return null;
  const kind = obj.type, signer = obj.signer;
  const by = typeof signer === 'string' ? signer : null;
  const did = needsResolution(signer);
  const pinned = documentsMap(documents);
  let source = FROM_DID_KEY, keys = null, doc = null;
  if (did !== null) {
    if (pinned.has(did)) { source = FROM_PINNED; doc = pinned.get(did); } else if ('did_document' in obj) { source = FROM_ENTRY; doc = obj.did_document; } else {
      return check(NOT_CHECKABLE, `the entry keeps no DID document of ${did} (it predates that) and none is pinned`, { by });
    }
    if (source === FROM_PINNED) {
      try { keys = keysFromDocument(did, doc); } catch (e) {
        if (e instanceof InvalidInput) return check(NOT_CHECKABLE, `pinned document: ${e.reason}`, { by });
        throw e;
      }
    }
  }
  try {
    if (source === FROM_ENTRY) keys = keysFromDocument(did, doc); // an invalid kept document fails the entry
    if (typeof obj.signature !== 'string') throw new InvalidInput(`${kind} entry: signature must be a base64 string`);
    let sig;
    try { sig = b64decEither(obj.signature, 'signature'); } catch (e) { throw new InvalidInput(`${kind} entry: ${e.reason}`); }
    if (sig.length !== 64) throw new InvalidInput(`${kind} entry: signature must be base64 of 64 bytes`);
    if (did === null) {
      try { keys = [{ id: by, curve: ED25519_CURVE, public: parseSigner(signer) }]; } catch { throw new InvalidInput(`${kind} entry: signer: signer must be a DID or 'ed25519:<base64 key>'`); }
    } else {
      const fragment = splitDidUrl(signer)[1];
      if (fragment !== null) {
        keys = keys.filter((k) => k.id === `${did}#${fragment}`);
        if (!keys.length) throw new InvalidInput(`${kind} entry: signer: the DID document of ${did} lists no signing key #${fragment}`);
      }
    }
    let message;
    if (kind === 'receipt') {
      if (typeof obj.receipt_hash !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(obj.receipt_hash))
        throw new InvalidInput("receipt entry: receipt_hash must be 'sha256:' followed by 64 hex digits");
      message = unhex(obj.receipt_hash.slice(7));
    } else {
      const { signature, did_document: kept, ...unsigned } = obj;
      message = jcsBytes(unsigned);
    }
    let notHere = null;
    for (const key of keys) {
      try {
        await verifyWithKey(key, message, sig);
      } catch (e) {
        if (e instanceof NotCheckableHere) { notHere = e.message; continue; }
        if (!(e instanceof SignatureError)) throw e;
        continue;
      }
      if (did === null && 'did_document' in obj)
        throw new InvalidInput(`${kind} entry: did_document is only for signers named by a DID other than did:key`);
      return check(VERIFIED, 'verified', { by, source });
    }
    if (notHere) return check(NOT_CHECKABLE, notHere, { by, source });
    throw new InvalidInput(`${kind} entry: signature does not verify for signer`);
  } catch (e) {
    if (e instanceof OAPError) return check(FAILED, e.reason, { by, source });
    throw e;
  }
}
