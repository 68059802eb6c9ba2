// W3C Data Integrity proofs with the eddsa-jcs-2022 cryptosuite (W3C vc-di-eddsa v1.0 §3.3),
// mirroring tlog/formats/dataintegrity.py with the same checks and reasons:
//
//   hashData = SHA-256(JCS(proofConfig)) || SHA-256(JCS(unsecuredDocument))
//
// Ed25519 over hashData; `proofValue` is the 64-byte signature in multibase base58btc ("z...");
// `proofConfig` is the proof without `proofValue`. A proof set (`proof` a list) is allowed:
// every proof signs the document without any proof. Proof chains (`previousProof`) are refused.
// Keys come from lib/diddoc.js (did:key offline, other DIDs through a lookup).
import { InvalidInput, SignatureError, pyRepr, pySorted } from './errors.js';
import { concat } from './b64.js';
import { jcsBytes } from './jcs.js';
import { sha256 } from './merkle.js';
import { base58btcDecode, base58btcEncode } from './didkey.js';
import { ED25519_CURVE, splitDidUrl, verifySignedBy } from './diddoc.js';

export const CRYPTOSUITE = 'eddsa-jcs-2022', PROOF_TYPE = 'DataIntegrityProof', ASSERTION = 'assertionMethod';
export const MAX_PROOFS = 16;
const REQUIRED = ['type', 'cryptosuite', 'verificationMethod', 'proofPurpose', 'proofValue'];
const OPTIONAL = ['@context', 'id', 'created', 'expires'];
const XSD_DATETIME = /^-?[0-9]{4,}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$/;
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const without = (obj, key) => Object.fromEntries(Object.entries(obj).filter(([k]) => k !== key));

/** Equal as JSON values (Python's == on parsed JSON). */
export function sameJSON(a, b) {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameJSON(x, b[i]));
  if (isObj(a) && isObj(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && sameJSON(a[k], b[k]));
  }
  if ((typeof a === 'number' || typeof a === 'bigint') && (typeof b === 'number' || typeof b === 'bigint')) return a == b; // eslint-disable-line eqeqeq
  if (a && b && typeof a === 'object' && typeof b === 'object' && 'value' in a && 'value' in b) return a.value === b.value; // JSONFloat
  return false;
}

/** Multibase base58btc: "z" + base58 (Bitcoin alphabet). */
export const toMultibase = (bytes) => 'z' + base58btcEncode(bytes);

export function fromMultibase(text, what) {
  if (typeof text !== 'string' || !text.startsWith('z') || text.length > 256) throw new InvalidInput(`${what} must be multibase base58btc ('z...')`);
  let raw;
  try { raw = base58btcDecode(text.slice(1)); } catch { throw new InvalidInput(`${what} is not base58btc`); }
  if (toMultibase(raw) !== text) throw new InvalidInput(`${what} is not in canonical base58btc form`);
  return raw;
}

/** The verification method id of a did:key's one key: "did:key:z6Mk...#z6Mk...". */
export const didKeyMethod = (did) => `${did}#${did.slice('did:key:'.length)}`;

/** The proofs of a secured document: `proof` as one object or a list of 1 to 16 (a proof set). */
export function proofsOf(doc) {
  const proof = doc.proof;
  const proofs = Array.isArray(proof) ? proof : [proof];
  if (!proofs.length || proofs.length > MAX_PROOFS || !proofs.every(isObj))
    throw new InvalidInput(`proof must be a Data Integrity proof object or a list of 1 to ${MAX_PROOFS} of them`);
  return proofs;
}

function checkOptions(options, where) {
  if (options.type !== PROOF_TYPE || options.cryptosuite !== CRYPTOSUITE)
    throw new InvalidInput(`${where}: type must be ${pyRepr(PROOF_TYPE)} with cryptosuite ${pyRepr(CRYPTOSUITE)}`);
  const created = options.created;
  if (created !== undefined && created !== null && !(typeof created === 'string' && XSD_DATETIME.test(created)))
    throw new InvalidInput(`${where}: created must be an XML Schema dateTime with a time zone`);
}

/** vc-di-eddsa §3.3.4: SHA-256(JCS(proofConfig)) || SHA-256(JCS(unsecured)). */
export async function hashData(unsecured, proofConfig) {
  checkOptions(proofConfig, 'proof');
  return concat(await sha256(jcsBytes(proofConfig)), await sha256(jcsBytes(unsecured)));
}

function signerOf(vm, where) {
  if (typeof vm !== 'string' || vm.length > 512) throw new InvalidInput(`${where}: verificationMethod must be a DID URL`);
  const [did, fragment] = splitDidUrl(vm);
  if (did.startsWith('did:key:')) {
    if (fragment !== null && fragment !== did.slice('did:key:'.length)) throw new InvalidInput(`${where}: a did:key verification method is did:key:<key>#<key>`);
    return did;
  }
  if (fragment === null) throw new InvalidInput(`${where}: verificationMethod must name one key (a DID URL with a fragment)`);
  return vm;
}

/** vc-di-eddsa §3.3.2 Verify Proof of one proof of `secured` (which may hold a proof set):
 * the key that made it ({id, curve, public}), or InvalidInput / SignatureError saying why not.
 * `lookup`: DID -> keys for verification methods that are not did:key (lib/diddoc.js lookupFrom). */
export async function verifyProof(secured, proof, lookup = null, { where = 'proof', purpose = ASSERTION } = {}) {
  const missing = pySorted(REQUIRED.filter((k) => !Object.hasOwn(proof, k)));
  if (missing.length) throw new InvalidInput(`${where}: missing field(s): ${missing.join(', ')}`);
  if (Object.hasOwn(proof, 'previousProof')) throw new InvalidInput(`${where}: proof chains (previousProof) are not accepted`);
  const unknown = pySorted(Object.keys(proof).filter((k) => !REQUIRED.includes(k) && !OPTIONAL.includes(k)));
  if (unknown.length) throw new InvalidInput(`${where}: unknown field(s): ${unknown.join(', ')}`);
  checkOptions(proof, where);
  if (proof.proofPurpose !== purpose) throw new InvalidInput(`${where}: proofPurpose must be ${pyRepr(purpose)}`);
  const signature = fromMultibase(proof.proofValue, `${where}: proofValue`);
  if (signature.length !== 64) throw new InvalidInput(`${where}: proofValue must be a 64-byte Ed25519 signature`);
  const unsecured = without(secured, 'proof');
  const options = without(proof, 'proofValue');
  if (Object.hasOwn(options, '@context')) {
    const ctx = options['@context'], docCtx = Object.hasOwn(secured, '@context') ? secured['@context'] : null;
    const ctxList = Array.isArray(ctx) ? ctx : [ctx], docList = Array.isArray(docCtx) ? docCtx : [docCtx];
    if (!sameJSON(docList.slice(0, ctxList.length), ctxList))
      throw new SignatureError(`${where}: the document's @context does not start with the proof's @context`);
    unsecured['@context'] = ctx;
  }
  const key = await verifySignedBy(signerOf(proof.verificationMethod, where), await hashData(unsecured, options), signature, lookup);
  if (key.curve !== ED25519_CURVE)
    throw new InvalidInput(`${where}: ${CRYPTOSUITE} needs an Ed25519 key; ${proof.verificationMethod} is a ${key.curve} key`);
  return key;
}
