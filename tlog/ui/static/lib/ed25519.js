// Ed25519 (RFC 8032) verification through WebCrypto, the only signature
// primitive the explorer needs besides the ECDSA note keys in note.js.
// Mirrors tlog/formats/ed25519.py: failure throws SignatureError, never a bool.
import { SignatureError } from './errors.js';
import { hex, subtle } from './b64.js';

const keys = new Map(); // hex(public) -> Promise<CryptoKey>: one import per key

function importKey(pub) {
  const k = hex(pub);
  let p = keys.get(k);
  if (!p) {
    p = subtle().importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
    if (keys.size > 256) keys.clear();
    keys.set(k, p);
  }
  return p;
}

// libsodium's extra rules (crypto_sign_verify_detached, as PyNaCl uses it), which
// WebCrypto (OpenSSL, BoringSSL) does not apply: without them the identity key with
// R = identity, S = 0 "verifies" every message in WebCrypto but not in Python.
// Small-order encodings, compared without the sign bit (ge25519_has_small_order):
const SMALL_ORDER = [
  '0000000000000000000000000000000000000000000000000000000000000000',
  '0100000000000000000000000000000000000000000000000000000000000000',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'];
const L = 2n ** 252n + 27742317777372353535851937790883648493n; // group order
const le = (b) => b.reduceRight((n, x) => (n << 8n) | BigInt(x), 0n);
function hasSmallOrder(p) {
  const h = hex(Uint8Array.from(p, (x, i) => (i === 31 ? x & 0x7f : x)));
  return SMALL_ORDER.includes(h);
}
function isCanonicalPoint(p) { // y < 2^255 - 19 (ge25519_is_canonical)
  return le(Uint8Array.from(p, (x, i) => (i === 31 ? x & 0x7f : x))) < 2n ** 255n - 19n;
}

/** Throws SignatureError unless `sig` is a valid Ed25519 signature of `msg` by `pub`,
 * with libsodium's rules: S < L, R and the key not of small order, key canonical. */
export async function ed25519Verify(pub, msg, sig) {
  if (!(pub instanceof Uint8Array) || pub.length !== 32 || !(sig instanceof Uint8Array) || sig.length !== 64)
    throw new SignatureError('malformed Ed25519 key or signature');
  if (le(sig.subarray(32)) >= L || hasSmallOrder(sig.subarray(0, 32)) || !isCanonicalPoint(pub) || hasSmallOrder(pub))
    throw new SignatureError('Ed25519 signature does not verify');
  const webcrypto = subtle(); // outside the try: a missing WebCrypto is not a bad signature
  let ok = false;
  try {
    ok = await webcrypto.verify({ name: 'Ed25519' }, await importKey(pub), sig, msg);
  } catch (e) {
    if (e && e.name === 'NotSupportedError') throw new Error('this browser has no WebCrypto Ed25519');
    ok = false; // a key WebCrypto refuses to import (not a curve point) verifies nothing
  }
  if (!ok) throw new SignatureError('Ed25519 signature does not verify');
}

/** True when this WebCrypto implementation supports Ed25519 at all. */
export async function ed25519Supported() {
  try {
    // c2sp.md V1: PeterNeumann's public key, a valid curve point.
    const pub = Uint8Array.from('1a5cd907143c384c41e830c5bce12aa8817ec5649aaabf2c31388b35b2d744d6'
      .match(/../g), (h) => parseInt(h, 16));
    await subtle().importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
    return true;
  } catch { return false; }
}
