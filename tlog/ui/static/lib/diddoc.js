// DID documents -> signing keys, and signatures by any DID, mirroring tlog/formats/diddoc.py
// (OAP-CORE-1.0 §5.1, W3C DID Core §5). Pure: the documents are given (kept in a log entry,
// stored by the registry beside a record, or pinned by the user); nothing is fetched.
//
// The keys of a document are those of `assertionMethod` when it lists any, else every
// verification method (did:plc documents list only those); references may be absolute DID
// URLs or relative ("#key-1"); methods of other key types are skipped. Key material:
// publicKeyMultibase (base58btc multicodec Ed25519 0xed01, P-256 0x8024, secp256k1 0xe701),
// publicKeyJwk (OKP Ed25519, EC P-256 / secp256k1), publicKeyBase58 of an
// Ed25519VerificationKey2018. ECDSA signatures are JOSE's 64-byte r||s over SHA-256.
//
// Ed25519 and ECDSA P-256 (ES256) are checked with WebCrypto; WebCrypto has no secp256k1,
// so ES256K is checked by the short ECDSA verifier below (public data only: it need not be
// constant time), against the same Python verdicts (tests/ui/test_differential.py).
import { InvalidInput, SignatureError } from './errors.js';
import { b64dec, concat, subtle } from './b64.js';
import { sha256 } from './merkle.js';
import { base58btcDecode, publicFromDidKey, parseSigner } from './didkey.js';
import { ed25519Verify } from './ed25519.js';
import { jcs } from './jcs.js';

export const ED25519_CURVE = 'Ed25519', P256_CURVE = 'P-256', SECP256K1_CURVE = 'secp256k1';
export const ALGS = { [ED25519_CURVE]: 'EdDSA', [P256_CURVE]: 'ES256', [SECP256K1_CURVE]: 'ES256K' };
export const MAX_KEYS = 32;
const MULTICODEC = [[0xed, 0x01, ED25519_CURVE, 32], [0x80, 0x24, P256_CURVE, 33], [0xe7, 0x01, SECP256K1_CURVE, 33]];
const DID = /^did:[a-z0-9]+:(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})+(?::(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})*)*$/;

export const isDid = (t) => typeof t === 'string' && t.length <= 256 && DID.test(t);
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** "did:web:a.example#key-1" -> [did, fragment or null] (diddoc.py split_did_url). */
export function splitDidUrl(text) {
  const i = text.indexOf('#');
  return i < 0 ? [text, null] : [text.slice(0, i), text.slice(i + 1)];
}

/** The DID to resolve for a signer: null for did:key, a raw "ed25519:" key, or no DID (diddoc.py needs_resolution). */
export function needsResolution(text) {
  if (typeof text !== 'string' || text.startsWith('did:key:z') || text.startsWith('ed25519:')) return null;
  const [did] = splitDidUrl(text);
  return isDid(did) && !did.startsWith('did:key:') ? did : null;
}

// --- curve points (the checks cryptography's from_encoded_point makes) -------------------------

const CURVES = {
  [P256_CURVE]: { p: 2n ** 256n - 2n ** 224n + 2n ** 192n + 2n ** 96n - 1n, a: -3n,
    b: 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn },
  [SECP256K1_CURVE]: { p: 2n ** 256n - 2n ** 32n - 977n, a: 0n, b: 7n },
};
const mod = (x, p) => ((x % p) + p) % p;
function powmod(b, e, p) {
  let r = 1n; b = mod(b, p);
  while (e > 0n) { if (e & 1n) r = (r * b) % p; b = (b * b) % p; e >>= 1n; }
  return r;
}
const toBig = (bytes) => bytes.reduce((n, x) => (n << 8n) | BigInt(x), 0n);
function toBytes32(n) {
  const out = new Uint8Array(32);
  for (let i = 31; i >= 0; i--) { out[i] = Number(n & 255n); n >>= 8n; }
  return out;
}

/** A compressed (33-byte) or uncompressed (65-byte) point of `curve` -> its uncompressed
 * form; null when it is not a point of the curve. */
export function uncompressedPoint(curve, point) {
  const { p, a, b } = CURVES[curve];
  const rhs = (x) => mod(x * x * x + a * x + b, p);
  if (point.length === 65 && point[0] === 4) {
    const x = toBig(point.subarray(1, 33)), y = toBig(point.subarray(33));
    return x < p && y < p && mod(y * y, p) === rhs(x) ? point : null;
  }
  if (point.length === 33 && (point[0] === 2 || point[0] === 3)) {
    const x = toBig(point.subarray(1));
    if (x >= p) return null;
    let y = powmod(rhs(x), (p + 1n) / 4n, p); // p = 3 (mod 4) for both curves
    if (mod(y * y, p) !== rhs(x)) return null;
    if ((y & 1n) !== BigInt(point[0] & 1)) y = p - y;
    return concat(Uint8Array.of(4), toBytes32(x), toBytes32(y));
  }
  return null;
}

// --- key material --------------------------------------------------------------------------------

function b64url(text) {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) return null;
  const std = text.replace(/-/g, '+').replace(/_/g, '/');
  try { return b64dec(std + '='.repeat((4 - (std.length % 4)) % 4), 'base64url'); } catch { return null; }
}

function material(m) {
  if ('publicKeyMultibase' in m) {
    const v = m.publicKeyMultibase;
    if (typeof v !== 'string' || !v.startsWith('z') || v.length > 128) return null;
    let raw;
    try { raw = base58btcDecode(v.slice(1)); } catch { return null; }
    for (const [c0, c1, curve, len] of MULTICODEC)
      if (raw[0] === c0 && raw[1] === c1 && raw.length === 2 + len) return [curve, raw.slice(2)];
    return null;
  }
  if ('publicKeyJwk' in m) {
    const jwk = m.publicKeyJwk;
    if (!isObj(jwk)) return null;
    if (jwk.kty === 'OKP' && jwk.crv === 'Ed25519') {
      const x = b64url(jwk.x);
      return x && x.length === 32 ? [ED25519_CURVE, x] : null;
    }
    if (jwk.kty === 'EC' && (jwk.crv === P256_CURVE || jwk.crv === SECP256K1_CURVE)) {
      const x = b64url(jwk.x), y = b64url(jwk.y);
      return x && y && x.length === 32 && y.length === 32 ? [jwk.crv, concat(Uint8Array.of(4), x, y)] : null;
    }
    return null;
  }
  if ('publicKeyBase58' in m && m.type === 'Ed25519VerificationKey2018') {
    let raw;
    try { raw = base58btcDecode(String(m.publicKeyBase58)); } catch { return null; }
    return raw.length === 32 ? [ED25519_CURVE, raw] : null;
  }
  return null;
}

/** [curve, public key] of one verification method (EC points uncompressed, so that equal keys
 * compare equal), or null when it holds no key of the three curves (diddoc.py key_material). */
export function keyMaterial(m) {
  if (!isObj(m)) return null;
  const got = material(m);
  if (!got) return null;
  const [curve, pub] = got;
  if (curve === ED25519_CURVE) return [curve, pub];
  const point = uncompressedPoint(curve, pub);
  return point ? [curve, point] : null;
}

/** The keys a DID document lists for signing claims -> [{id, curve, public}] (diddoc.py
 * keys_from_document); InvalidInput saying why when there is none. */
export function keysFromDocument(did, doc) {
  if (!isObj(doc)) throw new InvalidInput(`the DID document of ${did} is not a JSON object`);
  if (doc.id !== did) throw new InvalidInput(`the DID document served for ${did} names another DID`);
  const invalid = (why) => new InvalidInput(`the DID document of ${did} is not valid: ${why}`);
  const absolute = (ref) => (ref.startsWith('#') ? did + ref : ref);
  const vm = doc.verificationMethod;
  if (vm !== undefined && vm !== null && !Array.isArray(vm)) throw invalid('verificationMethod is not a list');
  const methods = Array.isArray(vm) ? vm : [];
  const byId = new Map();
  for (const m of methods) {
    if (!isObj(m) || typeof m.id !== 'string') throw invalid('a verification method has no id');
    const id = absolute(m.id), seen = byId.get(id);
    if (seen && jcs(seen) !== jcs(m)) throw invalid(`ID ${id} already found in Index and Items do not match`);
    byId.set(id, m);
  }
  const am = doc.assertionMethod;
  if (am !== undefined && am !== null && !Array.isArray(am)) throw invalid('assertionMethod is not a list');
  const refs = Array.isArray(am) && am.length ? am : methods;
  const keys = [];
  for (const ref of refs.slice(0, MAX_KEYS)) {
    let m;
    if (typeof ref === 'string') {
      m = byId.get(absolute(ref));
      if (!m) throw invalid(`ID ${absolute(ref)} not found in document`);
    } else if (isObj(ref)) m = ref;
    else throw invalid('a verification method is neither a DID URL nor an object');
    const id = typeof m.id === 'string' ? absolute(m.id) : '';
    const got = material(m);
    if (!got) continue;
    let [curve, pub] = got;
    if (curve !== ED25519_CURVE) {
      pub = uncompressedPoint(curve, pub);
      if (!pub) continue; // not a point of the curve
    }
    keys.push({ id, curve, public: pub });
  }
  if (!keys.length) throw new InvalidInput(`the DID document of ${did} lists no Ed25519, P-256 or secp256k1 signing key`);
  return keys;
}

/** The key of an Ed25519 did:key, as diddoc.py names it: {id: did#<multibase>, ...}. */
export function didKeyKeys(did) {
  return [{ id: `${did}#${did.slice('did:key:'.length)}`, curve: ED25519_CURVE, public: publicFromDidKey(did) }];
}

/** A signature this page has no code for (kept for verifiers that report such a case). */
export class NotCheckableHere extends Error {}

// --- ECDSA over secp256k1 (SEC 1 §4.1.4), for ES256K ---------------------------------------------

const K1 = { p: CURVES[SECP256K1_CURVE].p, n: 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n,
  gx: 0x79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798n,
  gy: 0x483ada7726a3c4655da4fbfc0e1108a8fd17b448a68554199c47d08ffb10d4b8n };

function k1Double([x, y, z]) { // Jacobian, a = 0
  const p = K1.p;
  if (y === 0n || z === 0n) return [0n, 1n, 0n];
  const yy = (y * y) % p, s = (4n * x * yy) % p, m = (3n * x * x) % p;
  const x3 = mod(m * m - 2n * s, p);
  return [x3, mod(m * (s - x3) - 8n * yy * yy, p), (2n * y * z) % p];
}
function k1Add(a, b) {
  const p = K1.p;
  if (a[2] === 0n) return b;
  if (b[2] === 0n) return a;
  const z1z1 = (a[2] * a[2]) % p, z2z2 = (b[2] * b[2]) % p;
  const u1 = (a[0] * z2z2) % p, u2 = (b[0] * z1z1) % p;
  const s1 = (a[1] * b[2] * z2z2) % p, s2 = (b[1] * a[2] * z1z1) % p;
  if (u1 === u2) return s1 === s2 ? k1Double(a) : [0n, 1n, 0n];
  const h = mod(u2 - u1, p), r = mod(s2 - s1, p), hh = (h * h) % p, hhh = (h * hh) % p, v = (u1 * hh) % p;
  const x3 = mod(r * r - hhh - 2n * v, p);
  return [x3, mod(r * (v - x3) - s1 * hhh, p), (h * a[2] * b[2]) % p];
}

/** SignatureError unless `sig` (r || s) by the uncompressed secp256k1 point `pub` covers SHA-256(`msg`). */
async function secp256k1Verify(pub, msg, sig) {
  const bad = () => new SignatureError('secp256k1 signature does not verify');
  const { p, n } = K1;
  const r = toBig(sig.subarray(0, 32)), s = toBig(sig.subarray(32, 64));
  if (r < 1n || r >= n || s < 1n || s >= n) throw bad();
  const e = toBig(await sha256(msg));
  const w = powmod(s, n - 2n, n), u1 = (e * w) % n, u2 = (r * w) % n;
  const g = [K1.gx, K1.gy, 1n], q = [toBig(pub.subarray(1, 33)), toBig(pub.subarray(33, 65)), 1n], gq = k1Add(g, q);
  let acc = [0n, 1n, 0n];
  for (let i = 255n; i >= 0n; i--) { // Shamir's trick: u1*G + u2*Q in one pass
    acc = k1Double(acc);
    const b1 = (u1 >> i) & 1n, b2 = (u2 >> i) & 1n;
    if (b1 && b2) acc = k1Add(acc, gq); else if (b1) acc = k1Add(acc, g); else if (b2) acc = k1Add(acc, q);
  }
  if (acc[2] === 0n) throw bad();
  const zinv = powmod(acc[2], p - 2n, p), x = (acc[0] * zinv * zinv) % p;
  if (x % n !== r) throw bad();
}

/** Throws SignatureError unless `sig` (64 bytes) by `key` covers `msg` (diddoc.py VerificationKey.verify). */
export async function verifyWithKey(key, msg, sig) {
  if (key.curve === ED25519_CURVE) return ed25519Verify(key.public, msg, sig);
  if (sig.length !== 64) throw new SignatureError('an ECDSA signature must be 64 bytes (r || s)');
  if (key.curve === SECP256K1_CURVE) return secp256k1Verify(key.public, msg, sig);
  const webcrypto = subtle();
  let ok = false;
  try {
    const k = await webcrypto.importKey('raw', key.public, { name: 'ECDSA', namedCurve: 'P-256' }, false, ['verify']);
    ok = await webcrypto.verify({ name: 'ECDSA', hash: 'SHA-256' }, k, sig, msg);
  } catch { ok = false; }
  if (!ok) throw new SignatureError('P-256 signature does not verify');
}

// --- signatures by any DID (diddoc.py signer_keys, verify_signed_by) ----------------------------

/** A lookup (DID -> keys) over documents: [[did, document], ...] (diddoc.py lookup_from);
 * InvalidInput for a document that is not the DID's or lists no key. */
export function lookupFrom(documents) {
  const table = new Map();
  for (const [did, doc] of documents) table.set(did, keysFromDocument(did, doc));
  return (did) => {
    if (!table.has(did)) throw new InvalidInput(`no pinned DID document for ${did}`);
    return table.get(did);
  };
}

/** The keys that may have made a signature attributed to `signer`: a did:key or "ed25519:"
 * key itself, or the keys `lookup` gives for its DID (only the one a DID URL's fragment names). */
export function signerKeys(signer, lookup) {
  const did = needsResolution(signer);
  if (did === null) {
    try { return [{ id: String(signer), curve: ED25519_CURVE, public: parseSigner(signer) }]; } catch (e) {
      if (e instanceof InvalidInput) throw new InvalidInput("signer must be a DID or 'ed25519:<base64 key>'");
      throw e;
    }
  }
  if (!lookup) throw new InvalidInput(`${did} must be resolved to check its signature, and no DID resolver or pinned DID document is configured here`);
  let keys = [...lookup(did)];
  const fragment = splitDidUrl(String(signer))[1];
  if (fragment !== null) {
    keys = keys.filter((k) => k.id === `${did}#${fragment}`);
    if (!keys.length) throw new InvalidInput(`the DID document of ${did} lists no signing key #${fragment}`);
  }
  return keys;
}

/** The key of `signer` that made `sig` over `message`; SignatureError when none did. */
export async function verifySignedBy(signer, message, sig, lookup) {
  for (const key of signerKeys(signer, lookup)) {
    try {
      await verifyWithKey(key, message, sig);
      return key;
    } catch (e) {
      if (!(e instanceof SignatureError)) throw e;
    }
  }
  throw new SignatureError(`signature does not verify for ${signer}`);
}
